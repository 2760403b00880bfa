"""Random command sequences for the differential test (test_diff.py).

A sequence is a list of Cmd: the bytes of one request (text or meta, good or
bad), possibly holding CasRef placeholders that the driver fills in per
server from the CAS values that server returned earlier in the sequence
(so "cas with the current CAS" means the same thing on both servers).

Every request is self-delimiting: the bytes a server consumes for it do not
depend on the server (a refused storage line's data block then reads as
commands on both). Values, keys and opaque tokens never contain "MN" nor a
line that could be a command of their own ("mn"), so the driver can end
each request with "mn\r\n" and cut the reply stream at "MN\r\n".

Everything is drawn from one random.Random, seeded per sequence, so a
sequence is reproduced by its seed and index alone.
"""

import base64
import random

# Keys of one sequence: a prefix unique to the sequence plus one of these.
KEY_NAMES = ["a", "b", "c", "n"]
VALUE_ALPHABET = "abcdefghijkl0123456789"  # no 'm', no space, no CR/LF
NUMERIC_VALUES = ["0", "1", "9", "10", "99", "255", "256", "65535",
                  "4294967295", "4294967296", "18446744073709551614",
                  "18446744073709551615", "18446744073709551616",
                  "00012", "12abc", "-1", ""]
DELTAS = ["0", "1", "2", "7", "100", "4294967296", "18446744073709551615",
          "18446744073709551616", "-1", "abc", ""]
FLAGS = ["0", "0", "0", "1", "7", "65535", "4294967295", "-1", "abc"]
# numbers memcached reads and tiercached refuses (an intended difference
# that ends the sequence: kept rare)
LENIENT = ["+1", "+5", "4294967296"]
# Exptimes that cannot depend on when they are read: none, already
# expired (negative; an absolute time in the past), or far away (relative
# hours, the 30-day edge, an absolute time years ahead: "ABS").
EXPTIMES = ["0", "0", "0", "-1", "-1000", "1000", "86400", "2592000",
            "2592001", "1000000000", "ABS", "abc"]
# R (recache) far from every remaining TTL above
RECACHE = ["30", "5000", "100000", "ABS"]


class CasRef:
    """A CAS value filled in by the driver, per server.

    kind: "cur"  the last CAS the server returned for the key
          "prev" the one before it
          "hi"   larger than any CAS the server issued (2**40 + n)
          "lo"   1 (smaller than any, after the driver's warm-up)
          "zero" 0
    An unknown "cur"/"prev" falls back to "hi".
    """

    def __init__(self, key, kind):
        self.key, self.kind = key, kind

    def __repr__(self):
        return f"<cas {self.kind} {self.key.decode()}>"


class Cmd:
    """One request. parts: bytes and CasRef. kind: how the reply is
    normalised ("stats", "version", or the command name). key: the key a
    meta reply's c/t tokens belong to. mn: how many MN lines the request
    itself produces."""

    def __init__(self, parts, kind, key=None, mn=0):
        self.parts, self.kind, self.key, self.mn = parts, kind, key, mn

    def render(self, cas_of):
        return b"".join(p if isinstance(p, bytes) else cas_of(p)
                        for p in self.parts)

    def show(self):
        return b"".join(p if isinstance(p, bytes) else repr(p).encode()
                        for p in self.parts)


