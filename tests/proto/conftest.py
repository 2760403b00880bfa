"""Fixtures for the protocol tests: a started server and raw-socket clients.

The server under test is TC_SERVER (default build/debug/tiercached, relative
to the repository root). With TC_SERVER_KIND=memcached the same tests run
against Debian's memcached (/usr/bin/memcached unless TC_SERVER says
otherwise) with equivalent flags, which is how the tests themselves are
validated: every test passes against memcached 1.6 except the ones marked
tiercache_only.

Each server runs on 127.0.0.1 on a free port, with a small memory limit and
(tiercache) its own pool file under /dev/shm, removed afterwards. Teardown
sends SIGTERM to that one PID, waits (bounded) and asserts a clean exit:
status 0 and no sanitizer report on stderr.

Fixtures:
  server      one default server per test module (host, port, pid)
  spawn       spawn(*flags, ...) starts more servers for one test
  connect     connect(server=None) opens a raw client (class Conn)
"""

import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

# no __pycache__ in the source tree (run.sh also turns the cache plugin off)
sys.dont_write_bytecode = True

ROOT = Path(__file__).resolve().parents[2]
KIND = os.environ.get("TC_SERVER_KIND", "tiercache")
NET_ENGINE = os.environ.get("TC_NET_ENGINE", "")
IS_MEMCACHED = KIND == "memcached"
_default_bin = "/usr/bin/memcached" if IS_MEMCACHED else "build/debug/tiercached"
SERVER_BIN = Path(os.environ.get("TC_SERVER") or _default_bin)
if not SERVER_BIN.is_absolute():
    SERVER_BIN = ROOT / SERVER_BIN

HOST = "127.0.0.1"
MEM_MIB = 64
# Limits of waits for something that must happen; a fast run never reaches
# them, they only decide how long a broken server takes to fail. Generous, so
# that a slow machine (ASan, a CPU hog, neighbours) does not fail a test.
START_TIMEOUT = 60.0  # seconds until the server accepts
STOP_TIMEOUT = 60.0   # seconds from SIGTERM to exit (ASan builds are slow)
IO_TIMEOUT = 30.0     # seconds a client waits for a reply
SANITIZER_PATTERNS = ("ERROR: AddressSanitizer", "runtime error",
                      "ERROR: LeakSanitizer", "WARNING: ThreadSanitizer")


def _is_asan_binary(path):
    if os.environ.get("TC_ASAN") == "1" or "asan" in path.parts:
        return True
    try:
        with open(path, "rb") as f:
            return b"__asan_init" in f.read()
    except OSError:
        return False


IS_ASAN = (not IS_MEMCACHED) and _is_asan_binary(SERVER_BIN)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "tiercache_only: tests a tiercache-only feature or exact "
        "text; skipped against memcached")


def pytest_collection_modifyitems(config, items):
    if not IS_MEMCACHED:
        return
    skip = pytest.mark.skip(reason="tiercache-only (TC_SERVER_KIND=memcached)")
    for item in items:
        if "tiercache_only" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config):
    return [f"server: {SERVER_BIN} (kind={KIND}, asan={IS_ASAN}, "
            f"net_engine={NET_ENGINE or 'default'})"]


def flash_dir():
    """Where the tests put their flash (ext_path) files: TC_TEST_FLASH_DIR,
    else /tmp. O_DIRECT must work there (ext4, xfs; not tmpfs).
    tests/stress_check.sh --slow-device points it at a throttled device."""
    return os.environ.get("TC_TEST_FLASH_DIR") or "/tmp"


def flash_file(stem, suffix):
    """A fresh file name in flash_dir(): STEM-PID-UUIDSUFFIX."""
    return os.path.join(flash_dir(),
                        f"{stem}-{os.getpid()}-{uuid.uuid4().hex}{suffix}")


