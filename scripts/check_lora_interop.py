#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that LoRA adapters saved by loom load in PEFT and give loom's logits.

  python3 scripts/check_lora_interop.py DIR [--tol 1e-5]
  python3 scripts/check_lora_interop.py --run BUILD/tests/unit/models/models_tests [--keep DIR]

DIR holds one folder per case, each with what loom::bert::save_lora_adapter wrote (adapter_config.json,
adapter_model.safetensors, whose base_model_name_or_path names the base checkpoint) and loom_outputs.safetensors
(input_ids, token_type_ids, attention_mask and loom's fp32 logits). With --run, the folders are made first by
running the models_tests case tagged [lora][save] with LOOM_LORA_INTEROP_DIR set.
For each case: transformers loads the base model, peft.PeftModel.from_pretrained adds the adapter, and the logits
(eval mode, fp32) must match loom's within --tol. Also checks that PEFT adapted exactly the modules loom did.
Exit status 0 when every case matches.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import BertForSequenceClassification


def check_case(d, tol):
    import json
    conf = json.load(open(os.path.join(d, "adapter_config.json")))
    base = BertForSequenceClassification.from_pretrained(conf["base_model_name_or_path"], dtype=torch.float32)
    model = PeftModel.from_pretrained(base, d).eval()
    out = load_file(os.path.join(d, "loom_outputs.safetensors"))
    with torch.no_grad():
        logits = model(input_ids=out["input_ids"], token_type_ids=out["token_type_ids"],
                       attention_mask=out["attention_mask"]).logits
    err = (logits - out["logits"]).abs().max().item()
    # The modules PEFT wrapped, against the adapter tensors loom wrote.
    wrapped = sorted(n for n, m in model.named_modules() if hasattr(m, "lora_A") and len(m.lora_A) > 0)
    saved = sorted({k.replace("base_model.model.", "").rsplit(".lora_", 1)[0]
                    for k in load_file(os.path.join(d, "adapter_model.safetensors")) if ".lora_" in k})
    wrapped = [w.replace("base_model.model.", "") for w in wrapped]
    same_modules = wrapped == saved
    ok = err <= tol and same_modules
    print(f"{os.path.basename(d)}: target_modules {conf['target_modules']!r}, {len(saved)} adapted modules"
          f"{'' if same_modules else ' (PEFT wrapped a different set: ' + str(wrapped) + ')'}, "
          f"max |logit difference| {err:.3e} -> {'ok' if ok else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--run", help="models_tests executable that writes the adapters")
    ap.add_argument("--keep", help="with --run: write the adapters here (kept) instead of a temporary folder")
    ap.add_argument("--tol", type=float, default=1e-5)
    args = ap.parse_args()
    if not args.dir and not args.run:
        ap.error("give DIR or --run")
    tmp = None
    root = args.dir
    if args.run:
        root = args.keep or (tmp := tempfile.mkdtemp(prefix="loom_lora_interop_"))
        env = dict(os.environ, LOOM_LORA_INTEROP_DIR=root)
        subprocess.run([args.run, "[lora][save]"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    cases = sorted(os.path.join(root, c) for c in os.listdir(root)
                   if os.path.exists(os.path.join(root, c, "loom_outputs.safetensors")))
    if not cases:
        print(f"no adapter folders with loom_outputs.safetensors in {root}")
        return 1
    ok = all([check_case(c, args.tol) for c in cases])
    if tmp:
        import shutil
        shutil.rmtree(tmp)
    print(f"peft: {len(cases)} loom adapters {'load and match' if ok else 'DO NOT all match'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
