"""`make install` into a temporary DESTDIR: the files land where they
should, the shared library carries its soname, an embedding program built
with `pkg-config --cflags --libs tiercache` against the installed tree
links and runs (dynamically and statically), and the man page renders.

The build installed is the one of the server under test
(build/<variant>/tiercached): debug or release; the sanitizer builds need
their runtime in every program that links them and are skipped."""

import os
import shutil
import subprocess

import pytest

from conftest import IS_MEMCACHED, ROOT, SERVER_BIN

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
        if os.path.exists(pool):
            os.unlink(pool)
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
