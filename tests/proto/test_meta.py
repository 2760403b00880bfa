"""Meta commands (mg ms md ma mn me), per memcached's doc/protocol.txt.

Return flags are compared in request order; the W/X/Z markers, which are
not request flags, are compared as a set (memcached puts them last).
"""

import base64
import math
import re
import time

import pytest

# run once more with the store that is not the default (conftest.py)
PACKED_TOO = True


def b(s):
    return s.encode() if isinstance(s, str) else s


def b64(raw):
    return base64.b64encode(b(raw)).decode()


def meta(mc, sent, code, flags=(), wxz="", value=None):
    """Send `sent` (unless None), read one meta reply and check it.

    code   "HD", "VA", "EN", "NF", ...
    flags  expected return tokens in order; a compiled regex matches one
    wxz    the set of W/X/Z markers expected
    value  for VA: the data block
    Returns the list of return tokens (W/X/Z excluded).
    """
    if sent is not None:
        mc.send(b(sent))
    line = mc.readline()
    sent_s = mc.last_sent if sent is None else b(sent)
    toks = line.decode(errors="replace").split()
    exp_desc = f"{code} {' '.join(getattr(f, 'pattern', f) for f in flags)}" \
        f" +{{{wxz}}}" + (f" value {value!r}" if value is not None else "")

    def fail(why):
        raise AssertionError(f"\n  sent:     {sent_s!r}\n  expected: {exp_desc}"
                             f"\n  got:      {line!r} ({why})")

    if not line.endswith(b"\r\n") or not toks:
        fail("no complete reply line")
    if toks[0] != code:
        fail("wrong code")
    rest = toks[1:]
    size = None
    if code == "VA":
        if not rest or not rest[0].isdigit():
            fail("VA without size")
        size = int(rest[0])
        rest = rest[1:]
    got_flags = [t for t in rest if t not in ("W", "X", "Z")]
    got_wxz = {t for t in rest if t in ("W", "X", "Z")}
    if len(got_flags) != len(flags):
        fail("wrong return flags")
    for want, got in zip(flags, got_flags):
        ok = want.fullmatch(got) if hasattr(want, "fullmatch") else want == got
        if not ok:
            fail(f"flag {got!r} is not {getattr(want, 'pattern', want)!r}")
    if got_wxz != set(wxz):
        fail(f"W/X/Z markers {sorted(got_wxz)} are not {sorted(set(wxz))}")
    if code == "VA":
        data = mc.recv_exact(size + 2)
        if data[-2:] != b"\r\n":
            fail(f"bad data block {data!r}")
        if value is not None and data[:-2] != b(value):
            fail(f"value {data[:-2]!r}")
    elif value is not None:
        fail("expected a value")
    return got_flags


def mg_cas(mc, key):
    flags = meta(mc, f"mg {key} c\r\n", "HD", [re.compile(r"c\d+")])
    return int(flags[0][1:])


def error_line(mc, sent, prefix=b"CLIENT_ERROR"):
    mc.send(b(sent))
    line = mc.readline()
    assert line.startswith(prefix) and line.endswith(b"\r\n"), (
        f"\n  sent:     {b(sent)!r}\n  expected: {prefix!r}...\n"
        f"  got:      {line!r}")
    return line


def resync(mc):
    """After an error: the connection still answers, in order."""
    mc.send(b"mn\r\n")
    rest = mc.read_until(b"MN\r\n")
    assert rest.endswith(b"MN\r\n"), rest
    mc.check_alive()


TTL = lambda n: re.compile(r"t(%d|%d)" % (n, n - 1))  # noqa: E731
CAS = re.compile(r"c\d+")


# ---- mn / mg / ms --------------------------------------------------------


def test_mn(mc):
    mc.cmd(b"mn\r\n", b"MN\r\n")
    mc.cmd(b"mn\r\nmn\r\n", b"MN\r\nMN\r\n")


def test_ms_mg_basic(mc, key):
    meta(mc, f"ms {key} 5 T0 F33\r\nhello\r\n", "HD")
    meta(mc, f"mg {key} v\r\n", "VA", value="hello")
    meta(mc, f"mg {key} v f t s k\r\n", "VA",
         ["f33", "t-1", "s5", f"k{key}"], value="hello")
    meta(mc, f"mg {key}\r\n", "HD")
    meta(mc, f"mg {key} s f\r\n", "HD", ["s5", "f33"])
    meta(mc, f"mg {key}-none v\r\n", "EN")
    # the data is a normal item for the classic commands too
    mc.cmd(b"get %s\r\n" % b(key), b"VALUE %s 33 5\r\nhello\r\nEND\r\n" % b(key))
    mc.set(key, "classic", flags=4)
    meta(mc, f"mg {key} v f\r\n", "VA", ["f4"], value="classic")


