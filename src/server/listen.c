/*
 * tiercached's listening sockets (src/server/listen.h): TCP listeners on
 * every -l address (-p, with -Z TLS unless "notls:"), UDP sockets on the
 * same addresses (-U, served by the workers), the -s unix socket, and
 * closing them. The acceptor and the workers that use them are in
 * server.c.
 *
 * Concurrency: none of its own. Everything here runs on the thread that
 * calls server_create or server_destroy (main), before the workers start
 * or after they are joined; the caller's array of listeners is read-only
 * in between (see server.c).
 */
#include "src/server/listen.h"

#include "src/base/err.h"
#include "src/base/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Asked for as each UDP socket's receive and send buffer. */
#define LISTEN_UDP_BUF (4 << 20)

/* What the functions below fill: the caller's array and count of
 * listeners, and the settings and TLS default they follow. */
struct listen_ctx {
    const struct settings *st;
    struct listener *ls;
    unsigned *nls;
    bool tls; /* -Z: new TCP listeners speak TLS unless "notls:" */
};

/* Bind, and for a stream socket (backlog > 0) listen. A UDP socket
 * (backlog 0) goes without SO_REUSEADDR: it has no TIME_WAIT to step over,
 * and with it a second server on the same -U port would bind too and take
 * the first one's datagrams. */
static int
listen_fd(int fd, const struct sockaddr *sa, socklen_t len, int backlog)
{
    int one = 1;
    if (backlog > 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (sa->sa_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, sa, len) != 0 || (backlog > 0 && listen(fd, backlog) != 0))
        return -errno;
    return 0;
}

static void
sockaddr_name(const struct sockaddr *sa, bool udp, char *buf, size_t n)
{
    char host[INET6_ADDRSTRLEN] = "?";
    const char *proto = udp ? "udp" : "tcp";
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        snprintf(buf, n, "%s6:[%s]:%u", proto, host, ntohs(a->sin6_port));
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        snprintf(buf, n, "%s:%s:%u", proto, host, ntohs(a->sin_port));
    }
}

static struct listener *
listener_new(struct listen_ctx *lc, const char *what)
{
    if (*lc->nls == LISTEN_MAX) {
        err_set("-l: too many addresses to listen on at %s (at most %d "
                "sockets)",
                what, LISTEN_MAX);
        return NULL;
    }
    struct listener *l = &lc->ls[*lc->nls];
    l->fd = -1;
    l->is_unix = false;
    l->is_udp = false;
    l->tls = false;
    return l;
}

/* A UDP socket's buffers: one socket takes every client's datagrams, and
 * a burst (a client's noreply sets, many multi-datagram replies) beyond
 * the default buffer is lost without a trace, so ask for LISTEN_UDP_BUF
 * each way; the kernel caps it at net.core.rmem_max / wmem_max (memcached
 * likewise raises its UDP send buffer as far as it goes). */
static void
udp_buffers(int fd)
{
    int want = LISTEN_UDP_BUF;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof(want));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want));
}

/* Bind every address getaddrinfo() gives for host and port: TCP
 * listeners, or UDP sockets (udp). */
static int
listen_host(struct listen_ctx *lc, const char *host, const char *port, bool udp,
            bool tls)
{
    struct addrinfo hints = {.ai_flags = AI_PASSIVE,
                             .ai_family = AF_UNSPEC,
                             .ai_socktype = udp ? SOCK_DGRAM : SOCK_STREAM};
    struct addrinfo *res;
    int g = getaddrinfo(host, port, &hints, &res);
    if (g != 0) {
        err_set("-l: cannot resolve '%s': %s", host, gai_strerror(g));
        return -EINVAL;
    }
    int rc = 0;
    for (struct addrinfo *a = res; a && rc == 0; a = a->ai_next) {
        struct listener *l = listener_new(lc, host);
        if (!l) {
            rc = -ENOSPC;
            break;
        }
        sockaddr_name(a->ai_addr, udp, l->name, sizeof(l->name));
        l->is_udp = udp;
        l->fd =
            socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                   a->ai_protocol);
        if (udp && l->fd >= 0)
            udp_buffers(l->fd);
        rc = l->fd < 0 ? -errno
                       : listen_fd(l->fd, a->ai_addr, a->ai_addrlen,
                                   udp ? 0 : (int)lc->st->backlog); /* -b */
        if (rc) {
            err_set("cannot listen on %s: %s", l->name, strerror(-rc));
            if (l->fd >= 0)
                close(l->fd);
            break;
        }
        l->tls = tls;
        (*lc->nls)++;
        log_info("listening on %s%s", l->name, tls ? " (TLS)" : "");
    }
    freeaddrinfo(res);
    return rc;
}

