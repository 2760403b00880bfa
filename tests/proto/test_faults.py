"""Adversarial sizes and run-time faults against a started server.

- Sizes: keys of every length 1-250 (251 refused), values from 0 bytes to
  -I and one byte over (refused, its bytes swallowed), appends that grow one
  item through every slab class up to -I, incr/decr at the 64-bit edges.
  Replies are memcached 1.6's (checked with TC_SERVER_KIND=memcached); RSS
  and the pool file stay within the configured limits.
- NVMe faults at run time (tiercache only): the flash file truncated,
  overwritten with garbage or zeros, and a flash device that fills up (a
  loop device over a small tmpfs; skipped where mounts or loop devices are
  not allowed). Never a wrong value, the tier's counters move, one log line
  per kind of error (read, write, compaction) instead of a flood, and the
  server keeps serving from PMEM.
- kill -9 under mixed load, then a restart on the same pool and flash files:
  every get returns the value last written or a miss.

Every loop is bounded in count and time; nothing assumes a speed.
"""

import os
import random
import re
import signal
import subprocess
import threading
import time
import uuid

import pytest

from conftest import IS_ASAN, IS_MEMCACHED, Conn, flash_file, remove_pool

MIB = 1024 * 1024
ITEM_MAX = MIB           # -I: the default, 1m
TOO_LARGE = b"SERVER_ERROR object too large for cache\r\n"
BAD_FORMAT = b"CLIENT_ERROR bad command line format\r\n"
NON_NUMERIC = b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
BAD_DELTA = b"CLIENT_ERROR invalid numeric delta argument\r\n"
U64_MAX = (1 << 64) - 1
ITEM_HDR = 24            # tiercache's item header (-I counts it)

# a value of n bytes: a slice of a fixed pattern, shifted by n, so that a
# value of another length (or another key's) never compares equal
_PATTERN = bytes((i * 31 + 7) % 251 for i in range(2 * MIB + 256))


def pattern(n):
    return _PATTERN[n % 251:n % 251 + n]


def key_of_len(n, salt=""):
    """A key of exactly n printable, non-space bytes, unique per n."""
    head = f"{salt}{n}:".encode()
    body = bytes(33 + (i * 7 + n) % 94 for i in range(max(0, n - len(head))))
    return (head + body)[:n] if n >= len(head) else b"k" * n


def pool_size(srv):
    return os.path.getsize(srv.pool) if srv.pool else None


def rss_limit_kib(srv, mem_mib):
    """What the server may hold resident: its pool file (mapped, so in RSS
    once touched), plus DRAM metadata, buffers and the allocator's slack;
    ASan's shadow and quarantine on top."""
    pool = pool_size(srv) or mem_mib * MIB
    extra = 96 * MIB + (256 * MIB if IS_ASAN else 0)
    return (pool + extra) // 1024


def assert_within_limits(srv, c, mem_mib, pool_before):
    st = c.stats()
    assert int(st["limit_maxbytes"]) == mem_mib * MIB, st["limit_maxbytes"]
    rss = srv.rss_kib()
    print(f"RSS {rss} KiB (limit {rss_limit_kib(srv, mem_mib)} KiB), pool "
          f"file {pool_before} bytes, -m {mem_mib}")
    assert rss <= rss_limit_kib(srv, mem_mib), (
        f"RSS {rss} KiB above {rss_limit_kib(srv, mem_mib)} KiB "
        f"(-m {mem_mib}, pool file {pool_before} bytes)")
    if pool_before is not None:
        assert pool_size(srv) == pool_before, (
            f"pool file grew from {pool_before} to {pool_size(srv)} bytes")
        # the pool file holds -m plus a bounded header, never more
        assert pool_before <= (mem_mib + 8) * MIB, pool_before
    return st


def read_value(c, key):
    """get key on c: the value, or None on a miss (exact framing)."""
    c.send(b"get %s\r\n" % key)
    head = c.readline(timeout=20)
    if head == b"END\r\n":
        return None
    m = re.match(rb"VALUE (\S+) (\d+) (\d+)\r\n$", head)
    assert m and m.group(1) == key, f"get {key[:40]!r}: bad line {head!r}"
    n = int(m.group(3))
    data = c.recv_exact(n + 2, timeout=20)
    assert data[n:] == b"\r\n", f"get {key[:40]!r}: bad framing"
    c.expect(b"END\r\n", timeout=20)
    return data[:n]


# ---- keys -------------------------------------------------------------------


