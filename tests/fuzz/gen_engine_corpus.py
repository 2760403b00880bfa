#!/usr/bin/python3
"""Write the seed corpus of fuzz_engine (and fuzz_engine_ext).

Each seed is a short scenario in fuzz_engine.c's input format: one opcode
byte per operation followed by its operands, decoded as that file's fz_op_*
functions read them. The encoders below mirror those functions; change both
together. The fuzzer mutates these seeds into everything else.

  tests/fuzz/gen_engine_corpus.py [DIR...]   (default: the two corpus dirs)

Writes seed_<name> files only; inputs that fuzzing added (other names) stay.
"""

import os
import struct
import sys

# opcodes (enum fz_opcode)
STORE, STORE_EX, GET_COPY, GET_EX, GAT, DELETE, ARITH, TOUCH, INVALIDATE, \
    FLUSH, CLOCK, MEM_LIMIT, REASSIGN, MAINTAIN, FILL = range(15)
# modes (enum tc_store_mode)
SET, ADD, REPLACE, APPEND, PREPEND, CAS = range(6)
EMPTY_KEY, LONG_KEY = 250, 251  # keys the API refuses


def u16(v):
    return struct.pack("<H", v)


def u64(v):
    return struct.pack("<Q", v & (2**64 - 1))


# values (fz_value): kind byte, seed byte, then per kind
def v_empty():
    return bytes([0, 0])


def v_short(n, salt=1):  # n < 48 bytes of a pattern that salt varies
    assert n < 48 and salt < 5
    return bytes([1, n + 48 * salt])


def v_num(index):  # a number of fz_numbers[]
    return bytes([3, 0, index])


def v_u64(n):
    return bytes([3, 0, 128]) + u64(n)


def v_chained(extra):  # 724 + extra bytes, extra < 600
    return bytes([4, 7]) + u16(extra)


def v_big(extra):  # 3796 + extra bytes, extra < 400: near item_size_max
    return bytes([5, 9]) + u16(extra)


def v_raw(data):
    assert len(data) < 32
    return bytes([7, len(data)]) + data


# expiries (fz_exptime): kind byte, byte
def e_never():
    return bytes([0, 0])


def e_rel(secs):  # 1..100
    return bytes([2, secs - 1])


def e_past():
    return bytes([4, 0])


def e_edge(i):  # INT64_MAX, INT64_MIN, UINT32_MAX, UINT32_MAX+1, 1
    return bytes([7, i])


# CAS to send (fz_cas_in)
CAS_MODEL, CAS_PLUS1, CAS_MINUS1 = bytes([0]), bytes([5]), bytes([6])


def store(mode, key, value, flags=None, exp=e_never(), cas=CAS_MODEL):
    out = bytes([STORE, mode, key]) + value
    out += bytes([0]) if flags is None else bytes([128]) + u64(flags)
    out += exp
    if mode == CAS:
        out += cas
    return out


def store_ex(mode, key, value, flags=0, exp=e_never(), C=False, I=False,
             N=False, E=None, cas=CAS_MODEL, vexp=e_never()):
    bits = (1 if C else 0) | (2 if I else 0) | (4 if N else 0) | \
        (8 if E is not None else 0)
    out = bytes([STORE_EX, bits, mode, key]) + value + u64(flags) + exp
    if C or mode == CAS:
        out += cas
    if E is not None:
        out += bytes([E])  # < 128: above the CAS counter
    if N:
        out += vexp
    return out


def get(key):
    return bytes([GET_COPY, key, 0])


def get_short(key, cap):  # into a buffer of cap (8..63) bytes
    assert 8 <= cap < 64
    return bytes([GET_COPY, key, 192 + cap])


def get_ex(key, touch=None, vivify=None, no_bump=False, head_only=False,
           recache=None):
    bits = (1 if touch else 0) | (2 if vivify else 0) | \
        (4 if no_bump else 0) | (8 if head_only else 0) | \
        (16 if recache is not None else 0)
    out = bytes([GET_EX, bits, key])
    if recache is not None:
        out += bytes([recache])
    if touch:
        out += touch
    if vivify:
        out += vivify
    return out


def gat(key, exp):
    return bytes([GAT, key]) + exp


def delete(key, cas=None):
    if cas is None:
        return bytes([DELETE, key, 0, 0])
    return bytes([DELETE, key, 0, 128]) + cas


def drop(key):
    return bytes([DELETE, key, 1])


def incr(key, delta, up=True):  # tc_incr/tc_decr, delta < 256
    return bytes([ARITH, 1 if up else 0, key, delta])