def test_mg_cas_matches_gets(mc, key):
    mc.set(key, "x")
    mc.send(b"gets %s\r\n" % b(key))
    m = re.match(rb"VALUE \S+ 0 1 (\d+)\r\n", mc.readline())
    assert m
    mc.expect(b"x\r\nEND\r\n")
    assert mg_cas(mc, key) == int(m.group(1))


def test_ms_empty_and_binary_value(mc, key):
    meta(mc, f"ms {key} 0\r\n\r\n", "HD")
    meta(mc, f"mg {key} v s\r\n", "VA", ["s0"], value="")
    data = bytes(range(256)) + b"\r\n"
    mc.send(b"ms %s %d\r\n%s\r\n" % (b(key), len(data), data))
    meta(mc, None, "HD")
    meta(mc, f"mg {key} v\r\n", "VA", value=data)


def test_ms_c_returns_cas(mc, key):
    flags = meta(mc, f"ms {key} 2 c\r\nhi\r\n", "HD", [CAS])
    assert int(flags[0][1:]) == mg_cas(mc, key)


def test_ms_flags_ttl(mc, key):
    meta(mc, f"ms {key} 1 F4294967295 T100\r\nx\r\n", "HD")
    meta(mc, f"mg {key} f t\r\n", "HD", ["f4294967295", TTL(100)])
    meta(mc, f"ms {key} 1\r\nx\r\n", "HD")          # no F: flags 0, no TTL
    meta(mc, f"mg {key} f t\r\n", "HD", ["f0", "t-1"])
    meta(mc, f"ms {key} 1 T-1\r\nx\r\n", "HD")      # already expired
    meta(mc, f"mg {key} v\r\n", "EN")


def test_ms_modes(mc, key):
    k = key
    meta(mc, f"ms {k} 2 ME\r\nhi\r\n", "HD")        # add
    meta(mc, f"ms {k} 2 ME\r\nho\r\n", "NS")
    meta(mc, f"ms {k}-r 2 MR\r\nhi\r\n", "NS")      # replace a miss
    meta(mc, f"ms {k}-r 2 MA\r\nhi\r\n", "NS")      # append to a miss
    meta(mc, f"ms {k}-r 2 MP\r\nhi\r\n", "NS")      # prepend to a miss
    meta(mc, f"mg {k}-r v\r\n", "EN")
    meta(mc, f"ms {k} 2 MA\r\n>>\r\n", "HD")
    meta(mc, f"ms {k} 2 MP\r\n<<\r\n", "HD")
    meta(mc, f"mg {k} v\r\n", "VA", value="<<hi>>")
    meta(mc, f"ms {k} 3 MR\r\nnew\r\n", "HD")
    meta(mc, f"ms {k} 3 MS\r\nset\r\n", "HD")
    meta(mc, f"mg {k} v\r\n", "VA", value="set")


def test_ms_invalid_mode_swallows_value(mc, key):
    error_line(mc, f"ms {key} 2 MX\r\nhi\r\n")
    # the value was read and dropped, as memcached does
    mc.cmd(b"mn\r\n", b"MN\r\n")
    meta(mc, f"mg {key} v\r\n", "EN")


def test_ms_cas(mc, key):
    meta(mc, f"ms {key} 1 C12345\r\nx\r\n", "NF")
    meta(mc, f"ms {key} 1\r\nx\r\n", "HD")
    c = mg_cas(mc, key)
    meta(mc, f"ms {key} 1 C{c + 1000}\r\ny\r\n", "EX")
    meta(mc, f"ms {key} 1 C{c}\r\ny\r\n", "HD")
    meta(mc, f"ms {key} 1 C{c}\r\nz\r\n", "EX")
    meta(mc, f"mg {key} v\r\n", "VA", value="y")
    c2 = mg_cas(mc, key)
    assert c2 != c
    # append respects a supplied CAS too
    meta(mc, f"ms {key} 1 MA C{c}\r\nz\r\n", "EX")
    meta(mc, f"ms {key} 1 MA C{c2}\r\nz\r\n", "HD")
    meta(mc, f"mg {key} v\r\n", "VA", value="yz")


