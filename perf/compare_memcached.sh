#!/usr/bin/env bash
# Network benchmark: Debian's memcached against tiercached, same load, same
# flags, one after the other; tiercached once per network loop (epoll, and
# io_uring: -o net_engine=uring). Figures only: nothing here checks speed.
#
#   perf/compare_memcached.sh            # ~6 minutes with both servers
#   perf/compare_memcached.sh --quick    # ~1 minute
#   perf/compare_memcached.sh --perf     # also perf stat + perf record on
#                                        # the server (perturbs the figures)
#   perf/compare_memcached.sh --only 100B-p1,4K-mget10
#
# Workloads (get:set 9:1, uniform keys, every key set once before each
# measured run, 16 connections, one client thread):
#   100B-p1  100B-p16  100B-mget10  4K-p1  4K-p16  4K-mget10
# (value size - pipeline depth per connection, or gets of 10 keys).
#
# For each workload, memcached, tiercached (epoll), tc-uring (tiercached
# with -o net_engine=uring): start the server on a free
# port of PORT_BASE.. (127.0.0.1 only, -t 2 -m 1024 -c 1024), run
# bench_loadgen against it, stop it by PID. bench_loadgen reads the
# server's /proc/PID/stat utime+stime at the start and end of the measured
# run (user and kernel time are also shown apart): over loopback the client saturates a core before the server does, so
# the server's CPU time per request is the steadier figure of the two.
#
# Output: a table per workload (memcached, tiercached, tiercached/memcached)
# and a markdown summary at the end, on stdout and in perf/out/net-<date>.txt,
# with bench_loadgen's RESULT lines for scripts.
#
# Environment knobs (defaults in brackets):
#   MEMCACHED      memcached binary [/usr/bin/memcached]
#   TIERCACHED     tiercached binary [build/release/tiercached]; skipped with
#                  a message when it is not there
#   URING          1 also runs tiercached on io_uring (tc-uring) [1]
#   LOADGEN        bench_loadgen binary [built into perf/out/bin]
#   DURATION       measured seconds per run [10; --quick 2]
#   REPEAT         runs per server and workload, alternating memcached and
#                  tiercached; the tables keep each server's run with the
#                  most ops/s (noise on a shared machine only slows a run
#                  down), every run's figures stay in the output [2; --quick 1]
#   KEYS           key space [100000; --quick 20000]
#   CONNS          client connections [16]
#   PROTO          text or binary (memcached's binary protocol) [text]
#   CLIENT_THREADS client threads [1]
#   SERVER_THREADS server -t [2]
#   MEM_MB         server -m [1024]
#   PORT_BASE      first port tried [21500]; 100 ports are tried
#   POOL_DIR       where tiercached's pool file (-e) goes [/dev/shm]
#   MAX_TOTAL      seconds after which remaining runs are skipped [900]
#   KEEP_PERF      1 keeps the perf.data files of --perf in perf/out [0]

set -u -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
. perf/lib.sh

quick=0
use_perf=0
only=""
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=1 ;;
    --perf) use_perf=1 ;;
    --only) only=${2:-}; shift ;;
    -h | --help)
        sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "compare_memcached.sh: unknown option $1 (see --help)" >&2
        exit 2
        ;;
    esac
    shift
done

MEMCACHED=${MEMCACHED:-/usr/bin/memcached}
TIERCACHED=${TIERCACHED:-build/release/tiercached}
if [ "$quick" = 1 ]; then
    DURATION=${DURATION:-2}
    REPEAT=${REPEAT:-1}
    KEYS=${KEYS:-20000}
else
    DURATION=${DURATION:-10}
    REPEAT=${REPEAT:-2}
    KEYS=${KEYS:-100000}
fi
CONNS=${CONNS:-16}
PROTO=${PROTO:-text}
case $PROTO in
text) proto_flag="" ;;
binary) proto_flag="--binary" ;;
*)
    echo "compare_memcached.sh: PROTO must be text or binary" >&2
    exit 2
    ;;
