"""libmemcached's command-line tools (Debian's libmemcached-tools) run
against Debian's memcached and tiercached side by side: memcping (text only: it has no
--binary), memcexist, memccp,
memctouch, memccat, memcrm, memcflush and a short bounded memcslap, each in
the text and the binary protocol. Each tool must exit with the same status
and print the same thing (the server's address masked) for both servers,
and do what it says to the data (the key exists, is gone, has its new
expiry), with the servers' counters moving alike. memcstat and memcdump are
in test_admin.py, memccapable in test_binary.py."""

import re
import shutil
import socket
import subprocess
import time

import pytest

import conftest
from conftest import start_server

# compares the server under test with memcached: run against memcached it
# would compare memcached with itself
pytestmark = pytest.mark.tiercache_only

IO_TIMEOUT = 10.0
TOOL_TIMEOUT = 120
MODES = {"text": [], "binary": ["--binary"]}
KEY = b"tool_key"
VALUE = b"tool value 42"


@pytest.fixture(scope="module")
def pair():
    if not conftest.MEMCACHED.exists():
        pytest.skip(f"{conftest.MEMCACHED} not installed (Debian package "
                    f"memcached)")
    mc = conftest.start_memcached(mem=64, prefix="tc-libmc-")
    tc = None
    try:
        tc = start_server(mem=64)
        yield mc, tc
    finally:
        if tc is not None:
            tc.stop()
        mc.stop(expect_status=None)


def tool(prog, srv, *args):
    """(exit status, stdout, stderr) of prog against srv, the server's
    address and port masked so that the two servers' outputs compare."""
    if shutil.which(prog) is None:
        pytest.skip(f"{prog} not installed (Debian package "
                    f"libmemcached-tools)")
    r = subprocess.run([prog, f"--servers={srv.host}:{srv.port}", *args],
                       capture_output=True, text=True, timeout=TOOL_TIMEOUT,
                       stdin=subprocess.DEVNULL)
    mask = [(f"{srv.host}:{srv.port}", "SERVER"), (str(srv.port), "PORT")]
    out, err = r.stdout, r.stderr
    for a, b in mask:
        out, err = out.replace(a, b), err.replace(a, b)
    return r.returncode, out, err


def both(pair, prog, *args):
    """The tool against each server: the two results, asserted equal."""
    res = [tool(prog, srv, *args) for srv in pair]
    assert res[0] == res[1], (prog, args, "memcached", res[0],
                              "tiercached", res[1])
    return res[1]


class Conn:
    def __init__(self, srv):
        self.sock = socket.create_connection((srv.host, srv.port),
                                             timeout=IO_TIMEOUT)
        self.buf = b""

    def close(self):
        self.sock.close()

    def request(self, data, ends):
        self.sock.sendall(data)
        deadline = time.monotonic() + IO_TIMEOUT
        while not any(self.buf.endswith(e) for e in ends):
            assert time.monotonic() < deadline, self.buf[-300:]
            d = self.sock.recv(1 << 16)
            assert d, f"closed; got {self.buf[-300:]!r}"
            self.buf += d
        out, self.buf = self.buf, b""
        return out

    def set(self, key, value, exptime=0):
        assert self.request(b"set %s 0 %d %d\r\n%s\r\n" % (
            key, exptime, len(value), value), (b"\r\n",)) == b"STORED\r\n"

    def get(self, key):
        return self.request(b"get %s\r\n" % key, (b"END\r\n",))

    def ttl(self, key):
        """The item's remaining seconds (meta t), -1 for none; None on a
        miss."""
        r = self.request(b"mg %s t\r\n" % key, (b"\r\n",))
        m = re.fullmatch(rb"HD t(-?\d+)\r\n", r)
        return int(m[1]) if m else None

    def stats(self):
        text = self.request(b"stats\r\n", (b"END\r\n",)).decode()
        return {ln.split(" ")[1]: ln.split(" ")[2]
                for ln in text.split("\r\n") if ln.startswith("STAT ")}


@pytest.fixture
def conns(pair):
    cs = [Conn(s) for s in pair]
    yield cs
    for c in cs:
        c.close()


def set_both(conns, key=KEY, value=VALUE, exptime=0):
    for c in conns:
        c.set(key, value, exptime)


def test_memcping(pair):
    """memcping has no --binary: it pings with a version request."""
    rc, out, err = both(pair, "memcping")
    assert rc == 0, (out, err)


@pytest.mark.parametrize("mode", MODES)
def test_memcexist(pair, conns, mode):
    set_both(conns)
    rc, _, _ = both(pair, "memcexist", *MODES[mode], KEY.decode())
    assert rc == 0
    rc, _, _ = both(pair, "memcexist", *MODES[mode], "tool_absent")
    assert rc == 1
    rc, _, err = both(pair, "memcexist", *MODES[mode], "--verbose",
                      KEY.decode(), "tool_absent")
    assert rc == 1, err
    assert f"Found key '{KEY.decode()}'" in err, err
    assert "Could not find key 'tool_absent'" in err, err


