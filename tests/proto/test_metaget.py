"""memcached's own meta-protocol test file (t/metaget.t in memcached's
source), replayed against Debian's memcached and the server under test side
by side: each request goes to both, and the replies must agree (CAS values
numbered per server in order of appearance, c0 kept; TTLs equal within 3 s),
besides the checks metaget.t makes of each reply (flags W X Z present or
absent, TTL windows, values). A request that carries a CAS carries each
server's own.

Beyond metaget.t: ma and an append over a stale item (md I), compared the
same way.

Left out: metaget.t's last-access block (mg l: an intended difference, see
doc/operating.md, "Switching from memcached") and its extstore block (a
memcached build option)."""

import re
import socket
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import IS_MEMCACHED, MEM_MIB, start_server  # noqa: E402
from test_diff import MEMCACHED, start_memcached  # noqa: E402

# run once more with the store that is not the default (conftest.py)
PACKED_TOO = True

TIMEOUT = 10.0


class Side:
    """One connection to one server, with the values its replies gave."""

    def __init__(self, srv):
        self.srv = srv
        self.sock = socket.create_connection((srv.host, srv.port),
                                             timeout=TIMEOUT)
        self.buf = b""
        self.saved = {}

    def send(self, data):
        self.sock.sendall(data)

    def read_mn(self):
        deadline = time.monotonic() + TIMEOUT
        while True:
            at = self.buf.find(b"MN\r\n")
            if at == 0 or (at > 0 and self.buf[at - 2:at] == b"\r\n"):
                out, self.buf = self.buf[:at], self.buf[at + 4:]
                return out.decode("latin-1")
            left = deadline - time.monotonic()
            assert left > 0, f"no MN from {self.srv.port}: {self.buf!r}"
            self.sock.settimeout(left)
            d = self.sock.recv(65536)
            assert d, f"{self.srv.port} closed: {self.buf!r}"
            self.buf += d

    def read_to_close(self):
        deadline = time.monotonic() + TIMEOUT
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"{self.srv.port} did not close: {self.buf!r}"
            self.sock.settimeout(left)
            d = self.sock.recv(65536)
            if not d:
                return self.buf.decode("latin-1")
            self.buf += d


def flag(reply, f):
    """The token of flag f on the reply's first line (None if absent)."""
    first = reply.split("\r\n", 1)[0].split()
    for t in first[1:]:
        if t.startswith(f):
            return t[1:]
    return None


def _norm(reply, names):
    out = []
    for line in reply.split("\r\n"):
        toks = line.split(" ")
        if toks[0] in ("VA", "HD", "EX", "NS", "NF", "EN"):
            for i, t in enumerate(toks[1:], 1):
                if re.fullmatch(r"c[1-9][0-9]*", t):
                    toks[i] = "c#%d" % names.setdefault(t, len(names) + 1)
        out.append(toks)
    return out


def _same(a, b, na, nb):
    la, lb = _norm(a, na), _norm(b, nb)
    if len(la) != len(lb):
        return False
    for ta, tb in zip(la, lb):
        if len(ta) != len(tb):
            return False
        for x, y in zip(ta, tb):
            if x == y:
                continue
            mx = re.fullmatch(r"t(-?[0-9]+)", x)
            my = re.fullmatch(r"t(-?[0-9]+)", y)
            if not (mx and my and ta[0] in ("VA", "HD")
                    and abs(int(mx[1]) - int(my[1])) <= 3):
                return False
    return True


class Pair:
    def __init__(self, mc_srv, tc_srv):
        self.mc, self.tc = Side(mc_srv), Side(tc_srv)
        self.names = ({}, {})
        self.log = []

    def x(self, req, like=(), unlike=(), ttl=None, save=None, value=None):
        """Send req (a string, or a function of the Side giving one) to both
        servers; check both replies agree and meet metaget.t's checks."""
        replies = []
        for side in (self.mc, self.tc):
            r = req(side) if callable(req) else req
            side.send(r.encode("latin-1") + b"mn\r\n")
            replies.append(side.read_mn())
        a, b = replies
        self.log.append((req if isinstance(req, str) else "<cas>", a, b))
        assert _same(a, b, *self.names), (
            f"request {self.log[-1][0]!r}:\n  memcached: {a!r}\n"
            f"  server:    {b!r}")
        for side, rep in zip((self.mc, self.tc), replies):
            for pat in (like if isinstance(like, tuple) else (like,)):
                assert re.search(pat, rep), (pat, rep, side.srv.argv[0])
            for pat in (unlike if isinstance(unlike, tuple) else (unlike,)):
                assert not re.search(pat, rep.split("\r\n")[0]), (
                    pat, rep, side.srv.argv[0])
            if ttl is not None:
                t = int(flag(rep, "t"))
                assert ttl[0] < t <= ttl[1], (ttl, rep, side.srv.argv[0])
            if value is not None:
                assert rep.split("\r\n")[1] == value, (value, rep)
            if save:
                side.saved[save] = flag(rep, "c")
        return b