esac
CLIENT_THREADS=${CLIENT_THREADS:-1}
SERVER_THREADS=${SERVER_THREADS:-2}
MEM_MB=${MEM_MB:-1024}
PORT_BASE=${PORT_BASE:-21500}
POOL_DIR=${POOL_DIR:-/dev/shm}
MAX_TOTAL=${MAX_TOTAL:-900}
WARMUP_BOUND=30 # seconds bench_loadgen may spend loading the keys

out_dir=perf/out
mkdir -p "$out_dir/bin"
stamp=$(date -u +%Y%m%d-%H%M%S)
out=$out_dir/net-$stamp.txt
: >"$out"

# name|value size|pipeline|multiget
WORKLOADS="100B-p1|100|1|1
100B-p16|100|16|1
100B-mget10|100|1|10
4K-p1|4096|1|1
4K-p16|4096|16|1
4K-mget10|4096|1|10"

# ---- the load generator -------------------------------------------------
if [ -z "${LOADGEN:-}" ]; then
    # Self-contained: built alone, so a half-edited library cannot stop it.
    LOADGEN=$out_dir/bin/bench_loadgen
    if ! build_loadgen "$LOADGEN"; then
        echo "compare_memcached.sh: bench_loadgen did not build" \
            "(see $out_dir/build.log)" >&2
        exit 1
    fi
fi

# ---- servers --------------------------------------------------------------
servers="memcached"
if [ ! -x "$MEMCACHED" ]; then
    echo "compare_memcached.sh: $MEMCACHED not found (apt-get install" \
        "memcached)" >&2
    exit 1
fi
if [ -x "$TIERCACHED" ]; then
    servers="memcached tiercached"
    [ "${URING:-1}" = 1 ] && servers="$servers tc-uring"
fi

srv_pid=""
pool_file=$POOL_DIR/tiercache-net-$$.pool
perf_pids=""

stop_server() {
    local p
    for p in $perf_pids; do
        kill -INT "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    perf_pids=""
    [ -n "$srv_pid" ] || return 0
    srv_stop 50
    rm -f "$pool_file" "$pool_file.meta"
}
trap 'stop_server; exit 130' INT TERM
trap 'stop_server' EXIT

next_port=$PORT_BASE

# start_server name port: sets srv_pid; 0 when it accepts connections.
start_server() {
    local name=$1 port=$2
    local -a cmd
    case $name in
    memcached)
        cmd=("$MEMCACHED" -p "$port" -l 127.0.0.1 -t "$SERVER_THREADS"
            -m "$MEM_MB" -c 1024)
        # memcached refuses to run as root without -u
        [ "$(id -u)" = 0 ] && cmd+=(-u nobody)
        ;;
    tiercached | tc-uring)
        rm -f "$pool_file" "$pool_file.meta"
        cmd=("$TIERCACHED" -p "$port" -l 127.0.0.1 -t "$SERVER_THREADS"
            -m "$MEM_MB" -c 1024 -e "$pool_file")
        if [ "$name" = tc-uring ]; then
            cmd+=(-o net_engine=uring)
        else
            cmd+=(-o net_engine=epoll)
        fi
        # tiercached, like memcached, refuses root without -u
        [ "$(id -u)" = 0 ] && cmd+=(-u root)
        ;;
    esac
    echo "# start: ${cmd[*]}" >>"$out"
    "${cmd[@]}" >>"$out_dir/net-$stamp.server.log" 2>&1 &
    srv_pid=$!
    srv_wait_ready "$port" && return 0
    stop_server
    return 1
}

declare -A R # R[workload,server] = RESULT line

