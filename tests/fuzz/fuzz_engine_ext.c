/*
 * Fuzz target: fuzz_engine.c with a tiny NVMe tier (an 8 MiB flash file
 * under /tmp, 1 MiB segments), so that evictions spill values to flash,
 * reads come back from it (and are copied back into the pool), and
 * segments are reclaimed. Same input format and checks; its own corpus
 * (tests/fuzz/corpus/engine_ext/).
 */
#define FZ_EXT 1
#include "tests/fuzz/fuzz_engine.c"
