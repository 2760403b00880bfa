#!/usr/bin/env bash
# NVMe tier benchmark: memcached's extstore against tiercached's
# flash tier, same run, same -m, same flash size, a dataset about four
# times the memory, 4 KiB values. Figures only: nothing here checks speed.
#
#   perf/compare_extstore.sh            # ~15 minutes (mostly paced loads)
#   perf/compare_extstore.sh --only uniform-p1
#
# Every run first loads every key once, paced at $LOAD_RATE sets/s:
# memcached's extstore writes items to flash from a background thread and
# evicts what that thread has not taken when sets come faster (at 2,000
# sets/s it keeps two thirds of this dataset, at 1,000 all of it), so the
# pace lets both servers start the measured run with the whole dataset.
#
# Workloads (4 KiB values):
#   uniform-ro      uniform keys, gets only, one request in flight per
#                   connection
#   zipf-ro         zipf keys (s = 0.99), gets only
#   uniform-mget10-ro  uniform keys, gets of 10 keys
#   uniform-p1      uniform keys, get:set 9:1 (the sets keep pushing data
#                   to flash during the run)
#   zipf-p1         zipf keys, 9:1
#   uniform-mget10  uniform keys, gets of 10 keys, 9:1
#
# For each workload, memcached then tiercached: start the server on a free
# port (127.0.0.1, -t $SERVER_THREADS -m $MEM_MB, a fresh flash file of
# $EXT_SIZE under $EXT_DIR with 64 MiB pages and 4 MiB write buffers),
# run perf/bench_loadgen against it, stop it by PID, remove the files.
# Both spill under memory pressure with their default rules (memcached:
# ext_item_age and its free-chunk watermarks; tiercached: the CLOCK
# eviction scan).
#
# Output: a table per workload (memcached, tiercached, ratio) and a markdown
# summary, on stdout and in perf/out/ext-<date>.txt.
#
# Environment knobs (defaults in brackets):
#   MEMCACHED      memcached binary [/usr/bin/memcached]
#   TIERCACHED     tiercached binary [build/release/tiercached]
#   DURATION       measured seconds per run [10]
#   MEM_MB         server -m [64]
#   KEYS           key space [4 x MEM_MB MiB / 4 KiB]
#   CONNS          client connections [16]
#   SERVER_THREADS server -t [2]
#   EXT_DIR        directory of the flash files [/tmp]
#   EXT_SIZE       flash bytes [1g]
#   PORT_BASE      first port tried [21600]
#   REPEAT         pairs (memcached, then tiercached) per workload [1]
#   LOAD_RATE      sets/s while loading the keys before each run [1000;
#                  0 = as fast as the server takes them]
#   MEM_CGROUP_MB  run each server inside its own cgroup-v1 memory cgroup
#                  limited to this many MiB (page cache included), so that
#                  memcached's buffered flash reads cannot be served from
#                  more RAM than tiercached may use [0 = off; needs root and
#                  /sys/fs/cgroup/memory]. Each run logs the server's RSS
#                  and the cgroup's peak charge: with -m 64 tiercached
#                  peaks at 90-95 MiB (pool file, index, 8 MiB hot pool),
#                  so 112 gives both servers the same RAM, memcached's
#                  beyond its RSS going to the page cache.
#   WORKER_SCHED   1: both servers' worker threads pinned one per CPU (of
#                  the process's set, round robin) with a $SLICE_US us
#                  scheduler slice: tiercached through its own
#                  -o pin_workers,worker_slice_us, memcached (which has no
#                  such option) from outside, on its mc-worker threads, with
#                  taskset and sched_setattr [0 = both as the kernel runs
#                  them]
#   SLICE_US       the slice for WORKER_SCHED [300]
#   SERVERS        the servers run for each workload, in order
#                  ["memcached tiercached"; "tiercached" alone, e.g. to
#                  compare its network loops]
#   TC_NET_ENGINE  tiercached's -o net_engine (epoll, uring, auto)
#                  [unset: its default, auto]; with uring a worker's flash
#                  reads go on its network ring (tc_ext_reads_net_ring)

set -u -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
. perf/lib.sh

only=""
while [ $# -gt 0 ]; do
    case $1 in
    --only) only=${2:-}; shift ;;
    -h | --help)
        sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "compare_extstore.sh: unknown option $1 (see --help)" >&2
        exit 2
        ;;
    esac
    shift
done

