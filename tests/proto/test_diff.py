"""Differential test: the same random command sequences to memcached and
to tiercached, side by side; the replies must match.

Each run starts Debian's memcached (/usr/bin/memcached, or TC_MEMCACHED;
1.6.18 in Debian 12) and the server under test (TC_SERVER) on 127.0.0.1
and free ports, then sends TC_DIFF_SEQUENCES sequences (default 2000, 1000
against an ASan build) of 5 to 40 requests each, drawn by diffgen.py: text
commands (set add replace append prepend cas get gets gat gats incr decr
delete touch flush_all version verbosity stats, noreply), meta commands (mg
ms md ma mn me with their flags, base64 keys, opaque tokens, CAS values
given back from earlier replies) and bad input. Each request goes to both
servers followed by "mn", and its reply is what comes before that MN. Each
sequence has keys of its own; TTLs are none, already past or far away, and
memory is ample, so no reply depends on the clock or on evictions.
memcached runs without its LRU maintainer and crawler threads (see
start_memcached: with them, whether an incr rewrites in place depends on
that thread's timing).

Replies are compared after normalising what may differ:
  - CAS values: each server's are numbered in order of first appearance
    within the sequence (c7 -> c#1); a CAS the client sends back is that
    server's own value (diffgen.CasRef);
  - remaining TTLs (mg/ma t, me exp=): equal within 3 s (a second may tick
    between the two servers); that of an item born expired (N-1, T-1) is
    "expired" (memcached prints exptime - now as an unsigned 32-bit number);
    me exp= by its magnitude (memcached 1.6.18 prints now - exptime);
  - mg l and me la= (last access: see doc/operating.md, "Switching from
    memcached"), me cls= and
    size= (slab class and item size are each server's own);
  - stats contents (only that the reply is STAT lines and END) and the
    version string.

Intended differences (INTENDED below; also in doc/operating.md, "Switching
from memcached"). Where
the effect of a request may differ, the rest of its sequence is not
compared:

  | what | memcached 1.6.18 | tiercached | why |
  | --- | --- | --- | --- |
  | strict numbers | strtoul: takes "+5"; flags >= 2^32 wrap to their low 32 bits; an exptime beyond 32 bits is truncated (4294967296: never expires) | CLIENT_ERROR bad command line format (an exptime beyond 32 bits is a time in 2106) | a number that silently changes is worse than a refusal (doc/operating.md, "Switching from memcached") |
  | opaque checked first | an O token over 32 bytes is refused while the reply is written: mg has fetched, touched or created (N), ma has changed the value; ma reports a non-numeric value first | refused before the command acts | an error reply must mean nothing happened |
  | key echoed as sent | k and me return the key by how the item was stored (a per-item binary-key bit) | as the request spelled it (base64 with b) | no bit for it in the item header; a client reads back what it sent |
  | ma T when the number grows | T (and t's report) go to the item being replaced: the stored item keeps its TTL | the stored item gets the TTL | memcached bug (do_add_delta returns the old item) |
  | base64 keys strict | characters outside the alphabet are skipped ("q85.b" is the key of "q85b") | CLIENT_ERROR (decoding, or md/ma's flag error) | a malformed key is refused, never guessed |

Not compared: what memcached 1.6.18 does not have and tiercached does as
later memcached versions document it (1.6.18 answers "CLIENT_ERROR invalid
flag" or ignores the flag): E (explicit CAS) on any command (so flush_all
as a CAS watermark for an E below it cannot be compared; without E both
agree, items stored after a flush_all in the same second stay visible), md
x, ms s, ms N (append with vivify), mg C (HD for an unchanged CAS).

Seeds: the normal run uses one fixed seed (DEFAULT_SEED), so that the
suite sends the same sequences on every machine and run; TC_DIFF_SEED=<n>
picks another, TC_DIFF_SEED=random a new one each run (`make diff-long`
does that). A failure prints the seed and the index of the failing
sequence; TC_DIFF_SEQ=<i> runs only the i-th
sequence of that seed. TC_DIFF_SECONDS bounds the run's time (default 240;
the run stops early, saying so, when it is reached; 0: no bound).
A difference is checked once more before it fails the run: the sequence
is run again (its keys are deleted at its end), and if memcached's own
replies up to the failing request differ from its first run, the reference
contradicted itself (seen once in CI: an autovivified counter it called
non-numeric on one run and not the next) and the difference is printed,
not counted; more than MAX_UNSTABLE such sequences fail the run. A
difference memcached repeats fails as before.
TC_DIFF_KEEP_GOING=<n> reports up to n + 1 failing sequences instead of
stopping at the first. `make diff-long DIFF_SEQUENCES=100000` is the long
run.
"""

