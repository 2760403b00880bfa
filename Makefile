# tiercache: one non-recursive GNU Makefile.
#
#   make                  release library (.a and .so) and benchmarks
#   make debug            debug library and unit test binaries
#   make unit             build and run the unit tests of $(VARIANT) (debug)
#   make VARIANT=asan unit
#   make test             every test suite of $(VARIANT) (unit for now)
#   make asan / tsan      unit tests under ASan+UBSan / TSan
#   make check            test, asan and tsan, one after the other
#   make check-loaded     check under a CPU hog on every core (TARGET=unit,
#                         RUNS=3 pick the target and the runs in a row)
#   make check-slowdev    check with the tests' flash files on a slow device
#   make bench            build the benchmarks, run perf/run_all.sh
#   make soak             perf/soak.sh: SOAK_SECONDS (600) of checked mixed
#                         load on a release tiercached (not part of check)
#   make exports          fail unless libtiercache.so exports only tc_* names
#   make cycles           fail when two source files call each other, directly
#                         or round a longer loop (tools/callcycles)
#   make install          release tiercached, libtiercache (.so with a soname,
#                         .a), tiercache.h, tiercache.pc and the man page
#                         under DESTDIR/PREFIX (/usr/local); INSTALL_VARIANT
#                         picks the build installed (release)
#   make format / format-check / clean
#
# Objects live under build/<variant>/, mirroring the source paths. All four
# variants have rules in this one make, so a release benchmark and a debug
# test can be built by the same invocation. The asan, tsan, test and check
# targets run sub-makes of this same file (not of other directories) only to
# run the suites one after the other: tests share /dev/shm pool paths and
# must not run concurrently under -j.

VARIANTS := release debug asan tsan
VARIANT ?= debug
ifeq ($(filter $(VARIANT),$(VARIANTS)),)
$(error VARIANT must be one of: $(VARIANTS) (got '$(VARIANT)'))
endif

CC ?= gcc
AR ?= ar
# clang-format 14 is the reference: its output is what format-check compares.
CLANG_FORMAT ?= $(or $(shell command -v clang-format-14),clang-format)

# ---- flags ------------------------------------------------------------------

TC_CPPFLAGS := -D_GNU_SOURCE -I. -MMD -MP
TC_WARN := -Wall -Wextra -Wshadow -Wformat=2 -Wmissing-prototypes \
	-Wstrict-prototypes -Wpointer-arith -Wvla
ifeq ($(CI),true)
TC_WARN += -Werror
endif
TC_CFLAGS := -std=c11 $(TC_WARN)

VFLAGS_release := -O2 -g -DNDEBUG
VFLAGS_debug := -O0 -g
VFLAGS_asan := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
	-fno-sanitize-recover=undefined
VFLAGS_tsan := -O1 -g -fsanitize=thread

# Link flags per variant: the sanitizers need their runtime at link time.
VLDFLAGS_release :=
VLDFLAGS_debug :=
VLDFLAGS_asan := -fsanitize=address,undefined
VLDFLAGS_tsan := -fsanitize=thread

# The shared library must resolve every symbol at link time (-z defs), except
# under the sanitizers, whose runtime is supplied by the executable.
SOFLAGS_release := -Wl,-z,defs
SOFLAGS_debug := -Wl,-z,defs
SOFLAGS_asan :=
SOFLAGS_tsan :=

# Library objects: position independent (one set for the .a and the .so) and
# hidden by default, so only TC_API (tc_*) symbols leave libtiercache.so.
LIB_CFLAGS := -fPIC -fvisibility=hidden

# The shared library's version: libtiercache.so.$(SO_VERSION), whose soname
# is libtiercache.so.<major>. The major changes when the ABI of
# src/tiercache.h does; keep it in step with TC_RELEASE there.
SO_VERSION := 0.1.0
SONAME := libtiercache.so.$(firstword $(subst ., ,$(SO_VERSION)))

LIBS := -lpmem -lmemkind -luring -lurcu-memb -lurcu-common -lpthread -lm
TEST_LIBS := -lcmocka
# The server's own: libsasl2 for -S (src/server/auth.c), OpenSSL for TLS
# (src/server/tls.c). Not in LIBS, which the library and tiercache.pc carry.
SSL_CFLAGS := $(shell pkg-config --cflags openssl 2>/dev/null)
SRV_LIBS := -lsasl2 $(or $(shell pkg-config --libs openssl 2>/dev/null),-lssl -lcrypto)

