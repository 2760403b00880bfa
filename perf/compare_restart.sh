#!/usr/bin/env bash
# Restart time, tiercached against memcached's own -e restart, on the same
# data: KEYS_PER_GIB items of VALUE_SIZE-byte values per GiB of -m, filled
# by bench_loadgen (every key set once).
#
#   tiercached  clean: SIGTERM (the CAS counter saved beside the pool),
#               start again on the same -e file; crash: kill -9, start
#               again (both starts scan the pool)
#   memcached   SIGUSR1 (its .meta written), wait past the second it
#               stopped in (it refuses to restore within it), start again
#
# A restart's time: from the exec to the first "stats" answered, with
# curr_items as before; and the server's CPU time (user + system) by then,
# which a machine shared with other work stretches less than wall time.
# Prints one line per run and a table; asserts no speed.
#
# Usage: perf/compare_restart.sh [GiB ...]          (default: 1 4)
# Env:   TIERCACHED (build/release/tiercached), MEMCACHED (/usr/bin/memcached),
#        LOADGEN (build/release/perf/bench_loadgen), VALUE_SIZE (100),
#        KEYS_PER_GIB (5000000 at 100 bytes: 500 MB of values per GiB, so
#        122070 at 4096), THREADS (2), TC_ARGS (more tiercached flags, one
#        word each: TC_ARGS="-o hash_items=600000")
set -euo pipefail

cd "$(dirname "$0")/.."
TIERCACHED=${TIERCACHED:-build/release/tiercached}
MEMCACHED=${MEMCACHED:-/usr/bin/memcached}
LOADGEN=${LOADGEN:-build/release/perf/bench_loadgen}
VALUE_SIZE=${VALUE_SIZE:-100}
KEYS_PER_GIB=${KEYS_PER_GIB:-$((500000000 / VALUE_SIZE))}
THREADS=${THREADS:-2}
read -r -a TC_ARGS <<<"${TC_ARGS:-}"
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(1 4)
PY=/usr/bin/python3
USER_ARGS=()
[ "$(id -u)" = 0 ] && USER_ARGS=(-u root)

for b in "$TIERCACHED" "$MEMCACHED" "$LOADGEN"; do
    [ -x "$b" ] || { echo "compare_restart: $b is missing (make release)" >&2; exit 1; }
done

PIDS=()
FILES=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for f in "${FILES[@]}"; do rm -f "$f"; done
}
trap cleanup EXIT

