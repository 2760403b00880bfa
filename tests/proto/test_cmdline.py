"""memcached's command line: Debian's /etc/memcached.conf line, memcached's
test-harness flags, and each flag's effect where a client or /proc can see
it (-u, -P, -d, -r, -k, -L, -F, -C, -B, -D, -b, -R, -X, -W, -N, the -o
options, -m 2, -I in bytes). Every server runs on 127.0.0.1 on a port the
test picks; daemons are stopped by the PID their pid file names.

Runs against memcached too (TC_SERVER_KIND=memcached), except what only
tiercached prints (marked tiercache_only).
"""

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from conftest import (HOST, IS_ASAN, IS_MEMCACHED, MEMCACHED, ROOT,
                      SERVER_BIN, START_TIMEOUT, Conn, Server,
                      _die_with_parent, _wait_accepting, free_port,
                      remove_pool, start_memcached)

IS_ROOT = os.geteuid() == 0
RUN_USER = "nobody"  # the unprivileged user the tests drop to as root
WAIT = 30.0  # bound of every wait for a file or a process to appear/go


def _pool():
    return f"/dev/shm/tc-cmdline-{os.getpid()}-{uuid.uuid4().hex}.pool"


def _launch(flags, port, pool=None, as_root_user="root"):
    """Popen the server binary with exactly `flags` (plus -e pool for
    tiercache, and -u as_root_user when root and flags have no -u): for
    the command lines a test writes whole (Debian's, a daemon); the others
    start through conftest's spawn."""
    argv = [str(SERVER_BIN)] + [str(f) for f in flags]
    if IS_ROOT and "-u" not in flags and as_root_user:
        argv += ["-u", as_root_user]
    if pool and not IS_MEMCACHED:
        argv += ["-e", pool]
    fd_err, err_path = tempfile.mkstemp(prefix="tc-cmdline-", suffix=".err")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=fd_err,
                            cwd=str(ROOT), preexec_fn=_die_with_parent)
    os.close(fd_err)
    return Server(HOST, port, proc, pool=pool, stderr_path=err_path,
                  stdout_path=None, argv=argv)


def _start(flags, port=None, **kw):
    """Start with `flags` (which name the port) and wait until it accepts."""
    srv = _launch(flags, port, **kw)
    if not _wait_accepting(srv.proc, port, START_TIMEOUT):
        err = srv.stderr_text()
        if srv.alive():
            srv.proc.kill()
            srv.proc.wait(5)
        srv.cleanup()
        raise AssertionError(f"{srv.argv} did not start: {err}")
    return srv


def _run_exit(flags, timeout=60):
    """Run with `flags` expecting an exit by itself: (status, stderr)."""
    pool = _pool()
    argv = [str(SERVER_BIN), "-p", str(free_port()), "-l", HOST] + \
        [str(f) for f in flags]
    if not IS_MEMCACHED:
        argv += ["-e", pool]
    try:
        p = subprocess.run(argv, capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL,
                           cwd=str(ROOT), preexec_fn=_die_with_parent)
    finally:
        remove_pool(pool)
    return p.returncode, p.stderr


