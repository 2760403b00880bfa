/*
 * Unit tests for src/server/settings.c: defaults, every flag (short, attached,
 * bundled, long), k/m/g suffixes, -o options, the one-line error naming the
 * flag for every bad value, checks across options, --help and
 * "stats settings".
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "src/base/err.h"
#include "src/server/obuf.h"
#include "src/server/settings.h"
#include "src/tiercache.h"

#define MAX_ARGS 32

/* A settings struct and the argv its strings point into. */
struct fx {
    struct settings s;
    char line[2048];
    char *argv[MAX_ARGS];
    int argc;
};

static int
setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    settings_init(&f->s);
    err_clear();
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    free(*state);
    return 0;
}

/* Parse a command line given as one string, split on spaces ("tiercached"
 * is argv[0]). */
static int
parse(struct fx *f, const char *args)
{
    snprintf(f->line, sizeof(f->line), "tiercached %s", args);
    f->argc = 0;
    for (char *save = NULL, *t = strtok_r(f->line, " ", &save);
         t && f->argc < MAX_ARGS; t = strtok_r(NULL, " ", &save))
        f->argv[f->argc++] = t;
    return settings_parse(&f->s, f->argc, f->argv);
}

/* Parse on fresh defaults and expect -EINVAL with a message that starts
 * with prefix (the flag's name) and contains want. */
static void
expect_bad(struct fx *f, const char *args, const char *prefix, const char *want)
{
    settings_init(&f->s);
    err_clear();
    int rc = parse(f, args);
    if (rc != -EINVAL || strncmp(err_msg(), prefix, strlen(prefix)) != 0 ||
        (want && !strstr(err_msg(), want)))
        fail_msg("args '%s': rc %d, message '%s' (want prefix '%s'%s%s)", args,
                 rc, err_msg(), prefix, want ? " and " : "", want ? want : "");
    /* one line */
    assert_null(strchr(err_msg(), '\n'));
}

static void
expect_ok(struct fx *f, const char *args)
{
    settings_init(&f->s);
    int rc = parse(f, args);
    if (rc != 0)
        fail_msg("args '%s': rc %d, message '%s'", args, rc, err_msg());
}

static void
test_defaults(void **state)
{
    struct fx *f = *state;
    assert_int_equal(parse(f, ""), 0);
    struct settings *s = &f->s;
    assert_int_equal(s->action, SETTINGS_RUN);
    assert_int_equal(s->port, 11211);
    assert_int_equal(s->udp_port, 0);
    assert_null(s->unix_path);
    assert_int_equal(s->unix_mask, 0700);
    assert_string_equal(s->listen, "127.0.0.1");
    assert_int_equal(s->maxbytes_mib, 64);
    assert_false(s->no_evict);
    assert_int_equal(s->maxconns, 1024);
    assert_int_equal(s->threads, 4);
    assert_int_equal(s->item_size_max, 1u << 20);
    assert_true(s->growth_factor > 1.2499 && s->growth_factor < 1.2501);
    assert_int_equal(s->chunk_size, 48);
    assert_int_equal(settings_min_chunk(s), 80);
    assert_int_equal(s->verbose, 0);
    assert_false(s->shutdown_enabled);
    assert_string_equal(s->pool_path, "/dev/shm/tiercache.11211.pool");
    assert_int_equal(s->idle_timeout, 0);
    assert_int_equal(s->pool_size, 0);
    assert_int_equal(s->slab_chunk_max, 512u << 10);
    assert_int_equal(s->slab_chunk_step, 16);
    assert_int_equal(s->hash_items, 0);
    assert_int_equal(s->quota_batch, 32);
    assert_int_equal(s->sweep_budget, 1024);
    assert_true(s->maxconns_fast);
    assert_false(s->no_background);
}

static void
test_every_flag(void **state)
{
    struct fx *f = *state;
    assert_int_equal(parse(f, "-p 12345 -U 0 -l 10.0.0.1 -m 128 -M -c 50 "
                              "-t 8 -I 2m -f 1.5 -n 100 -v -A -e /tmp/x.pool "
                              "-s /tmp/tc.sock -a 770"),
                     0);
    struct settings *s = &f->s;
    assert_int_equal(s->port, 12345);
    assert_string_equal(s->listen, "10.0.0.1");
    assert_int_equal(s->maxbytes_mib, 128);
    assert_true(s->no_evict);
    assert_int_equal(s->maxconns, 50);
    assert_int_equal(s->threads, 8);
    assert_int_equal(s->item_size_max, 2u << 20);
    assert_true(s->growth_factor > 1.4999 && s->growth_factor < 1.5001);
    assert_int_equal(s->chunk_size, 100);
    assert_int_equal(settings_min_chunk(s), 136);
    assert_int_equal(s->verbose, 1);
    assert_true(s->shutdown_enabled);
    assert_string_equal(s->pool_path, "/tmp/x.pool");
    assert_string_equal(s->unix_path, "/tmp/tc.sock");
    assert_int_equal(s->unix_mask, 0770);
    /* -p given with -s: TCP stays on */
    assert_int_equal(s->port, 12345);
}

