#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Helper of epoch.sh: one fine-tuning epoch, timed end to end, by `loom-bert train` and by transformers' Trainer.

  hf_epoch.py count --train T.tsv --dev D.tsv --text-column C --vocab V [--max-seq-len 128]
      rows and real tokens (after truncation, [CLS] and [SEP] included) of T, as the fast tokenizer counts them.
  hf_epoch.py loom --bin LOOM_BERT --dataset NAME --mode off|on|auto|- --count COUNT.json --jsonl F -- ARGS...
      runs `LOOM_BERT train ARGS...` (ARGS include --padding-free MODE where the binary has it), stamps every stderr
      line with the wall clock and appends one JSON line: wall time, its phases (read + tokenize, the epoch, the dev
      evaluation, the save), rows and tokens per second, dev accuracy and the GPU's peak memory.
  hf_epoch.py hf --dataset NAME --train T.tsv --dev D.tsv --text-column C --label-column L --config config.json
                 --vocab V --jsonl F [--modes padded,packed] [recipe flags]
      transformers' Trainer, the same recipe: `padded` is dynamic padding with train_sampling_strategy
      group_by_length (transformers 5's name for group_by_length=True), SDPA attention; `packed` first checks whether
      DataCollatorWithFlattening gives BertForSequenceClassification correct results (collator, logits per
      sequence, attention kept inside each sequence) and trains only if it does, else writes "supported": false with
      the reasons.
  hf_epoch.py table --jsonl F --md OUT.md
"""
import argparse, csv, json, os, re, shutil, subprocess, sys, threading, time


def gpu_memory_used():
    """MiB used on the device now (nvidia-smi), or None."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(NVIDIA_SMI, capture_output=True, text=True, timeout=30).stdout
        return float(out.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


NVIDIA_SMI = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i",
              os.environ.get("EPOCH_GPU", "0")]
# A Trainer process: the device's memory before it starts (its CUDA context counts, as loom's does), then the clock,
# before the imports (its wall time includes importing torch and transformers).
GPU_BASE = gpu_memory_used() if sys.argv[1:2] == ["hf"] else None
T_START = time.time()

csv.field_size_limit(1 << 24)


def read_tsv(path, text_col, label_col=None):
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    texts = [r[text_col] for r in rows]
    labels = [r[label_col] for r in rows] if label_col else None
    return texts, labels


def fast_tokenizer(vocab):
    """The fast (Rust) WordPiece tokenizer of vocab.txt, lower-casing as loom does by default. transformers 5's
    BertTokenizer is the fast one and takes `vocab` (a dict); it ignores a `vocab_file` keyword and would then
    tokenize with a vocabulary of the five special tokens alone, hence the check of its size."""
    import inspect
    from transformers import BertTokenizer, BertTokenizerFast
    with open(vocab, encoding="utf-8") as f:
        words = {line.rstrip("\n"): i for i, line in enumerate(f)}
    if "vocab" in inspect.signature(BertTokenizer.__init__).parameters:  # transformers 5
        tok = BertTokenizer(vocab=words, do_lower_case=True)
    else:
        tok = BertTokenizerFast(vocab_file=vocab, do_lower_case=True)
    if len(tok) != len(words) or not tok.is_fast or tok.convert_tokens_to_ids("[CLS]") != words["[CLS]"]:
        sys.exit(f"hf_epoch.py: the tokenizer of {vocab} has {len(tok)} tokens (fast: {tok.is_fast}), "
                 f"the file {len(words)}")
    return tok


def emit(path, line):
    text = json.dumps(line, ensure_ascii=False)
    print(text, flush=True)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text + "\n")


class GpuMemory:
    """The device's peak used memory (MiB) while it runs, from `nvidia-smi --loop-ms`, less `base` (default: the
    memory used when it starts): the whole process (CUDA context, allocator pools, workspaces), loom and PyTorch
    alike."""

    def __init__(self, base=None, interval_ms=100):
        self.peak = None
        self.base = base if base is not None else gpu_memory_used()
        self.proc = None
        if self.base is None:
            return
        try:
            self.proc = subprocess.Popen(NVIDIA_SMI + [f"--loop-ms={interval_ms}"], stdout=subprocess.PIPE, text=True)
        except OSError:
            self.proc = None
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                v = float(line.strip())
            except ValueError:
                continue
            self.peak = v if self.peak is None else max(self.peak, v)

    def stop(self):
        if self.proc is None:
            return None
        time.sleep(0.3)
        self.proc.terminate()
        self.proc.wait()
        self.thread.join(timeout=2)
        return None if self.peak is None else round(self.peak - self.base)


