#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Dropout twin: loom-bert train and transformers' BERT under the very same dropout masks.

  python3 dropout_twin.py LOOM_BERT MODEL_DIR TRAIN_TSV OUT_DIR [--seed 42] [--steps 8] [--device cpu|cuda]
                          [--config '{"attention_probs_dropout_prob": 0}']

twin_check.py shows the two frameworks take the same steps when nothing is random. This shows the random part, the
dropout, is the same too: loom draws every mask from Philox4x32-10 counters (seed, step, layer, site, element), so
they are recomputed here in numpy and handed to transformers' BertForSequenceClassification in place of its own
draws (embedding, attention-probability, attention-output, feed-forward and classifier dropout). One batch of 32
rows, fp32 (loom on --device, transformers on the CPU), a learning rate of 1e-12 so the weights stay put while
each step draws new masks. Loss and gradient norm must agree at every step (exit 1 if a relative difference
exceeds 1e-4). --config overrides config.json fields, to test one dropout site at a time.
"""
import json, os, shutil, subprocess, sys

import numpy as np
import torch
from transformers import BertForSequenceClassification, BertTokenizer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import twin_check  # noqa: E402


def philox(counter_lo, counter_hi, key):
    """Philox4x32-10 (include/loom/tensor/random.hpp) over arrays of 64-bit counters: 4 arrays of uint32 words."""
    m = np.uint64(0xFFFFFFFF)
    lo = counter_lo.astype(np.uint64)
    c0, c1 = lo & m, lo >> np.uint64(32)
    c2 = np.full_like(c0, np.uint64(counter_hi) & m)
    c3 = np.full_like(c0, np.uint64(counter_hi) >> np.uint64(32))
    k0, k1 = np.uint64(key) & m, np.uint64(key) >> np.uint64(32)
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & m, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & m
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m, (k1 + np.uint64(0xBB67AE85)) & m
    return c0, c1, c2, c3


def uniform16(words, half):
    """Half `half` (0: low) of each word as a multiple of 2^-16: loom's dropout draws (uniform16 in random.hpp)."""
    return ((words >> (np.uint64(16) * half)) & np.uint64(0xFFFF)).astype(np.float64) / 65536.0


def stream_offset(step, layer, site):
    return (step << 20) | (layer << 4) | site


def hidden_keep(shape, seed, step, layer, site, p):
    """Keep mask of loom's elementwise dropout: draw i is half i % 2 of word (i % 8) / 2 of Philox(counter i / 8)."""
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.uint64)
    w = np.stack(philox(i >> np.uint64(3), stream_offset(step, layer, site), seed))  # [4, n]
    word = ((i & np.uint64(7)) >> np.uint64(1)).astype(np.int64)
    u = uniform16(w[word, np.arange(n)], i & np.uint64(1))
    return torch.from_numpy((u >= np.float32(p)).reshape(shape))


