"""Abuse: malformed input, stalled and greedy clients, connection limits,
bad command lines. After each abuse the server still answers a normal
set/get, and every loop is bounded in count and time."""

import os
import random
import re
import resource
import select
import socket
import struct
import time

import pytest

from conftest import Conn

MIB = 1024 * 1024
IS_MEMCACHED = os.environ.get("TC_SERVER_KIND") == "memcached"
SEED = int(os.environ.get("TC_SEED", "20240611"))


def b(s):
    return s.encode() if isinstance(s, str) else s


def resync(mc):
    """Send a marker command; everything before its reply may only be
    ERROR or END lines (data read as commands after a refused command).
    Then a normal set/get."""
    mc.send(b"mn\r\n")
    rest = mc.read_until(b"MN\r\n")
    assert rest.endswith(b"MN\r\n"), f"no reply to mn after error: {rest!r}"
    extra = rest[:-4]
    assert re.fullmatch(rb"((ERROR|END)\r\n)*", extra), (
        f"unexpected replies before MN: {extra!r}")
    mc.check_alive()


def first_line(mc, sent, expected):
    mc.send(sent)
    got = mc.readline()
    assert got == expected, (f"\n  sent:     {sent[:200]!r}\n  expected: "
                             f"{expected!r}\n  got:      {got!r}")


BAD_FORMAT = b"CLIENT_ERROR bad command line format\r\n"
LONG_KEY = b"k" * 251

MALFORMED = [
    (b"foo\r\n", b"ERROR\r\n"),
    (b"\r\n", b"ERROR\r\n"),
    (b"GET k\r\n", b"ERROR\r\n"),
    (b"\x00\x01\x02junk\r\n", b"ERROR\r\n"),
    (b"\xff\xfe\xfd\r\n", b"ERROR\r\n"),
    (b"set k 0 0\r\n", b"ERROR\r\n"),
    (b"set k 0 0 1 2 3 4\r\n", b"ERROR\r\n"),
    (b"get\r\n", b"ERROR\r\n"),
    (b"incr k\r\n", b"ERROR\r\n"),
    (b"set k abc 0 1\r\nX\r\n", BAD_FORMAT),
    (b"set k 0 abc 1\r\nX\r\n", BAD_FORMAT),
    (b"set k 0 0 abc\r\n", BAD_FORMAT),
    (b"set k 0 0 -1\r\n", BAD_FORMAT),
    (b"set k -1 0 1\r\nX\r\n", BAD_FORMAT),
    (b"set k 0 0 99999999999999999999\r\n", BAD_FORMAT),
    (b"set k 0 99999999999999999999 1\r\nX\r\n", BAD_FORMAT),
    (b"set k 99999999999999999999 0 1\r\nX\r\n", BAD_FORMAT),
    (b"cas k 0 0 1 abc\r\nX\r\n", BAD_FORMAT),
    (b"cas k 0 0 1 -1\r\nX\r\n", BAD_FORMAT),
    (b"get " + LONG_KEY + b"\r\n", BAD_FORMAT),
    (b"get a " + LONG_KEY + b"\r\n", BAD_FORMAT),
    (b"set " + LONG_KEY + b" 0 0 1\r\nZ\r\n", BAD_FORMAT),
    (b"delete " + LONG_KEY + b"\r\n", BAD_FORMAT),
    (b"incr " + LONG_KEY + b" 1\r\n", BAD_FORMAT),
    (b"touch " + LONG_KEY + b" 1\r\n", BAD_FORMAT),
    (b"incr k abc\r\n", b"CLIENT_ERROR invalid numeric delta argument\r\n"),
    (b"incr k -1\r\n", b"CLIENT_ERROR invalid numeric delta argument\r\n"),
    (b"decr k 99999999999999999999\r\n",
     b"CLIENT_ERROR invalid numeric delta argument\r\n"),
    (b"touch k abc\r\n", b"CLIENT_ERROR invalid exptime argument\r\n"),
    (b"touch k 99999999999999999999\r\n",
     b"CLIENT_ERROR invalid exptime argument\r\n"),
    (b"gat abc k\r\n", b"CLIENT_ERROR invalid exptime argument\r\n"),
    (b"flush_all abc\r\n", b"CLIENT_ERROR invalid exptime argument\r\n"),
    (b"verbosity abc\r\n", BAD_FORMAT),
]