@pytest.mark.parametrize("mode", MODES)
def test_memctouch(pair, conns, mode):
    set_both(conns)
    for c in conns:
        assert c.ttl(KEY) == -1
    rc, _, _ = both(pair, "memctouch", *MODES[mode], "--expire=1000",
                    KEY.decode())
    assert rc == 0
    for c in conns:
        assert 990 <= c.ttl(KEY) <= 1000
    rc, _, _ = both(pair, "memctouch", *MODES[mode], "--expire=1000",
                    "tool_absent")
    assert rc == 1
    for c in conns:
        assert c.ttl(b"tool_absent") is None


@pytest.mark.parametrize("mode", MODES)
def test_memccat(pair, conns, mode):
    set_both(conns)
    rc, out, _ = both(pair, "memccat", *MODES[mode], KEY.decode())
    assert rc == 0 and out.rstrip("\n") == VALUE.decode()
    rc, out, _ = both(pair, "memccat", *MODES[mode], "--verbose",
                      KEY.decode())
    assert rc == 0 and VALUE.decode() in out
    rc, _, _ = both(pair, "memccat", *MODES[mode], "tool_absent")
    assert rc == 1


@pytest.mark.parametrize("mode", MODES)
def test_memcrm(pair, conns, mode):
    set_both(conns)
    rc, _, _ = both(pair, "memcrm", *MODES[mode], KEY.decode())
    assert rc == 0
    for c in conns:
        assert c.get(KEY) == b"END\r\n"
    rc, _, _ = both(pair, "memcrm", *MODES[mode], KEY.decode())
    assert rc == 1


@pytest.mark.parametrize("mode", MODES)
def test_memcflush(pair, conns, mode):
    keys = [b"tool_f%d" % i for i in range(5)]
    for k in keys:
        set_both(conns, k)
    before = [int(c.stats()["cmd_flush"]) for c in conns]
    rc, out, err = both(pair, "memcflush", *MODES[mode])
    assert rc == 0, (out, err)
    for c, b in zip(conns, before):
        assert int(c.stats()["cmd_flush"]) == b + 1
        for k in keys:
            assert c.get(k) == b"END\r\n"


@pytest.mark.parametrize("mode", MODES)
def test_memccp(pair, conns, mode, tmp_path):
    """memccp stores a file under its base name, with --flags and
    --expire; --add then refuses the existing key on both servers alike,
    --replace takes it."""
    f = tmp_path / "tool_file"
    f.write_bytes(b"file body\n" * 50)
    for c in conns:
        c.request(b"delete tool_file\r\n", (b"\r\n",))
    rc, _, _ = both(pair, "memccp", *MODES[mode], "--flags=7",
                    "--expire=1000", str(f))
    assert rc == 0
    want = b"VALUE tool_file 7 500\r\n" + f.read_bytes() + b"\r\nEND\r\n"
    for c in conns:
        assert c.get(b"tool_file") == want
        assert 990 <= c.ttl(b"tool_file") <= 1000
    rc, _, _ = both(pair, "memccp", *MODES[mode], "--add", str(f))
    assert rc != 0
    f.write_bytes(b"changed")
    rc, _, _ = both(pair, "memccp", *MODES[mode], "--replace", str(f))
    assert rc == 0
    for c in conns:
        assert c.get(b"tool_file") == (b"VALUE tool_file 0 7\r\nchanged"
                                       b"\r\nEND\r\n")


# the counters a memcslap run moves, and which of them each test moves
SLAP_COUNTERS = ["cmd_set", "cmd_get", "get_hits", "get_misses"]


def _slap_text(out):
    """memcslap's report, its timings masked."""
    return re.sub(r"\d+\.\d+ seconds", "T seconds", out)


@pytest.mark.parametrize("test", ["set", "get", "mget"])
@pytest.mark.parametrize("mode", MODES)
def test_memcslap(pair, conns, mode, test):
    """A short bounded run (--execute-number, --concurrency): exit 0, no
    failure reported, the same report, and the same counter moves on both
    servers: every key memcslap loads is then found."""
    n, threads = 100, 3
    before = [c.stats() for c in conns]
    res = []
    for srv in pair:
        rc, out, err = tool("memcslap", srv, *MODES[mode], f"--test={test}",
                            f"--execute-number={n}",
                            f"--concurrency={threads}")
        assert rc == 0, (srv.port, out, err)
        assert not re.search(r"Fail|Fatal|error", out + err, re.I), (out,
                                                                    err)
        res.append(_slap_text(out))
    assert res[0] == res[1], res
    moved = []
    for c, b in zip(conns, before):
        a = c.stats()
        moved.append({f: int(a[f]) - int(b[f]) for f in SLAP_COUNTERS})
    assert moved[0] == moved[1], ("memcached", moved[0], "tiercached",
                                  moved[1])
    m = moved[1]
    if test == "set":
        assert m["cmd_set"] == n * threads and m["cmd_get"] == 0, m
    else:
        assert m["cmd_set"] >= n and m["get_misses"] == 0, m
        assert m["get_hits"] == m["cmd_get"] > 0, m
