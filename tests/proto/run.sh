#!/usr/bin/env bash
# Run the protocol tests (tests/proto, pytest) against a server binary.
#
#   tests/proto/run.sh [SERVER] [PYTEST-ARGS...]
#
# SERVER defaults to build/debug/tiercached (relative to the repository
# root). TC_SERVER_KIND=memcached runs the same tests against memcached, e.g.
#   TC_SERVER_KIND=memcached tests/proto/run.sh /usr/bin/memcached
# which is how the tests themselves are validated. The exit status is
# pytest's: 0 all passed, 1 failures, 5 no tests collected (a failure too),
# others an error; 124 when the whole run exceeded PROTO_TIMEOUT seconds.
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 1

server=${1:-build/debug/tiercached}
[ $# -gt 0 ] && shift

export TC_SERVER=$server
export TC_SERVER_KIND=${TC_SERVER_KIND:-tiercache}
export PYTHONDONTWRITEBYTECODE=1

if [ ! -x "$server" ]; then
    echo "proto: $server is not an executable file" >&2
    exit 1
fi
if ! /usr/bin/python3 -c 'import pytest, pymemcache' 2>/dev/null; then
    echo "proto: /usr/bin/python3 lacks pytest or pymemcache" \
        "(python3-pytest, python3-pymemcache: see .ci/deps)" >&2
    exit 1
fi

echo "=== proto: $server ($TC_SERVER_KIND)"
timeout --kill-after=10 "${PROTO_TIMEOUT:-3600}" \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/proto "$@"
rc=$?
case $rc in
0) echo "proto: passed ($server)" ;;
5) echo "proto: FAILED: no tests collected ($server)" ;;
124) echo "proto: FAILED: timed out after ${PROTO_TIMEOUT:-3600} s ($server)" ;;
*) echo "proto: FAILED, pytest exit status $rc ($server)" ;;
esac
exit $rc