def test_every_key_length(server, connect):
    """Keys of 1..250 bytes: set, get (one by one and in multigets),
    delete; 251 bytes is refused by every command, and a refused set's
    data line is then read as a command (memcached: ERROR)."""
    c = connect()
    salt = uuid.uuid4().hex[:6]
    keys = [key_of_len(n, salt if n > 12 else "") for n in range(1, 251)]
    assert [len(k) for k in keys] == list(range(1, 251))
    # short keys are shared by every run on this server: set them anew
    req, exp = [], []
    for k in keys:
        v = b"v:" + k
        req.append(b"set %s %d 0 %d\r\n%s\r\n" % (k, len(k), len(v), v))
        exp.append(b"STORED\r\n")
    for i in range(0, len(req), 25):
        c.cmd(b"".join(req[i:i + 25]), b"".join(exp[i:i + 25]))
    for k in keys:
        v = b"v:" + k
        c.cmd(b"get %s\r\n" % k,
              b"VALUE %s %d %d\r\n%s\r\nEND\r\n" % (k, len(k), len(v), v))
    # multigets: 8 keys a line keeps each line under 2 KiB
    for i in range(0, len(keys), 8):
        part = keys[i:i + 8]
        c.cmd(b"get %s\r\n" % b" ".join(part),
              b"".join(b"VALUE %s %d %d\r\nv:%s\r\n" % (k, len(k), len(k) + 2, k)
                       for k in part) + b"END\r\n")
    long_key = b"L" * 251
    for cmd in (b"get %s\r\n", b"gets %s\r\n", b"delete %s\r\n",
                b"incr %s 1\r\n", b"decr %s 1\r\n", b"touch %s 10\r\n",
                b"get a %s b\r\n"):
        c.cmd(cmd % long_key, BAD_FORMAT)
    for verb in (b"set", b"add", b"replace", b"append", b"prepend"):
        c.cmd(b"%s %s 0 0 1\r\nX\r\n" % (verb, long_key),
              BAD_FORMAT + b"ERROR\r\n")
    c.cmd(b"cas %s 0 0 1 1\r\nX\r\n" % long_key, BAD_FORMAT + b"ERROR\r\n")
    for k in keys[12:]:
        c.cmd(b"delete %s\r\n" % k, b"DELETED\r\n")
    c.cmd(b"get %s\r\n" % keys[-1], b"END\r\n")
    c.check_alive()


# ---- values -----------------------------------------------------------------


def value_sizes(limit):
    """0..64, then a geometric sweep (x1.12) with each size's neighbours,
    up to limit: every slab class gets values at and around its sizes."""
    sizes = set(range(0, 65))
    n = 64.0
    while n < limit:
        for d in (-1, 0, 1):
            sizes.add(int(n) + d)
        n *= 1.12
    return sorted(s for s in sizes if 0 <= s <= limit)


def test_value_sizes_to_item_max(spawn, connect):
    """Values of 0 bytes to -I read back exactly, each right after its set
    and all of them at the end (right value, or a miss counted as an
    eviction); one byte over -I is refused with memcached's line and its
    bytes are swallowed (the get pipelined behind it is answered); RSS and
    the pool file stay within -m's limits."""
    mem = 64
    srv = spawn(mem=mem, threads=2)
    c = connect(srv)
    pool0 = pool_size(srv)
    salt = uuid.uuid4().hex[:6]
    limit = ITEM_MAX - 512      # fits memcached's larger item header too
    sizes = value_sizes(limit) + [limit]
    for n in sizes:
        k = b"vs-%s-%d" % (salt.encode(), n)
        v = pattern(n)
        c.cmd(b"set %s %d 0 %d\r\n%s\r\n" % (k, n % 65536, n, v),
              b"STORED\r\n", timeout=20)
        got = read_value(c, k)
        assert got == v, f"value of {n} bytes read back wrong ({len(got or b'')})"
    # refused: one over -I, and far over; the data is swallowed, so the
    # get that follows in the same write is answered
    for n in (ITEM_MAX + 1, 3 * ITEM_MAX):
        k = b"vs-%s-big" % salt.encode()
        c.cmd(b"set %s 0 0 %d\r\n%s\r\nget %s\r\n" % (k, n, b"B" * n, k),
              TOO_LARGE + b"END\r\n", timeout=30)
    st = assert_within_limits(srv, c, mem, pool0)
    misses = 0
    for n in sizes:
        k = b"vs-%s-%d" % (salt.encode(), n)
        got = read_value(c, k)
        if got is None:
            misses += 1
        else:
            assert got == pattern(n), f"value of {n} bytes changed"
    st = c.stats()
    assert misses <= int(st["evictions"]), (misses, st["evictions"])
    c.check_alive()


