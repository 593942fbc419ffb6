#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Load generator for `loom-bert serve` (and scripts/bench/hf_server.py): N requests over C keep-alive connections,
one per worker thread, texts sent round-robin. Standard library only, so it runs on any machine with python3.

  load_test.py --url http://127.0.0.1:8000 [--path /v1/classify | /v2/models/NAME/infer] [--requests 10000]
               [--concurrency 64] [--texts-file dev.tsv --text-column sentence] [--texts-per-request 1]
               [--timeout 30] [--max-seconds 600] [--json] [--record-labels F | --check-labels F --tolerance 1e-5]

Every request ends in exactly one outcome: ok (200 with a well-formed answer), a status (status_503, ...), refused
(the connection was refused: nothing was sent), lost (sent, never answered: reset, closed or timed out),
bad_response (200 but not the expected JSON) or mismatch (labels differ from --check-labels). A refused connection
means the server is gone: the run stops there and the rest counts as not_sent. Exit status 1 when any request failed
or was lost, 0 otherwise (requests not sent because of --max-seconds are reported, not failures).
"""
import argparse
import http.client
import json
import math
import multiprocessing
import socket
import sys
import threading
import time
import urllib.parse

# Mixed lengths: one-word texts through a paragraph (truncated by the server), so length bucketing is exercised.
BUILTIN_TEXTS = [
    "great",
    "not good",
    "a charming and often affecting journey .",
    "unflinchingly bleak and desperate",
    "the acting , costumes , music , cinematography and sound are all astounding given the production 's austere "
    "locales .",
    "it 's slow -- very , very slow .",
    "a sometimes tedious film .",
    "this is a film well worth seeing , talking and singing heads and all .",
    "the movie is a disaster from start to finish , and the cast seems to know it . " * 6,
    "although laced with humor and a few fanciful touches , the film is a refreshingly serious look at young women "
    "in the workplace , and one that ultimately proves both touching and tender , with an ending that lingers .",
    "ok",
    "the story is predictable , the dialogue is stale , and yet the two leads make it watchable for most of its "
    "running time , which says a lot about their charm and very little about the script . " * 3,
]

# Errors that show the peer closed the connection before answering.
CLOSED = (http.client.RemoteDisconnected, http.client.BadStatusLine, ConnectionResetError, BrokenPipeError,
          ConnectionAbortedError, http.client.IncompleteRead)
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True, help="http://127.0.0.1:PORT (local servers only)")
    p.add_argument("--path", default="/v1/classify", help="/v1/classify, /v1/models/NAME/classify or a KServe "
                   "/v2/models/NAME/infer path")
    p.add_argument("--requests", type=int, default=10000)
    p.add_argument("--concurrency", type=int, default=64, help="worker threads, one connection each (all processes)")
    p.add_argument("--processes", type=int, default=1, help="split the workers over P processes (fork): one Python "
                   "process tops out at a few thousand requests/s")
    p.add_argument("--texts-file", help="TSV with a header row (SST-2 format); default: built-in sentences")
    p.add_argument("--text-column", default="sentence")
    p.add_argument("--texts-per-request", type=int, default=1)
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    p.add_argument("--max-seconds", type=float, default=600.0, help="stop sending after this long")
    p.add_argument("--no-retry", action="store_true",
                   help="count a reused keep-alive connection closed before it answered as lost; by default the "
                        "request is sent again once on a fresh connection (HTTP/1.1 allows a server to close an "
                        "idle connection at any time)")
    p.add_argument("--json", action="store_true", help="print one JSON line summary instead of text")
    p.add_argument("--log", help="write one JSON line per request: i, t0 (start), ts (last sent, null if never), t1 "
                   "(end) as time.time(), ms, outcome, detail")
    p.add_argument("--record-labels", metavar="FILE", help="write {text: {label_id, probs}} of the answers")
    p.add_argument("--check-labels", metavar="FILE", help="compare each answer to this --record-labels file")
    p.add_argument("--tolerance", type=float, default=1e-5, help="max |probs difference| for --check-labels")
    p.add_argument("--quiet", action="store_true", help="no per-mismatch lines")
    a = p.parse_args(argv)
    u = urllib.parse.urlsplit(a.url)
    if u.scheme != "http" or u.hostname not in LOCAL_HOSTS or u.port is None:
        p.error(f"--url {a.url}: only http://127.0.0.1:PORT, http://localhost:PORT or http://[::1]:PORT are allowed "
                "(this tool must not load other machines)")
    a.host, a.port = u.hostname, u.port
    if not a.path.startswith("/"):
        p.error("--path must start with /")
    for name in ("requests", "concurrency", "processes", "texts_per_request"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    a.processes = min(a.processes, a.concurrency)
    if a.record_labels and a.check_labels:
        p.error("--record-labels and --check-labels exclude each other")
    a.kserve = "/v2/" in a.path and a.path.endswith("/infer")
    return a


def read_texts(path, column):
    texts = []
    with open(path, encoding="utf-8", newline="\n") as f:
        header = f.readline().rstrip("\r\n").split("\t")
        if column not in header:
            sys.exit(f"load_test: {path}: no column '{column}' in the header {header}")
        c = header.index(column)
        for n, line in enumerate(f, start=2):
            cells = line.rstrip("\r\n").split("\t")
            if len(cells) <= c:
                sys.exit(f"load_test: {path}:{n}: {len(cells)} cells, column '{column}' is cell {c + 1}")
            t = cells[c].strip()  # SST-2 rows end in a space before the TAB
            if t:
                texts.append(t)
    if not texts:
        sys.exit(f"load_test: {path}: no texts")
    return texts


def request_body(a, texts, i):
    if a.kserve:
        return {"id": str(i), "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)], "data": texts}],
                "outputs": [{"name": "probs"}, {"name": "label_id"}]}
    return {"texts": texts}


def answers(a, body, n):
    """[(label_id, probs)] of a 200 response's body, or a string saying what is wrong with it."""
    try:
        j = json.loads(body)
    except ValueError as e:
        return f"not JSON ({e}): {body[:200]!r}"
    if a.kserve:
        outs = {o.get("name"): o for o in j.get("outputs", []) if isinstance(o, dict)}
        if "probs" not in outs or "label_id" not in outs:
            return f"outputs probs and label_id expected: {body[:300]!r}"
        probs, ids = outs["probs"], outs["label_id"]
        shape = probs.get("shape")
        if not isinstance(shape, list) or len(shape) != 2 or shape[0] != n or ids.get("shape") != [n]:
            return f"shapes [{n}, L] and [{n}] expected, got {shape} and {ids.get('shape')}"
        flat, labels = probs.get("data"), ids.get("data")
        if not isinstance(flat, list) or len(flat) != n * shape[1] or not isinstance(labels, list) or len(labels) != n:
            return f"data of {n} rows expected: {body[:300]!r}"
        L = shape[1]
        return [(labels[r], flat[r * L:(r + 1) * L]) for r in range(n)]
    results = j.get("results")
    if not isinstance(results, list) or len(results) != n:
        return f"{n} results expected: {body[:300]!r}"
    out = []
    for r in results:
        if not isinstance(r, dict) or not isinstance(r.get("label_id"), int) or not isinstance(r.get("probs"), list):
            return f"result without label_id/probs: {r!r:.200}"
        out.append((r["label_id"], r["probs"]))
    return out


