/*
 * tiercached's settings: one table (options.def, made into opts[] below)
 * drives parsing of memcached's flags and of -o name=value, the one-line
 * error for a bad value, the --help text, "stats settings" and the copy
 * into struct tc_config. Each row names its flag, its type, its default
 * (as text, parsed like a command-line value), its range, where the engine
 * takes it and what it means.
 *
 * Concurrency: none; main() parses before any thread starts.
 */

#include "src/server/settings.h"

#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/base/log.h"
#include "src/base/num.h"
#include "src/tiercache.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

enum opt_type {
    OT_UINT,    /* decimal number */
    OT_SIZE,    /* bytes, with an optional k, m or g suffix */
    OT_DOUBLE,  /* decimal fraction */
    OT_OCTAL,   /* octal mask (-a) */
    OT_STR,     /* text, up to max bytes */
    OT_LIST,    /* text; a repeated flag appends with a comma (-l) */
    OT_BOOL,    /* flag without value; under -o optionally =0/1 */
    OT_COUNT,   /* flag without value, counted (-v, -vv) */
    OT_SUBOPT,  /* -o name=value[,...] */
    OT_EXTPATH, /* FILE:SIZE, repeatable (-o ext_path) */
    OT_ACTION,  /* -h, -V */
};

/* How "stats settings" shows a value. */
enum opt_show {
    SHOW_NONE,        /* not shown */
    SHOW_NUM,         /* the number */
    SHOW_MIB,         /* MiB shown as bytes (maxbytes) */
    SHOW_KIB,         /* KiB shown as bytes (watcher_logbuf_size) */
    SHOW_NUM3,        /* a fraction with 3 decimals, as memcached shows it */
    SHOW_NUM_NULL,    /* the number, "(null)" for 0 (unset) as memcached */
    SHOW_STR,         /* the text, "NULL" when unset */
    SHOW_STR_NULL,    /* the text, "(null)" when unset (memcached prints a
                         NULL pointer for ssl_chain_cert and ssl_key) */
    SHOW_OCTAL,       /* 700 */
    SHOW_YESNO,       /* yes / no */
    SHOW_NOT_YESNO,   /* inverted bool: no / yes */
    SHOW_NOT_ONOFF,   /* inverted bool: -M shown as evictions on / off */
    SHOW_TLS_VERSION, /* 0..3 shown as tlsv1.0..tlsv1.3 (ssl_min_version) */
};

struct opt {
    char flag;        /* short flag, 0 for none */
    const char *name; /* long flag (--name), or the -o name when sub */
    bool sub;         /* an -o option */
    enum opt_type type;
    size_t off;        /* field in struct settings */
    const char *def;   /* default, as text; NULL = none or computed */
    uint64_t min, max; /* range of OT_UINT / OT_SIZE / OT_OCTAL / OT_STR
                          (length) */
    double dmin, dmax; /* range of OT_DOUBLE */
    const char *stat;  /* name in "stats settings" */
    enum opt_show show;
    const char *arg; /* placeholder in --help */
    const char *help;
    const char *bad; /* replaces the range text in the error, if set */
};

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

/* options.def's rows as struct opt: one range pair serves as integers and
 * as doubles, each type reads the one it needs. */
#define OPT_ROW(sub_, flag_, name_, off_, type_, def_, lo_, hi_, stat_, show_, \
                arg_, help_, bad_)                                             \
    {.flag = flag_,                                                            \
     .name = name_,                                                            \
     .sub = sub_,                                                              \
     .type = type_,                                                            \
     .off = off_,                                                              \
     .def = def_,                                                              \
     .min = (uint64_t)(lo_),                                                   \
     .max = (uint64_t)(hi_),                                                   \
     .dmin = (lo_),                                                            \
     .dmax = (hi_),                                                            \
     .stat = stat_,                                                            \
     .show = show_,                                                            \
     .arg = arg_,                                                              \
     .help = help_,                                                            \
     .bad = bad_},
#define FLAG(flag_, name_, field_, type_, def_, lo_, hi_, stat_, show_, to_,   \
             arg_, help_, bad_)                                                \
    OPT_ROW(false, flag_, name_, offsetof(struct settings, field_), type_,     \
            def_, lo_, hi_, stat_, show_, arg_, help_, bad_)
#define OPT(field_, type_, def_, lo_, hi_, stat_, show_, to_, arg_, help_,     \
            bad_)                                                              \
    OPT_ROW(true, 0, #field_, offsetof(struct settings, field_), type_, def_,  \
            lo_, hi_, stat_, show_, arg_, help_, bad_)
#define CMD(flag_, name_, type_, action_, arg_, help_)                         \
    OPT_ROW(false, flag_, name_, action_, type_, NULL, 0, 0, NULL, SHOW_NONE,  \
            arg_, help_, NULL)

static const struct opt opts[] = {
#include "src/server/options.def"
};
#undef OPT_ROW
_Static_assert(ARRAY_SIZE(opts) <= SETTINGS_OPTS_MAX,
               "struct settings' given[] has a slot per row");

/* options.def's NOTE rows: the line an option given leaves */
static const struct {
    const char *name, *text;
} notes[] = {
#define NOTE(name_, text_) {name_, text_},
#include "src/server/options.def"
};

