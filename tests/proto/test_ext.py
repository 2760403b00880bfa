"""The NVMe tier from the wire: a server with a small -m and an
ext_path in conftest's flash_dir() (/tmp by default: O_DIRECT works there)
stores four times its memory; everything reads back right (or as a miss,
only where evicted) through pymemcache, raw text get/gets multigets, meta
mg and the binary protocol; pipelined requests mixing flash hits, misses
and pool hits come back in order; the extstore stats and "stats tiers" are
there; a bad ext_path exits with one line.

How many values reach the flash depends on how fast its writer drains the
write buffers (a victim the flash is too busy for is evicted, counted in
tc_ext_spill_busy): nothing here asserts such a share. The tests assert
what holds at any speed: every key reads back its value or was evicted
(counted), values that left the pool were spilled or evicted, and flash
reads have no deadline (ext_read_timeout_ms=0), so a slow disk or CPU is
never a miss."""

import os
import struct
import subprocess
import time

import pytest
from pymemcache.client.base import Client

from conftest import IS_MEMCACHED, Conn, flash_file

MEM = 16           # MiB of item memory
VAL = 4096         # bytes per value
NKEYS = 4 * MEM * 1024 * 1024 // VAL   # four times the memory
HDR = struct.Struct(">BBHBBHIIQ")