# User additions (make CFLAGS=... LDFLAGS=...) go last.
CFLAGS ?=
LDFLAGS ?=

# ---- sources ----------------------------------------------------------------

# The library (libtiercache): base, allocator, tiers and the engine behind
# src/tiercache.h. The server (src/server/) is a second archive on top of it,
# linked into tiercached and the server's unit tests, never into the library;
# src/server/tiercached.c is its main().
LIB_SRCS := $(wildcard src/base/*.c alloc/*.c tier/*.c src/engine/*.c)
SRV_SRCS := $(filter-out src/server/tiercached.c,\
	$(wildcard src/server/*.c src/server/proto/*.c))
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
BENCH_SRCS := $(wildcard perf/bench_*.c)

# ---- per-variant rules ------------------------------------------------------

# $(1) = variant. Defines build/$(1)/{libtiercache.a,libtiercache.so}, the
# unit test binaries and the object rules for that variant.
define VARIANT_RULES
LIB_OBJS_$(1) := $$(patsubst %.c,build/$(1)/%.o,$$(LIB_SRCS))
SRV_OBJS_$(1) := $$(patsubst %.c,build/$(1)/%.o,$$(SRV_SRCS))
UNIT_BINS_$(1) := $$(patsubst %.c,build/$(1)/%,$$(UNIT_SRCS))
UNIT_OBJS_$(1) := $$(UNIT_BINS_$(1):=.o)
CFLAGS_$(1) := $$(TC_CPPFLAGS) $$(TC_CFLAGS) $$(VFLAGS_$(1)) $$(CPPFLAGS) \
	$$(CFLAGS)
LDFLAGS_$(1) := $$(VLDFLAGS_$(1)) $$(LDFLAGS)
DEPS += $$(LIB_OBJS_$(1):.o=.d) $$(SRV_OBJS_$(1):.o=.d) \
	$$(UNIT_OBJS_$(1):.o=.d)

$$(LIB_OBJS_$(1)): build/$(1)/%.o: %.c
	@mkdir -p $$(@D)
	$$(CC) $$(CFLAGS_$(1)) $$(LIB_CFLAGS) -c $$< -o $$@

$$(SRV_OBJS_$(1)): build/$(1)/%.o: %.c
	@mkdir -p $$(@D)
	$$(CC) $$(CFLAGS_$(1)) $$(SSL_CFLAGS) -c $$< -o $$@

$$(UNIT_OBJS_$(1)): build/$(1)/%.o: %.c
	@mkdir -p $$(@D)
	$$(CC) $$(CFLAGS_$(1)) -c $$< -o $$@

build/$(1)/libtiercache.a: $$(LIB_OBJS_$(1))
	@mkdir -p $$(@D)
	@rm -f $$@
	$$(AR) rcs $$@ $$^

build/$(1)/libtcserver.a: $$(SRV_OBJS_$(1)) | layers
	@mkdir -p $$(@D)
	@rm -f $$@
	$$(AR) rcs $$@ $$^

build/$(1)/libtiercache.so: $$(LIB_OBJS_$(1))
	@mkdir -p $$(@D)
	$$(CC) -shared -Wl,-soname,$$(SONAME) $$(SOFLAGS_$(1)) $$(LDFLAGS_$(1)) \
		-o $$@ $$^ $$(LIBS)

# A unit test is one .c file; tests/unit/test_X.wrap, when present, holds
# extra link flags for it (-Wl,--wrap=symbol ...) and is a prerequisite, so
# editing it relinks the test.
$$(UNIT_BINS_$(1)): build/$(1)/tests/unit/%: build/$(1)/tests/unit/%.o \
		build/$(1)/libtcserver.a build/$(1)/libtiercache.a \
		$$$$(wildcard tests/unit/$$$$*.wrap)
	$$(CC) $$(LDFLAGS_$(1)) -o $$@ $$< $$(call wrap_flags,tests/unit/$$*.wrap) build/$(1)/libtcserver.a build/$(1)/libtiercache.a $$(LIBS) $$(SRV_LIBS) $$(TEST_LIBS)

.PHONY: lib-$(1) unit-bins-$(1)
lib-$(1): build/$(1)/libtiercache.a
unit-bins-$(1): $$(UNIT_BINS_$(1))
endef

# Contents of a .wrap file (newlines become spaces), or nothing.
wrap_flags = $(if $(wildcard $(1)),$(shell cat $(1)))

.SECONDEXPANSION:
$(foreach v,$(VARIANTS),$(eval $(call VARIANT_RULES,$(v))))

# ---- benchmarks (always release) ---------------------------------------------

BENCH_BINS := $(patsubst %.c,build/release/%,$(BENCH_SRCS))
# perf/be_*.c: parts of a benchmark kept in files of their own, linked
# into every benchmark (a few KiB; bench_engine is their user)
BENCH_PARTS := $(patsubst %.c,build/release/%.o,$(wildcard perf/be_*.c))
BENCH_OBJS := $(BENCH_BINS:=.o) $(BENCH_PARTS)
DEPS += $(BENCH_OBJS:.o=.d)

$(BENCH_OBJS): build/release/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_release) -c $< -o $@

$(BENCH_BINS): build/release/perf/%: build/release/perf/%.o $(BENCH_PARTS) \
		build/release/libtiercache.a
	$(CC) $(LDFLAGS_release) -o $@ $< $(BENCH_PARTS) \
		build/release/libtiercache.a $(LIBS)

# A perf tool of several files: perf/<tool>/*.c (with a main.c) is linked
# into build/release/perf/bench_<tool>, without the library (the tools are
# self-contained so that they also build alone, e.g. by
# perf/compare_memcached.sh).
PERF_TOOLS := $(patsubst perf/%/main.c,%,$(wildcard perf/*/main.c))
define PERF_TOOL_RULES
PERF_OBJS_$(1) := $$(patsubst %.c,build/release/%.o,$$(wildcard perf/$(1)/*.c))
DEPS += $$(PERF_OBJS_$(1):.o=.d)
BENCH_BINS += build/release/perf/bench_$(1)
$$(PERF_OBJS_$(1)): build/release/%.o: %.c
	@mkdir -p $$(@D)
	$$(CC) $$(CFLAGS_release) -c $$< -o $$@
build/release/perf/bench_$(1): $$(PERF_OBJS_$(1))
	$$(CC) $$(LDFLAGS_release) -o $$@ $$^ -lpthread -lm
endef
$(foreach t,$(PERF_TOOLS),$(eval $(call PERF_TOOL_RULES,$(t))))

# ---- server -------------------------------------------------------------------

# build/<variant>/tiercached: the server's main() (src/server/tiercached.c)
# over that variant's libtcserver.a and libtiercache.a. `all` builds the
# release one, `debug` the debug one; the protocol suites use the one they
# test.
define SERVER_RULES
DEPS += build/$(1)/src/server/tiercached.d
build/$(1)/src/server/tiercached.o: src/server/tiercached.c
	@mkdir -p $$(@D)
	$$(CC) $$(CFLAGS_$(1)) -c $$< -o $$@
build/$(1)/tiercached: build/$(1)/src/server/tiercached.o \
		build/$(1)/libtcserver.a build/$(1)/libtiercache.a
	$$(CC) $$(LDFLAGS_$(1)) -o $$@ $$< build/$(1)/libtcserver.a build/$(1)/libtiercache.a $$(LIBS) $$(SRV_LIBS)
endef
$(foreach v,$(VARIANTS),$(eval $(call SERVER_RULES,$(v))))
TIERCACHED := build/release/tiercached

# ---- top-level targets --------------------------------------------------------

.DEFAULT_GOAL := all
.PHONY: all debug unit test asan tsan check bench soak exports format \
	format-check clean

all: build/release/libtiercache.a build/release/libtiercache.so \
	$(BENCH_BINS) $(TIERCACHED)

debug: build/debug/libtiercache.a $(UNIT_BINS_debug) build/debug/tiercached

# The layers: the server (src/server/) sees the engine only through the
# public header; the engine, tiers and allocator never include the server.
# Checked by every build of the library or the server.
.PHONY: layers
layers:
	@bad=$$(grep -rn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' \
		src/server | grep -v -e '"src/server/' -e '"src/base/' \
		-e '"src/tiercache.h"'; \
		grep -rn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"src/server/' \
		src/base src/engine alloc tier); \
	if [ -n "$$bad" ]; then \
		echo "layers: an include crosses a layer:"; echo "$$bad"; \
		exit 1; \
	fi

# No call cycles between files: tools/callcycles reads the symbol tables of
# $(VARIANT)'s library and server objects (those of today's sources, not a
# stale object left in the build tree by a moved file), makes the file-level call graph
# (A -> B when A's object uses a symbol B's defines) and prints every cycle,
# of any length, with the symbols behind each edge. Two files that call
# each other are one module in disguise, or need a hook the lower one
# calls. CYCLES_DIRS narrows the check to files under those folders.
CYCLES_DIRS ?=
.PHONY: cycles
cycles: $(LIB_OBJS_$(VARIANT)) $(SRV_OBJS_$(VARIANT)) \
		build/$(VARIANT)/src/server/tiercached.o
	/usr/bin/python3 tools/callcycles --root build/$(VARIANT) \
		$(addprefix --under ,$(CYCLES_DIRS)) $^

# Suites of `make test`, run in this order by sub-makes. Adding a suite is
# one line here plus its own target, e.g.
#   TEST_SUITES += proto        (tests/proto against a started server)
#   TEST_SUITES += fuzz-replay  (every fuzz corpus replayed once)
TEST_SUITES := unit
# Suites run under the sanitizers by `make asan` / `make tsan`.
ASAN_SUITES := unit
TSAN_SUITES := unit
# Suites of other folders add themselves to the lists above.
-include tests/proto/proto.mk
-include tests/fuzz/fuzz.mk

# Sanitizer run-time options; user settings in the environment come last and
# win. The TSan suppressions cover uninstrumented library internals only.
TSAN_SUPP := $(wildcard tests/tsan.supp)
RUN_ENV_asan := \
	ASAN_OPTIONS="detect_leaks=1$(if $(ASAN_OPTIONS),:$(ASAN_OPTIONS))" \
	UBSAN_OPTIONS="print_stacktrace=1$(if $(UBSAN_OPTIONS),:$(UBSAN_OPTIONS))"
TSAN_SUPP_OPT := $(if $(TSAN_SUPP),:suppressions=$(abspath $(TSAN_SUPP)))
RUN_ENV_tsan := \
	TSAN_OPTIONS="second_deadlock_stack=1$(TSAN_SUPP_OPT)$(if $(TSAN_OPTIONS),:$(TSAN_OPTIONS))"

unit: $(UNIT_BINS_$(VARIANT))
	$(RUN_ENV_$(VARIANT)) tests/run_tests.sh unit-$(VARIANT) \
		$(UNIT_BINS_$(VARIANT))

# Each suite runs even when an earlier one failed; the target fails if any
# did.
test:
	@rc=0; for s in $(TEST_SUITES); do \
		$(MAKE) --no-print-directory VARIANT=$(VARIANT) $$s || rc=1; \
	done; exit $$rc

asan:
	@rc=0; for s in $(ASAN_SUITES); do \
		$(MAKE) --no-print-directory VARIANT=asan $$s || rc=1; \
	done; exit $$rc

tsan:
	@rc=0; for s in $(TSAN_SUITES); do \
		$(MAKE) --no-print-directory VARIANT=tsan $$s || rc=1; \
	done; exit $$rc

check:
	@rc=0; for t in test asan tsan; do \
		$(MAKE) --no-print-directory $$t || rc=1; \
	done; exit $$rc

# The suite on a loaded machine (tests/stress_check.sh): TARGET (default
# check) RUNS times in a row with a CPU hog on every core, or with the tests'
# flash files on a slow device. $(MAKE) in the line passes the jobserver on.
.PHONY: check-loaded check-slowdev
check-loaded:
	MAKE='$(MAKE)' tests/stress_check.sh --cpu-hog \
		TARGET='$(or $(TARGET),check)' RUNS='$(or $(RUNS),1)'

check-slowdev:
	MAKE='$(MAKE)' tests/stress_check.sh --slow-device \
		TARGET='$(or $(TARGET),check)' RUNS='$(or $(RUNS),1)'

bench: $(BENCH_BINS)
	@if [ -x perf/run_all.sh ]; then \
		BENCH_DIR=build/release/perf perf/run_all.sh; \
	elif [ -f perf/run_all.sh ]; then \
		BENCH_DIR=build/release/perf bash perf/run_all.sh; \
	else \
		echo "bench: built $(words $(BENCH_BINS)) benchmark(s);" \
			"no perf/run_all.sh to run"; \
	fi

# A long run, never in CI: mixed load with evictions, flash spills, hot
# keys, page moves, cache_memlimit and flush_all, every value read checked
# by the load generator's shadow model (perf/soak.sh says what fails it).
SOAK_SECONDS ?= 600
soak: build/release/tiercached
	SOAK_SECONDS=$(SOAK_SECONDS) TIERCACHED=$< bash perf/soak.sh

# Every symbol the shared library defines for the dynamic linker (functions
# and data) must start with tc_, apart from the linker's own (_init, _fini,
# _edata, _end, __bss_start).
EXPORTS_OK := _init _fini _edata _end __bss_start
exports: build/release/libtiercache.so
	@bad=$$(nm -D --defined-only $< | awk 'NF == 3 {print $$3}' | \
		grep -v '^tc_' | grep -vxF $(addprefix -e ,$(EXPORTS_OK)) || true); \
	if [ -n "$$bad" ]; then \
		echo "exports: $< exports symbols without the tc_ prefix:"; \
		echo "$$bad" | sed 's/^/  /'; exit 1; \
	fi; \
	echo "exports: ok, $$(nm -D --defined-only $< | \
		awk 'NF == 3 && $$3 ~ /^tc_/' | wc -l) tc_ symbol(s)"

# ---- install ------------------------------------------------------------------

# GNU's directory variables; DESTDIR stages the tree (packages, tests).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DATADIR ?= $(PREFIX)/share
# The service: the unit reads SYSCONFDIR/tiercached.conf (/etc, whatever
# the prefix) through the wrapper; systemd looks for units and tmpfiles
# under /usr/local/lib as well as /usr/lib.
SYSCONFDIR ?= /etc
UNITDIR ?= $(PREFIX)/lib/systemd/system
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
WRAPPER := $(DATADIR)/tiercached/scripts/tiercached-wrapper
INSTALL ?= install
INSTALL_VARIANT ?= release
IV := build/$(INSTALL_VARIANT)

.PHONY: install
install: $(IV)/tiercached $(IV)/libtiercache.so $(IV)/libtiercache.a \
		packaging/tiercache.pc.in packaging/tiercached.1 \
		packaging/tiercached-wrapper packaging/tiercached.service.in \
		packaging/tiercached.conf packaging/tiercached.tmpfiles
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) \
		$(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR) \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(dir $(WRAPPER)) \
		$(DESTDIR)$(UNITDIR) $(DESTDIR)$(TMPFILESDIR) \
		$(DESTDIR)$(SYSCONFDIR)
	$(INSTALL) -m 755 $(IV)/tiercached $(DESTDIR)$(BINDIR)/tiercached
	$(INSTALL) -m 755 $(IV)/libtiercache.so \
		$(DESTDIR)$(LIBDIR)/libtiercache.so.$(SO_VERSION)
	ln -sf libtiercache.so.$(SO_VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libtiercache.so
	$(INSTALL) -m 644 $(IV)/libtiercache.a $(DESTDIR)$(LIBDIR)/libtiercache.a
	$(INSTALL) -m 644 src/tiercache.h $(DESTDIR)$(INCLUDEDIR)/tiercache.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
		-e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
		-e 's|@VERSION@|$(SO_VERSION)|g' -e 's|@LIBS@|$(LIBS)|g' \
		packaging/tiercache.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/tiercache.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/tiercache.pc
	$(INSTALL) -m 644 packaging/tiercached.1 \
		$(DESTDIR)$(MANDIR)/man1/tiercached.1
	sed -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' -e 's|@BINDIR@|$(BINDIR)|g' \
		packaging/tiercached-wrapper > $(DESTDIR)$(WRAPPER)
	chmod 755 $(DESTDIR)$(WRAPPER)
	sed -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' -e 's|@WRAPPER@|$(WRAPPER)|g' \
		packaging/tiercached.service.in \
		> $(DESTDIR)$(UNITDIR)/tiercached.service
	chmod 644 $(DESTDIR)$(UNITDIR)/tiercached.service
	$(INSTALL) -m 644 packaging/tiercached.tmpfiles \
		$(DESTDIR)$(TMPFILESDIR)/tiercached.conf
	@# an operator's edited configuration is kept
	[ -e $(DESTDIR)$(SYSCONFDIR)/tiercached.conf ] || $(INSTALL) -m 644 \
		packaging/tiercached.conf $(DESTDIR)$(SYSCONFDIR)/tiercached.conf

FORMAT_DIRS := src alloc tier tests perf tools
FORMAT_FILES = $(shell find $(FORMAT_DIRS) -name '*.[ch]' -not -path 'perf/out/*' \
	2>/dev/null | sort)

format:
	$(CLANG_FORMAT) -i $(FORMAT_FILES)

format-check:
	$(CLANG_FORMAT) --dry-run --Werror $(FORMAT_FILES)

clean:
	rm -rf build

-include $(DEPS)