def free_port():
    """A TCP port that was free a moment ago (bind port 0, read it back)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def server_argv(port, extra=(), mem=MEM_MIB, pool=None, threads=4):
    """The command line for the server kind under test. Flags shared by
    tiercached and memcached; -e (tiercache's pool file) is left out for
    memcached, where -e means a restartable memory file."""
    argv = [str(SERVER_BIN), "-p", str(port), "-l", HOST, "-U", "0",
            "-m", str(mem), "-t", str(threads)]
    # both refuse to run as root without -u (-u root keeps root)
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    if not IS_MEMCACHED and pool is not None:
        argv += ["-e", pool]
    if not IS_MEMCACHED and NET_ENGINE:
        # TC_NET_ENGINE=epoll (or uring) runs the whole suite on that
        # network loop; the server's default, auto, is uring where the
        # kernel allows it
        argv += ["-o", f"net_engine={NET_ENGINE}"]
    return argv + [str(a) for a in extra]


class Server(tuple):
    """(host, port, pid) of a started server, with its process attached."""

    def __new__(cls, host, port, proc, **kw):
        self = super().__new__(cls, (host, port, proc.pid))
        self.host, self.port, self.pid, self.proc = host, port, proc.pid, proc
        self.__dict__.update(kw)
        self.stopped = False
        return self

    def alive(self):
        return self.proc.poll() is None

    def stderr_text(self):
        try:
            return Path(self.stderr_path).read_text(errors="replace")
        except OSError:
            return ""

    def rss_kib(self):
        """VmRSS from /proc/PID/status, in KiB."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS for pid %d" % self.pid)

    def check_stderr(self):
        """Assert no sanitizer report on stderr."""
        text = self.stderr_text()
        for pat in SANITIZER_PATTERNS:
            assert pat not in text, (
                f"server {self.pid} stderr has {pat!r}:\n{text[-4000:]}")

    def wait_exit(self, timeout=STOP_TIMEOUT):
        """Wait (bounded) for the process to exit; returns its status.
        A negative status is the signal that killed it."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(
                f"server {self.pid} did not exit within {timeout} s; "
                f"killed. stderr:\n{self.stderr_text()[-4000:]}")

    def kill(self):
        """SIGKILL this PID if it still runs, wait, clean up (teardown of
        servers a test may have left running)."""
        self.stopped = True
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.cleanup()

    def stop(self, expect_status=0):
        """SIGTERM this PID only, wait, assert a clean exit. Idempotent."""
        if self.stopped:
            return
        self.stopped = True
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            rc = self.wait_exit()
            if expect_status is not None:
                assert rc == expect_status, (
                    f"server {self.pid} exited with status {rc} after "
                    f"SIGTERM (expected {expect_status}); argv {self.argv}; "
                    f"stderr:\n{self.stderr_text()[-4000:]}")
            self.check_stderr()
        finally:
            self.cleanup()

    def scratch_pool(self):
        """The default pool a tiercached without -e made for its port
        (removed at its clean stop, left by a kill), or None."""
        argv = getattr(self, "argv", None) or []
        if IS_MEMCACHED or not argv or argv[0] != str(SERVER_BIN) \
                or "-e" in argv:
            return None
        return f"/dev/shm/tiercache.{self.port}.pool"

    def cleanup(self):
        # the pool and the index a clean stop saves beside it; the scratch
        # default only once this process has gone (it is its own file)
        pool = self.pool
        if pool is None and self.proc.poll() is not None:
            pool = self.scratch_pool()
        meta = pool + ".meta" if pool else None
        for p in (pool, meta, self.stderr_path, self.stdout_path):
            if p:
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass


def remove_pool(path):
    """Remove a pool file and the state a clean stop saves beside it."""
    for p in (path, path + ".meta"):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """In the child before exec: SIGKILL when pytest goes away, so a killed
    test run leaves no server behind."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _wait_accepting(proc, port, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.02)
    return False


# Debian's memcached, the reference the differential and comparison tests
# start beside tiercached.
MEMCACHED = Path(os.environ.get("TC_MEMCACHED", "/usr/bin/memcached"))


def start_memcached(extra=(), mem=MEM_MIB, prefix="tc-memcached-"):
    """MEMCACHED on a free 127.0.0.1 port with -U 0 -t 2 -m mem and the
    extra flags (-u root as root); a port taken between choosing and
    binding is retried, any other failure to start is an AssertionError."""
    for attempt in range(3):
        port = free_port()
        argv = [str(MEMCACHED), "-p", str(port), "-l", HOST, "-U", "0",
                "-m", str(mem), "-t", "2", *extra]
        if os.geteuid() == 0:
            argv += ["-u", "root"]
        fd_err, err_path = tempfile.mkstemp(prefix=prefix, suffix=".err")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=fd_err,
                                cwd=str(ROOT), preexec_fn=_die_with_parent)
        os.close(fd_err)
        srv = Server(HOST, port, proc, pool=None, stderr_path=err_path,
                     stdout_path=None, argv=argv)
        if _wait_accepting(proc, port, START_TIMEOUT):
            return srv
        err = srv.stderr_text()
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        srv.cleanup()
        if "in use" not in err.lower() or attempt == 2:
            raise AssertionError(f"{argv} did not start: {err}")
    raise AssertionError("no free port")


