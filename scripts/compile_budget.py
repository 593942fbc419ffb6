#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compile time of every translation unit of a ninja build, against its budget (cmake/compile_budgets.txt).

    compile_budget.py BUILD_DIR [BUDGETS]

Reads BUILD_DIR/.ninja_log (each object's last compile: start and end in ms, so wall time as the build ran it, two
compiles at a time on CI's 2 cores), prints a markdown table of every object file, slowest first, with its budget
and the total, and exits 1 naming each one over its budget (2 when the log or the budgets cannot be read)."""
import os
import re
import sys


def budgets(path):
    out = []
    try:
        for n, line in enumerate(open(path), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            try:
                pattern, seconds = line.rsplit(None, 1)
                out.append((re.compile(pattern), float(seconds)))
            except (ValueError, re.error) as e:
                sys.exit(f"compile_budget: {path}:{n}: expected 'REGEX SECONDS' ({e})")
    except OSError as e:
        print(f"compile_budget: cannot read {path}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    return out


def compile_times(log):
    times = {}
    try:
        with open(log) as f:
            if not f.readline().startswith("# ninja log v"):
                sys.exit(f"compile_budget: {log} is not a ninja log")
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) == 5 and parts[3].endswith(".o"):
                    times[parts[3]] = (int(parts[1]) - int(parts[0])) / 1000  # the last entry wins: a rebuild
    except OSError as e:
        print(f"compile_budget: cannot read {log}: {e.strerror} (a ninja build?)", file=sys.stderr)
        sys.exit(2)
    return times


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.split("\n\n")[1])
    build = sys.argv[1]
    rules = budgets(sys.argv[2] if len(sys.argv) == 3 else
                    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cmake", "compile_budgets.txt"))
    times = compile_times(os.path.join(build, ".ninja_log"))
    over = []
    print("| translation unit | seconds | budget |\n|---|---|---|")
    for obj, secs in sorted(times.items(), key=lambda kv: -kv[1]):
        budget = next((b for p, b in rules if p.search(obj)), None)
        flag = ""
        if budget is not None and secs > budget:
            over.append((obj, secs, budget))
            flag = " **over**"
        print(f"| {obj} | {secs:.1f}{flag} | {format(budget, 'g') if budget is not None else '-'} |")
    print(f"{len(times)} translation units, {sum(times.values()):.0f} s of compiling in all")
    for obj, secs, budget in over:
        print(f"compile_budget: {obj} took {secs:.1f} s, over its budget of {budget:g} s", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
