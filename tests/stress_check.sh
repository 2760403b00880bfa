#!/usr/bin/env bash
# Run a make target (default: the whole `make check`) on a loaded machine, to
# show that no test depends on the speed of the CPU or of the disk.
#
#   tests/stress_check.sh [--cpu-hog] [--slow-device] [NAME=VALUE...]
#                         [-- COMMAND [ARG...]]
#
#   --cpu-hog      (the default) a CPU hog on every core while the target
#                  runs: `stress-ng --cpu $(nproc)`, or a busy loop per CPU
#                  where stress-ng is missing.
#   --slow-device  the tests' flash (NVMe tier) files on a slow device: a
#                  loop device over a file, formatted ext4 and mounted,
#                  delayed by dm-delay where the kernel has it, and throttled
#                  for the test processes by their cgroup (v2 io.max, or v1
#                  blkio.throttle.*). TC_TEST_FLASH_DIR points the tests at
#                  it. A part the kernel or sandbox refuses is skipped with
#                  the reason; without a loop device the run is skipped.
#   Both options together: both at once.
#   -- COMMAND     run COMMAND instead of make, e.g. one test:
#                  -- build/debug/tests/unit/test_ext
#                  -- tests/proto/run.sh build/debug/tiercached -k ext
#
# NAME=VALUE arguments (or the same names in the environment):
#   TARGET=check       make target(s) to run, e.g. TARGET=unit
#   RUNS=1             runs in a row; stops at the first failing one
#   HOG_WORKERS=nproc  CPU hog processes
#   SLOW_RBPS=8388608 SLOW_WBPS=8388608   bytes/s  (cgroup throttle; 0: none)
#   SLOW_RIOPS=400 SLOW_WIOPS=400          IO/s    (cgroup throttle; 0: none)
#   SLOW_DELAY_MS=5    dm-delay per read and write (0: no dm-delay)
#   SLOW_SIZE=2G       size of the loop device (a sparse file)
#   SLOW_IMG_DIR=/tmp  where the file behind the loop device lives
#
# The sub-make gets TEST_TIMEOUT and PROTO_TIMEOUT (the suites' hang limits,
# tests/run_tests.sh and tests/proto/run.sh) raised to 1200 and 1800 s unless
# set: a loaded run is slower, and those limits only catch hangs.
#
# The hog and the device are set up by this script, removed on exit (also on
# a failure or an interrupt), and the hog is stopped by its PIDs. The exit
# status is the failing run's status, else 0.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1

TARGET=${TARGET:-check}
RUNS=${RUNS:-1}
HOG_WORKERS=${HOG_WORKERS:-$(nproc)}
SLOW_RBPS=${SLOW_RBPS:-8388608}
SLOW_WBPS=${SLOW_WBPS:-8388608}
SLOW_RIOPS=${SLOW_RIOPS:-400}
SLOW_WIOPS=${SLOW_WIOPS:-400}
SLOW_DELAY_MS=${SLOW_DELAY_MS:-5}
SLOW_SIZE=${SLOW_SIZE:-2G}
SLOW_IMG_DIR=${SLOW_IMG_DIR:-/tmp}

want_hog=0
want_slow=0
run_cmd=()
while [ $# -gt 0 ]; do
    arg=$1
    shift
    case $arg in
    --)
        run_cmd=("$@")
        break
        ;;
    --cpu-hog) want_hog=1 ;;
    --slow-device) want_slow=1 ;;
    TARGET=* | RUNS=* | HOG_WORKERS=* | SLOW_*=*) declare "$arg" ;;
    -h | --help)
        sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "stress_check: unknown argument '$arg' (see --help)" >&2
        exit 2
        ;;
    esac
done
[ "$want_hog" -eq 0 ] && [ "$want_slow" -eq 0 ] && want_hog=1
case $RUNS in
'' | *[!0-9]* | 0)
    echo "stress_check: RUNS must be a positive number (got '$RUNS')" >&2
    exit 2
    ;;
esac

say() { echo "stress_check: $*"; }