def value_of(i):
    seed = (b"%08d" % i) * 8
    return (seed * (VAL // len(seed) + 1))[:VAL]


def key_of(i):
    return "xk:%06d" % i


# tiercache: a flash read waits as long as it takes (a loaded machine must
# not turn reads into timeouts, which would be misses)
NO_READ_DEADLINE = [] if IS_MEMCACHED else ["-o", "ext_read_timeout_ms=0"]
WAIT = 60  # seconds any bounded wait below may take


def wait_for(what, pred, limit=WAIT, step=0.05):
    """Poll pred() until it returns a true value (returned); fail naming
    `what` after `limit` seconds."""
    deadline = time.monotonic() + limit
    while True:
        got = pred()
        if got:
            return got
        assert time.monotonic() < deadline, f"waited {limit} s for {what}"
        time.sleep(step)


@pytest.fixture(scope="module")
def ext_server():
    """One server with a flash file for the module, filled with NKEYS."""
    from conftest import start_server
    path = flash_file("tc-proto-ext", ".nvs")
    # memcached wants ext_page_size before ext_path; ext_item_age=0 makes
    # it spill at once, as tiercached does under memory pressure; no
    # recache, so that keys read several times stay on flash
    flags = ["-o", "ext_page_size=8", "-o", "ext_recache_rate=0",
             "-o", "ext_recache_window=0", "-o", f"ext_path={path}:256m"]
    flags += NO_READ_DEADLINE
    if IS_MEMCACHED:
        flags = ["-o", "ext_page_size=8,ext_recache_rate=0,ext_item_age=0,"
                 f"ext_path={path}:256m"]
    srv = start_server(flags, mem=MEM, threads=2)
    try:
        mc = Client((srv.host, srv.port), timeout=30, no_delay=True)
        for start in range(0, NKEYS, 200):
            mc.set_many({key_of(i): value_of(i)
                         for i in range(start, min(start + 200, NKEYS))},
                        noreply=False)
        # which keys stayed: pymemcache multigets, every value checked
        present = set()
        for start in range(0, NKEYS, 100):
            keys = [key_of(i) for i in range(start, min(start + 100, NKEYS))]
            got = mc.get_many(keys)
            for k, v in got.items():
                i = int(k[3:])
                assert v == value_of(i), f"{k}: wrong value"
                present.add(i)
        mc.close()
        srv.present = present
        # the figures right after the one read of every key
        srv.filled = stats(srv)
        srv.filled_tiers = {} if IS_MEMCACHED else stats(srv, "tiers")
        yield srv
    finally:
        srv.stop()
        if os.path.exists(path):
            os.unlink(path)


def stats(srv, group=""):
    c = Conn(srv.host, srv.port)
    c.send(b"stats %s\r\n" % group.encode() if group else b"stats\r\n")
    text = c.read_until(b"END\r\n").decode()
    c.close()
    out = {}
    for line in text.splitlines():
        if line.startswith("STAT "):
            _, name, val = line.split(" ", 2)
            out[name] = val
    return out


def test_four_times_memory_reads_back(ext_server):
    """Every key reads back its value (checked in the fixture) or was
    evicted, counted; values went to flash and came back from it."""
    present = ext_server.present
    st = ext_server.filled
    print("present", len(present), "of", NKEYS, "evictions", st["evictions"],
          "get_extstore", st["get_extstore"], "spilled",
          st.get("tc_ext_spilled"), "spill busy", st.get("tc_ext_spill_busy"))
    assert present
    assert int(st["curr_items"]) == len(present)
    if IS_MEMCACHED:
        return
    # nothing but eviction removes a key here: no deletes, no expiry, no
    # flash read may fail, the flash never wraps
    assert len(present) + int(st["evictions"]) == NKEYS, st
    for name in ("miss_from_extstore", "badcrc_from_extstore",
                 "get_aborted_extstore", "extstore_objects_lost"):
        assert st[name] == "0", (name, st[name])
    # the first victims always find room in the empty write buffers
    assert int(st["tc_ext_spilled"]) > 0
    assert int(st["tc_ext_spill_busy"]) <= int(st["evictions"])
    # every key on flash was read once, from flash (no recache)
    assert int(st["get_extstore"]) == \
        int(ext_server.filled_tiers["nvme:items"]), (st, ext_server.filled_tiers)


def test_extstore_stats_names(ext_server):
    st = stats(ext_server)
    for name in ("extstore_bytes_written", "extstore_bytes_read",
                 "extstore_objects_read", "extstore_objects_written",
                 "extstore_page_reclaims", "extstore_compact_rescues",
                 "extstore_compact_skipped", "extstore_bytes_used",
                 "extstore_io_queue", "get_extstore", "get_aborted_extstore",
                 "miss_from_extstore", "badcrc_from_extstore",
                 "recache_from_extstore"):
        assert name in st, name
    assert int(st["extstore_objects_written"]) > 0
    assert int(st["badcrc_from_extstore"]) == 0
    if IS_MEMCACHED:
        return
    # every spill appended one record (no compaction: nothing is dead)
    assert int(st["extstore_objects_written"]) >= int(st["tc_ext_spilled"])
    # the writer gets every sealed buffer out, however long it takes: all
    # but the open buffer (4 MiB, ext_wbuf_size's default) is written
    objs = int(st["extstore_objects_written"])
    wait_for("the flash writer to write all but the open buffer",
             lambda: int(stats(ext_server)["extstore_bytes_written"]) +
             4 * 1024 * 1024 >= objs * VAL)


def test_flash_hits_counted_in_their_class(ext_server):
    """Every get hit, those answered by an asynchronous flash read too, is
    counted in a slab class: the classes' get_hits in "stats slabs" sum to
    get_hits in "stats", and a multiget of flash items moves them."""
    def class_hits():
        sl = stats(ext_server, "slabs")
        return sum(int(v) for n, v in sl.items() if n.endswith(":get_hits"))

    keys = first_present(ext_server, 40)
    before = stats(ext_server)
    hits0 = class_hits()
    assert hits0 == int(before["get_hits"])
    c = Conn(ext_server.host, ext_server.port)
    c.send(("get %s\r\n" % " ".join(key_of(i) for i in keys)).encode())
    for i in keys:
        c.expect(b"VALUE %s 0 %d\r\n%s\r\n"
                 % (key_of(i).encode(), VAL, value_of(i)))
    c.expect(b"END\r\n")
    c.close()
    after = stats(ext_server)
    assert int(after["get_extstore"]) > int(before["get_extstore"])
    assert int(after["get_hits"]) - int(before["get_hits"]) == len(keys)
    assert class_hits() - hits0 == len(keys)


@pytest.mark.tiercache_only
def test_stats_tiers(ext_server):
    t = stats(ext_server, "tiers")
    assert t["dram:items"] == "0" and t["dram:bytes"] == "0"
    total = int(t["pmem:items"]) + int(t["nvme:items"])
    assert total == len(ext_server.present)
    assert int(t["nvme:items"]) > 0
    # reads do not move values between tiers (no recache)
    assert t["nvme:items"] == ext_server.filled_tiers["nvme:items"]
    assert int(t["nvme:bytes"]) == int(t["nvme:items"]) * VAL
    assert int(t["pmem:bytes"]) > 0
    assert int(t["nvme:limit_maxbytes"]) == 256 * 1024 * 1024


def first_present(srv, n, start=0):
    return [i for i in sorted(srv.present) if i >= start][:n]


def test_text_multiget_gets(ext_server):
    keys = first_present(ext_server, 20)
    missing = "xk:none"
    c = Conn(ext_server.host, ext_server.port)
    names = [key_of(i) for i in keys]
    c.send(("get %s %s\r\n" % (" ".join(names[:10]), missing)).encode())
    for i in keys[:10]:
        c.expect(b"VALUE %s 0 %d\r\n" % (key_of(i).encode(), VAL))
        c.expect(value_of(i) + b"\r\n")
    c.expect(b"END\r\n")
    c.send(("gets %s\r\n" % " ".join(names[10:])).encode())
    for i in keys[10:]:
        line = c.read_until(b"\r\n")
        parts = line.split()
        assert parts[:4] == [b"VALUE", key_of(i).encode(), b"0",
                             str(VAL).encode()], line
        assert int(parts[4]) > 0
        c.expect(value_of(i) + b"\r\n")
    c.expect(b"END\r\n")
    c.close()


def test_meta_mg(ext_server):
    i = first_present(ext_server, 1, 50)[0]
    k = key_of(i).encode()
    c = Conn(ext_server.host, ext_server.port)
    c.send(b"mg %s v f k s\r\n" % k)
    c.expect(b"VA %d f0 k%s s%d\r\n" % (VAL, k, VAL))
    c.expect(value_of(i) + b"\r\n")
    c.send(b"mg %s s\r\nmg xk:none v\r\nmg xk:none v q\r\nmn\r\n" % k)
    c.expect(b"HD s%d\r\nEN\r\nMN\r\n" % VAL)
    c.close()


def bin_get(op, key, opaque):
    return HDR.pack(0x80, op, len(key), 0, 0, 0, len(key), opaque, 0) + key


def read_bin(c):
    h = HDR.unpack(c.recv_exact(24))
    body = c.recv_exact(h[6])
    return h, body


def test_binary_get_getk_getq(ext_server):
    GET, GETQ, NOOP, GETK = 0x00, 0x09, 0x0A, 0x0C
    keys = first_present(ext_server, 3, 100)
    c = Conn(ext_server.host, ext_server.port)
    req = (bin_get(GET, key_of(keys[0]).encode(), 1) +
           bin_get(GETQ, b"xk:none", 2) +
           bin_get(GETK, key_of(keys[1]).encode(), 3) +
           bin_get(GETQ, key_of(keys[2]).encode(), 4) +
           bin_get(GET, b"xk:none", 5) +
           HDR.pack(0x80, NOOP, 0, 0, 0, 0, 0, 6, 0))
    c.send(req)
    h, body = read_bin(c)
    assert (h[1], h[5], h[7]) == (GET, 0, 1) and body[4:] == value_of(keys[0])
    h, body = read_bin(c)
    k = key_of(keys[1]).encode()
    assert (h[1], h[5], h[7]) == (GETK, 0, 3)
    assert body[4:4 + len(k)] == k and body[4 + len(k):] == value_of(keys[1])
    h, body = read_bin(c)
    assert (h[1], h[5], h[7]) == (GETQ, 0, 4) and body[4:] == value_of(keys[2])
    h, body = read_bin(c)
    assert (h[1], h[5], h[7]) == (GET, 1, 5)   # key not found
    h, body = read_bin(c)
    assert (h[1], h[7]) == (NOOP, 6)
    c.close()


def test_pipelined_order(ext_server):
    """Flash hits, misses and pool hits in one pipeline come back in
    request order, each intact."""
    flash = first_present(ext_server, 6, 200)
    mc = Client((ext_server.host, ext_server.port), timeout=30)
    # noreply=False: the get below comes on another connection
    assert mc.set("xk:pool", b"in the pool", noreply=False)
    mc.close()
    before = int(stats(ext_server)["get_extstore"])
    c = Conn(ext_server.host, ext_server.port)
    k = [key_of(i).encode() for i in flash]
    c.send(b"get %s\r\nget xk:none\r\nget xk:pool\r\nmg %s v\r\n"
           b"get %s xk:none %s\r\nmn\r\nget %s\r\n"
           % (k[0], k[1], k[2], k[3], k[4]))
    c.expect(b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k[0], VAL, value_of(flash[0])))
    c.expect(b"END\r\n")
    c.expect(b"VALUE xk:pool 0 11\r\nin the pool\r\nEND\r\n")
    c.expect(b"VA %d\r\n%s\r\n" % (VAL, value_of(flash[1])))
    c.expect(b"VALUE %s 0 %d\r\n%s\r\n" % (k[2], VAL, value_of(flash[2])))
    c.expect(b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k[3], VAL, value_of(flash[3])))
    c.expect(b"MN\r\n")
    c.expect(b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k[4], VAL, value_of(flash[4])))
    c.close()
    assert int(stats(ext_server)["get_extstore"]) >= before + 5


