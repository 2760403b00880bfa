"""The binary protocol: packets built with struct, exact headers; and
Debian's memccapable (libmemcached-tools) in ASCII and binary mode."""

import re
import shutil
import struct
import subprocess

import pytest

# run once more with the store that is not the default (conftest.py)
PACKED_TOO = True

HDR = struct.Struct(">BBHBBHIIQ")
REQ, RES = 0x80, 0x81
MIB = 1024 * 1024

# opcodes
GET, SET, ADD, REPLACE, DELETE, INCR, DECR, QUIT, FLUSH = range(9)
GETQ, NOOP, VERSION, GETK, GETKQ, APPEND, PREPEND, STAT = range(9, 17)
SETQ, ADDQ, REPLACEQ, DELETEQ, INCRQ, DECRQ, QUITQ, FLUSHQ = range(17, 25)
APPENDQ, PREPENDQ = 0x19, 0x1A
TOUCH, GAT, GATQ, GATK, GATKQ = 0x1C, 0x1D, 0x1E, 0x23, 0x24

# statuses
OK, ENOENT, EEXISTS, E2BIG, EINVAL, NOT_STORED, DELTA_BADVAL = range(7)
UNKNOWN_COMMAND = 0x81

NO_CREATE = 0xFFFFFFFF


def pkt(op, key=b"", value=b"", extras=b"", cas=0, opaque=0, magic=REQ,
        vbucket=0, datatype=0):
    key = key.encode() if isinstance(key, str) else key
    value = value.encode() if isinstance(value, str) else value
    return HDR.pack(magic, op, len(key), len(extras), datatype, vbucket,
                    len(extras) + len(key) + len(value), opaque,
                    cas) + extras + key + value


def store_extras(flags=0, exptime=0):
    return struct.pack(">II", flags, exptime)


def arith_extras(delta, initial=0, exptime=0):
    return struct.pack(">QQI", delta, initial, exptime)


class Resp:
    def __init__(self, hdr, body):
        (self.magic, self.opcode, self.keylen, self.extlen, self.datatype,
         self.status, self.bodylen, self.opaque, self.cas) = hdr
        self.extras = body[:self.extlen]
        self.key = body[self.extlen:self.extlen + self.keylen]
        self.value = body[self.extlen + self.keylen:]

    def __repr__(self):
        v = self.value if len(self.value) < 80 else \
            self.value[:80] + b"...(%d)" % len(self.value)
        return (f"<op={self.opcode:#04x} status={self.status:#06x} "
                f"opaque={self.opaque:#x} cas={self.cas} "
                f"extras={self.extras!r} key={self.key!r} value={v!r}>")


def read_resp(mc, timeout=None):
    """One response packet, or None if the server closed the connection
    or sent nothing (then the caller's assertion reports it)."""
    hdr = mc.recv_exact(24, timeout)
    if len(hdr) < 24:
        mc.buf = hdr + mc.buf
        return None
    h = HDR.unpack(hdr)
    body = mc.recv_exact(h[6], timeout)
    assert len(body) == h[6], f"short body: header {h}, body {body!r}"
    return Resp(h, body)


ANY = object()


def resp(mc, op, status=OK, opaque=None, key=b"", value=None, extras=None,
         cas=None, timeout=None):
    """Read one response and check it. cas=True: any non-zero CAS;
    key=ANY: any key."""
    r = read_resp(mc, timeout)
    sent = mc.last_sent
    sent = sent if len(sent) < 120 else sent[:120] + b"..."
    exp = (f"op={op:#04x} status={status:#06x} opaque={opaque} key={key!r} "
           f"value={value!r} extras={extras!r} cas={cas}")
    msg = f"\n  sent:     {sent!r}\n  expected: {exp}\n  got:      {r!r}" \
          + (f" + pending {mc.pending(0.1)!r}" if r is None else "")
    assert r is not None, msg
    assert r.magic == RES, msg
    assert r.opcode == op, msg
    assert r.status == status, msg
    if opaque is not None:
        assert r.opaque == opaque, msg
    if key is not ANY:
        assert r.key == (key.encode() if isinstance(key, str) else key), msg
    if value is not None:
        assert r.value == (value.encode() if isinstance(value, str)
                           else value), msg
    if extras is not None:
        assert r.extras == extras, msg
    if cas is True:
        assert r.cas != 0, msg
    elif cas is not None:
        assert r.cas == cas, msg
    return r