# make -n runs a recipe line that names $(MAKE) all the same: start nothing
# then (make puts its one-letter flags, n among them, first in MAKEFLAGS).
mflags=${MAKEFLAGS:-}
mflags=${mflags%% *}
if [ -n "${MAKELEVEL:-}" ] && [ "${mflags#-}" = "$mflags" ] &&
    [ "${mflags#*n}" != "$mflags" ]; then
    say "make -n: would run ${TARGET} with$([ "$want_hog" -eq 1 ] &&
        echo ' a CPU hog')$([ "$want_slow" -eq 1 ] &&
        echo ' the flash files on a slow device'), $RUNS time(s)"
    exit 0
fi

# ---- the CPU hog ------------------------------------------------------------

hog_pids=()
hog_watch= # pid of the watchdog that stops the hog should this script die

hog_start() {
    if command -v stress-ng >/dev/null 2>&1; then
        stress-ng --cpu "$HOG_WORKERS" --quiet &
        hog_pids=($!)
        say "CPU hog: stress-ng --cpu $HOG_WORKERS (pid ${hog_pids[0]})"
    else
        local i
        for ((i = 0; i < HOG_WORKERS; i++)); do
            bash -c 'while :; do :; done' &
            hog_pids+=($!)
        done
        say "CPU hog: stress-ng not installed (Debian package stress-ng);" \
            "$HOG_WORKERS busy loop(s) instead (pids ${hog_pids[*]})"
    fi
    # killed by SIGKILL, this script runs no trap: the watchdog then stops
    # the hog within 2 s
    (
        trap '' INT
        while kill -0 "$$" 2>/dev/null; do sleep 2; done
        kill -TERM "${hog_pids[@]}" 2>/dev/null
    ) &
    hog_watch=$!
    sleep 1
    local p
    for p in "${hog_pids[@]}"; do
        if ! kill -0 "$p" 2>/dev/null; then
            say "the CPU hog (pid $p) did not start"
            return 1
        fi
    done
}

