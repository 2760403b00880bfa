#!/usr/bin/env bash
# The Tair MDB experiment on emulated PMEM, through the engine and
# through the server, for three configurations:
#   a  page info in PMEM + item init inside the slab lock
#      (-o ablate_meta_in_pmem,ablate_init_in_lock)
#   b  page info in DRAM + item init inside the slab lock
#      (-o ablate_init_in_lock)
#   c  tiercache's default
# Emulated PMEM: +WRITE_NS ns per 64-byte line written and +READ_NS per line
# read (default 200 / 100: Optane's extra cost over DRAM, roughly), 4 DIMMs
# at 4 KiB interleave, 100-byte values, 90% sets, 2 threads.
#
#   perf/tair_experiment.sh [--quick] [--rounds N] [--engine-only|--server-only]
#
# Needs `make all` (release tiercached and benchmarks). Writes the full
# output to perf/out/tair.txt, a table to stdout, and the plot
# perf/plots/tair.png (python3-matplotlib from Debian, /usr/bin/python3).
# Figures only: nothing is asserted.

set -u -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

WRITE_NS=${WRITE_NS:-200}
READ_NS=${READ_NS:-100}
rounds=3
secs=5
keys=200000
do_engine=1
do_server=1
while [ $# -gt 0 ]; do
    case $1 in
    --quick) rounds=1; secs=2; keys=50000 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift ;;
    --engine-only) do_server=0 ;;
    --server-only) do_engine=0 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "tair_experiment.sh: unknown option $1" >&2; exit 64 ;;
    esac
    shift
done

bench=build/release/perf/bench_tair
loadgen=build/release/perf/bench_loadgen
server=build/release/tiercached
for f in "$bench" "$loadgen" "$server"; do
    [ -x "$f" ] || { echo "tair_experiment.sh: $f missing: run make all" >&2; exit 1; }
done
py=/usr/bin/python3
# as root, tiercached (like memcached) wants a user to run as
as_user=()
[ "$(id -u)" = 0 ] && as_user=(-u root)

mkdir -p perf/out perf/plots
out=perf/out/tair.txt
: >"$out"
log() { echo "$@" | tee -a "$out"; }

log "# tair_experiment.sh $(date -u '+%Y-%m-%d %H:%M UTC') commit $(git rev-parse --short HEAD 2>/dev/null)"
log "# load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
log "# emulated PMEM: +${WRITE_NS} ns per line written, +${READ_NS} ns per line read; 4 DIMMs, 4 KiB interleave"

if [ "$do_engine" = 1 ]; then
    log "## engine: $bench --rounds $rounds --seconds $secs --keys $keys --threads 2 --set-pct 90 --value-size 100 --write-ns $WRITE_NS --read-ns $READ_NS"
    "$bench" --rounds "$rounds" --seconds "$secs" --keys "$keys" --threads 2 \
        --set-pct 90 --value-size 100 --write-ns "$WRITE_NS" \
        --read-ns "$READ_NS" 2>&1 | tee -a "$out"
fi

# One request to the server: prints the reply up to END.
stats_hotspot() {
    "$py" - "$1" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"stats hotspot\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    buf += chunk
for ln in buf.decode().splitlines():
    p = ln.split()
    if len(p) == 3 and (p[1] == "hotspot_skew" or
                        (p[1].startswith("hotspot_dimm_") and p[1].endswith("_bytes"))):
        print(p[1] + "=" + p[2], end=" ")
print()
EOF
}

send_cmd() {
    "$py" -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(sys.argv[2].encode() + b"\r\n")
print(s.recv(4096).decode().strip())' "$1" "$2"
}

if [ "$do_server" = 1 ]; then
    port=$((20000 + RANDOM % 20000))
    pool=/dev/shm/tc_tair_experiment.$$.pool
    lg="--threads 1 --conns 8 --keys $keys --value-size 100 --ratio 1:9"
    for r in $(seq 1 "$rounds"); do
        for cfg in a b c; do
            case $cfg in
            a) abl=",ablate_meta_in_pmem,ablate_init_in_lock" ;;
            b) abl=",ablate_init_in_lock" ;;
            c) abl="" ;;
            esac
            opts="hotspot_dimms=4,hotspot_interleave=4096,pm_write_ns=$WRITE_NS,pm_read_ns=$READ_NS$abl"
            rm -f "$pool"
            "$server" -p "$port" -t 2 -m 128 -e "$pool" -o "$opts" \
                "${as_user[@]}" &
            pid=$!
            for _ in $(seq 50); do
                send_cmd "$port" version >/dev/null 2>&1 && break
                sleep 0.1
            done
            log "## server ($cfg) round $r: $server -p $port -t 2 -m 128 -o $opts"
            # fill every key once, then measure with the tracker reset
            "$loadgen" --port "$port" $lg --warmup on --duration 1 >/dev/null 2>&1
            send_cmd "$port" "hotspot reset" >/dev/null
            res=$("$loadgen" --port "$port" $lg --warmup off \
                --duration "$secs" --server-pid "$pid" --label "tair-$cfg" 2>&1)
            echo "$res" | tee -a "$out" | grep -v '^RESULT' >/dev/null
            hs=$(stats_hotspot "$port")
            log "SERVER config=$cfg round=$r $(echo "$res" | grep '^RESULT' | sed 's/^RESULT //') $hs"
            kill "$pid"
            wait "$pid" 2>/dev/null
            rm -f "$pool"
        done
    done
