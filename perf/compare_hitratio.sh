#!/usr/bin/env bash
# Hit ratio of the packed store's evictions against the slabs' CLOCK, side
# by side in one run. Figures only: nothing here checks a ratio.
#
#   perf/compare_hitratio.sh              # -m 32, 1M keys, zipf 0.99
#   perf/compare_hitratio.sh --quick      # 10 s measured per run
#
# For each round (ROUNDS, the configurations alternating within a round),
# each configuration: start build/release/tiercached (127.0.0.1, a free
# port from PORT_BASE, -t 2 -m MEM_MB, its own pool file), run
# bench_loadgen against it: --key-dist zipf over KEYS keys (several times
# what MEM_MB holds), values VSIZE bytes, gets:sets RATIO, a warm-up that
# sets every key once, then DURATION measured seconds; read its hit ratio
# (hits / keys asked) and the server's eviction stats, stop it by PID.
#   merge   -o packed_item_max=1024 (-o packed_evict=merge, the default)
#   fifo    -o packed_item_max=1024 -o packed_evict=fifo
#   off     no packed store: slab chunks, evicted by CLOCK
# Output: one line per run and the median hit ratio per configuration, on
# stdout and in perf/out/hitratio-<date>.txt.
#
# Environment knobs [defaults]: TIERCACHED [build/release/tiercached],
# MEM_MB [32], KEYS [1000000], VSIZE [100], ZIPF_S [0.99], RATIO [9:1],
# DURATION [30; --quick 10], ROUNDS [2], CONFIGS [merge fifo off],
# PORT_BASE [22600], POOL_DIR [/dev/shm].

set -u -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
. perf/lib.sh

quick=0
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=1 ;;
    -h | --help)
        sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "compare_hitratio.sh: unknown option $1 (see --help)" >&2
        exit 2
        ;;
    esac
    shift
done

TIERCACHED=${TIERCACHED:-build/release/tiercached}
MEM_MB=${MEM_MB:-32}
KEYS=${KEYS:-1000000}
VSIZE=${VSIZE:-100}
ZIPF_S=${ZIPF_S:-0.99}
RATIO=${RATIO:-9:1}
if [ "$quick" = 1 ]; then
    DURATION=${DURATION:-10}
else
    DURATION=${DURATION:-30}
fi
ROUNDS=${ROUNDS:-2}
CONFIGS=${CONFIGS:-merge fifo off}
PORT_BASE=${PORT_BASE:-22600}
POOL_DIR=${POOL_DIR:-/dev/shm}

if [ ! -x "$TIERCACHED" ]; then
    echo "compare_hitratio.sh: $TIERCACHED is not there (make all)" >&2
    exit 1
fi

out_dir=$root/perf/out
mkdir -p "$out_dir"
stamp=$(date -u +%Y%m%d-%H%M%S)
out=$out_dir/hitratio-$stamp.txt
loadgen=$out_dir/bench_loadgen-hitratio
build_loadgen "$loadgen" || {
    echo "compare_hitratio.sh: bench_loadgen did not build" \
        "(see $out_dir/build.log)" >&2
    exit 1
}

srv_pid=""
pool_file=$POOL_DIR/tiercache-hit-$$.pool
stop_server() {
    srv_stop 50
    rm -f "$pool_file" "$pool_file.meta"
}
trap 'stop_server; exit 130' INT TERM
trap 'stop_server' EXIT
next_port=$PORT_BASE

# start_server config port: sets srv_pid; 0 when it accepts connections.
start_server() {
    local -a cmd=("$TIERCACHED" -p "$2" -U 0 -l 127.0.0.1 -t 2 -m "$MEM_MB"
        -e "$pool_file")
    case $1 in
    merge) cmd+=(-o packed_item_max=1024 -o packed_evict=merge) ;;
    fifo) cmd+=(-o packed_item_max=1024 -o packed_evict=fifo) ;;
    off) ;;
    esac
    [ "$(id -u)" = 0 ] && cmd+=(-u root)
    rm -f "$pool_file" "$pool_file.meta"
    echo "# start: ${cmd[*]}" >>"$out"
    "${cmd[@]}" >>"$out_dir/hitratio-$stamp.server.log" 2>&1 &
    srv_pid=$!
    srv_wait_ready "$2" && return 0
    stop_server
    return 1
}

log "# compare_hitratio.sh $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores," \
    "load: $(cut -d' ' -f1-3 /proc/loadavg)"
log "# -m $MEM_MB, $KEYS keys, zipf $ZIPF_S, $VSIZE-byte values," \
    "gets:sets $RATIO, $DURATION s measured after a warm-up, $ROUNDS rounds"
declare -A hits
for round in $(seq 1 "$ROUNDS"); do
    for cfg in $CONFIGS; do
        port=$(pick_port) || {
            log "# no free port"
            exit 1
        }
        next_port=$((port + 1))
        [ "$next_port" -gt $((PORT_BASE + 99)) ] && next_port=$PORT_BASE
        start_server "$cfg" "$port" || {
            log "# $cfg: the server did not start"
            continue
        }
        res=$("$loadgen" --port "$port" --conns 8 --threads 1 --pipeline 8 \
            --keys "$KEYS" --value-size "$VSIZE" --ratio "$RATIO" \
            --key-dist zipf --zipf-s "$ZIPF_S" --duration "$DURATION" \
            --warmup on --label "$cfg" 2>>"$out" | grep '^RESULT')
        st=$(server_stats "$port" curr_items evictions packed_segments \
            packed_bytes_live packed_bytes_dead packed_items_merged \
            packed_copies packed_segments_evicted packed_segments_compacted \
            packed_cas_lifted cmd_set)
        stop_server
        hit=$(kv "$res" hit)
        hits[$cfg]="${hits[$cfg]:-} $hit"
        log "round $round $cfg: hit=$hit ops=$(kv "$res" ops)$st"
    done
done
for cfg in $CONFIGS; do
    # shellcheck disable=SC2086
    med=$(printf '%s\n' ${hits[$cfg]} | sort -n | awk '{ v[NR] = $1 }
        END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
              else printf "%.4f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    log "median $cfg: hit=$med (runs:${hits[$cfg]})"
done