import os
import random
import re
import socket
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conftest  # noqa: E402
import diffgen  # noqa: E402
from conftest import IS_ASAN, IS_MEMCACHED, start_server  # noqa: E402

MEMCACHED = conftest.MEMCACHED
SEQUENCES = int(os.environ.get("TC_DIFF_SEQUENCES",
                               "1000" if IS_ASAN else "2000"))
SECONDS = float(os.environ.get("TC_DIFF_SECONDS", "240"))
READ_TIMEOUT = 10.0 if IS_ASAN else 5.0
TTL_SLACK = 3
MEM_MIB = 256
SENTINEL = b"mn\r\n"
MN = b"MN\r\n"


# ---- intended differences ------------------------------------------------

# (name, sent(request) -> bool, replies(memcached, tiercached) -> bool or
# None, stop). A rule matches a request when both predicates hold; its
# replies then are not a failure. A rule without a replies predicate
# matches on the request alone, even when the replies agree: it is a
# request whose effect differs. With stop, the rest of the sequence is not
# compared (the servers' data may differ from there). The reasons are in
# the table above.

def _line(sent):
    return sent.split(b"\r\n", 1)[0]


STORAGE = (b"set", b"add", b"replace", b"append", b"prepend", b"cas")


def _big(tok, limit):
    return re.fullmatch(rb"-?\d+", tok) is not None and abs(int(tok)) > limit


def _strict_number(sent):
    toks = _line(sent).split(b" ")
    if any(re.fullmatch(rb"\+\d+", t) for t in toks):
        return True
    exp = {b"touch": 2, b"gat": 1, b"gats": 1}.get(toks[0], 3)
    return ((toks[0] in STORAGE and len(toks) > 2
             and _big(toks[2], 0xFFFFFFFF))
            or (toks[0] in STORAGE + (b"touch", b"gat", b"gats")
                and len(toks) > exp and _big(toks[exp], 0x7FFFFFFF)))


def _ma_touch(sent):
    toks = _line(sent).split(b" ")
    return toks[0] == b"ma" and any(t.startswith(b"T") for t in toks[2:])


def _ma_done(a, b):
    return a == b and (a == "" or a.startswith(("HD", "VA")))


def _long_opaque(sent):
    return any(t.startswith(b"O") and len(t) > 32
               for t in _line(sent).split(b" ")[2:])


KEY_TOKEN = re.compile(r" k[^ \\]+( b)?(?= |\\r|$)")


def _key_echo(a, b):
    def norm(x):
        return KEY_TOKEN.sub(" k*", re.sub(r"^ME \S+", "ME *", x))
    return a != b and norm(a) == norm(b)


B64_KEY = re.compile(rb"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|"
                     rb"[A-Za-z0-9+/]{3}=)?")


def _lenient_b64(sent):
    toks = _line(sent).split(b" ")
    return (toks[0] in (b"mg", b"ms", b"md", b"ma") and len(toks) > 2
            and b"b" in toks[2:] and not B64_KEY.fullmatch(toks[1]))


INTENDED = [
    ("strict numbers", _strict_number, None, True),
    ("opaque checked first", _long_opaque, None, True),
    ("key echoed as sent", lambda sent: True, _key_echo, False),
    ("ma T when the number grows", _ma_touch, _ma_done, True),
    ("base64 keys strict", _lenient_b64, None, True),
]


# ---- servers --------------------------------------------------------------


