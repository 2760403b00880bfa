#!/usr/bin/env bash
# The NVMe store's read path against fio on the same file: 4 KiB random
# reads at iodepth 1, 8, 32, 128 (fio: ioengine=io_uring, direct=1; the
# store: nvs_read_prep/submit/reap through one ring; fio over the bytes
# the records were written to, never the fallocated rest that reads as
# zeros without device I/O), alternating rounds,
# median IOPS and the ratio store/fio, device reads per read and the
# device queue depth (aqu-sz) for both, and CPU per read for both (user +
# system: the store's reading thread by getrusage, fio's job from its
# usr/sys percent); then the submission-batching knob.
# Figures only, never assertions. See perf/bench_nvs.c for what is timed.
#
#   perf/compare_fio.sh
#
# Environment knobs (defaults in brackets):
#   NVS_BENCH_PATH     the store file, on a disk (not tmpfs) [/tmp/tc_bench_nvs.dat]
#   NVS_BENCH_SIZE     bytes of the file [2147483648, 2 GiB]
#   NVS_BENCH_SECONDS  seconds per point [3]
#   NVS_BENCH_ROUNDS   fio/store rounds per depth, medians kept [3]
# Output: stdout and perf/out/nvs_latest.txt. The file is removed at the end.
set -u -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
mkdir -p perf/out
out=perf/out/nvs_latest.txt

path=${NVS_BENCH_PATH:-/tmp/tc_bench_nvs.dat}
size=${NVS_BENCH_SIZE:-2147483648}
secs=${NVS_BENCH_SECONDS:-3}
rounds=${NVS_BENCH_ROUNDS:-3}

if ! command -v fio >/dev/null 2>&1; then
    echo "compare_fio: fio is not installed (Debian package fio, in .ci/deps)" >&2
    exit 1
fi
make -s build/release/perf/bench_nvs || exit 1

free=$(df -B1 --output=avail "$(dirname "$path")" | tail -1 | tr -d ' ')
if [ "$free" -lt $((size + (1 << 30))) ]; then
    echo "compare_fio: $(dirname "$path") has $((free >> 20)) MiB free; $((size >> 20)) MiB plus 1 GiB of slack needed (set NVS_BENCH_SIZE)" >&2
    exit 1
fi

{
    echo "# compare_fio $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# commit $(git rev-parse --short HEAD 2>/dev/null || echo none), $(fio --version), kernel $(uname -r)"
    echo "# disk: $(df --output=source "$(dirname "$path")" | tail -1) ($(stat -f -c %T "$(dirname "$path")"))"
    build/release/perf/bench_nvs --path "$path" --size "$size" \
        --seconds "$secs" --rounds "$rounds" --fio --cleanup
    echo "# done $(date -u '+%H:%M:%S UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
} 2>&1 | tee "$out"
