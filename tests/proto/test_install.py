"""`make install` into a temporary DESTDIR: the files land where they
should, the shared library carries its soname, an embedding program built
with `pkg-config --cflags --libs tiercache` against the installed tree
links and runs (dynamically and statically), and the man page renders.

The build installed is the one of the server under test
(build/<variant>/tiercached): debug or release; the sanitizer builds need
their runtime in every program that links them and are skipped."""

import contextlib
import os
import shutil
import signal
import socket
import subprocess

import pytest

from conftest import IS_MEMCACHED, ROOT, SERVER_BIN, remove_pool

PREFIX = "/usr"
MAKE_TIMEOUT = 900
RUN_TIMEOUT = 60

EMBED_C = r"""
#include <stdio.h>
#include <string.h>
#include <tiercache.h>
int main(int argc, char **argv) {
    struct tc_config cfg; struct tc_cache *c; struct tc_item_info info;
    char buf[64];
    tc_config_init(&cfg); cfg.pool_path = argv[argc - 1];
    if (tc_open(&cfg, &c) != 0) { fprintf(stderr, "%s\n", tc_errmsg()); return 1; }
    if (tc_set(c, "k", 1, "hello", 5, 7, 0) != TC_OK) return 2;
    if (tc_get_copy(c, "k", 1, buf, sizeof buf, &info) != TC_OK) return 3;
    printf("%.*s %u\n", (int)info.vlen, buf, (unsigned)info.flags);
    tc_close(c); return 0; }
"""


def _variant():
    if IS_MEMCACHED:
        pytest.skip("installs tiercache's own build; nothing to install "
                    "for memcached")
    parent = SERVER_BIN.resolve().parent
    if parent.parent != ROOT / "build":
        pytest.skip(f"{SERVER_BIN} is not a build/<variant>/ binary of this "
                    f"tree")
    if parent.name not in ("debug", "release"):
        pytest.skip(f"the {parent.name} build needs its sanitizer runtime "
                    f"in every program linking it; install is checked with "
                    f"debug and release")
    return parent.name


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    variant = _variant()
    dest = tmp_path_factory.mktemp("destdir")
    r = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "install", f"DESTDIR={dest}",
         f"PREFIX={PREFIX}", f"INSTALL_VARIANT={variant}"],
        capture_output=True, text=True, timeout=MAKE_TIMEOUT)
    assert r.returncode == 0, f"make install failed:\n{r.stdout}{r.stderr}"
    return dest


def _p(dest, rel):
    return dest / (PREFIX.lstrip("/")) / rel


