#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compile time of every translation unit of a ninja build, against its budget (cmake/compile_budgets.txt).

    compile_budget.py BUILD_DIR [BUDGETS] [--calibration-seconds S]

Reads BUILD_DIR/.ninja_log (each object's last compile: start and end in ms, so wall time as the build ran it, two
compiles at a time on CI's 2 cores), prints a markdown table of every object file (and PTX file: LOOM_CUDA_PTX_ONLY),
slowest first, with its budget and the total, and exits 1 naming each one over its budget (2 when the log, the budgets
or the calibration cannot be read or run).

Budgets are seconds on the machine that measured them, whose speed the budgets file records as the time of
cmake/compile_calibration.cpp (one copy per core at once, as ninja runs the build). CI's machines compiled loom 2.4
times slower in one run than in the one before (train_host.cpp: 55 s, then 130 s for code 12% slower to compile), so
the file is compiled here the same way and every budget is scaled by its time against the recorded one: a budget catches
a translation unit that grew, not a slower machine. --calibration-seconds gives that time as measured elsewhere (for
a log brought from another machine) instead of compiling it here."""
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CALIBRATION = os.path.join(ROOT, "cmake", "compile_calibration.cpp")


def fail(message):
    print(f"compile_budget: {message}", file=sys.stderr)
    sys.exit(2)


def budgets(path):
    """The budget rules (pattern, seconds) and the reference calibration time ('calibration SECONDS')."""
    out, reference = [], None
    try:
        for n, line in enumerate(open(path), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            try:
                pattern, seconds = line.rsplit(None, 1)
                if pattern == "calibration":
                    reference = float(seconds)
                else:
                    out.append((re.compile(pattern), float(seconds)))
            except (ValueError, re.error) as e:
                fail(f"{path}:{n}: expected 'REGEX SECONDS' or 'calibration SECONDS' ({e})")
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    if reference is None or reference <= 0:
        fail(f"{path} has no positive 'calibration SECONDS' line: the budgets' machine speed is unknown")
    return out, reference


def cxx_compiler(build):
    cache = os.path.join(build, "CMakeCache.txt")
    try:
        for line in open(cache):
            if line.startswith("CMAKE_CXX_COMPILER:"):
                return line.split("=", 1)[1].strip()
    except OSError as e:
        fail(f"cannot read {cache}: {e.strerror} (a CMake build folder?)")
    fail(f"{cache} names no CMAKE_CXX_COMPILER")


def calibrate(compiler):
    """Seconds per compile of the calibration file, one copy per core at once (the mean of their wall times)."""
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for i in range(cores):
            cmd = [compiler, "-std=gnu++20", "-O3", "-DNDEBUG", "-c", CALIBRATION, "-o", os.path.join(tmp, f"{i}.o")]
            try:
                procs.append((time.monotonic(), subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)))
            except OSError as e:
                fail(f"cannot run the build's C++ compiler {compiler}: {e.strerror}")
        times = []
        for start, p in procs:
            err = p.communicate()[1]
            times.append(time.monotonic() - start)
            if p.returncode != 0:
                fail(f"{compiler} could not compile {CALIBRATION} (exit {p.returncode}):\n{err}")
    return sum(times) / len(times)


def compile_times(log):
    times = {}
    try:
        with open(log) as f:
            if not f.readline().startswith("# ninja log v"):
                fail(f"{log} is not a ninja log")
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) == 5 and parts[3].endswith((".o", ".ptx")):
                    times[parts[3]] = (int(parts[1]) - int(parts[0])) / 1000  # the last entry wins: a rebuild
    except OSError as e:
        fail(f"cannot read {log}: {e.strerror} (a ninja build?)")
    return times


def main():
    args = sys.argv[1:]
    measured = None
    if "--calibration-seconds" in args:
        i = args.index("--calibration-seconds")
        try:
            measured = float(args[i + 1])
        except (IndexError, ValueError):
            measured = -1.0
        if not measured > 0:
            fail("--calibration-seconds takes a positive number of seconds")
        del args[i:i + 2]
    if len(args) not in (1, 2):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    build = args[0]
    rules, reference = budgets(args[1] if len(args) == 2 else os.path.join(ROOT, "cmake", "compile_budgets.txt"))
    times = compile_times(os.path.join(build, ".ninja_log"))
    if measured is None:
        measured = calibrate(cxx_compiler(build))
    scale = measured / reference
    print(f"calibration: compile_calibration.cpp took {measured:.1f} s here, {reference:g} s where the budgets were "
          f"measured: budgets x {scale:.2f}\n")
    over = []
    print("| translation unit | seconds | budget |\n|---|---|---|")
    for obj, secs in sorted(times.items(), key=lambda kv: -kv[1]):
        budget = next((b * scale for p, b in rules if p.search(obj)), None)
        flag = ""
        if budget is not None and secs > budget:
            over.append((obj, secs, budget))
            flag = " **over**"
        print(f"| {obj} | {secs:.1f}{flag} | {f'{budget:.0f}' if budget is not None else '-'} |")
    print(f"{len(times)} translation units, {sum(times.values()):.0f} s of compiling in all")
    for obj, secs, budget in over:
        print(f"compile_budget: {obj} took {secs:.1f} s, over its budget of {budget:.0f} s "
              f"({budget / scale:g} s where the budgets were measured, x {scale:.2f})", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