# ----------------------------------------------------------------------------------------------------------- count
def cmd_count(a):
    tok = fast_tokenizer(a.vocab)
    texts, _ = read_tsv(a.train, a.text_column)
    dev, _ = read_tsv(a.dev, a.text_column)
    t0 = time.time()
    enc = tok(texts, truncation=True, max_length=a.max_seq_len)["input_ids"]
    secs = time.time() - t0
    lengths = sorted(len(e) for e in enc)
    n = len(lengths)
    print(json.dumps({"rows": n, "tokens": sum(lengths), "dev_rows": len(dev),
                      "mean_len": round(sum(lengths) / n, 2), "p50_len": lengths[n // 2],
                      "p95_len": lengths[min(n - 1, int(0.95 * n))], "max_len": lengths[-1],
                      "truncated_rows": sum(1 for x in lengths if x >= a.max_seq_len),
                      "fast_tokenizer_s": round(secs, 2)}))


# ------------------------------------------------------------------------------------------------------------ loom
def cmd_loom(a):
    count = json.load(open(a.count))
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    out = args[args.index("--output") + 1]
    log_path = a.log or os.path.join(out + ".log")
    mem = GpuMemory()
    stamps = []  # (seconds since start, line)
    t0 = time.time()
    proc = subprocess.Popen([a.bin, "train"] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace")
    killed = []
    watchdog = threading.Timer(a.time_limit, lambda: (killed.append(1), proc.kill())) if a.time_limit else None
    if watchdog:
        watchdog.start()
    try:
        for line in proc.stdout:
            stamps.append((time.time() - t0, line.rstrip("\n")))
        proc.wait()
    finally:
        if watchdog:
            watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
    wall = time.time() - t0
    peak = mem.stop()
    rc = proc.returncode
    timed_out = bool(killed)
    with open(log_path, "w", encoding="utf-8") as f:
        for t, l in stamps:
            f.write(f"{t:9.3f} {l}\n")

    def first(pattern):
        return next(((t, l) for t, l in stamps if re.search(pattern, l)), (None, None))

    def last(pattern):
        return next(((t, l) for t, l in reversed(stamps) if re.search(pattern, l)), (None, None))

    t_rows, _ = first(r"^loom-bert train: \d+ training rows")
    t_step, step_line = last(r"^step \d+/\d+ ")
    t_eval, _ = last(r"^eval step \d+:")
    t_done, _ = first(r"^loom-bert train: done after")
    line = {"dataset": a.dataset, "impl": "loom", "mode": f"padding-free {a.mode}" if a.mode != "-" else "default",
            "rows": count["rows"], "tokens": count.get("tokens"), "rc": rc, "wall_s": round(wall, 2)}
    if rc != 0:
        line.update(ok=False, timed_out=timed_out, time_limit_s=a.time_limit or None,
                    error=" | ".join(l for _, l in stamps[-3:])[-400:])
        emit(a.jsonl, line)
        return
    r2 = lambda x: None if x is None else round(x, 2)
    train_s = t_step - t_rows if t_step is not None and t_rows is not None else None
    line.update(
        ok=True,
        prep_s=r2(t_rows),  # start, read the tables, tokenize (loom's own tokenizer), build the datasets
        epoch_s=r2(train_s),  # model initialisation + every training step of the epoch
        eval_s=r2(t_eval - t_step if t_eval is not None and t_step is not None else None),
        save_s=r2(t_done - t_eval if t_done is not None and t_eval is not None else None),  # model + checkpoint
        tokens_per_s=round(count["tokens"] / train_s) if train_s and count.get("tokens") else None,
        seq_per_s=round(count["rows"] / train_s, 1) if train_s else None,
        tokens_per_s_wall=round(count["tokens"] / wall) if count.get("tokens") else None,
    )
    m = re.search(r"([\d.]+) seq/s", step_line or "")
    if m:
        line["loom_seq_per_s"] = float(m.group(1))  # loom's own figure: rows / seconds since the trainer started
    try:
        evals = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if '"eval"' in l]
        line["dev_accuracy"] = round(evals[-1]["accuracy"], 4)
    except (OSError, IndexError, KeyError, ValueError):
        line["dev_accuracy"] = None
    line["peak_gpu_mib"] = peak
    emit(a.jsonl, line)


# -------------------------------------------------------------------------------------------------------------- hf
class Rows:
    """A map-style dataset of tokenized rows (module level: dataloader workers started by spawn or forkserver get
    it pickled)."""

    def __init__(self, enc, labels, ids, keys):
        self.enc, self.labels, self.keys = {k: enc[k] for k in keys}, [ids[y] for y in labels], keys

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        d = {k: self.enc[k][i] for k in self.keys}
        d["labels"] = self.labels[i]
        return d


def packing_check(model, tok, texts, max_len, n_rows, device):
    """Does DataCollatorWithFlattening work for BertForSequenceClassification? Three checks on `n_rows` rows, with the
    model in eval mode (no dropout): the collator on classification features (one integer label per row), the
    logits (one row per sequence?), and whether attention stays inside each sequence (the first sequence's hidden
    states must not change when the other sequences' tokens do), for SDPA and, where flash-attn is installed,
    flash_attention_2. The packed batch's hidden states against the padded batch's are given too, for information
    (rounding differs between the two layouts). Returns (supported, reasons, details)."""
    import torch
    from transformers import DataCollatorWithFlattening, DataCollatorWithPadding
    import importlib.util

    enc = tok(texts[:n_rows], truncation=True, max_length=max_len)
    feats = [{"input_ids": enc["input_ids"][i], "labels": i % 2} for i in range(n_rows)]
    lens = [len(f["input_ids"]) for f in feats]
    details = {"rows": n_rows, "lengths": lens}
    reasons = []
    flat = DataCollatorWithFlattening()
    try:
        b = flat(feats)
        details["collator_with_int_labels"] = "ok: labels " + str(list(b["labels"].shape))
        if list(b["labels"].shape) != [n_rows]:
            reasons.append(f"DataCollatorWithFlattening turns the {n_rows} sequence labels into token labels of shape "
                           f"{list(b['labels'].shape)}")
    except Exception as e:  # transformers 5.17: labels[1:] on an int
        details["collator_with_int_labels"] = f"{type(e).__name__}: {e}"
        reasons.append("DataCollatorWithFlattening fails on sequence-classification features (it builds token-level "
                       f"labels, [separator_id] + labels[1:]): {type(e).__name__}: {e}")
    b = flat([{"input_ids": f["input_ids"]} for f in feats])  # no labels: the packing itself
    pad = DataCollatorWithPadding(tok)([{"input_ids": f["input_ids"]} for f in feats])
    was_training, impl0 = model.training, model.config._attn_implementation
    model.eval()
    impls = ["sdpa"]
    if device == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        impls.append("flash_attention_2")
    else:
        details["flash_attention_2"] = "not tried: flash-attn is not installed" if device == "cuda" else "no GPU"
    try:
        for impl in impls:
            try:
                model.set_attn_implementation(impl)
            except Exception as e:
                details[impl] = f"cannot set: {type(e).__name__}: {e}"
                continue
            dtype = torch.bfloat16 if impl == "flash_attention_2" else None  # flash-attn runs in 16 bits only

            def hidden(**inputs):
                with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=dtype is not None):
                    o = model(**{k: v.to(device) for k, v in inputs.items()}, output_hidden_states=True)
                return o.logits, o.hidden_states[-1].float()

            logits, hp = hidden(input_ids=b["input_ids"], position_ids=b["position_ids"])
            _, hd = hidden(input_ids=pad["input_ids"], attention_mask=pad["attention_mask"])
            # The leak test: other tokens in every sequence but the first, the same lengths. Were attention kept
            # inside each sequence, the first sequence's hidden states would not change at all.
            other = b["input_ids"].clone()
            other[0, lens[0]:] = torch.where(other[0, lens[0]:] >= 999, 999 + (other[0, lens[0]:] - 999 + 7) %
                                             (model.config.vocab_size - 999), other[0, lens[0]:])
            _, ho = hidden(input_ids=other, position_ids=b["position_ids"])
            first = hp[0, :lens[0]]
            leak = float((ho[0, :lens[0]] - first).abs().max() / first.abs().max().clamp_min(1e-6))
            worst, o = 0.0, 0
            for i, n in enumerate(lens):
                ref = hd[i, :n]
                worst = max(worst, float((hp[0, o:o + n] - ref).abs().max() / ref.abs().max().clamp_min(1e-6)))
                o += n
            details[impl] = {"logits_shape": list(logits.shape), "leak_rel_change": float(f"{leak:.3g}"),
                             "max_rel_err_vs_padded": float(f"{worst:.3g}")}
            if list(logits.shape)[0] != n_rows:
                reasons.append(f"{impl}: BertForSequenceClassification gives logits of shape {list(logits.shape)} "
                               f"for {n_rows} packed sequences: its pooler reads token 0 of each row, and a "
                               "flattened batch is one row")
            if leak > 1e-4:
                reasons.append(f"{impl}: attention crosses sequence boundaries: changing the other sequences' tokens "
                               f"changes the first sequence's hidden states (relative {leak:.3g}); BERT's "
                               "bidirectional mask ignores position_ids, and without cu_seqlens every token attends "
                               "to the whole packed batch")
    finally:
        model.set_attn_implementation(impl0)
        model.train(was_training)
    return not reasons, reasons, details


