#pragma once
/*
 * The contract between the connection layer (src/server/conn.c) and the
 * protocol parsers (src/server/proto/proto_text.c for classic text and meta
 * commands, src/server/proto/proto_bin.c for the binary protocol).
 *
 * A parser gets the bytes a connection has received and not yet consumed,
 * executes every complete request at their front against the cache, appends
 * the replies (in request order) to the connection's obuf, and returns how
 * many bytes it consumed. It never blocks and never reads the socket.
 *
 *   > 0            bytes consumed; call again with the rest when more come
 *   0              the first request is incomplete: read more (s->need says
 *                  how many bytes in all the request needs, if known)
 *   either, with s->resume set
 *                  the request at in + (returned value) is half done: a
 *                  multi-key get stopped between two keys after appending
 *                  PROTO_GET_SLICE bytes of replies. Call again with the
 *                  same bytes (from that request on) once the connection
 *                  wants more output; it carries on from the next key.
 *   PROTO_CLOSE    close the connection once the obuf is flushed (quit, a
 *                  line too long, a protocol violation memcached closes on)
 *
 * Concurrency: a proto_sess belongs to one connection, used by its worker
 * thread only. The server ops may be called from any worker.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "src/server/obuf.h"
#include "src/tiercache.h"

#define PROTO_CLOSE ((ssize_t)-1)
/* memcached's limit for a command line (KEY_MAX_LENGTH + room for args) */
#define PROTO_LINE_MAX 8192
/* Replies one call appends for a multi-key get before it stops between two
 * keys (s->resume): so a get of many large values holds no more than this
 * plus one value before the connection's back-pressure can act. */
#define PROTO_GET_SLICE (256u * 1024)

struct proto_sess;
struct auth;
struct auth_sasl;

/* -B: which protocols a connection may speak */
enum proto_binding {
    PROTO_BIND_AUTO = 0, /* the first byte chooses */
    PROTO_BIND_ASCII,    /* text and meta only: binary bytes read as text */
    PROTO_BIND_BINARY,   /* binary only: anything else closes */
};

/* What only the server can do, for the commands that need it. */
struct proto_server_ops {
    /* Append the "STAT name value\r\n" lines of a stats group ("" for the
     * general stats; "settings", "slabs", "items", "conns", "sizes"...),
     * without the final "END\r\n". 0, or -ENOENT for an unknown group. */
    int (*stats)(void *srv, struct proto_sess *s, const char *group,
                 struct obuf *out);
    void (*stats_reset)(void *srv);
    /* shutdown command: 0, or -EPERM when not enabled (-A). */
    int (*shutdown)(void *srv);
    void (*verbosity)(void *srv, int level);
    /* cache_memlimit <MiB>: 0 or a negative errno; -EBUSY (a shrink the
     * maintenance step finishes later) is answered OK. */
    int (*memlimit)(void *srv, uint64_t mib);
    /* refresh_certs: 0, or a negative errno with the one-line reply
     * (memcached's text, no line end) in msg. */
    int (*refresh_certs)(void *srv, char *msg, size_t n);
};

/* Per-connection protocol counters the server sums into its stats. */
struct proto_counters {
    uint64_t cmd_total;       /* requests executed */
    uint64_t get_multi;       /* get/gets with more than one key */
    uint64_t meta_cmds;       /* meta requests */
    uint64_t bin_cmds;        /* binary requests */
    uint64_t protocol_errors; /* ERROR / CLIENT_ERROR replies */
    uint64_t auth_cmds;       /* logins tried (-Y) and SASL exchanges (-S) */
    uint64_t auth_errors;     /* of those, refused */
};

