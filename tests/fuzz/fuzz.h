#pragma once
/*
 * The entry point every fuzz target (tests/fuzz/fuzz_<name>.c) defines.
 * `make fuzz` links a target with libFuzzer (clang -fsanitize=fuzzer);
 * the normal test run links it with replay_main.c, which feeds it every
 * file of tests/fuzz/corpus/<name>/. A target reports a failure by
 * aborting (FUZZ_CHECK), as libFuzzer expects.
 */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                  \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz check failed at %s:%d: %s: ", __FILE__,      \
                    __LINE__, #cond);                                          \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            abort();                                                           \
        }                                                                      \
    } while (0)