def start_server(extra=(), mem=MEM_MIB, threads=4, env=None, wait=True,
                 port=None, pool=True):
    """Start a server on a free port; returns a Server once it accepts.
    Retries on a new port when the chosen one was taken meanwhile. With
    port, on that port only (a server coming back where clients expect
    it), once. pool (tiercache): True, a pool file of its own, removed by
    Server.cleanup; a path, that file, which the caller keeps (restarts);
    None, no -e (the server's scratch file)."""
    fixed = port
    for attempt in range(1 if fixed else 3):
        port = fixed or free_port()
        own = pool_arg = None
        if not IS_MEMCACHED and pool is True:
            own = f"/dev/shm/tc-proto-{os.getpid()}-{uuid.uuid4().hex}.pool"
            pool_arg = own
        elif not IS_MEMCACHED:
            pool_arg = pool
        fd_err, err_path = tempfile.mkstemp(prefix="tc-proto-", suffix=".err")
        fd_out, out_path = tempfile.mkstemp(prefix="tc-proto-", suffix=".out")
        argv = server_argv(port, extra, mem, pool_arg, threads)
        run_env = dict(os.environ)
        if env:
            run_env.update(env)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fd_out,
                                stderr=fd_err, env=run_env, cwd=str(ROOT),
                                preexec_fn=_die_with_parent)
        os.close(fd_err)
        os.close(fd_out)
        srv = Server(HOST, port, proc, pool=own, stderr_path=err_path,
                     stdout_path=out_path, argv=argv)
        if not wait:
            return srv
        if _wait_accepting(proc, port, START_TIMEOUT):
            return srv
        err = srv.stderr_text()
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
            srv.cleanup()
            raise AssertionError(f"{argv} did not accept within "
                                 f"{START_TIMEOUT} s; stderr:\n{err}")
        srv.cleanup()
        if "in use" in err.lower() and not fixed and attempt < 2:
            continue
        raise AssertionError(f"{argv} exited with status {proc.returncode} "
                             f"before accepting; stderr:\n{err}")
    raise AssertionError("no free port")


@pytest.fixture(scope="session", autouse=True)
def _server_binary():
    if not SERVER_BIN.exists():
        pytest.fail(f"server binary {SERVER_BIN} does not exist (build it, "
                    f"or set TC_SERVER / TC_SERVER_KIND=memcached)")


def _packed_default():
    """The server's default packed_item_max, as its -h prints it
    (src/server/options.def): 0 when the packed store is off by default.
    0 for memcached and for a binary that is not there (_server_binary
    fails the session)."""
    if IS_MEMCACHED or not SERVER_BIN.exists():
        return 0
    out = subprocess.run([str(SERVER_BIN), "-h"], capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL).stdout
    m = re.search(r"^\s*packed_item_max=\S*\n.*\n\s*default (\d+)", out,
                  re.M)
    if not m:
        raise RuntimeError(f"{SERVER_BIN} -h shows no packed_item_max "
                           f"default")
    return int(m.group(1))


# The store a test names when it tests slab internals (chunks, classes,
# `stats slabs`/`items` counts, page moves): the slabs only, whatever the
# server's default (doc/design/small-items.md, slice 8); memcached has
# nothing else.
SLAB_OPTS = () if IS_MEMCACHED else ("-o", "packed_item_max=0")
PACKED_DEFAULT = _packed_default()

# A module that sets PACKED_TOO = True runs its tests on the shared
# server twice: with default flags and with the other store, so that both
# stay tested whichever is the default: the packed small-item store on
# (doc/operating.md "Packed small items") where the default is off, the
# slabs only where it is on. The ids name the store of each run.
if PACKED_DEFAULT:
    _STORE_RUNS = [((), "packed"), (SLAB_OPTS, "slab")]
else:
    _STORE_RUNS = [((), "slab"), (("-o", "packed_item_max=1024"), "packed")]