@pytest.mark.parametrize("sent,expected", MALFORMED,
                         ids=[repr(s[:24]) for s, _ in MALFORMED])
def test_malformed_line(mc, sent, expected):
    first_line(mc, sent, expected)
    resync(mc)


def test_malformed_pipelined(mc, key):
    """All the malformed lines in one send, then a valid command: the
    connection survives and the valid command is answered."""
    mc.send(b"".join(s for s, _ in MALFORMED) + b"mn\r\n")
    got = mc.read_until(b"MN\r\n")
    assert got.endswith(b"MN\r\n"), got
    lines = got.split(b"\r\n")[:-2]
    assert len(lines) >= len(MALFORMED), got
    for ln in lines:
        assert ln == b"ERROR" or ln.startswith(b"CLIENT_ERROR "), got
    mc.check_alive()


def test_key_250_ok(mc):
    k = b"K" * 250
    mc.cmd(b"set %s 0 0 2\r\nok\r\n" % k, b"STORED\r\n")
    mc.cmd(b"get %s\r\n" % k, b"VALUE %s 0 2\r\nok\r\nEND\r\n" % k)
    mc.cmd(b"delete %s\r\n" % k, b"DELETED\r\n")


@pytest.mark.parametrize("data", [b"abcd\r\n", b"ab\r\nget zz\r\n",
                                  b"\r\nget zz\r\n"])
def test_bad_data_chunk(mc, key, data):
    first_line(mc, b"set %s 0 0 3\r\n%s" % (b(key), data),
               b"CLIENT_ERROR bad data chunk\r\n")
    resync(mc)
    mc.cmd(b"get %s\r\n" % b(key), b"END\r\n")


def test_data_without_crlf(mc, key):
    first_line(mc, b"set %s 0 0 3\r\nabcXY" % b(key),
               b"CLIENT_ERROR bad data chunk\r\n")
    resync(mc)


@pytest.mark.parametrize("ch", [b"\x01", b"\x1f", b"\t", b"\x7f"])
def test_control_char_key(mc, ch):
    """memcached accepts control characters in text keys; tiercache refuses
    them. Either way the connection goes on."""
    k = b"ctl" + ch + b"key"
    mc.send(b"set %s 0 0 1\r\nX\r\n" % k)
    line = mc.readline()
    assert line in (b"STORED\r\n", BAD_FORMAT), line
    resync(mc)


@pytest.mark.tiercache_only
@pytest.mark.parametrize("ch", [b"\x01", b"\x1f", b"\t", b"\x7f"])
def test_control_char_key_refused(mc, ch):
    k = b"ctl" + ch + b"key"
    first_line(mc, b"get %s\r\n" % k, BAD_FORMAT)
    resync(mc)
    first_line(mc, b"set %s 0 0 1\r\nX\r\n" % k, BAD_FORMAT)
    resync(mc)


def test_value_larger_than_item_max(mc, key):
    data = b"L" * (MIB + 100)
    mc.cmd(b"set %s 0 0 %d\r\n%s\r\n" % (b(key), len(data), data),
           b"SERVER_ERROR object too large for cache\r\n", timeout=60)
    mc.check_alive()
    # and announced but sent slowly, in pieces
    mc.send(b"set %s 0 0 %d\r\n" % (b(key), len(data)))
    for i in range(0, len(data), 256 * 1024):
        mc.send(data[i:i + 256 * 1024])
        time.sleep(0.01)
    mc.send(b"\r\n")
    mc.expect(b"SERVER_ERROR object too large for cache\r\n", timeout=60)
    mc.check_alive()