static void
test_forms(void **state)
{
    struct fx *f = *state;
    expect_ok(f, "-p12000 -t2");
    assert_int_equal(f->s.port, 12000);
    assert_int_equal(f->s.threads, 2);
    expect_ok(f, "--port=13000 --threads 3 --memory-limit=16 "
                 "--disable-evictions --enable-shutdown");
    assert_int_equal(f->s.port, 13000);
    assert_int_equal(f->s.threads, 3);
    assert_int_equal(f->s.maxbytes_mib, 16);
    assert_true(f->s.no_evict);
    assert_true(f->s.shutdown_enabled);
    expect_ok(f, "-vv");
    assert_int_equal(f->s.verbose, 2);
    expect_ok(f, "-vvv");
    assert_int_equal(f->s.verbose, 3);
    expect_ok(f, "-v -v -v -v");
    assert_int_equal(f->s.verbose, 3); /* capped */
    expect_ok(f, "-MAv");
    assert_true(f->s.no_evict);
    assert_true(f->s.shutdown_enabled);
    assert_int_equal(f->s.verbose, 1);
    expect_ok(f, "-vt6"); /* a bundle may end in a flag with its value */
    assert_int_equal(f->s.verbose, 1);
    assert_int_equal(f->s.threads, 6);
    /* the last one wins */
    expect_ok(f, "-t 2 -t 5");
    assert_int_equal(f->s.threads, 5);
}

static void
test_help_version(void **state)
{
    struct fx *f = *state;
    expect_ok(f, "-h");
    assert_int_equal(f->s.action, SETTINGS_HELP);
    expect_ok(f, "--help");
    assert_int_equal(f->s.action, SETTINGS_HELP);
    expect_ok(f, "-V");
    assert_int_equal(f->s.action, SETTINGS_VERSION);
    expect_ok(f, "--version");
    assert_int_equal(f->s.action, SETTINGS_VERSION);
    /* what follows -h does not matter */
    expect_ok(f, "-h -t nonsense");
    assert_int_equal(f->s.action, SETTINGS_HELP);
}

static void
test_size_suffixes(void **state)
{
    struct fx *f = *state;
    static const struct {
        const char *arg;
        uint64_t want;
    } cases[] = {
        {"-I 1k", 1024},         {"-I 1K", 1024},     {"-I 512k", 512 * 1024},
        {"-I 1m", 1u << 20},     {"-I 4M", 4u << 20}, {"-I 1048576", 1u << 20},
        {"-I 100m", 100u << 20}, {"-I 2000", 2000},
    };
    for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        expect_ok(f, cases[i].arg);
        assert_int_equal(f->s.item_size_max, cases[i].want);
    }
    expect_ok(f, "-o slab_chunk_max=1m -I 200m");
    assert_int_equal(f->s.slab_chunk_max, 1u << 20);
    assert_int_equal(f->s.item_size_max, 200u << 20);
    expect_ok(f, "-o slab_chunk_max=16k");
    assert_int_equal(f->s.slab_chunk_max, 16u << 10);
    /* a small slab_chunk_max bounds -I (255 chained tails) */
    expect_bad(f, "-o slab_chunk_max=4096", "-I: ", "slab_chunk_max");
    expect_ok(f, "-o slab_chunk_max=4096 -I 512k");
    assert_int_equal(f->s.slab_chunk_max, 4096);
}

static void
test_bad_values(void **state)
{
    struct fx *f = *state;
    expect_bad(f, "-t x", "-t: ", "expected a number from 1 to 256, got 'x'");
    expect_bad(f, "-t 0", "-t: ", "got '0'");
    expect_bad(f, "-t 257", "-t: ", NULL);
    expect_bad(f, "-t -1", "-t: ", NULL);
    expect_bad(f, "-t 4x", "-t: ", NULL);
    expect_bad(f, "-t 99999999999999999999999", "-t: ", NULL);
    expect_bad(f, "--threads=x", "--threads: ", NULL);
    expect_bad(f, "-p 65536", "-p: ", "0 to 65535");
    expect_bad(f, "-p x", "-p: ", NULL);
    expect_ok(f, "-U 11211");
    assert_int_equal(f->s.udp_port, 11211);
    expect_bad(f, "-U 65536", "-U: ", "0 to 65535");
    expect_bad(f, "-U x", "-U: ", NULL);
    expect_ok(f, "-m 2"); /* memcached's tests use -m 2 and -m 3 */
    expect_bad(f, "-m 0", "-m: ", NULL);
    expect_bad(f, "-m lots", "-m: ", NULL);
    expect_bad(f, "-c 0", "-c: ", NULL);
    expect_bad(f, "-c x", "-c: ", NULL);
    expect_bad(f, "-I 1023", "-I: ", "1k to 1g");
    expect_bad(f, "-I 2g", "-I: ", NULL);
    expect_bad(f, "-I 1x", "-I: ", NULL);
    expect_bad(f, "-I k", "-I: ", NULL);
    expect_bad(f, "-I 1mb", "-I: ", NULL);
    expect_bad(f, "-f 1", "-f: ", NULL);
    expect_bad(f, "-f 1.0", "-f: ", NULL);
    expect_bad(f, "-f abc", "-f: ", NULL);
    expect_bad(f, "-f 1.25x", "-f: ", NULL);
    expect_bad(f, "-f nan", "-f: ", NULL);
    expect_bad(f, "-f 101", "-f: ", NULL);
    expect_bad(f, "-n 0", "-n: ", NULL);
    expect_bad(f, "-n x", "-n: ", NULL);
    expect_bad(f, "-a 800", "-a: ", "octal");
    expect_bad(f, "-a 1777", "-a: ", NULL);
    expect_bad(f, "-a rw", "-a: ", NULL);
    expect_bad(f,
               "-s "
               "/tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
               "-s: ", "107");
    /* a flag missing its value */
    expect_bad(f, "-p", "-p: ", "needs a value");
    expect_bad(f, "-t", "-t: ", "needs a value");
    expect_bad(f, "-o", "-o: ", "needs a value");
    expect_bad(f, "--port", "--port: ", "needs a value");
    /* flags that take none */
    expect_bad(f, "--disable-evictions=1",
               "--disable-evictions: ", "takes no value");
}