class Worker(threading.Thread):
    """One keep-alive connection; claims request indices from the shared counter until none are left."""

    def __init__(self, run):
        super().__init__(daemon=True)
        self.run_ = run
        self.conn = None
        self.served = 0  # responses read on the current connection
        self.answering = False
        self.sent_at = None

    def connect(self):
        a = self.run_.a
        if self.conn is not None:
            self.conn.close()
            with self.run_.lock:
                self.run_.reconnects += 1
        self.conn = http.client.HTTPConnection(a.host, a.port, timeout=a.timeout)
        self.conn.connect()  # here, not inside request(): a refusal is told apart from a lost request
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.served = 0

    def exchange(self, payload):
        """(status, body) of one request; raises what http.client raises. self.answering: a status line came."""
        self.answering = False
        self.conn.request("POST", self.run_.a.path, body=payload, headers={"Content-Type": "application/json"})
        self.sent_at = time.time()  # the request's bytes are in the kernel's hands (--log "ts")
        resp = self.conn.getresponse()
        self.answering = True
        body = resp.read()
        self.served += 1
        # A "Connection: close" answer (e.g. while draining): http.client has closed the socket; the next request
        # connects again.
        return resp.status, body

    def one(self, i):
        a = self.run_.a
        texts = self.run_.texts_of(i)
        payload = json.dumps(request_body(a, texts, i)).encode()
        retried = False
        while True:
            try:
                if self.conn is None or self.conn.sock is None:
                    try:
                        self.connect()
                    except ConnectionRefusedError:
                        return "refused", texts, None
                    except OSError as e:
                        return f"connect_error:{type(e).__name__}", texts, None
                reused = self.served > 0
                status, body = self.exchange(payload)
            except (socket.timeout, TimeoutError):
                self.drop()
                return "lost", texts, "timeout"
            except CLOSED as e:
                self.drop()
                # A kept-alive connection the server closed while idle (no status line came): send once more on a
                # fresh one, as browsers do. Closed mid-answer, or on a fresh connection: lost.
                if reused and not self.answering and not retried and not a.no_retry:
                    retried = True
                    with self.run_.lock:
                        self.run_.retries += 1
                    continue
                return "lost", texts, type(e).__name__
            except OSError as e:
                self.drop()
                return "lost", texts, type(e).__name__
            except Exception as e:  # a malformed answer (http.client.HTTPException, ...): never end the worker
                self.drop()
                return "bad_response", texts, repr(e)
            if status != 200:
                return f"status_{status}", texts, body[:300]
            got = answers(a, body, len(texts))
            if isinstance(got, str):
                return "bad_response", texts, got
            return "ok", texts, got

    def drop(self):
        if self.conn is not None:
            self.conn.close()
            self.conn.sock = None
        self.served = 0

    def run(self):
        try:
            while True:
                i = self.run_.claim()
                if i is None:
                    break
                t0 = time.time()
                p0 = time.perf_counter()
                self.sent_at = None
                outcome, texts, detail = self.one(i)
                ms = (time.perf_counter() - p0) * 1e3
                self.run_.record(i, t0, self.sent_at, time.time(), ms, outcome, texts, detail)
        finally:
            if self.conn is not None:
                self.conn.close()


