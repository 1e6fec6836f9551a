#!/usr/bin/env bash
# Runs pytest (default: the whole suite) while busy loops keep every core busy, to
# shake out tests that only pass when the machine is quiet.
#
#   scripts/test-under-load.sh                      # the whole suite
#   scripts/test-under-load.sh tests/trainer -x     # any pytest arguments
#   HOGS=4 scripts/test-under-load.sh tests/trainer # more busy loops than cores
#
# Each hog is a plain Python loop (no stress-ng needed) that also stops by itself once
# this script is gone, so even a killed script leaves none behind.
set -euo pipefail
cd "$(dirname "$0")/.."

hogs=${HOGS:-$(nproc)}
pids=()
stop_hogs() {
    ((${#pids[@]})) || return 0
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
}
trap stop_hogs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for _ in $(seq "$hogs"); do
    python3 -c '
import os
parent = os.getppid()
while os.getppid() == parent:
    pass
' &
    pids+=("$!")
done
echo "test-under-load: ${hogs} busy loops on $(nproc) cores (pids ${pids[*]})" >&2

started=$SECONDS
status=0
.venv/bin/pytest "$@" || status=$?
echo "test-under-load: pytest exited ${status} after $((SECONDS - started)) s under load" >&2
exit "$status"
