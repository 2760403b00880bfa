"""Restart (doc/operating.md, "Restart"): tiercached started again on the
same -e pool file brings its items back, after kill -9 (recovered) and
after SIGTERM (warm); deleted and flushed keys stay gone; -o no_restart and
a start without -e are cold.

Every server here is started by this file on its own pool file, killed or
stopped by its PID, and the pool file removed at the end. No assertion
depends on timing: each restart is judged by what was acknowledged before
the kill.
"""

import os
import signal
import time
import uuid

import pytest

from conftest import HOST, IS_MEMCACHED, Conn, flash_file, start_server

pytestmark = pytest.mark.skipif(IS_MEMCACHED,
                                reason="tiercache's restart from its pool")

def _start(pool, extra=()):
    """tiercached -v on pool (kept by Server.cleanup: the fixture owns it;
    None: no -e)."""
    return start_server(("-v",) + tuple(extra), pool=pool)


def _kill9(srv):
    """kill -9 the PID this test started, and wait for it."""
    srv.stopped = True
    os.kill(srv.pid, signal.SIGKILL)
    assert srv.wait_exit() == -signal.SIGKILL
    srv.cleanup()


def _stop(srv):
    """SIGTERM the PID this test started; its exit status 0 asserted;
    returns its stderr (the -v log)."""
    srv.stopped = True
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.wait_exit() == 0
    log = srv.stderr_text()
    srv.check_stderr()
    srv.cleanup()
    return log


@pytest.fixture
def pool():
    path = f"/dev/shm/tc-restart-{os.getpid()}-{uuid.uuid4().hex}.pool"
    servers = []
    yield path, servers
    for s in servers:
        s.kill()
    for p in (path, path + ".meta"):
        if os.path.exists(p):
            os.unlink(p)


def _value(i, gen):
    return (b"v%d-%d-" % (i, gen)) * (1 + (i * 7 + gen) % 40)


def _load(c, n):
    """Sets, overwrites and deletes; returns key -> expected value (None:
    must miss), with flags i."""
    want = {}
    for i in range(n):
        k = b"rk%05d" % i
        c.cmd(b"set %s %d 0 %d\r\n%s\r\n" % (k, i, len(_value(i, 1)),
                                             _value(i, 1)), b"STORED\r\n")
        want[k] = _value(i, 1)
    for i in range(0, n, 3):
        k = b"rk%05d" % i
        c.cmd(b"set %s %d 0 %d\r\n%s\r\n" % (k, i, len(_value(i, 2)),
                                             _value(i, 2)), b"STORED\r\n")
        want[k] = _value(i, 2)
    for i in range(1, n, 5):
        k = b"rk%05d" % i
        c.cmd(b"delete %s\r\n" % k, b"DELETED\r\n")
        want[k] = None
    return want


def _judge(c, want):
    for k, v in want.items():
        got = c.get_value(k)
        assert got == v, f"{k!r}: expected {v!r}, got {got!r}"
        if v is not None:
            c.send(b"gets %s\r\n" % k)
            head = c.readline()
            flags = int(head.split()[2])
            assert flags == int(k[2:]), head
            c.read_until(b"END\r\n")


def test_kill9_then_restart(pool):
    path, servers = pool
    n = 600
    srv = _start(path)
    servers.append(srv)
    c = Conn(HOST, srv.port)
    want = _load(c, n)
    cas_before = {}
    for k in (b"rk00000", b"rk00002"):
        c.send(b"gets %s\r\n" % k)
        cas_before[k] = c.readline().split()[4]
        c.read_until(b"END\r\n")
    c.close()
    _kill9(srv)

    srv2 = _start(path)
    servers.append(srv2)
    c = Conn(HOST, srv2.port)
    _judge(c, want)
    for k, cas in cas_before.items():
        c.send(b"gets %s\r\n" % k)
        assert c.readline().split()[4] == cas
        c.read_until(b"END\r\n")
    st = c.stats()
    live = sum(1 for v in want.values() if v is not None)
    assert st["restart_kind"] == "recovered"
    assert int(st["restart_items"]) == live
    assert int(st["restart_dropped"]) == 0
    assert int(st["curr_items"]) == live
    float(st["restart_seconds"])
    # a new store gets a CAS above the restored ones
    c.cmd(b"set fresh 0 0 1\r\nx\r\n", b"STORED\r\n")
    c.send(b"gets fresh\r\n")
    new_cas = int(c.readline().split()[4])
    c.read_until(b"END\r\n")
    assert new_cas > max(int(x) for x in cas_before.values())
    c.close()

    # a clean stop: the next start is warm, with the same items
    log = _stop(srv2)
    assert "recovered start" in log and "restored" in log, log
    srv3 = _start(path)
    servers.append(srv3)
    c = Conn(HOST, srv3.port)
    want[b"fresh"] = b"x"
    for k, v in want.items():
        assert c.get_value(k) == v, k
    st = c.stats()
    assert st["restart_kind"] == "warm"
    assert int(st["restart_items"]) == live + 1
    c.close()
    log = _stop(srv3)
    assert "warm start" in log and "restored" in log, log