run_one() { # workload server vsize pipeline multiget
    local wl=$1 name=$2 vsize=$3 pipe=$4 mget=$5 port rc res pdata
    port=$(pick_port) || {
        log "# $wl $name: no free port in $PORT_BASE..$((PORT_BASE + 99))"
        return
    }
    next_port=$((port + 1))
    [ "$next_port" -gt $((PORT_BASE + 99)) ] && next_port=$PORT_BASE
    if ! start_server "$name" "$port"; then
        log "# $wl $name: server did not start on port $port" \
            "(see $out_dir/net-$stamp.server.log)"
        return
    fi
    if [ "$use_perf" = 1 ]; then
        pdata=$out_dir/net-$stamp-$name-$wl.perf.data
        perf stat -e task-clock,context-switches,cpu-migrations,page-faults \
            -p "$srv_pid" -o "$out_dir/net-$stamp-$name-$wl.perf-stat.txt" \
            >/dev/null 2>&1 &
        perf_pids="$!"
        perf record -F 499 -g -p "$srv_pid" -o "$pdata" >/dev/null 2>&1 &
        perf_pids="$perf_pids $!"
    fi
    res=$(timeout --signal=INT $((DURATION + WARMUP_BOUND + 20)) \
        "$LOADGEN" --host 127.0.0.1 --port "$port" --conns "$CONNS" \
        --threads "$CLIENT_THREADS" --keys "$KEYS" --value-size "$vsize" \
        --ratio 9:1 --pipeline "$pipe" --multiget "$mget" \
        --duration "$DURATION" --warmup "$WARMUP_BOUND" --seed 1 \
        --label "$name" --server-pid "$srv_pid" $proto_flag 2>&1)
    rc=$?
    printf '%s\n' "$res" | sed 's/^/  /' | tee -a "$out" | grep -v '^  RESULT'
    printf '%s\n' "$res" | grep '^RESULT' | sed "s/^RESULT /RESULT workload=$wl /" \
        >>"$out"
    [ "$rc" -eq 3 ] && log "  # $name: protocol, data or connection errors" \
        "(see above)"
    [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ] && log "  # $name: bench_loadgen" \
        "exit status $rc"
    res=$(printf '%s\n' "$res" | grep '^RESULT' | sed -n 1p)
    # keep the run with the most ops/s
    if [ -n "$res" ] && { [ -z "${R[$wl,$name]:-}" ] ||
        awk -v a="$(kv "$res" ops)" -v b="$(kv "${R[$wl,$name]}" ops)" \
            'BEGIN { exit !(a + 0 > b + 0) }'; }; then
        R[$wl,$name]=$res
    fi
    stop_server
    if [ "$use_perf" = 1 ] && [ -s "$pdata" ]; then
        log "  perf stat (server, warmup + run):"
        sed -n '/Performance counter/,$p' \
            "$out_dir/net-$stamp-$name-$wl.perf-stat.txt" | grep -v '^$' |
            sed 's/^/    /' | tee -a "$out"
        log "  perf report (server, share of samples by binary, then top" \
            "symbols by self time):"
        perf report -i "$pdata" --stdio --no-children -g none --sort dso \
            2>/dev/null | grep '%' | grep -v '^#' | sed -n 1,6p |
            sed 's/^ */    /' | tee -a "$out"
        perf report -i "$pdata" --stdio --no-children -g none \
            --sort symbol 2>/dev/null | grep '%' | grep -v '^#' | sed -n 1,25p |
            sed 's/^ */    /' | tee -a "$out"
        [ "${KEEP_PERF:-0}" = 1 ] || rm -f "$pdata" "$pdata.old"
    fi
}

table() { # workload
    local wl=$1 mc tc tu row m a b c
    mc=${R[$wl,memcached]:-}
    tc=${R[$wl,tiercached]:-}
    tu=${R[$wl,tc-uring]:-}
    log ""
    log "  $(printf '%-22s %14s %14s %8s %14s %8s' metric memcached tiercached tc/mc tc-uring tu/mc)"
    for row in "ops/s:ops" "requests/s:reqs" "p50 us:p50_us" "p99 us:p99_us" \
        "p99.9 us:p999_us" "server CPU us/req:srv_cpu_us_per_req" \
        "  user us/req:srv_user_us_per_req" \
        "  kernel us/req:srv_sys_us_per_req" \
        "server CPU us/op:srv_cpu_us_per_op" "server cores:srv_cores" \
        "client cores:cli_cores" "hit ratio:hit" "errors:errors" \
        "server errors:server_errors" "warmup s (keys set):warm_s"; do
        m=${row%%:*}
        a=$( [ -n "$mc" ] && kv "$mc" "${row#*:}" || echo -)
        b=$( [ -n "$tc" ] && kv "$tc" "${row#*:}" || echo -)
        c=$( [ -n "$tu" ] && kv "$tu" "${row#*:}" || echo -)
        log "  $(printf '%-22s %14s %14s %8s %14s %8s' "$m" "$a" "$b" "$(ratio "$a" "$b")" "$c" "$(ratio "$a" "$c")")"
    done
}

