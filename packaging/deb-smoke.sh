#!/usr/bin/env bash
# Build the Debian packages (dpkg-buildpackage -b from a copy of the tree),
# install them, start tiercached as the unit does and check it answers;
# then purge them. Run as root (CI); it installs into the system.
#
#   packaging/deb-smoke.sh [--keep]   (--keep: leave the packages installed)
#
# With systemd running, the package's own start of tiercached.service is
# checked (systemctl is-active, `version` on 11211). Without it (containers)
# the unit's ExecStart runs by hand with the installed config, only the port
# swapped to a free one, so the user, the pid file's directory
# (tmpfiles.d) and the wrapper are the installed ones.
set -euo pipefail

cd "$(dirname "$0")/.."
keep=no
[ "${1:-}" = --keep ] && keep=yes

if [ "$(id -u)" -ne 0 ]; then
    echo "deb-smoke: run as root (it installs the packages)" >&2
    exit 1
fi
for tool in dpkg-buildpackage dh; do
    if ! command -v "$tool" >/dev/null; then
        echo "deb-smoke: $tool is missing (dpkg-dev, debhelper: .ci/deps)" >&2
        exit 1
    fi
done

work=$(mktemp -d /tmp/tc-deb.XXXXXX)
pid=""
port=""
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
    fi
    [ -n "$port" ] && rm -f "/dev/shm/tiercache.$port.pool"
    if [ "$keep" = no ]; then
        dpkg --purge tiercached libtiercache-dev libtiercache0 \
            >/dev/null 2>&1 || true
        rmdir /run/tiercached 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

echo "--- deb-smoke: build in $work"
mkdir "$work/tiercache"
git ls-files -co --exclude-standard -z | grep -zv '^build/' |
    xargs -0 cp --parents -t "$work/tiercache"
(cd "$work/tiercache" && dpkg-buildpackage -b -us -uc -j"$(nproc)") \
    >"$work/build.log" 2>&1 || {
    tail -n 40 "$work/build.log"
    echo "deb-smoke: FAILED: dpkg-buildpackage" >&2
    exit 1
}
grep -i "warning" "$work/build.log" || true
ls "$work"/*.deb

echo "--- deb-smoke: install"
debs=()
for p in tiercached libtiercache0 libtiercache-dev; do
    debs+=("$(ls "$work"/${p}_*.deb)")
done
dpkg -i "${debs[@]}"
fail() {
    echo "deb-smoke: FAILED: $*" >&2
    exit 1
}
for f in /usr/bin/tiercached /etc/tiercached.conf \
    /lib/systemd/system/tiercached.service /usr/lib/libtiercache.so.0 \
    /usr/include/tiercache.h /usr/share/man/man1/tiercached.1.gz; do
    [ -e "$f" ] || fail "$f is not installed"
done
dpkg-query -W -f='${Conffiles}\n' tiercached | grep /etc/tiercached.conf >/dev/null ||
    fail "/etc/tiercached.conf is not a conffile"
getent passwd memcache >/dev/null || fail "no memcache user"
[ "$(stat -c %U /run/tiercached)" = memcache ] ||
    fail "/run/tiercached is not memcache's (tmpfiles.d)"
[ "$(pkg-config --modversion tiercache)" = 0.1.0 ] ||
    fail "pkg-config does not find tiercache"

# `version` on PORT answers tiercached's
answers() {
    local reply
    exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
    printf 'version\r\n' >&3
    IFS= read -r -t 10 reply <&3 || true
    exec 3<&-
    [[ $reply == "VERSION 1.6.0-tiercache-"* ]]
}

if [ -d /run/systemd/system ]; then
    # Debian's memcached package starts memcached.service on 11211 too (it
    # is installed for the differential tests): stop it, so the port is
    # tiercached's, and start the unit again now that it is free.
    echo "--- deb-smoke: the service, with memcached.service stopped"
    systemctl stop memcached 2>/dev/null || true
    systemctl restart tiercached || true
    for _ in $(seq 300); do
        answers 11211 2>/dev/null && break
        sleep 0.1
    done
    systemctl is-active --quiet tiercached || {
        systemctl status tiercached --no-pager || true
        fail "tiercached.service is not active"
    }
    answers 11211 || fail "tiercached.service does not answer version"
    systemctl stop tiercached
else
    echo "--- deb-smoke: no systemd; the unit's ExecStart by hand"
    exec_start=$(sed -n 's/^ExecStart=//p' /lib/systemd/system/tiercached.service)
    wrapper=${exec_start%% *}
    conf=${exec_start#* }
    [ "$conf" = /etc/tiercached.conf ] || fail "ExecStart reads $conf"
    port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    sed "s/^-p 11211\$/-p $port/" /etc/tiercached.conf >"$work/tiercached.conf"
    "$wrapper" "$work/tiercached.conf" >"$work/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 300); do
        answers "$port" 2>/dev/null && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    answers "$port" 2>/dev/null || {
        cat "$work/server.log"
        fail "the installed wrapper and config do not start a server"
    }
    [ "$(cat /run/tiercached/tiercached.pid)" = "$pid" ] ||
        fail "the pid file is not the server's"
    [ "$(stat -c %U "/dev/shm/tiercache.$port.pool")" = memcache ] ||
        fail "the server does not run as memcache"
    kill -TERM "$pid"
    rc=0
    wait "$pid" || rc=$?
    pid=""
    [ "$rc" -eq 0 ] || fail "SIGTERM: exit status $rc"
    [ ! -e /run/tiercached/tiercached.pid ] || fail "pid file left behind"
fi
echo "deb-smoke: passed"