def test_input_while_parked(ext_server):
    """Requests that arrive while the connection waits for flash reads
    (in their own segments, after the multiget went out: a set, gets, a
    request split across segments) run once the reads are back, in order.
    Repeated, so that some segments land while the connection is parked
    (its input stays switched on then, until input arrives)."""
    flash = first_present(ext_server, 30, 1200)
    c = Conn(ext_server.host, ext_server.port)
    names = [key_of(i).encode() for i in flash]
    for _ in range(20):
        c.send(b"get %s\r\n" % b" ".join(names))
        # shorter than 30 flash reads, longer than parsing the multiget:
        # most rounds' next segments find the connection parked
        time.sleep(0.0003)
        c.send(b"set xk:pool2 0 0 10\r\npool value\r\nget xk:pool2\r\n")
        c.send(b"mg %s v\r\nmn" % names[0])
        c.send(b"\r\n")
        for i in flash:
            c.expect(b"VALUE %s 0 %d\r\n%s\r\n"
                     % (key_of(i).encode(), VAL, value_of(i)))
        c.expect(b"END\r\n")
        c.expect(b"STORED\r\nVALUE xk:pool2 0 10\r\npool value\r\nEND\r\n")
        c.expect(b"VA %d\r\n%s\r\nMN\r\n" % (VAL, value_of(flash[0])))
    c.close()


