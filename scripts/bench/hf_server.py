#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The baseline `loom-bert serve` is measured against: the same HTTP API subset (POST /v1/classify, GET
/v2/health/live|ready) served by PyTorch + Hugging Face transformers on CUDA, with the same dynamic batching as loom
(include/loom/serve/batcher.hpp): one queue per sequence-length bucket (16, 32, ... 512 tokens), a batch is one
bucket's rows, taken when the bucket holds --max-batch rows or its oldest row has waited --max-delay-us, oldest
bucket first; the queue is bounded (--max-queue rows, 503 beyond). Tokenization runs on the request threads with the
Rust fast tokenizer (it releases the GIL); one runner thread owns the GPU.

  hf_server.py --model DIR | --size base --vocab vocab.txt  [--port 8000] [--precision bf16|fp16|fp32]
               [--max-batch 64] [--max-delay-us 1000] [--max-seq-len 128] [--graphs]

--graphs: one CUDA graph per padded shape (batch bucket 1, 2, 4, ... 256) x (sequence bucket 16 ... 512), captured
at start-up; a batch is padded to the smallest shape holding it. Without it a batch is padded to its longest row
(as a plain transformers user would run it). Prints `hf_server: listening on http://127.0.0.1:PORT` once ready.
Runs on the GPU machine only (PyTorch 2.11, transformers 5.x); SIGTERM drains (queued rows answered) and exits 0.
"""
import argparse
import collections
import json
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
SEQ_BUCKETS = [16, 32, 64, 128, 256, 512]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a BertForSequenceClassification folder (config.json, model.safetensors, vocab)")
    src.add_argument("--size", choices=["base", "large"], help="random BERT weights of this size, 2 labels")
    p.add_argument("--vocab", help="with --size: the WordPiece vocab.txt")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0: a free port (the listening line shows it)")
    p.add_argument("--precision", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--max-delay-us", type=int, default=1000)
    p.add_argument("--max-seq-len", type=int, default=128)
    p.add_argument("--max-queue", type=int, default=4096)
    p.add_argument("--max-texts", type=int, default=256)
    p.add_argument("--request-timeout-ms", type=int, default=10000)
    p.add_argument("--drain-timeout", type=float, default=30)
    p.add_argument("--graphs", action="store_true", help="CUDA graphs per (batch bucket, sequence bucket)")
    a = p.parse_args()
    if a.size and not a.vocab:
        p.error("--size needs --vocab (a WordPiece vocab.txt)")
    if a.graphs and a.max_batch > BATCH_BUCKETS[-1]:
        p.error(f"--graphs: --max-batch is at most {BATCH_BUCKETS[-1]}")
    if a.host not in ("127.0.0.1", "localhost", "::1"):
        p.error("--host: a benchmark server listens on the loopback only")
    return a


def load_model(a):
    """(model on cuda in the precision, tokenizers.Tokenizer, id2label)."""
    import transformers
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, BertConfig

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.precision]
    if a.model:
        try:  # transformers 5 names it dtype; 4.x torch_dtype
            model = AutoModelForSequenceClassification.from_pretrained(a.model, dtype=dtype, attn_implementation="sdpa")
        except TypeError:
            model = AutoModelForSequenceClassification.from_pretrained(a.model, torch_dtype=dtype,
                                                                       attn_implementation="sdpa")
        tok = AutoTokenizer.from_pretrained(a.model)
    else:
        vocab = sum(1 for _ in open(a.vocab, encoding="utf-8"))
        kw = dict(vocab_size=vocab, num_labels=2, attn_implementation="sdpa")
        if a.size == "large":
            kw.update(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
        torch.manual_seed(0)
        model = transformers.BertForSequenceClassification(BertConfig(**kw))
        Tok = getattr(transformers, "BertTokenizerFast", None) or transformers.BertTokenizer
        tok = Tok(vocab_file=a.vocab, do_lower_case=True)
    model = model.to(device="cuda", dtype=dtype).eval()
    backend = getattr(tok, "backend_tokenizer", None) or getattr(tok, "_tokenizer", None)
    if backend is None:
        sys.exit("hf_server: the tokenizer has no Rust backend (a fast tokenizer is needed)")
    # Set once, never changed: encode_batch only reads the tokenizer, so many request threads may share it.
    backend.enable_truncation(max_length=a.max_seq_len)
    backend.no_padding()
    n = model.config.num_labels
    id2label = [model.config.id2label.get(i, f"LABEL_{i}") for i in range(n)]
    return model, backend, id2label


class Pending:
    """One request's rows; the runner fills `out`, the request thread waits on `done`."""

    def __init__(self, n):
        self.out = [None] * n
        self.left = n
        self.error = None
        self.done = threading.Event()


