#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `loom-bert serve` on the CPU build, as a client meets it (/tmp/serve/API.md is the contract), one CTest test per
# case:   serve_cases.sh CASE LOOM_BERT WORKDIR
#   api        classify (texts, pairs), embed, /v1/models, KServe v2 health/ready/metadata/config/infer (JSON and
#              binary): each text alone = inside a mixed-length batch = `loom-bert predict`; /metrics after traffic
#   bad_input  malformed JSON, wrong types, missing/empty fields, invalid UTF-8, limits (texts, chars, body bytes),
#              unknown model/path, wrong method: each its status and a JSON error naming the field; then a good
#              request still succeeds
#   load       scripts/serve/load_test.py: 10000 requests (SERVE_LOAD_REQUESTS) at concurrency 64 and at 256 on
#              --runners 2, no failure,
#              every answer equal to the one recorded at concurrency 1
#   drain      SIGTERM under load: exit 0; every request sent before the signal answered 200 (in-flight ones too;
#              one sent in the last 50 ms may be refused with 503 instead, unread when draining began)
#   triton     scripts/serve/check_tritonclient.py with tritonclient[http] (scripts/get_tritonclient.sh; exit 77,
#              skipped, without it)
# The model is the tiny_a fixture (tests/fixtures/bert/tiny_a: a BertForSequenceClassification checkpoint with its
# classifier head, 3 labels, 64 positions): no training needed, predictions are deterministic on the CPU.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fail() {
  echo "serve_cases ${CASE:-}: FAIL: $*" >&2
  exit 1
}
[ $# = 3 ] || fail "usage: serve_cases.sh api|bad_input|load|drain|triton LOOM_BERT WORKDIR"
CASE=$1
LOOM_BERT=$(realpath "$2")
W=$3
MODEL=$ROOT/tests/fixtures/bert/tiny_a
LOAD=$ROOT/scripts/serve/load_test.py
# shellcheck source=../../scripts/serve/term.sh
source "$ROOT/scripts/serve/term.sh"
rm -rf "$W"
mkdir -p "$W"
command -v curl >/dev/null || fail "curl is missing"

say() { echo "serve_cases $CASE: $*"; }

SERVER_PID=
# Whatever happens, the server this script started does not outlive it.
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT

# start_server NAME FLAGS...: loom-bert serve on a free port of 127.0.0.1 (stdout/stderr in W/NAME.out/.err);
# sets SERVER_PID, PORT, URL once its "listening on" line is out.
start_server() {
  local name=$1
  shift
  # SERVE_DEVICE_ARGS: where the server runs (the GPU machine runs these cases with "--device cuda").
  local device
  read -ra device <<<"${SERVE_DEVICE_ARGS:---device cpu}"
  "$LOOM_BERT" serve --model "$MODEL" --host 127.0.0.1 --port 0 "${device[@]}" --max-seq-len 64 "$@" \
    >"$W/$name.out" 2>"$W/$name.err" &
  SERVER_PID=$!
  local line
  for _ in $(seq 600); do
    line=$(grep -Eo 'listening on http://127\.0\.0\.1:[0-9]+' "$W/$name.out" 2>/dev/null | head -n 1 || true)
    [ -n "$line" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || fail "loom-bert serve $* exited before listening: $(cat "$W/$name.err")"
    sleep 0.1
  done
  [ -n "$line" ] || fail "loom-bert serve $* printed no 'listening on' line in 60 s: $(cat "$W/$name.out")"
  grep -q '(models: tiny_a)' "$W/$name.out" || fail "the listening line does not name the model: $(cat "$W/$name.out")"
  PORT=${line##*:}
  URL=http://127.0.0.1:$PORT
  say "server $name listening on $URL (pid $SERVER_PID)"
}

# stop_server [SECONDS]: SIGTERM; the server must exit 0 within SECONDS (default 30).
stop_server() {
  local limit=${1:-30} rc
  term_and_wait "$SERVER_PID" "$limit" || fail "the server did not exit within $limit s of SIGTERM"
  rc=$TERM_RC
  SERVER_PID=
  [ $rc = 0 ] || fail "the server exited $rc after SIGTERM, expected 0: $(tail -n 5 "$W"/*.err)"
  say "server stopped by SIGTERM, exit 0"
}

# req METHOD PATH [BODY_FILE [CONTENT_TYPE]]: one request with curl; sets STATUS, BODY (also in W/body).
# "Expect:" keeps curl from sending Expect: 100-continue on bodies over 1 KiB (checked once on its own in api).
req() {
  local method=$1 path=$2 data=${3:-} type=${4:-application/json}
  local args=(-sS -o "$W/body" -w '%{http_code}' -X "$method" -H 'Expect:' --max-time 60)
  [ -n "$data" ] && args+=(-H "Content-Type: $type" --data-binary "@$data")
  STATUS=$(curl "${args[@]}" "$URL$path") || fail "curl $method $path: no answer (status '$STATUS')"
  BODY=$(cat "$W/body")
}

# expect STATUS METHOD PATH [BODY_FILE]: the request gets STATUS.
expect() {
  local want=$1
  shift
  req "$@"
  [ "$STATUS" = "$want" ] || fail "$1 $2: status $STATUS, expected $want; body: $BODY"
}

# body TEXT: W/req.json holding TEXT; prints the file's name.
body() {
  printf '%s' "$1" >"$W/req.json"
  echo "$W/req.json"
}

# py CHECK ARGS...: a check of W/body's JSON in python3 (serve_check.py below); it prints why it fails.
py() {
  python3 "$W/serve_check.py" "$@" || fail "$1 $(printf '%q ' "${@:2}"): see above; body: $(head -c 2000 "$W/body")"
}

cat >"$W/serve_check.py" <<'PY'
# The JSON checks of serve_cases.sh: python3 serve_check.py CHECK ARGS; exit 1 with the reason on mismatch.
import json, math, os, sys
W = os.path.dirname(os.path.abspath(__file__))
TOL = 1e-5


def load(path=os.path.join(W, "body")):
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return json.loads(raw)
    except ValueError as e:
        sys.exit(f"not JSON ({e}): {raw[:500]!r}")


def close(a, b, tol=TOL):
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))


def same_result(tag, got, ref, tol=TOL):
    if got["label_id"] != ref["label_id"] or not close(got["probs"], ref["probs"], tol):
        sys.exit(f"{tag}: label_id {got['label_id']} probs {got['probs']} vs {ref['label_id']} {ref['probs']}")


def check_results(j, n, labels):
    """A /v1 classify answer of n results, each well formed."""
    res = j.get("results")
    if j.get("model") != "tiny_a" or not isinstance(res, list) or len(res) != n:
        sys.exit(f"expected model tiny_a and {n} results")
    for k, r in enumerate(res):
        p = r.get("probs")
        if not isinstance(p, list) or len(p) != len(labels) or abs(sum(p) - 1) > 1e-4:
            sys.exit(f"results[{k}]: probs {p} are not {len(labels)} probabilities")
        best = max(range(len(p)), key=lambda c: p[c])
        if r.get("label_id") != best or r.get("label") != labels[best] or abs(r.get("score", -1) - p[best]) > 1e-6:
            sys.exit(f"results[{k}]: label_id/label/score {r} disagree with probs (labels {labels})")
    return res


def main():
    what, args = sys.argv[1], sys.argv[2:]
    labels = ["class_0", "class_1", "class_2"]
    if what == "error":  # error SUBSTRING...: {"error": "..."} naming each SUBSTRING
        j = load()
        msg = j.get("error") if isinstance(j, dict) else None
        if not isinstance(msg, str) or not msg:
            sys.exit("no {\"error\": \"...\"} in the body")
        for s in args:
            if s.lower() not in msg.lower():
                sys.exit(f"the error {msg!r} does not name {s!r}")
    elif what == "models":
        j = load()
        m = j.get("models")
        if not isinstance(m, list) or len(m) != 1:
            sys.exit("one model expected")
        m = m[0]
        want = {"name": "tiny_a", "default": True, "labels": labels, "classify": True, "max_seq_len": 64}
        for k, v in want.items():
            if m.get(k) != v:
                sys.exit(f"models[0].{k} = {m.get(k)!r}, expected {v!r}")
    elif what == "save":  # save NAME N: a classify answer of N results, kept as W/NAME.json
        n = int(args[1])
        check_results(load(), n, labels)
        os.replace(os.path.join(W, "body"), os.path.join(W, args[0] + ".json"))
    elif what == "alone_vs_batch":  # the answers alone_K.json (one text each) equal batch.json's results
        batch = load(os.path.join(W, "batch.json"))["results"]
        for k, r in enumerate(batch):
            alone = load(os.path.join(W, f"alone_{k}.json"))["results"][0]
            same_result(f"text {k} alone vs in the batch", alone, r)
    elif what == "vs_predict":  # vs_predict ANSWER PREDICT_JSONL: the answer's results equal loom-bert predict's
        res = load(os.path.join(W, args[0]))["results"]
        lines = [json.loads(l) for l in open(args[1], encoding="utf-8")]
        if len(lines) != len(res):
            sys.exit(f"{len(res)} results vs {len(lines)} predict lines")
        for k, (r, p) in enumerate(zip(res, lines)):
            same_result(f"row {k}: serve vs predict", r, p)
            if r["label"] != p["label"]:
                sys.exit(f"row {k}: label {r['label']} vs predict's {p['label']}")
    elif what == "embed":  # embed N REFERENCE_JSONL: N embeddings equal to loom-bert embed's
        j = load()
        ref = [json.loads(l)["embedding"] for l in open(args[1], encoding="utf-8")]
        e = j.get("embeddings")
        if j.get("model") != "tiny_a" or j.get("dim") != 64 or not isinstance(e, list) or len(e) != int(args[0]):
            sys.exit(f"expected model tiny_a, dim 64 and {args[0]} embeddings")
        for k, (a, b) in enumerate(zip(e, ref)):
            if not close(a, b, 1e-4):
                sys.exit(f"embedding {k} differs from loom-bert embed: {a[:4]}... vs {b[:4]}...")
    elif what == "server_meta":
        j = load()
        if "binary_tensor_data" not in j.get("extensions", []) or not j.get("name"):
            sys.exit("GET /v2: name and extensions [binary_tensor_data] expected")
    elif what == "model_meta":
        j = load()
        ins = {i["name"]: i for i in j.get("inputs", [])}
        outs = {o["name"]: o for o in j.get("outputs", [])}
        if j.get("name") != "tiny_a" or "1" not in j.get("versions", []):
            sys.exit("name tiny_a and versions [\"1\"] expected")
        if ins.get("TEXT", {}).get("datatype") != "BYTES" or ins["TEXT"].get("shape") != [-1]:
            sys.exit("input TEXT BYTES [-1] expected")
        if outs.get("probs", {}).get("shape") != [-1, 3] or outs["probs"].get("datatype") != "FP32":
            sys.exit("output probs FP32 [-1, 3] expected")
        if outs.get("label_id", {}).get("datatype") != "INT64" or outs.get("logits", {}).get("shape") != [-1, 3]:
            sys.exit("outputs label_id INT64 and logits FP32 [-1, 3] expected")
    elif what == "model_config":
        j = load()
        if j.get("name") != "tiny_a" or not isinstance(j.get("max_batch_size"), int):
            sys.exit("name and max_batch_size expected")
    elif what == "v2_infer":  # v2_infer REFERENCE ID OUTPUTS: a JSON answer equal to REFERENCE.json's results
        j = load()
        ref = load(os.path.join(W, args[0] + ".json"))["results"]
        want = args[2].split(",")
        if j.get("id") != args[1] or j.get("model_name") != "tiny_a":
            sys.exit(f"id {args[1]!r} and model_name tiny_a expected")
        outs = {o["name"]: o for o in j.get("outputs", [])}
        if sorted(outs) != sorted(want):
            sys.exit(f"outputs {sorted(outs)}, expected {sorted(want)}")
        n = len(ref)
        if "probs" in outs:
            o = outs["probs"]
            if o.get("datatype") != "FP32" or o.get("shape") != [n, 3] or len(o.get("data", [])) != 3 * n:
                sys.exit(f"probs: FP32 [{n}, 3] with {3 * n} flat values expected")
            for k in range(n):
                same_result(f"v2 row {k}", {"label_id": ref[k]["label_id"], "probs": o["data"][3 * k:3 * k + 3]},
                            ref[k])
        if "label_id" in outs:
            o = outs["label_id"]
            if o.get("datatype") != "INT64" or o.get("shape") != [n] or o.get("data") != [r["label_id"] for r in ref]:
                sys.exit(f"label_id: INT64 [{n}] equal to /v1's labels expected")
    elif what == "metrics":
        text = open(os.path.join(W, "body"), encoding="utf-8").read()
        for name in ("loom_requests_total{", "loom_batch_size_bucket{", "loom_request_latency_seconds_bucket{"):
            if name not in text:
                sys.exit(f"/metrics has no {name}")
        total = sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith("loom_requests_total{"))
        if total < float(args[0]):
            sys.exit(f"loom_requests_total sums to {total}, expected at least {args[0]}")
    else:
        sys.exit(f"unknown check {what}")


