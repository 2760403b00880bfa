#!/usr/bin/env bash
# Run every benchmark once and keep the output in perf/out/latest.txt (and
# on stdout). Figures only: nothing here checks speed.
#
#   perf/run_all.sh                 # from the repo root or anywhere
#   SECONDS_PER_PHASE=2 perf/run_all.sh   # shorter run
#
# Environment knobs (defaults in brackets):
#   BENCH_DIR          where the bench_* binaries are [looked up, see below]
#   SECONDS_PER_PHASE  bench_engine seconds per phase [5]
#   ALLOC_SECONDS      bench_alloc seconds per run [1]
#   ALLOC_REPEAT       bench_alloc runs per case, best kept [3]
#   KEYS_100           keys for 100-byte values [1000000]
#   KEYS_4K            keys for 4 KiB values [1000000, fewer if /dev/shm or
#                      free memory cannot hold the pool; the run says so]
#   RUN_TIMEOUT        seconds one benchmark may run before it is stopped [300]
#
# Binaries: $BENCH_DIR when set (`make bench` sets it after building them),
# else `make build/release/perf/<name>` and build/release/perf; as a last
# resort a benchmark is compiled by hand into perf/out/bin (against
# build/release/libtiercache.a, or bench_alloc from the alloc/ and src/base/
# sources, bench_htab from src/engine/htab.c and src/base/).
#
# Total time with the defaults: about 4-6 minutes on 2 cores.

set -u -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
out_dir=perf/out
mkdir -p "$out_dir"
out=$out_dir/latest.txt
: >"$out"

SECONDS_PER_PHASE=${SECONDS_PER_PHASE:-5}
ALLOC_SECONDS=${ALLOC_SECONDS:-1}
ALLOC_REPEAT=${ALLOC_REPEAT:-3}
KEYS_100=${KEYS_100:-1000000}
KEYS_4K=${KEYS_4K:-1000000}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}

log() { printf '%s\n' "$*" | tee -a "$out"; }

find_bin() { # name -> path on stdout, or nothing
    local name=$1 d
    # Not `make bench`: that target runs this script.
    if [ -z "${BENCH_DIR:-}" ] && [ -f Makefile ] && [ -f "perf/$name.c" ]; then
        make -s "build/release/perf/$name" >>"$out_dir/build.log" 2>&1 || true
    fi
    for d in ${BENCH_DIR:-} build/release/perf; do
        if [ -x "$d/$name" ]; then
            printf '%s\n' "$d/$name"
            return 0
        fi
    done
    hand_build "$name"
}

# Link flags for the libraries that are installed (liburing may not be).
sys_libs() {
    local l f libs=""
    for l in pmem memkind uring urcu-qsbr urcu-cds urcu-common; do
        f=$(gcc -print-file-name="lib$l.so")
        [ "$f" != "lib$l.so" ] && libs="$libs -l$l"
    done
    printf '%s -lpthread\n' "$libs"
}

