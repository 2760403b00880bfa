#pragma once
/*
 * tiercached's command line: memcached's flags where the meaning matches,
 * plus tiercache's own options under -o name=value. One table,
 * options.def (one row an option: flag, name, type, default, range,
 * "stats settings" name, where the engine takes it, help), makes the
 * fields of struct settings below, and in settings.c the parser, the
 * one-line error for a bad value, --help, "stats settings" and the copy
 * into struct tc_config.
 *
 * Concurrency: filled once by main() before any thread starts; read-only
 * afterwards (the live values that commands change, verbosity and the
 * memory limit, are kept by the server, which renders a patched copy).
 */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "src/server/obuf.h"

struct tc_config;

#define SETTINGS_PATH_MAX 512
#define SETTINGS_LISTEN_MAX 1024
#define SETTINGS_EXT_PATHS 8        /* TC_EXT_MAX_PATHS */
#define SETTINGS_OPTS_MAX 192       /* rows of options.def, at most */
#define SETTINGS_SUBOPT_STRS 8      /* -o text values kept (file names) */
#define SETTINGS_SUBOPT_STR_MAX 256 /* one, with its NUL: an -o item's most */

enum settings_action {
    SETTINGS_RUN = 0,
    SETTINGS_HELP,    /* -h: print settings_help() and exit 0 */
    SETTINGS_VERSION, /* -V: print "tiercached 0.1.0" and exit 0 */
    SETTINGS_LICENSE, /* -i: print the license line and exit 0 */
};

/* The C type of each option type's field (options.def explains them). */
#define SETTINGS_FIELD_OT_UINT(f) uint64_t f;
#define SETTINGS_FIELD_OT_SIZE(f) uint64_t f; /* bytes */
#define SETTINGS_FIELD_OT_OCTAL(f) uint64_t f;
#define SETTINGS_FIELD_OT_COUNT(f) uint64_t f;
#define SETTINGS_FIELD_OT_DOUBLE(f) double f;
#define SETTINGS_FIELD_OT_BOOL(f) bool f;
#define SETTINGS_FIELD_OT_STR(f) const char *f; /* NULL = unset */
#define SETTINGS_FIELD_OT_LIST(f) const char *f;
#define SETTINGS_FIELD_OT_EXTPATH(f) /* the ext_* arrays below */

struct settings {
    /* one field an option row, named and typed by the row */
#define FLAG(flag, name, field, type, ...) SETTINGS_FIELD_##type(field)
#define OPT(field, type, ...) SETTINGS_FIELD_##type(field)
#include "src/server/options.def"

    /* -o ext_path=FILE:SIZE, repeatable: the NVMe tier's files */
    unsigned ext_npaths;
    char ext_path[SETTINGS_EXT_PATHS][SETTINGS_PATH_MAX];
    uint64_t ext_size[SETTINGS_EXT_PATHS]; /* bytes */

    enum settings_action action;
    bool port_given; /* -p appeared: with -s, keep TCP on too */
    /* options.def's rows given on the command line (by row): their NOTE
     * lines are logged once (settings_log_notes()) */
    bool given[SETTINGS_OPTS_MAX];
    /* text values of -o options (hash_algorithm, ssl_* files), copied out
     * of the list */
    char subopt_buf[SETTINGS_SUBOPT_STRS][SETTINGS_SUBOPT_STR_MAX];
    unsigned nsubopt_str;
    /* ext_path sizes too small for two segments of the default
     * ext_page_size: the segment size it had (MiB), for the log line;
     * 0 = not shrunk */
    uint64_t ext_page_shrunk_from;
    char delimiter_buf[2]; /* -D's first character */
    char listen_buf[SETTINGS_LISTEN_MAX];
    char pool_buf[SETTINGS_PATH_MAX];
    bool pool_default; /* no -e: the file is named after the port and every
                          start is cold (no restart), as memcached restores
                          only from its -e file */
};

/* Fill s with the defaults. */
void settings_init(struct settings *s);

/* Parse argv[1..argc) over the defaults already in s (call settings_init
 * first), then fill what depends on other values (the pool path). 0, or
 * -EINVAL with one line naming the flag in err_msg() (no program name in
 * front). Strings in s point into argv or into s itself. */
int settings_parse(struct settings *s, int argc, char *const argv[]);

/* Smallest slab chunk in bytes: -n plus the item header, rounded up to 8. */
uint32_t settings_min_chunk(const struct settings *s);

/* Log, once each, the NOTE lines of the options given (memcached's
 * options that do nothing, or something else, here). */
void settings_log_notes(const struct settings *s);

/* Usage: every flag and -o option with its default and range. */
void settings_help(FILE *f);

/* "STAT name value\r\n" lines for "stats settings", memcached's names. */
int settings_render(const struct settings *s, struct obuf *out);

/* Fill cfg for tc_open(): tc_config_init(), then every option the engine
 * takes (options.def's "to" column). Strings point into s. */
void settings_to_config(const struct settings *s, struct tc_config *cfg);
