"""Large items in a small cache: chained items and memory across slab classes.

The sequence of memcached's t/chunked-items.t: a 48 MiB cache started with
`-o slab_chunk_max=16384` stores a chained pattern, 400 KiB items, a hundred
items of over half a megabyte, then every size from 200 KiB to 1 MiB in
steps of 2 KiB. The pool is far too small for all of it: with evictions on
(the default), each store must evict older items, across slab classes (its
value's chunks are of the largest class, its head chunk of a small one), and
never answer `SERVER_ERROR out of memory`. Passes against memcached 1.6.
"""

import os
import threading

MIB = 1024 * 1024
IS_MEMCACHED = os.environ.get("TC_SERVER_KIND") == "memcached"
# tiercache: a set waits for page moves as long as it takes (2 minutes), so
# that a loaded machine cannot refuse one; the test is about never being
# refused, not about how soon (memcached has no such option)
WAIT = () if IS_MEMCACHED else ("-o", "alloc_wait_ms=120000")


def store(conn, key, value):
    conn.cmd(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value),
             b"STORED\r\n")


def check_get(conn, key, value):
    conn.cmd(b"get %s\r\n" % key,
             b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, len(value), value))


def test_chunked_items_in_small_cache(spawn, connect):
    srv = spawn("-o", "slab_chunk_max=16384", *WAIT, mem=48)
    c = connect(srv)

    # a non-repeating pattern, so that misplaced chunks show
    pattern = b":".join(b"%d" % i for i in range(1, 8001))
    store(c, b"pattern", pattern)
    check_get(c, b"pattern", pattern)

    for i in range(1, 6):
        store(c, b"foo%d" % i, b"x" * (400 * 1024))

    big = b"a big value that's > .5M and < 1M. "
    while len(big) * 2 < MIB:
        big += big
    for i in range(1, 101):
        store(c, b"toast%d" % i, big)
        check_get(c, b"toast%d" % i, big)

    size = 200 * 1024
    while size < MIB:
        store(c, b"foo_%d" % size, b"B" * size)
        size += 2048

    # a chained item grown by appends, then by itself
    s = b"seedstring"
    store(c, b"appender", s)
    for part in range(1, 801):
        todo = b"%dxxxxxxxxxx" % part
        s += todo
        c.cmd(b"append appender 0 0 %d\r\n%s\r\n" % (len(todo), todo),
              b"STORED\r\n")
    check_get(c, b"appender", s)
    c.cmd(b"append appender 0 0 %d\r\n%s\r\n" % (len(s), s), b"STORED\r\n")
    check_get(c, b"appender", s + s)


def test_racing_workers_never_refuse(spawn, connect):
    """Four workers in a 16 MiB cache, four clients whose value sizes move
    between slab classes together: each class that needs memory must take
    a page from another, whose chunks sit in the other workers' stashes or
    under items being written. With evictions on, every set is stored."""
    srv = spawn(*WAIT, mem=16, threads=4)
    bands = [(64, 400), (600, 3000), (3000, 12000), (12000, 40000),
             (100, 900), (20000, 200000)]
    refused = []

    def client(cid):
        c = connect(srv)
        seed = cid * 7919 + 1
        for phase, (lo, hi) in enumerate(bands):
            for op in range(150):
                seed = (seed * 6364136223846793005 + 1442695040888963407) \
                    % (1 << 64)
                size = lo + (seed >> 33) % (hi - lo)
                key = b"race-%d-%d" % (cid, (seed >> 20) % 256)
                c.send(b"set %s 0 0 %d\r\n%s\r\n" % (key, size, b"v" * size))
                line = c.readline(timeout=180)
                if line != b"STORED\r\n":
                    refused.append((cid, phase, size, line))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert refused == [], f"{len(refused)} sets refused, first {refused[:3]}"