static void
test_unknown_flags(void **state)
{
    struct fx *f = *state;
    expect_bad(f, "-z", "unknown flag '-z'", NULL);
    expect_bad(f, "-vz", "unknown flag '-z'", NULL);
    expect_bad(f, "--frobnicate", "unknown flag '--frobnicate'", NULL);
    expect_bad(f, "stray", "unexpected argument 'stray'", NULL);
    expect_bad(f, "-", "unexpected argument '-'", NULL);
}

static void
test_subopts(void **state)
{
    struct fx *f = *state;
    expect_ok(f, "-o idle_timeout=30,hash_items=1000000,quota_batch=64,"
                 "sweep_budget=10,maxconns_fast,no_background");
    struct settings *s = &f->s;
    assert_int_equal(s->idle_timeout, 30);
    assert_int_equal(s->hash_items, 1000000);
    assert_int_equal(s->quota_batch, 64);
    assert_int_equal(s->sweep_budget, 10);
    assert_true(s->maxconns_fast);
    assert_true(s->no_background);
    /* repeated -o, empty items, boolean values */
    expect_ok(f, "-o idle_timeout=5 -o ,no_background=0,, -o "
                 "maxconns_fast=no");
    assert_int_equal(f->s.idle_timeout, 5);
    assert_false(f->s.no_background);
    assert_false(f->s.maxconns_fast);
    expect_ok(f, "--extended=no_background=yes");
    assert_true(f->s.no_background);
    expect_ok(f, "-ono_background");
    assert_true(f->s.no_background);
    /* the fine slab classes: a step, or none */
    struct tc_config cfg;
    expect_ok(f, "-o slab_chunk_step=8");
    settings_to_config(&f->s, &cfg);
    assert_int_equal(cfg.chunk_step, 8);
    expect_ok(f, "-o slab_chunk_step=0");
    settings_to_config(&f->s, &cfg);
    assert_int_equal(cfg.chunk_step, 0);
}

static void
test_subopts_bad(void **state)
{
    struct fx *f = *state;
    expect_bad(f, "-o frob=1", "-o: unknown option 'frob'", NULL);
    expect_bad(f, "-o idle_timeout=1,frob", "-o: unknown option 'frob'", NULL);
    expect_bad(f, "-o idle_timeout", "-o idle_timeout: ", "needs a value");
    expect_bad(f, "-o idle_timeout=", "-o idle_timeout: ", NULL);
    expect_bad(f, "-o idle_timeout=x",
               "-o idle_timeout: ", "expected a number");
    expect_bad(f, "-o idle_timeout=-1", "-o idle_timeout: ", NULL);
    expect_bad(f, "-o slab_chunk_max=512", "-o slab_chunk_max: ", NULL);
    expect_bad(f, "-o slab_chunk_max=2m", "-o slab_chunk_max: ", NULL);
    expect_bad(f, "-o slab_chunk_max=1028",
               "-o slab_chunk_max: ", "multiple of 8");
    expect_bad(f, "-o slab_chunk_step=12",
               "-o slab_chunk_step: ", "multiple of 8");
    expect_bad(f, "-o slab_chunk_step=40000", "-o slab_chunk_step: ", NULL);
    expect_bad(f, "-o hash_items=x", "-o hash_items: ", NULL);
    expect_bad(f, "-o quota_batch=0", "-o quota_batch: ", NULL);
    expect_bad(f, "-o quota_batch=257", "-o quota_batch: ", NULL);
    expect_bad(f, "-o sweep_budget=0", "-o sweep_budget: ", NULL);
    expect_bad(f, "-o no_background=maybe", "-o no_background: ", NULL);
    expect_bad(f, "-o ", "-o: ", NULL);
}

static void
test_cross_checks(void **state)
{
    struct fx *f = *state;
    /* 255 tails of slab_chunk_max - 16 bytes bound an item */
    expect_bad(f, "-I 200m", "-I: ", "slab_chunk_max");
    expect_bad(f, "-I 1g -o slab_chunk_max=1m", "-I: ", NULL);
    expect_bad(f, "-n 5000 -I 512k -o slab_chunk_max=4k", "-n: ", NULL);
    /* the pool file holds whole MiB, at least -m */
    expect_bad(f, "-o pool_size=100m -m 128", "-o pool_size: ", "-m 128");
    expect_bad(f, "-o pool_size=1000000", "-o pool_size: ", "whole MiB");
    expect_ok(f, "-o pool_size=1g -m 64");
    assert_int_equal(f->s.pool_size, 1ull << 30);
    assert_int_equal(f->s.maxbytes_mib, 64);
    /* nothing to listen on */
    expect_bad(f, "-p 0", "-p: ", "nothing to listen on");
    expect_bad(f, "-p 0 -U 0", "-p: ", "nothing to listen on");
    expect_ok(f, "-p 0 -U 11211"); /* UDP only */
}

static void
test_listen_and_unix(void **state)
{
    struct fx *f = *state;
    expect_ok(f, "-l 0.0.0.0");
    assert_string_equal(f->s.listen, "0.0.0.0");
    expect_ok(f, "-l 127.0.0.1,::1");
    assert_string_equal(f->s.listen, "127.0.0.1,::1");
    /* repeated -l: the first replaces the default, the next append */
    expect_ok(f, "-l 10.0.0.1 -l 10.0.0.2:11300");
    assert_string_equal(f->s.listen, "10.0.0.1,10.0.0.2:11300");
    /* -s alone turns TCP off, as in memcached */
    expect_ok(f, "-s /tmp/tc.sock");
    assert_int_equal(f->s.port, 0);
    assert_string_equal(f->s.pool_path, "/dev/shm/tiercache.0.pool");
    expect_ok(f, "-s /tmp/tc.sock -p 11311");
    assert_int_equal(f->s.port, 11311);
    assert_string_equal(f->s.pool_path, "/dev/shm/tiercache.11311.pool");
    expect_ok(f, "-p 0 -s /tmp/tc.sock");
    assert_int_equal(f->s.port, 0);
}

