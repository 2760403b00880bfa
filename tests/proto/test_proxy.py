"""Scale-out through an existing proxy: three servers behind twemproxy
(Debian's nutcracker) with ketama distribution.

Each key must live on exactly one instance (asked directly), and the
proxy's replies must match that instance's: set, get, multiget, delete,
incr, touch. An instance killed is ejected after one failure and its keys
go to the others while the keys of the live instances stay where they were
(consistent hashing); when it comes back on its port it rejoins and its
keys map to it again. nutcracker speaks the text protocol only: a meta
command or a binary request closes the client's connection, no reply.

Skipped when /usr/sbin/nutcracker (Debian package nutcracker) is missing.
Every wait is bounded; servers and the proxy are stopped by PID.
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

import pytest

from conftest import (HOST, IS_ASAN, START_TIMEOUT, STOP_TIMEOUT, Conn,
                      _die_with_parent, _wait_accepting, free_port,
                      start_server)

NUTCRACKER = shutil.which("nutcracker") or "/usr/sbin/nutcracker"
# How long an ejected instance stays out of the ring before nutcracker tries
# it again: short, so that a return is seen quickly; the waits below only
# decide how long a broken setup takes to fail.
RETRY_MS = 300
WAIT = 120.0 if IS_ASAN else 60.0
NKEYS = 60


def _proxy_config(listen_port, servers):
    lines = [
        "tiercache:",
        f"  listen: {HOST}:{listen_port}",
        "  hash: fnv1a_64",
        "  distribution: ketama",
        "  timeout: 5000",
        "  auto_eject_hosts: true",
        f"  server_retry_timeout: {RETRY_MS}",
        "  server_failure_limit: 1",
        "  servers:",
    ]
    for i, srv in enumerate(servers):
        lines.append(f"   - {srv.host}:{srv.port}:1 tc{i}")
    return "\n".join(lines) + "\n"


class Proxy:
    """A started nutcracker: its listen port and process."""

    def __init__(self, servers):
        self.dir = tempfile.mkdtemp(prefix="tc-proxy-")
        self.conf = os.path.join(self.dir, "nutcracker.yml")
        self.log = os.path.join(self.dir, "nutcracker.log")
        for attempt in range(3):
            self.port = free_port()
            stats_port = free_port()
            with open(self.conf, "w") as f:
                f.write(_proxy_config(self.port, servers))
            self.argv = [NUTCRACKER, "-c", self.conf, "-o", self.log,
                         "-p", os.path.join(self.dir, "nutcracker.pid"),
                         "-s", str(stats_port), "-a", HOST]
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                preexec_fn=_die_with_parent)
            if _wait_accepting(self.proc, self.port, START_TIMEOUT):
                return
            self._end()
            if "in use" not in self.log_text().lower() or attempt == 2:
                raise AssertionError(f"{self.argv} did not start:\n"
                                     f"{self.log_text()[-4000:]}")

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def _end(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def stop(self):
        self._end()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def cluster():
    """(servers, proxy): three servers and nutcracker in front of them.
    The test may replace servers[i]; whatever is in the list at teardown
    is stopped (exit status 0 asserted)."""
    if not os.access(NUTCRACKER, os.X_OK):
        pytest.skip(f"{NUTCRACKER} not installed (Debian package nutcracker)")
    servers = []
    proxy = None
    try:
        for _ in range(3):
            servers.append(start_server(threads=2))
        proxy = Proxy(servers)
        yield servers, proxy
    finally:
        if proxy:
            proxy.stop()
        errors = []
        for srv in servers:
            try:
                srv.stop()
            except AssertionError as e:
                errors.append(str(e))
        assert not errors, "\n".join(errors)


def holders(servers, key):
    """{index: value} of the instances that hold key, asked directly."""
    out = {}
    for i, srv in enumerate(servers):
        c = Conn(srv.host, srv.port)
        try:
            v = c.get_value(key)
        finally:
            c.close()
        if v is not None:
            out[i] = v
    return out


def set_through(proxy_conn, key, value):
    """set via the proxy until STORED (bounded). While an ejected
    instance's retry time runs out, the request that tries it again fails
    with SERVER_ERROR; the next one goes elsewhere."""
    deadline = time.monotonic() + WAIT
    req = b"set %s 0 0 %d\r\n%s\r\n" % (key.encode(), len(value), value)
    last = b""
    while time.monotonic() < deadline:
        proxy_conn.send(req)
        last = proxy_conn.readline()
        if last == b"STORED\r\n":
            return
        assert last.startswith(b"SERVER_ERROR"), (
            f"set {key} through the proxy: {last!r}")
        time.sleep(0.02)
    raise AssertionError(f"set {key} through the proxy never stored "
                         f"within {WAIT} s; last reply {last!r}")


def get_through(proxy_conn, key):
    """get via the proxy, again (bounded) while it answers SERVER_ERROR:
    an ejected instance's retry time may run out between requests, and the
    one request that tries it again fails, as in set_through."""
    deadline = time.monotonic() + WAIT
    req = b"get %s\r\n" % key.encode()
    last = b""
    while time.monotonic() < deadline:
        proxy_conn.send(req)
        last = proxy_conn.readline()
        if not last.startswith(b"SERVER_ERROR"):
            if last == b"END\r\n":
                return None
            m = re.match(rb"VALUE (\S+) (\d+) (\d+)\r\n$", last)
            assert m and m.group(1) == key.encode(), (key, last)
            data = proxy_conn.recv_exact(int(m.group(3)) + 2)[:-2]
            assert proxy_conn.readline() == b"END\r\n"
            return data
        time.sleep(0.02)
    raise AssertionError(f"get {key} through the proxy kept failing for "
                         f"{WAIT} s; last reply {last!r}")


def place_keys(servers, pc, tag):
    """Set NKEYS keys through the proxy; return {key: (holder, value)},
    each key held by exactly one instance with the value set."""
    where = {}
    for n in range(NKEYS):
        key = f"{tag}-{n}-{uuid.uuid4().hex[:6]}"
        val = uuid.uuid4().hex.encode()
        pc.set(key, val)
        held = holders(servers, key)
        assert list(held.values()) == [val], (
            f"{key} set through the proxy: held by {held}, expected "
            f"exactly one instance with {val!r}")
        where[key] = (next(iter(held)), val)
    used = {i for i, _ in where.values()}
    assert used == set(range(len(servers))), (
        f"{NKEYS} keys landed only on instances {sorted(used)}")
    return where


def test_commands_land_on_one_instance(cluster):
    servers, proxy = cluster
    pc = Conn(HOST, proxy.port)
    where = place_keys(servers, pc, "route")
    keys = list(where)

    # get and multiget through the proxy: the holders' values
    for key in keys[:10]:
        assert pc.get_value(key) == where[key][1]
    pc.send(("get " + " ".join(keys) + "\r\n").encode())
    raw = pc.read_until(b"END\r\n")
    got = dict(re.findall(rb"VALUE (\S+) 0 \d+\r\n(\S*)\r\n", raw))
    assert raw.endswith(b"END\r\n"), raw[-200:]
    assert got == {k.encode(): v for k, (_, v) in where.items()}
    pc.cmd(b"get nosuch-%s\r\n" % uuid.uuid4().hex.encode(), b"END\r\n")

    # incr: the number on the holder changes, nowhere else
    for key in keys[:12]:
        pc.set(key, "41")
        pc.cmd(b"incr %s 1\r\n" % key.encode(), b"42\r\n")
        assert holders(servers, key) == {where[key][0]: b"42"}

    # touch: the holder's TTL (mg t, asked directly) goes from -1 to 1000
    for key in keys[12:24]:
        holder = servers[where[key][0]]
        hc = Conn(holder.host, holder.port)
        try:
            hc.cmd(b"mg %s t\r\n" % key.encode(), b"HD t-1\r\n")
            pc.cmd(b"touch %s 1000\r\n" % key.encode(), b"TOUCHED\r\n")
            hc.send(b"mg %s t\r\n" % key.encode())
            line = hc.readline()
        finally:
            hc.close()
        m = re.match(rb"HD t(\d+)\r\n$", line)
        assert m and 990 <= int(m.group(1)) <= 1000, (
            f"mg {key} t on its instance after touch: {line!r}")
    pc.cmd(b"touch nosuch-%s 10\r\n" % uuid.uuid4().hex.encode(),
           b"NOT_FOUND\r\n")

    # delete: gone from the holder (and so from every instance)
    for key in keys[24:36]:
        pc.cmd(b"delete %s\r\n" % key.encode(), b"DELETED\r\n")
        assert holders(servers, key) == {}
        pc.cmd(b"delete %s\r\n" % key.encode(), b"NOT_FOUND\r\n")
        pc.cmd(b"get %s\r\n" % key.encode(), b"END\r\n")
    pc.close()


def test_killed_instance_is_ejected_and_rejoins(cluster):
    servers, proxy = cluster
    pc = Conn(HOST, proxy.port)
    where = place_keys(servers, pc, "eject")
    counts = [sum(1 for h, _ in where.values() if h == i)
              for i in range(3)]
    victim = counts.index(max(counts))
    moved = [k for k, (h, _) in where.items() if h == victim]
    stayed = [k for k, (h, _) in where.items() if h != victim]

    dead = servers[victim]
    dead.proc.send_signal(signal.SIGKILL)
    dead.stop(expect_status=None)
    assert dead.proc.returncode == -signal.SIGKILL
    live = [s for i, s in enumerate(servers) if i != victim]

    # ejected: each of its keys stores again, on exactly one live instance
    for key in moved:
        val = uuid.uuid4().hex.encode()
        set_through(pc, key, val)
        held = holders(live, key)
        assert list(held.values()) == [val], (
            f"{key} after instance {victim} died: held by {held}")
        assert get_through(pc, key) == val
    # the live instances' keys did not move
    for key in stayed:
        assert get_through(pc, key) == where[key][1], key

    # back on its port (empty): once the retry time has passed, the
    # proxy tries it again and its keys map to it again
    servers[victim] = start_server(threads=2, port=dead.port)
    back = servers[victim]
    deadline = time.monotonic() + WAIT
    while True:
        assert time.monotonic() < deadline, (
            f"instance {victim} came back on port {back.port} but its keys "
            f"did not map to it within {WAIT} s")
        for key in moved:
            set_through(pc, key, b"back-" + key.encode())
        if all(holders([back], k) for k in moved):
            break
        time.sleep(0.05)
    for key in moved:
        assert pc.get_value(key) == b"back-" + key.encode()
    for key in stayed:
        assert pc.get_value(key) == where[key][1], key
    pc.close()


def test_proxy_passes_text_only(cluster):
    """nutcracker parses the classic text commands only: an `mg` line or a
    binary request header closes the connection without a reply (so does
    `gat`); the servers behind it are untouched."""
    servers, proxy = cluster
    for req in (b"mg somekey v\r\n", b"gat 0 somekey\r\n",
                b"\x80\x00\x00\x00" + b"\x00" * 20):
        c = Conn(HOST, proxy.port, timeout=10)
        try:
            c.send(req)
            assert c.closed_by_peer(), f"{req!r}: connection left open"
            assert c.buf == b"", f"{req!r}: proxy replied {c.buf!r}"
        finally:
            c.close()
    pc = Conn(HOST, proxy.port)
    pc.check_alive()
    pc.close()
    for srv in servers:
        assert srv.alive()
