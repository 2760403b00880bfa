"""Administration commands and the operators' tools, side by side with
Debian's memcached (/usr/bin/memcached, or TC_MEMCACHED): slabs
reassign|automove, lru_crawler (enable, disable, sleep, tocrawl, crawl,
metadump), stats cachedump, stats detail, stats sizes, stats conns; then
memcached-tool (display, stats, settings, sizes, dump), memcdump and
memcstat against both servers.

Fixed replies must be byte for byte memcached's. Dumps are compared by
shape and content: the same keys (URL-encoded in a metadump), flags, value
lengths, expiry times within a few seconds, fetched bits; CAS values, slab
class ids and item sizes are each server's own.
"""

import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

import conftest
from conftest import start_server

# Each test runs memcached beside the server under test already; against
# memcached itself the side-specific checks (tiercached lists every item)
# and its crawler's timing would not hold.
pytestmark = pytest.mark.tiercache_only
# and once more with the packed small-item store on (conftest's
# server_opts): its items' fetch, la, cls and size come from elsewhere
PACKED_TOO = True

MEMCACHED = conftest.MEMCACHED
TOOL = Path("/usr/share/memcached/scripts/memcached-tool")
IO_TIMEOUT = 10.0
TIME_SLACK = 3


def start_memcached():
    """The reference: memcached with its defaults (crawler on)."""
    return conftest.start_memcached(mem=64, prefix="tc-admin-")


@pytest.fixture(scope="module")
def pair(server_opts):
    if not MEMCACHED.exists():
        pytest.skip(f"{MEMCACHED} not installed (Debian package memcached)")
    mc = start_memcached()
    tc = start_server(server_opts, mem=64)
    yield mc, tc
    tc.stop()
    mc.stop(expect_status=None)


class Conn:
    def __init__(self, srv):
        self.sock = socket.create_connection((srv.host, srv.port),
                                             timeout=IO_TIMEOUT)
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def until(self, ends):
        """Read until the buffer ends with one of ends (bounded by the
        socket timeout)."""
        deadline = time.monotonic() + IO_TIMEOUT
        while not any(self.buf.endswith(e) for e in ends):
            assert time.monotonic() < deadline, self.buf[-300:]
            d = self.sock.recv(1 << 16)
            assert d, f"connection closed; got {self.buf[-300:]!r}"
            self.buf += d
        out, self.buf = self.buf, b""
        return out

    def line(self, cmd):
        """A command whose reply is one line."""
        self.send(cmd + b"\r\n")
        return self.until((b"\r\n",))

    def listing(self, cmd):
        """A command whose reply ends with END or an error line."""
        self.send(cmd + b"\r\n")
        deadline = time.monotonic() + IO_TIMEOUT
        while True:
            assert time.monotonic() < deadline, self.buf[-300:]
            if self.buf.endswith(b"END\r\n"):
                break
            m = re.fullmatch(rb"((?:CLIENT_|SERVER_)?ERROR[^\r\n]*|BADCLASS"
                             rb"[^\r\n]*|BUSY[^\r\n]*)\r\n", self.buf)
            if m:
                break
            d = self.sock.recv(1 << 16)
            assert d, f"connection closed; got {self.buf[-300:]!r}"
            self.buf += d
        out, self.buf = self.buf, b""
        return out

    def set(self, key, val, flags=0, exp=0):
        self.send(b"set %s %d %d %d\r\n%s\r\n" % (key, flags, exp, len(val),
                                                   val))
        assert self.until((b"\r\n",)) == b"STORED\r\n"


@pytest.fixture
def conns(pair):
    cs = [Conn(s) for s in pair]
    yield cs
    for c in cs:
        c.close()


def both(conns, fn):
    return [fn(c) for c in conns]


# ---- fixed replies ------------------------------------------------------