hog_stop() {
    local p
    if [ -n "$hog_watch" ]; then
        kill -TERM "$hog_watch" 2>/dev/null
        wait "$hog_watch" 2>/dev/null
        hog_watch=
    fi
    for p in "${hog_pids[@]}"; do
        kill -TERM "$p" 2>/dev/null
    done
    for p in "${hog_pids[@]}"; do
        wait "$p" 2>/dev/null
    done
    [ ${#hog_pids[@]} -gt 0 ] && say "CPU hog stopped (pids ${hog_pids[*]})"
    hog_pids=()
}

# ---- the slow device ----------------------------------------------------------

slow_dir=    # mktemp directory: the image file and the mount point
slow_loop=   # /dev/loopN
slow_dm=     # dm-delay device name, when made
slow_dev=    # the device under the file system: slow_loop or the dm one
slow_mnt=    # mounted file system
slow_cg=     # cgroup directory of the runs, when throttled
slow_flash=  # TC_TEST_FLASH_DIR for the runs

# "MAJ:MIN" of a block device node.
devnum() {
    local name
    name=$(basename "$(readlink -f "$1")")
    cat "/sys/class/block/$name/dev"
}

# dm-delay over the loop device: every read and write waits SLOW_DELAY_MS.
# Sets slow_dev: the dm device, or the loop device where refused.
slow_dm_delay() {
    local name="tc-slowdev-$$" sectors out
    slow_dev=$slow_loop
    if [ "$SLOW_DELAY_MS" = 0 ]; then
        say "dm-delay: off (SLOW_DELAY_MS=0)"
        return
    fi
    if ! command -v dmsetup >/dev/null 2>&1; then
        say "dm-delay: skipped: no dmsetup (Debian package dmsetup)"
        return
    fi
    sectors=$(blockdev --getsz "$slow_loop")
    if out=$(dmsetup create "$name" --table \
        "0 $sectors delay $slow_loop 0 $SLOW_DELAY_MS" 2>&1); then
        slow_dm=$name
        slow_dev=/dev/mapper/$name
        say "dm-delay: $slow_dev, ${SLOW_DELAY_MS} ms a request"
        return
    fi
    say "dm-delay: skipped: the kernel refused it: $(echo "$out" | sed -n 1p)"
}

# A cgroup v2 hierarchy with the io controller, or nothing.
cg2_root() {
    local dev mnt type rest
    while read -r dev mnt type rest; do
        if [ "$type" = cgroup2 ] &&
            grep -qw io "$mnt/cgroup.controllers" 2>/dev/null; then
            echo "$mnt"
            return
        fi
    done </proc/mounts
}

# A cgroup whose processes read and write dev at most SLOW_* fast: slow_cg.
slow_throttle() {
    local dev=$1 num root v1 limits=""
    num=$(devnum "$dev") || return 1
    root=$(cg2_root)
    if [ -n "$root" ]; then
        grep -qw io "$root/cgroup.subtree_control" ||
            echo "+io" >"$root/cgroup.subtree_control" 2>/dev/null
        if grep -qw io "$root/cgroup.subtree_control" &&
            mkdir "$root/tc-slowdev-$$" 2>/dev/null; then
            slow_cg=$root/tc-slowdev-$$
            [ "$SLOW_RBPS" != 0 ] && limits+=" rbps=$SLOW_RBPS"
            [ "$SLOW_WBPS" != 0 ] && limits+=" wbps=$SLOW_WBPS"
            [ "$SLOW_RIOPS" != 0 ] && limits+=" riops=$SLOW_RIOPS"
            [ "$SLOW_WIOPS" != 0 ] && limits+=" wiops=$SLOW_WIOPS"
            if [ -z "$limits" ] || echo "$num$limits" >"$slow_cg/io.max"; then
                say "throttle: cgroup v2 $slow_cg io.max: $num$limits"
                return 0
            fi
            say "throttle: cgroup v2 io.max refused '$num$limits'"
        else
            say "throttle: cgroup v2 at $root: cannot enable the io" \
                "controller for a child (a cgroup with processes?)"
        fi
    fi
    v1=$(awk '$3 == "cgroup" && $4 ~ /(^|,)blkio(,|$)/ {print $2; exit}' \
        /proc/mounts)
    if [ -z "$v1" ]; then
        say "throttle: skipped: no cgroup v2 io controller and no cgroup v1" \
            "blkio hierarchy; the device is slow only by dm-delay, if any"
        return 0
    fi
    if ! mkdir "$v1/tc-slowdev-$$" 2>/dev/null; then
        say "throttle: skipped: cannot create a cgroup under $v1"
        return 0
    fi
    slow_cg=$v1/tc-slowdev-$$
    local f val ok=1
    for f in read_bps:$SLOW_RBPS write_bps:$SLOW_WBPS read_iops:$SLOW_RIOPS \
        write_iops:$SLOW_WIOPS; do
        val=${f#*:}
        [ "$val" = 0 ] && continue
        echo "$num $val" >"$slow_cg/blkio.throttle.${f%%:*}_device" || ok=0
    done
    if [ "$ok" -eq 1 ]; then
        say "throttle: cgroup v1 $slow_cg: $num rbps=$SLOW_RBPS" \
            "wbps=$SLOW_WBPS riops=$SLOW_RIOPS wiops=$SLOW_WIOPS"
    else
        say "throttle: some blkio.throttle limits were refused (see above)"
    fi
}

# Run "$@" with its process in slow_cg (when there is one).
in_slow_cg() {
    (
        [ -n "$slow_cg" ] && echo "$BASHPID" >"$slow_cg/cgroup.procs"
        exec "$@"
    )
}

# What the device gives the test processes: dd with O_DIRECT, 64 KiB and
# 4 KiB requests.
slow_measure() {
    local f=$slow_mnt/tc-slowdev-dd bs count line
    for bs in 64k:128 4k:400; do
        count=${bs#*:}
        bs=${bs%:*}
        line=$(in_slow_cg dd if=/dev/zero of="$f" bs="$bs" count="$count" \
            oflag=direct conv=fsync 2>&1 | tail -n 1)
        say "measured write, $bs O_DIRECT: $line"
        line=$(in_slow_cg dd if="$f" of=/dev/null bs="$bs" iflag=direct \
            2>&1 | tail -n 1)
        say "measured read,  $bs O_DIRECT: $line"
    done
    rm -f "$f"
}

# Bytes the runs read and wrote on the device (the cgroup's counters): a
# run that does not touch it shows nothing slow.
slow_io_report() {
    local num r w
    [ -n "$slow_cg" ] || return 0
    num=$(devnum "$slow_dev") || return 0
    if [ -f "$slow_cg/io.stat" ]; then
        r=$(awk -v d="$num" '$1 == d {for (i = 2; i <= NF; i++)
            if ($i ~ /^rbytes=/) print substr($i, 8)}' "$slow_cg/io.stat")
        w=$(awk -v d="$num" '$1 == d {for (i = 2; i <= NF; i++)
            if ($i ~ /^wbytes=/) print substr($i, 8)}' "$slow_cg/io.stat")
    else
        r=$(awk -v d="$num" '$1 == d && $2 == "Read" {print $3}' \
            "$slow_cg/blkio.throttle.io_service_bytes_recursive")
        w=$(awk -v d="$num" '$1 == d && $2 == "Write" {print $3}' \
            "$slow_cg/blkio.throttle.io_service_bytes_recursive")
    fi
    say "slow device so far: $((${r:-0} / 1048576)) MiB read," \
        "$((${w:-0} / 1048576)) MiB written by the test processes"
}

# Sets slow_flash, or returns 1 with the reason printed (the run is skipped).
slow_setup() {
    local t
    if [ "$(id -u)" -ne 0 ]; then
        say "slow device: skipped: needs root (losetup, mount)"
        return 1
    fi
    for t in losetup mkfs.ext4 mount umount blockdev; do
        if ! command -v "$t" >/dev/null 2>&1; then
            say "slow device: skipped: no $t"
            return 1
        fi
    done
    if [ ! -e /dev/loop-control ]; then
        say "slow device: skipped: no /dev/loop-control (no loop devices here)"
        return 1
    fi
    slow_dir=$(mktemp -d "$SLOW_IMG_DIR/tc-slowdev.XXXXXX") || return 1
    truncate -s "$SLOW_SIZE" "$slow_dir/img" || return 1
    # --direct-io: the file's page cache must not hide the throttle
    slow_loop=$(losetup --find --show --direct-io=on "$slow_dir/img" 2>&1) ||
        slow_loop=$(losetup --find --show "$slow_dir/img" 2>&1) || {
        say "slow device: skipped: losetup refused: $slow_loop"
        slow_loop=
        return 1
    }
    say "loop device: $slow_loop over $slow_dir/img ($SLOW_SIZE, sparse)"
    slow_dm_delay
    if ! mkfs.ext4 -q -F "$slow_dev" >/dev/null 2>&1; then
        say "slow device: skipped: mkfs.ext4 $slow_dev failed"
        return 1
    fi
    mkdir -p "$slow_dir/mnt"
    if ! mount -t ext4 "$slow_dev" "$slow_dir/mnt" 2>/dev/null; then
        say "slow device: skipped: mount $slow_dev refused"
        return 1
    fi
    slow_mnt=$slow_dir/mnt
    if ! dd if=/dev/zero of="$slow_mnt/probe" bs=4k count=1 oflag=direct \
        2>/dev/null; then
        say "slow device: skipped: O_DIRECT refused on $slow_dev (ext4)"
        return 1
    fi
    rm -f "$slow_mnt/probe"
    slow_throttle "$slow_dev"
    slow_measure
    slow_flash=$slow_mnt/flash
    mkdir -p "$slow_flash" && chmod 1777 "$slow_flash"
    say "slow device: TC_TEST_FLASH_DIR=$slow_flash"
}

slow_teardown() {
    local i
    if [ -n "$slow_cg" ]; then
        # processes left behind exit on their own; give them a moment
        for i in 1 2 3 4 5 6 7 8 9 10; do
            rmdir "$slow_cg" 2>/dev/null && break
            sleep 1
        done
        [ -d "$slow_cg" ] && say "could not remove cgroup $slow_cg:" \
            "still has processes: $(tr '\n' ' ' <"$slow_cg/cgroup.procs")"
        slow_cg=
    fi
    if [ -n "$slow_mnt" ]; then
        umount "$slow_mnt" 2>/dev/null || {
            sleep 2
            umount "$slow_mnt" 2>/dev/null
        } || {
            say "umount $slow_mnt: busy; detached lazily (umount -l)"
            umount -l "$slow_mnt"
        }
        slow_mnt=
    fi
    if [ -n "$slow_dm" ]; then
        dmsetup remove "$slow_dm" || dmsetup remove --retry "$slow_dm"
        slow_dm=
    fi
    if [ -n "$slow_loop" ]; then
        losetup -d "$slow_loop"
        slow_loop=
    fi
    if [ -n "$slow_dir" ]; then
        rm -rf "$slow_dir"
        slow_dir=
    fi
}

# ---- runs ---------------------------------------------------------------------

run_pid= # the running make: leader of its own process group (set -m)

# Stop the running make and everything in its process group; wait for it
# (bounded), then kill what is left.
run_stop() {
    local i
    [ -z "$run_pid" ] && return
    kill -TERM -- "-$run_pid" 2>/dev/null
    for ((i = 0; i < 30; i++)); do
        kill -0 "$run_pid" 2>/dev/null || break
        sleep 1
    done
    kill -KILL -- "-$run_pid" 2>/dev/null
    wait "$run_pid" 2>/dev/null
    run_pid=
}

cleanup() {
    run_stop
    hog_stop
    [ "$want_slow" -eq 1 ] && slow_teardown
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM
# Each job in its own process group: the run can be stopped as a whole,
# and a signal to this script (Ctrl-C, a timeout) reaches the trap at once.
set -m

if [ ${#run_cmd[@]} -eq 0 ]; then
    run_cmd=("${MAKE:-make}" --no-print-directory)
    # run by hand (not from make): build in parallel as CI does
    [ -z "${MAKELEVEL:-}" ] && run_cmd+=(-j"$(nproc)")
    # shellcheck disable=SC2206 # TARGET may name several targets
    run_cmd+=($TARGET)
fi

export TEST_TIMEOUT=${TEST_TIMEOUT:-1200}
export PROTO_TIMEOUT=${PROTO_TIMEOUT:-1800}

if [ "$want_slow" -eq 1 ]; then
    if slow_setup; then
        export TC_TEST_FLASH_DIR=$slow_flash
    else
        slow_teardown
        if [ "$want_hog" -eq 0 ]; then
            say "slow-device run skipped (reason above)"
            exit 0
        fi
        say "going on with the CPU hog alone"
        want_slow=0
    fi
fi
if [ "$want_hog" -eq 1 ]; then
    hog_start || exit 1
fi

what=""
[ "$want_hog" -eq 1 ] && what+=" cpu-hog"
[ "$want_slow" -eq 1 ] && what+=" slow-device"
for ((run = 1; run <= RUNS; run++)); do
    say "run $run of $RUNS:${what}: ${run_cmd[*]}" \
        "(load average $(cut -d' ' -f1-3 /proc/loadavg))"
    start=$(date +%s)
    in_slow_cg "${run_cmd[@]}" &
    run_pid=$!
    wait "$run_pid"
    rc=$?
    run_pid=
    secs=$(($(date +%s) - start))
    [ "$want_slow" -eq 1 ] && [ "$rc" -ne 0 ] && slow_io_report
    if [ "$rc" -ne 0 ]; then
        say "FAILED: run $run of $RUNS (${what# }), ${run_cmd[*]}: exit" \
            "status $rc after ${secs}s"
        exit "$rc"
    fi
    say "run $run of $RUNS passed in ${secs}s" \
        "(load average $(cut -d' ' -f1-3 /proc/loadavg))"
    [ "$want_slow" -eq 1 ] && slow_io_report
done
say "passed: ${run_cmd[*]}, $RUNS run(s) in a row,${what}"