@pytest.mark.tiercache_only
def test_value_exact_class_edges(spawn, connect):
    """tiercache: for every slab class in use, the value that fills a chunk
    exactly (header 24 + key + value = chunk size) and one byte more; the
    largest value (-I minus header and key) and one more, refused."""
    mem = 64
    srv = spawn(mem=mem, threads=1)
    c = connect(srv)
    pool0 = pool_size(srv)
    for n in value_sizes(ITEM_MAX - 4096)[::4]:
        k = b"ce-seed-%d" % n
        c.set(k, pattern(n))
        c.cmd(b"delete %s\r\n" % k, b"DELETED\r\n")
    c.send(b"stats slabs\r\n")
    raw = c.read_until(b"END\r\n")
    chunks = sorted({int(m) for m in re.findall(rb"STAT \d+:chunk_size (\d+)",
                                                raw)})
    assert len(chunks) >= 10, chunks
    k = b"ce-%s" % uuid.uuid4().hex[:8].encode()
    for csize in chunks:
        for n in (csize - ITEM_HDR - len(k), csize - ITEM_HDR - len(k) + 1):
            if n < 0 or n > ITEM_MAX - ITEM_HDR - len(k):
                continue
            v = pattern(n)
            c.cmd(b"set %s 0 0 %d\r\n%s\r\n" % (k, n, v), b"STORED\r\n",
                  timeout=20)
            assert read_value(c, k) == v, f"chunk {csize}: value {n} wrong"
    top = ITEM_MAX - ITEM_HDR - len(k)
    c.cmd(b"set %s 0 0 %d\r\n%s\r\n" % (k, top, pattern(top)), b"STORED\r\n",
          timeout=20)
    c.cmd(b"set %s 0 0 %d\r\n%s\r\nget %s\r\n" % (k, top + 1, pattern(top + 1),
                                                 k),
          TOO_LARGE + b"END\r\n", timeout=20)
    assert_within_limits(srv, c, mem, pool0)


@pytest.mark.parametrize("growth,pause", [(1.25, 0), (2.0, 0.03)])
def test_append_grows_through_classes(spawn, connect, growth, pause):
    """One item grown by appends (and prepends) from 1 byte through every
    slab class up to the largest value -I allows; then one more byte is
    refused and the value stays as it was. memcached refuses with
    NOT_STORED, tiercache with SERVER_ERROR object too large for cache.
    With a pause between appends the worker goes idle, and the old copies
    are freed by the maintenance thread: the pool (64 MiB for one item)
    must still hold the growing item (it used to evict it: NOT_STORED)."""
    mem = 64
    srv = spawn(mem=mem, threads=2)
    c = connect(srv)
    pool0 = pool_size(srv)
    k = b"ap-%s" % uuid.uuid4().hex[:8].encode()
    refused = b"NOT_STORED\r\n" if IS_MEMCACHED else TOO_LARGE
    expect = bytearray(b"a")
    c.set(k, b"a")
    step, rounds = 1, 0
    # grow the step by `growth` (up to 256 KiB) while it fits; back to 1
    # byte on a refusal: many appends rewrite an item close to -I
    while rounds < 400:
        rounds += 1
        verb = b"prepend" if rounds % 3 == 0 else b"append"
        piece = pattern(step)
        if pause and len(expect) > ITEM_MAX // 2:
            time.sleep(pause)   # the worker goes idle (20 ms)
        c.send(b"%s %s 0 0 %d\r\n%s\r\n" % (verb, k, step, piece))
        line = c.readline(timeout=20)
        if line == b"STORED\r\n":
            if verb == b"append":
                expect += piece
            else:
                expect[0:0] = piece
            if rounds % 8 == 0:
                assert read_value(c, k) == bytes(expect), (
                    f"after {rounds} rounds: {len(expect)} bytes wrong")
            step = min(256 * 1024, max(step + 1, int(step * growth)))
            continue
        assert line == refused, (
            f"{verb.decode()} of {step} bytes to {len(expect)}: {line!r}")
        assert len(expect) + step > ITEM_MAX - 1024, (
            f"refused at only {len(expect)} + {step} bytes")
        assert read_value(c, k) == bytes(expect), "a refused append changed it"
        if step == 1:
            break
        step = 1
    else:
        pytest.fail(f"no refusal within {rounds} appends ({len(expect)} bytes)")
    if not IS_MEMCACHED:
        assert len(expect) == ITEM_MAX - ITEM_HDR - len(k), len(expect)
    assert read_value(c, k) == bytes(expect)
    assert_within_limits(srv, c, mem, pool0)
    c.check_alive()


# ---- incr / decr ------------------------------------------------------------