FIXED = [
    b"slabs automove 0", b"slabs automove 1", b"slabs automove 2",
    b"slabs automove 3", b"slabs automove x", b"slabs automove",
    b"slabs foo", b"slabs", b"slabs reassign", b"slabs reassign 1",
    b"slabs reassign 1 2 3", b"slabs reassign 1 1", b"slabs reassign 99 2",
    b"slabs reassign 2 99", b"slabs reassign -1 2", b"slabs reassign 1 x",
    b"slabs reassign 0 2", b"slabs reassign 300 301",
    b"stats cachedump 1", b"stats cachedump x 1", b"stats cachedump 1 x",
    b"stats cachedump 99 0", b"stats cachedump 0 0",
    b"stats cachedump 40 0",
    b"lru_crawler", b"lru_crawler foo", b"lru_crawler sleep",
    b"lru_crawler sleep x", b"lru_crawler sleep 2000000",
    b"lru_crawler sleep 100", b"lru_crawler tocrawl", b"lru_crawler tocrawl x",
    b"lru_crawler tocrawl 10", b"lru_crawler crawl",
    b"lru_crawler crawl 300", b"lru_crawler crawl 1,x",
    b"lru_crawler crawl 0", b"lru_crawler metadump",
    b"lru_crawler metadump x", b"lru_crawler metadump 200",
    b"lru_crawler mgdump all", b"lru_crawler enable",
    b"stats detail on", b"stats detail dump", b"stats detail off",
    b"stats detail", b"stats detail x", b"stats sizes",
]


@pytest.mark.parametrize("cmd", FIXED, ids=lambda c: c.decode())
def test_fixed_reply(conns, cmd):
    mc, tc = both(conns, lambda c: c.listing(cmd) if cmd.startswith(
        (b"stats sizes", b"stats detail dump", b"stats cachedump"))
        else c.line(cmd))
    assert tc == mc, f"{cmd!r}: memcached {mc!r}, tiercached {tc!r}"


def crawler_stopped(c):
    """memcached's `lru_crawler disable` only asks its crawler thread to
    stop; until the thread has gone, `stats settings` still says yes and
    crawl/enable answer as if it ran. Wait (bounded) for it."""
    deadline = time.monotonic() + IO_TIMEOUT
    while b"STAT lru_crawler no\r\n" not in c.listing(b"stats settings"):
        assert time.monotonic() < deadline, "crawler thread never stopped"
        time.sleep(0.05)


def test_crawler_disable_enable(conns):
    """Disabled, crawl and metadump are refused; enable twice is an error
    the second time."""
    seq = [b"lru_crawler crawl all", b"lru_crawler metadump all",
           b"lru_crawler enable", b"lru_crawler enable"]
    try:
        mc, tc = both(conns, lambda c: c.line(b"lru_crawler disable"))
        assert tc == mc == b"OK\r\n"
        both(conns, crawler_stopped)
        for cmd in seq:
            mc, tc = both(conns, lambda c: c.line(cmd))
            assert tc == mc, f"{cmd!r}: memcached {mc!r}, tiercached {tc!r}"
        assert mc == b"ERROR failed to start lru crawler thread\r\n"
    finally:
        # the servers are shared by the module: never leave them disabled
        both(conns, lambda c: c.line(b"lru_crawler enable"))


def setting(c, name):
    for line in c.listing(b"stats settings").split(b"\r\n"):
        if line.startswith(b"STAT %s " % name):
            return line.split(b" ", 2)[2]
    raise AssertionError(f"no {name!r} in stats settings")


def test_crawler_settings_live(conns):
    """"stats settings" shows what lru_crawler sleep/tocrawl and slabs
    automove last set, as memcached's does."""
    try:
        for cmd in (b"lru_crawler sleep 250", b"lru_crawler tocrawl 7",
                    b"slabs automove 0"):
            mc, tc = both(conns, lambda c: c.line(cmd))
            assert tc == mc == b"OK\r\n", cmd
        for name, want in ((b"lru_crawler_sleep", b"250"),
                           (b"lru_crawler_tocrawl", b"7"),
                           (b"slab_automove", b"0")):
            mc, tc = both(conns, lambda c: setting(c, name))
            assert tc == mc == want, name
    finally:
        both(conns, lambda c: c.line(b"lru_crawler sleep 100"))
        both(conns, lambda c: c.line(b"lru_crawler tocrawl 0"))
        both(conns, lambda c: c.line(b"slabs automove 1"))