/* Fixed lines of "stats settings" memcached prints and tools may expect. */
static const char *const fixed_stats[][2] = {
    {"detail_enabled", "no"}, /* no per-prefix stats (-D) */
    {"lru_segmented", "no"},  /* eviction is a CLOCK per class */
    {"temp_lru", "no"},
    {"inline_ascii_response", "no"},
};

/* --- field access --- */

static void *
field(struct settings *s, const struct opt *o)
{
    return (char *)s + o->off;
}

static const void *
cfield(const struct settings *s, const struct opt *o)
{
    return (const char *)s + o->off;
}

/* --- number parsing (strict: the whole text, no sign, no overflow) --- */

static bool
parse_u64(const char *p, uint64_t *out)
{
    return num_parse_u64(p, strlen(p), UINT64_MAX, out);
}

static bool
parse_size(const char *p, uint64_t *out)
{
    size_t n = strlen(p);
    uint64_t mult = 1, v;
    if (n == 0 || n >= 32) /* 31 characters at most, suffix included */
        return false;
    switch (p[n - 1]) {
    case 'k':
    case 'K':
        mult = KIB;
        n--;
        break;
    case 'm':
    case 'M':
        mult = MIB;
        n--;
        break;
    case 'g':
    case 'G':
        mult = GIB;
        n--;
        break;
    case 't':
    case 'T':
        mult = GIB * 1024;
        n--;
        break;
    default:
        break;
    }
    if (!num_parse_u64(p, n, UINT64_MAX / mult, &v))
        return false;
    *out = v * mult;
    return true;
}

static bool
parse_octal(const char *p, uint64_t *out)
{
    uint64_t v = 0;
    if (!*p || strlen(p) > 4)
        return false;
    for (; *p; p++) {
        if (*p < '0' || *p > '7')
            return false;
        v = v * 8 + (uint64_t)(*p - '0');
    }
    *out = v;
    return true;
}