def test_ms_bad_data_chunk(mc, key):
    error_line(mc, f"ms {key} 3\r\nabcd\r\n", b"CLIENT_ERROR bad data chunk")
    resync(mc)


def test_ms_bad_tokens(mc, key):
    error_line(mc, f"ms {key}\r\n")
    resync(mc)
    error_line(mc, f"ms {key} abc\r\n")
    resync(mc)
    error_line(mc, f"ms {key} 2 Fabc\r\nhi\r\n")
    resync(mc)
    meta(mc, f"mg {key} v\r\n", "EN")


# ---- opaque, key return, quiet mode ---------------------------------------


def test_opaque_and_key(mc, key):
    k = key
    meta(mc, f"ms {k} 1 Oxy k\r\nx\r\n", "HD", ["Oxy", f"k{k}"])
    meta(mc, f"mg {k} k v Oabc123\r\n", "VA", [f"k{k}", "Oabc123"], value="x")
    meta(mc, f"mg {k}-none v Oabc k\r\n", "EN", ["Oabc", f"k{k}-none"])
    meta(mc, f"md {k} Oq k\r\n", "HD", ["Oq", f"k{k}"])
    meta(mc, f"md {k} Oq k\r\n", "NF", ["Oq", f"k{k}"])
    meta(mc, f"ma {k} Oz\r\n", "NF", ["Oz"])


def test_quiet_mode_pipeline(mc, key):
    k = key
    mc.set(k + "-1", "one")
    mc.set(k + "-3", "three")
    req = (f"mg {k}-1 v q O1\r\n"       # hit: sent
           f"mg {k}-2 v q O2\r\n"       # miss: EN suppressed
           f"mg {k}-3 v k q O3\r\n"     # hit: sent
           f"ms {k}-4 1 q O4\r\nx\r\n"  # stored: HD suppressed
           f"ms {k}-4 1 q ME O5\r\nx\r\n"  # not stored: NS sent
           f"md {k}-1 q O6\r\n"         # deleted: HD suppressed
           f"md {k}-2 q O7\r\n"         # miss: NF sent
           f"mn\r\n")
    mc.cmd(req.encode(),
           b"VA 3 O1\r\none\r\n"
           b"VA 5 k%s-3 O3\r\nthree\r\n"
           b"NS O5\r\n"
           b"NF O7\r\n"
           b"MN\r\n" % b(k))
    meta(mc, f"mg {k}-1 v\r\n", "EN")
    meta(mc, f"mg {k}-4 v\r\n", "VA", value="x")


def test_quiet_hit_without_value(mc, key):
    mc.set(key, "x")
    mc.cmd(f"mg {key} q\r\nmg {key}-none q\r\nmn\r\n".encode(), b"HD\r\nMN\r\n")


# ---- base64 keys ------------------------------------------------------------


def test_base64_keys(mc, key):
    enc = b64(key)
    meta(mc, f"ms {enc} 3 b\r\nb64\r\n", "HD")
    # the key is returned base64 encoded, with the b flag
    meta(mc, f"mg {enc} k b v\r\n", "VA", [f"k{enc}", "b"], value="b64")
    # the decoded key is the stored one
    mc.cmd(b"get %s\r\n" % b(key), b"VALUE %s 0 3\r\nb64\r\nEND\r\n" % b(key))
    meta(mc, f"md {enc} b\r\n", "HD")
    meta(mc, f"mg {key} v\r\n", "EN")


def test_base64_binary_key(mc, key):
    raw = b"\x00\x01\xff \r\n" + b(key)
    enc = b64(raw)
    meta(mc, f"ms {enc} 2 b\r\nbk\r\n", "HD")
    meta(mc, f"mg {enc} b v\r\n", "VA", value="bk")
    enc2 = b64(raw + b"\x00")
    meta(mc, f"ma {enc2} b N0 J5 v\r\n", "VA", value="5")
    meta(mc, f"ma {enc2} b v\r\n", "VA", value="6")
    meta(mc, f"md {enc} b\r\n", "HD")
    meta(mc, f"mg {enc} b v\r\n", "EN")


def test_base64_bad(mc):
    error_line(mc, "mg bad!!b64 b v\r\n")
    resync(mc)


# ---- md -------------------------------------------------------------------


def test_md(mc, key):
    meta(mc, f"md {key}\r\n", "NF")
    mc.set(key, "x")
    meta(mc, f"md {key}\r\n", "HD")
    meta(mc, f"mg {key} v\r\n", "EN")
    mc.set(key, "x")
    mc.cmd(f"md {key} q\r\nmd {key} q\r\nmn\r\n".encode(), b"NF\r\nMN\r\n")