def test_no_lru_crawler_flag():
    """-o no_lru_crawler: the crawler starts disabled, crawl is refused and
    enable starts it, on both servers."""
    if not MEMCACHED.exists():
        pytest.skip(f"{MEMCACHED} not installed (Debian package memcached)")
    mc = conftest.start_memcached(extra=("-o", "no_lru_crawler"), mem=64,
                                  prefix="tc-admin-")
    tc = start_server(extra=("-o", "no_lru_crawler"), mem=64)
    cs = [Conn(mc), Conn(tc)]
    try:
        for cmd, want in ((None, b"no"),
                          (b"lru_crawler crawl all",
                           b"CLIENT_ERROR lru crawler disabled\r\n"),
                          (b"lru_crawler enable", b"OK\r\n"),
                          (None, b"yes")):
            if cmd is None:
                got = both(cs, lambda c: setting(c, b"lru_crawler"))
            else:
                got = both(cs, lambda c: c.line(cmd))
            assert got == [want, want], (cmd, got)
    finally:
        for c in cs:
            c.close()
        tc.stop()
        mc.stop(expect_status=None)


def test_stats_conns_shape(conns):
    pat = re.compile(rb"STAT \d+:(addr|listen_addr|state|secs_since_last_cmd)"
                     rb" \S+\r\n")
    for c in conns:
        out = c.listing(b"stats conns")
        lines = out.split(b"\r\n")[:-2]
        assert lines and all(pat.fullmatch(l + b"\r\n") for l in lines), out
        assert b"state conn_listening" in out
        assert b"state conn_parse_cmd" in out


# ---- dumps --------------------------------------------------------------

META = re.compile(rb"key=(\S+) exp=(-?\d+) la=(\d+) cas=(\d+) fetch=(yes|no)"
                  rb" cls=(\d+) size=(\d+)")
ITEM = re.compile(rb"ITEM (\S+) \[(\d+) b; (\d+) s\]")

KEYS = [(b"adm:plain", b"abc", 7, 0), (b"adm:sp%20ace", b"hi", 0, 300),
        (b"adm:fetched", b"xyz" * 5, 3, 0), (b"adm:+/=&?", b"q", 0, 0),
        (b"adm:touched", b"tt", 0, 2592000), (b"adm:reset", b"r", 0, 0)]
# stored with no expiry, then touched to theirs: memcached's touch marks
# the item fetched; with the packed store on, an expiry 30 days out does
# not fit the item's 16-bit one and the touch rewrites it (a copy)
TOUCHED = {b"adm:touched"}
# read, then stored again: fetch=no (fetched since written)
RESET = {b"adm:reset"}


def metadump(c, what=b"all"):
    out = c.listing(b"lru_crawler metadump " + what)
    assert out.endswith(b"END\r\n"), out[-200:]
    body = out[:-5]
    items = {}
    for line in body.split(b"\n")[:-1]:
        m = META.fullmatch(line)
        assert m, line
        # memcached's crawler may meet an item twice (it moved between
        # LRUs meanwhile): the same line again is no error
        assert m.group(1) not in items or items[m.group(1)].group(0) == line, \
            f"{line!r} twice, different"
        items[m.group(1)] = m
    return items


def urlencode(k):
    return b"".join(bytes([ch]) if (chr(ch).isalnum() or chr(ch) in "._-~")
                    else b"%%%02X" % ch for ch in k)