static bool
parse_double(const char *p, double *out)
{
    char *end;
    if (!*p || !((*p >= '0' && *p <= '9') || *p == '.'))
        return false;
    errno = 0;
    double v = strtod(p, &end);
    if (*end || errno || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool
parse_bool(const char *p, bool *out)
{
    static const char *const yes[] = {"1", "yes", "true", "on"};
    static const char *const no[] = {"0", "no", "false", "off"};
    for (unsigned i = 0; i < ARRAY_SIZE(yes); i++) {
        if (!strcmp(p, yes[i]) || !strcmp(p, no[i])) {
            *out = !strcmp(p, yes[i]);
            return true;
        }
    }
    return false;
}

/* "1k", "512k", "1m", or plain bytes when not a whole multiple. */
static const char *
fmt_size(uint64_t v, char *buf, size_t n)
{
    if (v && v % GIB == 0)
        snprintf(buf, n, "%llug", (unsigned long long)(v / GIB));
    else if (v && v % MIB == 0)
        snprintf(buf, n, "%llum", (unsigned long long)(v / MIB));
    else if (v && v % KIB == 0)
        snprintf(buf, n, "%lluk", (unsigned long long)(v / KIB));
    else
        snprintf(buf, n, "%llu", (unsigned long long)v);
    return buf;
}

/* What a value of o may be, for errors and --help. */
static const char *
range_text(const struct opt *o, char *buf, size_t n)
{
    char a[24], b[24];
    switch (o->type) {
    case OT_UINT:
        if (o->min == o->max) {
            snprintf(buf, n, "only %llu", (unsigned long long)o->min);
            break;
        }
        snprintf(buf, n, "a number from %llu to %llu",
                 (unsigned long long)o->min, (unsigned long long)o->max);
        break;
    case OT_SIZE:
        snprintf(buf, n,
                 "a size from %s to %s (bytes, or with a k, m or g "
                 "suffix)",
                 fmt_size(o->min, a, sizeof(a)),
                 fmt_size(o->max, b, sizeof(b)));
        break;
    case OT_DOUBLE:
        snprintf(buf, n, "a number from %g to %g", o->dmin, o->dmax);
        break;
    case OT_OCTAL:
        snprintf(buf, n, "an octal mask from 0 to %llo",
                 (unsigned long long)o->max);
        break;
    case OT_STR:
    case OT_LIST:
        snprintf(buf, n, "a value of 1 to %llu bytes",
                 (unsigned long long)o->max);
        break;
    case OT_BOOL:
        snprintf(buf, n, "no value, or one of 1, 0, yes, no");
        break;
    case OT_EXTPATH:
        snprintf(buf, n, "FILE:SIZE");
        break;
    default:
        snprintf(buf, n, "no value");
        break;
    }
    return buf;
}

static int
bad_value(const struct opt *o, const char *shown, const char *val)
{
    char r[128];
    if (o->bad)
        err_set("%s: %s, got '%s'", shown, o->bad, val);
    else
        err_set("%s: expected %s, got '%s'", shown, range_text(o, r, sizeof(r)),
                val);
    return -EINVAL;
}

/* --- setting one value --- */

static int
set_list(struct settings *s, const struct opt *o, const char *shown,
         const char *val)
{
    const char **dst = field(s, o);
    size_t have = *dst == s->listen_buf ? strlen(s->listen_buf) : 0;
    size_t n = strlen(val);
    if (n == 0 || have + !!have + n > o->max)
        return bad_value(o, shown, val);
    if (have)
        s->listen_buf[have++] = ',';
    memcpy(s->listen_buf + have, val, n + 1);
    *dst = s->listen_buf;
    return 0;
}

static int
set_number(struct settings *s, const struct opt *o, const char *shown,
           const char *val)
{
    uint64_t v;
    bool ok = o->type == OT_SIZE    ? parse_size(val, &v)
              : o->type == OT_OCTAL ? parse_octal(val, &v)
                                    : parse_u64(val, &v);
    if (!ok || v < o->min || v > o->max)
        return bad_value(o, shown, val);
    *(uint64_t *)field(s, o) = v;
    return 0;
}

/* FILE:SIZE (the size after the last colon), copied into s. */
static int
set_ext_path(struct settings *s, const struct opt *o, const char *shown,
             const char *val)
{
    const char *colon = strrchr(val, ':');
    uint64_t size;
    if (!colon || colon == val || !parse_size(colon + 1, &size) || !size ||
        (size_t)(colon - val) > o->max)
        return bad_value(o, shown, val);
    if (s->ext_npaths == SETTINGS_EXT_PATHS) {
        err_set("%s: at most %d paths", shown, SETTINGS_EXT_PATHS);
        return -EINVAL;
    }
    char *dst = s->ext_path[s->ext_npaths];
    memcpy(dst, val, (size_t)(colon - val));
    dst[colon - val] = '\0';
    s->ext_size[s->ext_npaths++] = size;
    return 0;
}

/* Apply val (NULL for a flag without value) to option o. */
static int
set_value(struct settings *s, const struct opt *o, const char *shown,
          const char *val)
{
    switch (o->type) {
    case OT_UINT:
    case OT_SIZE:
    case OT_OCTAL:
        return set_number(s, o, shown, val);
    case OT_DOUBLE: {
        double d;
        if (!parse_double(val, &d) || d < o->dmin || d > o->dmax)
            return bad_value(o, shown, val);
        *(double *)field(s, o) = d;
        return 0;
    }
    case OT_STR:
        if (!*val || strlen(val) > o->max)
            return bad_value(o, shown, val);
        *(const char **)field(s, o) = val;
        return 0;
    case OT_LIST:
        return set_list(s, o, shown, val);
    case OT_BOOL: {
        bool b = true;
        if (val && !parse_bool(val, &b))
            return bad_value(o, shown, val);
        *(bool *)field(s, o) = b;
        return 0;
    }
    case OT_COUNT: {
        uint64_t *c = field(s, o);
        if (*c < o->max)
            (*c)++;
        return 0;
    }
    case OT_ACTION:
        s->action = (enum settings_action)o->off;
        return 0;
    case OT_EXTPATH:
        return set_ext_path(s, o, shown, val);
    case OT_SUBOPT:
        break;
    }
    return -EINVAL; /* OT_SUBOPT is handled by parse_subopts() */
}

static bool
takes_value(const struct opt *o)
{
    return o->type != OT_BOOL && o->type != OT_COUNT && o->type != OT_ACTION;
}

static const struct opt *
find_short(char c)
{
    for (unsigned i = 0; i < ARRAY_SIZE(opts); i++)
        if (!opts[i].sub && opts[i].flag == c)
            return &opts[i];
    return NULL;
}

static const struct opt *
find_name(const char *name, size_t n, bool sub)
{
    for (unsigned i = 0; i < ARRAY_SIZE(opts); i++)
        if (opts[i].sub == sub && strlen(opts[i].name) == n &&
            !memcmp(opts[i].name, name, n))
            return &opts[i];
    return NULL;
}

/* --- -o name=value[,name=value...] --- */

static void
mark_given(struct settings *s, const struct opt *o)
{
    s->given[o - opts] = true;
}

static int
parse_subopt(struct settings *s, const char *item)
{
    const char *eq = strchr(item, '=');
    size_t n = eq ? (size_t)(eq - item) : strlen(item);
    const struct opt *o = find_name(item, n, true);
    char shown[80];
    if (!o) {
        err_set("-o: unknown option '%.*s' (tiercached -h lists them)",
                (int)MIN(n, 64), item);
        return -EINVAL;
    }
    snprintf(shown, sizeof(shown), "-o %s", o->name);
    if (!eq && takes_value(o)) {
        char r[128];
        err_set("%s: needs a value: %s", shown, range_text(o, r, sizeof(r)));
        return -EINVAL;
    }
    mark_given(s, o);
    if (o->type == OT_STR) {
        /* the value lives in a copy of the item: keep a copy of text
         * values (the only ones that point into it) in s */
        if (!eq || strlen(eq + 1) >= sizeof(s->subopt_buf[0]) ||
            s->nsubopt_str == SETTINGS_SUBOPT_STRS)
            return bad_value(o, shown, eq ? eq + 1 : "");
        char *dst = s->subopt_buf[s->nsubopt_str++];
        strcpy(dst, eq + 1);
        return set_value(s, o, shown, dst);
    }
    return set_value(s, o, shown, eq ? eq + 1 : NULL);
}

static int
parse_subopts(struct settings *s, const char *list)
{
    char item[256];
    const char *p = list;
    if (!*p) {
        err_set("-o: expected name=value[,name=value...], got ''");
        return -EINVAL;
    }
    for (;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n >= sizeof(item)) {
            err_set("-o: option '%.40s...' is too long", p);
            return -EINVAL;
        }
        memcpy(item, p, n);
        item[n] = '\0';
        if (n) {
            int rc = parse_subopt(s, item);
            if (rc)
                return rc;
        }
        if (!end)
            return 0;
        p = end + 1;
    }
}

/* --- argv --- */

static int
apply(struct settings *s, const struct opt *o, const char *shown,
      const char *val)
{
    mark_given(s, o);
    if (o->flag == 'p')
        s->port_given = true;
    if (o->type == OT_SUBOPT)
        return parse_subopts(s, val);
    return set_value(s, o, shown, val);
}

static int
missing_value(const struct opt *o, const char *shown)
{
    char r[128];
    if (o->type == OT_SUBOPT)
        err_set("%s: needs a value: name=value[,name=value...]", shown);
    else if (o->bad)
        err_set("%s: needs a value (%s)", shown, o->bad);
    else
        err_set("%s: needs a value: %s", shown, range_text(o, r, sizeof(r)));
    return -EINVAL;
}

/* --name, --name=value or --name value. *i advances past a value taken. */
static int
parse_long(struct settings *s, int argc, char *const argv[], int *i)
{
    const char *a = argv[*i] + 2;
    const char *eq = strchr(a, '=');
    size_t n = eq ? (size_t)(eq - a) : strlen(a);
    const struct opt *o = find_name(a, n, false);
    char shown[48];
    if (!o) {
        err_set("unknown flag '--%.*s' (tiercached -h lists the flags)",
                (int)MIN(n, 32), a);
        return -EINVAL;
    }
    snprintf(shown, sizeof(shown), "--%s", o->name);
    if (!takes_value(o)) {
        if (eq) {
            err_set("%s: takes no value, got '%s'", shown, eq + 1);
            return -EINVAL;
        }
        return apply(s, o, shown, NULL);
    }
    if (eq)
        return apply(s, o, shown, eq + 1);
    if (*i + 1 >= argc)
        return missing_value(o, shown);
    return apply(s, o, shown, argv[++*i]);
}

/* -x, -xVALUE, -x VALUE, or bundled flags without values (-vv, -Mv). */
static int
parse_short(struct settings *s, int argc, char *const argv[], int *i)
{
    const char *a = argv[*i];
    for (int j = 1; a[j]; j++) {
        const struct opt *o = find_short(a[j]);
        char shown[4] = {'-', a[j], '\0', '\0'};
        if (!o) {
            err_set("unknown flag '-%c' (tiercached -h lists the flags)", a[j]);
            return -EINVAL;
        }
        if (!takes_value(o)) {
            int rc = apply(s, o, shown, NULL);
            if (rc || s->action != SETTINGS_RUN)
                return rc;
            continue;
        }
        if (a[j + 1])
            return apply(s, o, shown, a + j + 1);
        if (*i + 1 >= argc)
            return missing_value(o, shown);
        return apply(s, o, shown, argv[++*i]);
    }
    return 0;
}

/* --- checks across options, computed values --- */

/* -n's room counts the client flags (memcached's help: "key+value+flags"),
 * which the engine keeps after the key when they are not 0: 4 bytes, 8 with
 * the alignment. So -n 48 gives the 80-byte smallest chunk, and the
 * classes -f grows from it, that the 32-byte header gave. */
#define SETTINGS_FLAGS_ROOM 8u

uint32_t
settings_min_chunk(const struct settings *s)
{
    return (uint32_t)ALIGN_UP(
        s->chunk_size + TC_ITEM_HEADER_SIZE + SETTINGS_FLAGS_ROOM, 8ull);
}

static int
check_slabs(const struct settings *s)
{
    /* the engine chains an item over at most TC_ITEM_MAX_TAILS tails of
     * slab_chunk_max - TC_ITEM_TAIL_HEADER_SIZE bytes each */
    uint64_t per_tail = s->slab_chunk_max - TC_ITEM_TAIL_HEADER_SIZE;
    uint64_t item_max = TC_ITEM_MAX_TAILS * per_tail - 1;
    if (s->slab_chunk_max % 8) {
        err_set("-o slab_chunk_max: expected a multiple of 8, got %llu",
                (unsigned long long)s->slab_chunk_max);
        return -EINVAL;
    }
    if (s->slab_chunk_step % 8) {
        err_set("-o slab_chunk_step: expected a multiple of 8, got %llu",
                (unsigned long long)s->slab_chunk_step);
        return -EINVAL;
    }
    if (s->item_size_max > item_max) {
        err_set("-I: at most %llu bytes with -o slab_chunk_max=%llu (raise "
                "slab_chunk_max, up to 1m), got %llu",
                (unsigned long long)item_max,
                (unsigned long long)s->slab_chunk_max,
                (unsigned long long)s->item_size_max);
        return -EINVAL;
    }
    if (settings_min_chunk(s) > s->slab_chunk_max) {
        err_set("-n: %llu plus the %u-byte item header and flags is more "
                "than slab_chunk_max %llu",
                (unsigned long long)s->chunk_size,
                TC_ITEM_HEADER_SIZE + SETTINGS_FLAGS_ROOM,
                (unsigned long long)s->slab_chunk_max);
        return -EINVAL;
    }
    return 0;
}

static int
check_pool(const struct settings *s)
{
    if (s->pool_size % MIB) {
        err_set("-o pool_size: expected whole MiB, got %llu bytes",
                (unsigned long long)s->pool_size);
        return -EINVAL;
    }
    if (s->pool_size && s->pool_size < s->maxbytes_mib * MIB) {
        err_set("-o pool_size: %llu MiB is less than -m %llu",
                (unsigned long long)(s->pool_size / MIB),
                (unsigned long long)s->maxbytes_mib);
        return -EINVAL;
    }
    return 0;
}

static bool
given_sub(const struct settings *s, const char *name)
{
    const struct opt *o = find_name(name, strlen(name), true);
    return o && s->given[o - opts];
}

/* Segments of seg MiB the ext paths hold in all. */
static uint64_t
ext_segments(const struct settings *s, uint64_t seg_mib)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < s->ext_npaths; i++)
        n += s->ext_size[i] / (seg_mib * MIB);
    return n;
}