def call(mc, packet, op, **kw):
    mc.send(packet)
    return resp(mc, op, **kw)


def bset(mc, key, value, flags=0, exptime=0):
    return call(mc, pkt(SET, key, value, store_extras(flags, exptime)), SET,
                cas=True).cas


@pytest.fixture
def bc(connect):
    return connect()


# ---- get / set / add / replace ---------------------------------------------


def test_get_miss(bc, key):
    call(bc, pkt(GET, key, opaque=0xDEADBEEF), GET, status=ENOENT,
         opaque=0xDEADBEEF, cas=0)
    # memcached returns the key of a GETK miss
    call(bc, pkt(GETK, key, opaque=7), GETK, status=ENOENT, opaque=7,
         cas=0, key=key)


def test_set_get(bc, key):
    c = call(bc, pkt(SET, key, "hello", store_extras(7), opaque=1), SET,
             opaque=1, cas=True, value=b"", extras=b"").cas
    call(bc, pkt(GET, key, opaque=2), GET, opaque=2,
         extras=struct.pack(">I", 7), value="hello", cas=c)
    call(bc, pkt(GETK, key, opaque=3), GETK, opaque=3, key=key,
         extras=struct.pack(">I", 7), value="hello", cas=c)
    c2 = bset(bc, key, b"\x00\xff" * 1000, flags=0xFFFFFFFF)
    assert c2 != c
    call(bc, pkt(GET, key), GET, extras=b"\xff\xff\xff\xff",
         value=b"\x00\xff" * 1000, cas=c2)


def test_add_replace(bc, key):
    call(bc, pkt(REPLACE, key, "r", store_extras()), REPLACE, status=ENOENT)
    call(bc, pkt(ADD, key, "a", store_extras(1)), ADD, cas=True)
    call(bc, pkt(ADD, key, "b", store_extras(2)), ADD, status=EEXISTS)
    call(bc, pkt(GET, key), GET, value="a", extras=struct.pack(">I", 1))
    call(bc, pkt(REPLACE, key, "r", store_extras(3)), REPLACE, cas=True)
    call(bc, pkt(GET, key), GET, value="r", extras=struct.pack(">I", 3))


def test_set_cas(bc, key):
    call(bc, pkt(SET, key, "x", store_extras(), cas=12345), SET,
         status=ENOENT)
    c = bset(bc, key, "v0")
    call(bc, pkt(SET, key, "v1", store_extras(), cas=c + 1000), SET,
         status=EEXISTS)
    c2 = call(bc, pkt(SET, key, "v1", store_extras(), cas=c), SET,
              cas=True).cas
    assert c2 != c
    call(bc, pkt(SET, key, "v2", store_extras(), cas=c), SET, status=EEXISTS)
    call(bc, pkt(GET, key), GET, value="v1", cas=c2)
    # replace and delete honour the CAS too
    call(bc, pkt(REPLACE, key, "v3", store_extras(), cas=c), REPLACE,
         status=EEXISTS)
    call(bc, pkt(DELETE, key, cas=c), DELETE, status=EEXISTS)
    call(bc, pkt(DELETE, key, cas=c2), DELETE)
    call(bc, pkt(GET, key), GET, status=ENOENT)


def test_delete(bc, key):
    call(bc, pkt(DELETE, key, opaque=9), DELETE, status=ENOENT, opaque=9)
    bset(bc, key, "x")
    call(bc, pkt(DELETE, key, opaque=10), DELETE, opaque=10, value=b"")
    call(bc, pkt(GET, key), GET, status=ENOENT)