def test_many_connections_interleaved(ext_server):
    """Several connections with multigets in flight at once on the same
    workers: each gets its own values."""
    keys = first_present(ext_server, 200, 300)
    conns = [Conn(ext_server.host, ext_server.port) for _ in range(8)]
    parts = [keys[j::8] for j in range(8)]
    for c, ks in zip(conns, parts):
        c.send(("get %s\r\n" % " ".join(key_of(i) for i in ks)).encode())
    for c, ks in zip(conns, parts):
        for i in ks:
            c.expect(b"VALUE %s 0 %d\r\n%s\r\n"
                     % (key_of(i).encode(), VAL, value_of(i)))
        c.expect(b"END\r\n")
        c.close()


def test_delete_overwrite_flash_items(ext_server):
    i, j = first_present(ext_server, 2, 600)
    mc = Client((ext_server.host, ext_server.port), timeout=30)
    assert mc.delete(key_of(i), noreply=False)
    assert mc.get(key_of(i)) is None
    mc.set(key_of(j), b"new")
    assert mc.get(key_of(j)) == b"new"
    mc.close()
    ext_server.present.discard(i)
    # keep the module's expectation on j: it is a pool item now
    ext_server.present.discard(j)


@pytest.mark.tiercache_only
@pytest.mark.parametrize("opt,shown", [
    ("", "8192"),                         # the power of two above 16M/4K
    (",ext_recache_window=100", "128"),   # rounded up to a power of two
    (",ext_recache_window=0", "0"),       # off
])
def test_recache_window_shown(opt, shown):
    """stats settings shows the re-read filter's slots in use, not the
    "auto" marker the default is given as."""
    from conftest import start_server
    path = flash_file("tc-proto-ext", ".nvs")
    srv = start_server(["-o", f"ext_page_size=8{opt},ext_path={path}:64m"],
                       mem=MEM, threads=1)
    try:
        assert stats(srv, "settings")["ext_recache_window"] == shown
    finally:
        srv.stop()
        if os.path.exists(path):
            os.unlink(path)


