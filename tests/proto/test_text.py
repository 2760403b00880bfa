"""Classic text protocol: every command, exact replies over raw sockets.

Replies are memcached 1.6's, byte for byte (validated against Debian's
memcached with TC_SERVER_KIND=memcached). Tests marked tiercache_only check
what memcached does not define the same way.
"""

import os
import re
import socket
import time

import pytest
from pymemcache.client.base import Client

from conftest import SLAB_OPTS

# run once more with the store that is not the default (conftest.py)
PACKED_TOO = True

MIB = 1024 * 1024
IS_MEMCACHED = os.environ.get("TC_SERVER_KIND") == "memcached"


def b(s):
    return s.encode() if isinstance(s, str) else s


def value_block(key, flags, data, cas=None):
    key, data = b(key), b(data)
    if cas is None:
        return b"VALUE %s %d %d\r\n%s\r\n" % (key, flags, len(data), data)
    return b"VALUE %s %d %d %d\r\n%s\r\n" % (key, flags, len(data), cas, data)


def gets_cas(mc, key):
    """The CAS unique of key from `gets`."""
    mc.send(b"gets %s\r\n" % b(key))
    line = mc.readline()
    m = re.match(rb"VALUE \S+ \d+ (\d+) (\d+)\r\n$", line)
    assert m, f"gets {key}: unexpected reply {line!r}"
    mc.recv_exact(int(m.group(1)) + 2)
    mc.expect(b"END\r\n")
    return int(m.group(2))