def test_flush_all_survives_kill9(pool):
    path, servers = pool
    srv = _start(path)
    servers.append(srv)
    c = Conn(HOST, srv.port)
    for i in range(20):
        c.set(b"fk%d" % i, b"old%d" % i)
    c.cmd(b"flush_all\r\n", b"OK\r\n")
    c.set(b"after", b"kept")
    c.close()
    _kill9(srv)
    srv2 = _start(path)
    servers.append(srv2)
    c = Conn(HOST, srv2.port)
    for i in range(20):
        assert c.get_value(b"fk%d" % i) is None
    assert c.get_value(b"after") == b"kept"
    st = c.stats()
    assert st["restart_kind"] == "recovered"
    assert st["restart_items"] == "1"
    assert st["restart_dropped"] == "20"
    c.close()


def test_no_restart_is_cold(pool):
    path, servers = pool
    srv = _start(path)
    servers.append(srv)
    c = Conn(HOST, srv.port)
    c.set(b"k", b"v")
    c.close()
    _kill9(srv)
    srv2 = _start(path, ("-o", "no_restart"))
    servers.append(srv2)
    c = Conn(HOST, srv2.port)
    assert c.get_value(b"k") is None
    st = c.stats()
    assert st["restart_kind"] == "cold"
    assert st["restart_items"] == "0"
    c.close()
    assert "cold start: restart turned off" in _stop(srv2)


def test_without_e_is_cold_and_scratch(pool):
    """No -e: the default file named after the port is formatted at every
    start and removed at a clean stop."""
    _, servers = pool
    srv = _start(None)
    servers.append(srv)
    default = f"/dev/shm/tiercache.{srv.port}.pool"
    try:
        assert os.path.exists(default)
        c = Conn(HOST, srv.port)
        c.set(b"k", b"v")
        st = c.stats()
        assert st["restart_kind"] == "cold"
        c.close()
        log = _stop(srv)
        assert not os.path.exists(default)
        assert "scratch" in log, log
    finally:
        if os.path.exists(default):
            os.unlink(default)


@pytest.fixture
def flash():
    """The flags of a small pool whose data is mostly on a flash file of
    the test's own (removed afterwards)."""
    ext = flash_file("tc-restart-ext", ".nvs")
    yield ("-m", "16", "-o", "ext_page_size=4", "-o", "ext_wbuf_size=1",
           "-o", "ext_recache_rate=0", "-o", "ext_read_timeout_ms=0",
           "-o", f"ext_path={ext}:192m")
    if os.path.exists(ext):
        os.unlink(ext)


def _fx_value(i):
    return (b"%05d" % i) * 819 + b"x"  # 4096 bytes


def _again(pool, extra, kind):
    """tiercached started again on the fixture's pool, its restart_kind
    asserted; returns (server, connection, stats)."""
    path, servers = pool
    srv = _start(path, extra)
    servers.append(srv)
    c = Conn(HOST, srv.port)
    st = c.stats()
    assert st["restart_kind"] == kind, st["restart_kind"]
    return srv, c, st


def _fill_flash(c):
    """fx00000.. stored in batches of 1,000 until flash holds two thirds of
    the items (at most 40 batches), each batch followed by a bounded wait
    (3 s) for a writer that fell behind, so that the next batch spills
    rather than evicts. Returns (keys stored, items on flash), the latter
    asserted above 0."""
    n = 0
    for _ in range(40):
        for i in range(n, n + 1000):
            v = _fx_value(i)
            c.cmd(b"set fx%05d %d 0 %d\r\n%s\r\n" % (i, i, len(v), v),
                  b"STORED\r\n")
        n += 1000
        written = -1
        for _ in range(30):
            now = int(c.stats()["extstore_bytes_written"])
            if now == written:
                break
            written = now
            time.sleep(0.1)
        fl = int(c.stats("tiers")["nvme:items"])
        if fl > 2 * (int(c.stats()["curr_items"]) - fl):
            break
    on_flash = int(c.stats("tiers")["nvme:items"])
    assert on_flash > 0
    return n, on_flash


