# Fuzz targets: a fragment of the main Makefile (`-include tests/fuzz/fuzz.mk`
# at its end), generic over every target in tests/fuzz/.
#
#   tests/fuzz/fuzz_<name>.c    defines LLVMFuzzerTestOneInput (fuzz.h)
#   tests/fuzz/corpus/<name>/   its seed corpus
#   tests/fuzz/<other>.c        helpers of the targets (e.g. engine_model.c,
#                               the engine targets' reference model): one
#                               archive linked into every target, which
#                               takes only what it uses
#
#   make fuzz-replay   one suite of `make test` and `make asan`: builds
#                      build/$(VARIANT)/tests/fuzz/replay_<name> with $(CC)
#                      against that variant's libraries and replays
#                      every file of tests/fuzz/corpus/<name>/, one child
#                      process per input; ends with "fuzz-replay: N passed,
#                      N failed" (N counts inputs)
#   make fuzz          builds each target with clang -fsanitize=fuzzer,
#                      address,undefined over a library built with clang too
#                      (build/fuzz/), runs each for FUZZ_SECONDS (30) from its
#                      corpus and prints one line per target. New inputs go
#                      to build/fuzz/corpus/<name>/ (the seed corpus is only
#                      read), crashes to build/fuzz/artifacts/<name>-*, the
#                      full log to build/fuzz/<name>.log.
#                      FUZZ_TARGETS="text meta" picks targets; FUZZ_ARGS adds
#                      libFuzzer flags (e.g. -jobs=4, -max_len=...).
#                      An input running over 60 s counts as a hang: a bound
#                      for a hang, not a speed, so generous on a loaded
#                      machine (fuzz_engine's slowest inputs, shrinking a
#                      full pool, take seconds under the sanitizers).

FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_NAMES := $(patsubst tests/fuzz/fuzz_%.c,%,$(FUZZ_SRCS))
FUZZ_HELPER_SRCS := $(filter-out $(FUZZ_SRCS) tests/fuzz/replay_main.c,\
	$(wildcard tests/fuzz/*.c))
FUZZ_TARGETS ?= $(FUZZ_NAMES)
FUZZ_SECONDS ?= 30
FUZZ_ARGS ?=
FUZZ_CC ?= clang

# ---- corpus replay, per variant (gcc) ----------------------------------------

define FUZZ_REPLAY_RULES
FUZZ_REPLAY_BINS_$(1) := $$(patsubst %,build/$(1)/tests/fuzz/replay_%,\
	$$(FUZZ_NAMES))
FUZZ_HELPER_OBJS_$(1) := $$(patsubst %.c,build/$(1)/%.o,$$(FUZZ_HELPER_SRCS))
FUZZ_REPLAY_OBJS_$(1) := $$(patsubst %.c,build/$(1)/%.o,\
	$$(FUZZ_SRCS) tests/fuzz/replay_main.c) $$(FUZZ_HELPER_OBJS_$(1))
FUZZ_DEPS += $$(FUZZ_REPLAY_OBJS_$(1):.o=.d)

$$(FUZZ_REPLAY_OBJS_$(1)): build/$(1)/%.o: %.c
	@mkdir -p $$(@D)
	$$(CC) $$(CFLAGS_$(1)) -c $$< -o $$@

build/$(1)/tests/fuzz/libfuzzhelp.a: $$(FUZZ_HELPER_OBJS_$(1))
	@rm -f $$@
	$$(AR) rcs $$@ $$^

build/$(1)/tests/fuzz/replay_%: build/$(1)/tests/fuzz/fuzz_%.o \
		build/$(1)/tests/fuzz/replay_main.o \
		build/$(1)/tests/fuzz/libfuzzhelp.a build/$(1)/libtcserver.a \
		build/$(1)/libtiercache.a
	$$(CC) $$(LDFLAGS_$(1)) -o $$@ $$^ $$(LIBS) $$(SRV_LIBS)
endef

$(foreach v,$(VARIANTS),$(eval $(call FUZZ_REPLAY_RULES,$(v))))

TEST_SUITES += fuzz-replay
ASAN_SUITES += fuzz-replay

# Each target's replay ends with "replay: P passed, F failed"; a binary that
# dies before printing it counts as one failure.
.PHONY: fuzz-replay
fuzz-replay: $(FUZZ_REPLAY_BINS_$(VARIANT))
	@passed=0; failed=0; \
	for n in $(FUZZ_NAMES); do \
		echo "=== fuzz-replay-$(VARIANT): $$n"; \
		log=build/$(VARIANT)/tests/fuzz/replay_$$n.log; \
		$(RUN_ENV_$(VARIANT)) build/$(VARIANT)/tests/fuzz/replay_$$n \
			tests/fuzz/corpus/$$n > $$log 2>&1; \
		cat $$log; \
		line=$$(grep -E '^replay: [0-9]+ passed, [0-9]+ failed$$' $$log | \
			tail -n 1); \
		if [ -n "$$line" ]; then \
			set -- $$line; \
			passed=$$((passed + $$2)); failed=$$((failed + $$4)); \
		else \
			failed=$$((failed + 1)); \
		fi; \
	done; \
	echo "fuzz-replay: $$passed passed, $$failed failed"; \
	[ $$failed -eq 0 ] && [ $$passed -gt 0 ]

# ---- libFuzzer runs (clang) --------------------------------------------------

FUZZ_VFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
	-fno-sanitize-recover=undefined
CFLAGS_fuzz := $(TC_CPPFLAGS) $(TC_CFLAGS) $(FUZZ_VFLAGS) $(CPPFLAGS) \
	$(CFLAGS)
FUZZ_LIB_OBJS := $(patsubst %.c,build/fuzz/%.o,$(LIB_SRCS))
FUZZ_SRV_OBJS := $(patsubst %.c,build/fuzz/%.o,$(SRV_SRCS))
FUZZ_HELPER_OBJS := $(patsubst %.c,build/fuzz/%.o,$(FUZZ_HELPER_SRCS))
FUZZ_OBJS := $(patsubst %.c,build/fuzz/%.o,$(FUZZ_SRCS)) $(FUZZ_HELPER_OBJS)
FUZZ_BINS := $(patsubst %,build/fuzz/tests/fuzz/fuzz_%,$(FUZZ_TARGETS))
FUZZ_DEPS += $(FUZZ_LIB_OBJS:.o=.d) $(FUZZ_SRV_OBJS:.o=.d) \
	$(FUZZ_OBJS:.o=.d)

# The libraries are instrumented for coverage too: the fuzzer steers by the
# engine's branches as well as the parser's.
$(FUZZ_LIB_OBJS) $(FUZZ_SRV_OBJS): build/fuzz/%.o: %.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CFLAGS_fuzz) -fsanitize=fuzzer-no-link $(LIB_CFLAGS) \
		-c $< -o $@

build/fuzz/libtiercache.a: $(FUZZ_LIB_OBJS)
	@mkdir -p $(@D)
	@rm -f $@
	$(AR) rcs $@ $^

build/fuzz/libtcserver.a: $(FUZZ_SRV_OBJS)
	@mkdir -p $(@D)
	@rm -f $@
	$(AR) rcs $@ $^

$(FUZZ_OBJS): build/fuzz/%.o: %.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CFLAGS_fuzz) -fsanitize=fuzzer-no-link -c $< -o $@

build/fuzz/tests/fuzz/libfuzzhelp.a: $(FUZZ_HELPER_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

build/fuzz/tests/fuzz/fuzz_%: build/fuzz/tests/fuzz/fuzz_%.o \
		build/fuzz/tests/fuzz/libfuzzhelp.a build/fuzz/libtcserver.a \
		build/fuzz/libtiercache.a
	$(FUZZ_CC) -fsanitize=fuzzer,address,undefined $(LDFLAGS) -o $@ $^ \
		$(LIBS) $(SRV_LIBS)

.PHONY: fuzz
fuzz: $(FUZZ_BINS)
	@rc=0; \
	for n in $(FUZZ_TARGETS); do \
		mkdir -p build/fuzz/corpus/$$n build/fuzz/artifacts; \
		log=build/fuzz/$$n.log; \
		if build/fuzz/tests/fuzz/fuzz_$$n -max_total_time=$(FUZZ_SECONDS) \
			-timeout=60 -rss_limit_mb=2048 -print_final_stats=1 \
			-artifact_prefix=build/fuzz/artifacts/$$n- $(FUZZ_ARGS) \
			build/fuzz/corpus/$$n tests/fuzz/corpus/$$n > $$log 2>&1; \
		then \
			runs=$$(sed -n 's/^stat::number_of_executed_units: *//p' \
				$$log | tail -n 1); \
			cov=$$(grep -o 'cov: [0-9]*' $$log | tail -n 1); \
			echo "fuzz $$n: ok, $${runs:-?} runs in $(FUZZ_SECONDS) s," \
				"$${cov:-cov: ?}, corpus" \
				"$$(ls build/fuzz/corpus/$$n | wc -l) new input(s)"; \
		else \
			echo "fuzz $$n: FAILED, see $$log and" \
				"build/fuzz/artifacts/$$n-*"; \
			rc=1; \
		fi; \
	done; exit $$rc

-include $(FUZZ_DEPS)
