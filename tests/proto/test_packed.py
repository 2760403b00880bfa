"""The packed small-item store (-o packed_item_max, doc/operating.md
"Packed small items") through the protocol: set/get/gets/cas across
rewrites, client flags 0..15 and above, touch in place and by a rewrite,
delete, the meta flags, FIFO eviction under a small -m, the stats rows and
"stats settings", and a restart (kill -9, SIGTERM) that brings packed items
back with their flags, expiry and CAS, never a deleted or replaced one.

Every server here is started by this file, on a pool file of its own, and
stopped or killed by its PID. Loops are bounded by counts; nothing waits
on a background thread.
"""

import os
import re
import signal
import time
import uuid

import pytest

from conftest import IS_MEMCACHED, Conn, start_server

pytestmark = pytest.mark.skipif(IS_MEMCACHED,
                                reason="tiercache's packed item store")

PACKED = ("-o", "packed_item_max=1024")


@pytest.fixture(scope="module")
def psrv():
    srv = start_server(PACKED)
    yield srv
    srv.stop()


@pytest.fixture
def c(psrv):
    conn = Conn(psrv.host, psrv.port)
    yield conn
    conn.close()


def gets(c, key):
    """(flags, value, cas) of key, or None."""
    c.send(b"gets " + key + b"\r\n")
    line = c.readline()
    if line == b"END\r\n":
        return None
    m = re.match(rb"VALUE (\S+) (\d+) (\d+) (\d+)\r\n$", line)
    assert m, line
    val = c.recv_exact(int(m.group(3)) + 2)[:-2]
    c.expect(b"END\r\n")
    return int(m.group(2)), val, int(m.group(4))


def stats(c, group=""):
    return c.stats(group)


