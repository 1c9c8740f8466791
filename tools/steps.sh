#!/usr/bin/env bash
# Runs `make STEP` for each STEP in order and prints how long each took, then the total: the
# per-step table of `make test` (and so of `.ci/run`). Stops at the first failing step, with
# the table so far and that step's exit status.
#
#   tools/steps.sh STEP...
set -uo pipefail

make="${MAKE:-make}"
names=()
secs=()
table() {
    local total=0 i
    echo "== time per step"
    for i in "${!names[@]}"; do
        printf '   %-14s %5d s\n' "${names[$i]}" "${secs[$i]}"
        total=$((total + secs[i]))
    done
    printf '   %-14s %5d s\n' total "$total"
}
for step in "$@"; do
    start=$(date +%s)
    "$make" --no-print-directory "$step"
    status=$?
    names+=("$step")
    secs+=($(($(date +%s) - start)))
    if [ "$status" -ne 0 ]; then
        table
        echo "== step $step failed (exit $status)"
        exit "$status"
    fi
done
table
