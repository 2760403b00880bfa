"""The operator tools (tools/tc-hotspot, tools/tc-memtrace, tools/tc-pcm),
each run on a small input: a captured dump (tests/proto/data), a started
tiercached with write-hotspot tracking, or a traced tiny workload. Each
must write valid PNGs and a summary with the right numbers. tiercache
only."""

import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import uuid
import zlib

import pytest

from conftest import (IS_ASAN, ROOT, SERVER_BIN, SLAB_OPTS, free_port,
                      remove_pool)

pytestmark = pytest.mark.tiercache_only

TOOLS = ROOT / "tools"
DATA = ROOT / "tests" / "proto" / "data"
sys.path.insert(0, str(TOOLS))
import tc_hotspot_common as hs  # noqa: E402


def run_tool(name, *args, timeout=300):
    return subprocess.run([str(TOOLS / name)] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=timeout,
                          cwd=str(ROOT))


def assert_png(path):
    """A PNG whose chunks all carry a correct CRC, with IHDR, IDAT, IEND
    and a nonzero size."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    at, kinds = 8, []
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + n]
        crc, = struct.unpack(">I", data[at + 8 + n:at + 12 + n])
        assert zlib.crc32(kind + body) == crc, f"{path}: bad CRC in {kind}"
        if kind == b"IHDR":
            w, h = struct.unpack(">II", body[:8])
            assert w > 0 and h > 0
        kinds.append(kind)
        at += 12 + n
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds


def sets(host, port, n, vlen=100):
    with socket.create_connection((host, port), timeout=10) as s:
        f = s.makefile("rb")
        for i in range(n):
            s.sendall(b"set tool%d 0 0 %d\r\n%s\r\n" % (i, vlen, b"t" * vlen))
            assert f.readline() == b"STORED\r\n"


def test_tc_hotspot_on_captured_dump(tmp_path):
    r = run_tool("tc-hotspot", DATA / "hotspot-small.csv", "-o", tmp_path,
                 "--prefix", "small", "--top", "3")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "layout: 4 DIMMs, 4096-byte interleave" in out
    assert "bytes written: 12000" in out
    rows = re.findall(r"^\s+(\d) +(\d+) +(\d+) +([\d.]+)% +([\d.]+)$", out,
                      re.M)
    assert [(int(d), int(b)) for d, b, _, _, _ in rows] == [
        (0, 8000), (1, 2000), (2, 1000), (3, 1000)]
    assert "skew (max/mean): 2.667  hottest DIMM: 0" in out
    top = re.findall(r"^ +(\d+) +0x[0-9a-f]+ +\S+ +\d+ +(\d+) +\d+ +(\d) +"
                     r"(\w+)$", out, re.M)
    assert top == [("512", "6000", "0", "page_meta"),
                   ("513", "2000", "1", "item_header"),
                   ("516", "2000", "0", "item_value")]
    assert "page_meta            6000   50.0%" in out
    for name in ("small-dimms.png", "small-heatmap.png"):
        assert_png(tmp_path / name)
    with open(tmp_path / "small-summary.txt") as f:
        assert f.read() in out


def test_tc_hotspot_rejects_bad_input(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("hello\n")
    r = run_tool("tc-hotspot", bad, "-o", tmp_path)
    assert r.returncode == 1
    assert r.stderr.startswith("tc-hotspot: not a tiercache hotspot dump")
    assert r.stderr.count("\n") == 1
    r = run_tool("tc-hotspot", tmp_path / "missing.csv", "-o", tmp_path)
    assert r.returncode == 1 and "No such file" in r.stderr


def test_tc_hotspot_from_server(spawn, tmp_path):
    # bytes of slab items (header, key, value): the slabs only
    srv = spawn("-o", "hotspot_dimms=4", *SLAB_OPTS)
    sets(srv.host, srv.port, 300)
    r = run_tool("tc-hotspot", "--server", f"{srv.host}:{srv.port}", "-o",
                 tmp_path, "--save", tmp_path / "live.csv")
    assert r.returncode == 0, r.stderr
    d = hs.read(tmp_path / "live.csv")
    assert d.source == "tracker" and d.dimms == 4
    assert d.total_bytes() >= 300 * (24 + 5 + 100)
    assert sum(b for b, _, _ in d.blocks.values()) == d.total_bytes()
    assert f"bytes written: {d.total_bytes()} " in r.stdout
    assert f"skew (max/mean): {d.skew():.3f}" in r.stdout
    assert_png(tmp_path / "hotspot-dimms.png")
    assert_png(tmp_path / "hotspot-heatmap.png")
    # a server without tracking: one clear line
    plain = spawn()
    r = run_tool("tc-hotspot", "--server", f"{plain.host}:{plain.port}",
                 "-o", tmp_path)
    assert r.returncode == 1
    assert "write-hotspot tracking is off" in r.stderr


def pcm_could_run():
    try:
        with open("/proc/cpuinfo") as f:
            intel = "GenuineIntel" in f.read()
    except OSError:
        intel = False
    return (intel and shutil.which("pcm-memory") is not None
            and os.path.exists("/dev/cpu/0/msr"))


def test_tc_pcm_falls_back_to_tracker(spawn, tmp_path):
    # the tracker's view of slab items: the slabs only
    srv = spawn("-o", "hotspot_dimms=4,hotspot_interleave=4096", *SLAB_OPTS)
    bench = [sys.executable, "-c",
             "import socket,sys\n"
             f"s=socket.create_connection(('{srv.host}',{srv.port}))\n"
             "f=s.makefile('rb')\n"
             "for i in range(200):\n"
             "    s.sendall(b'set p%d 0 0 100\\r\\n' % i + b'p'*100 + b'\\r\\n')\n"
             "    assert f.readline() == b'STORED\\r\\n'\n"]
    # where PCM could run (Intel, MSRs), ask for the fallback explicitly
    force = ["--force-fallback"] if pcm_could_run() else []
    r = run_tool("tc-pcm", "--server", f"{srv.host}:{srv.port}", "-o",
                 tmp_path, *force, "--", *bench)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    # this machine (AMD EPYC VM, no MSRs) cannot run PCM: one line says so
    assert first.startswith("tc-pcm: PCM cannot run here ("), first
    assert first.endswith("falling back to tiercached's emulated per-DIMM "
                          "view (write-hotspot tracker)")
    with open(tmp_path / "pcm.csv") as f:
        rows = f.read().splitlines()
    assert rows[0] == "socket,channel,read_mbps,write_mbps,source"
    assert len(rows) == 5
    assert all(re.fullmatch(r"emulated,\d,,[\d.]+,tracker", x)
               for x in rows[1:])
    d = hs.read(tmp_path / "pcm-hotspot.csv")
    # the tracker was reset before the benchmark: only its 200 sets count
    # (plus the formatting of the page their class took)
    assert 200 * (24 + 4 + 100) <= d.total_bytes() < 200 * 132 + (1 << 20)
    assert_png(tmp_path / "pcm-dimms.png")
    assert_png(tmp_path / "pcm-heatmap.png")
    # no server to fall back to: one line and status 1
    r = run_tool("tc-pcm", "-o", tmp_path, "--", "true")
    assert r.returncode == 1
    assert r.stderr.startswith("tc-pcm: no --server")


@pytest.mark.skipif(IS_ASAN, reason="valgrind cannot run an ASan binary")
@pytest.mark.skipif(shutil.which("valgrind") is None,
                    reason="valgrind is not installed (.ci/deps)")
def test_tc_memtrace_tiny_workload(tmp_path):
    port = free_port()
    pool = f"/dev/shm/tc-memtrace-{os.getpid()}-{uuid.uuid4().hex}.pool"
    out = tmp_path / "trace.csv"
    try:
        r = run_tool("tc-memtrace", "-o", out, "--sets", "20", "--report",
                     tmp_path, "--time-limit", "600", "--",
                     SERVER_BIN, "-p", port, "-l", "127.0.0.1", "-U", "0",
                     "-m", "8", "-t", "1", "-e", pool,
                     *(["-u", "root"] if os.geteuid() == 0 else []),
                     timeout=700)
    finally:
        remove_pool(pool)
    assert r.returncode == 0, r.stderr
    assert re.search(r"tc-memtrace: \S+ mapped at 0x[0-9a-f]+-0x[0-9a-f]+; "
                     r"\d+ stores traced", r.stdout), r.stdout
    d = hs.read(out)
    assert d.source == "memtrace" and d.dimms == 4
    assert d.map_bytes == (8 << 20) + hs.REGION_HEADER_BYTES
    # the region header (one 4 KiB block, written at open and close)
    b0 = d.blocks[0]
    assert b0[0] >= 4096 and b0[2] == "region_meta"
    # the 20 items (24-byte header, key, 100-byte value) in the data area
    data = sum(b for i, (b, _, _) in d.blocks.items()
               if i * 4096 >= hs.REGION_HEADER_BYTES)
    assert data >= 20 * (24 + len("memtrace:0") + 100)
    assert sum(b for b, _, _ in d.blocks.values()) == d.total_bytes()
    assert_png(tmp_path / "memtrace-dimms.png")
    assert_png(tmp_path / "memtrace-heatmap.png")