def test_stats_settings_and_rows(c):
    assert stats(c, "settings")["packed_item_max"] == "1024"
    c.cmd(b"set rows 0 0 3\r\nabc\r\n", b"STORED\r\n")
    s = stats(c)
    for row in ("packed_items", "packed_segments", "packed_segments_open",
                "packed_bytes_live", "packed_bytes_dead",
                "packed_segments_evicted", "packed_segments_expired",
                "packed_cas_lifted"):
        assert row in s, row
    assert int(s["packed_items"]) >= 1
    assert int(s["packed_segments"]) >= 1
    # the connection's worker holds one open; at most 1/8 of the pages
    pages = int(s["tc_pmem_pages_total"])
    assert 1 <= int(s["packed_segments_open"]) <= max(1, pages // 8)
    assert int(s["packed_segments_open"]) <= int(s["packed_segments"])
    # the segment records (64 bytes a page) are in the DRAM metadata
    assert int(s["tc_dram_meta_bytes"]) >= 64 * pages
    assert int(s["curr_items"]) >= int(s["packed_items"])


def test_set_get_cas_across_rewrites(c):
    # the rows show once the store held a segment: 0 before any set
    before = int(stats(c).get("packed_items", 0))
    c.cmd(b"set pk 5 0 5\r\nhello\r\n", b"STORED\r\n")
    assert int(stats(c)["packed_items"]) == before + 1
    f, v, cas1 = gets(c, b"pk")
    assert (f, v) == (5, b"hello")
    c.cmd(b"cas pk 6 0 3 %d\r\nbye\r\n" % (cas1 + 1), b"EXISTS\r\n")
    c.cmd(b"cas pk 6 0 3 %d\r\nbye\r\n" % cas1, b"STORED\r\n")
    f, v, cas2 = gets(c, b"pk")
    assert (f, v) == (6, b"bye") and cas2 != cas1
    c.cmd(b"cas pk 0 0 1 %d\r\nx\r\n" % cas1, b"EXISTS\r\n")
    # a large value goes to a slab, the packed copy dies; and back
    big = b"B" * 3000
    c.cmd(b"set pk 1 0 %d\r\n%s\r\n" % (len(big), big), b"STORED\r\n")
    assert gets(c, b"pk")[1] == big
    c.cmd(b"set pk 2 0 2\r\nok\r\n", b"STORED\r\n")
    f, v, cas3 = gets(c, b"pk")
    assert (f, v) == (2, b"ok") and cas3 not in (cas1, cas2)
    c.cmd(b"add pk 0 0 1\r\nz\r\n", b"NOT_STORED\r\n")
    c.cmd(b"replace pk 3 0 3\r\nrep\r\n", b"STORED\r\n")
    c.cmd(b"get pk\r\n", b"VALUE pk 3 3\r\nrep\r\nEND\r\n")
    # append and incr rewrite into a slab, with the right value
    c.cmd(b"append pk 0 0 2\r\n!!\r\n", b"STORED\r\n")
    c.cmd(b"get pk\r\n", b"VALUE pk 3 5\r\nrep!!\r\nEND\r\n")
    c.cmd(b"set num 0 0 2\r\n41\r\n", b"STORED\r\n")
    c.cmd(b"incr num 1\r\n", b"42\r\n")
    c.cmd(b"get num\r\n", b"VALUE num 0 2\r\n42\r\nEND\r\n")


@pytest.mark.parametrize("flags", [0, 1, 9, 15, 16, 255, 65536, 4294967295])
def test_flags(c, flags):
    key = b"fl%d" % flags
    c.cmd(b"set %s %d 0 4\r\nflag\r\n" % (key, flags), b"STORED\r\n")
    c.cmd(b"get %s\r\n" % key,
          b"VALUE %s %d 4\r\nflag\r\nEND\r\n" % (key, flags))
    c.cmd(b"mg %s f v\r\n" % key, b"VA 4 f%d\r\nflag\r\n" % flags)


def _ttl(c, key):
    c.send(b"mg " + key + b" t\r\n")
    line = c.readline()
    m = re.match(rb"HD t(-?\d+)\r\n$", line)
    assert m, line
    return int(m.group(1))


def test_touch_in_place_and_by_rewrite(c):
    # with an expiry (exp16 here), touched in place
    c.cmd(b"set ta 7 100 2\r\naa\r\n", b"STORED\r\n")
    cas = gets(c, b"ta")[2]
    dead = int(stats(c)["packed_bytes_dead"])
    c.cmd(b"touch ta 1000\r\n", b"TOUCHED\r\n")
    assert 990 <= _ttl(c, b"ta") <= 1000
    assert gets(c, b"ta") == (7, b"aa", cas)
    assert int(stats(c)["packed_bytes_dead"]) == dead
    # never expiring (exp16 0): a touch within exp16's reach (65,534 s
    # from its segment's exp_base) is in place too
    c.cmd(b"set tb 8 0 2\r\nbb\r\n", b"STORED\r\n")
    cas = gets(c, b"tb")[2]
    c.cmd(b"touch tb 500\r\n", b"TOUCHED\r\n")
    assert 490 <= _ttl(c, b"tb") <= 500
    assert int(stats(c)["packed_bytes_dead"]) == dead
    # beyond it: the touch rewrites it, keeping flags, value and CAS
    c.cmd(b"touch tb 100000\r\n", b"TOUCHED\r\n")
    assert 99990 <= _ttl(c, b"tb") <= 100000
    assert gets(c, b"tb") == (8, b"bb", cas)
    assert int(stats(c)["packed_bytes_dead"]) > dead
    c.cmd(b"cas tb 8 0 3 %d\r\nnew\r\n" % cas, b"STORED\r\n")
    # gat: served (in place, within exp16's reach)
    c.cmd(b"set tc 0 0 2\r\ncc\r\n", b"STORED\r\n")
    c.cmd(b"gat 300 tc\r\n", b"VALUE tc 0 2\r\ncc\r\nEND\r\n")
    assert 290 <= _ttl(c, b"tc") <= 300
    c.cmd(b"touch tc 0\r\n", b"TOUCHED\r\n")
    assert _ttl(c, b"tc") == -1
    c.cmd(b"touch nokey 10\r\n", b"NOT_FOUND\r\n")


def test_touch_rewrite_keeps_fetched_and_win(c):
    """A touch that rewrites a packed item (an expiry too far for its
    16-bit form) keeps what memcached keeps on a touch: fetched (h), and
    the recache win (W handed out once, Z after)."""
    far = 2000000  # past 65,534 s from the segment's exp_base
    c.cmd(b"set th 0 0 2\r\nhh\r\n", b"STORED\r\n")
    dead = int(stats(c)["packed_bytes_dead"])
    c.cmd(b"mg th T%d v\r\n" % far, b"VA 2\r\nhh\r\n")  # fetch, rewrite
    assert int(stats(c)["packed_bytes_dead"]) > dead  # it was a rewrite
    c.cmd(b"mg th h\r\n", b"HD h1\r\n")
    assert far - 10 <= _ttl(c, b"th") <= far
    c.cmd(b"set ts 0 0 2\r\nss\r\n", b"STORED\r\n")
    c.cmd(b"mg ts T%d s\r\n" % far, b"HD s2\r\n")
    c.cmd(b"mg ts h\r\n", b"HD h1\r\n")
    c.cmd(b"set tw 0 0 2\r\nww\r\n", b"STORED\r\n")
    c.cmd(b"md tw I\r\n", b"HD\r\n")
    c.cmd(b"mg tw\r\n", b"HD X W\r\n")  # the win handed out
    c.cmd(b"mg tw T%d\r\n" % far, b"HD Z X\r\n")  # then rewritten
    c.send(b"mg tw t\r\n")
    m = re.match(rb"HD t(\d+) Z X\r\n$", c.readline())
    assert m and far - 10 <= int(m.group(1)) <= far


def test_cas_grows_per_key(c):
    """A key's CAS only grows, as memcached's: meta's I mode ("a CAS older
    than the item's stores a stale item") relies on it, also when a slab
    item is replaced by a packed one."""
    big = b"b" * 2000
    # the connection's worker opens its segment (takes its CAS block) first
    c.cmd(b"set gk_open 0 0 1\r\no\r\n", b"STORED\r\n")
    c.cmd(b"set gk 0 0 2000\r\n" + big + b"\r\n", b"STORED\r\n")
    older = gets(c, b"gk")[2]
    lifted = int(stats(c).get("packed_cas_lifted", "0"))
    c.cmd(b"set gk 0 0 5\r\nsmall\r\n", b"STORED\r\n")
    newer = gets(c, b"gk")[2]
    assert newer > older
    assert int(stats(c)["packed_cas_lifted"]) == lifted + 1
    c.cmd(b"ms gk 3 C%d I\r\nold\r\n" % older, b"HD\r\n")
    c.cmd(b"mg gk v\r\n", b"VA 3 X W\r\nold\r\n")


def test_cas_grows_across_delete(c):
    """A key deleted and stored again gets a CAS above the deleted one's,
    though its worker's segment (whose block gives a packed item its CAS)
    opened before it (the CAS floor; the memcached differential test,
    seed 20261125, sequence 1525)."""
    big = b"d" * 2000
    # the connection's worker opens its segment (takes its CAS block) first
    c.cmd(b"set fk_open 0 0 1\r\no\r\n", b"STORED\r\n")
    for rm, answer in ((b"delete fk\r\n", b"DELETED\r\n"),
                       (b"md fk\r\n", b"HD\r\n")):
        # a slab item: a CAS of the counter, above the open block
        c.cmd(b"set fk 0 0 2000\r\n" + big + b"\r\n", b"STORED\r\n")
        older = gets(c, b"fk")[2]
        c.cmd(rm, answer)
        c.cmd(b"ma fk J5 MI N2592000 v\r\n", b"VA 1\r\n5\r\n")
        assert gets(c, b"fk")[2] > older
        # older than the item's: stored marked stale (memcached: HD)
        c.cmd(b"ms fk 3 C%d I\r\nold\r\n" % older, b"HD\r\n")
        c.cmd(b"mg fk v\r\n", b"VA 3 X W\r\nold\r\n")


def test_delete(c):
    c.cmd(b"set dk 0 0 3\r\nval\r\n", b"STORED\r\n")
    c.cmd(b"delete dk\r\n", b"DELETED\r\n")
    c.cmd(b"get dk\r\n", b"END\r\n")
    c.cmd(b"delete dk\r\n", b"NOT_FOUND\r\n")
    c.cmd(b"ms dm 3\r\nabc\r\n", b"HD\r\n")
    c.cmd(b"md dm q\r\nmn\r\n", b"MN\r\n")
    c.cmd(b"mg dm v\r\n", b"EN\r\n")


def test_meta_flags(c):
    c.cmd(b"ms mk 5 F20 T100\r\nhello\r\n", b"HD\r\n")
    cas = gets(c, b"mk")[2]
    c.send(b"mg mk v f c t s k\r\n")
    line = c.readline()
    assert line.startswith(b"VA 5 "), line
    toks = line.split()[2:]
    assert b"f20" in toks and b"c%d" % cas in toks and b"s5" in toks
    assert b"kmk" in toks
    t = [int(x[1:]) for x in toks if x.startswith(b"t")][0]
    assert 90 <= t <= 100
    c.expect(b"hello\r\n")
    # h and l answer (an unfetched item, just accessed: no more than its
    # true age)
    c.send(b"mg mk h l\r\n")
    line = c.readline()
    m = re.match(rb"HD h([01]) l(\d+)\r\n$", line)
    assert m, line
    assert int(m.group(2)) <= 2
    # ms with a chosen CAS (E) and mg's c report it
    c.cmd(b"ms me 2 E987654321\r\nme\r\n", b"HD\r\n")
    c.cmd(b"mg me c v\r\n", b"VA 2 c987654321\r\nme\r\n")
    c.cmd(b"ms mk 2 C%d\r\nzz\r\n" % (cas + 1), b"EX\r\n")
    c.cmd(b"ms mk 2 C%d\r\nzz\r\n" % cas, b"HD\r\n")
    c.cmd(b"mg mk v\r\n", b"VA 2\r\nzz\r\n")


def test_segment_expires_whole(spawn):
    """Two segments' worth of 16-byte keys with a 1-second TTL (their own
    TTL bucket), then a key without one: once the TTL has passed, the
    maintenance thread (a step a second) evicts the sealed one whole,
    counted in packed_segments_expired; the key without a TTL stays.
    Waits for the count, at most 20 s."""
    srv = spawn(*PACKED, mem=64, threads=1)
    c = Conn(srv.host, srv.port)
    n = 2 * 8455
    batch = 2000
    for base in range(0, n, batch):
        req = b"".join(b"set t%015d 0 1 100 noreply\r\n%s\r\n"
                       % (i, b"v" * 100)
                       for i in range(base, min(n, base + batch)))
        c.send(req)
    c.cmd(b"set keep 0 0 4\r\nkeep\r\n", b"STORED\r\n")
    s = stats(c)
    assert int(s["packed_segments_expired"]) == 0
    assert int(s["packed_segments"]) >= 3  # 1 sealed, 2 open
    for _ in range(200):
        s = stats(c)
        if int(s["packed_segments_expired"]) >= 1:
            break
        time.sleep(0.1)
    assert int(s["packed_segments_expired"]) >= 1
    assert int(s["packed_segments_evicted"]) == 0
    assert int(s["evictions"]) == 0
    assert int(s["curr_items"]) < n - 8000
    c.cmd(b"get keep\r\n", b"VALUE keep 0 4\r\nkeep\r\nEND\r\n")
    c.cmd(b"get t%015d\r\n" % 0, b"END\r\n")


def test_fifo_eviction(spawn):
    """-m 8 (8 pages) filled about twice over with 16-byte keys and
    100-byte values: whole segments go, oldest first, so what is left is
    the newest keys, each with its own value."""
    srv = spawn(*PACKED, mem=8, threads=1)
    c = Conn(srv.host, srv.port)
    n = 8 * 8455 * 2
    batch = 2000
    for base in range(0, n, batch):
        req = b"".join(b"set k%015d 0 0 100 noreply\r\n%s\r\n"
                       % (i, (b"%015d" % i) * 6 + b"x" * 10)
                       for i in range(base, min(n, base + batch)))
        c.send(req)
    c.cmd(b"mn\r\n", b"MN\r\n")
    s = stats(c)
    assert int(s["packed_segments_evicted"]) > 0
    assert int(s["evictions"]) > 0
    kept = int(s["curr_items"])
    assert 0 < kept < n
    # FIFO: the first keys are gone, the last ones are there; every key
    # sampled is present exactly when it is among the newest
    first_kept = None
    for i in range(0, n, 97):
        c.send(b"get k%015d\r\n" % i)
        line = c.readline()
        if line == b"END\r\n":
            assert first_kept is None, (
                f"key {i} missing after key {first_kept} was kept")
            continue
        assert line == b"VALUE k%015d 0 100\r\n" % i, line
        assert c.recv_exact(102) == (b"%015d" % i) * 6 + b"x" * 10 + b"\r\n"
        c.expect(b"END\r\n")
        if first_kept is None:
            first_kept = i
    assert first_kept is not None and first_kept > 0
    c.close()


def _pool():
    return f"/dev/shm/tc-packed-{os.getpid()}-{uuid.uuid4().hex}.pool"


@pytest.mark.parametrize("how", ["kill9", "sigterm"])
def test_restart_brings_back_packed(how):
    pool = _pool()
    servers = []
    try:
        srv = start_server(PACKED, pool=pool)
        servers.append(srv)
        c = Conn(srv.host, srv.port)
        big = b"S" * 2000
        c.cmd(b"set kept 21 0 6\r\npacked\r\n", b"STORED\r\n")
        c.cmd(b"set ttl 3 3000 3\r\nexp\r\n", b"STORED\r\n")
        # a touch that rewrites (no expiry before): a pending copy
        c.cmd(b"set tch 0 0 3\r\ntch\r\n", b"STORED\r\n")
        c.cmd(b"touch tch 3000\r\n", b"TOUCHED\r\n")
        cas = {}
        for k in (b"kept", b"ttl", b"tch"):
            c.send(b"gets " + k + b"\r\n")
            line = c.read_until(b"END\r\n").split(b"\r\n")[0]
            cas[k] = int(line.split()[-1])
        exp = {}
        for k in (b"ttl", b"tch"):
            c.send(b"mg " + k + b" t\r\n")
            line = c.readline().strip()
            exp[k] = int(line.split()[-1][1:])
            assert 2900 < exp[k] <= 3000
        c.cmd(b"set del 0 0 6\r\npacked\r\n", b"STORED\r\n")
        c.cmd(b"delete del\r\n", b"DELETED\r\n")
        # slab first, then packed over it: the packed one comes back
        c.cmd(b"set over 0 0 %d\r\n%s\r\n" % (len(big), big), b"STORED\r\n")
        c.cmd(b"set over 0 0 3\r\nnew\r\n", b"STORED\r\n")
        # packed first, then a slab value: the slab one comes back
        c.cmd(b"set slab 0 0 3\r\nold\r\n", b"STORED\r\n")
        c.cmd(b"set slab 0 0 %d\r\n%s\r\n" % (len(big), big), b"STORED\r\n")
        c.close()
        srv.stopped = True
        if how == "kill9":
            os.kill(srv.pid, signal.SIGKILL)
            assert srv.wait_exit() == -signal.SIGKILL
        else:
            srv.proc.send_signal(signal.SIGTERM)
            assert srv.wait_exit() == 0
            srv.check_stderr()
        srv.cleanup()

        srv = start_server(PACKED, pool=pool)
        servers.append(srv)
        c = Conn(srv.host, srv.port)
        c.cmd(b"get del\r\n", b"END\r\n")
        c.cmd(b"gets kept\r\n",
              b"VALUE kept 21 6 %d\r\npacked\r\nEND\r\n" % cas[b"kept"])
        c.cmd(b"gets ttl\r\n",
              b"VALUE ttl 3 3 %d\r\nexp\r\nEND\r\n" % cas[b"ttl"])
        c.cmd(b"gets tch\r\n",
              b"VALUE tch 0 3 %d\r\ntch\r\nEND\r\n" % cas[b"tch"])
        for k in (b"ttl", b"tch"):
            c.send(b"mg " + k + b" t\r\n")
            line = c.readline().strip()
            assert 0 < int(line.split()[-1][1:]) <= exp[k]
        c.cmd(b"get over\r\n", b"VALUE over 0 3\r\nnew\r\nEND\r\n")
        c.cmd(b"get slab\r\n",
              b"VALUE slab 0 %d\r\n%s\r\nEND\r\n" % (len(big), big))
        c.cmd(b"set del 0 0 5\r\nagain\r\n", b"STORED\r\n")
        c.cmd(b"get del\r\n", b"VALUE del 0 5\r\nagain\r\nEND\r\n")
        st = c.stats()
        assert int(st["packed_items"]) == 5  # kept ttl tch over del
        c.close()
        srv.stop()
    finally:
        for s in servers:
            s.kill()
        for p in (pool, pool + ".meta"):
            if os.path.exists(p):
                os.unlink(p)


def _fill(c, prefix, n, batch=2000):
    for base in range(0, n, batch):
        req = b"".join(b"set %s%014d 0 0 100 noreply\r\n%s\r\n"
                       % (prefix, i, (b"%015d" % i) * 6 + b"x" * 10)
                       for i in range(base, min(n, base + batch)))
        c.send(req)
    c.cmd(b"mn\r\n", b"MN\r\n")


@pytest.mark.parametrize("policy", ["merge", "fifo"])
def test_merge_eviction(spawn, policy):
    """-m 8, the first 2000 keys written, every other one read, then the
    pool filled twice over with unread keys: merge keeps the read ones
    (packed_items_merged, packed_copies), with their CAS; fifo drops both
    halves. The unread half is gone either way."""
    srv = spawn(*PACKED, "-o", "packed_evict=" + policy, mem=8, threads=1)
    c = Conn(srv.host, srv.port)
    assert stats(c, "settings")["packed_evict"] == policy
    _fill(c, b"a", 2000)
    cas = {}
    for i in range(0, 2000, 2):
        cas[i] = gets(c, b"a%014d" % i)[2]
    _fill(c, b"f", 8 * 8455 * 2)
    s = stats(c)
    assert int(s["packed_segments_evicted"]) > 0
    merged, copies = int(s["packed_items_merged"]), int(s["packed_copies"])
    for i in range(0, 2000):
        got = gets(c, b"a%014d" % i)
        if i % 2 or policy == "fifo":
            assert got is None, i
        else:
            assert got == (0, (b"%015d" % i) * 6 + b"x" * 10, cas[i]), i
    if policy == "merge":
        assert merged >= 1000 and copies >= merged
    else:
        assert merged == 0 and copies == 0