# ---- header ---------------------------------------------------------------
log "# tiercache network benchmark: memcached vs tiercached, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
log "# host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, load $(cut -d' ' -f1-3 /proc/loadavg), shared and noisy: figures, not assertions"
log "# cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
log "# commit: $(git rev-parse --short HEAD 2>/dev/null || echo none) $(git status --porcelain 2>/dev/null | grep -q . && echo '(dirty tree)')"
log "# memcached: $("$MEMCACHED" -V 2>&1 | sed -n 1p) ($MEMCACHED)"
if [ -x "$TIERCACHED" ]; then
    log "# tiercached: $TIERCACHED, pool file $pool_file"
else
    log "# tiercached: $TIERCACHED not found: tiercache skipped, memcached only"
fi
log "# servers: -l 127.0.0.1 -t $SERVER_THREADS -m $MEM_MB -c 1024, started fresh for every run"
log "# client: $LOADGEN ($PROTO protocol) --conns $CONNS --threads $CLIENT_THREADS --keys $KEYS --ratio 9:1 --duration $DURATION --warmup $WARMUP_BOUND (every key set once first, not measured); $REPEAT run(s) per server and workload"
[ "$use_perf" = 1 ] && log "# --perf: perf stat and perf record (499 Hz) run on the server: they cost CPU, figures are perturbed"

# ---- runs -------------------------------------------------------------------
t0=$SECONDS
ran=""
while IFS='|' read -r wl vsize pipe mget; do
    if [ -n "$only" ] && ! printf ',%s,' "$only" | grep -q ",$wl,"; then
        continue
    fi
    if [ $((SECONDS - t0)) -gt "$MAX_TOTAL" ]; then
        log ""
        log "=== $wl: skipped, MAX_TOTAL=$MAX_TOTAL s reached"
        continue
    fi
    log ""
    log "=== $wl: $vsize B values, get:set 9:1, pipeline $pipe, multiget $mget"
    for rep in $(seq 1 "$REPEAT"); do
        for name in $servers; do
            [ "$REPEAT" -gt 1 ] && log "  -- $name, run $rep of $REPEAT"
            run_one "$wl" "$name" "$vsize" "$pipe" "$mget"
        done
    done
    [ "$REPEAT" -gt 1 ] && log "  (best of $REPEAT runs per server by ops/s)"
    table "$wl"
    ran="$ran $wl"
done <<<"$WORKLOADS"

# ---- summary ------------------------------------------------------------------
log ""
log "## summary (markdown; mc = memcached, tc = tiercached on epoll, tu = tiercached on io_uring; ratios to memcached)"
log ""
log "| workload | metric | mc | tc | tc/mc | tu | tu/mc |"
log "| --- | --- | --- | --- | --- | --- | --- |"
for wl in $ran; do
    mc=${R[$wl,memcached]:-}
    tc=${R[$wl,tiercached]:-}
    tu=${R[$wl,tc-uring]:-}
    for k in ops p99_us srv_cpu_us_per_req srv_user_us_per_req \
        srv_sys_us_per_req; do
        a=$( [ -n "$mc" ] && kv "$mc" "$k" || echo -)
        b=$( [ -n "$tc" ] && kv "$tc" "$k" || echo -)
        c=$( [ -n "$tu" ] && kv "$tu" "$k" || echo -)
        log "| $wl | $k | $a | $b | $(ratio "$a" "$b") | $c | $(ratio "$a" "$c") |"
    done
done
log ""
log "# $(grep -c '^RESULT' "$out") RESULT lines above; total $((SECONDS - t0)) s; output in $out"
# the servers' own output: kept only when they said something
srv_log=$out_dir/net-$stamp.server.log
if [ -s "$srv_log" ]; then
    log "# server output (stdout, stderr): $srv_log"
else
    rm -f "$srv_log"
fi