# (stored value, command, reply, value after or None when unchanged)
INCR_CASES = [
    (b"18446744073709551615", b"incr %s 1", b"0", b"0"),
    (b"18446744073709551614", b"incr %s 3", b"1", b"1"),
    (b"18446744073709551615", b"incr %s 18446744073709551615",
     b"18446744073709551614", b"18446744073709551614"),
    (b"5", b"incr %s 18446744073709551615", b"4", b"4"),
    (b"0", b"incr %s 18446744073709551615", b"18446744073709551615",
     b"18446744073709551615"),
    (b"9999999999999999999", b"incr %s 1", b"10000000000000000000",
     b"10000000000000000000"),
    (b"10000000000000000000", b"decr %s 1", b"9999999999999999999",
     b"9999999999999999999"),
    (b"18446744073709551615", b"decr %s 18446744073709551614", b"1", b"1"),
    (b"18446744073709551615", b"decr %s 18446744073709551615", b"0", b"0"),
    (b"7", b"decr %s 18446744073709551615", b"0", b"0"),
    (b"0", b"decr %s 1", b"0", b"0"),
    (b"5", b"decr %s 0", b"5", b"5"),
    (b"00000000000000000001", b"incr %s 1", b"2", b"2"),
    (b"018446744073709551615", b"incr %s 1", b"0", b"0"),
    (b"5", b"incr %s 00000000000000000000001", b"6", b"6"),
    (b"9", b"incr %s 1", b"10", b"10"),
    # not a 64-bit decimal: refused, value unchanged
    (b"18446744073709551616", b"incr %s 1", NON_NUMERIC[:-2], None),
    (b"99999999999999999999", b"decr %s 1", NON_NUMERIC[:-2], None),
    (b"184467440737095516150", b"incr %s 1", NON_NUMERIC[:-2], None),
    (b"-1", b"decr %s 1", NON_NUMERIC[:-2], None),
    (b"abc", b"incr %s 1", NON_NUMERIC[:-2], None),
    (b"", b"incr %s 1", NON_NUMERIC[:-2], None),
    # a delta that is not a 64-bit decimal
    (b"5", b"incr %s 18446744073709551616", BAD_DELTA[:-2], None),
    (b"5", b"decr %s 18446744073709551616", BAD_DELTA[:-2], None),
    (b"5", b"incr %s 99999999999999999999", BAD_DELTA[:-2], None),
    (b"5", b"incr %s 0x10", BAD_DELTA[:-2], None),
    (b"5", b"incr %s -1", BAD_DELTA[:-2], None),
    (b"5", b"decr %s 1a", BAD_DELTA[:-2], None),
]


def test_incr_decr_64bit_edges(server, connect, key):
    """incr wraps at 2^64, decr stops at 0, 20-digit values and deltas,
    refusals leave the value as it was. memcached pads a shorter result
    with spaces in place (tiercache stores the digits alone): the value is
    compared without trailing spaces."""
    c = connect()
    k = key.encode()
    for stored, cmd, reply, after in INCR_CASES:
        c.set(k, stored, flags=3)
        c.cmd(cmd % k + b"\r\n", reply + b"\r\n")
        got = read_value(c, k)
        want = stored if after is None else after
        assert got is not None and got.rstrip(b" ") == want, (
            f"{stored!r} then {cmd % k!r}: value {got!r}, expected {want!r}")
    # the counter survives 2^64 wraps through a run of incr/decr
    c.set(k, b"18446744073709551610")
    expect = 18446744073709551610
    rng = random.Random(12)
    for _ in range(200):
        d = rng.choice((1, 3, 7, 1 << 63, U64_MAX, rng.getrandbits(64)))
        if rng.random() < 0.5:
            expect = (expect + d) & U64_MAX
            c.cmd(b"incr %s %d\r\n" % (k, d), b"%d\r\n" % expect)
        else:
            expect = max(0, expect - d)
            c.cmd(b"decr %s %d\r\n" % (k, d), b"%d\r\n" % expect)
    assert read_value(c, k).rstrip(b" ") == b"%d" % expect
    c.cmd(b"incr %s-none 1\r\n" % k, b"NOT_FOUND\r\n")
    c.cmd(b"decr %s-none 1\r\n" % k, b"NOT_FOUND\r\n")


# ---- NVMe faults at run time -------------------------------------------------

VAL = 4096
EXT_MEM = 8                                   # MiB of item memory
EXT_NKEYS = 3 * EXT_MEM * MIB // VAL          # three times the memory
FAULT_COUNTERS = ("get_aborted_extstore", "badcrc_from_extstore",
                  "miss_from_extstore")
FLASH_TIMEOUT = 60.0     # seconds for the writer to go idle (ASan, loaded)