def test_flash_kill9_then_restart(pool, flash):
    """The flash tier holding most of the data (-m 16, 4 KiB values, an
    ext_path file): kill -9 with the flash writer at work, restart on the
    same pool and flash files: every key reads its value or misses, and
    most of what read back before the kill comes back, from flash too.
    Values still in the flash write buffers at the kill are lost (misses),
    never read as something else (the keys stored by _fill_flash)."""
    path, servers = pool
    extra = flash
    srv = _start(path, extra)
    servers.append(srv)
    c = Conn(HOST, srv.port)
    n, on_flash = _fill_flash(c)
    before = 0
    for i in range(n):
        got = c.get_value(b"fx%05d" % i)
        assert got is None or got == _fx_value(i), i
        before += got is not None
    c.close()
    _kill9(srv)

    srv2, c, st = _again(pool, extra, "recovered")
    back = 0
    for i in range(n):
        got = c.get_value(b"fx%05d" % i)
        assert got is None or got == _fx_value(i), \
            f"fx{i:05d}: got {got[:40]!r}..."
        back += got is not None
    tiers = c.stats("tiers")
    print(f"flash restart: {back} of {before} readable keys back "
          f"({n} stored), {tiers['nvme:items']} of {on_flash} on flash, "
          f"dropped {st['restart_dropped']}")
    assert back > before // 2, (back, before)
    assert int(tiers["nvme:items"]) > on_flash // 2, (tiers, on_flash)
    # the store goes on: new values spill and read back
    for i in range(n, n + 2000):
        v = _fx_value(i)
        c.cmd(b"set fx%05d %d 0 %d\r\n%s\r\n" % (i, i, len(v), v),
              b"STORED\r\n")
    assert c.get_value(b"fx%05d" % (n + 1999)) == _fx_value(n + 1999)
    c.close()
    log = _stop(srv2)
    assert "flash tier:" in log and "reattached" in log, log


def test_durability_option(pool, run_server):
    """-o durability: a bad level exits with one line; power starts, says
    in one line what it does on this mapping (on /dev/shm: the same as
    process), shows in stats settings, and its items come back after
    kill -9 like process's."""
    path, servers = pool
    status, stderr = run_server(("-o", "durability=disk"))
    assert status != 0
    err = stderr.strip().splitlines()
    assert len(err) == 1 and "durability" in err[0] and "disk" in err[0], err

    srv = _start(path, ("-o", "durability=power"))
    servers.append(srv)
    c = Conn(HOST, srv.port)
    assert c.stats("settings")["tc_durability"] == "power"
    for i in range(50):
        c.set(b"dk%d" % i, b"dv%d" % i)
    c.close()
    _kill9(srv)
    srv2 = _start(path, ("-o", "durability=power"))
    servers.append(srv2)
    c = Conn(HOST, srv2.port)
    for i in range(50):
        assert c.get_value(b"dk%d" % i) == b"dv%d" % i
    c.close()
    log = _stop(srv2)
    assert "durability=power" in log, log


# --- clean stop: the saved state (doc/operating.md, "Restarts") ---

def _mg(c, k):
    """(value, flags, ttl, cas) of k through mg, or None on a miss."""
    c.send(b"mg %s f t c v\r\n" % k)
    head = c.readline()
    if head.startswith(b"EN"):
        return None
    toks = head.split()
    assert toks[0] == b"VA", head
    fields = {t[:1]: t[1:] for t in toks[2:]}
    value = c.recv_exact(int(toks[1]) + 2)[:-2]
    return value, int(fields[b"f"]), int(fields[b"t"]), int(fields[b"c"])


def _load_ttl(c, n):
    """n items, every third with a TTL; returns key -> (value, flags, ttl,
    cas) as mg saw them."""
    got = {}
    for i in range(n):
        k = b"wk%05d" % i
        v = _value(i, 3)
        ttl = 3600 + i if i % 3 == 0 else 0
        c.cmd(b"set %s %d %d %d\r\n%s\r\n" % (k, i * 7, ttl, len(v), v),
              b"STORED\r\n")
    for i in range(n):
        k = b"wk%05d" % i
        got[k] = _mg(c, k)
    return got


def _judge_ttl(c, before):
    for k, (v, flags, ttl, cas) in before.items():
        now = _mg(c, k)
        assert now is not None, f"{k!r} missing after a clean stop"
        assert now[0] == v and now[1] == flags and now[3] == cas, (k, now)
        if ttl < 0:
            assert now[2] == -1, (k, now)
        else:
            # the same absolute expiry; the clock moved on by the restart
            assert ttl - 60 <= now[2] <= ttl, (k, ttl, now)


