#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs everything loom needs to build, test and run its demo on Debian 12 (bookworm) or newer.
# Runs as root or through sudo; idempotent: packages already present are left alone.
set -euo pipefail

packages=(
  cmake ninja-build g++ make git pkg-config python3 python3-pip python3-venv
  libboost-mpi-dev libboost-serialization-dev openmpi-bin libopenmpi-dev
  catch2 libbenchmark-dev nlohmann-json3-dev libutf8proc-dev libopenblas-dev libcli11-dev libfmt-dev
  libcpp-httplib-dev curl  # loom-bert serve (HTTP), and its tests
  clang libclang-rt-dev
  time  # GNU time: wall time and peak memory of each compile (scripts/tu_times.sh)
  doxygen  # the API reference (scripts/docs.sh)
)
# The newest clang Debian offers (Debian 12: clang-22 from bookworm-security): the installed-package test builds the
# headers with it (tests/install).
newest_clang=$(apt-cache search --names-only '^clang-[0-9]+$' 2>/dev/null | awk '{print $1}' | sort -V | tail -n 1)
[ -z "$newest_clang" ] || packages+=("$newest_clang")
# Fuzzing runtime: Debian 12 names it per LLVM version (libclang-rt-14-dev); newer releases have the plain name too.
if ! apt-cache show libclang-rt-dev >/dev/null 2>&1; then
  packages=("${packages[@]/libclang-rt-dev/libclang-rt-14-dev}")
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present" >&2
fi