def test_append_prepend(bc, key):
    call(bc, pkt(APPEND, key, "x"), APPEND, status=NOT_STORED)
    call(bc, pkt(PREPEND, key, "x"), PREPEND, status=NOT_STORED)
    bset(bc, key, "mid", flags=9)
    c1 = call(bc, pkt(APPEND, key, "END"), APPEND, cas=True).cas
    c2 = call(bc, pkt(PREPEND, key, "BEG"), PREPEND, cas=True).cas
    assert c1 != c2
    call(bc, pkt(GETK, key), GETK, key=key, value="BEGmidEND",
         extras=struct.pack(">I", 9), cas=c2)
    bc.send(pkt(APPENDQ, key, "Q") + pkt(PREPENDQ, key, "Q") +
            pkt(APPENDQ, key + "-none", "Q") + pkt(NOOP))
    resp(bc, APPENDQ, status=NOT_STORED)
    resp(bc, NOOP)
    call(bc, pkt(GET, key), GET, value="QBEGmidENDQ")


# ---- incr / decr ------------------------------------------------------------


def test_incr_decr_create(bc, key):
    # a miss with an initial value creates the item
    call(bc, pkt(INCR, key, extras=arith_extras(1, 5)), INCR, cas=True,
         value=struct.pack(">Q", 5))
    call(bc, pkt(INCR, key, extras=arith_extras(10, 5)), INCR, cas=True,
         value=struct.pack(">Q", 15))
    call(bc, pkt(DECR, key, extras=arith_extras(3, 0)), DECR,
         value=struct.pack(">Q", 12))
    call(bc, pkt(GET, key), GET, value="12")
    # exptime 0xffffffff: do not create
    call(bc, pkt(DECR, key + "-n", extras=arith_extras(1, 5, NO_CREATE)),
         DECR, status=ENOENT)
    call(bc, pkt(INCR, key + "-n", extras=arith_extras(1, 5, NO_CREATE)),
         INCR, status=ENOENT)
    call(bc, pkt(GET, key + "-n"), GET, status=ENOENT)


def test_incr_wrap_decr_floor(bc, key):
    bset(bc, key, "18446744073709551615")
    call(bc, pkt(INCR, key, extras=arith_extras(2)), INCR,
         value=struct.pack(">Q", 1))
    call(bc, pkt(DECR, key, extras=arith_extras(5)), DECR,
         value=struct.pack(">Q", 0))


def test_incr_non_numeric(bc, key):
    bset(bc, key, "abc")
    call(bc, pkt(INCR, key, extras=arith_extras(1)), INCR,
         status=DELTA_BADVAL)
    call(bc, pkt(DECR, key, extras=arith_extras(1)), DECR,
         status=DELTA_BADVAL)
    call(bc, pkt(GET, key), GET, value="abc")


# ---- quiet variants ---------------------------------------------------------


def test_quiet_variants(bc, key):
    k = key
    bc.send(pkt(SETQ, k + "-1", "v1", store_extras(), opaque=2) +   # silent
            pkt(GETQ, k + "-1", opaque=3) +                           # hit
            pkt(GETQ, k + "-miss", opaque=4) +                        # silent
            pkt(GETKQ, k + "-1", opaque=5) +                          # hit
            pkt(GETKQ, k + "-miss", opaque=55) +                      # silent
            pkt(DELETEQ, k + "-miss", opaque=6) +                     # error
            pkt(ADDQ, k + "-2", "v", store_extras(), opaque=8) +      # silent
            pkt(ADDQ, k + "-2", "v", store_extras(), opaque=9) +      # error
            pkt(REPLACEQ, k + "-2", "w", store_extras(), opaque=10) +  # silent
            pkt(INCRQ, k + "-2", extras=arith_extras(1), opaque=11) +  # error
            pkt(INCRQ, k + "-3", extras=arith_extras(1, 41), opaque=12) +
            pkt(DECRQ, k + "-3", extras=arith_extras(1), opaque=13) +
            pkt(DELETEQ, k + "-1", opaque=7) +                        # silent
            pkt(NOOP, opaque=99))
    resp(bc, GETQ, opaque=3, value="v1", extras=struct.pack(">I", 0))
    resp(bc, GETKQ, opaque=5, key=k + "-1", value="v1")
    resp(bc, DELETEQ, status=ENOENT, opaque=6)
    resp(bc, ADDQ, status=EEXISTS, opaque=9)
    resp(bc, INCRQ, status=DELTA_BADVAL, opaque=11)
    resp(bc, NOOP, opaque=99)
    bc.expect_silence(0.2)
    call(bc, pkt(GET, k + "-1"), GET, status=ENOENT)
    call(bc, pkt(GET, k + "-2"), GET, value="w")
    call(bc, pkt(GET, k + "-3"), GET, value="40")