MEMCACHED=${MEMCACHED:-/usr/bin/memcached}
TIERCACHED=${TIERCACHED:-build/release/tiercached}
DURATION=${DURATION:-10}
MEM_MB=${MEM_MB:-64}
KEYS=${KEYS:-$((4 * MEM_MB * 256))}
CONNS=${CONNS:-16}
SERVER_THREADS=${SERVER_THREADS:-2}
EXT_DIR=${EXT_DIR:-/tmp}
EXT_SIZE=${EXT_SIZE:-1g}
PORT_BASE=${PORT_BASE:-21600}
LOAD_RATE=${LOAD_RATE:-1000}
REPEAT=${REPEAT:-1}
MEM_CGROUP_MB=${MEM_CGROUP_MB:-0}
WORKER_SCHED=${WORKER_SCHED:-0}
SLICE_US=${SLICE_US:-300}
SERVERS=${SERVERS:-memcached tiercached}
TC_NET_ENGINE=${TC_NET_ENGINE:-}
cg_dir=""
if [ "$MEM_CGROUP_MB" != 0 ]; then
    cg_dir=/sys/fs/cgroup/memory/tc-ext-bench-$$
    if ! mkdir "$cg_dir" 2>/dev/null ||
        ! echo $((MEM_CGROUP_MB << 20)) >"$cg_dir/memory.limit_in_bytes"; then
        echo "compare_extstore.sh: cannot make a memory cgroup at $cg_dir" >&2
        exit 1
    fi
fi
# seconds bench_loadgen may spend loading the keys
WARMUP_BOUND=$(awk -v k="$KEYS" -v r="$LOAD_RATE" \
    'BEGIN { print (r > 0 ? int(k / r) + 60 : 120) }')

for b in "$MEMCACHED" "$TIERCACHED"; do
    if [ ! -x "$b" ]; then
        echo "compare_extstore.sh: $b not found (apt-get install memcached;" \
            "make all)" >&2
        exit 1
    fi
done

out_dir=perf/out
mkdir -p "$out_dir/bin"
stamp=$(date -u +%Y%m%d-%H%M%S)
out=$out_dir/ext-$stamp.txt
: >"$out"

LOADGEN=$out_dir/bin/bench_loadgen
if ! build_loadgen "$LOADGEN"; then
    echo "compare_extstore.sh: bench_loadgen did not build" >&2
    exit 1
fi

# name|key distribution|pipeline|multiget|get:set
WORKLOADS="uniform-ro|uniform|1|1|1:0
zipf-ro|zipf|1|1|1:0
uniform-mget10-ro|uniform|1|10|1:0
uniform-p1|uniform|1|1|9:1
zipf-p1|zipf|1|1|9:1
uniform-mget10|uniform|1|10|9:1"

srv_pid=""
ext_file=$EXT_DIR/tc-ext-bench-$$.nvs
pool_file=/dev/shm/tc-ext-bench-$$.pool

stop_server() {
    srv_stop 100
    rm -f "$ext_file" "$pool_file" "$pool_file.meta"
    # the pool file's tmpfs pages and the flash file's page cache stay
    # charged to the cgroup until they are gone: drop them between runs
    if [ -n "$cg_dir" ]; then
        echo 1 >"$cg_dir/memory.force_empty" 2>/dev/null
        echo 0 >"$cg_dir/memory.max_usage_in_bytes" 2>/dev/null
    fi
    return 0
}
trap 'stop_server; exit 130' INT TERM
trap 'stop_server; [ -n "$cg_dir" ] && rmdir "$cg_dir" 2>/dev/null' EXIT

# WORKER_SCHED for memcached, from outside: what tiercached's
# -o pin_workers,worker_slice_us do to its own workers (src/server/server.c).
sched_mc_workers() { # pid
    local pid=$1 i=0 t
    local -a cpus
    read -r -a cpus < <(/usr/bin/python3 -c 'import os, sys
print(*sorted(os.sched_getaffinity(int(sys.argv[1]))))' "$pid")
    for t in /proc/"$pid"/task/*; do
        [ "$(cat "$t/comm" 2>/dev/null)" = mc-worker ] || continue
        taskset -pc "${cpus[i % ${#cpus[@]}]}" "${t##*/}" >/dev/null
        # struct sched_attr (56 bytes): SCHED_OTHER with a slice in ns
        /usr/bin/python3 -c 'import ctypes, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
a = ctypes.create_string_buffer(struct.pack("IIQiIQQQII", 56, 0, 0, 0, 0,
                                            int(sys.argv[2]) * 1000, 0, 0, 0, 0))
if libc.syscall(314, int(sys.argv[1]), a, 0) != 0:  # SYS_sched_setattr
    sys.exit("sched_setattr: errno %d" % ctypes.get_errno())' \
            "${t##*/}" "$SLICE_US" >>"$out" 2>&1
        i=$((i + 1))
    done
    echo "# memcached: $i mc-worker threads pinned, slice $SLICE_US us" >>"$out"
}