class Run:
    """The requests of one process: indices start, start + step, ... below total."""

    def __init__(self, a, texts, start, step, reference):
        self.a, self.texts, self.reference = a, texts, reference
        self.next_i, self.step = start, step
        self.lock = threading.Lock()
        self.deadline = time.monotonic() + a.max_seconds
        self.stopped = False  # a refused connection: the server is gone
        self.outcomes = {}
        self.latencies = []
        self.reconnects = self.retries = 0
        self.mismatches = []
        self.recorded = {}  # text -> (label_id, probs)
        self.log = []
        self.first = self.last = None

    def texts_of(self, i):
        k, n = self.a.texts_per_request, len(self.texts)
        return [self.texts[(i * k + j) % n] for j in range(k)]

    def claim(self):
        with self.lock:
            if self.stopped or self.next_i >= self.a.requests or time.monotonic() >= self.deadline:
                return None
            i = self.next_i
            self.next_i += self.step
            return i

    def record(self, i, t0, ts, t1, ms, outcome, texts, detail):
        if outcome == "ok":
            outcome = self.compare(texts, detail)
        with self.lock:
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
            self.first = t0 if self.first is None else min(self.first, t0)
            self.last = t1 if self.last is None else max(self.last, t1)
            if outcome == "ok":
                self.latencies.append(ms)
            elif outcome == "refused":
                self.stopped = True
            elif not self.a.quiet and outcome != "mismatch":
                print(f"load_test: request {i}: {outcome}: {detail!r:.300}", file=sys.stderr)
            if self.a.log:
                self.log.append({"i": i, "t0": t0, "ts": ts, "t1": t1, "ms": round(ms, 3), "outcome": outcome,
                                 "detail": None if outcome == "ok" else str(detail)[:200]})

    def compare(self, texts, got):
        """'ok' or 'mismatch' of one answered request against --check-labels; fills --record-labels."""
        bad = []
        for text, (label, probs) in zip(texts, got):
            if self.a.record_labels:
                with self.lock:
                    old = self.recorded.setdefault(text, (label, probs))
                if old[0] != label or max_diff(old[1], probs) > self.a.tolerance:
                    bad.append(f"{text[:60]!r}: label {label} probs {probs} here, {old[0]} {old[1]} before")
            if self.reference is not None:
                ref = self.reference.get(text)
                if ref is None:
                    bad.append(f"{text[:60]!r}: not in --check-labels")
                    continue
                ref_label, ref_probs = (ref, None) if isinstance(ref, int) else (ref["label_id"], ref.get("probs"))
                if ref_label != label or (ref_probs is not None and max_diff(ref_probs, probs) > self.a.tolerance):
                    bad.append(f"{text[:60]!r}: label {label} probs {probs}, reference {ref_label} {ref_probs}")
        if not bad:
            return "ok"
        with self.lock:
            self.mismatches.extend(bad)
        if not self.a.quiet:
            for b in bad[:3]:
                print(f"load_test: mismatch: {b}", file=sys.stderr)
        return "mismatch"

    def go(self, threads):
        workers = [Worker(self) for _ in range(threads)]
        for w in workers:
            w.start()
        # Every request has its own timeout, so the workers end by then; a stuck one is reported, not waited for.
        hard = time.monotonic() + self.a.max_seconds + 2 * self.a.timeout + 10
        for w in workers:
            w.join(max(0.0, hard - time.monotonic()))
        stuck = sum(w.is_alive() for w in workers)
        with self.lock:
            if stuck:
                self.outcomes["lost"] = self.outcomes.get("lost", 0) + stuck
            return {"outcomes": dict(self.outcomes), "latencies": list(self.latencies), "reconnects": self.reconnects,
                    "retries": self.retries, "mismatches": self.mismatches[:50], "mismatch_lines": len(self.mismatches),
                    "recorded": {t: [lab, p] for t, (lab, p) in self.recorded.items()}, "log": list(self.log),
                    "first": self.first, "last": self.last, "stuck": stuck}