def cmd_hf(a):
    import torch
    import transformers
    from transformers import (BertConfig, BertForSequenceClassification, DataCollatorWithFlattening,
                              DataCollatorWithPadding, Trainer, TrainingArguments, set_seed)
    # loom's label order (numerical when every label is an integer), as the accuracy scripts' Trainer runs use it.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "accuracy"))
    from hf_trainer import label_order
    transformers.logging.set_verbosity_error()
    t_import = time.time() - T_START
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    gpu = torch.cuda.get_device_name(0) if cuda else "cpu"
    modes = [m for m in a.modes.split(",") if m]

    t0 = time.time()
    tok = fast_tokenizer(a.vocab)
    train_texts, train_labels = read_tsv(a.train, a.text_column, a.label_column)
    dev_texts, dev_labels = read_tsv(a.dev, a.text_column, a.label_column)
    t_read = time.time() - t0
    names = label_order(train_labels)
    ids = {n: i for i, n in enumerate(names)}

    t0 = time.time()
    tr = tok(train_texts, truncation=True, max_length=a.max_seq_len)
    dv = tok(dev_texts, truncation=True, max_length=a.max_seq_len)
    t_tok = time.time() - t0
    rows, tokens = len(train_texts), sum(len(x) for x in tr["input_ids"])

    class CountingTrainer(Trainer):
        """Counts the token slots of every training batch (pads included): the padding overhead."""
        seen_tokens = 0

        def training_step(self, model, inputs, num_items_in_batch=None):
            self.seen_tokens += inputs["input_ids"].numel()
            return super().training_step(model, inputs, num_items_in_batch)

    def accuracy(p):
        return {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())}

    def new_model(attn):
        set_seed(a.seed)
        cfg = BertConfig.from_json_file(a.config)
        cfg.num_labels = len(names)
        cfg._attn_implementation = attn
        return BertForSequenceClassification(cfg)

    runs, check_s = [], [0.0]

    def run(mode, collator, keys, strategy, attn):
        first_run = not runs
        runs.append(mode)
        t_run = time.time()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        mem = GpuMemory(GPU_BASE)
        model = new_model(attn)
        args = TrainingArguments(
            output_dir=os.path.join(a.out, f"hf-{mode}"), per_device_train_batch_size=a.batch_size,
            per_device_eval_batch_size=2 * a.batch_size, learning_rate=a.lr, num_train_epochs=a.epochs,
            weight_decay=a.weight_decay, warmup_steps=a.warmup_ratio,  # transformers 5: a float < 1 is a ratio
            lr_scheduler_type="linear", max_grad_norm=1.0, bf16=cuda, tf32=True if cuda else None,
            train_sampling_strategy=strategy, eval_strategy="no", save_strategy="no", logging_steps=500,
            report_to=[], disable_tqdm=True, seed=a.seed, dataloader_num_workers=a.workers,
            dataloader_pin_memory=cuda, dataloader_persistent_workers=False)
        trainer = CountingTrainer(model=model, args=args, train_dataset=Rows(tr, train_labels, ids, keys),
                                  eval_dataset=Rows(dv, dev_labels, ids, keys), data_collator=collator,
                                  compute_metrics=accuracy)
        t_setup = time.time() - t_run
        t0 = time.time()
        out = trainer.train()
        if cuda:
            torch.cuda.synchronize()
        train_s = time.time() - t0
        t0 = time.time()
        ev = trainer.evaluate() if a.eval else {}
        eval_s = time.time() - t0
        end = time.time()
        line = {"dataset": a.dataset, "impl": "transformers", "mode": mode, "rows": rows, "tokens": tokens,
                "ok": True, "attn": attn, "sampler": strategy, "workers": a.workers,
                "precision": "bf16" if cuda else "fp32",
                # the first run's process from its start; a later one as if it had been first
                "wall_s": round(end - T_START - check_s[0] if first_run else end - t_run + t_import + t_read + t_tok,
                                2),
                "import_s": round(t_import, 2), "read_s": round(t_read, 2), "tokenize_s": round(t_tok, 2),
                "setup_s": round(t_setup, 2), "epoch_s": round(train_s, 2), "eval_s": round(eval_s, 2),
                "train_runtime_s": round(out.metrics.get("train_runtime", float("nan")), 2),
                "steps": out.global_step, "tokens_per_s": round(tokens / train_s),
                "seq_per_s": round(rows / train_s, 1), "padded_tokens": trainer.seen_tokens,
                "pad_fraction": round(1 - tokens / trainer.seen_tokens, 4) if trainer.seen_tokens else None,
                "dev_accuracy": round(ev["eval_accuracy"], 4) if "eval_accuracy" in ev else None,
                "train_loss": round(out.training_loss, 4)}
        if cuda:
            line["torch_peak_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20)
            line["torch_peak_reserved_mib"] = round(torch.cuda.max_memory_reserved() / 2**20)
        line["peak_gpu_mib"] = mem.stop()
        line.update(gpu=gpu, torch=torch.__version__, transformers=transformers.__version__)
        emit(a.jsonl, line)
        del trainer, model
        if cuda:
            torch.cuda.empty_cache()

    for mode in modes:
        if mode not in ("padded", "packed"):
            sys.exit(f"hf_epoch.py: unknown mode {mode} (padded, packed)")
    packed_attn = None
    if "packed" in modes:
        # The check comes first: its verdict is written even if a training run then runs out of time.
        t0 = time.time()
        model = new_model("sdpa").to(device)
        ok, reasons, details = packing_check(model, tok, dev_texts, a.max_seq_len, 8, device)
        del model
        if cuda:
            torch.cuda.empty_cache()
        check_s[0] = time.time() - t0
        if ok:
            fa2 = isinstance(details.get("flash_attention_2"), dict)
            packed_attn = "flash_attention_2" if fa2 else "sdpa"
        else:
            emit(a.jsonl, {"dataset": a.dataset, "impl": "transformers", "mode": "packed (DataCollatorWithFlattening)",
                           "rows": rows, "tokens": tokens, "ok": False, "supported": False,
                           "reason": "; ".join(reasons), "checks": details, "check_s": round(check_s[0], 2),
                           "transformers": transformers.__version__})
    for mode in modes:
        if mode == "padded":
            run("padded", DataCollatorWithPadding(tok, pad_to_multiple_of=8),
                ["input_ids", "token_type_ids", "attention_mask"], "group_by_length", a.attn)
        elif packed_attn:
            run("packed", DataCollatorWithFlattening(), ["input_ids"], "random", packed_attn)


# ----------------------------------------------------------------------------------------------------------- table
def cmd_table(a):
    lines = [json.loads(l) for l in open(a.jsonl, encoding="utf-8") if l.startswith("{")]
    cols = ["dataset", "impl", "mode", "rows", "wall_s", "prep_s", "epoch_s", "eval_s", "save_s", "tokens_per_s",
            "seq_per_s", "dev_accuracy", "peak_gpu_mib"]
    heads = ["dataset", "impl", "mode", "rows", "wall s", "read+tokenize s", "epoch s", "eval s", "save s",
             "tokens/s", "seq/s", "dev acc", "peak GPU MiB"]
    out = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    notes = []
    for l in lines:
        if l.get("impl") not in ("loom", "transformers"):
            continue
        if "prep_s" not in l and "tokenize_s" in l:
            l["prep_s"] = round(l.get("read_s", 0) + l["tokenize_s"], 2)
        if not l.get("ok", True):
            why = "not supported" if l.get("supported") is False else ("timed out" if l.get("timed_out") else "failed")
            out.append(f"| {l['dataset']} | {l['impl']} | {l['mode']} | {l.get('rows', '')} | {why} |" +
                       " |" * (len(heads) - 5))
            notes.append(f"- {l['dataset']} {l['impl']} {l['mode']}: {l.get('reason') or l.get('error', '')}")
            continue
        out.append("| " + " | ".join("" if l.get(c) is None else str(l[c]) for c in cols) + " |")
    text = (a.title + "\n\n" if a.title else "") + "\n".join(out) + "\n"
    text += ("\nwall s: the whole command (loom) or process (transformers: imports, reading, tokenizing, model, "
             "epoch, dev evaluation). epoch s: model initialisation + the training steps (loom: from its "
             "'training rows' line to its last step line; transformers: trainer.train()). tokens/s and seq/s: real "
             "tokens and rows of the epoch / epoch s. save s: loom writes the model and a checkpoint with the "
             "optimizer state; the Trainer saves nothing (save_strategy=no). peak GPU MiB: nvidia-smi's device "
             "memory used, less the memory used before the run.\n")
    if notes:
        text += "\n" + "\n".join(notes) + "\n"
    open(a.md, "w", encoding="utf-8").write(text)
    print(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("count")
    for p in (c,):
        p.add_argument("--train", required=True)
        p.add_argument("--dev", required=True)
        p.add_argument("--text-column", default="text")
        p.add_argument("--vocab", required=True)
        p.add_argument("--max-seq-len", type=int, default=128)
    l = sub.add_parser("loom")
    l.add_argument("--bin", required=True)
    l.add_argument("--dataset", required=True)
    l.add_argument("--mode", required=True)
    l.add_argument("--count", required=True, help="the JSON line of `count`")
    l.add_argument("--jsonl")
    l.add_argument("--time-limit", type=float, default=0, help="kill the run after this many seconds (0: never)")
    l.add_argument("--log", help="stderr with time stamps (default: OUTPUT.log)")
    l.add_argument("args", nargs=argparse.REMAINDER)
    h = sub.add_parser("hf")
    h.add_argument("--dataset", required=True)
    h.add_argument("--train", required=True)
    h.add_argument("--dev", required=True)
    h.add_argument("--text-column", default="text")
    h.add_argument("--label-column", default="label")
    h.add_argument("--config", required=True)
    h.add_argument("--vocab", required=True)
    h.add_argument("--modes", default="padded,packed")
    h.add_argument("--epochs", type=float, default=1)
    h.add_argument("--batch-size", type=int, default=32)
    h.add_argument("--lr", type=float, default=2e-5)
    h.add_argument("--warmup-ratio", type=float, default=0.06)
    h.add_argument("--weight-decay", type=float, default=0.01)
    h.add_argument("--max-seq-len", type=int, default=128)
    h.add_argument("--seed", type=int, default=42)
    h.add_argument("--workers", type=int, default=4)
    h.add_argument("--attn", default="sdpa")
    h.add_argument("--no-eval", dest="eval", action="store_false")
    h.add_argument("--out", required=True)
    h.add_argument("--jsonl")
    t = sub.add_parser("table")
    t.add_argument("--jsonl", required=True)
    t.add_argument("--md", required=True)
    t.add_argument("--title", default="")
    a = ap.parse_args()
    {"count": cmd_count, "loom": cmd_loom, "hf": cmd_hf, "table": cmd_table}[a.cmd](a)


if __name__ == "__main__":
    main()