def test_line_too_long(connect):
    """A command line that never ends: the server drops the connection
    (memcached silently; tiercache may say CLIENT_ERROR line too long)."""
    c = connect()
    try:
        c.send(b"x" * 20000)
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert c.closed_by_peer(30.0), "a 20000-byte line was not refused"
    assert c.buf in (b"", b"CLIENT_ERROR line too long\r\n"), c.buf
    connect().check_alive()


def test_garbage(connect, server):
    rng = random.Random(SEED)
    for i in range(40):  # bounded: 40 connections, each op with a timeout
        n = rng.choice([1, 7, 24, 100, 1000, 4096])
        blob = bytes(rng.randrange(256) for _ in range(n))
        if i % 4 == 0:
            blob = b"\x80" + blob  # binary mode
        c = connect(timeout=30)
        try:
            c.send(blob + b"\r\n")
            c.closed_by_peer(0.05)
        except (BrokenPipeError, ConnectionResetError):
            pass
        c.close()
        assert server.alive(), f"server died on garbage (seed {SEED}, {i})"
    connect().check_alive()


def test_binary_garbage_headers(connect, server):
    """Binary headers with absurd lengths: the server answers or closes,
    and goes on serving others."""
    hdr = struct.Struct(">BBHBBHIIQ")
    bad = [hdr.pack(0x80, 0x00, 0xFFFF, 0, 0, 0, 10, 0, 0),     # klen>body
           hdr.pack(0x80, 0x01, 1, 0xFF, 0, 0, 2, 0, 0) + b"ab",  # elen>body
           hdr.pack(0x80, 0x00, 0, 0, 0, 0, 0x7FFFFFFF, 0, 0),  # huge body
           hdr.pack(0x80, 0x01, 4, 8, 0, 0, 0xFFFFFFFF, 0, 0) + b"\0" * 12,
           hdr.pack(0x80, 0x00, 0, 0, 0xFF, 0xFFFF, 0, 0, 0),   # no key
           hdr.pack(0x80, 0x0a, 0, 0, 0, 0, 0, 0, 0) + b"\x00" * 24]
    for blob in bad:
        c = connect(timeout=30)
        c.send(blob)
        c.closed_by_peer(0.3)
        c.close()
        assert server.alive()
    connect().check_alive()


def test_half_command_stall(connect, key):
    """Clients that send half a command and stall block nobody."""
    partial = [b"get " + b(key), b"set %s 0 0 10\r\nhal" % b(key),
               b"\x80\x00\x00", b"mg " + b(key), b"gets", b"set %s 0" % b(key)]
    stalled = []
    for i in range(24):  # several per worker thread
        c = connect()
        c.send(partial[i % len(partial)])
        stalled.append(c)
    other = connect()
    # a stalled client that blocked its worker would leave these without
    # a reply (each waits at most the connection's timeout)
    for i in range(50):
        other.check_alive(f"{key}-other-{i}")
    # the stalled ones finish their commands and get their replies
    stalled[0].send(b"\r\n")
    stalled[0].expect(b"END\r\n")
    stalled[1].send(b"f-value\r\n")
    stalled[1].expect(b"STORED\r\n")
    assert other.get_value(key) == b"half-value"


