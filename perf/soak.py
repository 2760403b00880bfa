#!/usr/bin/python3
"""Soak driver: mixed load against a started tiercached, checked by a shadow
model. perf/soak.sh starts the server and calls this; run it alone as

    /usr/bin/python3 perf/soak.py --port PORT --server-pid PID --mem-mb 32

Load: --workers processes, each with --conns connections over one
selector loop, --depth requests in flight per connection (pipelined text
protocol). Every key belongs to one worker (key "soak:<worker>:<n>"), so a
worker's shadow model sees every write of its keys; several connections of
the worker write and read the same keys at once (the hot keys, the keys just
written), so requests of one key are in flight together. Ops: get, multiget,
set, add, replace, delete, touch; a few hot keys per worker get a large share
of the sets (they pass hot_write_rate and move to the DRAM hot pool); value
sizes move between size bands every --phase seconds (slab classes fill and
drain, so pages are reassigned), the large bands spill to the NVMe tier.

Beside the load, the controller (this process): samples the server's RSS
every second, `stats` every 10 s, sends `flush_all` every --flush-every
seconds, halves `cache_memlimit` and restores it every --memlimit-every
seconds, and tries `slabs reassign` / `slabs automove` (memcached's
commands; a server that answers ERROR is noted and not asked again).

Values describe themselves: "<key>|<version>|<crc32 of body>|<body>", flags =
version & 0xffff. The model keeps, per key, every write that may still be
read: its version, when it was sent (inv) and when its reply was read
(resp), and whether it stored. Timestamps are CLOCK_MONOTONIC, taken before
a request is written and after its reply is parsed, so they bracket the
server's own moments and every check below errs on the side of allowing.
A value read by a get R is right when
  - it parses, its key is the key asked for, its CRC and flags match;
  - its version was issued for that key and did not get NOT_STORED;
  - no write W of the key (set/add/replace that stored, delete) and no
    flush_all completed before R was sent while having been sent after the
    value's write completed (that is: the value was not superseded before R
    began). A value whose write is still in flight is allowed.
A miss is always allowed (a cache may drop anything). Anything else is a
wrong value: counted, the first ones printed with the key's history.

Exit status: 0 when every check passed (no wrong value, no protocol error,
RSS flat in runs of RSS_MIN_SECONDS or more, the workers finished), 1
otherwise, 2 on a usage error. The report goes to stdout and, as JSON, to
--json. Before the load, self_test() shows the model refusing each kind of
wrong value, so a pass comes from a checker that can fail; end to end,
--inject-stale 0.0005 writes superseded versions back behind the model
(what a server resurrecting old data would show) and the run fails.
"""

import argparse
import collections
import json
import multiprocessing as mp
import os
import random
import selectors
import socket
import sys
import time
import zlib

NS = 1_000_000_000
# value size bands (bytes); the phase picks one, 20% of sets take any band
BANDS = [(64, 400), (600, 3000), (3000, 12000), (12000, 40000)]
HOT_SIZE = (100, 300)
MAX_FLUSH = 4096
WRONG_DETAILS = 20
RSS_MIN_SECONDS = 120

# op mix of a worker (cumulative thresholds are built from this)
OP_MIX = [
    ("hot_set", 0.10),
    ("hot_get", 0.05),
    ("get", 0.38),
    ("mget", 0.10),
    ("set", 0.25),
    ("add", 0.02),
    ("replace", 0.02),
    ("delete", 0.04),
    ("touch", 0.04),
]


def now():
    return time.monotonic_ns()


# ---- the shadow model (one per worker) ---------------------------------------

ST_PENDING, ST_STORED, ST_NOT_STORED, ST_ERROR, ST_TOMB = range(5)


class KeyState:
    __slots__ = ("recs", "c_done", "max_ver", "reads")

    def __init__(self):
        # version -> [inv_ns, resp_ns or None, status]
        self.recs = {}
        # largest inv of a write of this key that completed and took effect
        self.c_done = 0
        self.max_ver = 0
        self.reads = 0  # gets of this key in flight


