#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that NVIDIA's own client, tritonclient.http (pip install 'tritonclient[http]'), works unchanged against a
running `loom-bert serve` (its KServe v2 / Triton HTTP endpoints), in both data encodings the client speaks: JSON
tensors and the binary tensor data extension. /tmp/serve/TRITON_WIRE.md describes what goes over the wire.

  check_tritonclient.py --url 127.0.0.1:PORT --model NAME [--expect-labels 2]

Prints one line per check ("ok: ..." or "FAIL: ..."); exit status 1 when any check failed.
"""
import argparse
import sys

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

TEXTS = ["it 's a charming and often affecting journey .", "bleak",
         "the acting , costumes , music , cinematography and sound are all astounding given the production 's austere "
         "locales , and the story never lets go ."]
failures = []


def check(what, cond, detail=""):
    print(f"{'ok' if cond else 'FAIL'}: {what}" + (f" ({detail})" if detail and not cond else ""), flush=True)
    if not cond:
        failures.append(what)
    return cond


def infer(client, model, binary_in, binary_out):
    """probs [3, L] and label_id [3] of TEXTS, sent and answered in the given encodings."""
    inp = httpclient.InferInput("TEXT", [len(TEXTS)], "BYTES")
    # An object array of Python str: the client encodes them as UTF-8 (binary: 4-byte length + bytes each).
    inp.set_data_from_numpy(np.array(TEXTS, dtype=np.object_), binary_data=binary_in)
    outs = [httpclient.InferRequestedOutput("probs", binary_data=binary_out),
            httpclient.InferRequestedOutput("label_id", binary_data=binary_out)]
    res = client.infer(model, [inp], outputs=outs, request_id=f"check-{int(binary_in)}{int(binary_out)}")
    return res, res.as_numpy("probs"), res.as_numpy("label_id")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True, help="HOST:PORT, no scheme (as tritonclient takes it)")
    p.add_argument("--model", required=True)
    p.add_argument("--expect-labels", type=int, help="the classifier's number of labels L")
    a = p.parse_args()
    host = a.url.split(":")[0]
    if "://" in a.url or host not in ("127.0.0.1", "localhost"):
        p.error("--url must be 127.0.0.1:PORT or localhost:PORT (no scheme)")

    client = httpclient.InferenceServerClient(url=a.url, network_timeout=60.0)
    check("is_server_live", client.is_server_live())
    check("is_server_ready", client.is_server_ready())
    check(f"is_model_ready({a.model})", client.is_model_ready(a.model))
    meta = client.get_model_metadata(a.model)
    inputs = {i.get("name"): i for i in meta.get("inputs", [])}
    check("metadata names the model", meta.get("name") == a.model, f"{meta}")
    check("metadata: input TEXT is BYTES", inputs.get("TEXT", {}).get("datatype") == "BYTES", f"{meta}")
    outputs = {o.get("name"): o for o in meta.get("outputs", [])}
    check("metadata: outputs probs FP32 and label_id INT64",
          outputs.get("probs", {}).get("datatype") == "FP32" and outputs.get("label_id", {}).get("datatype") == "INT64",
          f"{meta}")
    server = client.get_server_metadata()
    check("server metadata lists binary_tensor_data", "binary_tensor_data" in server.get("extensions", []), f"{server}")

    answers = {}
    for binary_in in (True, False):
        for binary_out in (True, False):
            tag = f"infer (input {'binary' if binary_in else 'JSON'}, output {'binary' if binary_out else 'JSON'})"
            try:
                res, probs, labels = infer(client, a.model, binary_in, binary_out)
            except InferenceServerException as e:
                check(tag, False, f"{e}")
                continue
            L = a.expect_labels or (probs.shape[1] if probs is not None and probs.ndim == 2 else -1)
            if not check(f"{tag}: probs shape [3, {L}]", probs is not None and probs.shape == (3, L),
                         f"{None if probs is None else probs.shape}"):
                continue
            check(f"{tag}: probs FP32", probs.dtype == np.float32, f"{probs.dtype}")
            check(f"{tag}: label_id shape [3] INT64", labels is not None and labels.shape == (3,)
                  and labels.dtype == np.int64, f"{None if labels is None else (labels.shape, labels.dtype)}")
            sums = probs.sum(axis=1)
            check(f"{tag}: probs rows sum to 1", bool(np.all(np.abs(sums - 1) <= 1e-4)), f"{sums}")
            check(f"{tag}: label_id is the argmax of probs", bool(np.all(labels == probs.argmax(axis=1))),
                  f"{labels} vs {probs}")
            check(f"{tag}: id echoed", res.get_response().get("id") == f"check-{int(binary_in)}{int(binary_out)}",
                  f"{res.get_response().get('id')}")
            answers[(binary_in, binary_out)] = (probs, labels)
    if len(answers) == 4:
        ref_p, ref_l = answers[(True, True)]
        for k, (pr, lab) in answers.items():
            check(f"answers agree (input binary={k[0]}, output binary={k[1]})",
                  bool(np.all(lab == ref_l) and np.max(np.abs(pr - ref_p)) <= 1e-5), f"{pr} vs {ref_p}")
    else:
        check("answers in all four encodings", False, f"only {sorted(answers)}")

    # No outputs named: every output comes back, in binary (the client sets parameters.binary_data_output).
    inp = httpclient.InferInput("TEXT", [len(TEXTS)], "BYTES")
    inp.set_data_from_numpy(np.array(TEXTS, dtype=np.object_))
    try:
        res = client.infer(a.model, [inp])
        names = [o["name"] for o in res.get_response().get("outputs", [])]
        check("infer with no outputs named returns probs, logits, label_id",
              {"probs", "logits", "label_id"} <= set(names), f"{names}")
        logits = res.as_numpy("logits")
        check("logits shape [3, L]", logits is not None and logits.ndim == 2 and logits.shape[0] == 3, f"{logits}")
    except InferenceServerException as e:
        check("infer with no outputs named", False, f"{e}")

    # [n, 1] is the shape Triton's own examples use for a batch of strings.
    inp = httpclient.InferInput("TEXT", [len(TEXTS), 1], "BYTES")
    inp.set_data_from_numpy(np.array(TEXTS, dtype=np.object_).reshape(-1, 1))
    try:
        res = client.infer(a.model, [inp], outputs=[httpclient.InferRequestedOutput("label_id")])
        lab = res.as_numpy("label_id")
        check("TEXT of shape [3, 1]", lab is not None and lab.reshape(-1).tolist() == answers.get(
            (True, True), (None, np.zeros(0)))[1].tolist(), f"{lab}")
    except InferenceServerException as e:
        check("TEXT of shape [3, 1]", False, f"{e}")

    # Errors come back as InferenceServerException with the server's {"error": ...} message.
    for what, call in (("metadata of an unknown model", lambda: client.get_model_metadata("no_such_model")),
                       ("infer on an unknown model", lambda: client.infer("no_such_model", [inp]))):
        try:
            call()
            check(f"{what} raises InferenceServerException", False, "no exception")
        except InferenceServerException as e:
            check(f"{what} raises InferenceServerException", e.status() == "404" and bool(e.message()),
                  f"status {e.status()}, message {e.message()!r}")
    check("is_model_ready(no_such_model) is False", not client.is_model_ready("no_such_model"))
    client.close()
    if failures:
        print(f"check_tritonclient: {len(failures)} checks failed", file=sys.stderr)
        return 1
    print("check_tritonclient: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
