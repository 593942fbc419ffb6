#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What every mpirun-driven CLI case script starts with (sourced: dp_cases.sh, dp_infer_cases.sh):
#   source mpi_case_env.sh NAME "$@"   -> CASE, LOOM_BERT, W (emptied), ROOT, fail(), MPIRUN=(mpirun ...)
[ $# = 4 ] || { echo "usage: $1.sh CASE LOOM_BERT DIR" >&2; exit 2; }
SCRIPT_NAME=$1
CASE=$2
LOOM_BERT=$(realpath "$3")
W=$4
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rm -rf "$W"
mkdir -p "$W"

fail() {
  echo "$SCRIPT_NAME $CASE: FAIL: $*" >&2
  exit 1
}

# One core per rank is all CI has (2 cores, up to 4 ranks): no nested BLAS threads, no binding to cores.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
MPIRUN=(mpirun --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
[ "$(id -u)" != 0 ] || MPIRUN+=(--allow-run-as-root)