def versioned(key, version, size=VAL):
    """A value that names its key and version, padded to size: a value
    served for the wrong key or from an older write never compares equal."""
    head = b"%s:%d:" % (key, version)
    return (head + pattern(size))[:size]


def flash_key(i, tag):
    return b"fx:%s:%06d" % (tag.encode(), i)


def flash_flags(path, size="64m"):
    # no recache: a key read back stays on flash for the next check
    return ["-o", "ext_page_size=8", "-o", "ext_recache_rate=0",
            "-o", "ext_recache_window=0", "-o", f"ext_path={path}:{size}"]


def stats_of(srv, group=""):
    c = Conn(srv.host, srv.port, timeout=20)
    try:
        return c.stats(group)
    finally:
        c.close()


def fill(srv, tag, n, version=1):
    """Set n keys of VAL bytes (pipelined, 100 a batch): the model."""
    c = Conn(srv.host, srv.port, timeout=30)
    model = {}
    for start in range(0, n, 100):
        req = []
        for i in range(start, min(start + 100, n)):
            k = flash_key(i, tag)
            model[k] = versioned(k, version)
            req.append(b"set %s 0 0 %d\r\n%s\r\n" % (k, VAL, model[k]))
        c.cmd(b"".join(req), b"STORED\r\n" * len(req), timeout=30)
    c.close()
    return model


def wait_quiet(srv, timeout=FLASH_TIMEOUT):
    """Wait (bounded) until the flash writer wrote nothing more across two
    looks 0.3 s apart (it may still be mid-batch: callers check what they
    need and fill again). Returns the stats."""
    deadline = time.monotonic() + timeout
    before = stats_of(srv)
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = stats_of(srv)
        if now["extstore_bytes_written"] == before["extstore_bytes_written"]:
            return now
        before = now
    pytest.fail(f"the flash writer did not pause within {timeout} s "
                f"(extstore_bytes_written {before['extstore_bytes_written']})")


def fill_until(srv, tag, done, what, rounds=6):
    """Fill rounds of three times the memory until done(stats) holds: how
    much reaches flash depends on the writer's pace (when it is behind,
    victims are evicted instead of spilled), so the test fills until it
    did, bounded. Returns (model, stats)."""
    model = {}
    for r in range(rounds):
        model.update(fill(srv, f"{tag}{r}", EXT_NKEYS))
        st = wait_quiet(srv)
        if done(st):
            return model, st
    pytest.fail(f"{what}: not reached after {rounds} fills of "
                f"{EXT_NKEYS} keys (extstore_bytes_written "
                f"{st['extstore_bytes_written']})")


def check_model(srv, model):
    """Every key reads back its value or is a miss (never another value);
    returns (hits, misses). Multigets of 50 keys."""
    c = Conn(srv.host, srv.port, timeout=30)
    keys = sorted(model)
    hits = misses = 0
    for start in range(0, len(keys), 50):
        part = keys[start:start + 50]
        c.send(b"get %s\r\n" % b" ".join(part))
        got = {}
        while True:
            head = c.readline(timeout=30)
            if head == b"END\r\n":
                break
            m = re.match(rb"VALUE (\S+) 0 (\d+)\r\n$", head)
            assert m, f"bad reply line {head[:100]!r}"
            data = c.recv_exact(int(m.group(2)) + 2, timeout=30)
            got[m.group(1)] = data[:-2]
        for k in part:
            if k not in got:
                misses += 1
                continue
            assert got[k] == model[k], (
                f"WRONG VALUE for {k!r}: {got[k][:40]!r}... expected "
                f"{model[k][:40]!r}...")
            hits += 1
    c.close()
    return hits, misses


def fault_sum(st):
    return sum(int(st[n]) for n in FAULT_COUNTERS)


OOM = b"SERVER_ERROR out of memory storing object\r\n"


def set_while_oom(c, key, value, timeout=15.0):
    """set key; while the server answers out of memory (memcached's reply
    when a class finds no chunk: a page moving to it may have to wait for
    the other workers' stashes), try again, bounded. Returns the number of
    refusals."""
    deadline = time.monotonic() + timeout
    refused = 0
    while True:
        c.send(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value))
        line = c.readline(timeout=20)
        if line == b"STORED\r\n":
            return refused
        assert line == OOM, f"set {key!r}: {line!r}"
        refused += 1
        assert time.monotonic() < deadline, (
            f"set {key!r} refused (out of memory) for {timeout} s")
        time.sleep(0.05)


