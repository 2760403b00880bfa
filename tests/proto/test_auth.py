"""Authentication as memcached does it: -Y (a file of user:password lines,
the text protocol's login) and -S (SASL over the binary protocol, through
Cyrus SASL with a sasldb made by saslpasswd2).

-Y: before a login every line is "CLIENT_ERROR unauthenticated"; the login
is a "set" whose data is "user password", answered STORED or
"CLIENT_ERROR authentication failure".
-S: only VERSION and the SASL opcodes (0x20 LIST_MECHS, 0x21 AUTH, 0x22
STEP) run before SASL succeeds; anything else gets status 0x20 and the
connection is closed; the text protocol is refused (closed, no reply).
pymemcache has no SASL, so the binary requests go over a raw socket, and
libmemcached's memcstat logs in with --username/--password.

Runs against memcached too (TC_SERVER_KIND=memcached), except what only
tiercached does (marked tiercache_only): one reply a line when lines
arrive pipelined before a login (memcached answers the first only), the
one-line refusals of a bad auth file or flag pair, and a long login
swallowed.
"""

import os
import shutil
import signal
import struct
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import (HOST, ROOT, Conn, _die_with_parent, free_port,
                      remove_pool, server_argv)

USERS = {"foo": "bar", "baaaz": "quux", "carol": "pa:ss"}


# ---- -Y ------------------------------------------------------------------


@pytest.fixture
def authfile(tmp_path):
    p = tmp_path / "authfile"
    p.write_text("".join(f"{u}:{pw}\n" for u, pw in USERS.items()))
    return p


@pytest.fixture
def ysrv(spawn, authfile):
    return spawn("-Y", str(authfile))


def login_cmd(user, pw, key=b"auth"):
    data = f"{user} {pw}".encode()
    return b"set %s 0 0 %d\r\n%s\r\n" % (key, len(data), data)


def test_unauthenticated_replies(ysrv):
    c = Conn(*ysrv[:2])
    try:
        for line in (b"get foo\r\n", b"version\r\n", b"stats\r\n",
                     b"mn\r\n", b"mg foo v\r\n", b"delete foo\r\n",
                     b"quit\r\n", b"bogus\r\n", b"set foo 0 0\r\n",
                     b"set foo 0 0 abc\r\n", b"\r\n"):
            c.cmd(line, b"CLIENT_ERROR unauthenticated\r\n")
        # the connection is still open, and a login works on it
        c.cmd(login_cmd("foo", "bar"), b"STORED\r\n")
        c.send(b"version\r\n")
        assert c.readline().startswith(b"VERSION ")
    finally:
        c.close()


@pytest.mark.tiercache_only
def test_unauthenticated_pipelined(ysrv):
    """Every line gets its reply; a data block of a refused store is read
    as a line of its own (memcached answers only the first line of a
    read before a login)."""
    c = Conn(*ysrv[:2])
    try:
        c.cmd(b"get a\r\nadd foo 0 0 7\r\nfoo bar\r\nms k 2\r\nhi\r\n",
              b"CLIENT_ERROR unauthenticated\r\n" * 5)
    finally:
        c.close()


@pytest.mark.parametrize("data, reply", [
    (b"foo bab", b"CLIENT_ERROR authentication failure\r\n"),
    (b"foo barr", b"CLIENT_ERROR authentication failure\r\n"),
    (b"foo ba", b"CLIENT_ERROR authentication failure\r\n"),
    (b"nobody bar", b"CLIENT_ERROR authentication failure\r\n"),
    (b"foo quux", b"CLIENT_ERROR authentication failure\r\n"),  # baaaz's
    (b"foo bar\n", b"CLIENT_ERROR authentication failure\r\n"),
    (b"foo:bar", b"CLIENT_ERROR bad authentication token format\r\n"),
    (b"foobar", b"CLIENT_ERROR bad authentication token format\r\n"),
    (b"foo ", b"CLIENT_ERROR bad authentication token format\r\n"),
])
def test_bad_login(ysrv, data, reply):
    c = Conn(*ysrv[:2])
    try:
        c.cmd(b"set k 0 0 %d\r\n%s\r\n" % (len(data), data), reply)
        c.cmd(b"get k\r\n", b"CLIENT_ERROR unauthenticated\r\n")
        c.cmd(login_cmd("foo", "bar"), b"STORED\r\n")
    finally:
        c.close()


