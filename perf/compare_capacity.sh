#!/usr/bin/env bash
# Capacity: how many items Debian's memcached and tiercached hold at the same
# -m, and what each item costs. Figures only: nothing here checks a size.
#
#   perf/compare_capacity.sh                # -m 256, values 100 300 1000
#   perf/compare_capacity.sh --quick        # -m 64
#
# For each value size, memcached then tiercached: start the server on a free
# port of PORT_BASE.. (127.0.0.1 only, -t 2 -m MEM_MB), fill it with unique
# keys (KEY_LEN bytes: "cap:" and a zero-padded hex number) and values of
# that size, as pipelined "set ... noreply" in batches, until FILL x the most
# items the memory could hold with no overhead at all have been sent (so
# both are far past capacity and evicting), then read `stats` and
# `stats slabs`, stop the server by PID. Every loop is bounded by the
# number of sets; the filler gives up after FILL_TIMEOUT seconds.
#
# Per item, out of the servers' own stats after the fill:
#   items       curr_items
#   item bytes  bytes / curr_items: header, key and value as stored
#               (memcached: its 48-byte header with CAS, key + NUL, value +
#               CRLF; tiercached: its PMEM header, key, value)
#   rounding    pool bytes per item (MEM_MB MiB / curr_items) minus item
#               bytes: the chunk rounding of the slab classes and the page
#               tails (what a 1 MiB page cannot fit)
#   meta        bytes per item that are not key or value: the stored header
#               (item bytes - key - value) plus DRAM outside -m: memcached's
#               hash table (hash_bytes), tiercached's index
#               (tc_dram_index_bytes: buckets and overflow) and slab tables
#               (tc_dram_meta_bytes: page info, free bitmaps and the 2-byte
#               word per chunk for the CLOCK bits and access time, class
#               page lists); both servers' -m counts item pages only
#
# Output: a markdown table on stdout and in perf/out/capacity-<date>.txt.
#
# Environment knobs (defaults in brackets):
#   MEMCACHED      memcached binary [/usr/bin/memcached]
#   TIERCACHED     tiercached binary [build/release/tiercached]
#   MEM_MB         -m for both [256; --quick 64]
#   SIZES          value sizes [100 300 1000]
#   KEY_LEN        key length, 10..40 [16]; the script refuses a fill that
#                  needs more keys than KEY_LEN - 4 hex digits make
#   FILL           sets sent, as a multiple of MEM_MB MiB / (key + value)
#                  [1.5]
#   TC_ARGS        extra tiercached arguments [none]
#   TTL            the sets' exptime, seconds [0: none]; both servers get
#                  it (tiercached's packed store sorts items by TTL)
#   PORT_BASE      first port tried [21700]; 100 ports are tried
#   POOL_DIR       where tiercached's pool file (-e) goes [/dev/shm]
#   FILL_TIMEOUT   seconds one fill may take [300]

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
        echo "compare_capacity.sh: unknown option $1 (see --help)" >&2
        exit 2
        ;;
    esac
    shift
done

MEMCACHED=${MEMCACHED:-/usr/bin/memcached}
TIERCACHED=${TIERCACHED:-build/release/tiercached}
if [ "$quick" = 1 ]; then
    MEM_MB=${MEM_MB:-64}
else
    MEM_MB=${MEM_MB:-256}
fi
SIZES=${SIZES:-100 300 1000}
KEY_LEN=${KEY_LEN:-16}
FILL=${FILL:-1.5}
TC_ARGS=${TC_ARGS:-}
TTL=${TTL:-0}
PORT_BASE=${PORT_BASE:-21700}
POOL_DIR=${POOL_DIR:-/dev/shm}
FILL_TIMEOUT=${FILL_TIMEOUT:-300}
PYTHON=/usr/bin/python3

for b in "$MEMCACHED" "$TIERCACHED" "$PYTHON"; do
    if [ ! -x "$b" ]; then
        echo "compare_capacity.sh: $b is not there (build it, or set" \
            "MEMCACHED / TIERCACHED)" >&2
        exit 1
    fi
done
if [ "$KEY_LEN" -lt 10 ] || [ "$KEY_LEN" -gt 40 ]; then
    echo "compare_capacity.sh: KEY_LEN must be 10..40" >&2
    exit 2
fi

out_dir=$root/perf/out
mkdir -p "$out_dir"
stamp=$(date -u +%Y%m%d-%H%M%S)
out=$out_dir/capacity-$stamp.txt

srv_pid=""
pool_file=$POOL_DIR/tiercache-cap-$$.pool

stop_server() {
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
        cmd=("$MEMCACHED" -p "$port" -U 0 -l 127.0.0.1 -t 2 -m "$MEM_MB")
        [ "$(id -u)" = 0 ] && cmd+=(-u nobody)
        ;;
    tiercached)
        rm -f "$pool_file" "$pool_file.meta"
        # shellcheck disable=SC2206
        cmd=("$TIERCACHED" -p "$port" -U 0 -l 127.0.0.1 -t 2 -m "$MEM_MB"
            -e "$pool_file" $TC_ARGS)
        [ "$(id -u)" = 0 ] && cmd+=(-u root)
        ;;
    esac
    echo "# start: ${cmd[*]}" >>"$out"
    "${cmd[@]}" >>"$out_dir/capacity-$stamp.server.log" 2>&1 &
    srv_pid=$!
    srv_wait_ready "$port" && return 0
    stop_server
    return 1
}