class Gen:
    """Generator of one sequence. now: unix time for absolute exptimes."""

    def __init__(self, rng, prefix, now):
        self.r = rng
        self.prefix = prefix
        self.now = int(now)

    # ---- pieces ---------------------------------------------------------

    def pick(self, seq):
        return self.r.choice(seq)

    def number(self, seq):
        """One of seq, or now and then a lenient number (LENIENT)."""
        return self.pick(LENIENT if self.r.random() < 0.01 else seq)

    def name(self):
        return self.pick(KEY_NAMES[:3] * 3 + KEY_NAMES)

    def key(self, name=None):
        return (self.prefix + (name or self.name())).encode()

    def value(self):
        r = self.r.random()
        if r < 0.35:
            return self.pick(NUMERIC_VALUES).encode()
        if r < 0.45:
            n = self.pick([100, 1000, 5000, 20000])
        else:
            n = self.r.randint(0, 12)
        return "".join(self.r.choice(VALUE_ALPHABET)
                       for _ in range(n)).encode()

    def exptime(self):
        e = self.number(EXPTIMES)
        if e == "ABS":
            e = str(self.now + 10 * 365 * 86400)
        return e

    def ttl_token(self):
        """A meta TTL token: never a bad number (that is bad_meta's)."""
        e = self.pick(["0", "-1", "1000", "86400", "2592000", "ABS"])
        return str(self.now + 10 * 365 * 86400) if e == "ABS" else e

    def opaque(self):
        n = self.pick([1, 2, 4, 8, 30, 31]) if self.r.random() < 0.99 \
            else 40
        return "O" + "".join(self.r.choice("abcdefxyz0123456789")
                             for _ in range(n))

    def cas_ref(self, key):
        kind = self.r.choices(["cur", "prev", "hi", "lo", "zero"],
                              [10, 2, 2, 1, 1])[0]
        return CasRef(key, kind)

    def noreply(self, p=0.12):
        return b" noreply" if self.r.random() < p else b""

    # ---- text commands --------------------------------------------------

    def storage(self):
        cmd = self.pick(["set", "set", "set", "add", "replace", "append",
                         "prepend", "cas", "cas"])
        key = self.key()
        val = self.value()
        flags = self.number(FLAGS) if self.r.random() < 0.3 else "0"
        if self.r.random() < 0.7:
            flags = self.pick(["0", "0", "1", "3", "4294967295"])
        exp = self.exptime() if self.r.random() < 0.4 else "0"
        if not (flags.isdigit() and exp.lstrip("-").isdigit()):
            val = val[:12]  # refused line: the block is read as a command
        nbytes = str(len(val)).encode()
        bad_chunk = False
        if self.r.random() < 0.03:          # wrong length: bad data chunk
            bad_chunk = True
            nbytes = str(max(0, len(val) - 1)).encode()
        elif self.r.random() < 0.02:
            nbytes = self.pick([b"-1", b"abc", b"+1"])
            val = val[:12]
        parts = [b"%s %s %s %s %s" % (cmd.encode(), key, flags.encode(),
                                      exp.encode(), nbytes)]
        if cmd == "cas":
            parts += [b" ", self.cas_ref(key)]
        parts += [self.noreply(), b"\r\n", val, b"\r\n"]
        if bad_chunk and len(val) == 0:
            parts[-1] = b"x\r\n"
        return Cmd(parts, cmd, key)

    def retrieval(self):
        cmd = self.pick(["get", "get", "gets", "gets", "gat", "gats"])
        keys = [self.key() for _ in range(self.pick([1, 1, 1, 2, 3]))]
        head = cmd.encode()
        if cmd.startswith("gat"):
            head += b" " + self.exptime().encode()
        return Cmd([head + b" " + b" ".join(keys) + b"\r\n"], cmd)

    def arith(self):
        cmd = self.pick(["incr", "decr"])
        d = self.number(DELTAS[:6] * 3 + DELTAS)
        return Cmd([b"%s %s %s%s\r\n" % (cmd.encode(), self.key(), d.encode(),
                                         self.noreply())], cmd)

    def delete(self):
        tail = self.pick([b"", b"", b"", b" 0", b" 1", b" 0 noreply"])
        return Cmd([b"delete %s%s%s\r\n" % (self.key(), tail,
                                            self.noreply())], "delete")

    def touch(self):
        return Cmd([b"touch %s %s%s\r\n" % (self.key(),
                                            self.exptime().encode(),
                                            self.noreply())], "touch")

    def flush(self):
        arg = self.pick([b"", b"", b" 0", b" -1", b" noreply", b" 0 noreply"])
        return Cmd([b"flush_all" + arg + b"\r\n"], "flush_all")

    def misc(self):
        c = self.pick(["version", "verbosity", "stats", "mn", "me", "bad",
                       "bad", "bad", "bad"])
        if c == "version":
            return Cmd([b"version\r\n"], "version")
        if c == "verbosity":
            return Cmd([b"verbosity %s%s\r\n" % (
                self.pick([b"0", b"1", b"abc", b""]), self.noreply())],
                "verbosity")
        if c == "stats":
            return Cmd([b"stats%s\r\n" % self.pick([b"", b" settings",
                                                    b" items", b" slabs"])],
                       "stats")
        if c == "mn":
            return Cmd([b"mn\r\n"], "mn", mn=1)
        if c == "me":
            return Cmd([b"me %s\r\n" % self.key()], "me")
        return self.bad()

    def bad(self):
        key = self.key()
        long_key = (self.prefix + "L" * 300)[:251].encode()
        ok_key = long_key[:250]
        choices = [
            b"\r\n",
            b"bogus %s\r\n" % key,
            b"GET %s\r\n" % key,
            b"get\r\n",
            b"get %s\r\n" % long_key,
            b"get %s\r\n" % ok_key,
            b"set %s 0 0 1 2 3 4\r\nx\r\n" % key,
            b"set %s 0 0\r\n" % key,
            b"set %s 0 0 2\r\nhi\r\n" % long_key,
            b"set %s 0 0 2\r\nhi\r\n" % ok_key,
            b"incr %s\r\n" % key,
            b"incr %s 1 2 3\r\n" % key,
            b"touch %s\r\n" % key,
            b"delete\r\n",
            b"cas %s 0 0 1\r\nx\r\n" % key,
            b"cas %s 0 0 1 abc\r\nx\r\n" % key,
            b"flush_all abc\r\n",
            b"verbosity\r\n",
            b"mg\r\n",
            b"ms %s\r\n" % key,
            b"ms %s abc\r\n" % key,
            b"ms %s 2 MX\r\nhi\r\n" % key,
            b"ms %s 2 Fabc\r\nhi\r\n" % key,
            b"ms %s 2 Tabc\r\nhi\r\n" % key,
            b"ms %s 3\r\nabcd\r\n" % key,
            b"mg %s !\r\n" % key,
            b"mg %s v v\r\n" % key,
            b"mg %s Tabc v\r\n" % key,
            b"mg %s Nx v\r\n" % key,
            b"mg %s Rx v\r\n" % key,
            b"mg %s Cabc v\r\n" % key,
            b"mg %s %s\r\n" % (key, b" ".join([b"v"] * 25)),
            b"md %s Cx\r\n" % key,
            b"ma %s Dabc\r\n" % key,
            b"ma %s D-1\r\n" % key,
            b"ma %s N0 Jabc\r\n" % key,
            b"ma %s Mx\r\n" % key,
            b"mg bad!!b64 b v\r\n",
            b"md %s b\r\n" % key,
        ]
        return Cmd([self.pick(choices)], "bad", key)

    # ---- meta commands --------------------------------------------------

    def meta_key(self):
        """(key as sent, real key, base64 flag token list)."""
        key = self.key()
        if self.r.random() < 0.08:
            return base64.b64encode(key), key, ["b"]
        return key, key, []

    def meta_flags(self, pool, key):
        """A random subset of pool, each entry a str or a callable."""
        out = []
        for f in pool:
            if self.r.random() < 0.3:
                out.append(f() if callable(f) else f)
        self.r.shuffle(out)
        return out

    def flag_parts(self, flags):
        parts = []
        for f in flags:
            parts.append(b" ")
            if isinstance(f, tuple):   # ("C", CasRef)
                parts += [f[0].encode(), f[1]]
            else:
                parts.append(f.encode())
        return parts

    def mg(self):
        sent, key, b = self.meta_key()
        pool = ["v", "v", "k", "c", "f", "s", "t", "h", "q", "u", "l",
                self.opaque,
                lambda: "N" + self.ttl_token(),
                lambda: "R" + self.pick(RECACHE).replace(
                    "ABS", str(self.now + 10 * 365 * 86400)),
                lambda: "T" + self.ttl_token()]
        flags = self.meta_flags(pool, key)
        flags = _dedup(flags + b)
        return Cmd([b"mg " + sent] + self.flag_parts(flags) + [b"\r\n"],
                   "mg", key)

    def ms(self):
        sent, key, b = self.meta_key()
        val = self.value()
        pool = ["c", "k", "q", "I", "I", self.opaque,
                lambda: "F" + self.pick(["0", "1", "4294967295"]),
                lambda: "T" + self.ttl_token(),
                lambda: "M" + self.pick("SSEARPearps"),
                lambda: ("C", self.cas_ref(key)),
                lambda: ("C", self.cas_ref(key))]
        flags = self.meta_flags(pool, key) + b
        flags = _dedup(flags)
        return Cmd([b"ms %s %d" % (sent, len(val))] + self.flag_parts(flags)
                   + [b"\r\n", val, b"\r\n"], "ms", key)

    def md(self):
        sent, key, b = self.meta_key()
        pool = ["q", "k", "I", "I", self.opaque,
                lambda: "T" + self.ttl_token(),
                lambda: ("C", self.cas_ref(key))]
        flags = _dedup(self.meta_flags(pool, key) + b)
        return Cmd([b"md " + sent] + self.flag_parts(flags) + [b"\r\n"],
                   "md", key)

    def ma(self):
        sent, key, b = self.meta_key()
        pool = ["q", "k", "t", "c", "v", "v", self.opaque,
                lambda: "N" + self.ttl_token(),
                lambda: "J" + self.pick(["0", "5", "18446744073709551615"]),
                lambda: "D" + self.pick(["1", "3", "1000",
                                         "18446744073709551615"]),
                lambda: "T" + self.ttl_token(),
                lambda: "M" + self.pick("II+DD-id"),
                lambda: ("C", self.cas_ref(key))]
        flags = _dedup(self.meta_flags(pool, key) + b)
        return Cmd([b"ma " + sent] + self.flag_parts(flags) + [b"\r\n"],
                   "ma", key)

    # ---- a sequence -----------------------------------------------------

    def command(self):
        kinds = [(self.storage, 20), (self.retrieval, 14), (self.arith, 8),
                 (self.delete, 5), (self.touch, 4), (self.flush, 1),
                 (self.misc, 3), (self.mg, 16), (self.ms, 14), (self.md, 7),
                 (self.ma, 8)]
        f = self.r.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        return f()

    def sequence(self, n):
        return [self.command() for _ in range(n)]


def _dedup(flags):
    """Drop a second flag with the same letter (a duplicate flag is an
    error we test on purpose elsewhere: bad())."""
    seen = set()
    out = []
    for f in flags:
        letter = f[0] if isinstance(f, tuple) else f[0]
        if letter in seen:
            continue
        seen.add(letter)
        out.append(f)
    return out


def sequence(seed, index, now, prefix):
    """The index-th sequence of a run with this seed."""
    rng = random.Random(f"{seed}:{index}")
    g = Gen(rng, prefix, now)
    return g.sequence(rng.randint(5, 40))