main()
PY

# The texts of the api case: mixed lengths (one word to over 64 tokens: truncated as predict truncates), and
# non-ASCII (accents, CJK, an emoji: JSON escapes and raw UTF-8 alike).
make_texts() {
  python3 - "$W" "$ROOT/data/sst2-sample/dev.tsv" <<'PY'
import json, sys
w, dev = sys.argv[1], sys.argv[2]
rows = [l.rstrip("\n").split("\t")[0].strip() for l in open(dev, encoding="utf-8")][1:]
texts = [rows[0], "bleak", rows[2], "caf\u00e9 cr\u00e8me br\u00fbl\u00e9e , tr\u00e8s bien", rows[5],
         "\u4f60\u597d \u4e16\u754c great \U0001F600", " ".join(rows[10:16]), "ok"]
pairs = [[texts[0], texts[1]], [texts[2], "a second text"], ["short", texts[6]]]
json.dump(texts, open(f"{w}/texts.json", "w"))
with open(f"{w}/texts.jsonl", "w", encoding="utf-8") as f:
    for t in texts:
        f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
with open(f"{w}/pairs.jsonl", "w", encoding="utf-8") as f:
    for a, b in pairs:
        f.write(json.dumps({"text": a, "text_b": b}, ensure_ascii=False) + "\n")
json.dump({"texts": texts}, open(f"{w}/batch_req.json", "w"), ensure_ascii=False)
json.dump({"pairs": pairs}, open(f"{w}/pairs_req.json", "w"))
for k, t in enumerate(texts):
    json.dump({"texts": [t]}, open(f"{w}/alone_req_{k}.json", "w"))
json.dump({"texts": texts[:3]}, open(f"{w}/embed_req.json", "w"))
json.dump({"texts": texts[:3], "pooling": "cls"}, open(f"{w}/embed_cls_req.json", "w"))
with open(f"{w}/embed.jsonl", "w", encoding="utf-8") as f:
    for t in texts[:3]:
        f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
v2 = {"id": "req-1", "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)], "data": texts}]}
json.dump(v2, open(f"{w}/v2_all.json", "w"))
v2["inputs"][0]["shape"] = [len(texts), 1]
v2["outputs"] = [{"name": "label_id"}]
v2["id"] = "req-2"
json.dump(v2, open(f"{w}/v2_col.json", "w"))
print(len(texts))
PY
}

# v2_binary N: KServe infer with TEXT as binary tensor data and every output binary; decoded and compared with
# W/batch.json (the same texts through /v1/classify).
v2_binary() {
  python3 - "$PORT" "$W" <<'PY' || fail "KServe binary infer: see above"
import http.client, json, struct, sys
port, w = int(sys.argv[1]), sys.argv[2]
texts = json.load(open(f"{w}/texts.json"))
blob = b"".join(struct.pack("<I", len(b)) + b for b in (t.encode() for t in texts))
head = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)],
                               "parameters": {"binary_data_size": len(blob)}}],
                   "parameters": {"binary_data_output": True}}).encode()
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
c.request("POST", "/v2/models/tiny_a/infer", body=head + blob,
          headers={"Inference-Header-Content-Length": str(len(head))})