def pytest_generate_tests(metafunc):
    if (not IS_MEMCACHED and "server_opts" in metafunc.fixturenames
            and getattr(metafunc.module, "PACKED_TOO", False)):
        metafunc.parametrize("server_opts", [o for o, _ in _STORE_RUNS],
                             indirect=True, scope="module",
                             ids=[i for _, i in _STORE_RUNS])


@pytest.fixture(scope="module")
def server_opts(request):
    """Extra flags of the module's shared server (see PACKED_TOO)."""
    return tuple(getattr(request, "param", ()))


@pytest.fixture(scope="module")
def _module_server(server_opts):
    box = {"srv": start_server(server_opts), "opts": server_opts}
    yield box
    box["srv"].stop()


def _replace_dead(box):
    """The shared server died: start a new one for the tests that follow
    and return the reason (exit status, stderr) of the dead one."""
    dead = box["srv"]
    box["srv"] = start_server(box["opts"])
    try:
        dead.stop()
    except AssertionError as e:
        return str(e)
    return f"server {dead.pid} exited with status 0 unasked"


@pytest.fixture
def server(_module_server):
    """The module's server with default flags (host, port, pid). A test
    that makes it die gets the exit status and stderr as an error at its
    teardown, and the next test gets a new server (no cascade)."""
    if not _module_server["srv"].alive():
        pytest.fail("the shared server died after the previous test: "
                    + _replace_dead(_module_server))
    srv = _module_server["srv"]
    yield srv
    if not srv.alive():
        pytest.fail("the shared server died during this test: "
                    + _replace_dead(_module_server))


@pytest.fixture
def spawn():
    """spawn(*flags, mem=64, threads=4, env=None, wait=True) -> Server.
    Every server started is stopped at teardown (exit status 0 asserted)
    unless the test already stopped it or set srv.stopped."""
    started = []

    def _spawn(*extra, **kw):
        srv = start_server(extra, **kw)
        started.append(srv)
        return srv

    yield _spawn
    errors = []
    for srv in started:
        try:
            srv.stop()
        except AssertionError as e:
            errors.append(str(e))
    assert not errors, "\n".join(errors)


@pytest.fixture
def run_server():
    """run_server(extra, pool=True, timeout=60) -> (status, stderr): run the
    server binary with the standard flags plus `extra`, expecting it to
    exit by itself (bad flags). Killed and failed after `timeout`."""

    def _run(extra, pool=True, timeout=60):
        pool_path = None
        if pool and not IS_MEMCACHED:
            pool_path = f"/dev/shm/tc-proto-bad-{uuid.uuid4().hex}.pool"
        argv = server_argv(free_port(), extra, pool=pool_path)
        try:
            p = subprocess.run(argv, capture_output=True, text=True,
                               timeout=timeout, stdin=subprocess.DEVNULL,
                               cwd=str(ROOT), preexec_fn=_die_with_parent)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{argv} did not exit within {timeout} s")
        finally:
            if pool_path:
                remove_pool(pool_path)
        return p.returncode, p.stderr

    return _run


def _show(b, limit=300):
    """repr of bytes, shortened in the middle when long."""
    if len(b) <= limit:
        return repr(b)
    h = limit // 2
    return f"{b[:h]!r} ...({len(b)} bytes)... {b[-h:]!r}"


