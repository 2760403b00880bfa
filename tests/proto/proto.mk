# tests/proto: protocol tests against a started server (pytest, raw sockets,
# pymemcache, memccapable). Included by the main Makefile.
#
#   make proto         against build/debug/tiercached
#   make proto-asan    against build/asan/tiercached (ASan+UBSan; the tests
#                      also fail on a sanitizer report or a non-zero exit)
#   TC_SERVER_KIND=memcached tests/proto/run.sh /usr/bin/memcached
#                      the same tests against memcached 1.6

TEST_SUITES += proto
ASAN_SUITES += proto-asan

.PHONY: proto proto-asan

proto: build/debug/tiercached
	tests/proto/run.sh build/debug/tiercached

proto-asan: build/asan/tiercached
	$(RUN_ENV_asan) tests/proto/run.sh build/asan/tiercached