def keeps_serving(srv, tag, rounds=50):
    """Small sets and gets of several sizes (PMEM), then a batch of
    flash-sized values that spill again: each reads back right or is a
    miss."""
    c = Conn(srv.host, srv.port, timeout=30)
    refused = 0
    for i in range(rounds):
        k = b"alive:%s:%d" % (tag.encode(), i)
        v = versioned(k, 3, size=8 + 7 * i)
        refused += set_while_oom(c, k, v)
        got = read_value(c, k)
        assert got == v, f"get {k!r} right after its set: {got!r}"
    c.close()
    if refused:
        print(f"{tag}: {refused} sets answered out of memory first")
    model = fill(srv, tag + "-after", EXT_NKEYS // 2, version=2)
    hits, _ = check_model(srv, model)
    assert hits > 0, "no value read back after the fault"


def new_log_lines(srv, before):
    text = srv.stderr_text()
    assert text.startswith(before), "the server's stderr was rewritten"
    return [ln for ln in text[len(before):].splitlines() if ln.strip()]


def assert_one_line_each(lines, what):
    """Not a flood: at most one line per kind of flash error (read, write,
    compaction), and at least one."""
    assert lines, f"no log line after {what}"
    assert len(lines) <= 3, (f"{len(lines)} log lines after {what}:\n"
                             + "\n".join(lines[:20]))
    assert len(set(lines)) == len(lines), "\n".join(lines)


@pytest.fixture
def flash_path():
    path = flash_file("tc-proto-faults", ".nvs")
    yield path
    if os.path.exists(path):
        os.unlink(path)


def damage(path, how):
    """Damage the written part of the flash file from outside, as a failing
    disk would: truncate it, or overwrite its middle (8 of its first 16 MiB,
    through the page cache, which O_DIRECT reads see)."""
    if how == "truncate":
        os.truncate(path, 0)
        return
    with open(path, "r+b") as f:
        f.seek(4 * MIB)
        for _ in range(8):
            f.write(os.urandom(MIB) if how == "garbage" else bytes(MIB))
        f.flush()
        os.fsync(f.fileno())


@pytest.mark.tiercache_only
@pytest.mark.parametrize("how", ["truncate", "garbage", "zeros"])
def test_flash_file_damaged(spawn, flash_path, how):
    """The flash file is truncated, or its middle overwritten with garbage
    or zeros, under the running server: no key ever reads back another
    value; the reads that hit the damage are misses counted in
    get_aborted_extstore/badcrc_from_extstore; the log gets a line, not a
    flood; the server keeps serving (small values from PMEM, new spills)."""
    srv = spawn(*flash_flags(flash_path), mem=EXT_MEM, threads=2)
    model, st0 = fill_until(
        srv, how, lambda st: int(st["extstore_bytes_written"]) >= 8 * MIB,
        "8 MiB written to flash")
    log0 = srv.stderr_text()
    damage(flash_path, how)
    hits, misses = check_model(srv, model)
    st1 = stats_of(srv)
    print(f"{how}: hits {hits} misses {misses} "
          + " ".join(f"{n} {st1[n]}" for n in FAULT_COUNTERS)
          + f" evictions {st1['evictions']}")
    assert misses > 0, "the damage hit no key"
    moved = fault_sum(st1) - fault_sum(st0)
    assert moved > 0, "no flash error counted"
    # every miss is an eviction or a counted flash failure
    assert misses <= moved + int(st1["evictions"]), (misses, moved)
    # the failed reads dropped their headers: a second pass reads no flash
    # record twice in error, and still never a wrong value
    check_model(srv, model)
    st2 = stats_of(srv)
    assert fault_sum(st2) - fault_sum(st1) <= misses, (st1, st2)
    keeps_serving(srv, how)
    assert srv.alive()
    lines = new_log_lines(srv, log0)
    print(f"{len(lines)} new log lines:", *lines[:5], sep="\n  ")
    assert_one_line_each(lines, how)


@pytest.fixture
def small_loop_device():
    """A loop device of 96 MiB over a sparse file on a 12 MiB tmpfs: a
    device that fills up (writes past what the tmpfs holds fail). Skipped,
    with the reason, where tmpfs mounts or loop devices are not allowed."""
    if IS_MEMCACHED:
        pytest.skip("tiercache-only")
    if os.geteuid() != 0:
        pytest.skip("mount and losetup need root")
    if not os.path.exists("/dev/loop-control"):
        pytest.skip("no /dev/loop-control: loop devices unavailable")
    mnt = f"/tmp/tc-proto-full-{os.getpid()}-{uuid.uuid4().hex}"
    os.mkdir(mnt)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tcfull",
                        mnt], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        os.rmdir(mnt)
        pytest.skip(f"mount -t tmpfs refused: {p.stderr.strip()}")
    img = os.path.join(mnt, "flash.img")
    dev = None
    try:
        with open(img, "wb") as f:
            f.truncate(96 * MIB)
        p = subprocess.run(["losetup", "--find", "--show", img],
                           capture_output=True, text=True, timeout=30)
        if p.returncode != 0 or not p.stdout.strip().startswith("/dev/"):
            pytest.skip(f"losetup --find --show failed: {p.stderr.strip()}")
        dev = p.stdout.strip()
        yield dev
    finally:
        if dev:
            subprocess.run(["losetup", "-d", dev], capture_output=True,
                           timeout=30)
        p = subprocess.run(["umount", mnt], capture_output=True, timeout=30)
        if p.returncode != 0:   # still busy: detach it lazily
            subprocess.run(["umount", "-l", mnt], capture_output=True,
                           timeout=30)
        os.rmdir(mnt)


