#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Per-translation-unit compile cost: usage: scripts/tu_times.sh <build-dir> [regex]
# Reruns, one at a time, the compile command of every loom-bert source (and of every other source whose path matches
# the extended regex, e.g. 'tests/gpu/') from <build-dir>/compile_commands.json (configure with
# -DCMAKE_EXPORT_COMPILE_COMMANDS=ON), and prints a markdown table of wall seconds and peak resident memory, slowest
# first, with the total. Serially, because a TU's time is only comparable when nothing else competes for the cores;
# each compile takes the lock LOOM_BUILD_LOCK (default /tmp/loom-build.lock) so that builds run by others on the same
# machine through `flock` wait for it rather than skew it. Peak memory is that of the largest single process
# (GNU time's %M: for nvcc, the biggest of cicc, ptxas and the host compiler), which is what decides whether -jN fits.
set -euo pipefail
build=${1:?usage: $0 <build-dir> [regex]}
extra=${2:-}
db="$build/compile_commands.json"
[ -f "$db" ] || { echo "tu_times: $db missing (configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "tu_times: /usr/bin/time missing (Debian package 'time'; scripts/setup.sh)" >&2; exit 2; }
lock=${LOOM_BUILD_LOCK:-/tmp/loom-build.lock}
root=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")

# One line per TU: directory, output object, source, command (tab-separated; the command is a shell string).
mapfile -t entries < <(python3 - "$db" "$extra" <<'EOF'
import json, re, shlex, sys
db, extra = sys.argv[1], sys.argv[2]
for e in json.load(open(db)):
    f = e["file"]
    if "/examples/loom-bert/" not in f and not (extra and re.search(extra, f)):
        continue
    cmd = e.get("command") or shlex.join(e["arguments"])
    args = shlex.split(cmd)
    out = e.get("output") or (args[args.index("-o") + 1] if "-o" in args else "")
    print("\t".join([e["directory"], out, f, cmd]))
EOF
)
((${#entries[@]})) || { echo "tu_times: no translation unit matched" >&2; exit 1; }

rows=()
total=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for entry in "${entries[@]}"; do
  IFS=$'\t' read -r dir out src cmd <<<"$entry"
  [ -n "$out" ] && mkdir -p "$dir/$(dirname "$out")"
  name=${src#"$root/"}
  echo "tu_times: $name" >&2
  # time's own figures go to $log (-o), so the compiler's diagnostics stay on stderr.
  if ! (cd "$dir" && flock "$lock" /usr/bin/time -o "$log" -f '%e %M' sh -c "$cmd"); then
    echo "tu_times: $name failed to compile" >&2
    exit 1
  fi
  read -r secs kib < <(tail -n1 "$log")
  total=$(awk -v a="$total" -v b="$secs" 'BEGIN { printf "%.1f", a + b }')
  rows+=("$(printf '%s\t%s\t%d' "$secs" "$name" $((kib / 1024)))")
done

echo "| translation unit | wall s | peak RSS MiB |"
echo "|---|---:|---:|"
printf '%s\n' "${rows[@]}" | sort -t$'\t' -k1,1 -g -r | awk -F'\t' '{ printf "| %s | %.1f | %d |\n", $2, $1, $3 }'
echo "| **total (serial)** | **$total** | |"
