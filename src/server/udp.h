#pragma once
/*
 * memcached's UDP transport (-U): every datagram carries an 8-byte frame
 * header (request id, sequence number, datagrams in the message, reserved;
 * 16-bit big-endian each) and then text, meta or binary requests exactly
 * as over TCP. A request must fit in one datagram; the reply to one
 * datagram is one message, cut into datagrams of at most UDP_DGRAM_MAX
 * bytes with the request's id, sequence numbers 0..n-1 and the count n.
 * See udp.c for what is dropped and counted.
 *
 * The sockets themselves are the server's (src/server/listen.c binds one
 * per -l address, src/server/worker.c puts it in every worker's epoll set);
 * each worker answers the datagrams it receives with its own struct
 * udp_worker.
 *
 * Concurrency: a struct udp_worker belongs to one worker thread. The
 * socket is shared by the workers: recvfrom and sendmmsg on it are atomic
 * per datagram, so no lock is needed.
 */

#include <stdint.h>

#include "src/server/conn.h"
#include "src/server/stats.h"

#define UDP_HEADER_SIZE 8
/* The largest datagram sent, header included: memcached's
 * UDP_MAX_PAYLOAD_SIZE, which its datagrams also include the header in. */
#define UDP_DGRAM_MAX 1400
#define UDP_PAYLOAD_MAX (UDP_DGRAM_MAX - UDP_HEADER_SIZE)

struct udp_worker;

/* One worker's buffers and protocol session for UDP. 0 or -ENOMEM.
 * Context: the worker (or its creator before the worker starts). */
int udp_worker_create(const struct conn_shared *sh, struct stats_ctr *ctr,
                      struct udp_worker **out);
/* NULL is a no-op. */
void udp_worker_destroy(struct udp_worker *uw);

/* The UDP socket fd is readable: receive and answer up to a bounded number
 * of datagrams (epoll is level-triggered and reports the rest again).
 * Context: uw's worker. */
void udp_event(struct udp_worker *uw, int fd);