def test_bad_termination(ysrv):
    c = Conn(*ysrv[:2])
    try:
        c.cmd(b"set k 0 0 7\r\nfoo barXX",
              b"CLIENT_ERROR bad command line termination\r\n")
        c.cmd(b"get k\r\n", b"CLIENT_ERROR unauthenticated\r\n")
    finally:
        c.close()


def test_long_login_refused(ysrv):
    c = Conn(*ysrv[:2])
    try:
        c.cmd(b"set k 0 0 2000\r\n" + b"x" * 2000 + b"\r\n",
              b"CLIENT_ERROR bad authentication token format\r\n")
        c.cmd(login_cmd("foo", "bar"), b"STORED\r\n")
    finally:
        c.close()


@pytest.mark.tiercache_only
def test_huge_login_swallowed(ysrv):
    """A login's data over 1 KiB is refused from its line and discarded as
    it comes, never buffered; the connection goes on."""
    c = Conn(*ysrv[:2])
    try:
        n = 200_000
        c.send(b"set k 0 0 %d\r\n" % n)
        c.expect(b"CLIENT_ERROR bad authentication token format\r\n")
        c.send(b"y" * n + b"\r\n")
        c.cmd(login_cmd("foo", "bar"), b"STORED\r\n")
        c.check_alive()
    finally:
        c.close()


@pytest.mark.tiercache_only
def test_long_line_before_login_closes(ysrv):
    """Before a login a get line gets no more room than any other line
    (PROTO_LINE_MAX, 8 KiB): it is refused and the connection closed."""
    c = Conn(*ysrv[:2])
    try:
        c.send(b"get " + b"k " * 8192)
        c.expect(b"CLIENT_ERROR line too long\r\n")
        assert c.closed_by_peer()
    finally:
        c.close()


def test_login_then_commands(ysrv):
    c = Conn(*ysrv[:2])
    try:
        # noreply and the key are ignored: the login is always answered
        data = b"foo bar"
        c.cmd(b"set loginkey 5 0 %d noreply\r\n%s\r\n" % (len(data), data),
              b"STORED\r\n")
        c.cmd(b"get loginkey\r\n", b"END\r\n")  # nothing was stored
        c.check_alive()
        c.cmd(b"mn\r\n", b"MN\r\n")
        key = "meta-" + uuid.uuid4().hex[:8]
        c.cmd(b"ms %s 2\r\nhi\r\n" % key.encode(), b"HD\r\n")
        c.cmd(b"mg %s v\r\n" % key.encode(), b"VA 2\r\nhi\r\n")
        # a second "set" is an ordinary set now
        c.cmd(login_cmd("foo", "bar", key=b"plain"), b"STORED\r\n")
        assert c.get_value("plain") == b"foo bar"
    finally:
        c.close()


def test_login_split_across_reads(ysrv):
    c = Conn(*ysrv[:2])
    try:
        c.send(b"set k 0 0 7\r\nfoo ")
        c.expect_silence()
        c.send(b"bar")
        c.expect_silence()
        c.cmd(b"\r\n", b"STORED\r\n")
        c.check_alive()
    finally:
        c.close()


def test_several_users(ysrv):
    conns = [Conn(*ysrv[:2]) for _ in USERS]
    try:
        for c, (user, pw) in zip(conns, USERS.items()):
            c.cmd(login_cmd(user, pw), b"STORED\r\n")
        key = "shared-" + uuid.uuid4().hex[:8]
        conns[0].set(key, "v1")
        assert conns[1].get_value(key) == b"v1"
        assert conns[2].get_value(key) == b"v1"
        # each connection logs in on its own
        fresh = Conn(*ysrv[:2])
        conns.append(fresh)
        fresh.cmd(b"get %s\r\n" % key.encode(),
                  b"CLIENT_ERROR unauthenticated\r\n")
    finally:
        for c in conns:
            c.close()