hand_build() {
    local name=$1 src=perf/$1.c bin=$out_dir/bin/$1
    local cflags="-std=c11 -D_GNU_SOURCE -DNDEBUG -I. -O2 -g"
    [ -f "$src" ] || return 1
    mkdir -p "$out_dir/bin"
    if [ -f build/release/libtiercache.a ]; then
        # shellcheck disable=SC2046
        gcc $cflags "$src" build/release/libtiercache.a $(sys_libs) \
            -o "$bin" >>"$out_dir/build.log" 2>&1 || return 1
    elif [ "$name" = bench_alloc ]; then
        # shellcheck disable=SC2046
        gcc $cflags "$src" alloc/*.c src/base/*.c $(sys_libs) \
            -o "$bin" >>"$out_dir/build.log" 2>&1 || return 1
    elif [ "$name" = bench_htab ]; then
        # shellcheck disable=SC2046
        gcc $cflags "$src" src/engine/htab.c src/base/*.c $(sys_libs) \
            -o "$bin" >>"$out_dir/build.log" 2>&1 || return 1
    else
        return 1
    fi
    printf '%s\n' "$bin"
}

run() { # label, command...
    local label=$1 rc
    shift
    log ""
    log "=== $label: $*"
    log "# load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
    timeout --signal=INT "$RUN_TIMEOUT" "$@" 2>&1 | tee -a "$out"
    rc=${PIPESTATUS[0]}
    log "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
    [ "$rc" -eq 124 ] && log "# $label: stopped after ${RUN_TIMEOUT} s"
    [ "$rc" -ne 0 ] && log "# $label: exit status $rc"
    return 0
}

log "# tiercache benchmarks, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
log "# host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, shared and noisy: figures, not assertions"
log "# commit: $(git rev-parse --short HEAD 2>/dev/null || echo none) $(git status --porcelain 2>/dev/null | grep -q . && echo '(dirty tree)')"
log "# cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"

# --- engine --------------------------------------------------------------
engine=$(find_bin bench_engine)
if [ -n "$engine" ]; then
    # --prefault: the pool file is written full of zeros before tc_open,
    # so LOAD measures the engine, not tmpfs clearing pages on first touch.
    # 4 KiB values: the default pool is keys*(4096+16+64)*1.3 bytes in
    # /dev/shm (tmpfs, counted as RAM). Keep it under half of what
    # /dev/shm and free memory allow.
    shm_free=$(df -B1 --output=avail /dev/shm | tail -1 | tr -d ' ')
    mem_avail=$(awk '/MemAvailable/ {printf "%.0f\n", $2 * 1024}' /proc/meminfo)
    room=$(( (shm_free < mem_avail ? shm_free : mem_avail) / 2 ))
    per_key=$(( (4096 + 16 + 64) * 13 / 10 ))
    if [ $(( KEYS_4K * per_key )) -gt "$room" ]; then
        fit=$(( room / per_key / 100000 * 100000 ))
        [ "$fit" -lt 100000 ] && fit=100000
        log "# 4 KiB values: $KEYS_4K keys need $(( KEYS_4K * per_key >> 20 )) MiB of pool, only $(( room >> 20 )) MiB is comfortable here: using $fit keys"
        KEYS_4K=$fit
    fi
    for t in 1 2; do
        run "engine 100B t=$t" "$engine" --keys "$KEYS_100" --value-size 100 \
            --threads "$t" --seconds "$SECONDS_PER_PHASE" --prefault
    done
    # The same code path with a keyset that fits in the CPU caches: the gap
    # to the 1M-key rows is memory latency (index bucket + item lines).
    run "engine 100B t=1 cache-resident keys" "$engine" --keys 10000 \
        --value-size 100 --threads 1 --seconds 2 --prefault
    for t in 1 2; do
        run "engine 4KiB t=$t" "$engine" --keys "$KEYS_4K" --value-size 4096 \
            --threads "$t" --seconds "$SECONDS_PER_PHASE" --prefault
    done
else
    log ""
    log "=== engine: bench_engine not built (no engine library yet?): skipped"
fi

# --- allocator -----------------------------------------------------------
alloc=$(find_bin bench_alloc)
if [ -n "$alloc" ]; then
    run "alloc" "$alloc" --seconds "$ALLOC_SECONDS" --repeat "$ALLOC_REPEAT"
else
    log ""
    log "=== alloc: bench_alloc could not be built: skipped (see $out_dir/build.log)"
fi

# --- hash index ----------------------------------------------------------
if [ -f perf/bench_htab.c ]; then
    htab=$(find_bin bench_htab)
    if [ -n "$htab" ]; then
        run "htab" "$htab"
    else
        log ""
        log "=== htab: bench_htab could not be built: skipped (see $out_dir/build.log)"
    fi
else
    log ""
    log "=== htab: perf/bench_htab.c not present: skipped"
fi

# --- hot keys in DRAM ----------------------------------------------------
hotkey=$(find_bin bench_hotkey)
if [ -n "$hotkey" ]; then
    run "hotkey zipf" "$hotkey" --hot-rate 200 --k 256
else
    log ""
    log "=== hotkey: bench_hotkey not built: skipped"
fi

log ""
log "# $(grep -c '^RESULT' "$out") RESULT lines above (grep '^RESULT' $out)"
log "# done $(date -u '+%H:%M:%S UTC'); output in $out"