@pytest.mark.tiercache_only
def test_flash_device_full(small_loop_device, spawn):
    """A flash device that runs out of space while the server spills to it
    (a thin device: 64 MiB given, 12 MiB behind it): the failed writes are
    logged once and counted; the records they held are misses, never wrong
    values; the server keeps serving."""
    srv = spawn(*flash_flags(small_loop_device), mem=EXT_MEM, threads=2)
    log0 = srv.stderr_text()
    # until a write went past the 12 MiB (about 16 MiB spilled a fill)
    model, st0 = fill_until(
        srv, "full", lambda st: int(st["tc_ext_write_errors"]) > 0,
        "a failed flash write")
    hits, misses = check_model(srv, model)
    st1 = stats_of(srv)
    print(f"full: hits {hits} misses {misses} tc_ext_write_errors "
          f"{st1.get('tc_ext_write_errors')} "
          + " ".join(f"{n} {st1[n]}" for n in FAULT_COUNTERS)
          + f" evictions {st1['evictions']}")
    lines = new_log_lines(srv, log0)
    print(f"{len(lines)} new log lines:", *lines[:5], sep="\n  ")
    assert misses > 0 and hits > 0, (hits, misses)
    assert misses <= fault_sum(st1) + int(st1["evictions"]), (misses, st1)
    keeps_serving(srv, "full")
    assert_one_line_each(new_log_lines(srv, log0), "a full device")


# ---- kill -9 under load, then a restart on the same files ---------------------

def start_on_pool(pool, extra, mem, threads=2):
    """Start tiercached on an existing pool file (a restart), as conftest's
    start_server does otherwise: returns a Server once it accepts."""
    import tempfile
    from conftest import (ROOT, START_TIMEOUT, Server, _die_with_parent,
                          _wait_accepting, free_port, server_argv)
    port = free_port()
    fd_err, err_path = tempfile.mkstemp(prefix="tc-proto-", suffix=".err")
    fd_out, out_path = tempfile.mkstemp(prefix="tc-proto-", suffix=".out")
    argv = server_argv(port, extra, mem, pool, threads)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fd_out,
                            stderr=fd_err, cwd=str(ROOT),
                            preexec_fn=_die_with_parent)
    os.close(fd_err)
    os.close(fd_out)
    srv = Server("127.0.0.1", port, proc, pool=pool, stderr_path=err_path,
                 stdout_path=out_path, argv=argv)
    if not _wait_accepting(proc, port, START_TIMEOUT):
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        err = srv.stderr_text()
        srv.pool = None     # the caller removes the pool file
        srv.cleanup()
        raise AssertionError(f"restart {argv} did not accept within "
                             f"{START_TIMEOUT} s (status {proc.returncode});"
                             f" stderr:\n{err}")
    return srv