def test_noop(bc):
    call(bc, pkt(NOOP, opaque=0x12345678), NOOP, opaque=0x12345678, cas=0,
         value=b"", extras=b"")


# ---- flush / version / stat / touch ----------------------------------------


def test_flush(spawn, connect, key):
    bc = connect(spawn())
    bset(bc, key, "x")
    call(bc, pkt(FLUSH), FLUSH, value=b"")
    call(bc, pkt(GET, key), GET, status=ENOENT)
    bset(bc, key, "y")
    call(bc, pkt(FLUSH, extras=struct.pack(">I", 0)), FLUSH)
    call(bc, pkt(GET, key), GET, status=ENOENT)
    bset(bc, key, "z")
    bc.send(pkt(FLUSHQ) + pkt(NOOP, opaque=5))
    resp(bc, NOOP, opaque=5)
    call(bc, pkt(GET, key), GET, status=ENOENT)


def test_version(bc, connect):
    r = call(bc, pkt(VERSION, opaque=3), VERSION, opaque=3)
    assert re.fullmatch(rb"[\x21-\x7e]+", r.value), r
    tc = connect()
    tc.send(b"version\r\n")
    assert tc.readline() == b"VERSION " + r.value + b"\r\n"


def stat_packets(bc, group=b""):
    bc.send(pkt(STAT, group, opaque=77))
    out = {}
    for _ in range(10000):
        r = resp(bc, STAT, opaque=77, key=ANY)
        if not r.key:
            assert r.value == b"", r
            return out
        out[r.key.decode()] = r.value.decode()
    raise AssertionError("stat: no terminating packet")


def test_stat(bc, server):
    st = stat_packets(bc)
    for n in ("pid", "uptime", "curr_items", "cmd_get", "get_hits",
              "limit_maxbytes", "curr_connections"):
        assert n in st, f"binary stat lacks {n}"
    assert int(st["pid"]) == server.pid
    st = stat_packets(bc, b"settings")
    assert int(st["maxbytes"]) == 64 * MIB
    call(bc, pkt(STAT, b"nonsense"), STAT, status=ENOENT)
    call(bc, pkt(NOOP), NOOP)


def test_touch_gat(bc, connect, key):
    tc = connect()
    call(bc, pkt(TOUCH, key, extras=struct.pack(">I", 10)), TOUCH,
         status=ENOENT)
    call(bc, pkt(GAT, key, extras=struct.pack(">I", 10)), GAT,
         status=ENOENT)
    c = bset(bc, key, "gv", flags=3, exptime=100)
    tc.send(f"mg {key} t\r\n".encode())  # a second may pass since the set
    assert tc.readline() in (b"HD t100\r\n", b"HD t99\r\n")
    call(bc, pkt(TOUCH, key, extras=struct.pack(">I", 500)), TOUCH)
    tc.send(f"mg {key} t\r\n".encode())
    assert tc.readline() in (b"HD t500\r\n", b"HD t499\r\n")
    call(bc, pkt(GAT, key, extras=struct.pack(">I", 1000)), GAT,
         value="gv", extras=struct.pack(">I", 3), cas=c)
    call(bc, pkt(GATK, key, extras=struct.pack(">I", 2000)), GATK,
         key=key, value="gv", extras=struct.pack(">I", 3), cas=c)
    tc.send(f"mg {key} t\r\n".encode())
    assert tc.readline() in (b"HD t2000\r\n", b"HD t1999\r\n")
    bc.send(pkt(GATQ, key + "-miss", extras=struct.pack(">I", 10)) +
            pkt(GATKQ, key, extras=struct.pack(">I", 10), opaque=4) +
            pkt(NOOP, opaque=5))
    resp(bc, GATKQ, key=key, value="gv", opaque=4)
    resp(bc, NOOP, opaque=5)