class Row:
    __slots__ = ("ids", "types", "pending", "index", "enqueued")

    def __init__(self, ids, types, pending, index):
        self.ids, self.types, self.pending, self.index = ids, types, pending, index


def length_bucket(n, max_length):
    b = 16
    while b < n and b < max_length:
        b *= 2
    return min(b, max_length)


class Batcher:
    """loom::serve::dynamic_batcher in Python (same rule; see the module doc)."""

    def __init__(self, max_batch, max_delay_s, max_queue, max_length=512):
        self.max_batch, self.max_delay, self.max_queue, self.max_length = max_batch, max_delay_s, max_queue, max_length
        self.buckets = collections.defaultdict(collections.deque)
        self.depth = 0
        self.closed = False
        self.cv = threading.Condition()

    def push(self, rows):
        now = time.monotonic()
        with self.cv:
            if self.closed or self.depth + len(rows) > self.max_queue:
                return False
            for r in rows:
                r.enqueued = now
                self.buckets[length_bucket(len(r.ids), self.max_length)].append(r)
            self.depth += len(rows)
            self.cv.notify_all()
        return True

    def next(self):
        with self.cv:
            while True:
                if self.depth == 0:
                    if self.closed:
                        return []
                    self.cv.wait()
                    continue
                chosen = None
                for q in self.buckets.values():
                    if not q:
                        continue
                    if len(q) >= self.max_batch:  # a full batch goes at once
                        chosen = q
                        break
                    if chosen is None or q[0].enqueued < chosen[0].enqueued:
                        chosen = q
                due = chosen[0].enqueued + self.max_delay
                if len(chosen) >= self.max_batch or self.closed or time.monotonic() >= due:
                    n = min(len(chosen), self.max_batch)
                    batch = [chosen.popleft() for _ in range(n)]
                    self.depth -= n
                    return batch
                self.cv.wait(max(0.0, due - time.monotonic()))

    def close(self):
        with self.cv:
            self.closed = True
            self.cv.notify_all()


