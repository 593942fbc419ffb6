#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compares two safetensors files tensor by tensor (standard library only: CI has no numpy).

    compare_safetensors.py A B [--rtol 1e-5] [--noise REGEX --noise-atol X]

A and B may also be checkpoint folders: their optimizer state is then compared, its shard files (trainer_state.json's
optimizer_shards, written by any world size and ZeRO stage) merged first into one tensor per state and parameter.

Every tensor of A must be in B with the same dtype and shape, and max|a - b| <= rtol * max|a| (relative to the
tensor's largest value, so a tensor near zero is not judged by its noise). Tensors whose name matches --noise are
held to max|a - b| <= noise-atol instead: BERT's attention key bias has a gradient of exactly 0 in exact arithmetic
(softmax ignores a constant added to every score of a row), so what it gets is rounding noise, which Adam normalises
into lr-sized steps in a direction that any other summation order changes; the bound is then the sum of the learning
rates of the run, which it must not exceed. Prints each tensor that fails and the overall worst; exits 1 on any
failure.
"""
import argparse
import array
import json
import re
import struct
import sys

FORMATS = {"F32": "f", "F64": "d"}


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        fmt = FORMATS.get(info["dtype"])
        if fmt is None:
            raise SystemExit(f"{path}: {name}: dtype {info['dtype']} not supported (F32/F64)")
        lo, hi = info["data_offsets"]
        values = array.array(fmt)
        values.frombytes(body[lo:hi])
        if sys.byteorder != "little":
            values.byteswap()
        tensors[name] = (info["dtype"], info["shape"], values)
    return tensors


def unslice(slices, shape, dim, ranks):
    """The whole tensor (flat) from tensor-parallel slices {rank: flat values} split along `dim` of `shape`."""
    outer = 1
    for d in shape[:dim]:
        outer *= d
    inner = shape[dim] // ranks
    for d in shape[dim + 1 :]:
        inner *= d
    whole = array.array(slices[0].typecode, bytes(len(slices[0]) * ranks * slices[0].itemsize))
    for r, v in slices.items():
        for o in range(outer):
            whole[(o * ranks + r) * inner : (o * ranks + r + 1) * inner] = v[o * inner : (o + 1) * inner]
    return whole


def load_optimizer_state(folder):
    """A checkpoint's optimizer shards merged: 'exp_avg/<param>/<first element>' pieces -> 'exp_avg/<param>'; the
    pieces of tensor-parallel slices ('exp_avg/<param>/tp<rank>of<ranks>d<dim>/<first>') are put together whole,
    with the parameter's shape from the checkpoint's model.safetensors."""
    with open(f"{folder}/trainer_state.json") as f:
        shards = json.load(f)["optimizer_shards"]
    pieces = {}
    for name in shards:
        for key, (dtype, _, values) in load(f"{folder}/{name}").items():
            head, first = key.rsplit("/", 1)
            pieces.setdefault(head, []).append((int(first), dtype, values))
    merged = {}
    slices = {}  # head -> (ranks, dim, {rank: values})
    for head, parts in list(pieces.items()):
        m = re.fullmatch(r"(.*)/tp(\d+)of(\d+)d(\d+)", head)
        if not m:
            continue
        del pieces[head]
        parts.sort(key=lambda p: p[0])
        values = array.array(FORMATS[parts[0][1]])
        for _, _, v in parts:
            values.extend(v)
        ranks, dim, got = slices.setdefault(m.group(1), (int(m.group(3)), int(m.group(4)), {}))
        got[int(m.group(2))] = values
    if slices:
        model = load(f"{folder}/model.safetensors")
        for head, (ranks, dim, got) in slices.items():
            param = head.split("/", 1)[1]
            shape = (model.get("bert." + param) or model[param])[1]
            if sorted(got) != list(range(ranks)):
                raise SystemExit(f"{folder}: {head}: slices {sorted(got)} of {ranks}")
            values = unslice(got, shape, dim, ranks)
            merged[head] = ("F32", [len(values)], values)
    for head, parts in pieces.items():
        parts.sort(key=lambda p: p[0])
        values, at = array.array(FORMATS[parts[0][1]]), 0
        for first, _, v in parts:
            if first != at:
                raise SystemExit(f"{folder}: {head}: pieces do not fit together at element {at} "
                                 f"(the next starts at {first})")
            values.extend(v)
            at += len(v)
        merged[head] = (parts[0][1], [len(values)], values)
    return merged


def load_any(path):
    import os

    return load_optimizer_state(path) if os.path.isdir(path) else load(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--noise", default=None, help="regex of tensors whose gradient is pure rounding noise")
    ap.add_argument("--noise-atol", type=float, default=0.0)
    args = ap.parse_args()
    a, b = load_any(args.a), load_any(args.b)
    bad, worst = [], (0.0, "")
    if set(a) != set(b):
        raise SystemExit(f"tensor names differ: only in A {sorted(set(a) - set(b))}, only in B {sorted(set(b) - set(a))}")
    for name in sorted(a):
        da, sa, va = a[name]
        db, sb, vb = b[name]
        if (da, sa) != (db, sb):
            bad.append(f"{name}: {da}{sa} vs {db}{sb}")
            continue
        scale = max((abs(x) for x in va), default=0.0)
        diff = max((abs(x - y) for x, y in zip(va, vb)), default=0.0)
        if args.noise and re.search(args.noise, name):
            if not diff <= args.noise_atol:
                bad.append(f"{name}: max|a-b| = {diff:.3g} > {args.noise_atol:g} (a noise-only gradient)")
            continue
        rel = diff / scale if scale > 0 else diff
        if rel > worst[0]:
            worst = (rel, name)
        if not rel <= args.rtol:  # NaN fails too
            bad.append(f"{name}: max|a-b| = {diff:.3g}, {rel:.3g} of max|a| = {scale:.3g}")
    print(f"compare_safetensors: {len(a)} tensors, worst relative difference {worst[0]:.3g} ({worst[1] or '-'}), "
          f"tolerance {args.rtol:g}")
    for line in bad:
        print("  differs: " + line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