class Model:
    """Writes and reads of one worker's keys; see the module comment."""

    def __init__(self, flush_arr, flush_n):
        self.keys = collections.defaultdict(KeyState)
        self.next_ver = 1
        self.flush_arr = flush_arr
        self.flush_n = flush_n
        self.flushes = []  # (inv, resp) read from the controller
        self.wrong = []
        self.nwrong = 0
        self.allowed_inflight = 0
        self.allowed_older = 0

    def write_begin(self, k, tomb=False):
        st = self.keys[k]
        v = self.next_ver
        self.next_ver += 1
        st.recs[v] = [now(), None, ST_TOMB if tomb else ST_PENDING]
        st.max_ver = v
        return v

    def write_end(self, k, v, status):
        st = self.keys[k]
        rec = st.recs[v]
        rec[1] = now()
        if rec[2] != ST_TOMB:
            rec[2] = status
        # a write that may not have happened (NOT_STORED, SERVER_ERROR)
        # supersedes nothing
        if status in (ST_STORED, ST_TOMB) and rec[0] > st.c_done:
            st.c_done = rec[0]
        self._prune(st)

    def _prune(self, st):
        # a record whose reply came before c_done's write was sent can never
        # be read again by a get sent from now on; gets in flight may have
        # an older bound, so keep everything while one is
        if st.reads or len(st.recs) < 4:
            return
        dead = [v for v, r in st.recs.items()
                if r[1] is not None and r[1] < st.c_done]
        for v in dead:
            del st.recs[v]

    def read_begin(self, k):
        st = self.keys[k]
        st.reads += 1
        return st.c_done

    def read_end(self, k):
        st = self.keys[k]
        st.reads -= 1

    def _flush_bound(self, r_inv):
        n = self.flush_n.value
        while len(self.flushes) < n:
            i = len(self.flushes)
            self.flushes.append((self.flush_arr[2 * i],
                                 self.flush_arr[2 * i + 1]))
        b = 0
        for inv, resp in self.flushes:
            if resp < r_inv and inv > b:
                b = inv
        return b

    def check(self, k, key, v, r_inv, c_snap, r_resp):
        """A hit of version v of key k: None when allowed, else why not."""
        st = self.keys[k]
        rec = st.recs.get(v)
        if rec is None:
            if v > st.max_ver or v <= 0:
                return "version never written for this key"
            return "version superseded before the get was sent (pruned)"
        if rec[2] == ST_TOMB:
            return "version of a delete"
        if rec[2] == ST_NOT_STORED:
            return "value of a write answered NOT_STORED"
        if rec[0] > r_resp:
            return "value written after the get's reply"
        if rec[1] is None:
            self.allowed_inflight += 1
            return None
        bound = max(c_snap, self._flush_bound(r_inv))
        if rec[1] < bound:
            why = ("a flush_all" if bound != c_snap else "a later write")
            return "stale: superseded by %s before the get was sent" % why
        if v != st.max_ver:
            self.allowed_older += 1
        return None

    def report_wrong(self, k, key, why, detail):
        self.nwrong += 1
        if len(self.wrong) < WRONG_DETAILS:
            st = self.keys.get(k)
            hist = []
            if st is not None:
                for v in sorted(st.recs)[-8:]:
                    r = st.recs[v]
                    hist.append({"ver": v, "inv": r[0], "resp": r[1],
                                 "status": r[2]})
            self.wrong.append({"key": key, "why": why, "detail": detail,
                               "history": hist, "t": now()})


# ---- values ------------------------------------------------------------------