class Loader(threading.Thread):
    """One client doing set/get/delete on keys of its own, checking every
    get against what it last wrote. model[key]: the values a get may return
    now (the last acknowledged one; plus the one in flight when the server
    died). Stops after `ops` operations, at `stop`, or when the server goes
    away; a wrong value (or a bad reply) before the kill is an error."""

    SIZES = (3, 40, 700, VAL, 20000)

    def __init__(self, srv, tid, nkeys, ops, stop, killed, seed):
        super().__init__(daemon=True)
        self.srv, self.tid, self.nkeys, self.ops = srv, tid, nkeys, ops
        self.stop, self.killed = stop, killed
        self.rng = random.Random(seed)
        self.model = {}          # key -> set of allowed values (None: miss)
        self.done = 0
        self.oom = 0
        self.error = None

    def key(self, i):
        return b"k9:%d:%04d" % (self.tid, i)

    def one(self, c, version):
        k = self.key(self.rng.randrange(self.nkeys))
        allowed = self.model.setdefault(k, {None})
        r = self.rng.random()
        if r < 0.45:
            v = versioned(k, version, self.rng.choice(self.SIZES))
            allowed.add(v)          # in flight: either may be read later
            c.send(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v))
            line = c.readline()
            if line == OOM:
                # a full pool and a class without a page: memcached's
                # reply; the old value may stay or go (memcached drops it)
                self.oom += 1
                allowed.discard(v)
                allowed.add(None)
                return
            assert line == b"STORED\r\n", f"set {k!r}: {line!r}"
            self.model[k] = {v, None}   # None: it may be evicted
        elif r < 0.55:
            allowed.add(None)
            c.send(b"delete %s\r\n" % k)
            line = c.readline()
            assert line in (b"DELETED\r\n", b"NOT_FOUND\r\n"), line
            self.model[k] = {None}
        else:
            got = read_value(c, k)
            assert got in allowed, (
                f"WRONG VALUE for {k!r}: {(got or b'')[:40]!r}")

    def run(self):
        c = None
        try:
            c = Conn(self.srv.host, self.srv.port, timeout=30)
            for version in range(1, self.ops + 1):
                if self.stop.is_set():
                    break
                self.one(c, version)
                self.done += 1
        except (AssertionError, OSError) as e:
            if not self.killed.is_set():
                self.error = e
        finally:
            if c:
                c.close()


@pytest.mark.tiercache_only
def test_kill9_under_load_then_restart(flash_path):
    """kill -9 while four clients set, get and delete (values that name
    their key and version, some large enough to spill to flash), then a
    restart on the same pool file and flash file: the server starts, and
    every key reads back a value it was given last (or one in flight at
    the kill) or is a miss, never another; it serves and stops cleanly."""
    extra = flash_flags(flash_path)
    pool = f"/dev/shm/tc-proto-{os.getpid()}-{uuid.uuid4().hex}.pool"
    mem = EXT_MEM
    srv = start_on_pool(pool, extra, mem)
    srv2 = None
    stop, killed = threading.Event(), threading.Event()
    loaders = [Loader(srv, t, 400, 20000, stop, killed, seed=90 + t)
               for t in range(4)]
    try:
        # twice the memory first: spills happen whatever the load's pace
        pre = fill(srv, "pre", 2 * EXT_NKEYS // 3)
        for ld in loaders:
            ld.start()
        # let the load run until it has done a good amount of work
        # (bounded), whatever the machine's speed
        deadline = time.monotonic() + 60
        while (sum(ld.done for ld in loaders) < 4000 and
               time.monotonic() < deadline and
               any(ld.is_alive() for ld in loaders)):
            time.sleep(0.05)
        for ld in loaders:
            assert ld.error is None, f"before the kill: {ld.error}"
        assert srv.alive(), f"the server died under load:\n{srv.stderr_text()}"
        st = stats_of(srv)
        killed.set()
        os.kill(srv.pid, signal.SIGKILL)
        assert srv.wait_exit() == -signal.SIGKILL
        srv.stopped = True
        stop.set()
        for ld in loaders:
            ld.join(30)
            assert not ld.is_alive(), "a client did not stop within 30 s"
        print(f"ops before the kill: {sum(ld.done for ld in loaders)} "
              f"({sum(ld.oom for ld in loaders)} sets out of memory), "
              f"spilled {st['tc_ext_spilled']}, items {st['curr_items']}")
        assert int(st["tc_ext_spilled"]) > 0, "nothing reached flash"
        assert os.path.exists(pool) and os.path.exists(flash_path)

        srv2 = start_on_pool(pool, extra, mem)
        c = Conn(srv2.host, srv2.port, timeout=30)
        hits = 0
        for k, v in pre.items():
            got = read_value(c, k)
            assert got in (v, None), (
                f"after the restart, WRONG VALUE for {k!r}: "
                f"{(got or b'')[:40]!r}")
            hits += got is not None
        for ld in loaders:
            for k, allowed in ld.model.items():
                got = read_value(c, k)
                assert got in allowed, (
                    f"after the restart, WRONG VALUE for {k!r}: "
                    f"{(got or b'')[:40]!r}")
                hits += got is not None
        print(f"after the restart: {hits} of "
              f"{len(pre) + sum(len(ld.model) for ld in loaders)} keys kept")
        for i in range(20):
            c.check_alive(f"restarted:{i}")
        c.close()
        srv2.stop()
    finally:
        stop.set()
        killed.set()
        for s in (srv, srv2):
            if s is not None and s.alive():
                s.proc.kill()
                s.proc.wait(10)
            if s is not None:
                s.pool = None
                s.cleanup()
        remove_pool(pool)