def test_md_cas(mc, key):
    mc.set(key, "x")
    c = mg_cas(mc, key)
    meta(mc, f"md {key} C{c + 1}\r\n", "EX")
    meta(mc, f"md {key} C{c + 1} q\r\n", "EX")
    meta(mc, f"mg {key} v\r\n", "VA", value="x")
    meta(mc, f"md {key} C{c}\r\n", "HD")
    meta(mc, f"mg {key} v\r\n", "EN")


# ---- stale / win / vivify ---------------------------------------------------


def test_md_invalidate_stale_win(mc, key):
    meta(mc, f"ms {key} 3 T100\r\nold\r\n", "HD")
    c1 = mg_cas(mc, key)
    meta(mc, f"md {key} I T30\r\n", "HD")
    # the first fetch after invalidation is stale and wins the recache
    flags = meta(mc, f"mg {key} v c t\r\n", "VA", [CAS, TTL(30)], wxz="XW",
                 value="old")
    c2 = int(flags[0][1:])
    assert c2 != c1, "md I did not bump the CAS"
    # later fetches: stale, someone else already won
    meta(mc, f"mg {key} v\r\n", "VA", wxz="XZ", value="old")
    meta(mc, f"mg {key}\r\n", "HD", wxz="XZ")
    # a store with the old CAS fails; with the current one it replaces
    # the stale item with a fresh one
    meta(mc, f"ms {key} 3 C{c1}\r\nnew\r\n", "EX")
    meta(mc, f"ms {key} 3 C{c2}\r\nnew\r\n", "HD")
    meta(mc, f"mg {key} v\r\n", "VA", value="new")


def test_ms_invalidate_older_cas(mc, key):
    meta(mc, f"ms {key} 3\r\nold\r\n", "HD")
    c = mg_cas(mc, key)
    # I with a CAS older than the item's: stored, but marked stale
    meta(mc, f"ms {key} 3 C{c - 1} I\r\nnew\r\n", "HD")
    meta(mc, f"mg {key} v\r\n", "VA", wxz="XW", value="new")
    meta(mc, f"mg {key} v\r\n", "VA", wxz="XZ", value="new")


def test_mg_vivify(mc, key):
    meta(mc, f"mg {key} N30 v t\r\n", "VA", [TTL(30)], wxz="W", value="")
    meta(mc, f"mg {key} N30 v t\r\n", "VA", [TTL(30)], wxz="Z", value="")
    meta(mc, f"mg {key} v\r\n", "VA", wxz="Z", value="")
    # the winner stores the real value: the markers are gone
    meta(mc, f"ms {key} 3 T100\r\nnew\r\n", "HD")
    meta(mc, f"mg {key} v\r\n", "VA", value="new")


def test_mg_vivify_flags(mc, key):
    meta(mc, f"mg {key} N30 s t c f\r\n", "HD", ["s0", TTL(30), CAS, "f0"],
         wxz="W")
    mc.cmd(f"mg {key} N30 q v\r\nmn\r\n".encode(), b"VA 0 Z\r\n\r\nMN\r\n")


def test_mg_recache(mc, key):
    meta(mc, f"ms {key} 1 T10\r\nx\r\n", "HD")
    # remaining TTL (10) below the R token (30): win, once
    meta(mc, f"mg {key} R30 v t\r\n", "VA", [TTL(10)], wxz="W", value="x")
    meta(mc, f"mg {key} R30 v\r\n", "VA", wxz="Z", value="x")
    meta(mc, f"ms {key}-long 1 T1000\r\nx\r\n", "HD")
    meta(mc, f"mg {key}-long R30 v\r\n", "VA", value="x")


def test_mg_touch(mc, key):
    meta(mc, f"ms {key} 1 T100\r\nx\r\n", "HD")
    meta(mc, f"mg {key} T500 t\r\n", "HD", [TTL(500)])
    meta(mc, f"mg {key} t\r\n", "HD", [TTL(500)])
    meta(mc, f"mg {key} T-1\r\n", "HD")
    meta(mc, f"mg {key} v\r\n", "EN")


def test_mg_hit_before(mc, key):
    mc.set(key, "x")
    meta(mc, f"mg {key} h\r\n", "HD", ["h0"])
    meta(mc, f"mg {key} h\r\n", "HD", ["h1"])