def wait_until(pred, timeout, step=0.1):
    """Poll pred() until true or timeout seconds passed; returns pred()."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


# ---- storage commands ---------------------------------------------------


def test_set_get_flags(mc, key):
    for flags in (0, 1, 12345, 65535, 4294967295):
        mc.cmd(b"set %s %d 0 5\r\nhello\r\n" % (b(key), flags), b"STORED\r\n")
        mc.cmd(b"get %s\r\n" % b(key),
               value_block(key, flags, "hello") + b"END\r\n")


def test_set_overwrites(mc, key):
    mc.set(key, "one", flags=1)
    mc.set(key, "second", flags=2)
    mc.cmd(b"get %s\r\n" % b(key), value_block(key, 2, "second") + b"END\r\n")


def test_empty_value(mc, key):
    mc.cmd(b"set %s 0 0 0\r\n\r\n" % b(key), b"STORED\r\n")
    mc.cmd(b"get %s\r\n" % b(key), value_block(key, 0, b"") + b"END\r\n")


def test_binary_value(mc, key):
    data = bytes(range(256)) + b"\r\n\r\nEND\r\n" + bytes(range(255, -1, -1))
    mc.cmd(b"set %s 7 0 %d\r\n%s\r\n" % (b(key), len(data), data),
           b"STORED\r\n")
    mc.cmd(b"get %s\r\n" % b(key), value_block(key, 7, data) + b"END\r\n")


def test_get_miss(mc, key):
    mc.cmd(b"get %s\r\n" % b(key), b"END\r\n")
    mc.cmd(b"gets %s\r\n" % b(key), b"END\r\n")


def test_get_multi(mc, key):
    k1, k2, k3 = key + "-1", key + "-2", key + "-3"
    mc.set(k1, "v1", flags=1)
    mc.set(k3, "value3", flags=3)
    mc.cmd(b"get %s %s %s\r\n" % (b(k1), b(k2), b(k3)),
           value_block(k1, 1, "v1") + value_block(k3, 3, "value3") +
           b"END\r\n")
    # the same key twice is returned twice, in order
    mc.cmd(b"get %s %s %s\r\n" % (b(k3), b(k1), b(k3)),
           value_block(k3, 3, "value3") + value_block(k1, 1, "v1") +
           value_block(k3, 3, "value3") + b"END\r\n")


def test_get_many_keys_one_line(mc, key):
    """A get with 200 keys (line ~5 KB, more keys than any token limit)."""
    keys = [f"{key[:12]}-{i}" for i in range(200)]
    for k in keys[::2]:
        mc.set(k, k.upper())
    expected = b"".join(value_block(k, 0, k.upper()) for k in keys[::2])
    mc.cmd(b"get " + b" ".join(b(k) for k in keys) + b"\r\n",
           expected + b"END\r\n")


def test_gets_multi_and_cas_unique(mc, key):
    k1, k2 = key + "-1", key + "-2"
    mc.set(k1, "a")
    mc.set(k2, "bb", flags=9)
    c1, c2 = gets_cas(mc, k1), gets_cas(mc, k2)
    assert c1 != c2, "two items share a CAS unique"
    mc.cmd(b"gets %s nope %s\r\n" % (b(k1), b(k2)),
           value_block(k1, 0, "a", c1) + value_block(k2, 9, "bb", c2) +
           b"END\r\n")
    mc.set(k1, "c")
    assert gets_cas(mc, k1) != c1, "set did not change the CAS unique"


def test_gat_gats_multi(mc, key):
    k1, k2 = key + "-1", key + "-2"
    mc.set(k1, "v1", flags=4)
    mc.set(k2, "v2", flags=5)
    c1, c2 = gets_cas(mc, k1), gets_cas(mc, k2)
    mc.cmd(b"gat 0 %s nope %s\r\n" % (b(k1), b(k2)),
           value_block(k1, 4, "v1") + value_block(k2, 5, "v2") + b"END\r\n")
    mc.cmd(b"gats 100 %s %s\r\n" % (b(k1), b(k2)),
           value_block(k1, 4, "v1", c1) + value_block(k2, 5, "v2", c2) +
           b"END\r\n")
    mc.cmd(b"gat 100 nope\r\n", b"END\r\n")


def test_gat_updates_ttl(mc, key):
    mc.set(key, "GV", flags=3)
    # gat returns the item, then applies the new (already expired) TTL
    mc.cmd(b"gat -1 %s\r\n" % b(key), value_block(key, 3, "GV") + b"END\r\n")
    mc.cmd(b"get %s\r\n" % b(key), b"END\r\n")


def test_gat_bad_exptime(mc, key):
    mc.set(key, "x")
    mc.cmd(b"gat abc %s\r\n" % b(key),
           b"CLIENT_ERROR invalid exptime argument\r\n")
    mc.cmd(b"gat\r\n", b"ERROR\r\n")


def test_add(mc, key):
    mc.cmd(b"add %s 1 0 1\r\nA\r\n" % b(key), b"STORED\r\n")
    mc.cmd(b"add %s 2 0 1\r\nB\r\n" % b(key), b"NOT_STORED\r\n")
    mc.cmd(b"get %s\r\n" % b(key), value_block(key, 1, "A") + b"END\r\n")


def test_replace(mc, key):
    mc.cmd(b"replace %s 0 0 1\r\nA\r\n" % b(key), b"NOT_STORED\r\n")
    mc.cmd(b"get %s\r\n" % b(key), b"END\r\n")
    mc.set(key, "old")
    mc.cmd(b"replace %s 6 0 3\r\nnew\r\n" % b(key), b"STORED\r\n")
    mc.cmd(b"get %s\r\n" % b(key), value_block(key, 6, "new") + b"END\r\n")


def test_append_prepend(mc, key):
    mc.cmd(b"append %s 0 0 1\r\nX\r\n" % b(key), b"NOT_STORED\r\n")
    mc.cmd(b"prepend %s 0 0 1\r\nX\r\n" % b(key), b"NOT_STORED\r\n")
    mc.cmd(b"get %s\r\n" % b(key), b"END\r\n")
    mc.set(key, "mid", flags=3)
    # the flags and exptime given to append/prepend are ignored
    mc.cmd(b"append %s 9 0 3\r\nEND\r\n" % b(key), b"STORED\r\n")
    mc.cmd(b"prepend %s 9 0 3\r\nBEG\r\n" % b(key), b"STORED\r\n")
    mc.cmd(b"get %s\r\n" % b(key),
           value_block(key, 3, "BEGmidEND") + b"END\r\n")
    c = gets_cas(mc, key)
    mc.cmd(b"append %s 0 0 0\r\n\r\n" % b(key), b"STORED\r\n")
    assert gets_cas(mc, key) != c, "append did not change the CAS unique"


def test_cas(mc, key):
    mc.cmd(b"cas %s 0 0 1 1\r\nX\r\n" % b(key), b"NOT_FOUND\r\n")
    mc.set(key, "v0")
    c = gets_cas(mc, key)
    mc.cmd(b"cas %s 1 0 2 %d\r\nv1\r\n" % (b(key), c + 1000), b"EXISTS\r\n")
    mc.cmd(b"cas %s 1 0 2 %d\r\nv1\r\n" % (b(key), c), b"STORED\r\n")
    mc.cmd(b"cas %s 2 0 2 %d\r\nv2\r\n" % (b(key), c), b"EXISTS\r\n")
    c2 = gets_cas(mc, key)
    assert c2 != c
    mc.cmd(b"gets %s\r\n" % b(key), value_block(key, 1, "v1", c2) + b"END\r\n")


def test_cas_bad_unique(mc, key):
    mc.set(key, "v")
    mc.send(b"cas %s 0 0 1 abc\r\nX\r\n" % b(key))
    assert mc.readline() == b"CLIENT_ERROR bad command line format\r\n"
    # memcached then reads "X" as a command (ERROR); accept either way
    mc.send(b"mn\r\n")
    rest = mc.read_until(b"MN\r\n")
    assert rest in (b"MN\r\n", b"ERROR\r\nMN\r\n"), rest
    mc.check_alive()


def test_exptime_negative_and_past(mc, key):
    mc.cmd(b"set %s 0 -1 1\r\nX\r\n" % b(key), b"STORED\r\n")
    mc.cmd(b"get %s\r\n" % b(key), b"END\r\n")
    # more than 30 days: an absolute unix time, here in 2001
    mc.cmd(b"set %s 0 1000000000 1\r\nX\r\n" % b(key), b"STORED\r\n")
    mc.cmd(b"get %s\r\n" % b(key), b"END\r\n")
    # far in the future (absolute): stays
    mc.cmd(b"set %s 0 %d 1\r\nX\r\n" % (b(key), int(time.time()) + 86400 * 60),
           b"STORED\r\n")
    mc.cmd(b"get %s\r\n" % b(key), value_block(key, 0, "X") + b"END\r\n")


def test_exptime_expires(mc, key):
    mc.cmd(b"set %s 0 1 1\r\nX\r\n" % b(key), b"STORED\r\n")
    mc.cmd(b"set %s-keep 0 100 1\r\nY\r\n" % b(key), b"STORED\r\n")
    assert wait_until(lambda: mc.get_value(key) is None, 60.0), \
        "item with TTL 1 still there after 60 s"
    assert mc.get_value(key + "-keep") == b"Y"


# ---- incr / decr ----------------------------------------------------------


def test_incr_decr(mc, key):
    mc.cmd(b"incr %s 1\r\n" % b(key), b"NOT_FOUND\r\n")
    mc.cmd(b"decr %s 1\r\n" % b(key), b"NOT_FOUND\r\n")
    mc.set(key, "10", flags=5)
    mc.cmd(b"incr %s 5\r\n" % b(key), b"15\r\n")
    mc.cmd(b"incr %s 0\r\n" % b(key), b"15\r\n")
    mc.cmd(b"decr %s 3\r\n" % b(key), b"12\r\n")
    mc.cmd(b"incr %s 88\r\n" % b(key), b"100\r\n")
    mc.cmd(b"get %s\r\n" % b(key), value_block(key, 5, "100") + b"END\r\n")
    c = gets_cas(mc, key)
    mc.cmd(b"incr %s 1\r\n" % b(key), b"101\r\n")
    assert gets_cas(mc, key) != c, "incr did not change the CAS unique"


def test_decr_shrinks_value(mc, key):
    mc.set(key, "100")
    mc.cmd(b"decr %s 1\r\n" % b(key), b"99\r\n")
    # memcached may pad the shorter number with spaces in place
    assert mc.get_value(key).rstrip(b" ") == b"99"


def test_incr_wraps(mc, key):
    mc.set(key, "18446744073709551615")
    mc.cmd(b"incr %s 1\r\n" % b(key), b"0\r\n")
    mc.set(key, "18446744073709551614")
    mc.cmd(b"incr %s 3\r\n" % b(key), b"1\r\n")
    mc.set(key, "1")
    mc.cmd(b"incr %s 18446744073709551615\r\n" % b(key), b"0\r\n")


def test_decr_floor(mc, key):
    mc.set(key, "5")
    mc.cmd(b"decr %s 6\r\n" % b(key), b"0\r\n")
    mc.cmd(b"decr %s 1\r\n" % b(key), b"0\r\n")
    mc.set(key, "7")
    mc.cmd(b"decr %s 18446744073709551615\r\n" % b(key), b"0\r\n")


def test_incr_non_numeric(mc, key):
    err = b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    for v in ("abc", "12a", "-5", "18446744073709551616", ""):
        mc.set(key, v)
        mc.cmd(b"incr %s 1\r\n" % b(key), err)
        mc.cmd(b"decr %s 1\r\n" % b(key), err)
        assert mc.get_value(key) == b(v), "failed incr changed the value"


def test_incr_bad_delta(mc, key):
    mc.set(key, "10")
    err = b"CLIENT_ERROR invalid numeric delta argument\r\n"
    for d in (b"abc", b"-1", b"18446744073709551616", b"1x",
              b"99999999999999999999"):
        mc.cmd(b"incr %s %s\r\n" % (b(key), d), err)
        mc.cmd(b"decr %s %s\r\n" % (b(key), d), err)
    mc.cmd(b"incr\r\n", b"ERROR\r\n")
    mc.cmd(b"incr %s\r\n" % b(key), b"ERROR\r\n")
    assert mc.get_value(key) == b"10"


# ---- delete / touch ---------------------------------------------------------


def test_delete(mc, key):
    mc.cmd(b"delete %s\r\n" % b(key), b"NOT_FOUND\r\n")
    mc.set(key, "x")
    mc.cmd(b"delete %s\r\n" % b(key), b"DELETED\r\n")
    mc.cmd(b"get %s\r\n" % b(key), b"END\r\n")
    mc.cmd(b"delete %s\r\n" % b(key), b"NOT_FOUND\r\n")
    # "delete <key> 0" is accepted for old clients
    mc.set(key, "x")
    mc.cmd(b"delete %s 0\r\n" % b(key), b"DELETED\r\n")


def test_delete_with_time_refused(mc, key):
    mc.set(key, "x")
    mc.send(b"delete %s 5\r\n" % b(key))
    line = mc.readline()
    assert line.startswith(b"CLIENT_ERROR bad command line format"), line
    assert mc.get_value(key) == b"x"


def test_touch(mc, key):
    mc.cmd(b"touch %s 100\r\n" % b(key), b"NOT_FOUND\r\n")
    mc.set(key, "t")
    mc.cmd(b"touch %s 100\r\n" % b(key), b"TOUCHED\r\n")
    mc.cmd(b"get %s\r\n" % b(key), value_block(key, 0, "t") + b"END\r\n")
    mc.cmd(b"touch %s -1\r\n" % b(key), b"TOUCHED\r\n")
    mc.cmd(b"get %s\r\n" % b(key), b"END\r\n")


def test_touch_bad(mc, key):
    mc.set(key, "t")
    mc.cmd(b"touch %s abc\r\n" % b(key),
           b"CLIENT_ERROR invalid exptime argument\r\n")
    mc.cmd(b"touch %s\r\n" % b(key), b"ERROR\r\n")
    mc.cmd(b"touch\r\n", b"ERROR\r\n")


# ---- noreply ---------------------------------------------------------------


def test_noreply_everywhere(mc, key):
    k = b(key)
    mc.send(b"set %s 1 0 1 noreply\r\n1\r\n" % k)
    mc.send(b"add %s 0 0 1 noreply\r\nX\r\n" % k)            # NOT_STORED
    mc.send(b"add %s-a 0 0 1 noreply\r\nA\r\n" % k)
    mc.send(b"replace %s 1 0 1 noreply\r\n5\r\n" % k)
    mc.send(b"replace %s-none 0 0 1 noreply\r\nX\r\n" % k)   # NOT_STORED
    mc.send(b"append %s 0 0 1 noreply\r\n0\r\n" % k)
    mc.send(b"prepend %s 0 0 1 noreply\r\n1\r\n" % k)
    mc.send(b"append %s-none 0 0 1 noreply\r\nX\r\n" % k)    # NOT_STORED
    mc.send(b"incr %s 5 noreply\r\n" % k)                    # 155
    mc.send(b"decr %s 50 noreply\r\n" % k)                   # 105
    mc.send(b"incr %s-none 1 noreply\r\n" % k)               # NOT_FOUND
    mc.send(b"touch %s 1000 noreply\r\n" % k)
    mc.send(b"touch %s-none 1000 noreply\r\n" % k)           # NOT_FOUND
    mc.send(b"delete %s-a noreply\r\n" % k)
    mc.send(b"delete %s-none noreply\r\n" % k)               # NOT_FOUND
    mc.send(b"cas %s-none 0 0 1 1 noreply\r\nX\r\n" % k)     # NOT_FOUND
    mc.send(b"verbosity 0 noreply\r\n")
    mc.send(b"cache_memlimit 64 noreply\r\n")
    mc.expect_silence(0.3, b"(17 noreply commands)")
    mc.cmd(b"get %s %s-a %s-none\r\n" % (k, k, k),
           value_block(key, 1, "105") + b"END\r\n")
    c = gets_cas(mc, key)
    mc.send(b"cas %s 2 0 1 %d noreply\r\nZ\r\n" % (k, c + 99))  # EXISTS
    mc.send(b"cas %s 2 0 1 %d noreply\r\nY\r\n" % (k, c))       # STORED
    mc.expect_silence(0.2, b"(2 cas noreply)")
    mc.cmd(b"get %s\r\n" % k, value_block(key, 2, "Y") + b"END\r\n")


def test_flush_all_noreply(spawn, connect, key):
    srv = spawn()
    mc = connect(srv)
    mc.set(key, "x")
    mc.send(b"flush_all noreply\r\n")
    mc.expect_silence(0.2)
    mc.cmd(b"get %s\r\n" % b(key), b"END\r\n")
    mc.set(key, "y")
    mc.send(b"flush_all 0 noreply\r\n")
    mc.expect_silence(0.2)
    mc.cmd(b"get %s\r\n" % b(key), b"END\r\n")


# ---- flush_all ------------------------------------------------------------


def test_flush_all(spawn, connect, key):
    srv = spawn()
    mc = connect(srv)
    for i in range(20):
        mc.set(f"{key}-{i}", str(i))
    mc.cmd(b"flush_all\r\n", b"OK\r\n")
    for i in range(20):
        mc.cmd(b"get %s-%d\r\n" % (b(key), i), b"END\r\n")
    # storing right after the flush works
    mc.set(key, "after")
    assert mc.get_value(key) == b"after"
    mc.cmd(b"flush_all 0\r\n", b"OK\r\n")
    mc.cmd(b"get %s\r\n" % b(key), b"END\r\n")
    mc.cmd(b"flush_all abc\r\n", b"CLIENT_ERROR invalid exptime argument\r\n")
    mc.cmd(b"flush_all 0 0 0\r\n", b"ERROR\r\n")


def test_flush_all_delay(spawn, connect, key):
    srv = spawn()
    mc = connect(srv)
    # the item must still be there when read within a second of the
    # flush_all 2 (server seconds are whole: 1 s of margin); a read that
    # came later on a slow machine proves nothing, so try again (a new
    # flush_all replaces the pending one)
    for attempt in range(10):
        mc.set(key, "x")
        t0 = time.monotonic()
        mc.cmd(b"flush_all 2\r\n", b"OK\r\n")
        got = mc.get_value(key)
        if time.monotonic() - t0 < 1.0:
            break
        print(f"attempt {attempt}: the read came "
              f"{time.monotonic() - t0:.2f} s after flush_all 2; again")
    else:
        pytest.fail("no read within 1 s of flush_all 2 in 10 attempts")
    assert got == b"x", "flush_all 2 flushed at once"
    assert wait_until(lambda: mc.get_value(key) is None, 60.0), \
        "flush_all 2: item still there after 60 s"
    time.sleep(1.1)  # past the flush second (memcached's clock is 1 s)
    mc.set(key, "y")
    assert mc.get_value(key) == b"y", "item stored after the delayed flush"


# ---- misc commands --------------------------------------------------------


def test_version(mc):
    mc.send(b"version\r\n")
    line = mc.readline()
    assert re.match(rb"VERSION \S+\r\n$", line), line


def test_verbosity(mc):
    mc.cmd(b"verbosity 1\r\n", b"OK\r\n")
    mc.cmd(b"verbosity 0\r\n", b"OK\r\n")
    mc.cmd(b"verbosity\r\n", b"ERROR\r\n")
    mc.send(b"verbosity 1 noreply\r\nverbosity 0 noreply\r\n")
    mc.expect_silence(0.2)


def test_mixed_case_and_unknown(mc):
    mc.cmd(b"GET a\r\n", b"ERROR\r\n")
    mc.cmd(b"frobnicate\r\n", b"ERROR\r\n")
    mc.cmd(b"\r\n", b"ERROR\r\n")
    mc.check_alive()


def test_quit(connect, key):
    mc = connect()
    mc.set(key, "q")
    mc.send(b"get %s\r\nquit\r\nget %s\r\n" % (b(key), b(key)))
    mc.expect(value_block(key, 0, "q") + b"END\r\n")
    assert mc.closed_by_peer(30.0), "quit did not close the connection"
    assert mc.buf == b"", f"reply after quit: {mc.buf!r}"
    connect().check_alive()


def test_shutdown_not_enabled(server, connect):
    mc = connect()
    mc.cmd(b"shutdown\r\n", b"ERROR: shutdown not enabled\r\n")
    mc.check_alive()
    assert server.alive()


def test_shutdown_enabled(spawn, connect):
    srv = spawn("-A")
    mc = connect(srv)
    mc.check_alive()
    mc.send(b"shutdown\r\n")
    rc = srv.wait_exit(60)
    assert rc == 0, f"server exited {rc} after shutdown; " \
        f"stderr: {srv.stderr_text()[-2000:]}"
    srv.check_stderr()
    assert mc.closed_by_peer(30.0)


# ---- stats ----------------------------------------------------------------

GENERAL_STATS = ("pid", "uptime", "time", "version", "pointer_size",
                 "curr_connections", "total_connections", "cmd_get",
                 "cmd_set", "cmd_flush", "cmd_touch", "get_hits",
                 "get_misses", "delete_hits", "delete_misses", "incr_hits",
                 "incr_misses", "decr_hits", "decr_misses", "cas_hits",
                 "cas_misses", "cas_badval", "touch_hits", "touch_misses",
                 "bytes_read", "bytes_written", "limit_maxbytes", "threads",
                 "bytes", "curr_items", "total_items", "evictions")


def test_stats_general(spawn, connect, key):
    srv = spawn()
    mc = connect(srv)
    t0 = time.time()
    st = mc.stats()
    t1 = time.time()
    missing = [n for n in GENERAL_STATS if n not in st]
    assert not missing, f"stats lacks {missing}"
    assert int(st["pid"]) == srv.pid
    assert int(st["limit_maxbytes"]) == 64 * MIB
    assert int(st["threads"]) == 4
    assert int(st["curr_connections"]) >= 1
    # the server's clock, read while the request was served
    assert int(t0) - 1 <= int(st["time"]) <= int(t1) + 1, (t0, st["time"], t1)
    for n in GENERAL_STATS:
        if n != "version":
            assert re.match(r"^-?\d+(\.\d+)?$", st[n]), (n, st[n])

    mc.set(key, "12345")
    mc.get_value(key)
    mc.get_value(key + "-miss")
    mc.cmd(b"incr %s 1\r\n" % b(key), b"12346\r\n")
    mc.cmd(b"decr nope-%s 1\r\n" % b(key), b"NOT_FOUND\r\n")
    mc.cmd(b"touch %s 0\r\n" % b(key), b"TOUCHED\r\n")
    mc.cmd(b"delete %s\r\n" % b(key), b"DELETED\r\n")
    mc.cmd(b"delete %s\r\n" % b(key), b"NOT_FOUND\r\n")
    mc.set(key + "-2", "abc")
    st2 = mc.stats()

    def d(n):
        return int(st2[n]) - int(st[n])

    assert (d("cmd_get"), d("get_hits"), d("get_misses")) == (2, 1, 1)
    assert d("cmd_set") == 2
    assert (d("incr_hits"), d("decr_misses")) == (1, 1)
    assert (d("touch_hits"), d("cmd_touch")) == (1, 1)
    assert (d("delete_hits"), d("delete_misses")) == (1, 1)
    assert d("curr_items") == 1
    assert d("total_items") >= 2
    assert d("bytes") > 0
    assert d("bytes_read") > 0 and d("bytes_written") > 0


def test_stats_settings(spawn, connect):
    srv = spawn("-c", "100", "-I", "2097152", "-M")
    st = connect(srv).stats("settings")
    assert int(st["maxbytes"]) == 64 * MIB
    assert int(st["maxconns"]) == 100
    assert int(st["tcpport"]) == srv.port
    assert int(st["item_size_max"]) == 2 * MIB
    assert st["evictions"] == "off"
    assert int(st["num_threads"]) == 4
    st = connect().stats("settings")
    assert st["evictions"] == "on"
    assert int(st["item_size_max"]) == MIB


def test_stats_slabs_items(spawn, connect, key):
    srv = spawn(*SLAB_OPTS)  # counts of slab classes: the slabs only
    mc = connect(srv)
    mc.set(key, "x" * 100)
    mc.set(key + "-big", "y" * 5000)
    slabs = mc.stats("slabs")
    assert int(slabs["active_slabs"]) >= 2, slabs
    assert int(slabs["total_malloced"]) > 0
    classes = {n.split(":")[0] for n in slabs if re.match(r"\d+:", n)}
    assert len(classes) >= 2
    for c in classes:
        for f in ("chunk_size", "total_pages", "used_chunks"):
            assert f"{c}:{f}" in slabs, f"stats slabs lacks {c}:{f}"
    items = mc.stats("items")
    numbers = {n: int(v) for n, v in items.items()
               if re.match(r"items:\d+:number$", n)}
    assert sum(numbers.values()) == 2, items


def test_stats_conns(mc):
    st = mc.stats("conns")
    port = mc.sock.getsockname()[1]
    mine = [n for n, v in st.items()
            if n.endswith(":addr") and v == f"tcp:127.0.0.1:{port}"]
    assert mine, f"stats conns has no entry for our port {port}: {st}"


def test_stats_reset(spawn, connect, key):
    srv = spawn()
    mc = connect(srv)
    mc.set(key, "v")
    for _ in range(3):
        mc.get_value(key)
    assert int(mc.stats()["get_hits"]) == 3
    mc.cmd(b"stats reset\r\n", b"RESET\r\n")
    st = mc.stats()
    assert (st["cmd_get"], st["get_hits"], st["get_misses"]) == ("0", "0", "0")
    assert int(st["curr_items"]) == 1, "stats reset dropped items"
    assert mc.get_value(key) == b"v"


def test_stats_unknown_group(mc):
    mc.cmd(b"stats nonsense\r\n", b"ERROR\r\n")
    mc.check_alive()


def test_cache_memlimit(spawn, connect, key):
    # tiercache can raise the limit up to its pool file's size (-o
    # pool_size, default -m); memcached has no such ceiling
    srv = spawn(*([] if IS_MEMCACHED else ["-o", "pool_size=128m"]))
    mc = connect(srv)
    mc.cmd(b"cache_memlimit 100\r\n", b"OK\r\n")
    assert int(mc.stats()["limit_maxbytes"]) == 100 * MIB
    mc.cmd(b"cache_memlimit 48\r\n", b"OK\r\n")
    assert int(mc.stats()["limit_maxbytes"]) == 48 * MIB
    mc.cmd(b"cache_memlimit abc\r\n", b"ERROR\r\n")
    mc.cmd(b"cache_memlimit\r\n", b"ERROR\r\n")
    mc.send(b"cache_memlimit 64 noreply\r\n")
    mc.expect_silence(0.2)
    assert int(mc.stats()["limit_maxbytes"]) == 64 * MIB
    mc.check_alive()


# ---- pipelining and large values ------------------------------------------


def test_pipeline_100(mc, key):
    k = b(key)
    req, exp = [], []
    for i in range(100):
        kind = i % 5
        ki = b"%s-%d" % (k, i // 5)
        if kind == 0:
            req.append(b"set %s %d 0 %d\r\n%d\r\n" % (ki, i, len(b"%d" % i), i))
            exp.append(b"STORED\r\n")
        elif kind == 1:
            req.append(b"get %s\r\n" % ki)
            exp.append(b"VALUE %s %d %d\r\n%d\r\nEND\r\n"
                       % (ki, i - 1, len(b"%d" % (i - 1)), i - 1))
        elif kind == 2:
            req.append(b"incr %s 1\r\n" % ki)
            exp.append(b"%d\r\n" % (i - 1))
        elif kind == 3:
            req.append(b"delete %s\r\n" % ki)
            exp.append(b"DELETED\r\n")
        else:
            req.append(b"get %s\r\n" % ki)
            exp.append(b"END\r\n")
    mc.cmd(b"".join(req), b"".join(exp))


def test_value_near_item_max(mc, key):
    data = bytes(i % 251 for i in range(MIB - 512))
    mc.cmd(b"set %s 1 0 %d\r\n%s\r\n" % (b(key), len(data), data),
           b"STORED\r\n", timeout=60)
    mc.cmd(b"get %s\r\n" % b(key), value_block(key, 1, data) + b"END\r\n",
           timeout=60)


def test_value_over_item_max(mc, key):
    mc.set(key, "old")
    data = b"z" * (MIB + 1)
    mc.cmd(b"set %s 0 0 %d\r\n%s\r\n" % (b(key), len(data), data),
           b"SERVER_ERROR object too large for cache\r\n", timeout=60)
    # the connection goes on: the refused value was swallowed
    mc.check_alive()


def test_value_over_item_max_drops_old(mc, key):
    """memcached unlinks the old item when a set is refused as too large,
    so a stale value does not persist."""
    mc.set(key, "old")
    data = b"z" * (MIB + 1)
    mc.cmd(b"set %s 0 0 %d\r\n%s\r\n" % (b(key), len(data), data),
           b"SERVER_ERROR object too large for cache\r\n", timeout=60)
    mc.cmd(b"get %s\r\n" % b(key), b"END\r\n")


def test_item_max_flag(spawn, connect, key):
    srv = spawn("-I", "2097152")
    mc = connect(srv)
    data = bytes(i % 253 for i in range(2 * MIB - 1024))
    mc.cmd(b"set %s 0 0 %d\r\n%s\r\n" % (b(key), len(data), data),
           b"STORED\r\n", timeout=60)
    mc.cmd(b"get %s\r\n" % b(key), value_block(key, 0, data) + b"END\r\n",
           timeout=60)
    big = b"q" * (2 * MIB + 1)
    mc.cmd(b"set %s-2 0 0 %d\r\n%s\r\n" % (b(key), len(big), big),
           b"SERVER_ERROR object too large for cache\r\n", timeout=60)
    mc.check_alive()


@pytest.mark.tiercache_only
def test_item_max_exact_boundary(mc, key):
    """tiercache's -I counts the 24-byte item header, the key and the
    value (doc/operating.md, "Flags"): the largest value is
    -I - 24 - key length."""
    k = b(key)
    n = MIB - 24 - len(k)
    data = b"e" * n
    mc.cmd(b"set %s 0 0 %d\r\n%s\r\n" % (k, n, data), b"STORED\r\n",
           timeout=60)
    mc.cmd(b"get %s\r\n" % k, value_block(key, 0, data) + b"END\r\n",
           timeout=60)
    mc.cmd(b"set %s 0 0 %d\r\n%se\r\n" % (k, n + 1, data),
           b"SERVER_ERROR object too large for cache\r\n", timeout=60)
    mc.check_alive()


# ---- a real client: pymemcache ---------------------------------------------


@pytest.fixture
def pm(server):
    c = Client((server[0], server[1]), connect_timeout=30, timeout=30)
    yield c
    c.close()


def test_pymemcache_basic(pm, key):
    data = {f"{key}-{i}": f"value-{i}".encode() for i in range(20)}
    assert pm.set_many(data, noreply=False) == []
    got = pm.get_many(list(data) + [key + "-none"])
    assert got == data
    assert pm.get(key + "-0") == b"value-0"
    assert pm.get(key + "-none") is None
    assert pm.set(key, b"v", noreply=False) is True
    assert pm.add(key, b"w", noreply=False) is False
    assert pm.replace(key, b"w", noreply=False) is True
    assert pm.append(key, b"x", noreply=False) is True
    assert pm.prepend(key, b"u", noreply=False) is True
    assert pm.get(key) == b"uwx"


def test_pymemcache_cas(pm, key):
    pm.set(key, b"1", noreply=False)
    value, cas = pm.gets(key)
    assert value == b"1" and cas
    assert pm.cas(key, b"2", cas, noreply=False) is True
    assert pm.cas(key, b"3", cas, noreply=False) is False
    assert pm.cas(key + "-none", b"3", cas, noreply=False) is None
    assert pm.gets(key)[0] == b"2"
    assert pm.gets(key + "-none") == (None, None)


def test_pymemcache_incr_decr(pm, key):
    assert pm.incr(key, 1, noreply=False) is None
    pm.set(key, b"40", noreply=False)
    assert pm.incr(key, 2, noreply=False) == 42
    assert pm.decr(key, 50, noreply=False) == 0
    assert pm.incr(key, 7, noreply=True) is None
    assert int(pm.get(key).strip()) == 7


def test_pymemcache_touch_delete(pm, key):
    assert pm.touch(key, 100, noreply=False) is False
    pm.set(key, b"t", noreply=False)
    assert pm.touch(key, 100, noreply=False) is True
    assert pm.delete(key, noreply=False) is True
    assert pm.delete(key, noreply=False) is False
    pm.set(key, b"t")                        # noreply (the default)
    assert pm.delete_many([key, key + "-none"], noreply=False) is True
    assert pm.get(key) is None


def test_pymemcache_stats_version(pm):
    st = pm.stats()
    assert b"pid" in st and b"curr_items" in st and b"cmd_get" in st
    assert isinstance(st[b"uptime"], int)
    st = pm.stats("settings")
    assert b"maxbytes" in st
    assert pm.version()


def test_pymemcache_flush_all(spawn):
    srv = spawn()
    c = Client((srv[0], srv[1]), connect_timeout=30, timeout=30)
    try:
        c.set_many({"a": b"1", "b": b"2"}, noreply=False)
        assert c.flush_all(noreply=False) is True
        assert c.get_many(["a", "b"]) == {}
        c.set("a", b"3", noreply=False)
        assert c.get("a") == b"3"
    finally:
        c.close()


# ---- memory limit, evictions, unix socket ---------------------------------


def _fill(mc, prefix, n, size):
    """set n values of `size` bytes; returns the replies, stopping at the
    first one that is not STORED."""
    val = b"f" * size
    replies = []
    for i in range(n):
        mc.send(b"set %s-%d 0 0 %d\r\n%s\r\n" % (b(prefix), i, size, val))
        line = mc.readline(timeout=60)
        replies.append(line)
        if line != b"STORED\r\n":
            break
    return replies


def test_evictions(spawn, connect, key):
    """Without -M a full cache evicts: every store succeeds."""
    srv = spawn()
    mc = connect(srv)
    replies = _fill(mc, key, 1400, 100 * 1024)   # ~140 MiB into 64 MiB
    assert replies[-1] == b"STORED\r\n" and len(replies) == 1400, (
        f"store {len(replies)} of 1400 got {replies[-1]!r}")
    st = mc.stats()
    assert int(st["evictions"]) > 0
    assert int(st["bytes"]) <= 64 * MIB
    assert mc.get_value(f"{key}-1399") == b"f" * 100 * 1024
    assert mc.get_value(f"{key}-0") is None, "oldest item not evicted"


def test_no_evictions_flag(spawn, connect, key):
    """-M: a full cache refuses stores instead of evicting."""
    srv = spawn("-M")
    mc = connect(srv)
    replies = _fill(mc, key, 1400, 100 * 1024)
    assert replies[-1] == b"SERVER_ERROR out of memory storing object\r\n", (
        f"store {len(replies)}: {replies[-1]!r}")
    assert len(replies) > 100, f"refused after {len(replies)} stores"
    assert mc.get_value(f"{key}-0") == b"f" * 100 * 1024, "item evicted"
    assert int(mc.stats()["evictions"]) == 0
    # deleting frees room for an item of the same size (memcached would
    # also take a small item now: each slab class gets a first page even
    # over the limit; tiercache does not promise that)
    mc.cmd(b"delete %s-0\r\n" % b(key), b"DELETED\r\n")
    val = b"g" * 100 * 1024
    mc.cmd(b"set %s-0 0 0 %d\r\n%s\r\n" % (b(key), len(val), val),
           b"STORED\r\n")
    assert mc.get_value(f"{key}-0") == val


def test_no_evictions_small_items(spawn, connect, key):
    """-M with small items: once full, a delete frees room for an item of
    the same size, as memcached's freed chunk does (with -M tiercached
    keeps items in slab chunks unless packed_item_max is given: a packed
    item's room comes back only by eviction)."""
    srv = spawn("-M", "-m", "8")
    mc = connect(srv)
    if not IS_MEMCACHED:
        assert mc.stats("settings")["packed_item_max"] == "0"
    val = b"s" * 100
    n = 0
    full = None
    for _ in range(200):  # 2,000 a batch: 400,000 at most, 8 MB is ~60,000
        req = b"".join(b"set %s-%d 0 0 %d noreply\r\n%s\r\n"
                       % (b(key), i, len(val), val)
                       for i in range(n, n + 2000))
        mc.send(req)
        n += 2000
        mc.send(b"set %s-%d 0 0 %d\r\n%s\r\n" % (b(key), n, len(val), val))
        n += 1
        line = mc.readline(timeout=60)
        if line != b"STORED\r\n":
            full = line
            break
    assert full == b"SERVER_ERROR out of memory storing object\r\n", full
    assert int(mc.stats()["evictions"]) == 0
    assert mc.get_value(f"{key}-0") == val, "item evicted"
    for i in range(100):
        mc.cmd(b"delete %s-%d\r\n" % (b(key), i), b"DELETED\r\n")
    for i in range(100):
        mc.cmd(b"set %s-new%d 0 0 %d\r\n%s\r\n" % (b(key), i, len(val), val),
               b"STORED\r\n")
    assert mc.get_value(f"{key}-new99") == val


def test_unix_socket(spawn, tmp_path, key):
    path = str(tmp_path / "tc.sock")
    srv = spawn("-s", path, wait=False)
    deadline = time.monotonic() + 10
    s = None
    while time.monotonic() < deadline and srv.alive():
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(path)
            break
        except OSError:
            s.close()
            s = None
            time.sleep(0.05)
    assert s is not None, f"no unix socket at {path}: {srv.stderr_text()}"
    try:
        s.sendall(b"set %s 0 0 2\r\nus\r\nget %s\r\n" % (b(key), b(key)))
        exp = b"STORED\r\nVALUE %s 0 2\r\nus\r\nEND\r\n" % b(key)
        got = b""
        while len(got) < len(exp):
            d = s.recv(4096)
            if not d:
                break
            got += d
        assert got == exp
    finally:
        s.close()