def start_memcached():
    """Debian's memcached with the flags the test needs: -U 0, -m large
    enough that nothing is evicted, CAS on, and no LRU maintainer or
    crawler threads: with them, an item fetched twice is queued for an
    asynchronous LRU bump that holds a reference for a while, and an incr
    or decr then makes a new item instead of rewriting the number in place
    (padded, still stale, still fetched) — a reply that would depend on
    that thread's timing."""
    return conftest.start_memcached(
        extra=("-o", "no_lru_maintainer,no_lru_crawler"), mem=MEM_MIB,
        prefix="tc-diff-")


class Client:
    """One connection; send a request plus "mn", read up to that MN."""

    def __init__(self, srv):
        self.srv = srv
        self.sock = None
        self.buf = b""
        self.connect()

    def connect(self):
        if self.sock:
            self.sock.close()
        self.sock = socket.create_connection((self.srv.host, self.srv.port),
                                             timeout=READ_TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data):
        try:
            self.sock.sendall(data + SENTINEL)
            return True
        except OSError:
            return False

    def read(self, nmn, ok_sent=True):
        """The reply before the (nmn + 1)-th MN line. On a stall or a close
        the reply gets a marker and the connection is made anew."""
        deadline = time.monotonic() + READ_TIMEOUT
        end = None
        while end is None:
            end = _nth_mn(self.buf, nmn + 1)
            if end is not None:
                break
            left = deadline - time.monotonic()
            if not ok_sent or left <= 0:
                out, marker = self.buf, b"<stalled>"
                break
            self.sock.settimeout(left)
            try:
                d = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            except OSError:
                d = b""
            if not d:
                out, marker = self.buf, b"<closed>"
                break
            self.buf += d
        if end is not None:
            out, self.buf = self.buf[:end - len(MN)], self.buf[end:]
            return out
        self.connect()
        return out + marker


def _nth_mn(buf, n):
    """End offset of the n-th "MN\\r\\n" that starts a line, or None."""
    pos = 0
    while n:
        i = buf.find(MN, pos)
        if i < 0:
            return None
        if i == 0 or buf[i - 1:i] == b"\n":
            n -= 1
        pos = i + len(MN)
    return pos


# ---- normalising ------------------------------------------------------------

META_CODES = {"HD", "VA", "EN", "NF", "NS", "EX"}
STATS_RE = re.compile(rb"\A(STAT [^\r\n]*\r\n)*END\r\n\Z")
CAS_HI = 2**40 + 17


class View:
    """One server's side of a sequence: its CAS numbering and the CAS
    values it returned per key (for CasRef)."""

    def __init__(self):
        self.canon = {0: 0}
        self.seen = {}

    def cas_name(self, raw, key):
        raw = int(raw)
        if raw not in self.canon:
            self.canon[raw] = len(self.canon)
        if key is not None and raw:
            lst = self.seen.setdefault(key, [])
            if not lst or lst[-1] != raw:
                lst.append(raw)
        return f"#{self.canon[raw]}"

    def cas_of(self, ref):
        lst = self.seen.get(ref.key, [])
        if ref.kind == "cur" and lst:
            v = lst[-1]
        elif ref.kind == "prev" and len(lst) > 1:
            v = lst[-2]
        elif ref.kind == "lo":
            v = 1
        elif ref.kind == "zero":
            v = 0
        else:
            v = CAS_HI
        return str(v).encode()

    def normalise(self, cmd, raw):
        """(text, ttls): the reply with CAS, TTL, l and stats normalised."""
        if cmd.kind == "stats" and STATS_RE.match(raw):
            return "<stats>", []
        ttls = []
        lines = raw.split(b"\r\n")
        out = []
        for ln in lines:
            s = ln.decode("latin-1")
            toks = s.split(" ")
            if cmd.kind == "version" and toks[0] == "VERSION":
                out.append("VERSION ~")
            elif toks[0] == "VALUE" and len(toks) == 5:
                toks[4] = "c" + self.cas_name(toks[4], toks[1].encode())
                out.append(" ".join(toks))
            elif toks[0] in META_CODES and cmd.key is not None:
                out.append(self._meta_line(toks, cmd.key, ttls))
            elif toks[0] == "ME" and len(toks) > 2:
                out.append(self._me_line(toks, ttls))
            else:
                out.append(s)
        return "\\r\\n".join(out), ttls

    def _meta_line(self, toks, key, ttls):
        first = 2 if toks[0] == "VA" else 1
        for i in range(first, len(toks)):
            t = toks[i]
            if re.fullmatch(r"c\d+", t):
                toks[i] = "c" + self.cas_name(t[1:], key)
            elif re.fullmatch(r"t-?\d+", t) and t != "t-1":
                toks[i] = self._ttl("t", int(t[1:]), ttls)
            elif re.fullmatch(r"l\d+", t):
                toks[i] = "l~"
        return " ".join(toks)

    @staticmethod
    def _ttl(prefix, n, ttls):
        """A remaining TTL: compared within TTL_SLACK; one of an item
        already expired (born so: N-1, T-1) is "expired" (memcached prints
        exptime - now as an unsigned 32-bit number, tiercached as a
        negative one)."""
        if n >= 1 << 31:
            n -= 1 << 32
        if n < -1:
            return prefix + "<expired>"
        ttls.append(n)
        return prefix + "~"

    def _me_line(self, toks, ttls):
        for i in range(2, len(toks)):
            name, _, val = toks[i].partition("=")
            if name == "exp" and val != "-1":
                # memcached 1.6.18 prints now - exptime (sign inverted)
                toks[i] = self._ttl("exp=", abs(int(val)), ttls)
            elif name == "cas":
                toks[i] = "cas=" + self.cas_name(val, None)
            elif name in ("la", "cls", "size"):
                toks[i] = name + "=~"
        return " ".join(toks)