class Values:
    def __init__(self, seed):
        rnd = random.Random(seed)
        self.buf = bytes(rnd.getrandbits(8) for _ in range(1 << 16)) * 2
        self.n = 1 << 16

    def make(self, key, ver, size):
        head = b"%s|%d|" % (key, ver)
        blen = max(1, size - len(head) - 9)
        off = (ver * 7919) % self.n
        # body: a window of the random buffer, repeated to length
        body = self.buf[off:off + min(blen, self.n)]
        if blen > len(body):
            body = (body * (blen // len(body) + 1))[:blen]
        return head + b"%08x|" % zlib.crc32(body) + body

    @staticmethod
    def parse(data):
        """(key, version, ok) of a value, or None when it does not parse."""
        p1 = data.find(b"|")
        p2 = data.find(b"|", p1 + 1)
        p3 = data.find(b"|", p2 + 1)
        if p1 < 0 or p2 < 0 or p3 != p2 + 9:
            return None
        try:
            ver = int(data[p1 + 1:p2])
            crc = int(data[p2 + 1:p3], 16)
        except ValueError:
            return None
        return data[:p1], ver, zlib.crc32(data[p3 + 1:]) == crc


# ---- a worker ----------------------------------------------------------------

class Req:
    __slots__ = ("kind", "keys", "names", "ver", "inv", "c_snaps", "hot")

    def __init__(self, kind, keys, names, ver=0, hot=False):
        self.kind = kind
        self.keys = keys
        self.names = names
        self.ver = ver
        self.inv = now()
        self.c_snaps = None
        self.hot = hot


class Conn:
    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.wbuf = bytearray()
        self.rbuf = bytearray()
        self.rpos = 0
        self.pending = collections.deque()
        self.want_write = False


class ProtoError(Exception):
    pass


class Worker:
    def __init__(self, wid, a, flush_arr, flush_n, progress, wrong_ctr):
        self.wid = wid
        self.a = a
        self.rnd = random.Random(a.seed * 1000 + wid)
        self.model = Model(flush_arr, flush_n)
        self.values = Values(a.seed + wid)
        self.nkeys = a.keys // a.workers
        self.names = {}
        self.hot = list(range(self.nkeys, self.nkeys + a.hot_keys))
        self.recent = collections.deque(maxlen=256)
        self.counts = collections.Counter()
        self.progress = progress
        self.wrong_ctr = wrong_ctr
        self.t0 = 0
        self.sel = selectors.DefaultSelector()
        self.conns = []
        mix, acc = [], 0.0
        for name, p in OP_MIX:
            acc += p
            mix.append((acc, name))
        self.mix = mix

    def name(self, k):
        n = self.names.get(k)
        if n is None:
            n = b"soak:%d:%d" % (self.wid, k)
            self.names[k] = n
        return n

    def size(self):
        band = int((now() - self.t0) / (self.a.phase * NS)) % len(BANDS)
        if self.rnd.random() < 0.2:
            band = self.rnd.randrange(len(BANDS))
        lo, hi = BANDS[band]
        return self.rnd.randint(lo, hi)

    def pick(self):
        if self.recent and self.rnd.random() < 0.3:
            return self.rnd.choice(self.recent)
        return self.rnd.randrange(self.nkeys)

    def inject_stale(self, c):
        """--inject-stale: write back a superseded version of a key behind
        the model's back, as a server resurrecting old data would look; the
        checker must then report wrong values."""
        k = self.pick()
        st = self.model.keys.get(k)
        old = [v for v, r in st.recs.items() if r[2] == ST_STORED and
               r[1] is not None and r[1] < st.c_done] if st else []
        if not old:
            return False
        name = self.name(k)
        val = self.values.make(name, old[0], 200)
        c.wbuf += b"set %s %d 0 %d\r\n%s\r\n" % (name, old[0] & 0xFFFF,
                                                  len(val), val)
        c.pending.append(Req("inject", [k], [name]))
        return True

    def issue(self, c):
        if self.a.inject_stale and self.rnd.random() < self.a.inject_stale:
            if self.inject_stale(c):
                return
        r = self.rnd.random()
        op = next(name for acc, name in self.mix if r < acc or acc >= 0.999)
        if op in ("hot_set", "hot_get"):
            k = self.rnd.choice(self.hot)
            if op == "hot_set":
                self.store(c, "set", k, self.rnd.randint(*HOT_SIZE), True)
            else:
                self.get(c, [k], True)
        elif op == "get":
            self.get(c, [self.pick()])
        elif op == "mget":
            n = self.rnd.randint(2, 8)
            ks = []
            for _ in range(n):
                k = self.pick()
                if k not in ks:
                    ks.append(k)
            self.get(c, ks)
        elif op in ("set", "add", "replace"):
            self.store(c, op, self.pick(), self.size(), False)
        elif op == "delete":
            k = self.pick()
            v = self.model.write_begin(k, tomb=True)
            req = Req("delete", [k], [self.name(k)], v)
            c.wbuf += b"delete %s\r\n" % self.name(k)
            c.pending.append(req)
        else:
            k = self.pick()
            c.wbuf += b"touch %s 0\r\n" % self.name(k)
            c.pending.append(Req("touch", [k], [self.name(k)]))

    def store(self, c, op, k, size, hot):
        v = self.model.write_begin(k)
        name = self.name(k)
        val = self.values.make(name, v, size)
        c.wbuf += b"%s %s %d 0 %d\r\n" % (op.encode(), name, v & 0xFFFF,
                                          len(val))
        c.wbuf += val
        c.wbuf += b"\r\n"
        c.pending.append(Req(op, [k], [name], v, hot))
        if not hot:
            self.recent.append(k)

    def get(self, c, ks, hot=False):
        names = [self.name(k) for k in ks]
        req = Req("get", ks, names, 0, hot)
        req.c_snaps = [self.model.read_begin(k) for k in ks]
        c.wbuf += b"get " + b" ".join(names) + b"\r\n"
        c.pending.append(req)

    # -- replies --

    def line(self, c, start):
        e = c.rbuf.find(b"\r\n", start)
        if e < 0:
            return None, start
        return bytes(c.rbuf[start:e]), e + 2

    def parse_one(self, c):
        """Consume one complete reply of c.pending[0]; False if incomplete."""
        req = c.pending[0]
        if req.kind != "get":
            ln, end = self.line(c, c.rpos)
            if ln is None:
                return False
            c.rpos = end
            c.pending.popleft()
            self.done_simple(req, ln)
            return True
        # a get: VALUE blocks then END; parse only once all of it is here
        pos = c.rpos
        hits = []
        while True:
            ln, end = self.line(c, pos)
            if ln is None:
                return False
            if ln == b"END":
                break
            parts = ln.split()
            if len(parts) != 4 or parts[0] != b"VALUE":
                raise ProtoError("get %r: unexpected line %r"
                                 % (req.names[:3], ln[:80]))
            n = int(parts[3])
            if len(c.rbuf) < end + n + 2:
                return False
            if c.rbuf[end + n:end + n + 2] != b"\r\n":
                raise ProtoError("get: value not followed by CRLF")
            hits.append((parts[1], int(parts[2]),
                         bytes(c.rbuf[end:end + n])))
            pos = end + n + 2
        c.rpos = end
        c.pending.popleft()
        self.done_get(req, hits)
        return True

    def done_simple(self, req, ln):
        kind = req.kind
        if kind == "inject":
            self.counts["injected_stale_writes"] += 1
            return
        tag = "hot_" + kind if req.hot else kind
        word = ln.split(b" ")[0].decode("ascii", "replace").lower()
        if word in ("server_error", "client_error", "error"):
            # the whole line: which error matters
            word = ln.decode("ascii", "replace")[:60]
        self.counts["%s:%s" % (tag, word)] += 1
        if kind in ("set", "add", "replace"):
            if ln == b"STORED":
                st = ST_STORED
            elif ln == b"NOT_STORED":
                st = ST_NOT_STORED
            elif ln.startswith(b"SERVER_ERROR"):
                st = ST_ERROR
            else:
                raise ProtoError("%s: reply %r" % (kind, ln[:80]))
            if kind == "set" and st == ST_NOT_STORED:
                raise ProtoError("set answered NOT_STORED")
            self.model.write_end(req.keys[0], req.ver, st)
        elif kind == "delete":
            if ln not in (b"DELETED", b"NOT_FOUND"):
                raise ProtoError("delete: reply %r" % ln[:80])
            self.model.write_end(req.keys[0], req.ver, ST_TOMB)
        elif kind == "touch":
            if ln not in (b"TOUCHED", b"NOT_FOUND"):
                raise ProtoError("touch: reply %r" % ln[:80])

    def done_get(self, req, hits):
        r_resp = now()
        tag = "hot_get" if req.hot else "get"
        i = 0
        for name, flags, data in hits:
            while i < len(req.names) and req.names[i] != name:
                i += 1
            if i == len(req.names):
                raise ProtoError("get: VALUE %r not asked for (or out of "
                                 "order)" % name[:60])
            k = req.keys[i]
            self.verify(k, name, flags, data, req, req.c_snaps[i], r_resp)
            i += 1
        self.counts[tag + ":hit"] += len(hits)
        self.counts[tag + ":miss"] += len(req.keys) - len(hits)
        self.counts[tag + ":requests"] += 1
        for k in req.keys:
            self.model.read_end(k)

    def verify(self, k, name, flags, data, req, c_snap, r_resp):
        p = Values.parse(data)
        why = None
        ver = None
        if p is None:
            why = "value does not parse"
        else:
            vkey, ver, crc_ok = p
            if vkey != name:
                why = "value of key %r" % vkey[:60]
            elif not crc_ok:
                why = "checksum mismatch"
            elif flags != ver & 0xFFFF:
                why = "flags %d, version %d" % (flags, ver)
            else:
                why = self.model.check(k, name, ver, req.inv, c_snap, r_resp)
        if why is not None:
            self.model.report_wrong(
                k, name.decode("ascii", "replace"), why,
                {"ver": ver, "len": len(data), "flags": flags,
                 "get_inv": req.inv, "get_resp": r_resp, "c_snap": c_snap,
                 "head": data[:48].decode("ascii", "replace")})
            with self.wrong_ctr.get_lock():
                self.wrong_ctr.value += 1

    # -- the loop --

    def connect(self):
        for _ in range(self.a.conns):
            c = Conn(self.a.host, self.a.port)
            self.conns.append(c)
            self.sel.register(c.sock, selectors.EVENT_READ, c)

    def pump_out(self, c):
        if c.wbuf:
            try:
                n = c.sock.send(c.wbuf)
                del c.wbuf[:n]
            except BlockingIOError:
                pass
        want = bool(c.wbuf)
        if want != c.want_write:
            ev = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
            self.sel.modify(c.sock, ev, c)
            c.want_write = want

    def pump_in(self, c):
        try:
            data = c.sock.recv(1 << 18)
        except BlockingIOError:
            return
        if not data:
            raise ConnectionError("server closed a connection")
        c.rbuf += data
        while c.pending and self.parse_one(c):
            pass
        if c.rpos:
            del c.rbuf[:c.rpos]
            c.rpos = 0
        if not c.pending and c.rbuf:
            raise ProtoError("bytes with no request: %r" % bytes(c.rbuf[:80]))

    def run(self, deadline):
        self.t0 = now()
        ops = 0
        last_pub = 0
        while True:
            t = now()
            issuing = t < deadline
            if not issuing:
                if not any(c.pending for c in self.conns):
                    break
                if t > deadline + 30 * NS:
                    self.counts["drain_timeout"] += 1
                    break
            for c in self.conns:
                if issuing:
                    while len(c.pending) < self.a.depth:
                        self.issue(c)
                        ops += 1
                if c.wbuf:
                    self.pump_out(c)
            for key, mask in self.sel.select(timeout=0.05):
                c = key.data
                if mask & selectors.EVENT_READ:
                    self.pump_in(c)
                if mask & selectors.EVENT_WRITE:
                    self.pump_out(c)
            if t - last_pub > NS // 2:
                self.progress.value = ops
                last_pub = t
        self.progress.value = ops
        return ops


def worker_main(wid, a, flush_arr, flush_n, progress, wrong_ctr, result_q,
                start_at, deadline):
    os.nice(0)
    w = Worker(wid, a, flush_arr, flush_n, progress, wrong_ctr)
    err = None
    t_start = t_end = now()
    ops = 0
    try:
        w.connect()
        while now() < start_at:
            time.sleep(0.01)
        t_start = now()
        ops = w.run(deadline)
        t_end = now()
    except (ProtoError, OSError, ValueError) as e:
        err = "%s: %s" % (type(e).__name__, e)
        t_end = now()
    m = w.model
    result_q.put({
        "wid": wid, "error": err, "ops": ops,
        "secs": (t_end - t_start) / NS,
        "counts": dict(w.counts), "wrong": m.nwrong,
        "wrong_details": m.wrong,
        "allowed_inflight": m.allowed_inflight,
        "allowed_older": m.allowed_older,
        "model_keys": len(m.keys),
    })


# ---- the controller ----------------------------------------------------------

class Admin:
    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=60)
        self.buf = b""

    def cmd(self, line, multi=False):
        self.sock.sendall(line.encode() + b"\r\n")
        out = []
        while True:
            while b"\r\n" not in self.buf:
                d = self.sock.recv(65536)
                if not d:
                    raise ConnectionError("admin connection closed")
                self.buf += d
            ln, self.buf = self.buf.split(b"\r\n", 1)
            ln = ln.decode("ascii", "replace")
            if not multi:
                return ln
            if ln in ("END", "ERROR") or ln.startswith(
                    ("CLIENT_ERROR", "SERVER_ERROR")):
                return out if ln == "END" else out + [ln]
            out.append(ln)

    def stats(self, group=""):
        res = {}
        for ln in self.cmd(("stats " + group).strip(), multi=True):
            p = ln.split(" ", 2)
            if len(p) == 3 and p[0] == "STAT":
                res[p[1]] = p[2]
        return res


def rss(pid):
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for ln in f:
                if ln.startswith(("VmRSS", "RssAnon", "RssFile", "RssShmem")):
                    name, val = ln.split(":")
                    out[name] = int(val.split()[0])
    except OSError:
        return None
    return out


STAT_KEYS = ["curr_items", "evictions", "tc_ext_spilled", "tc_ext_items",
             "slabs_moved", "hotkey_promotions", "hotkey_demotions",
             "hotkey_current", "get_hits", "get_misses", "get_extstore",
             "cmd_flush", "limit_maxbytes", "store_no_memory",
             "tc_ext_spill_busy", "tc_pmem_pages_free"]


class Controller:
    def __init__(self, a, flush_arr, flush_n):
        self.a = a
        self.adm = Admin(a.host, a.port)
        self.flush_arr = flush_arr
        self.flush_n = flush_n
        self.counts = collections.Counter()
        self.rss = []  # (seconds, VmRSS kB, RssAnon, RssShmem)
        self.stats = []  # (seconds, {name: value})
        self.events = []
        self.reassign_ok = True
        self.rnd = random.Random(a.seed)

    def note(self, t, what):
        self.events.append((round(t, 1), what))

    def flush(self, t):
        inv = now()
        rep = self.adm.cmd("flush_all")
        resp = now()
        self.counts["flush_all:" + rep.lower()] += 1
        i = self.flush_n.value
        if i < MAX_FLUSH:
            self.flush_arr[2 * i] = inv
            self.flush_arr[2 * i + 1] = resp
            self.flush_n.value = i + 1
        self.note(t, "flush_all -> " + rep)

    def memlimit(self, t, mib):
        rep = self.adm.cmd("cache_memlimit %d" % mib)
        self.counts["cache_memlimit:" + rep.lower()] += 1
        self.note(t, "cache_memlimit %d -> %s" % (mib, rep))

    def reassign(self, t):
        if not self.reassign_ok:
            return
        rep = self.adm.cmd("slabs automove 1")
        self.counts["slabs_automove:" + rep.split(" ")[0].lower()] += 1
        slabs = self.adm.stats("slabs")
        pages = collections.Counter()
        for name, val in slabs.items():
            cls, _, field = name.partition(":")
            if field == "total_pages" and cls.isdigit():
                pages[int(cls)] = int(val)
        if len(pages) >= 2:
            src = pages.most_common(1)[0][0]
            dst = self.rnd.choice([c for c in pages if c != src])
        else:
            src, dst = 1, 2
        rep = self.adm.cmd("slabs reassign %d %d" % (src, dst))
        self.counts["slabs_reassign:" + rep.split(" ")[0].lower()] += 1
        if rep == "ERROR":
            self.reassign_ok = False
            self.note(t, "slabs reassign %d %d -> ERROR (no such command: "
                      "not asked again; pages move by automove only)"
                      % (src, dst))

    def sample_stats(self, t):
        s = self.adm.stats()
        self.stats.append((round(t, 1), {k: s.get(k) for k in STAT_KEYS}))
        return s

    def run(self, t0, deadline, procs, progress, wrong_ctr):
        a = self.a
        next_rss = next_stats = next_print = t0
        next_flush = t0 + a.flush_every * NS
        next_mem = t0 + a.memlimit_every * NS
        mem_low = False
        next_reassign = t0 + 5 * NS
        last_ops, last_t = 0, t0
        while now() < deadline and all(p.is_alive() for p in procs):
            t = now()
            el = (t - t0) / NS
            if t >= next_rss:
                r = rss(a.server_pid)
                if r is None:
                    self.note(el, "server process gone")
                    break
                self.rss.append((round(el, 1), r.get("VmRSS", 0),
                                 r.get("RssAnon", 0), r.get("RssShmem", 0)))
                next_rss += NS
            if t >= next_stats:
                s = self.sample_stats(el)
                next_stats += 10 * NS
            if t >= next_flush:
                self.flush(el)
                next_flush += int(a.flush_every * (0.7 + 0.6 *
                                  self.rnd.random()) * NS)
            if t >= next_mem:
                if mem_low:
                    self.memlimit(el, a.mem_mb)
                    next_mem += int(a.memlimit_every * 0.6 * NS)
                else:
                    self.memlimit(el, max(8, a.mem_mb // 2))
                    next_mem += int(a.memlimit_every * 0.4 * NS)
                mem_low = not mem_low
            if t >= next_reassign:
                self.reassign(el)
                next_reassign += 15 * NS
            if t >= next_print:
                ops = sum(p.value for p in progress)
                rate = (ops - last_ops) / max(1e-9, (t - last_t) / NS)
                last_ops, last_t = ops, t
                s = self.stats[-1][1] if self.stats else {}
                print("soak: %5.0fs ops=%d (%.0f/s) rss=%d KiB items=%s "
                      "evictions=%s spilled=%s moved=%s promotions=%s "
                      "wrong=%d" % (el, ops, rate, self.rss[-1][1],
                                    s.get("curr_items"), s.get("evictions"),
                                    s.get("tc_ext_spilled"),
                                    s.get("slabs_moved"),
                                    s.get("hotkey_promotions"),
                                    wrong_ctr.value), flush=True)
                next_print += 30 * NS
            time.sleep(0.05)
        if mem_low:  # leave the server at its configured size
            self.memlimit((now() - t0) / NS, a.mem_mb)


# ---- the checker's own test -------------------------------------------------

def self_test():
    """The model must refuse what it exists to catch: run before each soak,
    so a soak that reports 0 wrong values has a checker that can fail."""
    flush_arr = mp.Array("q", 2 * MAX_FLUSH, lock=False)
    flush_n = mp.Value("i", 0, lock=False)
    m = Model(flush_arr, flush_n)
    vals = Values(7)
    v1 = m.write_begin(1)
    c = m.read_begin(1)
    r_inv = now()
    assert m.check(1, b"k", v1, r_inv, c, now()) is None, "in flight"
    m.read_end(1)
    m.write_end(1, v1, ST_STORED)
    v2 = m.write_begin(1)
    m.write_end(1, v2, ST_STORED)
    c = m.read_begin(1)
    r_inv = now()
    assert m.check(1, b"k", v2, r_inv, c, now()) is None, "latest"
    assert m.check(1, b"k", v1, r_inv, c, now()), "stale after a write"
    assert m.check(1, b"k", v2 + 5, r_inv, c, now()), "phantom"
    m.read_end(1)
    v3 = m.write_begin(1)
    m.write_end(1, v3, ST_NOT_STORED)
    c = m.read_begin(1)
    r_inv = now()
    assert m.check(1, b"k", v3, r_inv, c, now()), "NOT_STORED value"
    assert m.check(1, b"k", v2, r_inv, c, now()) is None, "after NOT_STORED"
    m.read_end(1)
    d = m.write_begin(1, tomb=True)
    m.write_end(1, d, ST_TOMB)
    c = m.read_begin(1)
    r_inv = now()
    assert m.check(1, b"k", v2, r_inv, c, now()), "stale after a delete"
    m.read_end(1)
    v4 = m.write_begin(2)
    m.write_end(2, v4, ST_STORED)
    flush_arr[0], flush_arr[1] = now(), now()
    flush_n.value = 1
    c = m.read_begin(2)
    r_inv = now()
    assert m.check(2, b"k2", v4, r_inv, c, now()), "stale after flush_all"
    m.read_end(2)
    for _ in range(10):  # pruning keeps refusing superseded versions
        v = m.write_begin(3)
        m.write_end(3, v, ST_STORED)
    c = m.read_begin(3)
    assert m.check(3, b"k3", v - 5, now(), c, now()), "pruned version"
    assert m.check(3, b"k3", v, now(), c, now()) is None, "latest kept"
    m.read_end(3)
    val = vals.make(b"soak:0:1", 42, 1000)
    assert len(val) == 1000 and Values.parse(val) == (b"soak:0:1", 42, True)
    bad = bytearray(val)
    bad[500] ^= 1
    assert Values.parse(bytes(bad))[2] is False, "checksum"


# ---- main --------------------------------------------------------------------

def quarter_max(rss, secs, q):
    lo, hi = secs * q / 4, secs * (q + 1) / 4
    vals = [r[1] for r in rss if lo <= r[0] < hi]
    return max(vals) if vals else 0


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="soak driver with a shadow model (see the docstring)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--server-pid", type=int, required=True)
    p.add_argument("--mem-mb", type=int, required=True,
                   help="the server's -m (cache_memlimit goes to half and "
                   "back)")
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--conns", type=int, default=4,
                   help="connections per worker")
    p.add_argument("--depth", type=int, default=8,
                   help="requests in flight per connection")
    p.add_argument("--keys", type=int, default=90000)
    p.add_argument("--hot-keys", type=int, default=2,
                   help="hot keys per worker")
    p.add_argument("--phase", type=float, default=0,
                   help="seconds per value-size band [seconds / 10]")
    p.add_argument("--flush-every", type=float, default=0,
                   help="seconds between flush_all [seconds / 6]")
    p.add_argument("--memlimit-every", type=float, default=0,
                   help="seconds of a cache_memlimit down/up cycle "
                   "[seconds / 8]")
    p.add_argument("--rss-tolerance", type=float, default=10.0,
                   help="percent the last quarter's RSS max may exceed "
                   "the second quarter's")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--inject-stale", type=float, default=0,
                   help="share of ops that write an old version back "
                   "behind the model (tests the checker: the run must "
                   "fail)")
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    a.phase = a.phase or max(1.0, a.seconds / 10)
    a.flush_every = a.flush_every or max(2.0, a.seconds / 6)
    a.memlimit_every = a.memlimit_every or max(4.0, a.seconds / 8)
    return a


