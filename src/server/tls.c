/*
 * TLS for client connections over OpenSSL (src/server/tls.h).
 *
 * The context follows memcached's: TLS_server_method() from
 * ssl_min_version up, the certificate chain and key (PEM or DER), the CA
 * file both to verify client certificates and as the list of CAs offered
 * to clients, ssl_verify_mode, ssl_ciphers (TLS 1.2 and below), an
 * optional server-side session cache, no renegotiation, and OpenSSL's
 * buffers released while a connection is idle. A peer that closes without
 * close_notify is an ordinary end of stream (a cache's clients do that
 * all the time), not an error.
 *
 * A connection's SSL runs the handshake from its first reads (accept
 * state). tls_recv() reads record after record while the room left holds
 * a whole one, and stops at the first that is not there yet: the
 * connection then writes its replies and epoll reports the rest. Writes
 * are partial (a short write means the socket is full) and may resume
 * from a moved buffer, since the connection's output buffer grows and
 * slides.
 *
 * Failures: a handshake that fails (a plain client on a TLS port, a client
 * certificate refused, no cipher in common) counts in
 * STATS_SSL_HANDSHAKE_ERRORS and ends that connection only; the reason is
 * logged at -vv. The thread's OpenSSL error queue is emptied after every
 * failure, so SSL_get_error() always sees only the current call's.
 *
 * Concurrency: see tls.h.
 */

#include "src/server/tls.h"

#include "src/base/clock.h"
#include "src/base/compiler.h"
#include "src/base/err.h"
#include "src/base/log.h"
#include "src/server/settings.h"
#include "src/server/stats.h"

#include <errno.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#define TLS_MSG_MAX 1024
/* The session id context (sessions resume only where it matches). */
#define TLS_SESSION_CONTEXT "tiercached"

struct tls {
    const struct settings *st;
    pthread_mutex_t lock; /* guards ctx */
    SSL_CTX *ctx;
    _Atomic uint64_t refreshed_ns; /* clock_nsec() of the last load; lone
                                      value, relaxed */
    _Atomic uint64_t new_sessions; /* sessions made for the cache (TLS 1.3:
                                      a ticket each); relaxed, a count */
};

struct tls_conn {
    SSL *ssl;
    bool read_wants_write; /* the last read waits for EPOLLOUT */
    bool write_wants_read; /* the last write waits for EPOLLIN */
    bool eof;              /* the peer closed (with or without notify) */
    int fatal;             /* errno of a failed session: no more I/O */
};

/* --- the context --- */

/* OpenSSL's first queued error as text, then the queue emptied. */
static void
ssl_reason(char *buf, size_t n)
{
    unsigned long e = ERR_peek_error();
    if (e)
        ERR_error_string_n(e, buf, n);
    else
        snprintf(buf, n, "unknown error");
    ERR_clear_error();
}

static const int min_versions[] = {TLS1_VERSION, TLS1_1_VERSION, TLS1_2_VERSION,
                                   TLS1_3_VERSION};

/* -o ssl_verify_mode: 0 none, 1 request, 2 require, 3 once */
static int
verify_flags(uint64_t mode)
{
    switch (mode) {
    case 1:
        return SSL_VERIFY_PEER;
    case 2:
        return SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    case 3:
        return SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT |
               SSL_VERIFY_CLIENT_ONCE;
    default:
        return SSL_VERIFY_NONE;
    }
}

/* The certificate chain, the key and the CA file into ctx; memcached's
 * messages. */
static int
load_files(SSL_CTX *ctx, const struct settings *st, char *msg, size_t n)
{
    char why[256];
    if (!SSL_CTX_use_certificate_chain_file(ctx, st->ssl_chain_cert)) {
        ssl_reason(why, sizeof(why));
        snprintf(msg, n, "Error loading the certificate chain: %s : %s",
                 st->ssl_chain_cert, why);
        return -EINVAL;
    }
    if (!SSL_CTX_use_PrivateKey_file(ctx, st->ssl_key,
                                     (int)st->ssl_keyformat)) {
        ssl_reason(why, sizeof(why));
        snprintf(msg, n, "Error loading the key: %s : %s", st->ssl_key, why);
        return -EINVAL;
    }
    if (!SSL_CTX_check_private_key(ctx)) {
        ssl_reason(why, sizeof(why));
        snprintf(msg, n, "Error validating the certificate: %s", why);
        return -EINVAL;
    }
    if (!st->ssl_ca_cert)
        return 0;
    if (!SSL_CTX_load_verify_locations(ctx, st->ssl_ca_cert, NULL)) {
        ssl_reason(why, sizeof(why));
        snprintf(msg, n, "Error loading the CA certificate: %s : %s",
                 st->ssl_ca_cert, why);
        return -EINVAL;
    }
    STACK_OF(X509_NAME) *cas = SSL_load_client_CA_file(st->ssl_ca_cert);
    if (cas)
        SSL_CTX_set_client_CA_list(ctx, cas);
    ERR_clear_error();
    return 0;
}

