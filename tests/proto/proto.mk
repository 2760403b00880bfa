# tests/proto: protocol tests against a started server (pytest, raw sockets,
# pymemcache, memccapable). Included by the main Makefile.
#
#   make proto         against build/debug/tiercached
#   make proto-asan    against build/asan/tiercached (ASan+UBSan; the tests
#                      also fail on a sanitizer report or a non-zero exit)
#   make proto-tsan    the concurrent and pipelined tests (PROTO_TSAN_TESTS)
#                      against build/tsan/tiercached, four workers each
#   TC_SERVER_KIND=memcached tests/proto/run.sh /usr/bin/memcached
#                      the same tests against memcached 1.6

TEST_SUITES += proto
ASAN_SUITES += proto-asan
TSAN_SUITES += proto-tsan

.PHONY: proto proto-asan proto-tsan

proto: build/debug/tiercached
	tests/proto/run.sh build/debug/tiercached

proto-asan: build/asan/tiercached
	$(RUN_ENV_asan) tests/proto/run.sh build/asan/tiercached

# Under TSan, only the tests that keep several workers busy at once
# (multigets, pipelines, many connections, pages moving under readers): a
# few seconds. io_sync=0: by default TSan takes every send and receive on
# any socket for a synchronisation (all sockets share one), which orders
# any two workers that served clients and hides their races.
PROTO_TSAN_TESTS := test_concurrent or multi or pipeline or pipelined or \
	interleaved
PROTO_TSAN_ENV = TSAN_OPTIONS="second_deadlock_stack=1:io_sync=0$(TSAN_SUPP_OPT)$(if $(TSAN_OPTIONS),:$(TSAN_OPTIONS))"

proto-tsan: build/tsan/tiercached
	$(PROTO_TSAN_ENV) PROTO_TIMEOUT=600 tests/proto/run.sh \
		build/tsan/tiercached -k "$(PROTO_TSAN_TESTS)"

# The differential test against memcached (tests/proto/test_diff.py), long:
#   make diff-long DIFF_SEQUENCES=100000 [DIFF_SEED=n] (default: a new seed)
# (the normal proto run sends 2,000 sequences). No time bound; niced.
DIFF_SEQUENCES ?= 100000
DIFF_SEED ?= random

.PHONY: diff-long

diff-long: build/debug/tiercached
	TC_DIFF_SEQUENCES=$(DIFF_SEQUENCES) TC_DIFF_SEED=$(DIFF_SEED) \
	TC_DIFF_SECONDS=0 PROTO_TIMEOUT=86400 \
	nice -n 19 tests/proto/run.sh build/debug/tiercached -k test_diff -s