/* The NVMe store needs two segments at least: one being filled and one a
 * compaction moves live values into. Paths too small for two of the
 * default 64 MiB (memcached's tests use small ones) get the largest
 * segment size that gives two, a multiple of the write buffer (which
 * shrinks with it, down to 1 MiB, unless ext_wbuf_size was given). An
 * ext_page_size given is kept, and the error says why it cannot be. */
static int
fit_ext_segments(struct settings *s)
{
    uint64_t total = 0;
    for (unsigned i = 0; i < s->ext_npaths; i++)
        total += s->ext_size[i];
    if (!s->ext_npaths || ext_segments(s, s->ext_page_size) >= 2)
        return 0;
    if (given_sub(s, "ext_page_size")) {
        err_set("-o ext_path: %llu bytes in all hold %llu segment(s) of "
                "ext_page_size %llu MiB; the NVMe store needs 2 (one being "
                "filled, one to compact into)",
                (unsigned long long)total,
                (unsigned long long)ext_segments(s, s->ext_page_size),
                (unsigned long long)s->ext_page_size);
        return -EINVAL;
    }
    bool wbuf_given = given_sub(s, "ext_wbuf_size");
    for (uint64_t seg = s->ext_page_size - 1; seg >= 1; seg--) {
        uint64_t wbuf =
            wbuf_given ? s->ext_wbuf_size : MIN(s->ext_wbuf_size, seg);
        if (seg % wbuf || ext_segments(s, seg) < 2)
            continue;
        s->ext_page_shrunk_from = s->ext_page_size;
        s->ext_page_size = seg;
        s->ext_wbuf_size = wbuf;
        return 0;
    }
    err_set("-o ext_path: the NVMe store needs room for 2 segments (one being "
            "filled, one to compact into) of at least %llu MiB "
            "(ext_wbuf_size), got %llu bytes",
            (unsigned long long)(wbuf_given ? s->ext_wbuf_size : 1),
            (unsigned long long)total);
    return -EINVAL;
}