def arith_ex(key, delta, up=True, N=None, initial=0, T=None, cas=None):
    bits = (1 if up else 0) | 2 | 4 | (8 if N else 0) | (16 if T else 0) | \
        32 | (64 if cas is not None else 0)
    out = bytes([ARITH, bits, key]) + u64(delta) + u64(initial)
    if N:
        out += N
    if T:
        out += T
    if cas is not None:
        out += cas
    return out


def touch(key, exp):
    return bytes([TOUCH, key]) + exp


def invalidate(key, cas=None, exp=None):
    out = bytes([INVALIDATE, key])
    out += bytes([0]) if cas is None else bytes([128]) + cas
    out += bytes([0]) if exp is None else bytes([128]) + exp
    return out


def flush(delay=0):  # delay 0..39
    return bytes([FLUSH, 0 if delay == 0 else 160 + delay])


def clock(secs):  # 0..7, or 200..249
    assert secs < 8 or 200 <= secs < 250
    return bytes([CLOCK, secs])


def clock_hours(h):  # 1..6
    return bytes([CLOCK, 249 + h])


def mem_limit(mib):  # 0..7 MiB (the pool has 4)
    return bytes([MEM_LIMIT, mib])


def reassign(src, dst):  # src -1 .. nclasses, dst 0 .. nclasses
    return bytes([REASSIGN, src + 1, dst])


def maintain():
    return bytes([MAINTAIN])


def fill(count, at, vlen16):  # count 1..64 items "fill<at+i>", 16*vlen16 B
    return bytes([FILL, count - 1]) + u16(at) + bytes([vlen16])