@pytest.fixture
def pair():
    if IS_MEMCACHED:
        pytest.skip("compares the server under test with memcached")
    if not MEMCACHED.exists():
        pytest.skip(f"{MEMCACHED} not installed (Debian package memcached)")
    mc_srv = start_memcached()
    try:
        tc_srv = start_server(mem=MEM_MIB, threads=2)
    except BaseException:
        mc_srv.proc.kill()
        mc_srv.proc.wait(10)
        mc_srv.cleanup()
        raise
    try:
        yield Pair(mc_srv, tc_srv)
    finally:
        tc_srv.stop()
        if mc_srv.alive():
            mc_srv.proc.terminate()
            mc_srv.proc.wait(10)
        mc_srv.cleanup()


def test_metaget_basics(pair):
    p = pair
    p.x(" \n", like="^ERROR\r\n")
    p.x("set foo 0 0 2\r\nhi\r\n", like="^STORED")
    p.x("me none\r\n", like="^EN\r\n")
    p.x("set foo2 0 90 2\r\nho\r\n", like="^STORED")
    p.x("mg foo2 s v\r\n", like="^VA 2 s2\r\nho\r\n$")
    # basic mset CAS: a wrong CAS gives EX c0
    p.x("ms msetcas 2\r\nbo\r\n", like="^HD")
    p.x("mg msetcas c\r\n", like=r"^HD c\d+", save="c")
    p.x(lambda s: f"ms msetcas 2 c C{int(s.saved['c']) + 10}\r\nio\r\n",
        like="^EX c0")
    p.x(lambda s: f"ms msetcas 2 c C{s.saved['c']}\r\nio\r\n",
        like=r"^HD c\d+")
    # md with CAS
    p.x("ms mdeltest 2\r\nzo\r\n", like="^HD")
    p.x("mg mdeltest c\r\n", save="c")
    p.x(lambda s: f"md mdeltest C{int(s.saved['c']) + 10}\r\n", like="^EX")
    p.x(lambda s: f"md mdeltest C{s.saved['c']}\r\n", like="^HD")
    # base64 keys
    p.x("ms 44OG44K544OI 2 b\r\npo\r\n", like="^HD")
    p.x("mg 44OG44K544OI v\r\n", like="^EN")
    p.x("mg 44OG44K544OI b v k\r\n", like="^VA 2 .*k44OG44K544OI")


def test_metaget_arithmetic(pair):
    p = pair
    p.x("ma mo\r\n", like="^NF")
    p.x("ma mo D1\r\n", like="^NF")
    p.x("set mo 0 0 1\r\n1\r\n", like="^STORED")
    p.x("ma mo\r\n", like="^HD")
    p.x("set mo 0 0 1\r\nq\r\n", like="^STORED")
    p.x("ma mo\r\n", like="^CLIENT_ERROR ")
    p.x("ma mu N90\r\n", like="^HD")
    p.x("mg mu s t v Ofoo k\r\n", ttl=(10, 90), value="0")
    p.x("ma mu T300 v t\r\n", ttl=(150, 300), value="1")
    p.x("ma mi N0 J13 v t\r\n", value="13")
    p.x("ma mi N0 J13 v t\r\n", value="14")
    p.x("ma mi N0 J13 v t D30\r\n", value="44")
    p.x("ma mi N0 J13 v t MD D22\r\n", value="22")
    p.x("ma mi N0 J13 v t MD D9000\r\n", value="0")
    p.x("ma mi q D1\r\n", like="^$")
    p.x("ma mc N0 c v\r\n", save="c")
    p.x("ma mc N0 C99999 v\r\n", like="^EX")
    p.x(lambda s: f"ma mc N0 C{s.saved['c']} c v\r\n", value="1")