def _l(toks):
    """The value of the l return flag among the tokens meta() returned."""
    return next(int(t[1:]) for t in toks if t.startswith("l"))


def timed(fn):
    """(fn(), (t0, t1)): the client's monotonic times around the call,
    between which the server handled it."""
    t0 = time.monotonic()
    out = fn()
    return out, (t0, time.monotonic())


def check_age(age, access, read, what):
    """An age in whole seconds the server reported in a request handled
    within `read` (t0, t1), counted from an access it handled within
    `access` (t0, t1; the span of every access that may have set the
    time). The server's clock moved by floor or ceil of the real time
    between the two: at least floor(read0 - access1), at most
    ceil(read1 - access0). On a quiet machine these are the two values a
    fixed wait allows (0 or 1 at once, 1 or 2 after 1.1 s); a slow one only
    moves them up, and the check stays exact about what it can know."""
    lo = max(0, math.floor(read[0] - access[1]))
    hi = math.ceil(read[1] - access[0])
    assert lo <= age <= hi, (
        f"{what}: age {age}, but {read[0] - access[1]:.3f} to "
        f"{read[1] - access[0]:.3f} s passed since the access")


def span(*spans):
    """The span from the first start to the last end."""
    return (min(a for a, _ in spans), max(b for _, b in spans))


def test_mg_last_access(mc, key):
    """l: seconds since the item was last stored or read, before this read.

    The sequence is one where memcached and tiercache agree: memcached's
    segmented LRU moves the time on a read only from the item's second
    fetch on (doc/operating.md, "Switching from memcached"), so the item is
    fetched once first. Each wait is at least 1.1 s; both servers count
    whole seconds, so an age is bounded by the real time measured around
    the requests (check_age).
    """
    L = re.compile(r"l\d+")

    def mg_l(flags, code="HD", want=(), value=None):
        toks, t = timed(lambda: meta(mc, f"mg {key} {flags}\r\n", code,
                                     want, value=value))
        return _l(toks), t

    _, stored = timed(lambda: mc.set(key, "x"))
    age, t1 = mg_l("l h", want=[L, "h0"])
    check_age(age, stored, t1, "right after the set")
    time.sleep(1.1)
    # memcached counts from the set (a first fetch does not move the
    # time), tiercache may count from the first read
    age, t2 = mg_l("l h", want=[L, "h1"])
    check_age(age, span(stored, t1), t2, "1.1 s after the first read")
    assert age >= 1
    # that read was an access
    age, t3 = mg_l("l", want=[L])
    check_age(age, t2, t3, "right after the second read")
    time.sleep(1.1)
    # u reads without moving it (the last access: the read before, or the
    # one before that)
    age, t4 = mg_l("l u", want=[L])
    check_age(age, span(t2, t3), t4, "1.1 s later, read with u")
    assert age >= 1
    age, t5 = mg_l("u t l v", code="VA", want=["t-1", L], value="x")
    check_age(age, span(t2, t3), t5, "after a read with u")
    assert age >= 1
    # a store is an access
    _, stored = timed(lambda: mc.set(key, "y"))
    age, t6 = mg_l("l", want=[L])
    check_age(age, stored, t6, "right after a store")
    meta(mc, f"mg {key}-missing l\r\n", "EN")
    mc.cmd(f"mg {key} l l\r\n".encode(), b"CLIENT_ERROR duplicate flag\r\n")
    # accepted (and ignored) by ms and md, as memcached does
    meta(mc, f"ms {key} 1 l\r\nz\r\n", "HD")
    meta(mc, f"md {key} l\r\n", "HD")


def test_mg_noop_tokens(mc, key):
    """P and L tokens are ignored (proxy hints)."""
    mc.set(key, "x")
    meta(mc, f"mg {key} v P/foo Lbar\r\n", "VA", value="x")


# ---- ma -------------------------------------------------------------------


def test_ma(mc, key):
    meta(mc, f"ma {key}\r\n", "NF")
    meta(mc, f"ma {key} q\r\n", "NF")
    # N: create on a miss, seeded with J; the seed is returned as is
    meta(mc, f"ma {key} N0 J10 v\r\n", "VA", value="10")
    meta(mc, f"ma {key} N0 J10 v\r\n", "VA", value="11")
    meta(mc, f"ma {key}\r\n", "HD")
    meta(mc, f"ma {key} v D5\r\n", "VA", value="17")
    meta(mc, f"ma {key} v MD D3\r\n", "VA", value="14")
    mc.cmd(f"ma {key} q D100\r\nmn\r\n".encode(), b"MN\r\n")
    meta(mc, f"mg {key} v\r\n", "VA", value="114")
    meta(mc, f"ma {key} v k Oxy\r\n", "VA", [f"k{key}", "Oxy"], value="115")
    mc.cmd(b"get %s\r\n" % b(key), b"VALUE %s 0 3\r\n115\r\nEND\r\n" % b(key))