r = c.getresponse()
body = r.read()
hl = r.getheader("Inference-Header-Content-Length")
if r.status != 200 or hl is None:
    sys.exit(f"status {r.status}, Inference-Header-Content-Length {hl}: {body[:500]!r}")
j = json.loads(body[:int(hl)])
data, off, got = body[int(hl):], 0, {}
for o in j["outputs"]:
    size = o.get("parameters", {}).get("binary_data_size")
    if size is None or "data" in o:
        sys.exit(f"output {o['name']} is not binary: {o}")
    fmt = {"FP32": "f", "INT64": "q"}[o["datatype"]]
    n = size // struct.calcsize(fmt)
    got[o["name"]] = (o["shape"], list(struct.unpack_from(f"<{n}{fmt}", data, off)))
    off += size
if off != len(data):
    sys.exit(f"binary sizes add up to {off}, the body has {len(data)} bytes after the JSON")
ref = json.load(open(f"{w}/batch.json"))["results"]
n = len(ref)
if got["probs"][0] != [n, 3] or got["label_id"][0] != [n] or got["logits"][0] != [n, 3]:
    sys.exit(f"shapes {[(k, v[0]) for k, v in got.items()]}")
for k in range(n):
    p = got["probs"][1][3 * k:3 * k + 3]
    if got["label_id"][1][k] != ref[k]["label_id"] or max(abs(a - b) for a, b in zip(p, ref[k]["probs"])) > 1e-5:
        sys.exit(f"row {k}: binary {got['label_id'][1][k]} {p} vs /v1 {ref[k]}")