@pytest.mark.tiercache_only
def test_recache_window():
    """-o ext_recache_window: the third read of a flash key in a row copies
    it back into the pool (recache_from_extstore moves, the fourth read does
    not touch flash, the value is the same); stats settings shows it."""
    from conftest import start_server
    path = flash_file("tc-proto-ext", ".nvs")
    srv = start_server(["-o", "ext_page_size=8,ext_recache_rate=0,"
                        f"ext_recache_window=64,ext_path={path}:64m"]
                       + NO_READ_DEADLINE, mem=MEM, threads=1)
    try:
        st = stats(srv, "settings")
        assert st["ext_recache_window"] == "64"
        mc = Client((srv.host, srv.port), timeout=30, no_delay=True)
        n = 2 * MEM * 1024 * 1024 // VAL
        for start in range(0, n, 200):
            mc.set_many({key_of(i): value_of(i)
                         for i in range(start, min(start + 200, n))},
                        noreply=False)
        # the first key whose read comes from flash
        for i in range(n):
            before = int(stats(srv)["get_extstore"])
            v = mc.get(key_of(i))
            if v is not None and int(stats(srv)["get_extstore"]) > before:
                break
        else:
            pytest.fail("no key on flash")
        assert v == value_of(i)
        assert mc.get(key_of(i)) == value_of(i)
        assert int(stats(srv)["recache_from_extstore"]) == 0
        assert mc.get(key_of(i)) == value_of(i)
        st = stats(srv)
        assert int(st["recache_from_extstore"]) == 1
        flash_reads = int(st["get_extstore"])
        assert mc.get(key_of(i)) == value_of(i)
        assert int(stats(srv)["get_extstore"]) == flash_reads
        mc.close()
    finally:
        srv.stop()
        if os.path.exists(path):
            os.unlink(path)