# ---- quit / unknown / too large / invalid -----------------------------------


def test_quit(connect):
    bc = connect()
    call(bc, pkt(QUIT, opaque=5), QUIT, opaque=5)
    assert bc.closed_by_peer(30.0), "quit did not close"
    bc = connect()
    bc.send(pkt(QUITQ) + pkt(NOOP))
    assert bc.closed_by_peer(30.0), "quitq did not close"
    assert bc.buf == b"", f"reply to quitq: {bc.buf!r}"


def test_unknown_opcode(bc, connect, key):
    call(bc, pkt(0x50, opaque=3), 0x50, status=UNKNOWN_COMMAND, opaque=3)
    call(bc, pkt(0xFE, opaque=4), 0xFE, status=UNKNOWN_COMMAND, opaque=4)
    call(bc, pkt(NOOP), NOOP)
    bset(bc, key, "still")
    call(bc, pkt(GET, key), GET, value="still")
    connect().check_alive()


@pytest.mark.tiercache_only
def test_unknown_opcode_with_body(bc, key):
    """The body of an unknown command is skipped and the connection goes on
    (memcached 1.6 mishandles this: it waits for more bytes)."""
    bc.send(pkt(0x60, key, "value", extras=b"1234", opaque=5) +
            pkt(NOOP, opaque=6))
    resp(bc, 0x60, status=UNKNOWN_COMMAND, opaque=5)
    resp(bc, NOOP, opaque=6)


def test_too_large(bc, key):
    bset(bc, key, "small")
    call(bc, pkt(SET, key + "-b", b"x" * (MIB + 1), store_extras()), SET,
         status=E2BIG, timeout=60)
    call(bc, pkt(GET, key + "-b"), GET, status=ENOENT)
    call(bc, pkt(GET, key), GET, value="small")
    call(bc, pkt(SET, key + "-c", b"y" * (MIB - 512), store_extras()), SET,
         cas=True, timeout=60)
    call(bc, pkt(GET, key + "-c"), GET, value=b"y" * (MIB - 512), timeout=60)


def test_invalid_arguments(connect, key):
    """Malformed packets get EINVAL; memcached then closes the connection,
    which is allowed. The server goes on serving others."""
    for bad in (pkt(SET, key, "x"),                        # no extras
                pkt(GET, key, extras=b"abcd"),             # extras on get
                pkt(GET, "k" * 251),                       # key too long
                pkt(INCR, key, extras=b"\0" * 4),          # short extras
                pkt(SET, b"", "x", store_extras())):       # no key
        bc = connect()
        bc.send(bad + pkt(NOOP, opaque=1))
        r = read_resp(bc)
        assert r is not None and r.status == EINVAL, (bad[:40], r)
        r = read_resp(bc, 1.0)
        assert r is None or (r.opcode == NOOP and r.status == OK), r
    connect().check_alive()


def test_error_bodies(bc, key):
    """The error texts memcached puts in the value of an error response."""
    bset(bc, key, "abc")
    call(bc, pkt(GET, key + "-miss"), GET, status=ENOENT, value="Not found")
    call(bc, pkt(ADD, key, "x", store_extras()), ADD, status=EEXISTS,
         value="Data exists for key.")
    call(bc, pkt(APPEND, key + "-miss", "x"), APPEND, status=NOT_STORED,
         value="Not stored.")
    call(bc, pkt(INCR, key, extras=arith_extras(1)), INCR,
         status=DELTA_BADVAL,
         value="Non-numeric server-side value for incr or decr")
    call(bc, pkt(0x50), 0x50, status=UNKNOWN_COMMAND,
         value="Unknown command")
    call(bc, pkt(SET, key, b"x" * (MIB + 1), store_extras()), SET,
         status=E2BIG, value="Too large.", timeout=60)