static int
check_ext(struct settings *s)
{
    if (s->ext_page_size % s->ext_wbuf_size) {
        err_set("-o ext_page_size: %llu MiB is not a multiple of "
                "ext_wbuf_size %llu MiB",
                (unsigned long long)s->ext_page_size,
                (unsigned long long)s->ext_wbuf_size);
        return -EINVAL;
    }
    int rc = fit_ext_segments(s);
    if (rc)
        return rc;
    for (unsigned i = 0; i < s->ext_npaths; i++) {
        if (s->ext_size[i] < s->ext_page_size * MIB) {
            err_set("-o ext_path: %s: %llu bytes do not hold one segment "
                    "of ext_page_size %llu MiB",
                    s->ext_path[i], (unsigned long long)s->ext_size[i],
                    (unsigned long long)s->ext_page_size);
            return -EINVAL;
        }
    }
    return 0;
}

/* -B: memcached's names; "auto" shows as memcached shows it */
static int
check_protocol(struct settings *s)
{
    const char *b = s->binding_protocol;
    if (!strcmp(b, "auto") || !strcmp(b, "auto-negotiate")) {
        s->binding_protocol = "auto-negotiate";
        return 0;
    }
    if (!strcmp(b, "ascii") || !strcmp(b, "binary"))
        return 0;
    err_set("-B: expected one of auto, binary, or ascii, got '%s'", b);
    return -EINVAL;
}

/* -o durability: process or power */
static int
check_durability(const struct settings *s)
{
    if (!strcmp(s->durability, "process") || !strcmp(s->durability, "power"))
        return 0;
    err_set("-o durability: expected process or power, got '%s'",
            s->durability);
    return -EINVAL;
}