print("binary KServe infer agrees with /v1/classify")
PY
}

case_api() {
  start_server api
  local n k
  n=$(make_texts)
  say "GET /v1/models"
  expect 200 GET /v1/models
  py models
  say "each of $n texts alone, then all in one batch of mixed lengths"
  for k in $(seq 0 $((n - 1))); do
    expect 200 POST /v1/classify "$W/alone_req_$k.json"
    py save "alone_$k" 1
  done
  expect 200 POST /v1/classify "$W/batch_req.json"
  py save batch "$n"
  py alone_vs_batch
  say "the same through /v1/models/tiny_a/classify"
  expect 200 POST /v1/models/tiny_a/classify "$W/batch_req.json"
  py save batch_named "$n"
  say "loom-bert predict on the same texts"
  "$LOOM_BERT" predict --model "$MODEL" --input "$W/texts.jsonl" --max-seq-len 64 >"$W/predict.jsonl" \
    2>"$W/predict.err" || fail "loom-bert predict: $(cat "$W/predict.err")"
  py vs_predict batch.json "$W/predict.jsonl"
  py vs_predict batch_named.json "$W/predict.jsonl"
  say "pairs vs loom-bert predict --text-b-column"
  expect 200 POST /v1/classify "$W/pairs_req.json"
  py save pairs 3
  "$LOOM_BERT" predict --model "$MODEL" --input "$W/pairs.jsonl" --text-b-column text_b --max-seq-len 64 \
    >"$W/predict_pairs.jsonl" 2>"$W/predict.err" || fail "loom-bert predict (pairs): $(cat "$W/predict.err")"
  py vs_predict pairs.json "$W/predict_pairs.jsonl"
  say "embed (mean and cls) vs loom-bert embed"
  "$LOOM_BERT" embed --model "$MODEL" --input "$W/embed.jsonl" --max-seq-len 64 >"$W/embed_mean.jsonl" \
    2>"$W/embed.err" || fail "loom-bert embed: $(cat "$W/embed.err")"
  "$LOOM_BERT" embed --model "$MODEL" --input "$W/embed.jsonl" --max-seq-len 64 --pooling cls \
    >"$W/embed_cls.jsonl" 2>"$W/embed.err" || fail "loom-bert embed --pooling cls: $(cat "$W/embed.err")"
  expect 200 POST /v1/embed "$W/embed_req.json"
  py embed 3 "$W/embed_mean.jsonl"
  expect 200 POST /v1/models/tiny_a/embed "$W/embed_cls_req.json"
  py embed 3 "$W/embed_cls.jsonl"

  say "KServe v2: health, server and model metadata, config"
  expect 200 GET /v2/health/live
  expect 200 GET /v2/health/ready
  expect 200 GET /v2
  py server_meta
  expect 200 GET /v2/models/tiny_a
  py model_meta
  expect 200 GET /v2/models/tiny_a/versions/1
  py model_meta
  expect 200 GET /v2/models/tiny_a/ready
  expect 200 GET /v2/models/tiny_a/config
  py model_config
  say "KServe v2 infer: JSON data, shapes [n] and [n, 1], all outputs and one named"
  expect 200 POST /v2/models/tiny_a/infer "$W/v2_all.json"
  py v2_infer batch req-1 probs,logits,label_id
  expect 200 POST /v2/models/tiny_a/versions/1/infer "$W/v2_col.json"
  py v2_infer batch req-2 label_id
  say "KServe v2 infer: binary tensor data in and out"
  v2_binary

  say "a body over 1 KiB with curl's default Expect: 100-continue"
  python3 -c 'import json; print(json.dumps({"texts": ["a fine film ."] * 100}))' >"$W/expect.json"
  local t0 t1
  t0=$(date +%s%N)
  STATUS=$(curl -sS -o "$W/body" -w '%{http_code}' --max-time 60 -H 'Content-Type: application/json' \
    --data-binary "@$W/expect.json" "$URL/v1/classify") || fail "curl with Expect: 100-continue: no answer"
  t1=$(date +%s%N)
  [ "$STATUS" = 200 ] || fail "Expect: 100-continue request: status $STATUS: $(cat "$W/body")"
  # curl waits 1 s for "100 Continue" before sending the body anyway: a server that ignores Expect costs 1 s.
  local ms=$(((t1 - t0) / 1000000))
  [ $ms -lt 900 ] || say "WARNING: the Expect: 100-continue request took $ms ms (is '100 Continue' sent?)"

  say "/metrics after the traffic"
  expect 200 GET /metrics
  py metrics 20
  stop_server
}