@pytest.mark.tiercache_only
def test_bad_ext_path_tmpfs(run_server):
    status, err = run_server(["-o", "ext_path=/dev/shm/tc-proto-x:64m"])
    assert status == 1, (status, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "/dev/shm/tc-proto-x" in lines[0]


@pytest.mark.tiercache_only
def test_bad_ext_path_syntax(run_server):
    status, err = run_server(["-o", "ext_path=/tmp/x"])
    assert status == 64, (status, err)
    assert len(err.strip().splitlines()) == 1
    assert "FILE:SIZE" in err


# --- stats reset, spilling from the first eviction, block devices ---

def small_ext_server(spawn, extra=(), mem=8):
    """A server of `mem` MiB with its own 64 MiB flash file; the path in
    srv.ext_path (removed by the caller's finally)."""
    path = flash_file("tc-proto-ext", ".nvs")
    flags = ["-o", "ext_page_size=8", "-o", "ext_recache_rate=0"]
    flags += NO_READ_DEADLINE + list(extra)
    flags += ["-o", f"ext_path={path}:64m"]
    srv = spawn(*flags, mem=mem, threads=1)
    srv.ext_path = path
    return srv


def fill_keys(srv, n, prefix="xr"):
    mc = Client((srv.host, srv.port), timeout=30, no_delay=True)
    for start in range(0, n, 200):
        mc.set_many({"%s:%06d" % (prefix, i): value_of(i)
                     for i in range(start, min(start + 200, n))},
                    noreply=False)
    return mc


EXT_COUNTERS = ("get_extstore", "extstore_bytes_written",
                "extstore_objects_written", "extstore_bytes_read",
                "extstore_objects_read", "tc_ext_spilled",
                "tc_ext_read_p50_us", "tc_ext_read_p99_us",
                "tc_ext_read_p999_us")
EXT_GAUGES = ("extstore_bytes_used", "extstore_pages_free",
              "extstore_limit_maxbytes", "tc_ext_items", "tc_ext_item_bytes",
              "curr_items")


def read_all(srv, n, prefix="xr"):
    """Read keys 0..n-1 in multigets of 200, checking every value: the
    number of hits."""
    mc = Client((srv.host, srv.port), timeout=30)
    hits = 0
    for start in range(0, n, 200):
        got = mc.get_many(["%s:%06d" % (prefix, i)
                           for i in range(start, min(start + 200, n))])
        for k, v in got.items():
            assert v == value_of(int(k[3:])), k
        hits += len(got)
    mc.close()
    return hits


@pytest.mark.tiercache_only
def test_stats_reset_extstore(spawn):
    """stats reset zeroes the extstore_* counters and the read latency
    percentiles; the gauges (bytes used, items, free pages) stay."""
    srv = small_ext_server(spawn)
    try:
        n = 8 * 1024 * 1024 * 3 // VAL      # three times the memory
        fill_keys(srv, n).close()
        # every counter moves once a flash read did I/O: values sit in
        # write buffers (read from DRAM) until the writer got them out, so
        # read everything again until then (bounded)
        assert int(stats(srv)["tc_ext_items"]) > 0
        wait_for("flash reads that did I/O (every extstore counter > 0)",
                 lambda: read_all(srv, n) and
                 all(int(v) > 0 for k, v in stats(srv).items()
                     if k in EXT_COUNTERS), step=0)
        before = stats(srv)
        c = Conn(srv.host, srv.port)
        c.cmd(b"stats reset\r\n", b"RESET\r\n")
        c.close()
        after = stats(srv)
        for name in EXT_COUNTERS + ("get_aborted_extstore",
                                    "miss_from_extstore",
                                    "badcrc_from_extstore",
                                    "recache_from_extstore",
                                    "tc_ext_read_timeouts",
                                    "extstore_page_reclaims",
                                    "extstore_objects_lost"):
            if name == "extstore_bytes_written":
                continue
            assert after[name] == "0", (name, after[name])
        # buffers sealed before the reset may still be going out: at most
        # the three that are not the open one (4 buffers of 4 MiB)
        assert int(after["extstore_bytes_written"]) <= 3 * 4 * 1024 * 1024
        for name in EXT_GAUGES:
            assert after[name] == before[name], (name, before[name],
                                                 after[name])
        assert int(after["extstore_bytes_used"]) > 0
        assert int(after["tc_ext_items"]) > 0
        # and they count again from 0: read until a flash hit (some key
        # is on flash: tc_ext_items > 0)
        mc = Client((srv.host, srv.port), timeout=30)
        reads = 0
        for start in range(0, n, 50):
            mc.get_many(["xr:%06d" % i
                          for i in range(start, min(start + 50, n))])
            reads += 50
            if int(stats(srv)["get_extstore"]) > 0:
                break
        mc.close()
        again = stats(srv)
        assert 0 < int(again["get_extstore"]) <= reads
        assert int(again["extstore_objects_read"]) >= \
            int(again["get_extstore"])
    finally:
        if os.path.exists(srv.ext_path):
            os.unlink(srv.ext_path)


@pytest.mark.tiercache_only
@pytest.mark.parametrize("engine", ["uring", "epoll"])
def test_flash_reads_on_network_ring(spawn, engine):
    """On the io_uring loop a worker's flash reads go on its network ring
    (one ring, one io_uring_enter for both): tc_ext_reads_net_ring counts
    the reads completed there, > 0 once a get read from the device; on
    epoll the store's own ring reads and the counter stays 0. The values
    read back right either way."""
    srv = small_ext_server(spawn, ("-o", f"net_engine={engine}"))
    try:
        c = Conn(srv.host, srv.port)
        got = c.stats("settings")["tc_net_engine"]
        c.close()
        if got != engine:
            pytest.skip("io_uring refused here: " + srv.stderr_text().strip())
        n = 8 * 1024 * 1024 * 3 // VAL      # three times the memory
        fill_keys(srv, n).close()
        assert int(stats(srv)["tc_ext_items"]) > 0
        # values sit in write buffers (read from DRAM, no I/O) until the
        # writer got them out: read everything again until a read did I/O
        wait_for("a flash read from the device",
                 lambda: read_all(srv, n) and
                 int(stats(srv)["extstore_bytes_read"]) > 0, step=0)
        st = stats(srv)
        on_ring = int(st["tc_ext_reads_net_ring"])
        if engine == "uring":
            assert 0 < on_ring <= int(st["extstore_objects_read"]), st
        else:
            assert on_ring == 0, st
        for name in ("get_aborted_extstore", "badcrc_from_extstore"):
            assert st[name] == "0", (name, st[name])
    finally:
        if os.path.exists(srv.ext_path):
            os.unlink(srv.ext_path)


@pytest.mark.tiercache_only
def test_spills_from_first_eviction(spawn):
    """A fresh server with a spill file spills from its first eviction: the
    header class has a page (reserved at start), so no victim is evicted
    for want of a header chunk. The only victims evicted are those the
    flash was too busy to take (write buffers all full: how many depends
    on the writer's speed, so they are counted, not forbidden)."""
    srv = small_ext_server(spawn, mem=8)
    try:
        # just past the pool: 8 MiB of memory, 10 MiB of 4 KiB values
        n = 10 * 1024 * 1024 // VAL
        mc = fill_keys(srv, n)
        mc.close()
        st = stats(srv)
        print("evictions", st["evictions"], "spilled", st["tc_ext_spilled"],
              "spill busy", st["tc_ext_spill_busy"],
              "objects written", st["extstore_objects_written"])
        assert int(st["tc_ext_spilled"]) > 0
        assert int(st["evictions"]) == int(st["tc_ext_spill_busy"]), st
        assert int(st["extstore_objects_written"]) == \
            int(st["tc_ext_spilled"])
        assert int(st["curr_items"]) + int(st["evictions"]) == n
        assert read_all(srv, n) == int(st["curr_items"])
    finally:
        if os.path.exists(srv.ext_path):
            os.unlink(srv.ext_path)


@pytest.fixture
def loop_device():
    """A loop device over a 96 MiB file in flash_dir(): its path. Skipped, with
    the reason, where loop devices cannot be made (not root, no
    /dev/loop-control, a container without them). Detached at teardown."""
    if IS_MEMCACHED:
        pytest.skip("tiercache-only")
    if os.geteuid() != 0:
        pytest.skip("loop devices need root")
    if not os.path.exists("/dev/loop-control"):
        pytest.skip("no /dev/loop-control: loop devices unavailable")
    img = flash_file("tc-proto-loop", ".img")
    with open(img, "wb") as f:
        f.truncate(96 * 1024 * 1024)
    try:
        p = subprocess.run(["losetup", "--find", "--show", img],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        os.unlink(img)
        pytest.skip(f"losetup failed: {e}")
    if p.returncode != 0 or not p.stdout.strip().startswith("/dev/"):
        os.unlink(img)
        pytest.skip(f"losetup --find --show failed: {p.stderr.strip()}")
    dev = p.stdout.strip()
    try:
        yield dev
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True,
                       timeout=30)
        os.unlink(img)


@pytest.mark.tiercache_only
def test_block_device(spawn, loop_device):
    """-o ext_path=/dev/loopN:SIZE: a block device holds the spilled
    values (sized by BLKGETSIZE64, not fallocated); everything reads back
    right."""
    srv = spawn("-o", "ext_page_size=8", "-o", "ext_recache_rate=0",
                "-o", f"ext_path={loop_device}:64m", *NO_READ_DEADLINE,
                mem=8, threads=1)
    n = 3 * 8 * 1024 * 1024 // VAL
    mc = fill_keys(srv, n, prefix="xb")
    hits = 0
    for start in range(0, n, 100):
        got = mc.get_many(["xb:%06d" % i
                           for i in range(start, min(start + 100, n))])
        for k, v in got.items():
            assert v == value_of(int(k[3:])), k
        hits += len(got)
    mc.close()
    st = stats(srv)
    # every key read back right or was evicted (counted)
    assert hits + int(st["evictions"]) == n, (hits, n, st["evictions"])
    assert int(st["tc_ext_spilled"]) > 0
    assert int(st["get_extstore"]) > 0
    assert int(st["extstore_limit_maxbytes"]) == 64 * 1024 * 1024
    assert int(st["badcrc_from_extstore"]) == 0
    assert os.path.exists(loop_device)   # a device is never unlinked


@pytest.mark.tiercache_only
def test_block_device_too_small(run_server, loop_device):
    status, err = run_server(["-o", "ext_page_size=8",
                              "-o", f"ext_path={loop_device}:128m"])
    assert status == 1, (status, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert loop_device in lines[0] and "does not fit" in lines[0], lines[0]
    assert str(96 * 1024 * 1024) in lines[0], lines[0]
