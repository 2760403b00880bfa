"""-o net_engine: the network loop, epoll or io_uring (src/server/netring.c),
and the fallback to epoll where io_uring is refused.

The whole suite runs on one loop or the other with TC_NET_ENGINE=epoll or
uring (conftest.py; the default, auto, is uring where the kernel allows
it); these tests check what only this option does: the choice shows in
"stats settings", both loops serve the same bytes (values larger than one
receive buffer, pipelines, a client that reads its replies late, accepts
and closes in bursts), a bad value stops the start with one line, and a
refused io_uring (forced with an LD_PRELOAD that makes liburing's set-up
fail) leaves one log line (a warning only when uring was asked for) and a
server on epoll.
"""

import shutil
import subprocess
import time

import pytest

from conftest import IS_ASAN, IS_MEMCACHED, Conn

pytestmark = pytest.mark.skipif(IS_MEMCACHED,
                                reason="net_engine is tiercached's option")

# A value spanning several of the ring's 8 KiB receive buffers.
BIG = bytes((i * 7 + 3) % 251 for i in range(100_000))


def engine_of(srv):
    c = Conn(srv.host, srv.port)
    try:
        return c.stats("settings")["tc_net_engine"]
    finally:
        c.close()


def spawn_uring(spawn, *extra, **kw):
    """A server asked for io_uring; skipped when this kernel refuses it
    (the one log line says why)."""
    srv = spawn("-o", "net_engine=uring", *extra, **kw)
    if engine_of(srv) != "uring":
        pytest.skip("io_uring refused here: " + srv.stderr_text().strip())
    return srv


def exercise(srv):
    """Sets and gets over three connections: single, pipelined, a value
    larger than a receive buffer, a reply larger than a socket buffer."""
    conns = [Conn(srv.host, srv.port) for _ in range(3)]
    try:
        for i, c in enumerate(conns):
            c.cmd(b"set k%d 5 0 3\r\nv%02d\r\n" % (i, i), b"STORED\r\n")
        for i, c in enumerate(conns):
            c.cmd(b"get k%d\r\n" % i, b"VALUE k%d 5 3\r\nv%02d\r\nEND\r\n"
                  % (i, i))
        c = conns[0]
        c.cmd(b"set big 0 0 %d\r\n" % len(BIG) + BIG + b"\r\n", b"STORED\r\n")
        # a pipeline: 50 requests in one write, the replies in order
        batch = b"".join(b"set p%d 0 0 2\r\n%02d\r\nget p%d\r\n" % (i, i, i)
                         for i in range(50))
        want = b"".join(b"STORED\r\nVALUE p%d 0 2\r\n%02d\r\nEND\r\n"
                        % (i, i) for i in range(50))
        conns[1].cmd(batch, want)
        # 40 gets of the big value without reading, then all replies
        reply = b"VALUE big 0 %d\r\n" % len(BIG) + BIG + b"\r\nEND\r\n"
        conns[2].send(b"get big\r\n" * 40)
        got = conns[2].recv_exact(len(reply) * 40, timeout=60)
        assert got == reply * 40
        for c in conns:
            c.check_alive()
    finally:
        for c in conns:
            c.close()


def test_epoll_chosen(spawn):
    srv = spawn("-o", "net_engine=epoll")
    assert engine_of(srv) == "epoll"
    exercise(srv)


def test_uring_serves(spawn):
    srv = spawn_uring(spawn, threads=2)
    exercise(srv)
    assert "error" not in srv.stderr_text().lower()


def test_uring_flood_with_yields(spawn):
    """Megabytes of small requests in one write under -R 5: input that
    waits for the connection's next turn is not a request too large for
    -I (the connection stays), and every request runs."""
    srv = spawn_uring(spawn, "-R", "5", "-I", "1m", threads=1)
    c = Conn(srv.host, srv.port)
    value = b"w" * 1000
    n = 3000  # about 3 MB, past the 1 MiB input limit of one request
    c.send(b"".join(b"set f%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value),
                                                               value)
                    for i in range(n)))
    c.send(b"mn\r\n")
    c.expect(b"MN\r\n", timeout=60)
    c.cmd(b"get f%d\r\n" % (n - 1),
          b"VALUE f%d 0 %d\r\n%s\r\nEND\r\n" % (n - 1, len(value), value))
    assert int(c.stats()["conn_yields"]) > 0
    c.close()