def _one_line(err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line, got {err!r}"
    return lines[0]


def _wait_for(cond, what, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _proc_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _proc_field(pid, name):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split()[1:]
    raise AssertionError(f"no {name} in /proc/{pid}/status")


def _stats(conn, group="settings"):
    conn.send(f"stats {group}\r\n".encode())
    out = {}
    while True:
        line = conn.readline()
        if line == b"END\r\n":
            return out
        parts = line.decode().split()
        assert parts[0] == "STAT", line
        out[parts[1]] = " ".join(parts[2:])


# --- Debian's config line, -u, -P, -d ---------------------------------------


@pytest.fixture
def run_dir():
    """A directory the -u user can write (the pid file is written after
    dropping root), as Debian's /var/run/memcached is."""
    d = Path(tempfile.mkdtemp(prefix="tc-cmdline-run-"))
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_debian_conf_line(run_dir):
    """/etc/memcached.conf through Debian's wrapper:
    memcached -m 64 -p 11211 -u memcache -l 127.0.0.1 -P <pidfile>, on a
    free port, a temporary pid file and, as root, a user that exists."""
    port = free_port()
    pid_file = run_dir / "memcached.pid"
    user = RUN_USER if IS_ROOT else pwd.getpwuid(os.geteuid()).pw_name
    flags = ["-m", "64", "-p", port, "-u", user, "-l", "127.0.0.1",
             "-P", pid_file]
    srv = _start(flags, port=port, pool=_pool())
    try:
        text = _wait_for(lambda: pid_file.exists() and pid_file.read_text(),
                         "the pid file")
        assert text == f"{srv.pid}\n"
        uid = pwd.getpwnam(user).pw_uid
        assert _proc_field(srv.pid, "Uid") == [str(uid)] * 4
        assert _proc_field(srv.pid, "Gid")[0] == \
            str(pwd.getpwnam(user).pw_gid)
        c = Conn(HOST, port)
        c.send(b"set k 0 0 1\r\nv\r\nget k\r\n")
        assert c.readline() == b"STORED\r\n"
        assert c.readline() == b"VALUE k 0 1\r\n"
        c.close()
    finally:
        srv.stop()
    if not IS_MEMCACHED:  # memcached removes it only after -d
        assert not pid_file.exists(), "a clean exit removes the pid file"


def _wrapper_params(conf):
    """The flags Debian's systemd-memcached-wrapper makes of a
    memcached.conf: comments and blank lines dropped, -d and -h dropped,
    directives without a dash (logfile) ignored."""
    params = []
    for line in conf.splitlines():
        line = re.sub(r"(?<!\\)#[^#]*", "", line).strip()
        if not line or re.match(r"^-[dh]", line) or not line.startswith("-"):
            continue
        params += line.split(None, 1)
    return params


def test_debian_conf_file(run_dir):
    """Debian's own /etc/memcached.conf, read as its systemd wrapper reads
    it; only the port, the pid file and (as root) the user are swapped for
    a free port, a temporary file and a user that exists."""
    conf = Path("/etc/memcached.conf")
    if not conf.exists():
        pytest.skip("no /etc/memcached.conf (Debian's memcached package)")
    params = _wrapper_params(conf.read_text())
    assert "-m" in params and "-u" in params, params
    port = free_port()
    pid_file = run_dir / "memcached.pid"
    swap = {"-p": str(port), "-P": str(pid_file),
            "-u": RUN_USER if IS_ROOT else
            pwd.getpwuid(os.geteuid()).pw_name}
    flags = [swap.get(params[i - 1], a) if i else a
             for i, a in enumerate(params)]
    srv = _start(flags, port=port, pool=_pool())
    try:
        text = _wait_for(lambda: pid_file.exists() and pid_file.read_text(),
                         "the pid file")
        assert text == f"{srv.pid}\n"
        c = Conn(HOST, port)
        c.send(b"version\r\n")
        assert c.readline().startswith(b"VERSION ")
        c.close()
    finally:
        srv.stop()


@pytest.mark.skipif(not IS_ROOT, reason="only root must name a -u user")
def test_root_without_u():
    rc, err = _run_exit(["-U", "0"])
    assert rc == 64
    assert _one_line(err).endswith("can't run as root without the -u switch")


@pytest.mark.skipif(not IS_ROOT, reason="-u is ignored when not root")
def test_unknown_user():
    rc, err = _run_exit(["-U", "0", "-u", "no-such-user-tc"])
    assert rc == 67
    assert _one_line(err).endswith(
        "can't find the user no-such-user-tc to switch to")


def test_daemon_pid_file(tmp_path):
    """-d -P: the command returns at once, the daemon writes its pid (not
    the starter's) and serves; SIGTERM to that pid stops it and removes the
    pid file."""
    port = free_port()
    pid_file = tmp_path / "tc.pid"
    pool = _pool()
    srv = _launch(["-p", port, "-l", HOST, "-U", "0", "-m", "64", "-d",
                   "-P", pid_file], port, pool=pool)
    pid = None
    try:
        assert srv.wait_exit() == 0, srv.stderr_text()
        text = _wait_for(lambda: pid_file.exists() and pid_file.read_text(),
                         "the daemon's pid file")
        pid = int(text)
        assert pid != srv.pid
        assert _proc_alive(pid)
        # a daemon: its own session, not the starter's child
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().split(") ")[1].split()
        assert int(fields[3]) == pid, "setsid: the daemon leads its session"
        c = Conn(HOST, port)
        c.send(b"version\r\n")
        assert c.readline().startswith(b"VERSION ")
        c.close()
        os.kill(pid, signal.SIGTERM)
        _wait_for(lambda: not _proc_alive(pid), "the daemon to exit")
        pid = None
        _wait_for(lambda: not pid_file.exists(), "the pid file to go")
    finally:
        if pid is not None and _proc_alive(pid):
            os.kill(pid, signal.SIGKILL)
        srv.cleanup()


def test_unknown_flag_one_line():
    rc, err = _run_exit(["-j"])
    if IS_MEMCACHED:  # getopt's line and memcached's
        assert rc == 1 and "invalid option" in err
        return
    assert rc == 64
    assert "'-j'" in _one_line(err)


def test_harness_flags(spawn):
    """memcached's test harness: -U 0, -u as root, -o no_modern and the
    background-thread switches."""
    srv = spawn("-o", "no_modern,no_lru_crawler,no_lru_maintainer",
                threads=2)
    c = Conn(HOST, srv.port)
    st = _stats(c)
    assert st["lru_crawler"] == "no"
    assert st["lru_maintainer_thread"] == "no"
    c.close()
    if not IS_MEMCACHED:
        err = srv.stderr_text()
        for name in ("no_modern", "no_lru_crawler", "no_lru_maintainer"):
            assert len(re.findall(rf"^.*: -o {name}: ", err, re.M)) == 1, err


def test_coredumps(spawn):
    """-r: the core file limit raised to the hard limit."""
    srv = spawn("-r")
    with open(f"/proc/{srv.pid}/limits") as f:
        row = next(ln for ln in f if ln.startswith("Max core file size"))
    soft, hard = row.split()[4:6]
    assert soft == hard and soft != "0", row


@pytest.mark.skipif(IS_ASAN or "tsan" in SERVER_BIN.parts,
                    reason="mlockall would lock a sanitizer's terabytes of "
                    "shadow memory")
def test_lock_memory(spawn):
    """-k: mlockall; as root it holds, elsewhere a refusal is one
    warning and the server runs on."""
    srv = spawn("-k")
    locked = int(_proc_field(srv.pid, "VmLck")[0])
    if IS_ROOT:
        assert locked > 0
    else:
        assert locked > 0 or "mlockall() failed" in srv.stderr_text()


@pytest.mark.tiercache_only
def test_large_pages_one_line(spawn):
    """-L: the pool copied onto 2 MiB pages where the kernel does that,
    or one line saying why not; with -v, the line either way."""
    srv = spawn("-L", "-v")
    lines = [ln for ln in srv.stderr_text().splitlines()
             if "large pages: " in ln]
    assert len(lines) == 1, srv.stderr_text()
    # what it says agrees with the open's line on the pool's pages
    opened = [ln for ln in srv.stderr_text().splitlines()
              if " data bytes, " in ln]
    assert len(opened) == 1, srv.stderr_text()
    huge = "is on 2 MiB pages" in lines[0]
    assert huge or "DAX" in lines[0] or "page size" in lines[0], lines[0]
    assert huge == opened[0].endswith("on 2 MiB pages"), srv.stderr_text()
    # a tmpfs pool is first copied onto 2 MiB pages where the kernel will
    # (MADV_COLLAPSE), one line either way; copied means on them
    copy = [ln for ln in srv.stderr_text().splitlines()
            if "onto 2 MiB pages" in ln]
    if "DAX" not in lines[0]:
        assert len(copy) == 1, srv.stderr_text()
        if "copied onto 2 MiB pages" in copy[0]:
            assert huge and " 0 of " not in copy[0], srv.stderr_text()


# --- flags a client sees -----------------------------------------------------


def test_disable_flush_all(spawn):
    """-F: flush_all refused with memcached's reply (noreply silences it),
    the binary flush with status 0x20; nothing is flushed."""
    srv = spawn("-F")
    c = Conn(HOST, srv.port)
    c.send(b"set k 0 0 1\r\nv\r\nflush_all\r\nflush_all 0 noreply\r\n"
           b"get k\r\n")
    c.expect(b"STORED\r\nCLIENT_ERROR flush_all not allowed\r\n"
             b"VALUE k 0 1\r\nv\r\nEND\r\n")
    assert _stats(c)["flush_enabled"] == "no"
    c.close()
    b = Conn(HOST, srv.port)
    b.send(bytes([0x80, 0x08]) + bytes(22))  # binary flush
    head = b.recv_exact(24)
    assert head[0] == 0x81 and head[6:8] == b"\x00\x20", head
    b.close()


def test_disable_cas(spawn):
    """-C: every CAS shown is 0, and a compare never matches an item
    (memcached: EXISTS, or NOT_FOUND for a missing key)."""
    srv = spawn("-C")
    c = Conn(HOST, srv.port)
    c.send(b"set a 0 0 1\r\nx\r\ngets a\r\n")
    c.expect(b"STORED\r\nVALUE a 0 1 0\r\nx\r\nEND\r\n")
    c.send(b"cas a 0 0 1 0\r\ny\r\ncas a 0 0 1 1\r\ny\r\n"
           b"cas b 0 0 1 0\r\nz\r\n")
    c.expect(b"EXISTS\r\nEXISTS\r\nNOT_FOUND\r\n")
    c.send(b"mg a v c\r\nms a 1 C0\r\nz\r\nmn\r\n")
    c.expect(b"VA 1 c0\r\nx\r\nEX\r\nMN\r\n")
    assert _stats(c)["cas_enabled"] == "no"
    c.close()


def _bin_version():
    return bytes([0x80, 0x0b]) + bytes(22)


def test_binding_ascii(spawn):
    """-B ascii: binary bytes are read as text, never answered in
    binary; text works."""
    srv = spawn("-B", "ascii")
    c = Conn(HOST, srv.port)
    c.send(b"version\r\n")
    assert c.readline().startswith(b"VERSION ")
    assert _stats(c)["binding_protocol"] == "ascii"
    c.close()
    b = Conn(HOST, srv.port)
    b.send(_bin_version() + b"\r\n")
    reply = b.read_until(b"\r\n")
    assert not reply.startswith(b"\x81") and reply.endswith(b"ERROR\r\n"), \
        reply
    b.close()


def test_binding_binary(spawn):
    """-B binary: a text command closes the connection unanswered; a
    binary request is answered."""
    srv = spawn("-B", "binary")
    b = Conn(HOST, srv.port)
    b.send(_bin_version())
    head = b.recv_exact(24)
    assert head[0] == 0x81 and head[1] == 0x0b
    b.close()
    c = socket.create_connection((HOST, srv.port), timeout=WAIT)
    c.sendall(b"version\r\n" * 3)  # a whole header's worth, bad magic
    try:
        got = c.recv(100)  # b"" at the close; a timeout raises
    except ConnectionResetError:
        got = b""
    c.close()
    assert got == b"", got


def test_bad_binding():
    rc, err = _run_exit(["-U", "0", "-B", "sideways"]
                        + (["-u", "root"] if IS_ROOT else []))
    assert rc == 64
    assert "auto, binary, or ascii" in err


@pytest.mark.skipif(IS_MEMCACHED, reason="tiercache's packed store")
def test_bad_packed_evict():
    """-o packed_evict takes merge or fifo; anything else exits with one
    line that says so."""
    rc, err = _run_exit(["-U", "0", "-o", "packed_evict=lru"]
                        + (["-u", "root"] if IS_ROOT else []))
    assert rc == 64
    assert "packed_evict: expected merge or fifo" in _one_line(err)


def test_backlog(spawn):
    """-b: the listen queue's limit, as ss shows it (Send-Q of a listening
    socket)."""
    ss = shutil.which("ss")
    if not ss:
        pytest.skip("ss (iproute2) not installed")
    srv = spawn("-b", "37")
    out = subprocess.run([ss, "-Hltn", f"sport = :{srv.port}"],
                         capture_output=True, text=True, timeout=30).stdout
    rows = [ln.split() for ln in out.splitlines() if ln.strip()]
    assert rows and all(r[2] == "37" for r in rows), out
    c = Conn(HOST, srv.port)
    assert _stats(c)["tcp_backlog"] == "37"
    c.close()


@pytest.mark.tiercache_only  # memcached 1.6.18 crashes at exit after -N
def test_napi_ids(spawn):
    srv = spawn("-N", "2")
    c = Conn(HOST, srv.port)
    assert _stats(c)["num_napi_ids"] == "2"
    c.close()
    assert len(re.findall(r": -N: ", srv.stderr_text())) == 1


def test_delimiter_and_settings(spawn):
    """-D, -R, -X, -W: accepted and shown by stats settings under
    memcached's names; -X refuses the dumps and -W watch with memcached's
    replies."""
    srv = spawn("-D", "#", "-R", "7", "-X", "-W")
    c = Conn(HOST, srv.port)
    st = _stats(c)
    assert st["stat_key_prefix"] == "#"
    assert st["reqs_per_event"] == "7"
    assert st["dump_enabled"] == "no"
    if not IS_MEMCACHED:  # memcached 1.6.18 does not show it
        assert st["watch_enabled"] == "no"
    assert st["flush_enabled"] == "yes" and st["cas_enabled"] == "yes"
    assert st["binding_protocol"] == "auto-negotiate"
    c.cmd(b"stats cachedump 1 1\r\n",
          b"CLIENT_ERROR stats cachedump not allowed\r\n")
    c.cmd(b"lru_crawler metadump all\r\n", b"ERROR metadump not allowed\r\n")
    c.cmd(b"watch fetchers\r\n",
          b"CLIENT_ERROR watch commands not allowed\r\n")
    c.close()
    if not IS_MEMCACHED:
        err = srv.stderr_text()
        assert len(re.findall(r": -D: ", err)) == 1, err
        for flag in ("-R", "-X", "-W"):
            assert not re.findall(rf": {flag}: ", err), err


def _yields(c):
    return int(_stats(c, "")["conn_yields"])


def test_reqs_per_event(spawn):
    """-R: a wake-up runs at most that many requests; a pipelined burst
    longer than it makes the connection yield (conn_yields grows) and every
    reply still comes, in order; one request per round trip never
    yields."""
    srv = spawn("-R", "2", threads=1)
    c = Conn(HOST, srv.port)
    c.cmd(b"set k 0 0 1\r\nv\r\n", b"STORED\r\n")
    before = _yields(c)
    for _ in range(5):
        c.cmd(b"get k\r\n", b"VALUE k 0 1\r\nv\r\nEND\r\n")
    assert _yields(c) == before, "single requests never use up -R 2"
    n = 60
    burst = b"".join(b"incr n%d 1\r\n" % (i % 3) for i in range(n))
    c.send(burst + b"get k\r\n")
    got = c.read_until(b"END\r\n")
    assert got == b"NOT_FOUND\r\n" * n + b"VALUE k 0 1\r\nv\r\nEND\r\n"
    assert _yields(c) > before
    c.close()
    # a burst followed by the client's end of sending: what was buffered
    # when the connection yielded still runs before it closes
    with socket.create_connection((HOST, srv.port), timeout=30) as s:
        s.sendall(burst + b"get k\r\n")
        s.shutdown(socket.SHUT_WR)
        got, deadline = b"", time.monotonic() + 30
        while time.monotonic() < deadline:
            d = s.recv(1 << 16)
            if not d:
                break
            got += d
    assert got == b"NOT_FOUND\r\n" * n + b"VALUE k 0 1\r\nv\r\nEND\r\n"


def test_dumps_and_watch_allowed_by_default(spawn):
    """Without -X and -W the dumps and watch answer (the refusals above
    come from the flags)."""
    srv = spawn()
    c = Conn(HOST, srv.port)
    c.cmd(b"set k 0 0 1\r\nx\r\n", b"STORED\r\n")
    c.send(b"lru_crawler metadump all\r\n")
    got = b""
    for _ in range(1000):
        got += c.readline()
        if got.endswith(b"END\r\n"):
            break
    assert got.startswith(b"key=k "), got
    c.cmd(b"watch fetchers\r\n", b"OK\r\n")
    c.close()
    assert srv.port


def test_settings_names(spawn):
    """stats settings has memcached's names for what memcached shows
    (the ones a tool or exporter reads)."""
    srv = spawn()
    c = Conn(HOST, srv.port)
    st = _stats(c)
    c.close()
    for name in ("maxbytes", "maxconns", "tcpport", "udpport", "inter",
                 "verbosity", "evictions", "domain_socket", "umask",
                 "shutdown_command", "growth_factor", "chunk_size",
                 "num_threads", "stat_key_prefix", "detail_enabled",
                 "reqs_per_event", "cas_enabled", "tcp_backlog",
                 "binding_protocol", "auth_enabled_sasl",
                 "auth_enabled_ascii", "item_size_max", "maxconns_fast",
                 "hashpower_init", "slab_reassign", "slab_automove",
                 "slab_chunk_max", "lru_crawler", "lru_crawler_sleep",
                 "lru_crawler_tocrawl", "tail_repair_time",
                 "flush_enabled", "dump_enabled", "hash_algorithm",
                 "lru_maintainer_thread", "hot_lru_pct", "warm_lru_pct",
                 "hot_max_factor", "warm_max_factor", "temporary_ttl",
                 "idle_timeout", "watcher_logbuf_size",
                 "worker_logbuf_size", "read_buf_mem_limit", "track_sizes",
                 "ext_item_size", "ext_item_age", "ext_recache_rate",
                 "ext_wbuf_size", "ext_max_frag", "ssl_enabled"):
        assert name in st, name
    assert st["watcher_logbuf_size"] == "262144"
    assert st["worker_logbuf_size"] == "65536"
    assert st["evictions"] == "on" and st["slab_reassign"] == "yes"


# --- memcached's -o options and ranges ---------------------------------------

MEMCACHED_O = ("no_modern,modern,lru_crawler,no_lru_crawler,hashpower=16,"
               "slab_reassign,slab_automove=1,tail_repair_time=60,"
               "lru_maintainer,no_lru_maintainer,read_buf_mem_limit=0,"
               "watcher_logbuf_size=256,worker_logbuf_size=64,"
               "ext_threads=1")


def test_memcached_o_options(spawn):
    """memcached's -o options all start a server; where one has no
    meaning here, it leaves exactly one log line."""
    srv = spawn("-o", MEMCACHED_O)
    c = Conn(HOST, srv.port)
    st = _stats(c)
    c.send(b"set k 0 0 1\r\nv\r\n")
    c.expect(b"STORED\r\n")
    c.close()
    assert st["hashpower_init"] == "16"
    assert st["lru_crawler"] == "no"
    if IS_MEMCACHED:
        return
    err = srv.stderr_text()
    for name in ("no_modern", "modern", "no_lru_crawler", "slab_reassign",
                 "slab_automove", "tail_repair_time", "no_lru_maintainer",
                 "read_buf_mem_limit", "watcher_logbuf_size",
                 "worker_logbuf_size"):
        assert len(re.findall(rf": -o {name}: ", err)) == 1, (name, err)
    # options that do what memcached's do leave none
    for name in ("hashpower", "ext_threads"):
        assert f"-o {name}:" not in err, err


@pytest.mark.parametrize("mem", [2, 3])
def test_tiny_memory(spawn, mem):
    """-m 2 and -m 3 (memcached's tests use them): the server starts,
    reports the limit, and a cache that may evict stores past it."""
    srv = spawn(mem=mem)
    c = Conn(HOST, srv.port)
    value = b"x" * 2000
    stored = 0
    for i in range(2 * mem * 1024 * 1024 // len(value)):
        c.send(b"set k%d 0 0 %d\r\n%s\r\n" % (i, len(value), value))
        line = c.readline()
        assert line == b"STORED\r\n", (i, line)
        stored += 1
    st = _stats(c, "")
    assert int(st["limit_maxbytes"]) == mem << 20
    assert int(st["evictions"]) > 0
    c.close()


def test_item_size_in_bytes(spawn):
    """-I in plain bytes: 1024 is memcached's smallest; an item past it is
    refused, a smaller one stored."""
    srv = spawn("-I", "1024", *(["-o", "slab_chunk_max=1024"]
                                if IS_MEMCACHED else []))
    c = Conn(HOST, srv.port)
    assert _stats(c)["item_size_max"] == "1024"
    c.send(b"set small 0 0 500\r\n" + b"s" * 500 + b"\r\n")
    c.expect(b"STORED\r\n")
    c.send(b"set big 0 0 2000\r\n" + b"b" * 2000 + b"\r\n")
    assert c.readline() == b"SERVER_ERROR object too large for cache\r\n"
    c.close()


def test_item_size_below_minimum():
    rc, err = _run_exit(["-U", "0", "-I", "1000"]
                        + (["-u", "root"] if IS_ROOT else []))
    assert rc == 64
    line = _one_line(err)
    assert "1000" in line or "1024" in line, line


@pytest.mark.tiercache_only
def test_small_ext_path(spawn):
    """An ext_path smaller than two 64 MiB segments: smaller segments, one
    line saying so, and values do spill to it."""
    from conftest import flash_file
    path = flash_file("tc-cmdline-ext", ".dat")
    try:
        srv = spawn("-o", f"ext_path={path}:64m", mem=8)
        err = srv.stderr_text()
        assert len(re.findall(r"-o ext_path: too small for 2 segments of 64 "
                              r"MiB; the NVMe store uses 32 MiB segments",
                              err)) == 1, err
        c = Conn(HOST, srv.port)
        value = b"v" * 4000
        for i in range(4000):  # 16 MB of values through an 8 MiB cache
            c.send(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value),
                                                          value))
        c.send(b"mn\r\n")
        c.expect(b"MN\r\n")
        # the flash writer runs beside the workers: wait (bounded) for it
        _wait_for(lambda: int(_stats(c, "")["extstore_objects_written"]),
                  "values written to the small ext_path")
        c.close()
    finally:
        if os.path.exists(path):
            os.unlink(path)


@pytest.mark.tiercache_only
def test_settings_beside_memcached(spawn):
    """Every name memcached 1.6's stats settings shows is in tiercached's,
    but for what has no counterpart; the
    values of the flags given alike agree."""
    if not MEMCACHED.exists():
        pytest.skip(f"{MEMCACHED} not installed (Debian's memcached)")
    flags = ["-C", "-F", "-b", "37", "-R", "7", "-B", "ascii", "-D", "#",
             "-o", "hashpower=16,slab_automove=2,tail_repair_time=60"]
    mc = start_memcached(flags, prefix="tc-cmdline-")
    try:
        c = Conn(HOST, mc.port)
        want = _stats(c)
        c.close()
    finally:
        mc.stop(expect_status=None)
    srv = spawn(*flags)
    c = Conn(HOST, srv.port)
    got = _stats(c)
    c.close()
    absent = {"oldest"}
    missing = [k for k in want if k not in got and k not in absent]
    assert not missing, missing
    for name in ("cas_enabled", "flush_enabled", "tcp_backlog",
                 "reqs_per_event", "binding_protocol", "stat_key_prefix",
                 "hashpower_init", "slab_automove", "tail_repair_time",
                 "evictions", "maxbytes", "item_size_max", "ext_wbuf_size",
                 "watcher_logbuf_size", "lru_crawler", "num_napi_ids",
                 "ssl_enabled", "ssl_chain_cert", "ssl_key", "ssl_verify_mode",
                 "ssl_keyformat", "ssl_ciphers", "ssl_ca_cert", "ssl_wbuf_size",
                 "ssl_session_cache", "ssl_kernel_tls", "ssl_min_version"):
        assert got[name] == want[name], (name, got[name], want[name])