/* -o packed_evict: merge or fifo */
static int
check_packed_evict(const struct settings *s)
{
    if (!strcmp(s->packed_evict, "merge") || !strcmp(s->packed_evict, "fifo"))
        return 0;
    err_set("-o packed_evict: expected merge or fifo, got '%s'",
            s->packed_evict);
    return -EINVAL;
}

/* -S and -Y against -B. SASL runs over the binary protocol, so -S alone
 * means -B binary and refuses the text protocol, as memcached does; the -Y
 * login is a text command, so -B binary leaves nothing to log in with.
 * memcached takes -S with -Y and then serves only the text login; here the
 * pair is refused (the auth file itself is read when the server starts,
 * src/server/auth.c). */
static int
check_auth(struct settings *s)
{
    const struct opt *b = find_short('B');
    bool b_given = b && s->given[b - opts];
    if (s->sasl && s->auth_file) {
        err_set("-S and -Y: SASL (binary protocol) and the auth file (text "
                "protocol) cannot be used together; choose one");
        return -EINVAL;
    }
    if ((s->sasl || s->auth_file) && s->udp_port) {
        /* a datagram has no connection to log in on: UDP beside a login
         * would serve anyone */
        err_set("-U: UDP has no login; it cannot be on with %s",
                s->sasl ? "-S" : "-Y");
        return -EINVAL;
    }
    if (s->sasl && !b_given)
        s->binding_protocol = "binary";
    if (s->sasl && strcmp(s->binding_protocol, "binary") != 0) {
        err_set("-S: you cannot allow the ASCII protocol while using SASL "
                "(-B %s)",
                s->binding_protocol);
        return -EINVAL;
    }
    if (s->auth_file && !strcmp(s->binding_protocol, "binary")) {
        err_set("-Y: the login is a text command, and -B binary turns the "
                "text protocol off");
        return -EINVAL;
    }
    return 0;
}

/* -Z: a TCP port, a certificate chain and its key (memcached would start
 * and fail at the first handshake, or exit on loading nothing). */
static int
check_tls(const struct settings *s)
{
    if (!s->tls)
        return 0;
    if (!s->port) {
        err_set("-Z: TLS needs a TCP port (-p is 0)");
        return -EINVAL;
    }
    if (!s->ssl_chain_cert || !s->ssl_key) {
        err_set("-Z: TLS needs -o ssl_chain_cert=<file> (the certificate "
                "chain, PEM) and -o ssl_key=<file> (its private key); %s",
                !s->ssl_chain_cert && !s->ssl_key ? "both are missing"
                : !s->ssl_key                     ? "ssl_key is missing"
                              : "ssl_chain_cert is missing");
        return -EINVAL;
    }
    return 0;
}

/* memcached's -o switches that have a no_ form, and hashpower */
static int
resolve_memcached_opts(struct settings *s)
{
    s->delimiter_buf[0] = s->prefix_delimiter[0];
    s->prefix_delimiter = s->delimiter_buf;
    if (s->no_lru_crawler)
        s->lru_crawler = false;
    if (s->no_lru_maintainer)
        s->lru_maintainer = false;
    if (s->hashpower && s->hashpower < 12) {
        err_set("-o hashpower: expected 0 or a number from 12 to 44, got "
                "%llu",
                (unsigned long long)s->hashpower);
        return -EINVAL;
    }
    if (s->hashpower && !s->hash_items)
        s->hash_items = 1ull << s->hashpower;
    return 0;
}

static int
finish(struct settings *s)
{
    int rc = check_protocol(s);
    if (!rc)
        rc = check_durability(s);
    if (!rc)
        rc = check_packed_evict(s);
    if (!rc)
        rc = check_auth(s);
    if (!rc)
        rc = resolve_memcached_opts(s);
    if (rc)
        return rc;
    /* -M: items stay in slab chunks unless packed_item_max is given. A
     * deleted packed item's bytes come back only when its segment goes,
     * by eviction, which -M turns off: a full cache would refuse stores
     * after deletes, where memcached's takes them into the freed room. */
    if (s->no_evict && !given_sub(s, "packed_item_max"))
        s->packed_item_max = 0;
    /* memcached: -s turns the network off; tiercached keeps TCP when -p is
     * also given */
    if (s->unix_path && !s->port_given)
        s->port = 0;
    if (s->port == 0 && !s->unix_path && s->udp_port == 0) {
        err_set("-p: 0 turns TCP off and no -s unix socket or -U UDP port "
                "was given, so there is nothing to listen on");
        return -EINVAL;
    }
    rc = check_tls(s);
    if (rc)
        return rc;
    if (strcmp(s->net_engine, "epoll") && strcmp(s->net_engine, "uring") &&
        strcmp(s->net_engine, "auto")) {
        err_set("-o net_engine: %s is none of auto, uring, epoll",
                s->net_engine);
        return -EINVAL;
    }
    if (s->worker_slice_us && s->worker_slice_us < 100) {
        err_set("-o worker_slice_us: %llu is below the kernel's floor of "
                "100 (0 = the kernel's default slice)",
                (unsigned long long)s->worker_slice_us);
        return -EINVAL;
    }
    rc = check_slabs(s);
    if (!rc)
        rc = check_pool(s);
    if (!rc)
        rc = check_ext(s);
    if (rc)
        return rc;
    if (!s->pool_path) {
        snprintf(s->pool_buf, sizeof(s->pool_buf),
                 "/dev/shm/tiercache.%llu.pool", (unsigned long long)s->port);
        s->pool_path = s->pool_buf;
        s->pool_default = true;
    }
    return 0;
}