start_server() { # name port
    local name=$1 port=$2
    local -a cmd
    rm -f "$ext_file" "$pool_file" "$pool_file.meta"
    case $name in
    memcached)
        # memcached wants ext_page_size before ext_path
        cmd=("$MEMCACHED" -p "$port" -l 127.0.0.1 -t "$SERVER_THREADS"
            -m "$MEM_MB" -c 1024 -o
            "ext_page_size=64,ext_wbuf_size=4,ext_path=$ext_file:$EXT_SIZE")
        [ "$(id -u)" = 0 ] && cmd+=(-u root)
        ;;
    tiercached)
        cmd=("$TIERCACHED" -p "$port" -l 127.0.0.1 -t "$SERVER_THREADS"
            -m "$MEM_MB" -c 1024 -e "$pool_file" -o
            "ext_page_size=64,ext_wbuf_size=4,ext_path=$ext_file:$EXT_SIZE")
        [ "$WORKER_SCHED" = 1 ] &&
            cmd+=(-o "pin_workers,worker_slice_us=$SLICE_US")
        [ -n "$TC_NET_ENGINE" ] && cmd+=(-o "net_engine=$TC_NET_ENGINE")
        [ "$(id -u)" = 0 ] && cmd+=(-u root)
        ;;
    esac
    echo "# start: ${cmd[*]}" >>"$out"
    if [ -n "$cg_dir" ]; then
        # enter the cgroup first, so every page the server touches (its
        # pool file, its page cache) is charged there
        cmd=(sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg_dir"
            "${cmd[@]}")
        echo "# in memory cgroup $cg_dir: ${MEM_CGROUP_MB} MiB" >>"$out"
    fi
    "${cmd[@]}" >>"$out_dir/ext-$stamp.server.log" 2>&1 &
    srv_pid=$!
    if srv_wait_ready "$port"; then
        [ "$WORKER_SCHED" = 1 ] && [ "$name" = memcached ] &&
            sched_mc_workers "$srv_pid"
        return 0
    fi
    stop_server
    return 1
}

declare -A R S MIX

run_one() { # workload server dist pipe mget ratio
    local wl=$1 name=$2 dist=$3 pipe=$4 mget=$5 mix=$6 port res
    port=$(pick_port) || { log "# no free port"; return; }
    if ! start_server "$name" "$port"; then
        log "# $wl $name: server did not start (see" \
            "$out_dir/ext-$stamp.server.log)"
        return
    fi
    res=$(timeout --signal=INT $((DURATION + WARMUP_BOUND + 30)) \
        "$LOADGEN" --host 127.0.0.1 --port "$port" --conns "$CONNS" \
        --threads 1 --keys "$KEYS" --value-size 4096 --ratio "$mix" \
        --pipeline "$pipe" --multiget "$mget" --key-dist "$dist" \
        --duration "$DURATION" --warmup "$WARMUP_BOUND" \
        --warmup-rate "$LOAD_RATE" --seed 1 \
        --label "$name" --server-pid "$srv_pid" 2>&1)
    printf '%s\n' "$res" | sed 's/^/  /' | tee -a "$out" | grep -v '^  RESULT'
    R[$wl,$name]=$(printf '%s\n' "$res" | grep '^RESULT' | sed -n 1p)
    # memory: the server's resident set, and with a cgroup its peak charge
    # (page cache and the pool file's tmpfs pages included)
    local mem rss
    rss=$(awk '/^VmRSS/ {printf "%d", $2 / 1024}' "/proc/$srv_pid/status" 2>/dev/null)
    mem="rss_mib=${rss:--}"
    [ -n "$cg_dir" ] &&
        mem="$mem cgroup_peak_mib=$(($(cat "$cg_dir/memory.max_usage_in_bytes") >> 20))"
    log "  memory: $mem"
    S[$wl,$name]=$(server_stats "$port" curr_items evictions get_extstore \
        extstore_objects_written extstore_objects_read tc_ext_items \
        tc_ext_read_p99_us tc_ext_reads_net_ring get_hits get_misses)
    log "  server: ${S[$wl,$name]}"
    stop_server
}