static char *
render(const struct settings *s)
{
    struct obuf o;
    obuf_init(&o);
    assert_int_equal(settings_render(s, &o), 0);
    obuf_add(&o, "", 1);
    char *text = strdup(o.buf);
    obuf_fini(&o);
    return text;
}

static void
test_render(void **state)
{
    struct fx *f = *state;
    expect_ok(f, "-p 11999 -m 100 -M -c 77 -t 3 -f 1.5 -A -o idle_timeout=9");
    char *t = render(&f->s);
    static const char *const want[] = {
        "STAT maxbytes 104857600\r\n",
        "STAT maxconns 77\r\n",
        "STAT tcpport 11999\r\n",
        "STAT udpport 0\r\n",
        "STAT inter 127.0.0.1\r\n",
        "STAT verbosity 0\r\n",
        "STAT evictions off\r\n",
        "STAT domain_socket NULL\r\n",
        "STAT umask 700\r\n",
        "STAT shutdown_command yes\r\n",
        "STAT growth_factor 1.50\r\n",
        "STAT chunk_size 48\r\n",
        "STAT num_threads 3\r\n",
        "STAT item_size_max 1048576\r\n",
        "STAT slab_chunk_max 524288\r\n",
        "STAT idle_timeout 9\r\n",
        "STAT maxconns_fast yes\r\n",
        "STAT cas_enabled yes\r\n",
        "STAT memory_file /dev/shm/tiercache.11999.pool\r\n",
        "STAT tc_background yes\r\n",
    };
    for (unsigned i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (!strstr(t, want[i]))
            fail_msg("'%s' missing from:\n%s", want[i], t);
    /* every line is a STAT line */
    for (char *p = t; *p; p = strstr(p, "\r\n") + 2)
        assert_int_equal(strncmp(p, "STAT ", 5), 0);
    free(t);
    expect_ok(f, "-s /tmp/x.sock");
    t = render(&f->s);
    assert_non_null(strstr(t, "STAT domain_socket /tmp/x.sock\r\n"));
    assert_non_null(strstr(t, "STAT evictions on\r\n"));
    free(t);
}

/* The NVMe tier's options (memcached's extstore syntax). */
static void
test_ext_options(void **state)
{
    struct fx *f = *state;
    assert_int_equal(f->s.ext_npaths, 0);
    assert_int_equal(f->s.ext_item_size, 512);
    assert_int_equal(f->s.ext_page_size, 64);
    assert_int_equal(f->s.ext_wbuf_size, 4);
    assert_int_equal(f->s.ext_recache_rate, 2000);
    assert_int_equal(parse(f, "-o ext_path=/tmp/a:1g -o "
                              "ext_path=/tmp/b:c:2t,ext_item_size=1k,"
                              "ext_page_size=32,ext_wbuf_size=8,"
                              "ext_max_frag=0.5,ext_read_timeout_ms=250,"
                              "ext_threads=3,ext_recache_rate=0,"
                              "ext_item_age=60"),
                     0);
    assert_int_equal(f->s.ext_npaths, 2);
    assert_string_equal(f->s.ext_path[0], "/tmp/a");
    assert_int_equal(f->s.ext_size[0], 1ull << 30);
    assert_string_equal(f->s.ext_path[1], "/tmp/b:c"); /* the last colon */
    assert_int_equal(f->s.ext_size[1], 2ull << 40);
    assert_int_equal(f->s.ext_item_size, 1024);
    assert_int_equal(f->s.ext_page_size, 32);
    assert_int_equal(f->s.ext_wbuf_size, 8);
    assert_true(f->s.ext_max_frag > 0.49 && f->s.ext_max_frag < 0.51);
    assert_int_equal(f->s.ext_read_timeout_ms, 250);
    assert_int_equal(f->s.ext_threads, 3);
    assert_int_equal(f->s.ext_recache_rate, 0);
    assert_int_equal(f->s.ext_item_age, 60);

    expect_bad(f, "-o ext_path=/tmp/a", "-o ext_path", "FILE:SIZE");
    expect_bad(f, "-o ext_path=/tmp/a:0", "-o ext_path", "FILE:SIZE");
    expect_bad(f, "-o ext_path=/tmp/a:12q", "-o ext_path", "FILE:SIZE");
    expect_bad(f, "-o ext_path=:1g", "-o ext_path", "FILE:SIZE");
    /* a path that holds no segment, beside one that holds two */
    expect_bad(f, "-o ext_path=/tmp/a:128m,ext_path=/tmp/b:1m", "-o ext_path",
               "do not hold one segment");
    expect_bad(f, "-o ext_page_size=10,ext_wbuf_size=4", "-o ext_page_size",
               "multiple of ext_wbuf_size");
    expect_bad(f, "-o ext_max_frag=2", "-o ext_max_frag", NULL);
    expect_bad(f,
               "-o ext_path=/a:1g,ext_path=/b:1g,ext_path=/c:1g,"
               "ext_path=/d:1g,ext_path=/e:1g,ext_path=/f:1g,ext_path=/g:1g,"
               "ext_path=/h:1g,ext_path=/i:1g",
               "-o ext_path", "at most 8");
}

static void
test_help_lists_everything(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    assert_non_null(m);
    settings_help(m);
    fclose(m);
    static const char *const want[] = {
        "-p, --port",
        "-U, --udp-port",
        "-s, --unix-socket",
        "-a, --unix-mask",
        "-l, --listen",
        "-m, --memory-limit",
        "-M, --disable-evictions",
        "-c, --conn-limit",
        "-t, --threads",
        "-I, --max-item-size",
        "-f, --slab-growth-factor",
        "-n, --slab-min-size",
        "-v, --verbose",
        "-A, --enable-shutdown",
        "-e, --memory-file",
        "-o, --extended",
        "-h, --help",
        "-V, --version",
        "idle_timeout=",
        "slab_chunk_max=",
        "hash_items=",
        "quota_batch=",
        "sweep_budget=",
        "maxconns_fast",
        "no_background",
        "ext_path=<file>:<size>",
        "ext_item_size=",
        "ext_page_size=",
        "ext_read_timeout_ms=",
        "default 11211; a number from 0 to 65535",
        "default 1m; a size from 1k to 1g",
        "default 4; a number from 1 to 256",
    };
    for (unsigned i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (!strstr(text, want[i]))
            fail_msg("help lacks '%s'", want[i]);
    free(text);
}

/* Numbers: strict decimal (leading zeros, no sign, no space, no overflow),
 * sizes with a suffix, octal masks; the limits where the number parsers
 * meet (a size of 32 characters or more is refused however it reads). */
static void
test_number_rules(void **state)
{
    struct fx *f = *state;
    expect_ok(f, "-t 0004");
    assert_int_equal(f->s.threads, 4);
    expect_ok(f, "-o hash_items=17592186044416");
    assert_true(f->s.hash_items == 1ull << 44);
    expect_bad(f, "-o hash_items=17592186044417", "-o hash_items: ", NULL);
    expect_bad(f, "-o hash_items=18446744073709551616",
               "-o hash_items: ", NULL);
    expect_bad(f, "-t +4", "-t: ", NULL);
    expect_bad(f, "-t 4k", "-t: ", NULL);
    expect_ok(f, "-o ext_item_age=4294967295");
    assert_int_equal(f->s.ext_item_age, 4294967295u);
    expect_bad(f, "-o ext_item_age=4294967296", "-o ext_item_age: ", NULL);
    /* sizes: 31 characters at most, suffix included */
    expect_ok(f, "-I 000000000000000000000000000001k");
    assert_int_equal(f->s.item_size_max, 1024);
    expect_bad(f, "-I 0000000000000000000000000000001k", "-I: ", NULL);
    expect_ok(f, "-I 0000000000000000000000000001024");
    assert_int_equal(f->s.item_size_max, 1024);
    expect_bad(f, "-I 00000000000000000000000000001024", "-I: ", NULL);
    expect_ok(f, "-o pool_size=1G");
    assert_true(f->s.pool_size == 1ull << 30);
    expect_bad(f, "-I +1k", "-I: ", NULL);
    expect_bad(f, "-I 1.5m", "-I: ", NULL);
    /* the multiplied size must fit 64 bits */
    expect_ok(f, "-o pool_size=16t");
    assert_true(f->s.pool_size == 16ull << 40);
    expect_bad(f, "-o pool_size=17179869184g", "-o pool_size: ", NULL);
    expect_bad(f, "-o pool_size=18014398509481984k", "-o pool_size: ", NULL);
    expect_ok(f, "-o ext_path=/tmp/a:1T");
    assert_true(f->s.ext_size[0] == 1ull << 40);
    expect_bad(f, "-o ext_path=/tmp/a:+1g", "-o ext_path", "FILE:SIZE");
    /* octal: up to 4 digits */
    expect_ok(f, "-a 0777");
    assert_int_equal(f->s.unix_mask, 0777);
    expect_bad(f, "-a 00777", "-a: ", NULL);
}

/* The copy into struct tc_config: each engine option reaches its field,
 * and the server's defaults are the library's except where options.def
 * says why (the pool's path and size, the smallest chunk, the hot pool,
 * no restart without -e). */
static void
test_engine_config(void **state)
{
    struct fx *f = *state;
    struct tc_config lib, got;
    assert_int_equal(parse(f, ""), 0);
    tc_config_init(&lib);
    settings_to_config(&f->s, &got);
    assert_string_equal(got.pool_path, "/dev/shm/tiercache.11211.pool");
    assert_true(got.pool_size == (64ull << 20) + TC_POOL_HEADER_SIZE);
    assert_true(got.mem_limit == 64ull << 20);
    assert_int_equal(got.min_chunk, 80);
    assert_true(got.hot_pool_size == 8ull << 20);
    assert_true(got.no_restart); /* no -e: the default file is scratch */
    got.pool_path = lib.pool_path;
    got.pool_size = lib.pool_size;
    got.mem_limit = lib.mem_limit;
    got.min_chunk = lib.min_chunk;
    got.hot_pool_size = lib.hot_pool_size;
    got.no_restart = lib.no_restart;
    /* both start from tc_config_init's zeroed struct: padding compares */
    if (memcmp(&got, &lib, sizeof(got)) != 0)
        fail_msg("a server default differs from tc_config_init's");

    expect_ok(f, "-M -m 100 -n 100 -f 1.5 -I 2m -o pool_size=1g,"
                 "slab_chunk_max=256k,hash_items=99,no_background,"
                 "hot_pool_size=0,ext_page_size=32,ext_wbuf_size=8,"
                 "ext_path=/tmp/a:1g,ext_path=/tmp/b:2g,ext_max_frag=0.5");
    settings_to_config(&f->s, &got);
    assert_false(got.evict);
    assert_false(got.background);
    assert_true(got.mem_limit == 100ull << 20);
    assert_true(got.pool_size == (1ull << 30) + TC_POOL_HEADER_SIZE);
    assert_int_equal(got.min_chunk, 136);
    assert_true(got.growth_factor > 1.4999 && got.growth_factor < 1.5001);
    assert_int_equal(got.item_size_max, 2u << 20);
    assert_int_equal(got.chunk_max, 256u << 10);
    assert_int_equal(got.expected_items, 99);
    assert_int_equal(got.hot_pool_size, 0);
    assert_int_equal(got.ext_page_size, 32u << 20);
    assert_int_equal(got.ext_wbuf_size, 8u << 20);
    assert_int_equal(got.ext_npaths, 2);
    assert_string_equal(got.ext_path[1], "/tmp/b");
    assert_true(got.ext_size[1] == 2ull << 30);
    assert_true(got.ext_max_frag > 0.49 && got.ext_max_frag < 0.51);
    /* -M keeps items in slab chunks unless the packed store is asked for */
    assert_int_equal(got.packed_item_max, 0);
    assert_int_equal(f->s.packed_item_max, 0); /* as stats settings shows */
    expect_ok(f, "-M -o packed_item_max=512");
    settings_to_config(&f->s, &got);
    assert_int_equal(got.packed_item_max, 512);
    expect_ok(f, "-m 100");
    settings_to_config(&f->s, &got);
    assert_int_equal(got.packed_item_max, lib.packed_item_max);
}

/* Render "stats settings" and return the value of one line (static). */
static const char *
stat_value(const struct settings *s, const char *name)
{
    static char val[128];
    struct obuf out;
    obuf_init(&out);
    assert_int_equal(settings_render(s, &out), 0);
    char key[96];
    snprintf(key, sizeof(key), "STAT %s ", name);
    const char *p = NULL;
    for (const char *q = out.buf; q && q < out.buf + out.len;) {
        if (!strncmp(q, key, strlen(key))) {
            p = q + strlen(key);
            break;
        }
        q = memchr(q, '\n', (size_t)(out.buf + out.len - q));
        q = q ? q + 1 : NULL;
    }
    if (!p) {
        obuf_fini(&out);
        fail_msg("stats settings has no %s", name);
    }
    size_t n = strcspn(p, "\r");
    snprintf(val, sizeof(val), "%.*s", (int)n, p);
    obuf_fini(&out);
    return val;
}

/* memcached's flags beyond the ones tiercached always had: each parses
 * into its field and, where memcached shows it, into stats settings. */
static void
test_memcached_flags(void **state)
{
    struct fx *f = *state;
    expect_ok(f, "-d -r -u memcache -k -P /run/mc.pid -L -D # -R 7 -C "
                 "-b 37 -B ascii -F -X -W -N 2 -U 0");
    struct settings *s = &f->s;
    assert_true(s->daemonize);
    assert_true(s->maxcore);
    assert_string_equal(s->username, "memcache");
    assert_true(s->lock_memory);
    assert_string_equal(s->pid_file, "/run/mc.pid");
    assert_true(s->large_pages);
    assert_string_equal(s->prefix_delimiter, "#");
    assert_int_equal(s->reqs_per_event, 7);
    assert_true(s->no_cas);
    assert_int_equal(s->backlog, 37);
    assert_string_equal(s->binding_protocol, "ascii");
    assert_true(s->no_flush);
    assert_true(s->no_dump);
    assert_true(s->no_watch);
    assert_int_equal(s->napi_ids, 2);
    assert_string_equal(stat_value(s, "stat_key_prefix"), "#");
    assert_string_equal(stat_value(s, "reqs_per_event"), "7");
    assert_string_equal(stat_value(s, "cas_enabled"), "no");
    assert_string_equal(stat_value(s, "tcp_backlog"), "37");
    assert_string_equal(stat_value(s, "binding_protocol"), "ascii");
    assert_string_equal(stat_value(s, "flush_enabled"), "no");
    assert_string_equal(stat_value(s, "dump_enabled"), "no");

    /* memcached's long names */
    expect_ok(f, "--daemon --enable-coredumps --user=nobody --lock-memory "
                 "--pidfile=/tmp/p --enable-largepages --disable-cas "
                 "--listen-backlog=5 --protocol=binary --disable-flush-all "
                 "--disable-dumping --disable-watch --napi-ids=1 "
                 "--max-reqs-per-event=3");
    assert_true(f->s.daemonize && f->s.maxcore && f->s.lock_memory);
    assert_string_equal(f->s.username, "nobody");
    assert_int_equal(f->s.backlog, 5);
    assert_string_equal(f->s.binding_protocol, "binary");
    assert_int_equal(f->s.reqs_per_event, 3);

    /* defaults as memcached shows them */
    expect_ok(f, "");
    assert_false(f->s.daemonize);
    assert_null(f->s.username);
    assert_null(f->s.pid_file);
    assert_string_equal(stat_value(&f->s, "binding_protocol"),
                        "auto-negotiate");
    assert_string_equal(stat_value(&f->s, "cas_enabled"), "yes");
    assert_string_equal(stat_value(&f->s, "flush_enabled"), "yes");
    assert_string_equal(stat_value(&f->s, "tcp_backlog"), "1024");
    assert_string_equal(stat_value(&f->s, "reqs_per_event"), "20");
    assert_string_equal(stat_value(&f->s, "stat_key_prefix"), ":");
    expect_ok(f, "-B auto");
    assert_string_equal(f->s.binding_protocol, "auto-negotiate");

    expect_bad(f, "-B sideways", "-B: ", "auto, binary, or ascii");
    expect_ok(f, "-D ab"); /* memcached takes the first character */
    assert_string_equal(f->s.prefix_delimiter, "a");
    expect_bad(f, "-R 0", "-R: ", NULL);
    expect_bad(f, "-b 0", "-b: ", NULL);
    expect_bad(f, "-N 0", "-N: ", NULL);
    expect_bad(f, "-u", "-u: ", "needs a value");
    expect_bad(f, "-P", "-P: ", "needs a value");
}

/* -S means the binary protocol only and refuses -B ascii or auto, as
 * memcached does; -Y needs the text protocol; the two do not go together.
 * (The auth file itself is read when the server starts.) */
static void
test_auth_flags(void **state)
{
    struct fx *f = *state;
    expect_ok(f, "-S");
    assert_true(f->s.sasl);
    assert_string_equal(f->s.binding_protocol, "binary");
    assert_string_equal(stat_value(&f->s, "auth_enabled_sasl"), "yes");
    expect_ok(f, "--enable-sasl -B binary");
    expect_bad(f, "-S -B ascii", "-S: ", "cannot allow the ASCII protocol");
    expect_bad(f, "-B auto -S", "-S: ", "cannot allow the ASCII protocol");
    expect_ok(f, "-Y /etc/tc-auth");
    assert_string_equal(f->s.auth_file, "/etc/tc-auth");
    assert_string_equal(stat_value(&f->s, "auth_enabled_ascii"),
                        "/etc/tc-auth");
    assert_string_equal(f->s.binding_protocol, "auto-negotiate");
    expect_ok(f, "-Y /etc/tc-auth -B ascii");
    expect_bad(f, "-Y /etc/tc-auth -B binary", "-Y: ", "text command");
    expect_bad(f, "-S -Y /etc/tc-auth", "-S and -Y: ", "choose one");
    expect_ok(f, "");
    assert_string_equal(stat_value(&f->s, "auth_enabled_ascii"), "no");
    assert_string_equal(stat_value(&f->s, "auth_enabled_sasl"), "no");
}

/* memcached's -o options: every one is accepted; hashpower sizes the
 * index, the no_ forms turn their switch off, the others are shown. */
static void
test_memcached_subopts(void **state)
{
    struct fx *f = *state;
    expect_ok(f, "-o no_modern,modern,lru_crawler,no_lru_crawler,"
                 "hashpower=20,slab_reassign,slab_automove=2,"
                 "tail_repair_time=30,lru_maintainer,no_lru_maintainer,"
                 "read_buf_mem_limit=8,watcher_logbuf_size=128,"
                 "worker_logbuf_size=32,hash_algorithm=xxh3,"
                 "lru_crawler_sleep=50,lru_crawler_tocrawl=9,hot_lru_pct=10,"
                 "warm_lru_pct=30,hot_max_factor=0.3,warm_max_factor=1.5,"
                 "temporary_ttl=10,track_sizes,no_hashexpand,"
                 "sock_cookie_id=4,slab_automove_ratio=0.5,"
                 "slab_automove_window=10,maxconns_fast,idle_timeout=5");
    struct settings *s = &f->s;
    assert_false(s->lru_crawler);
    assert_false(s->lru_maintainer);
    assert_int_equal(s->hashpower, 20);
    assert_int_equal(s->hash_items, 1u << 20);
    assert_string_equal(s->hash_algorithm, "xxh3");
    assert_string_equal(stat_value(s, "hashpower_init"), "20");
    assert_string_equal(stat_value(s, "lru_crawler"), "no");
    assert_string_equal(stat_value(s, "lru_maintainer_thread"), "no");
    assert_string_equal(stat_value(s, "slab_automove"), "2");
    assert_string_equal(stat_value(s, "tail_repair_time"), "30");
    assert_string_equal(stat_value(s, "read_buf_mem_limit"), "8388608");
    assert_string_equal(stat_value(s, "watcher_logbuf_size"), "131072");
    assert_string_equal(stat_value(s, "worker_logbuf_size"), "32768");
    assert_string_equal(stat_value(s, "hash_algorithm"), "xxh3");

    expect_ok(f, "-o ext_io_depth=4,ext_threads=3,ext_low_ttl=5,"
                 "ext_drop_unread,ext_compact_under=2,ext_drop_under=1,"
                 "ext_max_sleep=100,slab_automove_freeratio=0.02");
    assert_int_equal(f->s.ext_io_depth, 4);
    assert_int_equal(f->s.ext_threads, 3);
    expect_ok(f, "-o no_maxconns_fast,no_slab_reassign,no_slab_automove,"
                 "inline_ascii_resp,no_inline_ascii_resp,no_chunked_items");

    /* hash_items given wins over hashpower */
    expect_ok(f, "-o hash_items=1000,hashpower=16");
    assert_int_equal(f->s.hash_items, 1000);
    expect_bad(f, "-o hashpower=5", "-o hashpower: ", "12 to 44");
    expect_bad(f, "-o hashpower=45", "-o hashpower: ", NULL);
    expect_bad(f, "-o slab_automove=3", "-o slab_automove: ", NULL);
    expect_bad(f, "-o tail_repair_time=5", "-o tail_repair_time: ", NULL);
    expect_bad(f, "-o hash_algorithm=", "-o hash_algorithm: ", NULL);
}

/* memcached's ranges: -m down to 1 (the pool file keeps its 4 MiB
 * minimum data area, the limit is -m), -I from 1024 bytes. */
static void
test_memcached_ranges(void **state)
{
    struct fx *f = *state;
    struct tc_config cfg;
    expect_ok(f, "-m 2");
    settings_to_config(&f->s, &cfg);
    assert_true(cfg.mem_limit == 2ull << 20);
    assert_true(cfg.pool_size == TC_POOL_MIN_ITEMS + TC_POOL_HEADER_SIZE);
    expect_ok(f, "-m 3");
    settings_to_config(&f->s, &cfg);
    assert_true(cfg.mem_limit == 3ull << 20);
    expect_ok(f, "-m 8");
    settings_to_config(&f->s, &cfg);
    assert_true(cfg.pool_size == (8ull << 20) + TC_POOL_HEADER_SIZE);
    expect_bad(f, "-m 0", "-m: ", NULL);

    expect_ok(f, "-I 1024");
    assert_int_equal(f->s.item_size_max, 1024);
    expect_ok(f, "-I 2000");
    assert_int_equal(f->s.item_size_max, 2000);
    expect_bad(f, "-I 1000", "-I: ", "1k");
}

/* ext_path below two default segments: smaller segments, or the reason. */
static void
test_ext_fit(void **state)
{
    struct fx *f = *state;
    expect_ok(f, "-o ext_path=/tmp/x:64m");
    assert_int_equal(f->s.ext_page_size, 32);
    assert_int_equal(f->s.ext_wbuf_size, 4);
    assert_int_equal(f->s.ext_page_shrunk_from, 64);
    expect_ok(f, "-o ext_path=/tmp/x:10m");
    assert_int_equal(f->s.ext_page_size, 4);
    expect_ok(f, "-o ext_path=/tmp/x:3m");
    assert_int_equal(f->s.ext_page_size, 1);
    assert_int_equal(f->s.ext_wbuf_size, 1);
    expect_ok(f, "-o ext_path=/tmp/x:128m");
    assert_int_equal(f->s.ext_page_size, 64);
    assert_int_equal(f->s.ext_page_shrunk_from, 0);
    /* two paths count together */
    expect_ok(f, "-o ext_path=/tmp/x:64m,ext_path=/tmp/y:64m");
    assert_int_equal(f->s.ext_page_size, 64);
    /* a given write buffer stays; the segments stay multiples of it */
    expect_ok(f, "-o ext_wbuf_size=8,ext_path=/tmp/x:40m");
    assert_int_equal(f->s.ext_wbuf_size, 8);
    assert_int_equal(f->s.ext_page_size, 16);
    expect_bad(f, "-o ext_path=/tmp/x:1m", "-o ext_path: ", "2 segments");
    expect_bad(f, "-o ext_page_size=64,ext_path=/tmp/x:64m",
               "-o ext_path: ", "needs 2");
}

/* -Z and memcached's ssl_* options: the files it needs, the ranges, the
 * "stats settings" lines; long file names survive -o's copy. */
static void
test_tls_options(void **state)
{
    struct fx *f = *state;
    expect_bad(f, "-Z", "-Z: ", "both are missing");
    expect_bad(f, "-Z -o ssl_chain_cert=/c.pem", "-Z: ", "ssl_key is missing");
    expect_bad(f, "-Z -o ssl_key=/k.pem", "-Z: ", "ssl_chain_cert is missing");
    expect_bad(f, "-Z -p 0 -s /tmp/x.sock -o ssl_chain_cert=/c,ssl_key=/k",
               "-Z: ", "TCP port");
    expect_bad(f, "-o ssl_verify_mode=4", "-o ssl_verify_mode: ", "3 (once)");
    expect_bad(f, "-o ssl_min_version=4", "-o ssl_min_version: ", "tlsv1.3");
    expect_bad(f, "-o ssl_keyformat=3", "-o ssl_keyformat: ", "2 (DER)");
    /* without -Z the ssl_* options are only settings, as in memcached */
    expect_ok(f, "-o ssl_verify_mode=2");
    char chain[200], opts[600];
    memset(chain, 'c', sizeof(chain) - 1);
    chain[0] = '/';
    chain[sizeof(chain) - 1] = '\0';
    snprintf(opts, sizeof(opts),
             "-Z -o ssl_chain_cert=%s,ssl_key=/tmp/k.pem,ssl_ca_cert=/ca,"
             "ssl_verify_mode=3,ssl_min_version=3,ssl_ciphers=HIGH,"
             "hash_algorithm=xxh3",
             chain);
    expect_ok(f, opts);
    assert_true(f->s.tls);
    assert_string_equal(f->s.ssl_chain_cert, chain);
    assert_string_equal(f->s.ssl_key, "/tmp/k.pem");
    assert_string_equal(f->s.ssl_ca_cert, "/ca");
    assert_string_equal(f->s.ssl_ciphers, "HIGH");
    assert_int_equal(f->s.ssl_verify_mode, 3);
    char *t = render(&f->s);
    static const char *const want[] = {
        "STAT ssl_enabled yes\r\n",     "STAT ssl_key /tmp/k.pem\r\n",
        "STAT ssl_verify_mode 3\r\n",   "STAT ssl_keyformat 1\r\n",
        "STAT ssl_ciphers HIGH\r\n",    "STAT ssl_ca_cert /ca\r\n",
        "STAT ssl_wbuf_size 16384\r\n", "STAT ssl_session_cache no\r\n",
        "STAT ssl_kernel_tls no\r\n",   "STAT ssl_min_version tlsv1.3\r\n",
        "STAT hash_algorithm xxh3\r\n",
    };
    for (unsigned i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (!strstr(t, want[i]))
            fail_msg("'%s' missing from:\n%s", want[i], t);
    free(t);
    expect_ok(f, "");
    t = render(&f->s);
    assert_non_null(strstr(t, "STAT ssl_enabled no\r\n"));
    assert_non_null(strstr(t, "STAT ssl_chain_cert (null)\r\n"));
    assert_non_null(strstr(t, "STAT ssl_min_version tlsv1.2\r\n"));
    free(t);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_help_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_size_suffixes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_subopts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_subopts_bad, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_listen_and_unix, setup, teardown),
        cmocka_unit_test_setup_teardown(test_render, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ext_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_help_lists_everything, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_number_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_engine_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memcached_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memcached_subopts, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_memcached_ranges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ext_fit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tls_options, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