def test_binary_bytes_read_as_text(ysrv):
    """Under -Y every connection speaks text (memcached's login reads any
    bytes as lines): a binary NOOP's header holds a "\\n" (opcode 0x0a)."""
    c = Conn(*ysrv[:2])
    try:
        c.cmd(bin_req(NOOP), b"CLIENT_ERROR unauthenticated\r\n")
    finally:
        c.close()


def test_auth_stats(ysrv):
    c = Conn(*ysrv[:2])
    try:
        c.cmd(login_cmd("foo", "nope"),
              b"CLIENT_ERROR authentication failure\r\n")
        c.cmd(login_cmd("foo", "bar"), b"STORED\r\n")
        st = c.stats()
        assert st["auth_cmds"] == "2"
        assert st["auth_errors"] == "1"
        assert c.stats("settings")["auth_enabled_ascii"] == str(
            Path(ysrv.argv[ysrv.argv.index("-Y") + 1]))
    finally:
        c.close()


def _login_reply(srv, user, pw):
    c = Conn(*srv[:2])
    try:
        c.send(login_cmd(user, pw))
        return c.readline()
    finally:
        c.close()


def test_sighup_reloads_authfile(ysrv, authfile):
    """SIGHUP reads the file again (memcached: within its one-second
    clock tick): the new password logs in, the old one no longer does."""
    assert _login_reply(ysrv, "foo", "bar") == b"STORED\r\n"
    authfile.write_text("foo:rotated\n")
    os.kill(ysrv.pid, signal.SIGHUP)
    deadline = time.monotonic() + 30
    while _login_reply(ysrv, "foo", "rotated") != b"STORED\r\n":
        assert time.monotonic() < deadline, "the new password never worked"
        time.sleep(0.05)
    assert _login_reply(ysrv, "foo", "bar") == \
        b"CLIENT_ERROR authentication failure\r\n"
    assert ysrv.alive()


@pytest.mark.tiercache_only
def test_sighup_bad_file_keeps_users(ysrv, authfile):
    """A file that no longer loads leaves the users loaded before (one log
    line says why), and the server runs on."""
    authfile.write_text("no colon here\n")
    os.kill(ysrv.pid, signal.SIGHUP)
    deadline = time.monotonic() + 30
    while "SIGHUP:" not in ysrv.stderr_text():
        assert time.monotonic() < deadline, ysrv.stderr_text()
        time.sleep(0.05)
    assert "line 1 has no ':'" in ysrv.stderr_text()
    assert _login_reply(ysrv, "foo", "bar") == b"STORED\r\n"


def test_sighup_without_authfile(spawn):
    srv = spawn()
    os.kill(srv.pid, signal.SIGHUP)
    c = Conn(*srv[:2])
    try:
        c.check_alive()
    finally:
        c.close()
    assert srv.alive()