/* --- public --- */

void
settings_init(struct settings *s)
{
    memset(s, 0, sizeof(*s));
    for (unsigned i = 0; i < ARRAY_SIZE(opts); i++) {
        const struct opt *o = &opts[i];
        if (!o->def)
            continue;
        if (o->type == OT_LIST) {
            /* not in listen_buf: the first -l replaces the default, later
             * ones append */
            *(const char **)field(s, o) = o->def;
            continue;
        }
        int rc = set_value(s, o, o->name, o->def);
        (void)rc; /* the table's defaults are in range */
    }
}

int
settings_parse(struct settings *s, int argc, char *const argv[])
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc;
        if (a[0] != '-' || a[1] == '\0') {
            err_set("unexpected argument '%.64s' (tiercached -h lists the "
                    "flags)",
                    a);
            return -EINVAL;
        }
        if (a[1] == '-')
            rc = parse_long(s, argc, argv, &i);
        else
            rc = parse_short(s, argc, argv, &i);
        if (rc)
            return rc;
        if (s->action != SETTINGS_RUN)
            return 0; /* -h, -V: the rest does not matter */
    }
    return finish(s);
}

/* --- notes --- */

void
settings_log_notes(const struct settings *s)
{
    if (s->ext_page_shrunk_from)
        log_warn("-o ext_path: too small for 2 segments of %llu MiB; the "
                 "NVMe store uses %llu MiB segments (ext_page_size) and a "
                 "%llu MiB write buffer",
                 (unsigned long long)s->ext_page_shrunk_from,
                 (unsigned long long)s->ext_page_size,
                 (unsigned long long)s->ext_wbuf_size);
    if (!s->pool_size && s->maxbytes_mib * MIB < TC_POOL_MIN_ITEMS)
        log_warn("-m %llu: the pool file holds %u MiB, the smallest there "
                 "is; the cache uses %llu MiB of it",
                 (unsigned long long)s->maxbytes_mib, TC_POOL_MIN_ITEMS >> 20,
                 (unsigned long long)s->maxbytes_mib);
    for (unsigned i = 0; i < ARRAY_SIZE(opts); i++) {
        if (!s->given[i])
            continue;
        for (unsigned j = 0; j < ARRAY_SIZE(notes); j++) {
            if (strcmp(notes[j].name, opts[i].name) != 0)
                continue;
            if (opts[i].sub)
                log_warn("-o %s: %s", opts[i].name, notes[j].text);
            else
                log_warn("-%c: %s", opts[i].flag, notes[j].text);
        }
    }
}

/* --- --help --- */

static void
help_line(FILE *f, const struct opt *o)
{
    char r[128];
    if (o->sub)
        fprintf(f, "  %s%s%s\n", o->name, o->arg ? "=" : "",
                o->arg ? o->arg : "");
    else
        fprintf(f, "  -%c, --%s%s%s\n", o->flag, o->name, o->arg ? " " : "",
                o->arg ? o->arg : "");
    fprintf(f, "        %s\n", o->help);
    if (o->type == OT_SUBOPT || o->type == OT_ACTION)
        return;
    if (o->type == OT_BOOL || o->type == OT_COUNT)
        fprintf(f, "        default %s\n", o->def ? "on" : "off");
    else if (o->def)
        fprintf(f, "        default %s; %s\n", o->def,
                range_text(o, r, sizeof(r)));
    else
        fprintf(f, "        %s\n", range_text(o, r, sizeof(r)));
}

void
settings_help(FILE *f)
{
    fprintf(f, "Usage: tiercached [flags]\n"
               "tiercached " TC_RELEASE ", a memcached-compatible cache "
               "server over persistent memory.\n\nFlags:\n");
    for (unsigned i = 0; i < ARRAY_SIZE(opts); i++)
        if (!opts[i].sub)
            help_line(f, &opts[i]);
    fprintf(f, "\n-o options (-o name=value[,name=value...], or -o name "
               "for a switch), memcached's first:\n");
    for (unsigned i = 0; i < ARRAY_SIZE(opts); i++) {
        if (!opts[i].sub)
            continue;
        /* options.def: tiercache's own -o rows start with this one */
        if (!strcmp(opts[i].name, "pool_size"))
            fprintf(f, "\ntiercache's own -o options (and memcached's "
                       "extstore ones, with the NVMe tier):\n");
        help_line(f, &opts[i]);
    }
    fprintf(f, "\nA bad flag or value exits with status 64 and one line "
               "saying what is allowed.\n");
}

/* --- stats settings --- */