def test_metaget_modes(pair):
    p = pair
    p.x("ms modedefault 2 T120\r\naa\r\n", like="^HD")
    p.x("mg modedefault s v\r\n", like="^VA 2 s2\r\naa")
    p.x("ms modedefault 2 T120 ME\r\naa\r\n", like="^NS")
    p.x("ms modetest 2 T120 ME\r\nbb\r\n", like="^HD")
    p.x("ms modetest 2 T120 MA\r\ncc\r\n", like="^HD")
    p.x("mg modetest s v\r\n", like="^VA 4 s4\r\nbbcc")
    p.x("ms modetest 2 T120 MP\r\naa\r\n", like="^HD")
    p.x("mg modetest s v\r\n", like="^VA 6 s6\r\naabbcc")
    p.x("ms modereplace 2 T120 MR\r\nzz\r\n", like="^NS")
    p.x("ms modetest 2 T120 MR\r\nxx\r\n", like="^HD")
    p.x("mg modetest s v\r\n", like="^VA 2 s2\r\nxx")
    p.x("ms modetest 2 T120 MS\r\nyy\r\n", like="^HD")
    p.x("ms modetest 2 T120 MZ\r\ntt\r\n", like="^CLIENT_ERROR ")


def test_metaget_lease(pair):
    """The recache lease: vivify on miss (N), recache on low TTL (R)."""
    p = pair
    p.x("mg needwin s c v N30 t\r\n", like=("^VA 0 ", " W"), unlike=" Z",
        ttl=(0, 30), save="c")
    p.x("mg needwin s t c v N30\r\n", like=" Z", unlike=" W")
    p.x("ms needwin 2 C5000 T120\r\nnu\r\n", like="^EX")
    p.x(lambda s: f"ms needwin 2 C{s.saved['c']} T120\r\nmu\r\n", like="^HD")
    p.x("mg needwin s k t c v N30\r\n", unlike=" [WZ]", ttl=(100, 120),
        value="mu")
    p.x("mg needwin s t c v N30 R130\r\n", like=" W", unlike=" Z",
        value="mu", save="c")
    p.x("mg needwin s t c v N30 R130\r\n", like=" Z", unlike=" W",
        value="mu")
    p.x(lambda s: f"ms needwin 4 C{s.saved['c']} T300\r\nzuuu\r\n",
        like="^HD")
    p.x("mg needwin s t c v N30\r\n", like="^VA 4 ", unlike=" [WZ]",
        ttl=(250, 300), value="zuuu")


def test_metaget_touch_value_hit(pair):
    p = pair
    p.x("ms gatkey 4 T100\r\nooom\r\n", like="^HD")
    p.x("mg gatkey s v T300 t\r\n", unlike=" [WZ]", ttl=(280, 300))
    p.x("ms hidevalue 4 T100\r\nhide\r\n", like="^HD")
    p.x("mg hidevalue s t\r\n", like="^HD ")
    p.x("mg hidevalue s t v\r\n", value="hide")
    p.x("ms hitflag 3 T100\r\nhit\r\n", like="^HD")
    p.x("mg hitflag s t h\r\n", like=" h0")
    p.x("mg hitflag s t h\r\n", like=" h1")
    p.x("ms noupdate 3 T100\r\nhit\r\n", like="^HD")
    p.x("mg noupdate s t u h\r\n", like=" h0")
    p.x("mg noupdate s t h\r\n", like=" h0")
    p.x("mg noupdate s t u h\r\n", like=" h1")


def test_metaget_serve_stale(pair):
    """md I marks stale (the first mg wins: W X); ms I with an older CAS
    stores the value still stale, the win token already handed out (Z X)
    and the TTL left at md's 30 s; the current CAS stores a fresh item."""
    p = pair
    p.x("set toinv 0 0 3\r\nmoo\r\n", like="^STORED")
    p.x("mg toinv s v\r\n", unlike=" [XWZ]")
    p.x("md toinv I T30\r\n", like="^HD")
    p.x("mg toinv s t c v\r\n", like=(" W", " X"), ttl=(0, 30), value="moo")
    p.x("ms toinv 1 T90 C0\r\nf\r\n", like="^EX")
    p.x("ms toinv 1 I T90 C1\r\nf\r\n", like="^HD")
    p.x("mg toinv s t c v\r\n", like=(" X", " Z"), unlike=" W", ttl=(0, 30),
        save="c", value="f")
    # asked again: still stale, still taken, TTL still md's
    p.x("mg toinv s t c v\r\n", like=(" X", " Z"), unlike=" W", ttl=(0, 30))
    p.x(lambda s: f"ms toinv 1 T90 C{s.saved['c']}\r\ng\r\n", like="^HD")
    p.x("mg toinv s t c v\r\n", unlike=" [WXZ]", ttl=(30, 90), value="g")