def test_install_files(installed):
    lib = _p(installed, "lib")
    for rel in ("bin/tiercached", "lib/libtiercache.so.0.1.0",
                "lib/libtiercache.a", "include/tiercache.h",
                "lib/pkgconfig/tiercache.pc",
                "share/man/man1/tiercached.1"):
        assert _p(installed, rel).is_file(), rel
    assert os.access(_p(installed, "bin/tiercached"), os.X_OK)
    assert os.readlink(lib / "libtiercache.so.0") == "libtiercache.so.0.1.0"
    assert os.readlink(lib / "libtiercache.so") == "libtiercache.so.0"
    dyn = subprocess.run(["readelf", "-d", str(lib / "libtiercache.so.0.1.0")],
                         capture_output=True, text=True, check=True).stdout
    assert "Library soname: [libtiercache.so.0]" in dyn, dyn
    # the public header stands alone: nothing from the source tree
    hdr = _p(installed, "include/tiercache.h").read_text()
    local = [ln for ln in hdr.splitlines()
             if ln.lstrip().startswith("#") and "include" in ln and '"' in ln]
    assert not local, local
    r = subprocess.run([str(_p(installed, "bin/tiercached")), "-V"],
                       capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert r.returncode == 0 and r.stdout.startswith("tiercached "), r


def _pkg_config(dest, *args):
    env = dict(os.environ,
               PKG_CONFIG_PATH=str(_p(dest, "lib/pkgconfig")),
               PKG_CONFIG_SYSROOT_DIR=str(dest))
    r = subprocess.run(["pkg-config", *args, "tiercache"], env=env,
                       capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


@pytest.mark.parametrize("link", ["shared", "static"])
def test_pkg_config_embedding(installed, tmp_path, link):
    if shutil.which("pkg-config") is None:
        pytest.skip("pkg-config is not installed (see .ci/deps)")
    assert _pkg_config(installed, "--modversion") == ["0.1.0"]
    cflags = _pkg_config(installed, "--cflags")
    if link == "shared":
        libs = _pkg_config(installed, "--libs")
    else:
        libs = ["-l:libtiercache.a" if a == "-ltiercache" else a
                for a in _pkg_config(installed, "--libs", "--static")]
        assert "-lpmem" in libs and "-luring" in libs, libs
    src = tmp_path / "embed.c"
    src.write_text(EMBED_C)
    exe = tmp_path / "embed"
    r = subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", *cflags,
                        str(src), "-o", str(exe), *libs],
                       capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert r.returncode == 0, r.stderr
    pool = f"/dev/shm/tc-install-{os.getpid()}-{link}.pool"
    env = dict(os.environ, LD_LIBRARY_PATH=str(_p(installed, "lib")))
    try:
        r = subprocess.run([str(exe), pool], env=env, capture_output=True,
                           text=True, timeout=RUN_TIMEOUT)
    finally:
        remove_pool(pool)
    assert r.returncode == 0 and r.stdout == "hello 7\n", r
    ldd = subprocess.run(["ldd", str(exe)], env=env, capture_output=True,
                         text=True, timeout=RUN_TIMEOUT).stdout
    if link == "shared":
        assert str(_p(installed, "lib/libtiercache.so.0")) in ldd, ldd
    else:
        assert "libtiercache" not in ldd, ldd


def test_man_page_renders(installed):
    page = _p(installed, "share/man/man1/tiercached.1")
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8")
    if shutil.which("man"):
        argv = ["man", "--warnings", "-l", str(page)]
    elif shutil.which("groff"):
        argv = ["groff", "-man", "-Tutf8", "-ww", str(page)]
    else:
        pytest.skip("neither man nor groff is installed")
    r = subprocess.run(argv, env=env, capture_output=True, text=True,
                       timeout=RUN_TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr  # no roff warnings
    for word in ("SYNOPSIS", "OPTIONS", "EXTENDED OPTIONS", "FILES",
                 "SIGNALS", "--memory-limit", "ext_path"):
        assert word in r.stdout, word


# ---- the systemd unit and its wrapper ---------------------------------------

DEBIAN_UNIT = "/lib/systemd/system/memcached.service"


def _unit_settings(path):
    """{key: value} of a unit file's [Service] section."""
    out, section = {}, None
    for ln in open(path):
        ln = ln.strip()
        if not ln or ln.startswith("#"):
            continue
        if ln.startswith("["):
            section = ln
        elif section == "[Service]":
            k, _, v = ln.partition("=")
            out[k] = v
    return out


def test_unit_verifies(installed, tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd)")
    unit = _p(installed, "lib/systemd/system/tiercached.service")
    text = unit.read_text()
    assert ("ExecStart=/usr/share/tiercached/scripts/tiercached-wrapper "
            "/etc/tiercached.conf\n") in text
    # the installed paths are under DESTDIR: point ExecStart there, and
    # let the Documentation= check find the installed man page
    staged = tmp_path / "tiercached.service"
    staged.write_text(text.replace("ExecStart=/", f"ExecStart={installed}/"))
    env = dict(os.environ, MANPATH=str(_p(installed, "share/man")))
    r = subprocess.run(["systemd-analyze", "verify", str(staged)], env=env,
                       capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_unit_keeps_debian_hardening(installed):
    if not os.path.exists(DEBIAN_UNIT):
        pytest.skip(f"{DEBIAN_UNIT} is missing (Debian's memcached package)")
    ours = _unit_settings(_p(installed, "lib/systemd/system/tiercached.service"))
    theirs = _unit_settings(DEBIAN_UNIT)
    for k, v in theirs.items():
        if k in ("ExecStart", "PIDFile"):
            continue
        assert ours.get(k) == v, (k, v, ours.get(k))
    assert ours["PIDFile"] == "/run/tiercached/tiercached.pid"


def test_wrapper_starts_shipped_config(installed, tmp_path):
    """The unit's command line, run by hand: the wrapper with the shipped
    config, only the port, the pid file and (as root) the user swapped."""
    from conftest import free_port

    shipped = installed / "etc/tiercached.conf"  # SYSCONFDIR is /etc
    text = shipped.read_text()
    # Debian's memcached.conf defaults
    for line in ("-d", "logfile /var/log/tiercached.log", "-m 64",
                 "-p 11211", "-u memcache", "-l 127.0.0.1",
                 "-P /var/run/tiercached/tiercached.pid"):
        assert f"\n{line}\n" in text, line
    port = free_port()
    pidfile = tmp_path / "tiercached.pid"
    user = "root" if os.geteuid() == 0 else "nobody"  # ignored unless root
    conf = tmp_path / "tiercached.conf"
    conf.write_text(text.replace("\n-p 11211\n", f"\n-p {port}\n")
                    .replace("\n-u memcache\n", f"\n-u {user}\n")
                    .replace("\n-P /var/run/tiercached/tiercached.pid\n",
                             f"\n-P {pidfile}  # pid file \\# here\n"))
    with _wrapper_server(installed, conf, port, tmp_path) as proc:
        # the wrapper execs the server in the foreground (-d dropped), so
        # the unit's main pid is the server's, which -P wrote
        assert pidfile.read_text() == f"{proc.pid}\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert not pidfile.exists()


def test_wrapper_format(installed, tmp_path):
    """memcached.conf's format as its wrapper reads it: comments, blank
    lines, a directive and -h skipped, several words on a line, and -u root
    added when no -u line is there (as root tiercached refuses to start
    without one)."""
    from conftest import free_port

    port = free_port()
    conf = tmp_path / "tiercached.conf"
    conf.write_text(f"""# a comment
  -p {port}   # the port

logfile /nonexistent/dir/tiercached.log
-h
-l 127.0.0.1 -m 8
-o idle_timeout=0,hash_items=1000
""")
    with _wrapper_server(installed, conf, port, tmp_path) as proc:
        assert proc.poll() is None
        argv = open(f"/proc/{proc.pid}/cmdline", "rb").read().split(b"\0")
        assert argv[1:-1] == [b"-p", str(port).encode(), b"-l", b"127.0.0.1",
                              b"-m", b"8", b"-o",
                              b"idle_timeout=0,hash_items=1000", b"-u",
                              b"root"], argv


@contextlib.contextmanager
def _wrapper_server(installed, conf, port, tmp_path):
    """The installed wrapper on CONF, once the server answers `version` on
    PORT; killed if still running at the end."""
    from conftest import HOST, _wait_accepting

    pool = f"/dev/shm/tiercache.{port}.pool"  # the default for the port
    wrapper = _p(installed, "share/tiercached/scripts/tiercached-wrapper")
    env = dict(os.environ, TIERCACHED=str(_p(installed, "bin/tiercached")))
    err = tmp_path / "stderr"
    with open(err, "w") as ferr:
        proc = subprocess.Popen([str(wrapper), str(conf)], env=env,
                                stdin=subprocess.DEVNULL, stdout=ferr,
                                stderr=ferr)
    try:
        assert _wait_accepting(proc, port, 30), err.read_text()
        with socket.create_connection((HOST, port), timeout=10) as s:
            s.sendall(b"version\r\n")
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = s.recv(256)
                assert chunk, reply
                reply += chunk
        assert reply.startswith(b"VERSION 1.6.0-tiercache-"), reply
        assert proc.poll() is None, err.read_text()
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        remove_pool(pool)