def _same(a, b):
    (ta, la), (tb, lb) = a, b
    return ta == tb and len(la) == len(lb) and all(
        abs(x - y) <= TTL_SLACK for x, y in zip(la, lb))


def _intended(sent, a, b, same):
    """(rule name, stop) of the first rule matching, or (None, False)."""
    for name, when_sent, when_replies, stop in INTENDED:
        if not when_sent(sent):
            continue
        if when_replies is None or when_replies(a[0], b[0]):
            return name, stop
    return None, False


# ---- the run ----------------------------------------------------------------


class Pair:
    def __init__(self, mc_srv, tc_srv):
        self.mc = Client(mc_srv)
        self.tc = Client(tc_srv)

    def exchange(self, cmd, vmc, vtc):
        """Send one request to both; (sent_mc, reply_mc, sent_tc, reply_tc)."""
        smc, stc = cmd.render(vmc.cas_of), cmd.render(vtc.cas_of)
        okm, okt = self.mc.send(smc), self.tc.send(stc)
        rmc = self.mc.read(cmd.mn, okm)
        rtc = self.tc.read(cmd.mn, okt)
        return smc, rmc, stc, rtc

    def quiet(self, data):
        """Send to both, wait for both, compare nothing (clean-up)."""
        self.mc.send(data)
        self.tc.send(data)
        self.mc.read(0)
        self.tc.read(0)