def seeds():
    s = {}
    s["basic"] = b"".join([
        store(SET, 0, v_short(5)), get(0), store(ADD, 0, v_short(6)),
        store(ADD, 1, v_short(7), flags=0xdeadbeef), get(1),
        store(REPLACE, 2, v_short(3)), store(REPLACE, 1, v_raw(b"r\r\n")),
        get(1), store(APPEND, 1, v_raw(b"++")), store(PREPEND, 1, v_short(4)),
        get(1), get_short(1, 8), store(APPEND, 3, v_short(1)),
        store(CAS, 1, v_short(9)), store(CAS, 1, v_short(9), cas=CAS_PLUS1),
        store(CAS, 4, v_short(2)), delete(1, cas=CAS_MINUS1),
        delete(1, cas=CAS_MODEL), get(1), delete(0), drop(0), get(0),
        store(SET, 8, v_empty()), get(8), store(SET, 9, v_short(40)),
        store(SET, 10, v_short(41)), get(9), get(10),
        store(SET, 11, v_raw(b"\0\1\2")), get(11),
    ])
    s["arith"] = b"".join([
        store(SET, 0, v_num(0)), incr(0, 1), incr(0, 255), incr(0, 7, False),
        incr(0, 255, False), get(0), store(SET, 1, v_num(2)), incr(1, 1),
        get(1), store(SET, 2, v_num(5)), incr(2, 1), store(SET, 3, v_num(6)),
        incr(3, 2, False), store(SET, 4, v_num(7)), incr(4, 1),
        store(SET, 5, v_num(8)), incr(5, 1), store(SET, 6, v_num(12)),
        incr(6, 1), store(SET, 7, v_num(13)), incr(7, 1),
        store(SET, 8, v_num(15)), incr(8, 3), incr(9, 1),
        arith_ex(9, 5, N=e_never(), initial=10), get(9),
        arith_ex(9, 2**64 - 1, cas=CAS_MODEL), arith_ex(9, 1, cas=CAS_PLUS1),
        arith_ex(9, 3, up=False, T=e_rel(5)), clock(6), get(9),
        arith_ex(10, 1, N=e_past(), initial=2**64 - 1), get(10),
        store(SET, 0, v_u64(2**64 - 2), flags=7), incr(0, 3), get(0),
    ])
    s["expiry"] = b"".join([
        store(SET, 0, v_short(5), exp=e_rel(2)), store(SET, 1, v_short(6),
                                                       exp=e_rel(10)),
        store(SET, 2, v_short(7), exp=e_past()), get(2), clock(2), get(0),
        get(1), touch(1, e_rel(1)), clock(1), get(1),
        store(SET, 3, v_short(8), exp=e_edge(0)), store(SET, 4, v_short(9),
                                                        exp=e_edge(1)),
        store(SET, 5, v_short(2), exp=e_edge(2)), gat(5, e_rel(3)), clock(3),
        get(5), gat(3, e_never()), clock_hours(3), get(3), maintain(),
        store(SET, 6, v_short(1), exp=bytes([6, 0])),
        store(SET, 7, v_short(1), exp=bytes([6, 2])), get(6), get(7),
        store(SET, 8, v_short(1), exp=bytes([5, 49])), get(8),
        store(SET, 8, v_short(1), exp=bytes([5, 52])), get(8), clock(2),
        get(8),
    ])
    s["flush"] = b"".join([
        store(SET, 0, v_short(5)), flush(), get(0), store(SET, 0, v_short(6)),
        get(0), flush(10), store(SET, 1, v_short(2)), clock(7), get(0),
        clock(3), store(SET, 2, v_short(3)), get(0), get(1), get(2),
        flush(5), flush(20), clock(7), get(2), clock(7), clock(7), get(2),
        flush(3), flush(), store(SET, 3, v_short(4)), clock(4), get(3),
    ])
    s["meta"] = b"".join([
        store_ex(SET, 0, v_short(5), flags=3, E=10), get(0),
        store_ex(SET, 0, v_short(6), C=True, cas=CAS_MODEL), get(0),
        store_ex(SET, 0, v_short(7), C=True, cas=CAS_PLUS1),
        store_ex(ADD, 0, v_short(7), C=True), store_ex(REPLACE, 0, v_short(8),
                                                       C=True),
        store_ex(SET, 0, v_short(9), C=True, I=True, cas=CAS_MINUS1), get(0),
        get_ex(0, recache=30), get_ex(0),
        store_ex(APPEND, 1, v_short(3), N=True, vexp=e_rel(50), flags=9),
        get(1), store_ex(PREPEND, 1, v_short(4), C=True, cas=CAS_MINUS1),
        store_ex(APPEND, 1, v_short(4), C=True, E=3), get(1),
        get_ex(2, vivify=e_rel(30)), get_ex(2, vivify=e_rel(30)),
        store(SET, 2, v_short(5)), invalidate(2), get_ex(2), get_ex(2),
        invalidate(2, cas=CAS_PLUS1), invalidate(2, cas=CAS_MODEL,
                                                 exp=e_rel(2)),
        clock(3), get(2), get_ex(3, touch=e_rel(4), no_bump=True),
        store(SET, 3, v_short(7)), get_ex(3, touch=e_rel(4), head_only=True),
        store_ex(CAS, 3, v_short(7), I=True, cas=CAS_MODEL), get(3),
    ])
    s["memory"] = b"".join(
        [store(SET, k % 12, v_big(k * 31 % 300)) for k in range(14)] +
        [store(SET, k % 12, v_chained(k * 97 % 600)) for k in range(14)] +
        [get(k) for k in range(12)] +
        [mem_limit(1), maintain(), mem_limit(0), mem_limit(7),
         reassign(-1, 0), reassign(3, 4), reassign(0, 9)] +
        [store(SET, k % 12, v_short(k)) for k in range(24)] +
        [store(APPEND, 0, v_big(100)), store(APPEND, 1, v_chained(5)),
         mem_limit(6), maintain()] + [get(k) for k in range(12)])
    s["fill"] = b"".join([
        store(SET, 0, v_short(5)), store(SET, 1, v_chained(100)),
        fill(32, 0, 3), fill(32, 64, 30), get(0), get(1),
        store(SET, 2, v_big(10)), fill(64, 256, 255), fill(64, 320, 200),
        fill(64, 384, 100), fill(64, 448, 120), get(2), maintain(),
        fill(16, 576, 0), get(0), mem_limit(1), fill(64, 0, 64), get(1),
        mem_limit(4), fill(32, 1000, 2), get(0),
    ])
    s["bad_keys"] = b"".join([
        store(SET, EMPTY_KEY, v_short(3)), store(SET, LONG_KEY, v_short(3)),
        get(EMPTY_KEY), get_ex(LONG_KEY), delete(EMPTY_KEY),
        incr(LONG_KEY, 1), touch(EMPTY_KEY, e_rel(1)), invalidate(LONG_KEY),
        gat(EMPTY_KEY, e_never()), store(SET, 0, v_big(399)),
        store(SET, 9, v_big(399)), store(APPEND, 0, v_big(0)), get(0),
    ])
    # the first command once a delayed flush is due is a set: the set must
    # survive the flush (src/engine/store.c commit)
    s["flush_then_set"] = b"".join([
        store(SET, 0, v_short(3)), flush(5), clock(5),
        store(SET, 1, v_short(4)), get(0), get(1),
    ])
    return s


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = sys.argv[1:] or [os.path.join(here, "corpus", "engine"),
                            os.path.join(here, "corpus", "engine_ext")]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
        for name, data in seeds().items():
            with open(os.path.join(d, "seed_" + name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