/* One -l element: "host", "host:port", "[v6]", "[v6]:port", "v6". A port
 * in it is used for TCP and, with -U, for UDP too, as memcached does;
 * without one, -p and -U give the ports. With -Z, "notls:" in front
 * makes it a plain listener (memcached's prefix); UDP is never TLS. */
static int
listen_one(struct listen_ctx *lc, const char *item, bool udp)
{
    char host[256], port[16];
    bool tls = lc->tls;
    if (!strncmp(item, "notls:", 6)) {
        item += 6;
        tls = false;
    }
    const char *colon = strrchr(item, ':');
    snprintf(port, sizeof(port), "%llu",
             (unsigned long long)(udp ? lc->st->udp_port : lc->st->port));
    if (item[0] == '[') {
        const char *close_br = strchr(item, ']');
        if (!close_br || (close_br[1] && close_br[1] != ':')) {
            err_set("-l: bad address '%s'", item);
            return -EINVAL;
        }
        snprintf(host, sizeof(host), "%.*s", (int)(close_br - item - 1),
                 item + 1);
        if (close_br[1] == ':')
            snprintf(port, sizeof(port), "%s", close_br + 2);
    } else if (colon && strchr(item, ':') == colon) {
        snprintf(host, sizeof(host), "%.*s", (int)(colon - item), item);
        snprintf(port, sizeof(port), "%s", colon + 1);
    } else {
        snprintf(host, sizeof(host), "%s", item);
    }
    return listen_host(lc, host, port, udp, tls && !udp);
}

/* Every -l address: TCP listeners, or UDP sockets (udp). */
int
listen_net(struct listener *ls, unsigned *nls, const struct settings *st,
           bool tls, bool udp)
{
    struct listen_ctx ctx = {st, ls, nls, tls}, *lc = &ctx;
    char item[256];
    const char *p = lc->st->listen;
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n && n < sizeof(item)) {
            memcpy(item, p, n);
            item[n] = '\0';
            int rc = listen_one(lc, item, udp);
            if (rc)
                return rc;
        } else if (n) {
            err_set("-l: address '%.40s...' is too long", p);
            return -EINVAL;
        }
        p += n + (p[n] == ',');
    }
    return 0;
}

int
listen_unix(struct listener *ls, unsigned *nls, const struct settings *st)
{
    struct listen_ctx ctx = {st, ls, nls, false}, *lc = &ctx;
    const char *path = lc->st->unix_path;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct stat sb;
    struct listener *l = listener_new(lc, path);
    if (!l)
        return -ENOSPC;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    snprintf(l->name, sizeof(l->name), "unix:%s", path);
    /* a stale socket from an earlier run, as memcached does */
    if (lstat(path, &sb) == 0 && S_ISSOCK(sb.st_mode))
        unlink(path);
    l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        err_set("cannot listen on %s: %s", l->name, strerror(errno));
        return -errno;
    }
    /* -a: the socket file's mode comes from the umask at bind time */
    mode_t old = umask((mode_t)(~lc->st->unix_mask & 0777));
    int rc = listen_fd(l->fd, (struct sockaddr *)&sa, sizeof(sa),
                       (int)lc->st->backlog);
    umask(old);
    if (rc) {
        err_set("cannot listen on %s: %s", l->name, strerror(-rc));
        close(l->fd);
        return rc;
    }
    l->is_unix = true;
    (*lc->nls)++;
    log_info("listening on %s", l->name);
    return 0;
}

void
listen_close(struct listener *ls, unsigned nls, const char *unix_path)
{
    for (unsigned i = 0; i < nls; i++) {
        if (ls[i].fd < 0)
            continue;
        close(ls[i].fd);
        ls[i].fd = -1;
        if (ls[i].is_unix)
            unlink(unix_path);
    }
}