case_bad_input() {
  start_server bad --max-body-bytes 4096 --max-texts 4 --max-text-chars 200
  local long
  long=$(printf 'a%.0s' $(seq 201))
  # check STATUS METHOD PATH BODY_TEXT SUBSTRING...: the request (body given inline) gets STATUS and an error
  # naming each SUBSTRING.
  check() {
    local want=$1 method=$2 path=$3 text=$4
    shift 4
    say "$method $path $(printf '%.70s' "$text") -> $want"
    if [ -n "$text" ]; then
      expect "$want" "$method" "$path" "$(body "$text")"
    else
      expect "$want" "$method" "$path"
    fi
    py error "$@"
  }
  check 400 POST /v1/classify '{"texts": ['
  check 400 POST /v1/classify '{"texts": ["a"]} trailing'
  check 400 POST /v1/classify '["not", "an", "object"]'
  check 400 POST /v1/classify '{"texts": "x"}' texts
  check 400 POST /v1/classify '{"texts": [1]}' 'texts[0]'
  check 400 POST /v1/classify '{"texts": ["fine", null]}' 'texts[1]'
  check 400 POST /v1/classify '{"text": ["x"]}' texts
  check 400 POST /v1/classify '{}' texts
  check 400 POST /v1/classify '{"texts": []}' texts
  check 400 POST /v1/classify '{"pairs": [["a"]]}' 'pairs[0]'
  check 400 POST /v1/classify '{"pairs": [["a", 2]]}' 'pairs[0]'
  check 400 POST /v1/classify '{"texts": ["a"], "timeout_ms": "soon"}' timeout_ms
  check 400 POST /v1/embed '{"texts": ["a"], "pooling": "max"}' pooling
  say "invalid UTF-8 bytes in a text"
  printf '{"texts": ["fine", "\xff\xfe bad"]}' >"$W/bad_utf8.json"
  expect 400 POST /v1/classify "$W/bad_utf8.json"
  py error 'texts[1]' utf-8
  printf '{"texts": ["\xc3\x28"]}' >"$W/bad_utf8.json"
  expect 400 POST /v1/classify "$W/bad_utf8.json"
  py error 'texts[0]' utf-8
  check 400 POST /v1/classify '{"texts": ["a", "b", "c", "d", "e"]}' texts
  check 400 POST /v1/classify "{\"texts\": [\"ok\", \"$long\"]}" 'texts[1]'
  say "a body over --max-body-bytes 4096"
  python3 -c 'import json; print(json.dumps({"texts": ["x" * 100] * 50}))' >"$W/big.json"
  expect 413 POST /v1/classify "$W/big.json"
  py error
  say "unknown model, path, method"
  check 404 POST /v1/models/nope/classify '{"texts": ["a"]}' nope
  check 404 GET /v2/models/nope ''
  local one='{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["a"]}'
  check 404 POST /v2/models/nope/infer "{\"inputs\": [$one]}" nope
  check 404 GET /v1/nothing ''
  check 404 POST /v3/classify '{"texts": ["a"]}'
  check 405 GET /v1/classify ''
  check 405 PUT /v1/classify '{"texts": ["a"]}'
  check 405 POST /v1/models '{}'
  say "KServe v2 inputs"
  local infer=/v2/models/tiny_a/infer
  check 400 POST $infer '{"inputs": []}' TEXT
  check 400 POST $infer '{"inputs": [{"name": "TEXT", "datatype": "FP32", "shape": [1], "data": [1.0]}]}' TEXT
  check 400 POST $infer '{"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": ["a"]}]}' TEXT
  check 400 POST $infer '{"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [7]}]}' TEXT
  check 400 POST $infer "{\"inputs\": [$one], \"outputs\": [{\"name\": \"nope\"}]}" nope
  say "KServe v2 binary data: sizes past the body, invalid UTF-8"
  python3 - "$PORT" <<'PY' || fail "KServe binary inputs: see above"
import http.client, json, struct, sys
port = int(sys.argv[1])
def send(blob, size, n=1):
    head = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [n],
                                   "parameters": {"binary_data_size": size}}]}).encode()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v2/models/tiny_a/infer", body=head + blob,
              headers={"Inference-Header-Content-Length": str(len(head))})
    r = c.getresponse()
    return r.status, r.read()
