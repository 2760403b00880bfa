#!/usr/bin/env bash
# Run test binaries one after the other and summarise.
#
#   tests/run_tests.sh [LABEL] BINARY...
#
# LABEL (default "unit") is taken from the first argument when that is not an
# executable file. Each binary runs under `timeout` (TEST_TIMEOUT seconds,
# default 900: a bound against hangs, far above a run on a loaded machine)
# and passes when it exits 0. Its output is printed as it runs.
# The last line is exactly "LABEL: N passed, N failed" (N counts binaries);
# the exit status is non-zero when any binary failed or none was given.
set -uo pipefail

label=unit
if [ $# -gt 0 ] && ! { [ -f "$1" ] && [ -x "$1" ]; }; then
    label=$1
    shift
fi

timeout_s=${TEST_TIMEOUT:-900}
passed=0
failed=0
failed_names=()

if [ $# -eq 0 ]; then
    echo "run_tests: $label: no test binaries given" >&2
fi

for bin in "$@"; do
    echo "=== $label: $bin"
    if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then
        echo "--- FAIL $bin (not an executable file)"
        failed=$((failed + 1))
        failed_names+=("$bin")
        continue
    fi
    start=$(date +%s)
    # --kill-after: a test that ignores SIGTERM is killed 10 s later.
    timeout --kill-after=10 "$timeout_s" "$bin"
    rc=$?
    secs=$(($(date +%s) - start))
    if [ "$rc" -eq 0 ]; then
        echo "--- PASS $bin (${secs}s)"
        passed=$((passed + 1))
    else
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            why="timed out after ${timeout_s}s"
        elif [ "$rc" -gt 128 ]; then
            why="killed by signal $((rc - 128))"
        else
            why="exit status $rc"
        fi
        echo "--- FAIL $bin ($why, ${secs}s)"
        failed=$((failed + 1))
        failed_names+=("$bin")
    fi
done

if [ "$failed" -gt 0 ]; then
    echo "failed:"
    printf '  %s\n' "${failed_names[@]}"
fi
echo "$label: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ $# -gt 0 ]