def test_ma_create_modes(mc, key):
    meta(mc, f"ma {key}-a N0 v\r\n", "VA", value="0")
    meta(mc, f"ma {key}-b N0 MD J7 v\r\n", "VA", value="7")
    meta(mc, f"ma {key}-c N100 J7 v t\r\n", "VA", [TTL(100)], value="7")
    meta(mc, f"ma {key}-d J5 v\r\n", "NF")   # J without N creates nothing


def test_ma_modes_wrap_floor(mc, key):
    mc.set(key, "18446744073709551615")
    meta(mc, f"ma {key} v\r\n", "VA", value="0")
    meta(mc, f"ma {key} v MD D5\r\n", "VA", value="0")
    meta(mc, f"ma {key} v M+ D3\r\n", "VA", value="3")
    meta(mc, f"ma {key} v M- D1\r\n", "VA", value="2")
    meta(mc, f"ma {key} v MI\r\n", "VA", value="3")
    meta(mc, f"ma {key} v MD\r\n", "VA", value="2")
    meta(mc, f"ma {key} v D18446744073709551615\r\n", "VA", value="1")
    error_line(mc, f"ma {key} Mx\r\n")
    resync(mc)


def test_ma_cas_ttl(mc, key):
    mc.set(key, "5")
    c = mg_cas(mc, key)
    meta(mc, f"ma {key} C{c + 1} v\r\n", "EX")
    flags = meta(mc, f"ma {key} C{c} v c\r\n", "VA", [CAS], value="6")
    assert int(flags[0][1:]) != c
    assert int(flags[0][1:]) == mg_cas(mc, key)
    meta(mc, f"ma {key} T100 t v\r\n", "VA", [TTL(100)], value="7")
    meta(mc, f"mg {key} t\r\n", "HD", [TTL(100)])


def test_ma_errors(mc, key):
    mc.set(key, "abc")
    meta_err = b"CLIENT_ERROR cannot increment or decrement non-numeric value"
    error_line(mc, f"ma {key}\r\n", meta_err)
    error_line(mc, f"ma {key} q\r\n", meta_err)
    mc.set(key, "1")
    for bad in ("Dabc", "D-1", "D18446744073709551616", "N0 J-1", "N0 Jabc"):
        error_line(mc, f"ma {key} {bad}\r\n")
        resync(mc)
    meta(mc, f"mg {key} v\r\n", "VA", value="1")


# ---- me -------------------------------------------------------------------


def test_me(mc, key):
    mc.cmd(f"me {key}\r\n".encode(), b"EN\r\n")

    def me_fields():
        mc.send(f"me {key}\r\n".encode())
        line = mc.readline()
        assert line.startswith(f"ME {key} ".encode()) and \
            line.endswith(b"\r\n"), line
        return dict(kv.split("=", 1) for kv in line.decode().split()[2:])

    _, stored = timed(lambda: mc.set(key, "x"))
    f, t = timed(me_fields)
    # memcached's fields, in its order
    assert list(f) == ["exp", "la", "cas", "fetch", "cls", "size"], f
    check_age(int(f["la"]), stored, t, "la right after the set")
    # me itself is not a fetch
    assert f["exp"] == "-1" and f["fetch"] == "no", f
    assert me_fields()["fetch"] == "no"
    _, fetched = timed(lambda: meta(mc, f"mg {key} v\r\n", "VA", value="x"))
    f = me_fields()
    assert f["fetch"] == "yes", f
    assert int(f["cas"]) == mg_cas(mc, key)
    # la=: seconds since the last access; me itself is not one (the mg
    # above was the first fetch, so memcached moves its time from the next)
    time.sleep(1.1)
    f, t = timed(me_fields)
    la = int(f["la"])
    check_age(la, span(stored, fetched), t, "la 1.1 s after the first fetch")
    assert la >= 1
    f, t = timed(me_fields)
    check_age(int(f["la"]), span(stored, fetched), t, "la again")
    assert int(f["la"]) >= la
    _, fetched = timed(lambda: meta(mc, f"mg {key} v\r\n", "VA",
                                    value="x"))
    f, t = timed(me_fields)
    check_age(int(f["la"]), fetched, t, "la right after the second fetch")