for what, blob, size in (("binary_data_size past the body", struct.pack("<I", 2) + b"hi", 60),
                         ("an element length past its tensor", struct.pack("<I", 50) + b"hi", 6),
                         ("invalid UTF-8 in an element", struct.pack("<I", 2) + b"\xff\xfe", 6)):
    status, body = send(blob, size)
    print(f"serve_cases bad_input: binary infer with {what} -> {status}")
    try:
        err = json.loads(body)["error"]
    except Exception:
        sys.exit(f"{what}: no JSON error: {body[:300]!r}")
    if status != 400 or "TEXT" not in err:
        sys.exit(f"{what}: status {status}, error {err!r}: 400 naming TEXT expected")
PY
  say "a request line that is not HTTP, then a header-only request that hangs up"
  python3 - "$PORT" <<'PY' || fail "garbage on the wire: see above"
import socket, sys
port = int(sys.argv[1])
s = socket.create_connection(("127.0.0.1", port), timeout=30)
s.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
try:
    got = s.recv(4096)
except ConnectionResetError:
    got = b""
s.close()
if got and not (got.startswith(b"HTTP/1.") and got[9:10] == b"4"):
    sys.exit(f"garbage got {got[:200]!r}, expected a 4xx answer or a closed connection")
s = socket.create_connection(("127.0.0.1", port), timeout=30)
s.sendall(b"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"texts\"")
s.close()
PY
  say "a good request still succeeds"
  expect 200 POST /v1/classify "$(body '{"texts": ["still alive", "and well"]}')"
  py save good 2
  expect 200 GET /v2/health/ready
  stop_server
}