table() {
    # two statements: a local's words are expanded before any is assigned,
    # so one would read the caller's $wl (the workload without its #pair)
    local wl=$1
    local mc=${R[$wl,memcached]:-} tc=${R[$wl,tiercached]:-} row m a b
    log ""
    log "  $(printf '%-18s %12s %12s %8s' metric memcached tiercached tc/mc)"
    for row in "ops/s:ops" "p50 us:p50_us" "p99 us:p99_us" \
        "p99.9 us:p999_us" "hit ratio:hit" "server cores:srv_cores" \
        "server CPU us/op:srv_cpu_us_per_op" "errors:errors"; do
        m=${row%%:*}
        a=$( [ -n "$mc" ] && kv "$mc" "${row#*:}" || echo -)
        b=$( [ -n "$tc" ] && kv "$tc" "${row#*:}" || echo -)
        log "  $(printf '%-18s %12s %12s %8s' "$m" "$a" "$b" "$(ratio "$a" "$b")")"
    done
}

log "# NVMe tier: memcached extstore vs tiercached, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
log "# host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); flash files in $EXT_DIR ($(df -T "$EXT_DIR" | awk 'NR==2 {print $2}'), $(lsblk -dno NAME,ROTA,MODEL "$(df "$EXT_DIR" | awk 'NR==2 {print $1}')" 2>/dev/null | sed -n 1p))"
log "# commit: $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | grep -q . && echo '(dirty tree)')"
log "# memcached: $("$MEMCACHED" -V 2>&1 | sed -n 1p); tiercached: $TIERCACHED${TC_NET_ENGINE:+ -o net_engine=$TC_NET_ENGINE}"
log "# servers: -t $SERVER_THREADS -m $MEM_MB, flash $EXT_SIZE (64 MiB pages, 4 MiB write buffers), fresh for every run"
log "# client: --conns $CONNS --keys $KEYS (x 4 KiB = $((KEYS * 4 / 1024)) MiB) --duration $DURATION, every key set once first at $LOAD_RATE sets/s"
[ -n "$cg_dir" ] && log "# each server in a cgroup-v1 memory cgroup of $MEM_CGROUP_MB MiB (page cache included)"
[ "$WORKER_SCHED" = 1 ] && log "# WORKER_SCHED=1: both servers' workers pinned one per CPU with a $SLICE_US us slice (tiercached -o pin_workers,worker_slice_us=$SLICE_US; memcached's mc-worker threads by taskset and sched_setattr)"

ran=""
while IFS='|' read -r wl dist pipe mget mix; do
    if [ -n "$only" ] && ! printf ',%s,' "$only" | grep -q ",$wl,"; then
        continue
    fi
    for r in $(seq 1 "$REPEAT"); do
        key=$wl
        [ "$REPEAT" -gt 1 ] && key="$wl#$r"
        log ""
        log "=== $key: 4 KiB values, $dist keys, get:set $mix, multiget $mget"
        for name in $SERVERS; do
            run_one "$key" "$name" "$dist" "$pipe" "$mget" "$mix"
        done
        MIX[$key]=$mix,$mget
        table "$key"
        ran="$ran $key"
    done
done <<<"$WORKLOADS"

log ""
log "## summary (markdown; ratio = tiercached / memcached)"
log ""
log "| workload | mc ops/s | tc ops/s | ratio | mc p99 us | tc p99 us | ratio | mc hit | tc hit | hits/s ratio |"
log "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for wl in $ran; do
    mc=${R[$wl,memcached]:-}
    tc=${R[$wl,tiercached]:-}
    line="| $wl"
    for k in ops p99_us; do
        a=$( [ -n "$mc" ] && kv "$mc" "$k" || echo -)
        b=$( [ -n "$tc" ] && kv "$tc" "$k" || echo -)
        line="$line | $a | $b | $(ratio "$a" "$b")"
    done
    ha=$( [ -n "$mc" ] && kv "$mc" hit || echo -)
    hb=$( [ -n "$tc" ] && kv "$tc" hit || echo -)
    # values served per second: ops x (share of ops that are get keys) x hit
    hits() {
        awk -v o="$1" -v h="$2" -v m="${MIX[$wl]}" 'BEGIN {
            if (o == "-" || h == "-") { print "-"; exit }
            split(m, a, "[:,]"); g = a[1] * a[3]; s = a[2];
            print o * g / (g + s) * h }'
    }
    line="$line | $ha | $hb | $(ratio "$(hits "$( [ -n "$mc" ] && kv "$mc" ops || echo -)" "$ha")" "$(hits "$( [ -n "$tc" ] && kv "$tc" ops || echo -)" "$hb")")"
    log "$line |"
done
log ""
log "# output in $out"