def test_me_base64(mc, key):
    enc = b64(key)
    mc.set(key, "x")
    mc.send(f"me {enc} b\r\n".encode())
    line = mc.readline()
    # protocol.txt says the key comes back base64 encoded; memcached 1.6
    # prints it decoded: either is accepted
    assert line.startswith(f"ME {enc} ".encode()) or \
        line.startswith(f"ME {key} ".encode()), line


# ---- errors -----------------------------------------------------------------


def test_meta_errors(mc, key):
    mc.set(key, "x")
    mc.cmd(f"mg {key} !\r\n".encode(), b"CLIENT_ERROR invalid flag\r\n")
    mc.cmd(b"mg\r\n", b"ERROR\r\n")
    mc.cmd(b"md\r\n", b"ERROR\r\n")
    mc.cmd(b"ma\r\n", b"ERROR\r\n")
    # spaces after the command are no key either (mn needs none)
    mc.cmd(b"mg   \r\n", b"ERROR\r\n")
    mc.cmd(b"ms \r\n", b"ERROR\r\n")
    mc.cmd(b"mn   \r\n", b"MN\r\n")
    error_line(mc, "me\r\n")
    resync(mc)
    error_line(mc, "mg " + "k" * 251 + " v\r\n")
    resync(mc)
    error_line(mc, f"mg {key} Tabc v\r\n")
    resync(mc)
    meta(mc, f"mg {key} v\r\n", "VA", value="x")


@pytest.mark.parametrize("n", [1, 7])
def test_meta_pipeline_mixed(mc, key, n):
    """Meta and classic commands interleaved in one send."""
    k = key
    req = b""
    exp = b""
    for i in range(n):
        req += (f"ms {k}-{i} 2 T0\r\nv{i}\r\n"
                f"get {k}-{i}\r\n"
                f"mg {k}-{i} v k\r\n"
                f"incr {k}-{i} 1\r\n"
                f"md {k}-{i} q\r\n"
                f"mg {k}-{i} v q\r\n").encode()
        exp += (f"HD\r\nVALUE {k}-{i} 0 2\r\nv{i}\r\nEND\r\n"
                f"VA 2 k{k}-{i}\r\nv{i}\r\n"
                f"CLIENT_ERROR cannot increment or decrement non-numeric "
                f"value\r\n").encode()
    mc.cmd(req + b"mn\r\n", exp + b"MN\r\n")


# ---- what the differential test against memcached settled (test_diff.py) --


def test_md_ms_flag_error_texts(mc, key):
    # md words every flag error as ma does; ms/md/ma say "options flags
    # too long" where mg says "are too long"
    for bad in ("y", "Cx", "q q"):
        mc.cmd(f"md {key} {bad}\r\n".encode(),
               b"CLIENT_ERROR invalid or duplicate flag\r\n")
    many = " ".join(["q"] * 25)
    mc.cmd(f"md {key} {many}\r\n".encode(),
           b"CLIENT_ERROR options flags too long\r\n")
    mc.cmd(f"mg {key} {many}\r\n".encode(),
           b"CLIENT_ERROR options flags are too long\r\n")
    # refused before the length is read: the data line is a command then
    mc.cmd(f"ms {key} 2 {many}\r\nhi\r\n".encode(),
           b"CLIENT_ERROR options flags too long\r\nERROR\r\n")
    resync(mc)


def test_ms_invalidate_keeps_ttl_and_taken_win(mc, key):
    meta(mc, f"ms {key} 3 T100\r\nold\r\n", "HD")
    c = mg_cas(mc, key)
    meta(mc, f"md {key} I\r\n", "HD")
    meta(mc, f"mg {key} v\r\n", "VA", wxz="XW", value="old")   # win taken
    # a stale store (CAS older than the item's): the item's TTL stays, and
    # the win already handed out stays taken
    meta(mc, f"ms {key} 3 C{c} I T5000\r\nnew\r\n", "HD")
    meta(mc, f"mg {key} v t\r\n", "VA", [TTL(100)], wxz="XZ", value="new")
    # C0 is never "older": refused
    meta(mc, f"ms {key} 1 C0 I\r\nx\r\n", "EX")