def test_greedy_client_never_reads(spawn, connect, key):
    """A client sends many large gets and never reads: the server stops
    reading from it instead of buffering every reply; its RSS stays
    bounded and other clients are served."""
    srv = spawn()
    mc = connect(srv)
    val = bytes(i % 256 for i in range(512 * 1024))
    mc.cmd(b"set %s 0 0 %d\r\n%s\r\n" % (b(key), len(val), val), b"STORED\r\n")
    assert mc.get_value(key) == val
    base = srv.rss_kib()

    hog = socket.socket()
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    hog.connect((srv.host, srv.port))
    hog.setblocking(False)
    req = b"get %s\r\n" % b(key)
    sent, n_req = 0, 4000  # 4000 x 512 KiB = 2 GiB of replies
    deadline = time.monotonic() + 4
    data = req * n_req
    while sent < len(data) and time.monotonic() < deadline:
        _, w, _ = select.select([], [hog], [], 0.1)
        if w:
            try:
                sent += hog.send(data[sent:sent + 65536])
            except BlockingIOError:
                pass
    time.sleep(1.0)
    # others are served meanwhile
    other = connect(srv)
    for i in range(20):
        other.check_alive(f"{key}-o{i}")
    assert other.get_value(key) == val
    grown = srv.rss_kib() - base
    assert grown < 256 * 1024, (
        f"RSS grew by {grown} KiB with a client that does not read "
        f"({sent // len(req)} gets of 512 KiB sent)")
    hog.close()
    time.sleep(0.2)
    assert srv.alive()
    connect(srv).check_alive()


def test_reset_mid_reply(spawn, connect, key):
    """Clients that reset the connection while a large reply is in flight."""
    srv = spawn()
    mc = connect(srv)
    val = b"r" * (256 * 1024)
    mc.cmd(b"set %s 0 0 %d\r\n%s\r\n" % (b(key), len(val), val), b"STORED\r\n")
    for _ in range(30):
        s = socket.create_connection((srv.host, srv.port), timeout=30)
        s.sendall(b"get %s\r\n" % b(key) * 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                     struct.pack("ii", 1, 0))
        s.close()
    time.sleep(0.2)
    assert srv.alive()
    connect(srv).check_alive()


def test_connect_churn(connect, server):
    for _ in range(300):
        s = socket.create_connection((server.host, server.port), timeout=30)
        s.close()
    connect().check_alive()


@pytest.fixture
def raised_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 8192) if hard != resource.RLIM_INFINITY else 8192
    if want < 2100:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below 2100")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_2000_connections(raised_nofile, spawn, key):
    srv = spawn("-c", "4096")
    conns = []
    try:
        for _ in range(2000):  # each connect waits at most 30 s
            s = socket.create_connection((srv.host, srv.port), timeout=30)
            conns.append(s)
        first = conns[0]
        v = b"%d" % len(conns)
        first.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (b(key), len(v), v))
        assert first.recv(100) == b"STORED\r\n"
        req = b"get %s\r\n" % b(key)
        exp = b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (b(key), len(v), v)
        for s in conns:
            s.sendall(req)
        bad = 0
        deadline = time.monotonic() + 120  # for all 2000 replies
        for s in conns:
            got = b""
            while len(got) < len(exp) and time.monotonic() < deadline:
                d = s.recv(len(exp) - len(got))
                if not d:
                    break
                got += d
            bad += got != exp
        assert bad == 0, f"{bad} of 2000 connections not served"
        conns[1].sendall(b"stats\r\n")
        buf = b""
        deadline = time.monotonic() + 60
        while not buf.endswith(b"END\r\n") and time.monotonic() < deadline:
            buf += conns[1].recv(65536)
        m = re.search(rb"STAT curr_connections (\d+)", buf)
        assert m and int(m.group(1)) >= 2000, m
    finally:
        for s in conns:
            s.close()
    time.sleep(0.3)
    assert srv.alive()


def _read_for(s, wait, line=False):
    """What the server sends unasked within `wait` seconds (with line:
    only until the first CRLF), with b"<closed>" appended when it closed
    first."""
    out = b""
    deadline = time.monotonic() + wait
    while not (line and b"\r\n" in out):
        left = deadline - time.monotonic()
        if left <= 0:
            return out
        r, _, _ = select.select([s], [], [], left)
        if not r:
            return out
        try:
            d = s.recv(4096)
        except ConnectionResetError:
            return out + b"<closed>"
        if not d:
            return out + b"<closed>"
        out += d
    return out


def _conn_state(s, wait):
    """Whatever the server sends unasked within `wait` seconds."""
    return _read_for(s, wait)