class Runner:
    """The GPU side: pads a batch, runs the classifier (eagerly or by replaying a captured graph), hands out probs."""

    def __init__(self, model, a):
        self.model, self.a = model, a
        self.positions = model.config.max_position_embeddings
        self.graphs = {}
        if a.graphs:
            self.capture()

    def seq_bucket(self, s):
        for b in SEQ_BUCKETS:
            if b >= s and b <= self.positions:
                return b
        return s

    def shapes(self):
        top_s = self.seq_bucket(min(self.a.max_seq_len, self.positions))
        top_b = next(b for b in BATCH_BUCKETS if b >= self.a.max_batch)
        return [(b, s) for b in BATCH_BUCKETS if b <= top_b for s in SEQ_BUCKETS if s <= top_s]

    def forward(self, ids, types, mask4):
        # A ready 4-D boolean mask (True: attend) skips transformers' mask preparation, whose all-ones check
        # synchronizes with the GPU (not allowed while a graph is being captured); used with and without graphs so
        # the two differ only in padding and launch overhead.
        return self.model(input_ids=ids, token_type_ids=types, attention_mask=mask4).logits.float()

    @torch.inference_mode()
    def capture(self):
        t0 = time.perf_counter()
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        for B, S in sorted(self.shapes(), key=lambda x: -x[0] * x[1]):  # largest first: the pool is sized once
            ids = torch.zeros(B, S, dtype=torch.long, device="cuda")
            types = torch.zeros_like(ids)
            mask = torch.zeros(B, 1, 1, S, dtype=torch.bool, device="cuda")
            mask[:, :, :, 0] = True
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):  # warm-up: cuBLAS handles, SDPA kernel choice
                    self.forward(ids, types, mask)
            torch.cuda.current_stream().wait_stream(stream)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                out = self.forward(ids, types, mask)
            self.graphs[(B, S)] = (g, ids, types, mask, out)
        torch.cuda.synchronize()
        print(f"hf_server: captured {len(self.graphs)} CUDA graphs in {time.perf_counter() - t0:.1f} s", flush=True)

    @torch.inference_mode()
    def run(self, rows):
        n = len(rows)
        S = max(len(r.ids) for r in rows)
        if self.a.graphs:
            B = next(b for b in BATCH_BUCKETS if b >= n)
            S = self.seq_bucket(S)
        else:
            B = n
        pad = [[0] * S] * (B - n)
        ids = torch.tensor([r.ids + [0] * (S - len(r.ids)) for r in rows] + pad, dtype=torch.long)
        types = torch.tensor([r.types + [0] * (S - len(r.types)) for r in rows] + pad, dtype=torch.long)
        # Padding rows attend to one position: no NaN from an all-masked softmax.
        mask = torch.tensor([[True] * len(r.ids) + [False] * (S - len(r.ids)) for r in rows] +
                            [[True] + [False] * (S - 1)] * (B - n), dtype=torch.bool)
        if self.a.graphs:
            g, sid, stypes, smask, out = self.graphs[(B, S)]
            sid.copy_(ids, non_blocking=True)
            stypes.copy_(types, non_blocking=True)
            smask.copy_(mask.view(B, 1, 1, S), non_blocking=True)
            g.replay()
            logits = out[:n]
        else:
            logits = self.forward(ids.cuda(non_blocking=True), types.cuda(non_blocking=True),
                                  mask.view(B, 1, 1, S).cuda(non_blocking=True))[:n]
        return torch.softmax(logits, dim=-1).cpu().tolist()

    def loop(self, batcher):
        while True:
            rows = batcher.next()
            if not rows:
                return
            try:
                probs = self.run(rows)
            except Exception as e:  # answer the batch's requests with the error instead of leaving them hanging
                print(f"hf_server: batch of {len(rows)} failed: {e!r}", file=sys.stderr, flush=True)
                probs = [None] * len(rows)
                for r in rows:
                    r.pending.error = repr(e)
            for r, p in zip(rows, probs):
                pd = r.pending
                pd.out[r.index] = p
                pd.left -= 1  # one runner thread: no lock needed
                if pd.left == 0:
                    pd.done.set()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    server_version = "hf_server"

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass

    def reply(self, status, obj):
        body = json.dumps(obj).encode()
        st = self.server.state
        if st.draining:
            self.close_connection = True
        # Status line, headers and body in one write: no Nagle/delayed-ACK stall, one syscall.
        head = (f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if self.close_connection else "") +
                "\r\n")
        self.wfile.write(head.encode() + body)

    def do_GET(self):
        st = self.server.state
        if self.path == "/v2/health/live":
            return self.reply(200, {})
        if self.path == "/v2/health/ready":
            return self.reply(503 if st.draining else 200, {})
        if self.path == "/v1/classify":
            return self.reply(405, {"error": "/v1/classify: use POST"})
        return self.reply(404, {"error": f"unknown path {self.path}"})

    def do_POST(self):
        st = self.server.state
        n = int(self.headers.get("Content-Length", 0) or 0)
        raw = self.rfile.read(n)
        if self.path != "/v1/classify":
            return self.reply(404, {"error": f"unknown path {self.path}"})
        try:
            j = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            return self.reply(400, {"error": f"body: malformed JSON ({e})"})
        texts = j.get("texts") if isinstance(j, dict) else None
        pairs = j.get("pairs") if isinstance(j, dict) else None
        items = texts if texts is not None else pairs
        if not isinstance(items, list) or not items:
            return self.reply(400, {"error": "texts: a non-empty list of strings expected"})
        if len(items) > st.a.max_texts:
            return self.reply(400, {"error": f"texts: more than --max-texts {st.a.max_texts}"})
        if texts is not None and not all(isinstance(t, str) for t in texts):
            return self.reply(400, {"error": "texts: strings expected"})
        if pairs is not None and not all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
                                         for p in pairs):
            return self.reply(400, {"error": "pairs: [string, string] pairs expected"})
        if st.draining:
            return self.reply(503, {"error": "draining"})
        enc = st.tokenizer.encode_batch(texts if texts is not None else [tuple(p) for p in pairs])
        pending = Pending(len(enc))
        rows = [Row(e.ids, e.type_ids, pending, k) for k, e in enumerate(enc)]
        with st.lock:
            st.in_flight += 1
        try:
            if not st.batcher.push(rows):
                return self.reply(503, {"error": "queue full"})
            if not pending.done.wait(st.a.request_timeout_ms / 1000):
                return self.reply(504, {"error": "request deadline passed"})
            if pending.error:
                return self.reply(500, {"error": pending.error})
            results = []
            for p in pending.out:
                best = max(range(len(p)), key=p.__getitem__)
                results.append({"label": st.id2label[best], "label_id": best, "score": p[best], "probs": p})
            return self.reply(200, {"model": st.name, "results": results})
        finally:
            with st.lock:
                st.in_flight -= 1