def test_metaget_stale_without_md(pair):
    """ms I with an older CAS over a fresh item: stored stale, the win goes
    to the next mg, the TTL stays the item's (none here)."""
    p = pair
    # twice, so that the item's CAS is above 1 on both
    p.x("set inv2 0 0 3\r\nmoo\r\n", like="^STORED")
    p.x("set inv2 0 0 3\r\nmoo\r\n", like="^STORED")
    p.x("ms inv2 1 I T90 C1\r\nf\r\n", like="^HD")
    p.x("mg inv2 s t c v\r\n", like=(" X", " W", " t-1"), value="f")
    p.x("mg inv2 s t c v\r\n", like=(" X", " Z", " t-1"), unlike=" W")
    p.x("ms inv2 1 I T90\r\nf\r\n", like="^HD")
    p.x("mg inv2 s t c v\r\n", unlike=" [WXZ]", ttl=(80, 90))


def test_metaget_arith_stale(pair):
    """ma over a stale item (md I): a number that fits is rewritten in
    place, still stale, the win kept as it was; a longer one is a new item,
    no longer stale, with the old TTL. ma N only creates on a miss, so a
    stale item is counted on, not replaced by the initial value."""
    p = pair
    # the fuzzer's case: "" then "1", stale, then incr with N past its length
    p.x("set grow 0 0 0\r\n\r\n", like="^STORED")
    p.x("append grow 0 0 1\r\n1\r\n", like="^STORED")
    p.x("md grow I T30\r\n", like="^HD")
    p.x("mg grow s t v\r\n", like=(" W", " X"), ttl=(0, 30), value="1")
    p.x("ma grow N0 J5 D171 v t\r\n", ttl=(0, 30), value="172")
    p.x("mg grow s t v\r\n", unlike=" [WXZ]", ttl=(0, 30), value="172")
    # fits: in place, still stale, the win not yet handed out
    p.x("set fit 0 100 2\r\n12\r\n", like="^STORED")
    p.x("md fit I\r\n", like="^HD")
    p.x("ma fit N0 D1 v t\r\n", ttl=(90, 100), value="13")
    p.x("mg fit s t v\r\n", like=(" W", " X"), ttl=(90, 100), value="13")
    # then longer: a new item, fresh
    p.x("ma fit D171 v t\r\n", ttl=(90, 100), value="184")
    p.x("mg fit s t v\r\n", unlike=" [WXZ]", ttl=(90, 100), value="184")
    # decr in place after the win went out: still stale, still taken
    p.x("set down 0 100 3\r\n500\r\n", like="^STORED")
    p.x("md down I\r\n", like="^HD")
    p.x("mg down s v\r\n", like=(" W", " X"), value="500")
    p.x("ma down MD D1 v\r\n", value="499")
    p.x("mg down s v\r\n", like=(" X", " Z"), unlike=" W", value="499")


def test_metaget_append_stale(pair):
    """ms MA over a stale item (md I) makes a new item, no longer stale,
    with the old flags and TTL, even when it appends nothing; N only
    creates on a miss."""
    p = pair
    p.x("set apst 0 0 5\r\nhello\r\n", like="^STORED")
    p.x("md apst I\r\n", like="^HD")
    p.x("mg apst s v\r\n", like=(" W", " X"), value="hello")
    p.x("ms apst 0 MA N30 F77\r\n\r\n", like="^HD")
    p.x("mg apst s t f v\r\n", like=(" t-1", " f0"), unlike=" [WXZ]",
        value="hello")
    p.x("md apst I T30\r\n", like="^HD")
    p.x("ms apst 2 MA\r\nxy\r\n", like="^HD")
    p.x("mg apst s t v\r\n", unlike=" [WXZ]", ttl=(0, 30),
        value="helloxy")


def test_metaget_quiet_opaque_errors(pair):
    p = pair
    p.x("ms quiet 2 q\r\nmo\r\nmd quiet q\r\nmg quiet s v q\r\nms quiet\r\n",
        like="^CLIENT_ERROR")
    p.x("ms quiet 2 q\r\nbo\r\nmg quiet v q\r\nmg quiet v q\r\n"
        "mg quietmiss v q\r\n", like="^VA 2\r\nbo\r\nVA 2\r\nbo\r\n$")
    p.x("mg quietautov s N30 t q\r\n", like="^HD s0")
    p.x("ms otest 2 T100\r\nra\r\n", like="^HD")
    p.x("mg otest t v Oopaque\r\n", like=" Oopaque")
    p.x("mg foo m o o o o o o o o o\r\n", like="^CLIENT_ERROR")


def test_metaget_pipeline_quit(pair):
    """Requests after quit in the same packet are not run."""
    p = pair
    p.x("ms foo 2 T100\r\nna\r\n", like="^HD")
    got = []
    for side in (p.mc, p.tc):
        side.send(b"mg foo s\r\nmg foo s\r\nquit\r\nmg foo s\r\n")
        got.append(side.read_to_close())
    assert got[0] == got[1] == "HD s2\r\nHD s2\r\n", got
