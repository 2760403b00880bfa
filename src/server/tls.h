#pragma once
/*
 * TLS for client connections, as memcached does it (-Z, -o ssl_*), over
 * OpenSSL.
 *
 * struct tls is the server's side: one SSL_CTX with the certificate chain,
 * the key, the client CA list and the verification mode, built from the
 * settings at start and rebuilt whole by tls_refresh() (the refresh_certs
 * command). struct tls_conn is one connection's SSL over its non-blocking
 * socket; the connection (src/server/conn.c) reads and writes through
 * tls_recv() and tls_send(), which behave like recv() and send() (a
 * negative return with errno EAGAIN when the socket is not ready), and
 * asks tls_want_mask() / tls_want_events() which epoll events OpenSSL
 * waits for when a read needs to write or a write needs to read.
 *
 * No decrypted bytes are left inside OpenSSL where epoll cannot see them:
 * a record is TLS_RECORD_MAX plaintext bytes at most, every read is given
 * at least that much room (conn.c's in_prepare), and OpenSSL reads one
 * record at a time from the socket (no read-ahead), so each SSL_read
 * takes a whole record and whatever is not yet read stays in the socket,
 * where level-triggered epoll reports it.
 *
 * Concurrency:
 *   tls->ctx, refreshed_ns  tls->lock: the acceptor makes each
 *                           connection's SSL from the current context
 *                           under it, a refresh swaps it under it. An SSL
 *                           holds a reference to the context it was made
 *                           from, so connections made before a refresh
 *                           keep the old certificate until they close.
 *   struct tls_conn         its connection's owner thread only.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct settings;
struct stats_ctr;

/* The largest plaintext one TLS record carries (2^14). */
#define TLS_RECORD_MAX 16384

struct tls;
struct tls_conn;

/* Build the server's context from st (-Z and the ssl_* options): 0, or a
 * negative errno with one line in err_msg() (memcached's words for a file
 * that does not load). Context: main thread, before the workers start. */
int tls_create(const struct settings *st, struct tls **out);
void tls_destroy(struct tls *t);

/* Load the certificate chain, key and CA files again into a new context
 * and make it the one new connections get. 0, or a negative errno with
 * memcached's one-line text (no line end) in msg; the context in use then
 * stays. Context: any worker. Locks: takes t->lock. */
int tls_refresh(struct tls *t, char *msg, size_t n);

/* Sessions made for the session cache (ssl_session_cache; with TLS 1.3
 * one a ticket sent). Context: any. */
uint64_t tls_new_sessions(struct tls *t);
/* Seconds since the certificates were last loaded. Context: any. */
uint64_t tls_cert_age(struct tls *t);

/* A connection's TLS over the accepted socket fd (it does not own fd).
 * 0 or -ENOMEM. Context: the acceptor. Locks: takes t->lock. */
int tls_conn_create(struct tls *t, int fd, struct tls_conn **out);
/* Send close_notify when the session is sound (best effort), free. */
void tls_conn_destroy(struct tls_conn *tc);

/* Like recv(): > 0 bytes of plaintext (every record there was, up to n;
 * n must be at least TLS_RECORD_MAX), 0 when the peer closed, -1 with
 * errno EAGAIN (not ready) or another errno (the connection is dead). A
 * handshake that fails counts in ctr's STATS_SSL_HANDSHAKE_ERRORS.
 * Context: the connection's owner. */
ssize_t tls_recv(struct tls_conn *tc, void *buf, size_t n,
                 struct stats_ctr *ctr);
/* Like send(): bytes written (fewer than n: the socket is full), or -1
 * with errno EAGAIN or another errno. After EAGAIN or a short write, call
 * again with the unwritten bytes at the same place in the stream (their
 * address may change) and at least as many of them. Context: the
 * connection's owner. */
ssize_t tls_send(struct tls_conn *tc, const void *buf, size_t n,
                 struct stats_ctr *ctr);

/* The epoll mask to register, from the one the connection wants: plus
 * EPOLLOUT while a read waits for the socket to take handshake bytes;
 * EPOLLIN instead of EPOLLOUT while a write waits for bytes from the
 * peer. */
uint32_t tls_want_mask(const struct tls_conn *tc, uint32_t mask);
/* The events epoll reported, as the connection should handle them: a
 * read that waited for EPOLLOUT, or a write that waited for EPOLLIN, is
 * run again. */
uint32_t tls_want_events(const struct tls_conn *tc, uint32_t events);