/* OpenSSL's new-session callback (ssl_session_cache): count it, keep no
 * reference (0). Context: a worker, inside a handshake. */
static int
new_session(SSL *ssl, SSL_SESSION *sess)
{
    struct tls *t = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    (void)sess;
    atomic_fetch_add_explicit(&t->new_sessions, 1, memory_order_relaxed);
    return 0;
}

/* A new context from t's settings, or NULL with the reason in msg. */
static SSL_CTX *
ctx_new(struct tls *t, char *msg, size_t n)
{
    const struct settings *st = t->st;
    char why[256];
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        ssl_reason(why, sizeof(why));
        snprintf(msg, n, "Error creating the TLS context: %s", why);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, min_versions[st->ssl_min_version]);
    SSL_CTX_set_options(ctx,
                        SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
#ifdef SSL_OP_ENABLE_KTLS
    if (st->ssl_kernel_tls)
        SSL_CTX_set_options(ctx, SSL_OP_ENABLE_KTLS);
#endif
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_verify(ctx, verify_flags(st->ssl_verify_mode), NULL);
    SSL_CTX_set_session_id_context(ctx,
                                   (const unsigned char *)TLS_SESSION_CONTEXT,
                                   sizeof(TLS_SESSION_CONTEXT) - 1);
    SSL_CTX_set_session_cache_mode(ctx, st->ssl_session_cache
                                            ? SSL_SESS_CACHE_SERVER
                                            : SSL_SESS_CACHE_OFF);
    SSL_CTX_set_app_data(ctx, t);
    if (st->ssl_session_cache)
        SSL_CTX_sess_set_new_cb(ctx, new_session);
    if (st->ssl_ciphers && !SSL_CTX_set_cipher_list(ctx, st->ssl_ciphers)) {
        ERR_clear_error();
        snprintf(msg, n, "Error setting the provided cipher(s): %s",
                 st->ssl_ciphers);
        SSL_CTX_free(ctx);
        return NULL;
    }
    if (load_files(ctx, st, msg, n) != 0) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

int
tls_create(const struct settings *st, struct tls **out)
{
    char msg[TLS_MSG_MAX];
    struct tls *t = calloc(1, sizeof(*t));
    if (!t) {
        err_set("no memory for TLS");
        return -ENOMEM;
    }
    t->st = st;
    atomic_init(&t->new_sessions, 0);
    t->ctx = ctx_new(t, msg, sizeof(msg));
    if (!t->ctx) {
        err_set("%s", msg);
        free(t);
        return -EINVAL;
    }
    pthread_mutex_init(&t->lock, NULL);
    atomic_init(&t->refreshed_ns, clock_nsec());
    if (st->ssl_verify_mode && !st->ssl_ca_cert)
        log_warn("-o ssl_verify_mode=%llu without ssl_ca_cert: no CA to "
                 "verify client certificates against, so every one sent is "
                 "refused",
                 (unsigned long long)st->ssl_verify_mode);
    *out = t;
    return 0;
}

void
tls_destroy(struct tls *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

int
tls_refresh(struct tls *t, char *msg, size_t n)
{
    /* built whole before the swap: a file that fails to load leaves the
     * context in use untouched */
    SSL_CTX *ctx = ctx_new(t, msg, n);
    if (!ctx) {
        log_warn("refresh_certs: %s", msg);
        return -EINVAL;
    }
    pthread_mutex_lock(&t->lock);
    SSL_CTX *old = t->ctx;
    t->ctx = ctx;
    pthread_mutex_unlock(&t->lock);
    /* connections made from it hold their own references */
    SSL_CTX_free(old);
    atomic_store_explicit(&t->refreshed_ns, clock_nsec(), memory_order_relaxed);
    log_info("refresh_certs: certificates reloaded");
    return 0;
}

uint64_t
tls_new_sessions(struct tls *t)
{
    return atomic_load_explicit(&t->new_sessions, memory_order_relaxed);
}

uint64_t
tls_cert_age(struct tls *t)
{
    uint64_t at = atomic_load_explicit(&t->refreshed_ns, memory_order_relaxed);
    uint64_t now = clock_nsec();
    return now > at ? (now - at) / 1000000000ull : 0;
}

/* --- connections --- */

int
tls_conn_create(struct tls *t, int fd, struct tls_conn **out)
{
    struct tls_conn *tc = calloc(1, sizeof(*tc));
    if (!tc)
        return -ENOMEM;
    pthread_mutex_lock(&t->lock);
    tc->ssl = SSL_new(t->ctx);
    pthread_mutex_unlock(&t->lock);
    if (!tc->ssl || !SSL_set_fd(tc->ssl, fd)) {
        ERR_clear_error();
        SSL_free(tc->ssl);
        free(tc);
        return -ENOMEM;
    }
    SSL_set_accept_state(tc->ssl);
    *out = tc;
    return 0;
}

void
tls_conn_destroy(struct tls_conn *tc)
{
    if (!tc)
        return;
    if (!tc->fatal && SSL_is_init_finished(tc->ssl))
        SSL_shutdown(tc->ssl); /* close_notify, best effort */
    ERR_clear_error();
    SSL_free(tc->ssl);
    free(tc);
}

/* A call that failed for good: remember why, count a failed handshake. */
static void
fail(struct tls_conn *tc, int err, struct stats_ctr *ctr)
{
    char why[256];
    if (err == SSL_ERROR_ZERO_RETURN) {
        tc->eof = true; /* close_notify, or the peer just closed */
        ERR_clear_error();
        return;
    }
    tc->fatal = err == SSL_ERROR_SYSCALL && errno ? errno : EPROTO;
    ssl_reason(why, sizeof(why));
    if (!SSL_is_init_finished(tc->ssl)) {
        stats_ctr_add(ctr, STATS_SSL_HANDSHAKE_ERRORS, 1);
        log_debug("TLS handshake on fd %d failed: %s", SSL_get_fd(tc->ssl),
                  why);
    } else {
        log_debug("TLS on fd %d failed: %s", SSL_get_fd(tc->ssl), why);
    }
}

/* The result of a call that moved nothing: 0 at the end of the stream,
 * else -1 and errno. */
static ssize_t
nothing(const struct tls_conn *tc)
{
    if (tc->fatal) {
        errno = tc->fatal;
        return -1;
    }
    if (tc->eof)
        return 0;
    errno = EAGAIN;
    return -1;
}

ssize_t
tls_recv(struct tls_conn *tc, void *buf, size_t n, struct stats_ctr *ctr)
{
    size_t got = 0;
    tc->read_wants_write = false;
    if (tc->fatal || tc->eof)
        return nothing(tc);
    do {
        int want = (int)MIN(n - got, (size_t)INT_MAX);
        int r = SSL_read(tc->ssl, (char *)buf + got, want);
        if (r > 0) {
            got += (size_t)r;
            continue;
        }
        int e = SSL_get_error(tc->ssl, r);
        if (e == SSL_ERROR_WANT_WRITE)
            tc->read_wants_write = true;
        else if (e != SSL_ERROR_WANT_READ)
            fail(tc, e, ctr);
        break;
    } while (n - got >= TLS_RECORD_MAX);
    return got ? (ssize_t)got : nothing(tc);
}

ssize_t
tls_send(struct tls_conn *tc, const void *buf, size_t n, struct stats_ctr *ctr)
{
    size_t put = 0;
    tc->write_wants_read = false;
    if (tc->fatal) {
        errno = tc->fatal;
        return -1;
    }
    while (put < n) {
        int want = (int)MIN(n - put, (size_t)INT_MAX);
        int r = SSL_write(tc->ssl, (const char *)buf + put, want);
        if (r > 0) {
            put += (size_t)r;
            continue;
        }
        int e = SSL_get_error(tc->ssl, r);
        if (e == SSL_ERROR_WANT_READ) {
            tc->write_wants_read = true;
        } else if (e != SSL_ERROR_WANT_WRITE) {
            fail(tc, e, ctr);
            if (!tc->fatal) /* no writing after the peer's end either */
                tc->fatal = EPIPE;
        }
        break;
    }
    if (put)
        return (ssize_t)put;
    errno = tc->fatal ? tc->fatal : EAGAIN;
    return -1;
}

uint32_t
tls_want_mask(const struct tls_conn *tc, uint32_t mask)
{
    if (tc->read_wants_write)
        mask |= EPOLLOUT;
    if (tc->write_wants_read)
        mask = (mask & ~(uint32_t)EPOLLOUT) | EPOLLIN;
    return mask;
}

uint32_t
tls_want_events(const struct tls_conn *tc, uint32_t events)
{
    if (tc->read_wants_write && (events & EPOLLOUT))
        events |= EPOLLIN;
    if (tc->write_wants_read && (events & EPOLLIN))
        events |= EPOLLOUT;
    return events;
}