def _stop_by(srv, how):
    """Stop the PID this test started by a signal or by shutdown graceful;
    exit status 0 asserted; returns its -v log."""
    srv.stopped = True
    if how == "shutdown":
        c = Conn(HOST, srv.port)
        c.send(b"shutdown graceful\r\n")
        assert c.closed_by_peer()
        c.close()
    else:
        srv.proc.send_signal(how)
    assert srv.wait_exit() == 0
    log = srv.stderr_text()
    srv.check_stderr()
    srv.cleanup()
    return log


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGUSR1, "shutdown"],
                         ids=["sigterm", "sigusr1", "shutdown_graceful"])
def test_clean_stop_restores_everything(pool, how):
    path, servers = pool
    n = 1500
    srv = _start(path, ("-A",))
    servers.append(srv)
    c = Conn(HOST, srv.port)
    before = _load_ttl(c, n)
    c.close()
    log = _stop_by(srv, how)
    assert "state saved to %s.meta" % path in log, log
    assert os.path.exists(path + ".meta")

    srv2 = _start(path)
    servers.append(srv2)
    assert not os.path.exists(path + ".meta"), "the saved state is used once"
    c = Conn(HOST, srv2.port)
    _judge_ttl(c, before)
    st = c.stats()
    assert st["restart_kind"] == "warm"
    assert int(st["restart_items"]) == n
    assert int(st["restart_dropped"]) == 0
    assert int(st["curr_items"]) == n
    # the CAS counter goes on above the restored ones
    c.cmd(b"set fresh 0 0 1\r\nx\r\n", b"STORED\r\n")
    assert _mg(c, b"fresh")[3] > max(x[3] for x in before.values())
    c.close()
    log = _stop(srv2)
    assert "warm start (with the saved state): %d items" % n in log, log
    assert "not used" not in log, log


def test_clean_mark_consumed(pool):
    """A warm start consumes the clean mark: a kill -9 after it is a crash
    start (scanned, "recovered"), never a second warm one."""
    path, servers = pool
    srv = _start(path)
    servers.append(srv)
    c = Conn(HOST, srv.port)
    before = _load_ttl(c, 300)
    c.close()
    _stop(srv)
    srv2 = _start(path)
    servers.append(srv2)
    c = Conn(HOST, srv2.port)
    assert c.stats()["restart_kind"] == "warm"
    c.set(b"late", b"after the warm start")
    c.close()
    _kill9(srv2)
    srv3 = _start(path)
    servers.append(srv3)
    c = Conn(HOST, srv3.port)
    st = c.stats()
    assert st["restart_kind"] == "recovered"
    assert int(st["restart_items"]) == 301
    _judge_ttl(c, before)
    assert c.get_value(b"late") == b"after the warm start"
    c.close()
    log = _stop(srv3)
    assert "recovered start" in log and "saved state" not in log, log


def _flip(path):
    with open(path, "r+b") as f:
        size = os.path.getsize(path)
        for at in (size // 2, size - 3):
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0x5a]))


def _truncate(path):
    os.truncate(path, os.path.getsize(path) - 24)


def _flip_header(path):
    with open(path, "r+b") as f:
        f.seek(16)  # the CAS counter
        b = f.read(1)
        f.seek(16)
        f.write(bytes([b[0] ^ 1]))


@pytest.mark.parametrize("damage", [_flip, _truncate, _flip_header],
                         ids=["flipped", "truncated", "header"])
def test_damaged_saved_state(pool, damage):
    """A saved state that fails its check is not used: one log line, every
    item back as it was (the scan needs nothing saved), the CAS counter
    above every restored CAS."""
    path, servers = pool
    n = 800
    srv = _start(path)
    servers.append(srv)
    c = Conn(HOST, srv.port)
    before = _load_ttl(c, n)
    c.close()
    _stop(srv)
    damage(path + ".meta")
    srv2 = _start(path)
    servers.append(srv2)
    c = Conn(HOST, srv2.port)
    _judge_ttl(c, before)
    st = c.stats()
    assert st["restart_kind"] == "warm"
    assert int(st["restart_items"]) == n
    c.cmd(b"set fresh 0 0 1\r\nx\r\n", b"STORED\r\n")
    assert _mg(c, b"fresh")[3] > max(x[3] for x in before.values())
    c.close()
    log = _stop(srv2)
    lines = [x for x in log.splitlines() if "saved state" in x]
    assert len(lines) == 2 and "not used" in lines[0], log
    assert "warm start (without saved state: it failed a check): %d items" \
        % n in log, log
    assert not os.path.exists(path + ".meta") or "state saved" in log