def _reply_line(s, wait):
    """Bytes up to the first CRLF, or whatever came in `wait` seconds."""
    return _read_for(s, wait, line=True)


def test_max_connections(spawn, key):
    # memcached counts its own reserved descriptors against -c and cannot
    # start with -c 10; with -c 32 it serves a handful
    limit = 32 if IS_MEMCACHED else 10
    srv = spawn("-c", str(limit))
    conns = []
    rejected = None
    try:
        for i in range(limit + 1):
            s = socket.create_connection((srv.host, srv.port), timeout=30)
            # a refused connection gets the limit line unasked, then a
            # close; an accepted one answers "version". The line may come
            # after the short wait on a slow machine: then it is the answer
            got = _conn_state(s, 0.15)
            if not got:
                try:
                    s.sendall(b"version\r\n")
                except OSError:  # refused and closed meanwhile
                    pass
                got = _reply_line(s, 30)
                if got.startswith(b"VERSION "):
                    conns.append(s)
                    continue
            if not got.endswith(b"<closed>"):
                got += _conn_state(s, 30)  # until the close (bounded)
            rejected = (i, s, got)
            break
        assert rejected, f"{limit + 1} connections accepted with -c {limit}"
        i, s, got = rejected
        assert got == b"ERROR Too many open connections\r\n<closed>", (
            f"connection {i + 1}: expected the limit message and a close, "
            f"got {got!r}")
        s.close()
        if not IS_MEMCACHED:
            assert i == limit, (f"with -c {limit}, connection {i + 1} was "
                                f"refused (expected {limit + 1})")
        assert i >= 1
        # the accepted ones still work
        for c in conns:
            c.sendall(b"version\r\n")
            assert c.recv(100).startswith(b"VERSION ")
        # a slot freed is usable again
        conns.pop().close()
        ok = False
        deadline = time.monotonic() + 60
        while not ok and time.monotonic() < deadline:
            s = socket.create_connection((srv.host, srv.port), timeout=30)
            if not _conn_state(s, 0.15):
                try:
                    s.sendall(b"version\r\n")
                except OSError:  # refused and closed meanwhile
                    pass
                ok = _reply_line(s, 30).startswith(b"VERSION ")
            if ok:
                conns.append(s)
            else:
                s.close()
                time.sleep(0.1)
        assert ok, "no connection accepted after one was closed"
    finally:
        for c in conns:
            c.close()
    assert srv.alive()


# ---- command line -------------------------------------------------------


BAD_FLAGS = [
    (["--no-such-flag"], "no-such-flag"),
    (["-m", "abc"], "-m"),
    (["-m", "-5"], "-m"),
    (["-p", "70000"], "-p"),
    (["-p", "abc"], "-p"),
    (["-c", "abc"], "-c"),
    (["-c", "0"], "-c"),
    (["-t", "abc"], "-t"),
    (["-t", "0"], "-t"),
    (["-I", "abc"], "-I"),
    (["-I", "1x"], "-I"),
    (["-o", "no_such_option=1"], "no_such_option"),
    (["-U", "abc"], "-U"),
    (["-o", "worker_slice_us=50"], "worker_slice_us"),
    (["-o", "worker_slice_us=200000"], "worker_slice_us"),
]


@pytest.mark.tiercache_only
@pytest.mark.parametrize("extra,name", BAD_FLAGS,
                         ids=[" ".join(f) for f, _ in BAD_FLAGS])
def test_bad_flag(run_server, extra, name):
    rc, err = run_server(extra)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 64, f"{extra}: exit {rc} (expected 64); stderr: {err!r}"
    assert len(lines) == 1, f"{extra}: stderr is not one line: {err!r}"
    assert name in lines[0], f"{extra}: stderr does not name {name}: {err!r}"


def test_bad_flag_refused(run_server):
    """An unknown option: the server does not start (memcached exits 1,
    tiercached 64: see test_bad_flag)."""
    rc, err = run_server(["--no-such-flag"])
    assert rc > 0, (rc, err)
    assert err.strip(), "no message for an unknown option"