def _short(x, limit=160):
    s = repr(x) if isinstance(x, bytes) else x
    return s if len(s) <= limit else s[:limit // 2] + "..." + s[-limit // 2:]


def run_sequence(pair, seed, index, now, stats, trace=None):
    """Run one sequence; returns None, or a failure report (str). trace, a
    list, receives memcached's normalised replies."""
    prefix = f"q{index}."
    seq = diffgen.sequence(seed, index, now, prefix)
    vmc, vtc = View(), View()
    log = []
    failure = None
    for cmd in seq:
        smc, rmc, stc, rtc = pair.exchange(cmd, vmc, vtc)
        stats["commands"] += 1
        nmc, ntc = vmc.normalise(cmd, rmc), vtc.normalise(cmd, rtc)
        if trace is not None:
            trace.append(nmc)
        log.append(f"  > {_short(smc)}" +
                   ("" if smc == stc else f" / {_short(stc)}"))
        same = _same(nmc, ntc)
        why, stop = _intended(smc, nmc, ntc, same)
        if why:
            stats["intended"][why] = stats["intended"].get(why, 0) + 1
            log.append(f"    ~ intended ({why}): memcached {nmc[0]} | "
                       f"tiercached {ntc[0]}")
            if stop:
                break
            continue
        if same:
            log.append(f"    = {_short(nmc[0])}")
            continue
        log.append(f"    memcached:  {rmc!r}\n    tiercached: {rtc!r}")
        failure = (f"sequence {index} of seed {seed} (reproduce: "
                   f"TC_DIFF_SEED={seed} TC_DIFF_SEQ={index}), request "
                   f"{len(log) // 2} of {len(seq)}:\n" + "\n".join(log))
        break
    names = [prefix + n for n in diffgen.KEY_NAMES] + \
        [(prefix + "L" * 300)[:250]]
    pair.quiet("".join(f"delete {k} noreply\r\n" for k in names).encode())
    return failure

def memcached_unstable(pair, seed, index, now, stats, first):
    """Run a failed sequence again (its keys were deleted at its end): True
    when memcached's replies differ from its own first run at or before
    the request that failed (first: that run's trace). The reference then
    contradicted itself (a clock tick, a background thread), and the
    difference says nothing about tiercached; a difference memcached
    repeats still fails."""
    again = []
    run_sequence(pair, seed, index, now, {"commands": 0, "intended": {}},
                 again)
    n = len(first)
    return len(again) < n or not all(
        _same(a, b) for a, b in zip(first, again[:n]))


# memcached contradicting itself more often than this fails the run: the
# reference (or the harness) is then broken, not merely unlucky.
MAX_UNSTABLE = 2

# The normal run's seed (see the module's docstring).
DEFAULT_SEED = 20261125


def test_diff_memcached():
    if not MEMCACHED.exists():
        pytest.skip(f"{MEMCACHED} not installed (Debian package memcached)")
    want = os.environ.get("TC_DIFF_SEED") or str(DEFAULT_SEED)
    seed = random.randrange(1 << 32) if want == "random" else int(want)
    only = os.environ.get("TC_DIFF_SEQ")
    indices = [int(only)] if only else range(SEQUENCES)
    keep_going = int(os.environ.get("TC_DIFF_KEEP_GOING", "0"))
    print(f"diff: seed {seed} (TC_DIFF_SEED={seed} reproduces)")
    mc_srv = start_memcached()
    # TC_SERVER_KIND=memcached: memcached against itself, which checks
    # the test (the normalising, the generator's self-delimiting requests)
    tc_srv = (start_memcached() if IS_MEMCACHED
              else start_server(mem=MEM_MIB, threads=2))
    stats = {"commands": 0, "sequences": 0, "intended": {}, "unstable": 0}
    failures = []
    start = time.monotonic()
    try:
        pair = Pair(mc_srv, tc_srv)
        # CAS values above 1 on both, so that "lo" is older than any item
        pair.quiet(b"set diffwarm 0 0 1\r\nx\r\n" * 3)
        now = time.time()
        for i in indices:
            if SECONDS and time.monotonic() - start > SECONDS:
                print(f"diff: time bound TC_DIFF_SECONDS={SECONDS:g} "
                      f"reached after {stats['sequences']} sequences")
                break
            trace = []
            f = run_sequence(pair, seed, i, now, stats, trace)
            stats["sequences"] += 1
            if f and memcached_unstable(pair, seed, i, now, stats, trace):
                stats["unstable"] += 1
                print(f"diff: memcached answered sequence {i} differently "
                      f"on a rerun; its difference is not counted:\n{f}")
                assert stats["unstable"] <= MAX_UNSTABLE, (
                    f"memcached contradicted itself in {stats['unstable']} "
                    f"sequences (seed {seed})")
                f = None
            if f:
                failures.append(f)
                if len(failures) > keep_going:
                    break
        alive = mc_srv.alive(), tc_srv.alive()
    finally:
        tc_srv.stop()
        if mc_srv.alive():
            mc_srv.proc.terminate()
            mc_srv.proc.wait(10)
        mc_srv.cleanup()
    took = time.monotonic() - start
    print(f"diff: {stats['sequences']} sequences, {stats['commands']} "
          f"requests in {took:.1f} s; intended differences met: "
          f"{stats['intended'] or 'none'}; memcached unstable in "
          f"{stats['unstable']}")
    assert not failures, (f"replies differ (seed {seed}):\n"
                          + "\n\n".join(failures))
    assert alive == (True, True), f"server died (memcached, tiercached): {alive}"