def main(argv):
    a = parse_args(argv)
    self_test()
    flush_arr = mp.Array("q", 2 * MAX_FLUSH, lock=False)
    flush_n = mp.Value("i", 0, lock=False)
    wrong_ctr = mp.Value("q", 0)
    progress = [mp.Value("q", 0, lock=False) for _ in range(a.workers)]
    result_q = mp.Queue()
    ctl = Controller(a, flush_arr, flush_n)
    start_at = now() + 2 * NS
    deadline = start_at + int(a.seconds * NS)
    procs = [mp.Process(target=worker_main,
                        args=(i, a, flush_arr, flush_n, progress[i],
                              wrong_ctr, result_q, start_at, deadline))
             for i in range(a.workers)]
    for p in procs:
        p.start()
    while now() < start_at:
        time.sleep(0.01)
    print("soak: %d workers x %d conns x depth %d, %d keys (+%d hot), "
          "%.0f s; value bands %s every %.0f s; flush_all every ~%.0f s; "
          "cache_memlimit %d <-> %d MiB every %.0f s; seed %d"
          % (a.workers, a.conns, a.depth, a.keys, a.hot_keys * a.workers,
             a.seconds, BANDS, a.phase, a.flush_every, a.mem_mb,
             max(8, a.mem_mb // 2), a.memlimit_every, a.seed), flush=True)
    ctl_err = None
    try:
        ctl.run(start_at, deadline, procs, progress, wrong_ctr)
    except OSError as e:
        ctl_err = "controller: %s" % e
    results = []
    for _ in procs:
        try:
            results.append(result_q.get(timeout=90))
        except Exception:  # queue.Empty: a worker died without a result
            break
    for p in procs:
        p.join(timeout=10)
    final = {}
    tiers = {}
    try:
        final = ctl.adm.stats()
        tiers = ctl.adm.stats("tiers")
    except OSError as e:
        ctl_err = ctl_err or "final stats: %s" % e
    return report(a, ctl, results, final, tiers, ctl_err)


def report(a, ctl, results, final, tiers, ctl_err):
    counts = collections.Counter()
    wrong = 0
    details = []
    errors = []
    ops = 0
    secs = 0.0
    inflight = older = 0
    for r in sorted(results, key=lambda r: r["wid"]):
        counts.update(r["counts"])
        wrong += r["wrong"]
        details += r["wrong_details"]
        ops += r["ops"]
        secs = max(secs, r["secs"])
        inflight += r["allowed_inflight"]
        older += r["allowed_older"]
        if r["error"]:
            errors.append("worker %d: %s" % (r["wid"], r["error"]))
    if len(results) < a.workers:
        errors.append("%d worker(s) gave no result" %
                      (a.workers - len(results)))
    if ctl_err:
        errors.append(ctl_err)
    counts.update(ctl.counts)
    q2 = quarter_max(ctl.rss, a.seconds, 1)
    q4 = quarter_max(ctl.rss, a.seconds, 3)
    rss_growth = (q4 / q2 - 1) * 100 if q2 else float("inf")
    # a short run is still warming up in its second quarter: not judged
    rss_judged = a.seconds >= RSS_MIN_SECONDS
    rss_ok = not rss_judged or (q2 > 0 and rss_growth <= a.rss_tolerance)
    ok = wrong == 0 and not errors and rss_ok

    print()
    print("== soak report ==")
    print("duration %.1f s, ops issued %d, %.0f ops/s (all workers)"
          % (secs, ops, ops / secs if secs else 0))
    print("wrong values: %d" % wrong)
    for d in details[:WRONG_DETAILS]:
        print("  WRONG %s: %s %s" % (d["key"], d["why"],
                                     json.dumps(d["detail"])))
        for h in d["history"]:
            print("      ver %(ver)d inv %(inv)d resp %(resp)s status "
                  "%(status)d" % h)
    print("reads allowed while their write was in flight: %d; older "
          "than the newest write but not superseded: %d" % (inflight, older))
    print("op outcomes:")
    for k in sorted(counts):
        print("  %-32s %d" % (k, counts[k]))
    print("RSS (VmRSS KiB): q1 max %d, q2 max %d, q3 max %d, q4 max %d; "
          "last-quarter max vs second-quarter max %+.1f%% (tolerance %.0f%%)"
          " -> %s" % (quarter_max(ctl.rss, a.seconds, 0), q2,
                      quarter_max(ctl.rss, a.seconds, 2), q4, rss_growth,
                      a.rss_tolerance,
                      ("flat" if rss_ok else "GROWING") if rss_judged else
                      "not judged (runs under %d s)" % RSS_MIN_SECONDS))
    if ctl.rss:
        last = ctl.rss[-1]
        print("RSS at the end: VmRSS %d KiB = RssAnon %d + RssShmem %d (+ "
              "file)" % (last[1], last[2], last[3]))
    print("server stats at the end:")
    for k in STAT_KEYS + ["total_items", "cmd_get", "cmd_set",
                          "extstore_objects_written",
                          "extstore_objects_read", "extstore_page_reclaims",
                          "miss_from_extstore", "badcrc_from_extstore",
                          "tc_ext_read_timeouts", "recache_from_extstore",
                          "hot_pool_bytes", "tc_protocol_errors"]:
        if k in final:
            print("  %-28s %s" % (k, final[k]))
    if tiers:
        print("  tiers: " + " ".join("%s=%s" % kv for kv in tiers.items()))
    print("controller events:")
    for t, e in ctl.events:
        print("  %7.1fs %s" % (t, e))
    for e in errors:
        print("ERROR: " + e)
    print("soak: %s" % ("PASS" if ok else "FAIL"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ok": ok, "wrong": wrong, "wrong_details": details,
                       "errors": errors, "ops": ops, "secs": secs,
                       "counts": counts, "rss": ctl.rss,
                       "rss_q2_max": q2, "rss_q4_max": q4,
                       "stats_series": ctl.stats, "final_stats": final,
                       "tiers": tiers, "events": ctl.events,
                       "args": vars(a)}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