def test_flags_apply_in_request_order(mc, key):
    # a t ahead of N or T reports the TTL before them
    meta(mc, f"mg {key} t N100\r\n", "HD", ["t-1"], wxz="W")
    meta(mc, f"mg {key} t\r\n", "HD", [TTL(100)], wxz="Z")
    meta(mc, f"mg {key} t T200\r\n", "HD", [TTL(100)], wxz="Z")
    meta(mc, f"mg {key} T300 t\r\n", "HD", [TTL(300)], wxz="Z")
    # of T and N on a new item the later one wins
    meta(mc, f"mg {key}-2 N100 T-1\r\n", "HD", wxz="W")
    meta(mc, f"mg {key}-2\r\n", "EN")
    # R sees the TTL as it stands at R: after T-1 the item is due
    mc.set(key + "-3", "x")
    meta(mc, f"mg {key}-3 T-1 R30\r\n", "HD", wxz="W")
    # ma: the same order for t, T and N
    meta(mc, f"ma {key}-4 t N100\r\n", "HD", ["t-1"])
    meta(mc, f"ma {key}-4 t T200\r\n", "HD", [TTL(100)])
    meta(mc, f"ma {key}-4 t\r\n", "HD", [TTL(200)])


def test_ma_quiet_creation_replies(mc, key):
    # q hides the reply of an update, not of the creation by N
    mc.cmd(f"ma {key} q N0 J5 v\r\nma {key} q v\r\nmn\r\n".encode(),
           b"VA 1\r\n5\r\nMN\r\n")
    meta(mc, f"mg {key} v\r\n", "VA", value="6")


def test_arith_cas_before_number(mc, key):
    # memcached: an empty value is not a number, then the CAS, then digits
    mc.set(key, "abc")
    c = mg_cas(mc, key)
    meta(mc, f"ma {key} C{c + 1}\r\n", "EX")
    error_line(mc, f"ma {key} C{c}\r\n",
               b"CLIENT_ERROR cannot increment or decrement non-numeric")
    mc.set(key, "")
    error_line(mc, f"ma {key} C{c + 1}\r\n",
               b"CLIENT_ERROR cannot increment or decrement non-numeric")


def test_incr_pads_in_place(mc, key):
    # a shorter number keeps the length, space padded (memcached rewrites
    # it in place); the number is read up to the first space, so an append
    # behind it does not stop the next incr
    mc.set(key, "100")
    mc.cmd(f"decr {key} 1\r\n".encode(), b"99\r\n")
    mc.cmd(f"append {key} 0 0 3\r\nabc\r\n".encode(), b"STORED\r\n")
    mc.cmd(f"incr {key} 1\r\n".encode(), b"100\r\n")
    mc.cmd(f"get {key}\r\n".encode(),
           b"VALUE %s 0 6\r\n100   \r\nEND\r\n" % b(key))


def test_stale_mark_on_rewrites(mc, key):
    # a text get hands out no win: the next meta reader gets it
    mc.set(key, "1")
    meta(mc, f"md {key} I\r\n", "HD")
    assert mc.get_value(key) == b"1"
    meta(mc, f"mg {key} h\r\n", "HD", ["h1"], wxz="XW")
    # md I marks in place: still fetched; me (a debug read) takes no win
    meta(mc, f"md {key} I\r\n", "HD")
    mc.send(f"me {key}\r\n".encode())
    assert mc.readline().startswith(b"ME "), "me: no ME line"
    meta(mc, f"mg {key} h\r\n", "HD", ["h1"], wxz="XW")
    # an append makes a new item: fresh, not stale
    mc.cmd(f"append {key} 0 0 1\r\n2\r\n".encode(), b"STORED\r\n")
    meta(mc, f"mg {key} v h\r\n", "VA", ["h0"], value="12")


@pytest.mark.tiercache_only
def test_explicit_cas_everywhere(mc, key):
    """E (the new CAS) on mg N, md I and ma, as memcached 1.6.2x documents
    it (1.6.18 has no E: the differential test cannot compare it)."""
    e = 10**12 + 17
    meta(mc, f"mg {key} N30 E{e} c\r\n", "HD", [f"c{e}"], wxz="W")
    meta(mc, f"md {key} I E{e + 1}\r\n", "HD")
    meta(mc, f"mg {key} c\r\n", "HD", [f"c{e + 1}"], wxz="XW")
    meta(mc, f"ma {key}-n N0 E{e + 2} c v\r\n", "VA", [f"c{e + 2}"],
         value="0")
    meta(mc, f"ma {key}-n E{e + 3} c v\r\n", "VA", [f"c{e + 3}"], value="1")
    assert mg_cas(mc, key + "-n") == e + 3
