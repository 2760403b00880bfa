#pragma once
/*
 * tiercached's listening sockets: bind the TCP listeners of -l/-p, the UDP
 * sockets of -U and the -s unix socket into the server's array of
 * listeners, and close them. Context: the thread that creates and
 * destroys the server (main), while no other thread uses the array.
 * See listen.c.
 */

#include <stdbool.h>

#include "src/server/conn.h"
#include "src/server/settings.h"

/* Sockets one server listens on, at most. */
#define LISTEN_MAX 32

struct listener {
    int fd;
    bool is_unix;
    bool is_udp;              /* served by the workers, not accepted */
    bool tls;                 /* -Z, and not named notls: in -l */
    char name[CONN_ADDR_MAX]; /* "tcp:127.0.0.1:11211", "udp:...",
                                 "unix:/path" */
};

/* Bind every -l address of st, appending to ls[*nls] (LISTEN_MAX in all):
 * TCP listeners (tls: with -Z, unless named "notls:"), or with udp the UDP
 * sockets (port -U). 0, or a negative errno with one sentence in
 * err_msg(); the sockets bound so far stay in ls for listen_close. */
int listen_net(struct listener *ls, unsigned *nls, const struct settings *st,
               bool tls, bool udp);
/* Bind the -s unix socket st->unix_path (its mode from -a), as listen_net. */
int listen_unix(struct listener *ls, unsigned *nls, const struct settings *st);
/* Close ls[0..nls) (fd -1 afterwards) and remove the unix socket's file. */
void listen_close(struct listener *ls, unsigned nls, const char *unix_path);