@pytest.fixture
def loaded(conns):
    for c in conns:
        c.send(b"flush_all\r\n")
        assert c.until((b"\r\n",)) == b"OK\r\n"
        for k, v, f, e in KEYS:
            c.set(k, v, f, 0 if k in TOUCHED else e)
        for k in [b"adm:fetched"] + sorted(RESET):
            c.send(b"get %s\r\n" % k)
            c.until((b"END\r\n",))
        for k, v, f, e in KEYS:
            if k in TOUCHED:
                assert c.line(b"touch %s %d" % (k, e)) == b"TOUCHED\r\n"
            if k in RESET:
                c.set(k, v, f, e)
    return conns


def test_metadump_like_memcached(loaded):
    now = int(time.time())
    dumps = both(loaded, metadump)
    want = {urlencode(k) for k, _, _, _ in KEYS}
    for d in dumps:
        assert set(d) == want
    for k, _, _, e in KEYS:
        mc, tc = (d[urlencode(k)] for d in dumps)
        assert mc.group(5) == tc.group(5), k  # fetch
        if e == 0:
            assert mc.group(2) == tc.group(2) == b"-1", k
        else:
            assert abs(int(mc.group(2)) - int(tc.group(2))) <= TIME_SLACK
        assert abs(int(tc.group(3)) - now) <= TIME_SLACK, tc.group(0)
    # a class list and "hash" list the same items here (one class)
    for c, d in zip(loaded, dumps):
        cls = {m.group(6) for m in d.values()}
        assert len(cls) == 1
        assert set(metadump(c, b"hash")) == want
        assert set(metadump(c, b",".join(cls))) == want


