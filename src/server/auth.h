#pragma once
/*
 * Authentication, as memcached does it (src/server/auth.c):
 *
 *   -Y <file>  the text protocol's login: a file of "user:password" lines;
 *              a connection logs in with a "set" whose data is
 *              "user password" (src/server/proto/proto_text.c).
 *   -S         SASL over the binary protocol through Cyrus SASL (libsasl2),
 *              configured as memcached's: application name "memcached", so
 *              memcached.conf in SASL_CONF_PATH (or /etc/sasl2) names the
 *              mechanisms and the sasldb (src/server/proto/proto_bin.c runs
 *              the SASL_LIST_MECHS, SASL_AUTH and SASL_STEP opcodes).
 *
 * A connection's state (logged in or not, its SASL exchange) lives in its
 * proto_sess; this module holds what the server shares: the users of the
 * file and the SASL library.
 *
 * Concurrency: auth_create() runs in main() before any worker starts;
 * auth_reload() (SIGHUP) may run beside logins on any worker (a read-write
 * lock guards the users). Every libsasl2 call takes a->lock (see auth.c),
 * so any worker may run an exchange.
 */

#include <stdbool.h>
#include <stddef.h>

struct auth;
struct auth_sasl; /* one connection's SASL exchange */

/* Longest "user password" data block a text login may send (memcached
 * reads lines of the file up to 256 bytes). */
#define AUTH_TOKEN_MAX 1024
/* Longest SASL mechanism name (memcached's MAX_SASL_MECH_LEN). */
#define AUTH_MECH_MAX 32

enum auth_result {
    AUTH_OK,       /* logged in */
    AUTH_CONTINUE, /* SASL: send the challenge, expect a SASL_STEP */
    AUTH_FAIL,     /* wrong user, password or mechanism */
};

/* Load the -Y file (auth_file, or NULL) and set up SASL (sasl). 0, or a
 * negative errno with one line in err_msg(): the file unreadable, empty,
 * or with a line that is not "user:password"; libsasl2 failing to start or
 * offering no mechanism. Context: main(), before the workers. */
int auth_create(const char *auth_file, bool sasl, struct auth **out);
void auth_destroy(struct auth *a);

/* The user and password of a -Y login match a line of the file. Every
 * line is compared, in time that depends on the lengths only. */
bool auth_file_check(struct auth *a, const char *user, size_t ulen,
                     const char *pass, size_t plen);
/* Read the -Y file again (SIGHUP): its users replace the old ones, or, when
 * it no longer loads, the old ones stay and a negative errno comes back
 * with the reason in err_msg(). 0 without -Y. Context: any thread. */
int auth_reload(struct auth *a);

/* The mechanisms SASL offers, space-separated ("PLAIN"): 0 and *mechs,
 * *len (valid until the exchange is freed), or a negative errno. Creates
 * the exchange in *x if there is none. */
int auth_sasl_mechs(struct auth *a, struct auth_sasl **x, const char **mechs,
                    size_t *len);
/* SASL_AUTH: start mechanism mech with the client's first data;
 * SASL_STEP: the next data. *out, *outlen: what to send back (valid until
 * the next call on x). A new AUTH starts over. */
enum auth_result auth_sasl_start(struct auth *a, struct auth_sasl **x,
                                 const char *mech, size_t mlen,
                                 const char *data, size_t dlen,
                                 const char **out, size_t *outlen);
enum auth_result auth_sasl_step(struct auth *a, struct auth_sasl **x,
                                const char *data, size_t dlen, const char **out,
                                size_t *outlen);
/* Free a connection's exchange (NULL is fine). */
void auth_sasl_free(struct auth *a, struct auth_sasl *x);