def _one_line(err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line, got {err!r}"
    return lines[0]


@pytest.mark.tiercache_only
@pytest.mark.parametrize("content, why", [
    (None, "cannot open"),
    ("", "has no user:password line"),
    ("foo\n", "line 1 has no ':'"),
    ("foo:bar\n\nbaz:qux\n", "line 2 is empty"),
    ("foo:bar\n:bar\n", "line 2 has an empty user"),
    ("foo:\n", "line 1 has an empty password"),
    ("foo:b ar\n", "line 1 has a space"),
    ("# users\nfoo:bar\n", "line 1 has no ':'"),
])
def test_bad_authfile_exits(run_server, tmp_path, content, why):
    path = tmp_path / "authfile"
    if content is not None:
        path.write_text(content)
    rc, err = run_server(["-Y", str(path)])
    assert rc != 0
    line = _one_line(err)
    assert line.startswith("tiercached: -Y: ") and str(path) in line, line
    assert why in line, line


def test_unreadable_authfile_exits(run_server, authfile):
    """The file is read after -u drops root, as memcached does: a file only
    root may read stops a server run as nobody, with one line."""
    if os.geteuid() == 0:
        authfile.chmod(0o600)  # root's; the server runs as nobody
        extra = ["-u", "nobody"]
    else:
        authfile.chmod(0)
        extra = []
    rc, err = run_server(["-Y", str(authfile)] + extra)
    assert rc != 0
    line = _one_line(err)
    assert "Permission denied" in line and str(authfile) in line, line


@pytest.mark.tiercache_only
def test_authfile_directory_exits(run_server, tmp_path):
    rc, err = run_server(["-Y", str(tmp_path)])
    assert rc != 0
    assert "is not a regular file" in _one_line(err)


@pytest.mark.tiercache_only
def test_authfile_last_line_without_newline(spawn, tmp_path):
    p = tmp_path / "authfile2"
    p.write_text("foo:bar\r\nzed:last")  # CRLF and no final newline
    srv = spawn("-Y", str(p))
    for user, pw in (("foo", "bar"), ("zed", "last")):
        c = Conn(*srv[:2])
        try:
            c.cmd(login_cmd(user, pw), b"STORED\r\n")
        finally:
            c.close()


@pytest.mark.tiercache_only
@pytest.mark.parametrize("flags, text", [
    (["-S", "-Y", "AUTHFILE"], "-S and -Y"),
    (["-S", "-B", "ascii"], "-S: you cannot allow the ASCII protocol"),
    (["-S", "-B", "auto"], "-S: you cannot allow the ASCII protocol"),
    (["-Y", "AUTHFILE", "-B", "binary"], "-Y: the login is a text command"),
])
def test_auth_flag_pairs_refused(run_server, authfile, flags, text):
    flags = [str(authfile) if f == "AUTHFILE" else f for f in flags]
    rc, err = run_server(flags)
    assert rc == 64
    assert text in _one_line(err)


# ---- binary protocol helpers ---------------------------------------------

NOOP, VERSION, GET, SET, STAT = 0x0a, 0x0b, 0x00, 0x01, 0x10
LIST_MECHS, SASL_AUTH, SASL_STEP = 0x20, 0x21, 0x22


def bin_req(op, key=b"", value=b"", extras=b"", opaque=0):
    body = len(key) + len(extras) + len(value)
    return struct.pack(">BBHBBHIIQ", 0x80, op, len(key), len(extras), 0, 0,
                       body, opaque, 0) + extras + key + value


def bin_reply(c):
    """(opcode, status, key, value) of the next response, or None when the
    server closed the connection."""
    h = c.recv_exact(24)
    if len(h) < 24:
        return None
    magic, op, kl, el, _, status, bl, _, _ = struct.unpack(">BBHBBHIIQ", h)
    assert magic == 0x81, h
    body = c.recv_exact(bl)
    assert len(body) == bl
    return op, status, body[el:el + kl], body[el + kl:]


def bin_call(c, pkt):
    c.send(pkt)
    r = bin_reply(c)
    assert r is not None, f"closed after {pkt!r}"
    return r


def sasl_plain(c, user, pw):
    return bin_call(c, bin_req(SASL_AUTH, b"PLAIN",
                               b"\0" + user.encode() + b"\0" + pw.encode()))


# ---- -S ------------------------------------------------------------------

SASL_USERS = {"alice": "secret", "bob": "hunter2"}
PLAIN_PLUGIN_DIRS = ("/usr/lib/x86_64-linux-gnu/sasl2", "/usr/lib/sasl2")


@pytest.fixture(scope="module")
def sasl_conf(tmp_path_factory):
    """A directory with memcached.conf (mech_list: plain) and the sasldb it
    names, made by saslpasswd2; what SASL_CONF_PATH points at."""
    tool = shutil.which("saslpasswd2") or (
        "/usr/sbin/saslpasswd2" if os.path.exists("/usr/sbin/saslpasswd2")
        else None)
    if not tool:
        pytest.skip("saslpasswd2 not installed (sasl2-bin: see .ci/deps)")
    if not any(Path(d, "libplain.so").exists() or
               Path(d, "libplain.so.2").exists() for d in PLAIN_PLUGIN_DIRS):
        pytest.skip("Cyrus SASL's PLAIN plugin is not installed "
                    "(libsasl2-modules: see .ci/deps)")
    d = tmp_path_factory.mktemp("sasl")
    db = d / "sasldb2"
    for user, pw in SASL_USERS.items():
        p = subprocess.run([tool, "-p", "-a", "memcached", "-c", "-f",
                            str(db), user], input=pw.encode(),
                           capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr
    (d / "memcached.conf").write_text(
        f"mech_list: plain\nsasldb_path: {db}\n")
    return d


@pytest.fixture
def ssrv(spawn, sasl_conf):
    return spawn("-S", env={"SASL_CONF_PATH": str(sasl_conf)})


def test_sasl_list_mechs(ssrv):
    c = Conn(*ssrv[:2])
    try:
        op, status, _, value = bin_call(c, bin_req(LIST_MECHS))
        assert (op, status) == (LIST_MECHS, 0)
        assert b"PLAIN" in value.split(b" ")
    finally:
        c.close()


def test_sasl_version_before_auth(ssrv):
    c = Conn(*ssrv[:2])
    try:
        op, status, _, value = bin_call(c, bin_req(VERSION))
        assert (op, status) == (VERSION, 0) and value
    finally:
        c.close()


@pytest.mark.parametrize("pkt", [bin_req(GET, b"k"), bin_req(NOOP),
                                 bin_req(STAT)])
def test_sasl_unauthenticated_refused(ssrv, pkt):
    c = Conn(*ssrv[:2])
    try:
        assert bin_call(c, pkt)[1:] == (0x20, b"", b"Auth failure.")
        assert c.closed_by_peer()
    finally:
        c.close()


def test_sasl_text_refused(ssrv):
    """-S means the binary protocol only: text is closed without a reply
    once a request header's worth (24 bytes) is in, as memcached does."""
    c = Conn(*ssrv[:2])
    try:
        c.send(b"version\r\n" * 3)
        assert c.closed_by_peer()
        assert c.buf == b""
    finally:
        c.close()


def test_sasl_plain_login(ssrv):
    c = Conn(*ssrv[:2])
    try:
        assert sasl_plain(c, "alice", "secret") == (SASL_AUTH, 0, b"",
                                                    b"Authenticated")
        key = b"sasl-" + uuid.uuid4().hex[:8].encode()
        assert bin_call(c, bin_req(SET, key, b"v", b"\0" * 8))[:2] == (SET, 0)
        op, status, _, value = bin_call(c, bin_req(GET, key))
        assert (op, status, value) == (GET, 0, b"v")
    finally:
        c.close()


def test_sasl_second_user_and_authzid(ssrv):
    c, d = Conn(*ssrv[:2]), Conn(*ssrv[:2])
    try:
        assert sasl_plain(c, "bob", "hunter2")[1] == 0
        assert bin_call(c, bin_req(NOOP))[:2] == (NOOP, 0)
        # PLAIN with an authorization id equal to the user
        r = bin_call(d, bin_req(SASL_AUTH, b"PLAIN",
                                b"alice\0alice\0secret"))
        assert r[1] == 0 and r[3] == b"Authenticated"
        assert bin_call(d, bin_req(NOOP))[:2] == (NOOP, 0)
    finally:
        c.close()
        d.close()


@pytest.mark.parametrize("user, pw", [("alice", "wrong"), ("alice", "hunter2"),
                                      ("mallory", "secret"), ("alice", "")])
def test_sasl_wrong_password(ssrv, user, pw):
    c = Conn(*ssrv[:2])
    try:
        assert sasl_plain(c, user, pw) == (SASL_AUTH, 0x20, b"",
                                           b"Auth failure.")
        # still not logged in: the next ordinary request closes
        assert bin_call(c, bin_req(GET, b"k"))[1] == 0x20
        assert c.closed_by_peer()
    finally:
        c.close()


def test_sasl_bad_requests(ssrv):
    c = Conn(*ssrv[:2])
    try:
        # an unknown mechanism, and a STEP with no AUTH before it
        assert bin_call(c, bin_req(SASL_AUTH, b"NOSUCHMECH", b"x"))[1] == 0x20
        assert bin_call(c, bin_req(SASL_STEP, b"PLAIN", b"x"))[1] == 0x20
        assert bin_call(c, bin_req(SASL_AUTH, b"PLAIN", b"garbage"))[1] == 0x20
        assert bin_call(c, bin_req(SASL_STEP, b"PLAIN", b"x"))[1] == 0x20
        assert sasl_plain(c, "alice", "secret")[1] == 0
        assert bin_call(c, bin_req(SASL_STEP, b"PLAIN", b"x"))[1] == 0x20
        assert bin_call(c, bin_req(VERSION))[1] == 0
        # no mechanism at all: invalid arguments, and the stream is lost
        assert bin_call(c, bin_req(SASL_AUTH))[1:] == (4, b"",
                                                       b"Invalid arguments")
        assert c.closed_by_peer()
    finally:
        c.close()


def _stats_settings(c):
    c.send(bin_req(STAT, b"settings"))
    out = {}
    for _ in range(1000):
        op, status, key, value = bin_reply(c)
        assert (op, status) == (STAT, 0)
        if not key:
            return out
        out[key.decode()] = value.decode()
    raise AssertionError("no end of the stats")


def test_sasl_stats(ssrv):
    c = Conn(*ssrv[:2])
    try:
        assert sasl_plain(c, "alice", "nope")[1] == 0x20
        assert sasl_plain(c, "alice", "secret")[1] == 0
        st = _stats_settings(c)
        assert st["auth_enabled_sasl"] == "yes"
        assert st["binding_protocol"] == "binary"
        c.send(bin_req(STAT))
        general = {}
        for _ in range(1000):
            _, _, key, value = bin_reply(c)
            if not key:
                break
            general[key.decode()] = value.decode()
        assert general["auth_cmds"] == "2" and general["auth_errors"] == "1"
    finally:
        c.close()


def _memcstat(srv, user, pw):
    tool = shutil.which("memcstat") or shutil.which("memstat")
    if not tool:
        pytest.skip("libmemcached's memcstat not installed "
                    "(libmemcached-tools: see .ci/deps)")
    return subprocess.run([tool, "--binary", "--username", user,
                           "--password", pw, "--servers",
                           f"{HOST}:{srv.port}"],
                          capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_sasl_memcstat(ssrv):
    p = _memcstat(ssrv, "alice", "secret")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "pid:" in p.stdout and "uptime:" in p.stdout, p.stdout


def test_sasl_memcstat_wrong_password(ssrv):
    p = _memcstat(ssrv, "alice", "not-the-password")
    assert p.returncode != 0
    assert "pid:" not in p.stdout
    assert "AUTHENTICATION FAILURE" in (p.stdout + p.stderr).upper()


@pytest.mark.tiercache_only
def test_sasl_without_mechanism_exits(tmp_path):
    """A SASL configuration that offers nothing stops the server with one
    line (memcached starts and refuses every login)."""
    (tmp_path / "memcached.conf").write_text("mech_list: nosuchmech\n")
    pool = f"/dev/shm/tc-proto-sasl-{uuid.uuid4().hex}.pool"
    argv = server_argv(free_port(), ["-S"], pool=pool)
    env = dict(os.environ, SASL_CONF_PATH=str(tmp_path))
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL, env=env, cwd=str(ROOT),
                           preexec_fn=_die_with_parent)
    finally:
        remove_pool(pool)
    assert p.returncode != 0
    assert "-S: SASL offers no mechanism" in _one_line(p.stderr)