def test_flash_clean_stop_restores_everything(pool, flash):
    """The flash tier holding most of the data, then a clean stop: the
    warm start brings back every key that read
    before the stop, those on flash too, with their flags, and none that
    did not."""
    path, servers = pool
    extra = flash
    srv = _start(path, extra)
    servers.append(srv)
    c = Conn(HOST, srv.port)
    n, on_flash = _fill_flash(c)
    before = set()
    for i in range(n):
        got = c.get_value(b"fx%05d" % i)
        assert got is None or got == _fx_value(i), i
        if got is not None:
            before.add(i)
    c.close()
    _stop(srv)

    srv2, c, st = _again(pool, extra, "warm")
    for i in range(n):
        c.send(b"get fx%05d\r\n" % i)
        line = c.readline()
        if i not in before:  # evicted before the stop: stays gone
            assert line == b"END\r\n", (i, line)
            continue
        v = _fx_value(i)
        assert line == b"VALUE fx%05d %d %d\r\n" % (i, i, len(v)), \
            (i, line)
        assert c.recv_exact(len(v) + 2) == v + b"\r\n"
        assert c.readline() == b"END\r\n"
    tiers = c.stats("tiers")
    # (the writer may have spilled more before the stop finished)
    assert int(tiers["nvme:items"]) >= on_flash, (tiers, on_flash)
    c.close()
    log = _stop(srv2)
    assert "warm start (with the saved state)" in log, log


# --- clean stop: the DRAM hot pool is written back first ---

# hotkey_window=60: a key stays hot for tens of seconds after its last
# burst, so the maintenance tick does not move it back to PMEM between the
# check below and the stop (whatever it does, every value must come back)
HOT_OPTS = ("-o", "hot_pool_size=1m,hot_write_rate=20,hotkey_window=60,"
            "hotkey_sample=1")
HOT_KEYS = [b"hot%d" % i for i in range(4)]


def _hot_burst(c, k, count, tag):
    """count pipelined sets of k, one write, every reply read."""
    vals = [b"%s-%s-%d" % (k, tag, j) for j in range(count)]
    c.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v)
                    for v in vals))
    for _ in vals:
        c.expect(b"STORED\r\n")


def _hot_in_dram(c):
    """The keys of the write view that live in the DRAM hot pool."""
    rows = {}
    for name, val in c.stats("hotkeys").items():
        by, rank, field = name.split(":")
        rows.setdefault((by, int(rank)), {})[field] = val
    return {r["key"].encode() for (by, _), r in rows.items()
            if by == "write" and r["in_dram"] == "yes"}


def test_clean_stop_writes_hot_pool_back(pool):
    """Keys held in the DRAM hot pool at a SIGTERM are written back to the
    pool before the state is saved: after the restart every key, hot or
    not, is back with its latest value, flags, TTL and CAS."""
    path, servers = pool
    n = 300
    srv = _start(path, HOT_OPTS)
    servers.append(srv)
    c = Conn(HOST, srv.port)
    before = _load_ttl(c, n)
    # bursts until a tick has seen every hot key hot and a later write
    # moved it into DRAM (bounded)
    end = time.monotonic() + 60
    rounds = 0
    while not set(HOT_KEYS) <= _hot_in_dram(c):
        assert time.monotonic() < end, "hot keys never reached DRAM"
        for k in HOT_KEYS:
            _hot_burst(c, k, 500, b"b%d" % rounds)
        rounds += 1
    # their last values, written while they are held in DRAM
    for i, k in enumerate(HOT_KEYS):
        v = b"latest-%d" % i
        c.cmd(b"set %s %d %d %d\r\n%s\r\n" % (k, 40 + i, 3600 + i, len(v), v),
              b"STORED\r\n")
        before[k] = _mg(c, k)
    assert int(c.stats()["hot_pool_bytes"]) > 0
    c.close()
    log = _stop(srv)
    total = n + len(HOT_KEYS)
    assert "state saved to %s.meta" % path in log, log
    assert "not written back" not in log, log
    assert "of the DRAM hot pool written back at close" in log, log

    srv2 = _start(path, HOT_OPTS)
    servers.append(srv2)
    c = Conn(HOST, srv2.port)
    _judge_ttl(c, before)
    for i, k in enumerate(HOT_KEYS):
        assert _mg(c, k)[0] == b"latest-%d" % i
    st = c.stats()
    assert st["restart_kind"] == "warm"
    assert int(st["restart_items"]) == total
    assert int(st["curr_items"]) == total
    c.close()
    log = _stop(srv2)
    assert "warm start (with the saved state): %d items" % total in log, log
