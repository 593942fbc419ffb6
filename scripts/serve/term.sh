# SPDX-License-Identifier: Apache-2.0
# Sourced by the serve scripts (tests/cli/serve_cases.sh, scripts/bench/serve.sh).

# term_and_wait PID SECONDS: SIGTERM, then wait up to SECONDS for the process (a child of the calling shell) to exit.
# Sets TERM_RC to its exit status; returns 1 when it still runs.
term_and_wait() {
  local pid=$1 limit=$2
  kill -TERM "$pid"
  for _ in $(seq $((limit * 10))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && return 1
  TERM_RC=0
  wait "$pid" || TERM_RC=$?
}
