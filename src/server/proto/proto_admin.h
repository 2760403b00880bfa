#pragma once
/*
 * The text protocol's administration commands (src/server/proto/proto_admin.c):
 * slabs reassign|automove, lru_crawler, stats cachedump. proto_text.c
 * checks the token counts of its table and calls these with the line's
 * tokens (the command included).
 *
 * Concurrency: a session belongs to one connection, used by its worker
 * thread only; the settings these commands change are process-wide atomics.
 */

#include <stdbool.h>

#include "src/server/obuf.h"
#include "src/server/proto/proto.h"
#include "src/server/proto/proto_util.h"

struct settings;

/* "slabs reassign <src> <dst>", "slabs automove <0|1|2>". */
void proto_admin_slabs(struct proto_sess *s, struct obuf *out,
                       const struct proto_token *tok, int ntok);

/* "lru_crawler <enable|disable|sleep|tocrawl|crawl|metadump> ...". resumed:
 * this call carries on a metadump that stopped half-way. false when a
 * metadump stopped after a slice of output: call again (s->resume) once
 * the connection wants more. */
bool proto_admin_lru_crawler(struct proto_sess *s, struct obuf *out,
                             const struct proto_token *tok, int ntok,
                             bool resumed);

/* "stats cachedump <class> <limit>": as proto_admin_lru_crawler. */
bool proto_admin_cachedump(struct proto_sess *s, struct obuf *out,
                           const struct proto_token *tok, int ntok,
                           bool resumed);

/* "stats sizes", "stats sizes_enable", "stats sizes_disable" (tok[1]). */
void proto_admin_sizes(struct proto_sess *s, struct obuf *out,
                       const struct proto_token *tok);

/* The value "slabs automove" last set (memcached's default 1). */
int proto_admin_automove(void);
/* Whether "lru_crawler disable" is in effect. */
bool proto_admin_crawler_enabled(void);
/* The crawler and automove settings from the command line (-o
 * lru_crawler, no_lru_crawler, lru_crawler_sleep, lru_crawler_tocrawl,
 * slab_automove). Context: the server's start, before any worker. */
void proto_admin_init(const struct settings *st);
/* Overwrite st's crawler and automove fields with the values in effect, as
 * memcached's "stats settings" shows what the commands last set. */
void proto_admin_live(struct settings *st);
