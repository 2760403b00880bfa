# shellcheck shell=bash disable=SC2154
# Shared by the perf/compare_*.sh scripts that run servers side by side
# (sourced, after `cd` to the repository root): output lines, picking a
# free port, waiting for a server and stopping it by PID, reading `stats`,
# RESULT fields and ratios, and building bench_loadgen alone.
#
# The functions use the caller's globals:
#   out        the output file that log appends to
#   srv_pid    the server that runs now ("" when none): srv_wait_ready and
#              srv_stop read and clear it
#   PORT_BASE  first port pick_port tries (100 are tried)
#   next_port  where pick_port starts [PORT_BASE]
#   out_dir    where build_loadgen appends build.log

# A line on stdout and in $out.
log() { printf '%s\n' "$*" | tee -a "$out"; }

# kv RESULT-line key: the key's value, or "-".
kv() {
    local v
    v=$(printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | sed -n 1p)
    printf '%s\n' "${v:--}"
}

# ratio a b: b/a to 2 decimals, or "-".
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        if (a == "-" || b == "-" || a + 0 == 0) print "-";
        else printf "%.2f\n", b / a }'
}

port_busy() { ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }

# pick_port: the first port from next_port to PORT_BASE + 99 that nothing
# listens on, on stdout; 1 when there is none.
pick_port() {
    local p
    for p in $(seq "${next_port:-$PORT_BASE}" $((PORT_BASE + 99))); do
        if ! port_busy "$p"; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# srv_wait_ready port: 0 once srv_pid accepts connections on
# 127.0.0.1:port; 1 when it exited first (reaped, srv_pid cleared) or did
# not accept within 10 s (srv_pid left for the caller to stop).
srv_wait_ready() {
    local port=$1 _
    for _ in $(seq 1 100); do
        if ! kill -0 "$srv_pid" 2>/dev/null; then
            wait "$srv_pid" 2>/dev/null
            srv_pid=""
            return 1
        fi
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# srv_stop [tenths]: SIGTERM to srv_pid, SIGKILL (logged) when it still
# runs after tenths x 0.1 s [50]; reaped, srv_pid cleared. Nothing to do
# without a server.
srv_stop() {
    local tenths=${1:-50} _
    [ -n "$srv_pid" ] || return 0
    kill -TERM "$srv_pid" 2>/dev/null
    for _ in $(seq 1 "$tenths"); do
        kill -0 "$srv_pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$srv_pid" 2>/dev/null; then
        log "# server $srv_pid did not stop on SIGTERM in $((tenths / 10)) s: SIGKILL"
        kill -KILL "$srv_pid" 2>/dev/null
    fi
    wait "$srv_pid" 2>/dev/null
    srv_pid=""
}

# server_stats port name...: those `stats` figures of the server on
# 127.0.0.1:port, as " name=value ..." (5 s at most per line).
server_stats() {
    local port=$1
    shift
    exec 3<>"/dev/tcp/127.0.0.1/$port" || return
    printf 'stats\r\n' >&3
    local line names=" $* " res=""
    while IFS= read -r -t 5 line <&3; do
        line=${line%$'\r'}
        [ "$line" = END ] && break
        # shellcheck disable=SC2086
        set -- $line
        case $names in *" $2 "*) res="$res $2=$3" ;; esac
    done
    exec 3<&-
    printf '%s\n' "$res"
}

# build_loadgen binary: perf/loadgen built alone into binary (so that a
# half-edited library cannot stop it), its compiler output appended to
# $out_dir/build.log; 1 when it did not build.
build_loadgen() {
    gcc -std=c11 -D_GNU_SOURCE -I. -O2 -g -Wall -Wextra perf/loadgen/*.c \
        -o "$1" -lpthread -lm >>"$out_dir/build.log" 2>&1
}