def cachedump(c, cls, limit=0):
    out = c.listing(b"stats cachedump %s %d" % (cls, limit))
    lines = out.split(b"\r\n")
    assert lines[-2:] == [b"END", b""], out
    items = {}
    for line in lines[:-2]:
        m = ITEM.fullmatch(line)
        assert m, line
        items[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return items


def cachedump_all(c, limit=0):
    """cachedump of every class a metadump shows."""
    items = {}
    for cls in {m.group(6) for m in metadump(c).values()}:
        items.update(cachedump(c, cls, limit))
    return items


def test_cachedump_like_memcached(loaded):
    """The same shape on both. memcached lists only its HOT LRU (items
    move out of it over time), so its list is a subset; tiercached lists
    every item of the class."""
    now = int(time.time())
    want = {k: (len(v), e) for k, v, _, e in KEYS}
    mc, tc = (cachedump_all(c) for c in loaded)
    assert set(tc) == set(want)
    assert set(mc) <= set(want)
    for k, (n, e) in want.items():
        assert tc[k][0] == n, k
        assert (tc[k][1] == 0) if e == 0 else abs(tc[k][1] - now - e) <= \
            TIME_SLACK, (k, tc[k])
        if k in mc:
            assert mc[k][0] == n and abs(mc[k][1] - tc[k][1]) <= TIME_SLACK
    assert len(cachedump_all(loaded[1], 1)) == len(
        {m.group(6) for m in metadump(loaded[1]).values()})


def test_metadump_large_under_writes(pair):
    """A dump bigger than one output slice, with another connection
    writing other keys meanwhile: every key present for the whole dump is
    listed exactly once."""
    _, tc = pair
    c, w = Conn(tc), Conn(tc)
    try:
        n = 4000
        keys = [b"big:%05d:" % i + b"k" * 150 for i in range(n)]
        c.send(b"".join(b"set %s 0 0 1 noreply\r\nv\r\n" % k for k in keys))
        c.send(b"mn\r\n")
        assert c.until((b"MN\r\n",)) == b"MN\r\n"
        c.send(b"lru_crawler metadump all\r\n")
        for i in range(300):
            w.send(b"set churn:%d 0 0 2 noreply\r\nzz\r\n" % (i % 50))
            w.send(b"delete churn:%d noreply\r\n" % ((i + 7) % 50))
        got = c.until((b"END\r\n",))[:-len(b"END\r\n")]
        seen = {}
        for line in got.split(b"\n"):
            m = META.fullmatch(line)
            if m:
                seen[m.group(1)] = seen.get(m.group(1), 0) + 1
        for k in keys:
            assert seen.get(urlencode(k)) == 1, (k, seen.get(urlencode(k)))
    finally:
        c.close()
        w.close()


# ---- slabs reassign -----------------------------------------------------

def slab_pages(c):
    out = c.listing(b"stats slabs")
    pages = {}
    for m in re.finditer(rb"STAT (\d+):total_pages (\d+)", out):
        pages[int(m.group(1))] = int(m.group(2))
    return pages


def test_slabs_reassign_moves_a_page(pair):
    """A class with spare pages gives one to another: OK, the page counts
    move, and the moved class's items are all still there."""
    _, tc = pair
    c = Conn(tc)
    try:
        c.send(b"flush_all\r\n")
        c.until((b"\r\n",))
        val = b"r" * 3000
        for i in range(1500):
            c.set(b"re:%d" % i, val)
        for i in range(0, 1500, 2):
            c.send(b"delete re:%d\r\n" % i)
            c.until((b"\r\n",))
        before = slab_pages(c)
        src = max(before, key=lambda k: before[k])
        assert before[src] >= 2
        dst = 1 if src != 1 else 2
        assert c.line(b"slabs reassign %d %d" % (src, dst)) == b"OK\r\n"
        after = slab_pages(c)
        assert after[src] == before[src] - 1
        assert after.get(dst, 0) == before.get(dst, 0) + 1
        # the page's items move to free chunks of the class; any that find
        # none are evicted, as memcached's slab mover does: at most a page
        per_page = int(re.search(rb"STAT %d:chunks_per_page (\d+)" % src,
                                 c.listing(b"stats slabs")).group(1))
        lost = 0
        for i in range(1, 1500, 2):
            c.send(b"get re:%d\r\n" % i)
            r = c.until((b"END\r\n",))
            assert r == b"END\r\n" or r.startswith(b"VALUE re:%d 0 3000\r\n"
                                                   % i), r[:80]
            lost += r == b"END\r\n"
        assert lost <= per_page
        out = c.listing(b"stats")
        assert re.search(rb"STAT slabs_moved [1-9]", out), out
    finally:
        c.close()


# ---- operators' tools ---------------------------------------------------

def run(argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def tool(srv, mode):
    if not TOOL.exists():
        pytest.skip(f"{TOOL} not installed (Debian package memcached)")
    if shutil.which("perl") is None:
        pytest.skip("perl not installed")
    r = run(["perl", str(TOOL), f"{srv.host}:{srv.port}", mode])
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("mode", ["display", "stats", "settings", "sizes"])
def test_memcached_tool(loaded, pair, mode):
    mc, tc = (tool(s, mode) for s in pair)
    mcl, tcl = mc.splitlines(), tc.splitlines()
    # the header line is the same (the address aside)
    assert re.sub(r"#\S+", "#", mcl[0]) == re.sub(r"#\S+", "#", tcl[0])
    if mode == "display":
        row = re.compile(r"\s*\d+\s+\S+\s+\d+s\s+\d+\s+\d+\s+(yes|no)"
                         r"\s+\d+\s+\d+\s+\d+")
        assert len(tcl) >= 2
        for line in tcl[1:]:
            assert row.fullmatch(line), line
    elif mode == "sizes":
        assert [l.split() for l in tcl[1:]] == [l.split() for l in mcl[1:]]
    else:
        field = re.compile(r"\s*\S+\s+\S.*")
        for line in tcl[1:]:
            assert field.fullmatch(line), line
        mcf = {line.split()[0] for line in mcl[1:]}
        tcf = {line.split()[0] for line in tcl[1:]}
        common = {"pid", "uptime", "curr_items", "bytes", "get_hits",
                  "cmd_set", "limit_maxbytes", "curr_connections"} \
            if mode == "stats" else {"maxbytes", "maxconns", "tcpport",
                                     "evictions", "item_size_max"}
        assert common <= mcf and common <= tcf, common - tcf


def test_memcached_tool_dump(loaded, pair):
    outs = [tool(s, "dump") for s in pair]
    dumped = []
    for out in outs:
        lines = out.splitlines()
        items = {}
        i = 0
        while i < len(lines):
            m = re.fullmatch(r"add (\S+) (\d+) (\d+) (\d+)", lines[i])
            assert m, lines[i]
            items[m.group(1)] = (m.group(2), int(m.group(3)),
                                 int(m.group(4)), lines[i + 1])
            i += 2
        dumped.append(items)
    mc, tc = dumped
    assert set(mc) == set(tc) == {k.decode() for k, _, _, _ in KEYS}
    for k in mc:
        assert mc[k][0] == tc[k][0] and mc[k][2:] == tc[k][2:], k
        assert abs(mc[k][1] - tc[k][1]) <= TIME_SLACK, k


def libmemcached(prog, srv):
    if shutil.which(prog) is None:
        pytest.skip(f"{prog} not installed (Debian package "
                    f"libmemcached-tools)")
    r = run([prog, f"--servers={srv.host}:{srv.port}"])
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_memcdump(loaded, pair):
    """memcdump reads stats cachedump: memcached's lists its HOT LRU only
    (a subset), tiercached's every key."""
    mc, tc = (set(libmemcached("memcdump", s).split()) for s in pair)
    want = {k.decode() for k, _, _, _ in KEYS}
    assert tc == want
    assert mc <= want


def test_memcstat(loaded, pair):
    outs = [libmemcached("memcstat", s) for s in pair]
    fields = []
    for out in outs:
        lines = out.splitlines()
        assert re.fullmatch(r"Server: \S+ \(\d+\)", lines[0]), lines[0]
        for line in lines[1:]:
            assert re.fullmatch(r"\t\S+: \S.*", line), line
        fields.append({line.split(":")[0].strip() for line in lines[1:]})
    mc, tc = fields
    common = {"pid", "uptime", "version", "curr_items", "bytes", "cmd_get",
              "cmd_set", "get_hits", "get_misses", "threads"}
    assert common <= mc and common <= tc, common - tc


# ---- watch --------------------------------------------------------------

@pytest.mark.parametrize("cmd", [b"watch", b"watch fetchers mutations",
                                 b"watch evictions", b"watch foo",
                                 b"watch fetchers foo"],
                         ids=lambda c: c.decode())
def test_watch_reply(pair, cmd):
    replies = []
    for srv in pair:
        c = Conn(srv)
        try:
            replies.append(c.line(cmd))
        finally:
            c.close()
    assert replies[0] == replies[1], replies


# memcached 1.6.18 prints the microseconds unpadded, tiercached six digits
WATCH = re.compile(rb"ts=\d+\.\d{1,6} gid=\d+ type=(item_get|item_store) "
                   rb"key=(\S+) status=(\w+)(?: cmd=(\w+) ttl=(-?\d+))? "
                   rb"clsid=\d+ cfd=\d+ size=(\d+)")


def watch_events(srv, requests, want):
    """Watch fetchers and mutations while another connection sends the
    requests; the parsed lines about keys starting with "wt:", once at
    least want of them came (bounded wait)."""
    w, c = Conn(srv), Conn(srv)
    try:
        assert w.line(b"watch fetchers mutations") == b"OK\r\n"
        for req, reply_end in requests:
            c.send(req)
            c.until((reply_end,))
        events, buf = [], b""
        deadline = time.monotonic() + IO_TIMEOUT
        while len(events) < want and time.monotonic() < deadline:
            try:
                buf += w.sock.recv(1 << 16)
            except socket.timeout:
                break
            *lines, buf = buf.split(b"\n")
            for line in lines:
                m = WATCH.fullmatch(line)
                assert m, line
                if m.group(2).startswith(b"wt%3A"):
                    events.append(m.groups()[:4] + (m.group(6),))
        return events
    finally:
        w.close()
        c.close()


def test_watch_fetchers_mutations(pair):
    """The same events, in memcached's format: memcached also logs the
    lookups its stores make, so its stream has ours as a subsequence."""
    tag = str(time.monotonic_ns()).encode()
    k1, k2 = b"wt:a" + tag, b"wt:b" + tag
    requests = [(b"set %s 3 10 3\r\nbar\r\n" % k1, b"\r\n"),
                (b"get %s\r\n" % k1, b"END\r\n"),
                (b"get %s\r\n" % k2, b"END\r\n"),
                (b"add %s 0 0 1\r\n1\r\n" % k1, b"\r\n")]
    e1, e2 = urlencode(k1), urlencode(k2)
    want = [(b"item_store", e1, b"stored", b"set", b"3"),
            (b"item_get", e1, b"found", None, b"3"),
            (b"item_get", e2, b"not_found", None, b"0"),
            (b"item_store", e1, b"not_stored", b"add", b"1")]
    mc, tc = (watch_events(s, requests, len(want) + (2 if i == 0 else 0))
              for i, s in enumerate(pair))
    assert tc == want
    it = iter(mc)
    assert all(e in it for e in want), mc


def test_stats_sizes_enable(loaded):
    """sizes_enable and sizes_disable answer as memcached; enabled,
    tiercached's histogram counts every item (memcached's only those
    stored since enabling) in 32-byte steps."""
    try:
        for cmd in (b"stats sizes_enable", b"stats sizes_disable",
                    b"stats sizes_enable"):
            mc, tc = both(loaded, lambda c: c.line(cmd))
            assert tc == mc, (cmd, mc, tc)
        out = loaded[1].listing(b"stats sizes")
        rows = re.findall(rb"STAT (\d+) (\d+)\r\n", out)
        assert out == b"".join(b"STAT %s %s\r\n" % r for r in rows) + b"END\r\n"
        assert all(int(size) % 32 == 0 for size, _ in rows)
        assert sum(int(n) for _, n in rows) == len(KEYS)
    finally:
        for c in loaded:
            assert c.line(b"stats sizes_disable") == \
                b"STAT sizes_status disabled\r\n"


def test_hash_table_grows(spawn, connect):
    """hash_power_level, hash_bytes and hash_is_expanding are the index's
    own: a table started small (-o hashpower=13: memcached's least with
    4 threads) has grown after 20,000 sets, and its doubling ends by
    itself (hash_is_expanding back to 0; waited for, bounded)."""
    srv = spawn("-o", "hashpower=13")
    c = connect(srv)
    st = c.stats()
    level0, bytes0 = int(st["hash_power_level"]), int(st["hash_bytes"])
    assert st["hash_is_expanding"] in ("0", "1")
    batch = []
    for i in range(20000):
        batch.append(b"set grow:%d 0 0 1 noreply\r\nx\r\n" % i)
        if len(batch) == 500:
            c.send(b"".join(batch))
            batch = []
    assert c.stats()["curr_items"] == "20000"
    # memcached starts its expansion from a thread of its own: wait
    # (bounded) for a bigger table that is done expanding
    deadline = time.monotonic() + 30
    while True:
        st = c.stats()
        if (int(st["hash_power_level"]) > level0
                and st["hash_is_expanding"] == "0"):
            break
        assert time.monotonic() < deadline, (level0, st)
        time.sleep(0.1)
    assert int(st["hash_bytes"]) > bytes0, (bytes0, st)
    for i in (0, 9999, 19999):
        assert c.get_value(b"grow:%d" % i) == b"x"