def max_diff(a, b):
    if not isinstance(a, list) or not isinstance(b, list) or len(a) != len(b):
        return math.inf
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def process_main(a, texts, start, step, threads, reference, queue):
    queue.put(Run(a, texts, start, step, reference).go(threads))


def percentile(sorted_ms, q):
    if not sorted_ms:
        return None
    k = min(len(sorted_ms) - 1, max(0, math.ceil(q / 100 * len(sorted_ms)) - 1))  # nearest-rank
    return round(sorted_ms[k], 3)


def main(argv=None):
    a = parse_args(argv)
    texts = read_texts(a.texts_file, a.text_column) if a.texts_file else BUILTIN_TEXTS
    reference = None
    if a.check_labels:
        with open(a.check_labels, encoding="utf-8") as f:
            reference = json.load(f)
    P = a.processes
    shares = [a.concurrency // P + (1 if p < a.concurrency % P else 0) for p in range(P)]
    t0 = time.perf_counter()
    if P == 1:
        parts = [Run(a, texts, 0, 1, reference).go(shares[0])]
    else:
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        procs = [ctx.Process(target=process_main, args=(a, texts, p, P, shares[p], reference, queue), daemon=True)
                 for p in range(P)]
        for pr in procs:
            pr.start()
        parts = []
        for _ in procs:
            try:
                parts.append(queue.get(timeout=a.max_seconds + 2 * a.timeout + 30))
            except Exception:  # a process died: its requests count as lost below
                break
        for pr in procs:
            pr.join(5)
    wall = time.perf_counter() - t0

    outcomes, lat, mism = {}, [], []
    recorded, log = {}, []
    reconnects = retries = stuck = mismatch_lines = 0
    for part in parts:
        for k, v in part["outcomes"].items():
            outcomes[k] = outcomes.get(k, 0) + v
        lat += part["latencies"]
        mism += part["mismatches"]
        mismatch_lines += part["mismatch_lines"]
        recorded.update(part["recorded"])
        log += part["log"]
        reconnects += part["reconnects"]
        retries += part["retries"]
        stuck += part["stuck"]
    ok = outcomes.get("ok", 0)
    answered = sum(outcomes.values())
    # Requests a dead process never reported on were sent or not: count its whole share as lost.
    missing_parts = P - len(parts)
    if missing_parts:
        outcomes["lost"] = outcomes.get("lost", 0) + sum(
            len(range(p, a.requests, P)) for p in range(len(parts), P))
        answered = sum(outcomes.values())
    failed = answered - ok
    not_sent = max(0, a.requests - answered)
    lat.sort()
    # The wall time of the traffic itself: first request sent to last answer.
    starts = [p["first"] for p in parts if p["first"] is not None]
    ends = [p["last"] for p in parts if p["last"] is not None]
    span = (max(ends) - min(starts)) if starts and ends else wall
    span = max(span, 1e-9)
    summary = {
        "url": a.url, "path": a.path, "requests": a.requests, "concurrency": a.concurrency, "processes": P,
        "texts_per_request": a.texts_per_request, "ok": ok, "failed": failed, "lost": outcomes.get("lost", 0),
        "refused": outcomes.get("refused", 0), "not_sent": not_sent,
        "failures": {k: v for k, v in sorted(outcomes.items()) if k != "ok"},
        "reconnects": reconnects, "retries": retries, "mismatches": mismatch_lines,
        "wall_s": round(span, 3), "req_per_s": round(ok / span, 1),
        "texts_per_s": round(ok * a.texts_per_request / span, 1),
        "p50_ms": percentile(lat, 50), "p90_ms": percentile(lat, 90), "p99_ms": percentile(lat, 99),
        "max_ms": round(lat[-1], 3) if lat else None,
        "first_t": min(starts) if starts else None, "last_t": max(ends) if ends else None,
    }
    if a.log:
        with open(a.log, "w", encoding="utf-8") as f:
            for line in sorted(log, key=lambda r: r["i"]):
                f.write(json.dumps(line) + "\n")
    if a.record_labels:
        with open(a.record_labels, "w", encoding="utf-8") as f:
            json.dump({t: {"label_id": lab, "probs": p} for t, (lab, p) in recorded.items()}, f, ensure_ascii=False)
    for m in mism[:10]:
        print(f"load_test: mismatch: {m}", file=sys.stderr)
    if a.json:
        print(json.dumps(summary), flush=True)
    else:
        why = f" {summary['failures']}" if failed else ""
        print(f"requests: {ok} ok, {failed} failed{why}, {not_sent} not sent; "
              f"{reconnects} reconnects, {retries} retries")
        print(f"wall {summary['wall_s']} s: {summary['req_per_s']} requests/s, {summary['texts_per_s']} texts/s")
        print(f"latency ms: p50 {summary['p50_ms']} p90 {summary['p90_ms']} p99 {summary['p99_ms']} "
              f"max {summary['max_ms']}", flush=True)
    return 1 if failed or stuck or missing_parts else 0


if __name__ == "__main__":
    sys.exit(main())