def test_binary_then_text_connections(connect, key):
    """Text and binary clients see the same items."""
    bc, tc = connect(), connect()
    bset(bc, key, "from-binary", flags=5)
    tc.cmd(f"get {key}\r\n".encode(),
           f"VALUE {key} 5 11\r\nfrom-binary\r\nEND\r\n".encode())
    tc.set(key, "from-text", flags=6)
    call(bc, pkt(GET, key), GET, value="from-text",
         extras=struct.pack(">I", 6))


def test_pipeline(bc, key):
    req = b"".join(pkt(SET, f"{key}-{i}", str(i), store_extras(i), opaque=i)
                   for i in range(50))
    req += b"".join(pkt(GETK, f"{key}-{i}", opaque=100 + i) for i in range(50))
    bc.send(req)
    for i in range(50):
        resp(bc, SET, opaque=i, cas=True)
    for i in range(50):
        resp(bc, GETK, opaque=100 + i, key=f"{key}-{i}", value=str(i),
             extras=struct.pack(">I", i))


# ---- memccapable ----------------------------------------------------------

ASCII_TESTS = ["version", "quit", "verbosity", "set", "set noreply", "get",
               "gets", "mget", "flush", "flush noreply", "add",
               "add noreply", "replace", "replace noreply", "cas",
               "cas noreply", "delete", "delete noreply", "incr",
               "incr noreply", "decr", "decr noreply", "append",
               "append noreply", "prepend", "prepend noreply", "stat"]
BINARY_TESTS = ["noop", "quit", "quitq", "set", "setq", "flush", "flushq",
                "add", "addq", "replace", "replaceq", "delete", "deleteq",
                "get", "getq", "getk", "getkq", "incr", "incrq", "decr",
                "decrq", "version", "append", "appendq", "prepend",
                "prependq", "stat"]


@pytest.mark.parametrize("mode,prefix,names", [
    ("-a", "ascii", ASCII_TESTS), ("-b", "binary", BINARY_TESTS)])
def test_memccapable(spawn, mode, prefix, names):
    """Every test memccapable runs passes on memcached 1.6.18: the same set
    must pass here."""
    tool = shutil.which("memccapable")
    if not tool:
        pytest.skip("memccapable not installed (libmemcached-tools)")
    srv = spawn()  # memccapable flushes the server: a server of its own
    # -v prints the failed assertion; stdbuf keeps stdout (test names) and
    # stderr (failures) in order in one stream
    argv = [tool, "-h", srv.host, "-p", str(srv.port), "-t", "5", "-v", mode]
    if shutil.which("stdbuf"):
        argv = ["stdbuf", "-o0", "-e0"] + argv
    p = subprocess.run(argv, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=90)
    out = p.stdout
    # "<prefix> <name>   [pass]", possibly with assertion lines between
    # the name and its [result]
    results, current = {}, None
    for tok in re.split(r"(\[\w+\])|\n", out):
        if not tok:
            continue
        m = re.match(rf"\s*({prefix} [\w ]+?)\s*$", tok)
        if m:
            current = m.group(1)
        elif re.fullmatch(r"\[\w+\]", tok) and current:
            results[current] = tok[1:-1]
            current = None
    failed = [f"{prefix} {n}: {results.get(f'{prefix} {n}', 'not run')}"
              for n in names if results.get(f"{prefix} {n}") != "pass"]
    assert not failed and p.returncode == 0, (
        f"memccapable {mode}: exit {p.returncode}; not passed: {failed}\n"
        f"{out[-4000:]}")
    assert srv.alive()
