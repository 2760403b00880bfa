#!/usr/bin/env bash
# The cost of recoverability through the server: tiercached as built
# against the same tree built with -DTC_BENCH_NO_RECOVERY (item.c: no
# CRC32C, no commit-word store, no invalidation of replaced and deleted
# items; everything else identical). Figures only: nothing here checks
# speed.
#
#   perf/compare_recover.sh              # ~4 minutes
#   ROUNDS=2 DURATION=3 perf/compare_recover.sh
#
# Workloads (16 connections, pipeline 16, 100-byte values, uniform keys,
# every key set once before each measured run): set (get:set 0:1) and
# delete (get:set:delete 0:1:1: half the deletes find their key), each at
# durability=process and durability=power (PMEM_IS_PMEM_FORCE=1, so that
# libpmem runs its flushes on the /dev/shm pool). Each round runs the two
# servers one after the other, alternating which goes first; each run
# starts a server on a fresh pool file and stops it by PID.
# bench_loadgen reports ops/s and the server's user+kernel CPU per request
# (/proc/PID/stat over the measured run).
#
# Output: every run's RESULT line and, per workload, the median over the
# rounds of the new/before ratios of ops/s and CPU per request; on stdout
# and in perf/out/recover-<date>.txt.
#
# Environment knobs [defaults]: ROUNDS [4], DURATION seconds per run [5],
# KEYS [100000], PIPELINE [16], CONNS [16], SERVER_THREADS [2],
# PORT first port tried [21700], BEFORE_DIR where the "before" tree is built
# [perf/out/recover-before].

set -u -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

ROUNDS=${ROUNDS:-4}
DURATION=${DURATION:-5}
KEYS=${KEYS:-100000}
PIPELINE=${PIPELINE:-16}
CONNS=${CONNS:-16}
SERVER_THREADS=${SERVER_THREADS:-2}
PORT=${PORT:-21700}
BEFORE_DIR=${BEFORE_DIR:-$root/perf/out/recover-before}

mkdir -p perf/out
stamp=$(date -u +%Y%m%d-%H%M%S)
out=$root/perf/out/recover-$stamp.txt
pool=/dev/shm/tc-recover-$$.pool
log() { printf '%s\n' "$*" | tee -a "$out"; }

make -s build/release/tiercached build/release/perf/bench_loadgen || exit 1
# the "before" build: the working tree's tracked files, switch on
mkdir -p "$BEFORE_DIR"
git ls-files -z | tar --null -cf - -T - | tar -xf - -C "$BEFORE_DIR"
make -s -C "$BEFORE_DIR" CFLAGS=-DTC_BENCH_NO_RECOVERY \
    build/release/tiercached || exit 1
new=$root/build/release/tiercached
old=$BEFORE_DIR/build/release/tiercached
loadgen=$root/build/release/perf/bench_loadgen

# the first port from PORT on that nothing listens on
for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || break
    PORT=$((PORT + 1))
done

log "# compare_recover.sh $(date -u '+%F %T') UTC, $(git rev-parse --short HEAD)"
log "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

srv_pid=""
stop_server() {
    if [ -n "$srv_pid" ]; then
        kill "$srv_pid" 2>/dev/null
        wait "$srv_pid" 2>/dev/null
        srv_pid=""
    fi
    rm -f "$pool" "$pool.meta"
}
trap stop_server EXIT

start_server() { # binary durability
    local bin=$1 dur=$2 _
    local -a cmd=("$bin" -p "$PORT" -l 127.0.0.1 -t "$SERVER_THREADS"
        -m 1024 -c 1024 -e "$pool" -o "no_restart,durability=$dur")
    [ "$(id -u)" = 0 ] && cmd+=(-u root)
    rm -f "$pool" "$pool.meta"
    PMEM_IS_PMEM_FORCE=1 "${cmd[@]}" >/dev/null 2>&1 &
    srv_pid=$!
    for _ in $(seq 1 100); do
        kill -0 "$srv_pid" 2>/dev/null || return 1
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

kv() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | sed -n 1p; }

declare -A ops cpu
run_one() { # tag binary durability ratio round
    local tag=$1 bin=$2 dur=$3 ratio=$4 round=$5 res
    if ! start_server "$bin" "$dur"; then
        log "# $tag $dur $ratio: the server did not start"
        stop_server
        return
    fi
    res=$("$loadgen" --port "$PORT" --conns "$CONNS" --keys "$KEYS" \
        --value-size 100 --ratio "$ratio" --pipeline "$PIPELINE" \
        --duration "$DURATION" --label "$tag-$dur" --server-pid "$srv_pid" |
        grep '^RESULT')
    stop_server
    log "$res load=$(cut -d' ' -f1 /proc/loadavg)"
    ops[$tag,$dur,$ratio,$round]=$(kv "$res" ops)
    cpu[$tag,$dur,$ratio,$round]=$(kv "$res" srv_cpu_us_per_req)
}

for round in $(seq 1 "$ROUNDS"); do
    for dur in process power; do
        for ratio in 0:1 0:1:1; do
            if [ $((round % 2)) = 1 ]; then
                run_one before "$old" "$dur" "$ratio" "$round"
                run_one new "$new" "$dur" "$ratio" "$round"
            else
                run_one new "$new" "$dur" "$ratio" "$round"
                run_one before "$old" "$dur" "$ratio" "$round"
            fi
        done
    done
done

median() { sort -g | awk '{a[NR] = $1} END {
    if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2];
    else printf "%.4f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

log ""
log "| durability | load (get:set:delete) | ops/s new/before, per round | median | CPU/req new/before, per round | median |"
log "| --- | --- | --- | --- | --- | --- |"
for dur in process power; do
    for ratio in 0:1 0:1:1; do
        ro="" rc=""
        for round in $(seq 1 "$ROUNDS"); do
            ro+=$(awk -v a="${ops[before,$dur,$ratio,$round]:-0}" \
                -v b="${ops[new,$dur,$ratio,$round]:-0}" \
                'BEGIN { if (a > 0 && b > 0) printf "%.3f ", b / a }')
            rc+=$(awk -v a="${cpu[before,$dur,$ratio,$round]:-0}" \
                -v b="${cpu[new,$dur,$ratio,$round]:-0}" \
                'BEGIN { if (a > 0 && b > 0) printf "%.3f ", b / a }')
        done
        mo=$(printf '%s\n' $ro | median)
        mc=$(printf '%s\n' $rc | median)
        log "| $dur | $ratio | $ro | $mo | $rc | $mc |"
    done
done
log "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
log "# output: $out"