# fill port vsize nsets: sets, then one RESULT line from stats
fill() {
    "$PYTHON" - "$1" "$2" "$3" "$KEY_LEN" "$FILL_TIMEOUT" "$TTL" <<'EOF'
import socket, sys, time

port, vsize, nsets, klen, timeout, ttl = (int(a) for a in sys.argv[1:7])
if nsets > 16 ** (klen - 4):
    sys.exit("%d keys do not fit in %d hex digits: raise KEY_LEN" %
             (nsets, klen - 4))
s = socket.create_connection(("127.0.0.1", port), timeout=30)
value = b"v" * vsize
head = b" 0 %d %d noreply\r\n" % (ttl, vsize)
tail = value + b"\r\n"
deadline = time.monotonic() + timeout
batch = 200
sent = 0
while sent < nsets:  # bounded: nsets sets, FILL_TIMEOUT seconds
    if time.monotonic() > deadline:
        print("# fill timed out after %d sets" % sent, file=sys.stderr)
        break
    n = min(batch, nsets - sent)
    buf = b"".join(b"set " + (b"cap:%0*x" % (klen - 4, sent + i)) + head +
                   tail for i in range(n))
    s.sendall(buf)
    sent += n
    if sent % 20000 == 0:  # a round trip now and then keeps the pipe short
        s.sendall(b"mn\r\n")
        got = b""
        while not got.endswith(b"MN\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                sys.exit("connection closed during the fill")
            got += chunk


def command(cmd):
    s.sendall(cmd)
    got = b""
    for _ in range(10000):  # bounded
        if got.endswith(b"END\r\n"):
            break
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    out = {}
    for line in got.decode().split("\r\n"):
        f = line.split(" ")
        if len(f) == 3 and f[0] == "STAT":
            out[f[1]] = f[2]
    return out


st = command(b"stats\r\n")
sl = command(b"stats slabs\r\n")
chunk = "-"
for k, v in sl.items():  # the class the fill used: the one with items
    if k.endswith(":used_chunks") and int(v) > 1000:
        chunk = sl[k.replace("used_chunks", "chunk_size")]
print("RESULT sent=%d items=%s evictions=%s bytes=%s hash_bytes=%s "
      "dram_index=%s dram_meta=%s chunk=%s" %
      (sent, st.get("curr_items", "-"), st.get("evictions", "-"),
       st.get("bytes", "-"), st.get("hash_bytes", "0"),
       st.get("tc_dram_index_bytes", "0"), st.get("tc_dram_meta_bytes", "0"),
       chunk))
EOF
}

log "# compare_capacity.sh $(date -u '+%Y-%m-%d %H:%M') UTC, -m $MEM_MB," \
    "keys of $KEY_LEN bytes, fill $FILL x, TTL $TTL"
log "# memcached: $MEMCACHED ($("$MEMCACHED" -V 2>/dev/null))"
log "# tiercached: $TIERCACHED $TC_ARGS"

declare -A R
for vs in $SIZES; do
    nsets=$(awk -v m="$MEM_MB" -v k="$KEY_LEN" -v v="$vs" -v f="$FILL" \
        'BEGIN { printf "%d\n", f * m * 1048576 / (k + v) }')
    for name in memcached tiercached; do
        port=$(pick_port) || {
            log "# no free port in $PORT_BASE..$((PORT_BASE + 99))"
            exit 1
        }
        next_port=$((port + 1))
        if ! start_server "$name" "$port"; then
            log "# $name did not start (see $out_dir/capacity-$stamp.server.log)"
            continue
        fi
        res=$(fill "$port" "$vs" "$nsets" 2>>"$out")
        stop_server
        log "# $name value=$vs $res"
        R[$vs,$name]=$res
    done
done

log ""
log "| value | server | chunk | items | ratio | evictions | item B | rounding B | header B | DRAM B | meta B |"
log "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for vs in $SIZES; do
    base=$(kv "${R[$vs,memcached]:-}" items)
    for name in memcached tiercached; do
        r=${R[$vs,$name]:-}
        [ -n "$r" ] || continue
        awk -v m="$MEM_MB" -v k="$KEY_LEN" -v v="$vs" -v name="$name" \
            -v base="$base" -v items="$(kv "$r" items)" \
            -v ev="$(kv "$r" evictions)" -v bytes="$(kv "$r" bytes)" \
            -v hb="$(kv "$r" hash_bytes)" -v di="$(kv "$r" dram_index)" \
            -v dm="$(kv "$r" dram_meta)" -v chunk="$(kv "$r" chunk)" '
        BEGIN {
            if (items + 0 == 0) { printf "| %d | %s | - | - |\n", v, name; exit }
            ib = bytes / items
            round = m * 1048576 / items - ib
            hdr = ib - k - v
            dram = (name == "memcached" ? hb : di + dm) / items
            ratio = (base + 0 > 0) ? sprintf("%.2f", items / base) : "-"
            printf "| %d B | %s | %s | %d | %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f |\n",
                v, name, chunk, items, ratio, ev, ib, round, hdr, dram, hdr + dram
        }' | tee -a "$out"
    done
done
log ""
log "# ratio: items / memcached's; item B = bytes / items; rounding B ="
log "# $MEM_MB MiB / items - item B; header B = item B - key - value;"
log "# DRAM B = memcached: hash_bytes / items; tiercached:"
log "# (tc_dram_index_bytes + tc_dram_meta_bytes) / items;"
log "# meta B = header B + DRAM B"
log "# output: $out"