static int
render_one(const struct settings *s, const struct opt *o, struct obuf *out)
{
    const void *v = cfield(s, o);
    switch (o->show) {
    case SHOW_NONE:
        return 0;
    case SHOW_NUM:
        if (o->type == OT_DOUBLE)
            return obuf_printf(out, "STAT %s %.2f\r\n", o->stat,
                               *(const double *)v);
        return obuf_printf(out, "STAT %s %llu\r\n", o->stat,
                           (unsigned long long)*(const uint64_t *)v);
    case SHOW_MIB:
        return obuf_printf(out, "STAT %s %llu\r\n", o->stat,
                           (unsigned long long)(*(const uint64_t *)v << 20));
    case SHOW_NUM3:
        return obuf_printf(out, "STAT %s %.3f\r\n", o->stat,
                           *(const double *)v);
    case SHOW_NUM_NULL:
        if (!*(const uint64_t *)v)
            return obuf_printf(out, "STAT %s (null)\r\n", o->stat);
        return obuf_printf(out, "STAT %s %llu\r\n", o->stat,
                           (unsigned long long)*(const uint64_t *)v);
    case SHOW_KIB:
        return obuf_printf(out, "STAT %s %llu\r\n", o->stat,
                           (unsigned long long)(*(const uint64_t *)v << 10));
    case SHOW_STR:
    case SHOW_STR_NULL: {
        const char *str = *(const char *const *)v;
        const char *unset = o->show == SHOW_STR ? "NULL" : "(null)";
        return obuf_printf(out, "STAT %s %s\r\n", o->stat, str ? str : unset);
    }
    case SHOW_OCTAL:
        return obuf_printf(out, "STAT %s %llo\r\n", o->stat,
                           (unsigned long long)*(const uint64_t *)v);
    case SHOW_YESNO:
    case SHOW_NOT_YESNO:
        return obuf_printf(out, "STAT %s %s\r\n", o->stat,
                           *(const bool *)v == (o->show == SHOW_YESNO) ? "yes"
                                                                       : "no");
    case SHOW_NOT_ONOFF:
        return obuf_printf(out, "STAT %s %s\r\n", o->stat,
                           *(const bool *)v ? "off" : "on");
    case SHOW_TLS_VERSION:
        return obuf_printf(out, "STAT %s tlsv1.%llu\r\n", o->stat,
                           (unsigned long long)*(const uint64_t *)v);
    }
    return 0;
}

int
settings_render(const struct settings *s, struct obuf *out)
{
    for (unsigned i = 0; i < ARRAY_SIZE(opts); i++)
        render_one(s, &opts[i], out);
    obuf_printf(out, "STAT num_threads_per_udp %llu\r\n",
                (unsigned long long)s->threads);
    for (unsigned i = 0; i < ARRAY_SIZE(fixed_stats); i++)
        obuf_printf(out, "STAT %s %s\r\n", fixed_stats[i][0],
                    fixed_stats[i][1]);
    obuf_printf(out, "STAT auth_enabled_ascii %s\r\n",
                s->auth_file ? s->auth_file : "no");
    obuf_printf(out, "STAT tc_min_chunk %u\r\n", settings_min_chunk(s));
    return out->err;
}

/* --- the engine's configuration --- */

/* options.def's "to" column: each kind is the left-hand side of the
 * assignment the row completes with its value (a 32-bit tc_config field
 * takes the 64-bit value whole: the row's range keeps it in bounds). */
#define TC(f) cfg->f =
#define TC_NOT(f) cfg->f = !
#define TC_MIB(f) cfg->f = MIB *
#define TC_CALC (void)
#define TC_NONE (void)

_Static_assert(SETTINGS_EXT_PATHS == TC_EXT_MAX_PATHS,
               "every -o ext_path fits tc_config's ext_path[]");

void
settings_to_config(const struct settings *s, struct tc_config *cfg)
{
    tc_config_init(cfg);
#define FLAG(flag_, name_, field_, type_, def_, lo_, hi_, stat_, show_, to_,   \
             arg_, help_, bad_)                                                \
    to_ s->field_;
#define OPT(field_, type_, def_, lo_, hi_, stat_, show_, to_, arg_, help_,     \
            bad_)                                                              \
    to_ s->field_;
#include "src/server/options.def"

    /* TC_CALC: the pool file holds -o pool_size (default -m) bytes of
     * items plus its header area in front */
    uint64_t items = s->pool_size ? s->pool_size : s->maxbytes_mib * MIB;
    cfg->pool_size = MAX(items, (uint64_t)TC_POOL_MIN_ITEMS) +
                     TC_POOL_HEADER_SIZE; /* -m 2: a 4 MiB file, 2 used */
    cfg->min_chunk = settings_min_chunk(s);
    /* without -e, no restart: the default file is scratch (doc/operating.md,
     * "Restart") */
    if (s->pool_default)
        cfg->no_restart = true;
    cfg->durability = !strcmp(s->durability, "power") ? TC_DURABILITY_POWER
                                                      : TC_DURABILITY_PROCESS;
    cfg->packed_evict = !strcmp(s->packed_evict, "fifo")
                            ? TC_PACKED_EVICT_FIFO
                            : TC_PACKED_EVICT_MERGE;
    cfg->ext_npaths = s->ext_npaths;
    for (unsigned i = 0; i < s->ext_npaths; i++) {
        cfg->ext_path[i] = s->ext_path[i];
        cfg->ext_size[i] = s->ext_size[i];
    }
}

#undef TC
#undef TC_NOT
#undef TC_MIB
#undef TC_CALC
#undef TC_NONE