fi

# Table (medians over rounds) and plot.
"$py" - "$out" <<'EOF'
import re, statistics, sys
out = sys.argv[1]
eng, srv = {}, {}
for ln in open(out):
    kv = dict(re.findall(r"(\w+)=([^\s]+)", ln))
    if ln.startswith("RESULT bench_tair"):
        eng.setdefault(kv["config"], []).append(kv)
    elif ln.startswith("SERVER "):
        srv.setdefault(kv["config"], []).append(kv)

def med(rows, k):
    v = [float(r[k]) for r in rows if k in r]
    return statistics.median(v) if v else float("nan")

lines = []
if eng:
    lines.append("engine (medians of %d rounds)" % len(eng.get("c", [])))
    lines.append("| config | ops/s | sets/s | tc_set p50 us | p99 us | DIMM0..3 MB | skew | cores busy | ops per busy core-s |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for c in "abc":
        if c not in eng:
            continue
        rows = eng[c]
        dimms = " / ".join("%.1f" % (med(rows, "dimm%d" % d) / 1e6) for d in range(4))
        per_core = statistics.median(float(r["ops_s"]) / max(float(r["cores"]), 0.01)
                                     for r in rows)
        lines.append("| (%s) | %.0f | %.0f | %.2f | %.2f | %s | %.2f | %.2f | %.0f |" % (
            c, med(rows, "ops_s"), med(rows, "sets_s"), med(rows, "p50_us"),
            med(rows, "p99_us"), dimms, med(rows, "skew"), med(rows, "cores"),
            per_core))
if srv:
    lines.append("server (medians of %d rounds)" % len(srv.get("c", [])))
    lines.append("| config | ops/s | p50 us | p99 us | server CPU us/req | server cores | skew |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for c in "abc":
        if c not in srv:
            continue
        rows = srv[c]
        lines.append("| (%s) | %.0f | %.1f | %.1f | %.2f | %.2f | %.2f |" % (
            c, med(rows, "ops"), med(rows, "p50_us"), med(rows, "p99_us"),
            med(rows, "srv_cpu_us_per_req"), med(rows, "srv_cores"),
            med(rows, "hotspot_skew")))
text = "\n".join(lines)
print(text)
with open(out, "a") as f:
    f.write(text + "\n")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("no matplotlib for /usr/bin/python3 (apt-get install python3-matplotlib): no plot")
    sys.exit(0)
panels = [(n, d) for n, d in (("engine", eng), ("server", srv)) if d]
fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
labels = {"a": "(a) meta PMEM\n+ init in lock", "b": "(b) meta DRAM\n+ init in lock",
          "c": "(c) default"}
for ax, (name, d) in zip(axes[0], panels):
    cs = [c for c in "abc" if c in d]
    key = "ops_s" if name == "engine" else "ops"
    ops = [med(d[c], key) / 1e3 for c in cs]
    skew = [med(d[c], "skew" if name == "engine" else "hotspot_skew") for c in cs]
    ax.bar(range(len(cs)), ops, color=["#c44", "#d93", "#4a4"][:len(cs)])
    ax.set_xticks(range(len(cs)))
    ax.set_xticklabels([labels[c] for c in cs], fontsize=8)
    ax.set_ylabel("k ops/s (90% sets)")
    ax.set_title(name + ": throughput (bars), DIMM skew (line)")
    ax2 = ax.twinx()
    ax2.plot(range(len(cs)), skew, "ko-")
    ax2.set_ylabel("hottest DIMM / mean")
    ax2.set_ylim(0, max(2.5, max(skew) * 1.1))
fig.tight_layout()
fig.savefig("perf/plots/tair.png", dpi=100)
print("plot: perf/plots/tair.png")
EOF