class State:
    pass


def main():
    a = parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as loom's
    model, tokenizer, id2label = load_model(a)
    runner = Runner(model, a)
    # Warm the eager path too (first cuBLAS/SDPA calls), so the first requests are not the slowest.
    for s in (16, 32, 64, 128):
        if s <= min(a.max_seq_len, runner.positions):
            rows = [Row([101] * s, [0] * s, Pending(1), 0) for _ in range(min(8, a.max_batch))]
            runner.run(rows)
    torch.cuda.synchronize()

    st = State()
    st.a, st.tokenizer, st.id2label = a, tokenizer, id2label
    st.name = os.path.basename(os.path.normpath(a.model)) if a.model else f"bert-{a.size}"
    st.batcher = Batcher(a.max_batch, a.max_delay_us / 1e6, a.max_queue, max_length=512)
    st.lock = threading.Lock()
    st.in_flight = 0
    st.draining = False
    run_thread = threading.Thread(target=runner.loop, args=(st.batcher,), daemon=True)
    run_thread.start()

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 4096  # the listen backlog: hundreds of clients connect at once
        allow_reuse_address = True

    srv = Server((a.host, a.port), Handler)
    srv.state = st

    def stop(*_):
        st.draining = True
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"hf_server: listening on http://{a.host}:{srv.server_address[1]} (model: {st.name}, {a.precision}, "
          f"graphs {'on' if a.graphs else 'off'})", flush=True)
    srv.serve_forever()
    srv.server_close()  # no new connections; the queued rows are still run
    st.batcher.close()
    deadline = time.monotonic() + a.drain_timeout
    while time.monotonic() < deadline:
        with st.lock:
            if st.in_flight == 0:
                break
        time.sleep(0.01)
    run_thread.join(max(0.0, deadline - time.monotonic()))
    print("hf_server: drained, exiting", flush=True)
    sys.stdout.flush()
    os._exit(0)  # handler threads idle on kept-alive connections are daemons: do not wait for their clients


if __name__ == "__main__":
    main()