struct proto_sess {
    struct tc_cache *cache;
    const struct proto_server_ops *ops;
    void *srv;
    uint32_t item_size_max; /* -I: largest value + key + header accepted
                             * (given 0: TC_ITEM_SIZE_MAX_DEFAULT) */
    bool binary;            /* chosen on the first byte (0x80 = binary) */
    /* the server's switches (memcached's flags), set after init; all
     * false is memcached's default */
    bool no_flush;        /* -F: flush_all refused */
    bool no_cas;          /* -C: replies carry CAS 0 */
    bool no_dump;         /* -X: no cachedump, no metadump */
    bool no_watch;        /* -W: no watch */
    uint8_t binding;      /* -B: enum proto_binding */
    bool chosen;          /* the protocol is decided for good */
    uint64_t swallow;     /* bytes still to discard (refused value) */
    size_t need;          /* hint: bytes the pending request needs */
    size_t resume;        /* a get stopped half-way: where its next key starts,
                             from the start of its line (0 = none); see above */
    uint64_t walk_cursor; /* a metadump or cachedump stopped half-way
                             (with resume set): tc_walk's cursor */
    uint64_t walk_count;  /* its items (cachedump) or bytes so far */
    struct proto_watcher *watch; /* "watch" sent: its queue
                                    (src/server/proto/proto_watch.h) */
    int fd;                      /* the connection's (watch's cfd=), or -1 */
    /* -Y, -S (src/server/auth.h). authed is true from the start when the
     * server has no authentication, so the parsers test one flag that
     * never changes then; under -Y or -S it turns true at the login. */
    bool authed;
    bool sasl;                /* -S: the SASL opcodes are served */
    struct auth *auth;        /* the server's, NULL without -Y and -S */
    struct auth_sasl *sasl_x; /* this connection's SASL exchange */
    struct proto_counters ctr;
    uint32_t budget; /* requests this wake-up may still run (-R, the
                        connection sets it): each parser stops at 0 and
                        takes one off per request; UINT32_MAX after init */
    void *priv;      /* a parser's own state, freed by
                        proto_sess_fini */
};

void proto_sess_init(struct proto_sess *s, struct tc_cache *cache,
                     const struct proto_server_ops *ops, void *srv,
                     uint32_t item_size_max);
void proto_sess_fini(struct proto_sess *s);
/* A store of this key and value length exceeds item_size_max (-I), which
 * counts the engine's item header too. Inline: proto.c calls the parsers,
 * so the parsers must not call back into it. */
static inline bool
proto_too_large(const struct proto_sess *s, size_t klen, uint64_t vlen)
{
    return TC_ITEM_HEADER_SIZE + klen + vlen > s->item_size_max;
}

/* -C: a CAS a client asks to compare never matches an item, as in
 * memcached without CAS (its items carry none, so every compare fails with
 * EXISTS). The engine's counter starts at 1 and never reaches this. */
#define PROTO_CAS_NEVER UINT64_MAX

/* Auto-detects text or binary on the first byte of the connection, then
 * calls the parser. */
ssize_t proto_process(struct proto_sess *s, const char *in, size_t len,
                      struct obuf *out);

ssize_t proto_text_process(struct proto_sess *s, const char *in, size_t len,
                           struct obuf *out);
/* The key of the request at the front of `in` (the first key of a get,
 * gets, gat, gats or mg, the key of a set or ms, whose line is complete),
 * for a hint to the engine (tc_prefetch) before the request runs; false
 * when there is none or the session would not run it now. Reads nothing
 * but s and in. */
bool proto_read_key(const struct proto_sess *s, const char *in, size_t len,
                    struct tc_key *k);
/* The text parser's part of proto_read_key: a complete text line. */
bool proto_text_read_key(const char *in, size_t len, struct tc_key *k);
ssize_t proto_bin_process(struct proto_sess *s, const char *in, size_t len,
                          struct obuf *out);
/* Meta commands (mg, ms, md, ma, mn, me): the text parser calls this when
 * the line at the front of `in` starts with a meta command; it handles that
 * one request (its line and, for ms, the data block) and returns like
 * proto_text_process. */
ssize_t proto_meta_process(struct proto_sess *s, const char *in, size_t len,
                           struct obuf *out);