class Conn:
    """A raw client socket with exact-reply assertions."""

    def __init__(self, host, port, timeout=IO_TIMEOUT):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = b""
        self.last_sent = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data):
        self.last_sent = data
        self.sock.sendall(data)

    def _fill(self, deadline):
        """One recv into buf; False on EOF or when the deadline passed."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        self.sock.settimeout(left)
        try:
            d = self.sock.recv(1 << 20)
        except socket.timeout:
            return False
        except ConnectionResetError:
            return False
        finally:
            self.sock.settimeout(self.timeout)
        if not d:
            return False
        self.buf += d
        return True

    def recv_exact(self, n, timeout=None):
        """n bytes (or fewer if the server stalls/closes: the caller's
        comparison then fails with what was received)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self.buf) < n and self._fill(deadline):
            pass
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_until(self, term, timeout=None):
        """Bytes up to and including term (or what came before a stall)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        start = 0
        while True:
            i = self.buf.find(term, start)
            if i >= 0:
                out, self.buf = self.buf[:i + len(term)], self.buf[i + len(term):]
                return out
            start = max(0, len(self.buf) - len(term) + 1)
            if not self._fill(deadline):
                out, self.buf = self.buf, b""
                return out

    def readline(self, timeout=None):
        return self.read_until(b"\r\n", timeout)

    def pending(self, wait=0.1):
        """Whatever arrives within `wait` seconds (for checking silence)."""
        deadline = time.monotonic() + wait
        while self._fill(deadline):
            pass
        out, self.buf = self.buf, b""
        return out

    def expect(self, expected, sent=None, timeout=None):
        got = self.recv_exact(len(expected), timeout)
        if got != expected:
            got += self.pending(0.2)
            sent = self.last_sent if sent is None else sent
            raise AssertionError(
                f"\n  sent:     {_show(sent)}\n  expected: {_show(expected)}"
                f"\n  got:      {_show(got)}")

    def cmd(self, sent, expected, timeout=None):
        """Send a request; assert the reply is exactly `expected`."""
        self.send(sent)
        self.expect(expected, sent, timeout)

    def expect_silence(self, wait=0.2, sent=None):
        got = self.pending(wait)
        assert got == b"", (
            f"\n  sent:     {_show(sent if sent is not None else self.last_sent)}"
            f"\n  expected no reply\n  got:      {_show(got)}")

    def closed_by_peer(self, timeout=None):
        """True if the server closes the connection (EOF or RST) within
        timeout; bytes still arriving before that are discarded."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                d = self.sock.recv(1 << 16)
            except socket.timeout:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not d:
                return True
            self.buf += d
        return False

    def stats(self, group=""):
        """A stats group as a dict of name -> value (strings)."""
        line = f"stats {group}".strip() + "\r\n"
        self.send(line.encode())
        raw = self.read_until(b"END\r\n")
        assert raw.endswith(b"END\r\n"), (
            f"sent {line!r}: no END, got {_show(raw)}")
        out = {}
        for ln in raw[:-5].split(b"\r\n"):
            if not ln:
                continue
            m = re.match(rb"STAT (\S+) (.*)$", ln)
            assert m, f"sent {line!r}: bad stats line {ln!r}"
            out[m.group(1).decode()] = m.group(2).decode()
        return out

    def set(self, key, value, flags=0, exptime=0):
        if isinstance(key, str):
            key = key.encode()
        if isinstance(value, str):
            value = value.encode()
        self.cmd(b"set %s %d %d %d\r\n%s\r\n" % (key, flags, exptime,
                                                 len(value), value),
                 b"STORED\r\n")

    def get_value(self, key):
        """The value of key via `get`, or None on a miss."""
        if isinstance(key, str):
            key = key.encode()
        self.send(b"get %s\r\n" % key)
        head = self.readline()
        if head == b"END\r\n":
            return None
        m = re.match(rb"VALUE (\S+) (\d+) (\d+)\r\n$", head)
        assert m and m.group(1) == key, (
            f"sent get {key!r}: bad reply line {_show(head)}")
        n = int(m.group(3))
        data = self.recv_exact(n + 2)
        assert data[n:] == b"\r\n", f"get {key!r}: bad data {_show(data)}"
        self.expect(b"END\r\n", b"get %s\r\n" % key)
        return data[:n]

    def check_alive(self, key=None):
        """A normal set/get round trip on this connection."""
        key = key or "alive-" + uuid.uuid4().hex[:12]
        val = uuid.uuid4().hex.encode()
        self.set(key, val)
        got = self.get_value(key)
        assert got == val, f"get {key}: expected {val!r}, got {got!r}"


@pytest.fixture
def connect(server):
    """connect(srv=None, timeout=30) -> Conn to srv (default: the module's
    server). Every connection is closed at teardown."""
    conns = []

    def _connect(srv=None, timeout=IO_TIMEOUT):
        srv = srv or server
        c = Conn(srv[0], srv[1], timeout)
        conns.append(c)
        return c

    yield _connect
    for c in conns:
        c.close()


@pytest.fixture
def mc(connect):
    """One raw connection to the module's server."""
    return connect()


@pytest.fixture
def key(request):
    """A key unique to the test (so tests sharing a server don't collide)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:60]
    return f"{name}-{uuid.uuid4().hex[:8]}"