def attention_keep(batch, heads, seq, seed, step, layer, p):
    """Keep mask [B, heads, S, S] of loom's attention dropout: one Philox block per 2 queries x 4 keys
    ({k, k^1, k^8, k^9}), word (q % 2) * 2 + k % 2, half (k / 8) % 2."""
    b, h, q, k = np.meshgrid(*(np.arange(n, dtype=np.uint64) for n in (batch, heads, seq, seq)), indexing="ij")
    one = np.uint64(1)
    query_pairs, key_blocks = np.uint64((seq + 1) // 2), np.uint64(4 * ((seq + 15) // 16))
    block = ((b * np.uint64(heads) + h) * query_pairs + (q >> one)) * key_blocks + \
        (k >> np.uint64(4)) * np.uint64(4) + ((k >> one) & np.uint64(3))
    w = np.stack(philox(block.ravel(), stream_offset(step, layer, 3), seed))
    word = ((q & one) * np.uint64(2) + (k & one)).ravel().astype(np.int64)
    u = uniform16(w[word, np.arange(word.size)], ((k >> np.uint64(3)) & one).ravel())
    return torch.from_numpy((u >= np.float32(p)).reshape(batch, heads, seq, seq))


class MaskedDropout(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p, self.keep = p, None

    def forward(self, x):
        return x * self.keep.to(x.dtype) / (1 - self.p) if self.p > 0 else x


def main():
    args = sys.argv[1:]
    seed, steps, device = 42, 8, "cpu"
    if "--device" in args:
        i = args.index("--device"); device = args[i + 1]; del args[i:i + 2]
    if "--seed" in args:
        i = args.index("--seed"); seed = int(args[i + 1]); del args[i:i + 2]
    if "--steps" in args:
        i = args.index("--steps"); steps = int(args[i + 1]); del args[i:i + 2]
    override = {}
    if "--config" in args:  # e.g. '{"attention_probs_dropout_prob": 0}': one dropout site at a time
        i = args.index("--config"); override = json.loads(args[i + 1]); del args[i:i + 2]
    bert, model_dir, train, out = args
    twin, data, cfg = twin_check.make_twin(model_dir, out, seed, dropout=True, rows=32, train=train)
    if override:
        cfg.update(override)
        json.dump(cfg, open(os.path.join(twin, "config.json"), "w"), indent=2)
    loom_out = os.path.join(out, "loom")
    shutil.rmtree(loom_out, ignore_errors=True)
    subprocess.run([bert, "train", "--model", twin, "--train", data, "--dev", data, "--text-column", "sentence",
                    "--label-column", "label", "--epochs", str(steps), "--batch-size", "32", "--lr", "1e-12",
                    "--warmup-ratio", "0", "--weight-decay", "0", "--max-seq-len", "64", "--seed", str(seed),
                    "--log-every", "1", "--device", device, "--precision", "fp32", "--output", loom_out],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    loom = [json.loads(l) for l in open(os.path.join(loom_out, "metrics.jsonl")) if '"train"' in l]

    import hf_trainer
    rows = hf_trainer.read(data, "sentence", None, "label")
    tok = BertTokenizer.from_pretrained(twin)
    enc = [tok(a, truncation=True, max_length=64)["input_ids"] for a, _, _ in rows]
    labels = [int(y) for _, _, y in rows]
    order = hf_trainer.loom_epoch_order(twin_check.epoch_order_program(out), [len(e) for e in enc], 32, seed, steps)

    model = BertForSequenceClassification.from_pretrained(twin, dtype=torch.float32, attn_implementation="eager")
    L, heads = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    ph, pa = cfg["hidden_dropout_prob"], cfg["attention_probs_dropout_prob"]
    pc = cfg["classifier_dropout"] if cfg.get("classifier_dropout") is not None else ph
    sites = {"bert.embeddings.dropout": (0, 0), "dropout": (L + 1, 0)}
    for l in range(L):
        sites[f"bert.encoder.layer.{l}.attention.output.dropout"] = (l + 1, 1)
        sites[f"bert.encoder.layer.{l}.output.dropout"] = (l + 1, 2)
    masked = {}
    for name, site in sites.items():
        parent, attr = model.get_submodule(name.rpartition(".")[0]) if "." in name else model, name.rpartition(".")[2]
        masked[name] = (MaskedDropout(pc if name == "dropout" else ph), site)
        setattr(parent, attr, masked[name][0])
    attention_masks = {}

    def attention(module, q, k, v, mask, scaling=None, dropout=0.0, **kw):
        w = torch.matmul(q, k.transpose(2, 3)) * scaling
        # transformers builds no mask for a registered interface: the padded keys are masked here
        w = w.masked_fill(~attention_masks["keys"][:, None, None, :], torch.finfo(w.dtype).min)
        w = torch.softmax(w, dim=-1)
        if module.training and pa > 0:
            w = w * attention_masks[module.layer_idx].to(w.dtype) / (1 - pa)
        return torch.matmul(w, v).transpose(1, 2).contiguous(), w

    ALL_ATTENTION_FUNCTIONS["loom_masks"] = attention
    model.set_attn_implementation("loom_masks")
    model.train()

    worst = 0.0
    for step in range(steps):
        batch = order[step][0]  # one batch per epoch
        S = max(len(enc[r]) for r in batch)
        ids = torch.tensor([enc[r] + [0] * (S - len(enc[r])) for r in batch])
        attn = torch.tensor([[1] * len(enc[r]) + [0] * (S - len(enc[r])) for r in batch])
        y = torch.tensor([labels[r] for r in batch])
        attention_masks["keys"] = attn.bool()
        B = len(batch)
        for name, (mod, (layer, site)) in masked.items():
            shape = (B, cfg["hidden_size"]) if layer == L + 1 else (B, S, cfg["hidden_size"])
            mod.keep = hidden_keep(shape, seed, step, layer, site, mod.p)
        for l in range(L):
            attention_masks[l] = attention_keep(B, heads, S, seed, step, l + 1, pa)
        model.zero_grad()
        out_ = model(input_ids=ids, attention_mask=attn, token_type_ids=torch.zeros_like(ids), labels=y)
        out_.loss.backward()
        norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None)).item()
        lo = loom[step]
        d = max(abs(lo["loss"] - out_.loss.item()) / abs(out_.loss.item()), abs(lo["grad_norm"] - norm) / norm)
        worst = max(worst, d)
        print(f"step {step + 1}: loss {lo['loss']:.7f} {out_.loss.item():.7f}  "
              f"grad_norm {lo['grad_norm']:.6f} {norm:.6f}")
    ok = len(loom) == steps and worst <= 1e-4
    print(json.dumps({"dropout_twin_steps": len(loom), "max_relative_difference": worst, "ok": ok}))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