case_load() {
  start_server load --runners 2
  local dev=$ROOT/data/sst2-sample/dev.tsv rows
  rows=$(($(wc -l <"$dev") - 1))
  say "record every dev text's answer at concurrency 1 ($rows requests)"
  python3 "$LOAD" --url "$URL" --texts-file "$dev" --requests "$rows" --concurrency 1 --timeout 60 --max-seconds 300 \
    --record-labels "$W/labels.json" --json >"$W/record.json" || fail "recording: $(cat "$W/record.json")"
  local c n
  local per=${SERVE_LOAD_REQUESTS:-10000}
  for c in 64:$per 256:$per; do
    n=${c#*:}
    c=${c%:*}
    say "$n requests at concurrency $c, answers checked against the recording"
    python3 "$LOAD" --url "$URL" --texts-file "$dev" --requests "$n" --concurrency "$c" --timeout 60 \
      --max-seconds 300 --check-labels "$W/labels.json" --json >"$W/load_$c.json" ||
      fail "load at concurrency $c: $(cat "$W/load_$c.json")"
    cat "$W/load_$c.json"
  done
  say "4 texts per request at concurrency 32"
  python3 "$LOAD" --url "$URL" --texts-file "$dev" --requests 300 --concurrency 32 --texts-per-request 4 \
    --timeout 60 --max-seconds 300 --check-labels "$W/labels.json" --json >"$W/load_multi.json" ||
    fail "load with 4 texts per request: $(cat "$W/load_multi.json")"
  python3 - "$W" "$per" <<'PY' || fail "load summaries: see above"
import json, sys
w, per = sys.argv[1], int(sys.argv[2])
for name, n in (("load_64", per), ("load_256", per), ("load_multi", 300)):
    j = json.load(open(f"{w}/{name}.json"))
    if j["ok"] != n or j["failed"] or j["not_sent"] or j["mismatches"]:
        sys.exit(f"{name}: {j}")
PY
  expect 200 GET /metrics
  py metrics $((rows + 2 * per + 300))
  stop_server
}

case_drain() {
  # Batches wait up to 200 ms for company (16 clients < --max-batch 64): at the signal up to 16 requests are queued,
  # and draining must answer them.
  start_server drain --max-delay-us 200000 --max-batch 64 --drain-timeout 30
  python3 "$LOAD" --url "$URL" --texts-file "$ROOT/data/sst2-sample/dev.tsv" --requests 100000 --concurrency 16 \
    --timeout 60 --max-seconds 60 --no-retry --quiet --json --log "$W/drain_log.jsonl" >"$W/drain.json" &
  local load_pid=$! rc=0
  sleep 3
  local t_kill
  t_kill=$(date +%s.%N)
  say "SIGTERM at $t_kill under load"
  stop_server 40
  for _ in $(seq 600); do
    kill -0 "$load_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$load_pid" 2>/dev/null && { kill "$load_pid"; fail "load_test.py still runs 60 s after the server exited"; }
  wait "$load_pid" || rc=$?
  cat "$W/drain.json"
  python3 - "$W" "$t_kill" <<'PY' || fail "drain: see above"
import json, sys
w, t_kill = sys.argv[1], float(sys.argv[2])
s = json.load(open(f"{w}/drain.json"))
log = [json.loads(l) for l in open(f"{w}/drain_log.jsonl")]
# Sent (bytes handed to the kernel) before the signal: the server had them; each must have been answered 200. A
# request sent in the last RACE s before the signal may still sit unread in the server's socket when draining
# starts: the server then refuses it with 503 "shutting down" (it never accepted it, so nothing is lost). Seen under
# ASan at -O1 with another test beside it: 2 requests sent 1 ms before the signal.
RACE = 0.05
before = [r for r in log if r["ts"] is not None and r["ts"] < t_kill]
bad = [r for r in before
       if r["outcome"] != "ok" and not (r["outcome"] == "status_503" and r["ts"] > t_kill - RACE)]
in_flight = [r for r in before if r["t1"] > t_kill]
after = [r for r in log if r not in before]
kinds = {}
for r in after:
    kinds[r["outcome"]] = kinds.get(r["outcome"], 0) + 1
print(f"serve_cases drain: {len(before)} requests sent before SIGTERM ({len(in_flight)} in flight at it), "
      f"{len(after)} after: {kinds}")
if not before or len(before) < 32:
    sys.exit(f"only {len(before)} requests before the signal: the load did not run")
if bad:
    sys.exit(f"{len(bad)} requests sent before SIGTERM were not answered 200, e.g. {bad[:3]}")
if not in_flight:
    sys.exit("no request was in flight at SIGTERM (expected queued ones to be answered during the drain)")
unexpected = {k: v for k, v in kinds.items() if k not in ("ok", "refused", "status_503", "lost")}
if unexpected:
    sys.exit(f"requests after the signal ended {unexpected}: only 200, 503 or a refused connection are expected")
# Lost after the signal: sent on a kept-alive connection the server closed at that very moment (an idle one):
# the race HTTP/1.1 allows (a client retries such a request), at most one per connection, since a closed connection
# takes no second one. A CPU-starved server (2 cores, another test beside it) closes more connections mid-send than
# an idle one: 6 of 16 seen once. A queued request dropped at shutdown shows up in `bad` above.
if kinds.get("lost", 0) > s["concurrency"]:
    sys.exit(f"{kinds['lost']} requests sent after the signal were lost (accepted, never answered): more than the "
             f"{s['concurrency']} connections")
if s["refused"] < 1:
    sys.exit("no refused connection after the stop: did the server keep accepting?")
PY
  [ $rc = 1 ] || fail "load_test.py exited $rc, expected 1 (the refused connections after the stop)"
  say "drained: every request sent before SIGTERM got 200"
}

case_triton() {
  # scripts/get_tritonclient.sh installs it into build/pyenv; LOOM_TRITON_PYTHON names another interpreter.
  local py=${LOOM_TRITON_PYTHON:-$ROOT/build/pyenv/bin/python3}
  [ -x "$py" ] || py=python3
  "$py" -c 'import tritonclient.http, numpy' 2>/dev/null || {
    echo "serve_cases triton: SKIP: $py has no tritonclient[http] (bash scripts/get_tritonclient.sh)"
    exit 77
  }
  start_server triton
  "$py" "$ROOT/scripts/serve/check_tritonclient.py" --url "127.0.0.1:$PORT" --model tiny_a --expect-labels 3 ||
    fail "check_tritonclient.py found failures (above)"
  stop_server
}

case "$CASE" in
  api | bad_input | load | drain | triton) "case_$CASE" ;;
  *) fail "unknown case '$CASE' (api, bad_input, load, drain, triton)" ;;
esac
say "passed"
