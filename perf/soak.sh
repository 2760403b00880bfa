#!/usr/bin/env bash
# Soak: SOAK_SECONDS (600) of mixed load against a started release
# tiercached, every value read checked by a shadow model (perf/soak.py).
# Not part of CI or `make check`: run it by hand, `make soak`, preferably
# under nice on a shared machine:
#
#   make soak                       # 10 minutes
#   SOAK_SECONDS=60 perf/soak.sh    # a short one
#
# The server: 127.0.0.1 on a free port, -m $MEM_MB (32) with its pool file
# in /dev/shm, an NVMe tier file of $EXT_SIZE (1g) under $EXT_DIR (/tmp;
# not tmpfs) with 16 MiB segments, the DRAM hot pool on (4 MiB) with a low
# hot_write_rate (50/s) so the hot keys of the load get there. The load
# (perf/soak.py): a dataset many times -m (values of 64 B to 40 KB, the
# size band moving every SOAK_SECONDS/10), so it evicts and spills from the
# first minute; a few hot keys written hundreds of times a second; deletes,
# add/replace/touch; flush_all every ~SOAK_SECONDS/6 and cache_memlimit
# halved and restored every SOAK_SECONDS/8; `slabs reassign` and `slabs
# automove` are tried (tiercached answers ERROR: it moves pages by itself).
#
# Fails (exit 1) when: a value read is wrong (see perf/soak.py for what
# the model allows), a protocol error, the server's RSS grows after
# warm-up (last-quarter max more than RSS_TOLERANCE% (10) above the
# second-quarter max; runs under 120 s are not judged), the server logs an error or warning line, dies, or
# does not stop cleanly (exit status 0) on SIGTERM.
#
# Output: perf/out/soak-<date>.txt (the report), .json (every figure and
# the RSS and stats series), .server.log (the server's stderr).
#
# Knobs (environment, defaults in brackets): SOAK_SECONDS [600], MEM_MB
# [32], EXT_DIR [/tmp], EXT_SIZE [1g], SERVER_THREADS [4], SOAK_WORKERS [3]
# (load processes), SOAK_CONNS [4] (connections per process), SOAK_DEPTH
# [8] (requests in flight per connection), SOAK_KEYS [90000], SOAK_SEED
# [1], RSS_TOLERANCE [10], TIERCACHED [build/release/tiercached, built
# when missing], PORT_BASE [22600].

set -u -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

SOAK_SECONDS=${SOAK_SECONDS:-600}
MEM_MB=${MEM_MB:-32}
EXT_DIR=${EXT_DIR:-/tmp}
EXT_SIZE=${EXT_SIZE:-1g}
SERVER_THREADS=${SERVER_THREADS:-4}
SOAK_WORKERS=${SOAK_WORKERS:-3}
SOAK_CONNS=${SOAK_CONNS:-4}
SOAK_DEPTH=${SOAK_DEPTH:-8}
SOAK_KEYS=${SOAK_KEYS:-90000}
SOAK_SEED=${SOAK_SEED:-1}
RSS_TOLERANCE=${RSS_TOLERANCE:-10}
TIERCACHED=${TIERCACHED:-build/release/tiercached}
PORT_BASE=${PORT_BASE:-22600}
PY=/usr/bin/python3

if [ ! -x "$TIERCACHED" ]; then
    make --no-print-directory "$TIERCACHED" >/dev/null ||
        { echo "soak: cannot build $TIERCACHED" >&2; exit 1; }
fi

out_dir=perf/out
mkdir -p "$out_dir"
stamp=$(date -u +%Y%m%d-%H%M%S)
out=$out_dir/soak-$stamp.txt
srv_log=$out_dir/soak-$stamp.server.log
json=$out_dir/soak-$stamp.json
pool=/dev/shm/tc-soak-$$.pool
ext=$EXT_DIR/tc-soak-$$.nvs
srv_pid=""
log() { printf '%s\n' "$*" | tee -a "$out"; }

cleanup() {
    if [ -n "$srv_pid" ] && kill -0 "$srv_pid" 2>/dev/null; then
        kill -KILL "$srv_pid" 2>/dev/null
        wait "$srv_pid" 2>/dev/null
    fi
    rm -f "$pool" "$ext"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_busy() { ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }
port=""
for p in $(seq "$PORT_BASE" $((PORT_BASE + 199))); do
    port_busy "$p" || { port=$p; break; }
done
[ -n "$port" ] || { echo "soak: no free port from $PORT_BASE" >&2; exit 1; }

cmd=("$TIERCACHED" -p "$port" -l 127.0.0.1 -t "$SERVER_THREADS" -m "$MEM_MB"
    -c 1024 -e "$pool" -v
    -o "ext_path=$ext:$EXT_SIZE,ext_page_size=16,ext_wbuf_size=4"
    -o "hot_pool_size=4m,hot_write_rate=50")
# tiercached, like memcached, refuses root without -u
[ "$(id -u)" = 0 ] && cmd+=(-u root)
: >"$out"
log "# soak: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git rev-parse --short HEAD 2>/dev/null)$(git status --porcelain 2>/dev/null | grep -q . && echo ' (dirty tree)')"
log "# host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), nice $(nice); flash file in $EXT_DIR ($(df -T "$EXT_DIR" | awk 'NR==2 {print $2}'))"
log "# server: ${cmd[*]}"
"${cmd[@]}" >"$srv_log" 2>&1 &
srv_pid=$!
up=0
for _ in $(seq 1 100); do
    kill -0 "$srv_pid" 2>/dev/null || break
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then up=1; break; fi
    sleep 0.1
done
if [ "$up" != 1 ]; then
    log "soak: FAIL: the server did not start (see $srv_log)"
    cat "$srv_log" >&2
    exit 1
fi

fail=0
timeout --signal=INT $((${SOAK_SECONDS%.*} + 300)) \
    "$PY" perf/soak.py --port "$port" --server-pid "$srv_pid" \
    --mem-mb "$MEM_MB" --seconds "$SOAK_SECONDS" --workers "$SOAK_WORKERS" \
    --conns "$SOAK_CONNS" --depth "$SOAK_DEPTH" --keys "$SOAK_KEYS" \
    --seed "$SOAK_SEED" --rss-tolerance "$RSS_TOLERANCE" --json "$json" \
    2>&1 | tee -a "$out"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || { log "soak: the load generator failed (status $rc)"; fail=1; }

if ! kill -0 "$srv_pid" 2>/dev/null; then
    log "soak: the server died during the run"
    fail=1
else
    kill -TERM "$srv_pid"
    for _ in $(seq 1 300); do
        kill -0 "$srv_pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$srv_pid" 2>/dev/null; then
        log "soak: the server did not stop within 30 s of SIGTERM"
        fail=1
    else
        wait "$srv_pid"
        src=$?
        srv_pid=""
        [ "$src" = 0 ] || { log "soak: the server exited with status $src"; fail=1; }
    fi
fi

# Error lines: the logger's error and warn levels, and what a crash or a
# sanitizer would print.
bad=$(grep -E -i 'tiercache: (error|warn)|assert|sanitizer|runtime error|segmentation|abort|fatal' "$srv_log")
if [ -n "$bad" ]; then
    log "soak: error lines in the server's log ($srv_log):"
    printf '%s\n' "$bad" | sed -n 1,20p | sed 's/^/  /' | tee -a "$out"
    fail=1
else
    log "soak: server log: $(wc -l <"$srv_log") lines, no error or warning line"
fi
log "# report: $out, figures: $json, server log: $srv_log"
if [ "$fail" = 0 ]; then log "soak: PASS"; else log "soak: FAIL"; fi
exit "$fail"