def test_impossible_pool_path(run_server):
    rc, err = run_server(["-e", "/proc/nonexistent/x"], pool=False)
    assert rc != 0, f"-e /proc/nonexistent/x: exit 0; stderr {err!r}"
    assert err.strip(), "no message on stderr"
    if not IS_MEMCACHED:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert rc > 0, f"killed by signal {-rc}; stderr: {err!r}"
        assert len(lines) == 1, f"stderr is not one line: {err!r}"


# ---- worker threads: names, CPUs, scheduler slice -------------------------


def _threads(pid):
    """{tid: (name, allowed CPUs, slice ns or None)} of a process."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        base = f"/proc/{pid}/task/{tid}"
        with open(f"{base}/comm") as f:
            name = f.read().strip()
        slice_ns = None
        try:
            with open(f"{base}/sched") as f:
                for line in f:
                    if line.startswith("se.slice"):
                        slice_ns = int(line.split(":")[1])
        except OSError:
            pass
        out[int(tid)] = (name, os.sched_getaffinity(int(tid)), slice_ns)
    return out


def _workers_started(srv, n):
    """Each worker names, pins and slices itself when it starts, which may
    be after the server accepts: a request on n consecutive connections
    (handed round robin to the n workers) proves each got that far."""
    conns = [Conn(srv.host, srv.port) for _ in range(n)]
    for c in conns:
        c.send(b"version\r\n")
    for c in conns:
        assert c.readline().startswith(b"VERSION "), "a worker did not answer"
        c.close()


@pytest.mark.tiercache_only
def test_pin_workers_and_slice(spawn, key):
    """-o pin_workers,worker_slice_us=300: the workers are named
    tc-worker-N, each runs on its own CPU of the process's set (round
    robin), with a 300 us slice where the kernel shows it; the server
    serves as usual."""
    srv = spawn("-o", "pin_workers,worker_slice_us=300", threads=3)
    _workers_started(srv, 3)
    allowed = sorted(os.sched_getaffinity(srv.proc.pid))
    workers = {name: (cpus, sl) for name, cpus, sl
               in _threads(srv.proc.pid).values()
               if name.startswith("tc-worker-")}
    assert sorted(workers) == ["tc-worker-0", "tc-worker-1", "tc-worker-2"]
    for i in range(3):
        cpus, sl = workers[f"tc-worker-{i}"]
        assert cpus == {allowed[i % len(allowed)]}, (i, cpus, allowed)
        if sl is not None:
            assert sl == 300000, (i, sl)
    k = key.encode()
    c = Conn(srv.host, srv.port)
    c.send(b"set %s 0 0 1\r\nx\r\nget %s\r\n" % (k, k))
    assert c.read_until(b"END\r\n") == \
        b"STORED\r\nVALUE %s 0 1\r\nx\r\nEND\r\n" % k
    c.close()
    st = dict(line.split(" ")[1:3] for line in
              srv_stats_settings(srv).splitlines() if line.startswith("STAT"))
    assert st["tc_pin_workers"] == "yes"
    assert st["tc_worker_slice_us"] == "300"


@pytest.mark.tiercache_only
def test_workers_unpinned_by_default(spawn):
    """Without the options the workers keep the process's CPUs and the
    kernel's slice."""
    srv = spawn(threads=2)
    _workers_started(srv, 2)
    allowed = os.sched_getaffinity(srv.proc.pid)
    ths = _threads(srv.proc.pid)
    main_slice = ths[srv.proc.pid][2]
    workers = [t for t in ths.values() if t[0].startswith("tc-worker-")]
    assert len(workers) == 2
    for name, cpus, sl in workers:
        assert cpus == allowed, name
        assert sl == main_slice, name


def srv_stats_settings(srv):
    c = Conn(srv.host, srv.port)
    c.send(b"stats settings\r\n")
    text = c.read_until(b"END\r\n").decode()
    c.close()
    return text