def test_uring_many_connections_close(spawn):
    """Connections opened and closed in bursts (some with a request in
    flight): slots are reused, the server keeps serving and counts them."""
    srv = spawn_uring(spawn, threads=2)
    for rnd in range(5):
        cs = [Conn(srv.host, srv.port) for _ in range(40)]
        for i, c in enumerate(cs):
            c.send(b"set r%d 0 0 1\r\nx\r\nget r%d\r\n" % (i, i))
        for i, c in enumerate(cs):
            if i % 2:
                c.close()  # reply unread
            else:
                c.expect(b"STORED\r\nVALUE r%d 0 1\r\nx\r\nEND\r\n" % i)
                c.close()
    c = Conn(srv.host, srv.port)
    deadline = time.monotonic() + 10
    while int(c.stats()["curr_connections"]) > 1:
        assert time.monotonic() < deadline, "closed connections linger"
        time.sleep(0.05)
    assert int(c.stats()["total_connections"]) >= 201
    c.close()


def test_uring_quit_and_idle_close(spawn):
    """The server's own closes (quit, idle_timeout) reach the client while
    the ring still has a recv armed on the socket."""
    srv = spawn_uring(spawn, "-o", "idle_timeout=1")
    c = Conn(srv.host, srv.port)
    c.send(b"quit\r\n")
    assert c.closed_by_peer(timeout=5)
    c.close()
    idle = Conn(srv.host, srv.port)
    assert idle.closed_by_peer(timeout=10)
    idle.close()


def test_default_is_uring_where_allowed(spawn):
    asked = spawn("-o", "net_engine=uring", threads=1)
    default = spawn("-o", "net_engine=auto", threads=1)
    assert engine_of(default) == engine_of(asked)
    assert "warning" not in default.stderr_text()


def test_bad_engine(run_server):
    status, err = run_server(["-o", "net_engine=kqueue"])
    assert status != 0
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and "net_engine" in lines[0], err


# --- forced refusal -----------------------------------------------------

PRELOAD_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <liburing.h>
/* REFUSE=probe: every ring; REFUSE=worker: the workers' rings only (the
 * network ring asks for 1024 entries, the start-up probe for 8) */
int io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
                               struct io_uring_params *p)
{
    int (*real)(unsigned, struct io_uring *, struct io_uring_params *) =
        (int (*)(unsigned, struct io_uring *, struct io_uring_params *))
        dlsym(RTLD_NEXT, "io_uring_queue_init_params");
    if (entries >= REFUSE_FROM)
        return -EPERM;
    return real(entries, ring, p);
}
int io_uring_queue_init(unsigned entries, struct io_uring *ring,
                        unsigned flags)
{
    struct io_uring_params p = {0};
    p.flags = flags;
    return io_uring_queue_init_params(entries, ring, &p);
}
"""


def preload(tmp_path, refuse_from):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build the refusing LD_PRELOAD")
    if IS_ASAN:
        pytest.skip("an LD_PRELOAD before the ASan runtime is refused")
    src = tmp_path / "refuse.c"
    so = tmp_path / f"refuse{refuse_from}.so"
    src.write_text(PRELOAD_C)
    subprocess.run([cc, "-shared", "-fPIC", f"-DREFUSE_FROM={refuse_from}",
                    "-o", str(so), str(src), "-ldl"], check=True,
                   capture_output=True, timeout=60)
    return {"LD_PRELOAD": str(so)}


def test_refused_at_start_falls_back(spawn, tmp_path):
    srv = spawn("-o", "net_engine=uring", env=preload(tmp_path, 1))
    assert engine_of(srv) == "epoll"
    err = srv.stderr_text()
    lines = [l for l in err.splitlines() if "net_engine=uring" in l]
    assert len(lines) == 1, err
    assert "io_uring refused" in lines[0] and "using epoll" in lines[0]
    exercise(srv)


def test_refused_default_is_quiet(spawn, tmp_path):
    """auto: a refusal is said at -v only, and the server runs epoll."""
    srv = spawn("-o", "net_engine=auto", env=preload(tmp_path, 1))
    assert engine_of(srv) == "epoll"
    assert "net_engine" not in srv.stderr_text()
    loud = spawn("-o", "net_engine=auto", "-v", env=preload(tmp_path, 1))
    assert engine_of(loud) == "epoll"
    lines = [l for l in loud.stderr_text().splitlines()
             if "net_engine=auto" in l]
    assert len(lines) == 1 and "using epoll" in lines[0]
    exercise(srv)


def test_refused_in_worker_falls_back(spawn, tmp_path):
    """The probe passes, the workers' rings are refused: each worker says so
    once and runs epoll."""
    srv = spawn("-o", "net_engine=uring", threads=2,
                env=preload(tmp_path, 1024))
    if "net_engine=uring" in srv.stderr_text():
        pytest.skip("io_uring refused here at the probe already")
    # each worker logs as its loop starts, which may be after the server
    # answers: wait (bounded) for both lines, then check none repeats
    def fallbacks():
        err = srv.stderr_text()
        return err, [l for l in err.splitlines() if "it uses epoll" in l]
    deadline = time.monotonic() + 10
    while len(fallbacks()[1]) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    exercise(srv)
    err, lines = fallbacks()
    assert len(lines) == 2, err