port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_up PORT START_NS PID: seconds from START_NS until "stats" answers,
# then curr_items; both on one line.
wait_up() {
    $PY - "$@" <<'EOF'
import os, socket, sys, time
port, t0, pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
deadline = time.time() + 600
while time.time() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("server exited")
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        time.sleep(0.002)
        continue
    s.sendall(b"stats\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        d = s.recv(65536)
        if not d:
            break
        buf += d
    t1 = time.time_ns()
    with open("/proc/%d/stat" % pid) as f:
        st = f.read().rsplit(")", 1)[1].split()
    cpu = (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
    items = [l.split()[2] for l in buf.decode().splitlines()
             if l.startswith("STAT curr_items ")]
    kind = [l.split()[2] for l in buf.decode().splitlines()
            if l.startswith("STAT restart_kind ")]
    print("%.3f %s %s %.2f" % ((t1 - t0) / 1e9, items[0] if items else "?",
                               kind[0] if kind else "-", cpu))
    sys.exit(0)
sys.exit("no answer")
EOF
}

# start NAME PORT ARGS...: exec the server in the background; echoes
# "PID START_NS".
start() {
    local log=$1 p=$2
    shift 2
    local t0
    t0=$(date +%s%N)
    "$@" 2>>"$log" >/dev/null &
    echo "$! $t0"
}

stop_wait() { # PID SIGNAL
    kill -"$2" "$1"
    while kill -0 "$1" 2>/dev/null; do sleep 0.05; done
    wait "$1" 2>/dev/null || true
}

fill() { # PORT KEYS
    "$LOADGEN" --port "$1" --keys "$2" --value-size "$VALUE_SIZE" --conns 8 \
        --threads 2 --pipeline 32 --ratio 1:0 --duration 0.01 \
        --warmup 600 >/dev/null
}

# scratch FILE LOG: both (and FILE.meta) removed now and at exit.
scratch() {
    FILES+=("$1" "$1.meta" "$2")
    rm -f "$1" "$1.meta" "$2"
}

# fill_and_stop LOG PORT STOP_SIGNAL ARGV...: start the server, fill it
# with KEYS items, stop it by STOP_SIGNAL; sets BEFORE (curr_items then).
fill_and_stop() {
    local log=$1 p=$2 sig=$3 pid t0
    shift 3
    read -r pid t0 < <(start "$log" "$p" "$@")
    PIDS+=("$pid")
    wait_up "$p" "$t0" "$pid" >/dev/null
    fill "$p" "$keys"
    BEFORE=$(wait_up "$p" "$(date +%s%N)" "$pid" | cut -d' ' -f2)
    stop_wait "$pid" "$sig"
}

# restart LABEL RESULT_KEY LOG PORT STOP_SIGNAL ARGV...: start the server
# again, time it to its first answer, record it under RESULT_KEY, stop it
# by STOP_SIGNAL.
restart() {
    local label=$1 key=$2 log=$3 p=$4 sig=$5 pid t0 secs items kind cpu
    shift 5
    read -r pid t0 < <(start "$log" "$p" "$@")
    PIDS+=("$pid")
    read -r secs items kind cpu < <(wait_up "$p" "$t0" "$pid")
    echo "$label: $items of $BEFORE items ($kind) in $secs s, $cpu s CPU"
    RES[$key]="$secs $items $cpu"
    stop_wait "$pid" "$sig"
}

declare -A RES
for g in "${SIZES[@]}"; do
    mib=$((g * 1024))
    keys=$((g * KEYS_PER_GIB))

    # tiercached: a clean stop (SIGTERM), started again, then kill -9 and
    # started again
    pool=/dev/shm/compare-restart-$$.pool
    log=/tmp/compare-restart-$$.tc.log
    scratch "$pool" "$log"
    p=$(port)
    argv=("$TIERCACHED" "${USER_ARGS[@]}" -p "$p" -U 0 -l 127.0.0.1
          -m "$mib" -e "$pool" -t "$THREADS" -v "${TC_ARGS[@]}")
    fill_and_stop "$log" "$p" TERM "${argv[@]}"
    restart "tiercached ${g} GiB clean" "tc_clean_$g" "$log" "$p" KILL \
        "${argv[@]}"
    restart "tiercached ${g} GiB kill -9" "tc_crash_$g" "$log" "$p" KILL \
        "${argv[@]}"
    grep -E "warm start|recovered start" "$log" | tail -2 | sed 's/^/    /'
    scratch "$pool" "$log"

    # memcached: SIGUSR1 (its .meta written), started again
    mfile=/dev/shm/compare-restart-$$.mc
    mlog=/tmp/compare-restart-$$.mc.log
    scratch "$mfile" "$mlog"
    p=$(port)
    margv=("$MEMCACHED" "${USER_ARGS[@]}" -p "$p" -U 0 -l 127.0.0.1
           -m "$mib" -e "$mfile" -t "$THREADS")
    fill_and_stop "$mlog" "$p" USR1 "${margv[@]}"
    sleep 1.2 # memcached refuses to restore within the second it stopped
    restart "memcached ${g} GiB SIGUSR1" "mc_$g" "$mlog" "$p" KILL \
        "${margv[@]}"
    scratch "$mfile" "$mlog"
done

echo
echo "values of $VALUE_SIZE bytes"
echo "| -m | items | memcached -e restart | tiercached clean | vs memcached | tiercached kill -9 | vs memcached |"
echo "|---|---|---|---|---|---|---|"
for g in "${SIZES[@]}"; do
    # shellcheck disable=SC2086
    $PY - "$g" ${RES[mc_$g]} ${RES[tc_clean_$g]} ${RES[tc_crash_$g]} <<'EOF'
import sys
g = sys.argv[1]
(ms, mi, mc), (cs, ci, cc), (ks, ki, kc) = [
    (float(a), int(b), float(c)) for a, b, c in
    zip(sys.argv[2::3], sys.argv[3::3], sys.argv[4::3])]
def r(s, i, c):
    return "%.2f s (%.1f M/s), CPU %.2f s (%.1f M/s)" % (
        s, i / s / 1e6, c, i / max(c, 0.01) / 1e6)
def x(s, i, c):
    return "%.2fx wall, %.2fx CPU" % ((i / s) / (mi / ms),
                                     (i / max(c, 0.01)) / (mi / max(mc, 0.01)))
print("| %s GiB | %d | %s | %s | %s | %s | %s |" % (
    g, mi, r(ms, mi, mc), r(cs, ci, cc), x(cs, ci, cc), r(ks, ki, kc),
    x(ks, ki, kc)))
EOF
done
