"""Concurrent clients on several workers (-t 4): multigets running while
pages move between slab classes. Against a TSan build (make proto-tsan)
these are the races the unit tests cannot reach through the protocol; on
any build, every reply must be exact.

Page moves: the pool is filled with large items first, so the class of
small items gets its pages only through `slabs reassign` from the large
class: each such page leaves a class of few chunks for one of many, and
gets new DRAM tables while other workers' multigets prefetch through
location hints (their buckets' tag matches) into the small class's pages.
Slab classes only: the server runs with the packed store off (small items
would not take a slab chunk).
"""

import re
import threading

from conftest import SLAB_OPTS, Conn

BIG = 100 * 1024  # one class of a few chunks a page
SMALL = b"v" * 10
READERS = 3
MOVES = 12
KEYS_PER_MOVE = 300
READS_MIN = 100  # multigets per reader at least (each of GROUP keys),
READS_MAX = 2000  # and at most: they go on while pages move
GROUP = 16


def small_key(i):
    return b"sk:%d" % i


def small_val(i):
    return SMALL + b"%d" % i


def class_of(c, size):
    """The class id whose chunk_size is the smallest >= size."""
    out = c.stats("slabs")
    best = None
    for name, v in out.items():
        m = re.fullmatch(r"(\d+):chunk_size", name)
        if m and int(v) >= size and (best is None or int(v) < best[1]):
            best = (int(m.group(1)), int(v))
    return best[0]


def sync(c):
    """Wait until every noreply command sent on c before has run."""
    c.cmd(b"mn\r\n", b"MN\r\n")


def test_multiget_while_pages_move(spawn):
    srv = spawn(*SLAB_OPTS, mem=64, threads=4)
    w = Conn(srv.host, srv.port)
    # the whole pool to the large class (evictions past it are fine)
    big = b"b" * BIG
    for i in range(800):
        w.send(b"set bk:%d 0 0 %d noreply\r\n%s\r\n" % (i, BIG, big))
        if i % 50 == 49:
            sync(w)
    sync(w)
    # a first small item makes the small class exist in the stats
    w.cmd(b"set %s 0 0 %d\r\n%s\r\n" % (small_key(0), len(small_val(0)),
                                        small_val(0)), b"STORED\r\n")
    src = class_of(w, BIG)
    dst = class_of(w, 64)

    done = threading.Event()
    published = [1]  # keys small_key(0 .. published[0]-1) are stored
    errors = []

    def reader(seed):
        c = Conn(srv.host, srv.port)
        try:
            x = seed
            for k in range(READS_MAX):
                n = published[0]
                ids = []
                for j in range(GROUP):
                    x = (x * 1103515245 + 12345) & 0x7FFFFFFF
                    # half of them from the newest batch: items on the
                    # page that moved last
                    lo = max(0, n - KEYS_PER_MOVE) if j % 2 else 0
                    ids.append(lo + x % (n - lo))
                c.send(b"get %s\r\n" % b" ".join(small_key(i) for i in ids))
                for i in ids:
                    v = small_val(i)
                    c.expect(b"VALUE %s 0 %d\r\n%s\r\n"
                             % (small_key(i), len(v), v))
                c.expect(b"END\r\n")
                if done.is_set() and k >= READS_MIN:
                    break
        except AssertionError as e:
            errors.append(str(e))
        finally:
            c.close()

    threads = [threading.Thread(target=reader, args=(7 + r,))
               for r in range(READERS)]
    for t in threads:
        t.start()
    moved = 0
    try:
        for m in range(MOVES):
            w.send(b"slabs reassign %d %d\r\n" % (src, dst))
            r = w.readline()
            assert r in (b"OK\r\n", b"BUSY currently processing reassign "
                         b"request\r\n"), r
            moved += r == b"OK\r\n"
            base = published[0]
            for i in range(base, base + KEYS_PER_MOVE):
                v = small_val(i)
                w.send(b"set %s 0 0 %d noreply\r\n%s\r\n"
                       % (small_key(i), len(v), v))
            sync(w)
            published[0] = base + KEYS_PER_MOVE
    finally:
        done.set()
        for t in threads:
            t.join(120)
    assert not any(t.is_alive() for t in threads), "a reader hung"
    assert not errors, errors[0]
    assert moved >= 1
    pages = int(w.stats("slabs")["%d:total_pages" % dst])
    assert pages >= 1
    w.close()
