/*
 * Authentication (src/server/auth.h): the -Y file of "user:password"
 * lines, and SASL through Cyrus SASL (libsasl2).
 *
 * The file is read whole at start; each line is "user:password" (the
 * first ':' splits them, so a password may hold ':'), a "\r" before the
 * "\n" is dropped, and the last line may lack its "\n". Anything else
 * (a line without ':', an empty user or password, a blank line, a space,
 * which the text login cannot send, or no line at all) stops the server
 * with one line naming the file and the line. memcached accepts an empty
 * file and entries no login can match; a server nobody can log in to is
 * a configuration mistake, so tiercached says so.
 *
 * SASL: the library is set up once (sasl_server_init) with memcached's
 * application name, so the same memcached.conf (mech_list, sasldb_path)
 * serves both servers, and checked to offer at least one mechanism. Each
 * connection that starts an exchange gets its own sasl_conn_t.
 *
 * SIGHUP reloads the file (auth_reload), as memcached does: the new
 * users replace the old ones at once; a file that no longer loads leaves
 * the old ones in place, with one log line.
 *
 * Concurrency:
 *   a->tab                a->tab_lock: logins read it under the read
 *                         lock, a reload swaps it under the write lock
 *                         and frees the old table after
 *   a->path               immutable after auth_create()
 *   a->lock               guards every libsasl2 call: authentication is
 *                         rare, and the library (its sasldb backend, its
 *                         plugin tables) makes no promise about threads
 *   struct auth_sasl      one connection's, used by its worker only (under
 *                         a->lock while libsasl2 runs)
 */

#include "src/server/auth.h"

#include "src/base/err.h"
#include "src/base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sasl/sasl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A -Y file larger than this is surely not a list of passwords. */
#define AUTH_FILE_MAX (1u << 20)
/* memcached's SASL application and service name. */
#define AUTH_SASL_APP "memcached"

struct auth_user {
    const char *user, *pass; /* into the table's data, not NUL-ended */
    size_t ulen, plen;
};

/* The users of one reading of the file. */
struct auth_table {
    char *data; /* the file's bytes */
    struct auth_user *users;
    unsigned nusers;
};

struct auth {
    struct auth_table *tab; /* NULL without -Y */
    char *path;
    pthread_rwlock_t tab_lock;
    bool sasl;
    pthread_mutex_t lock;
};

struct auth_sasl {
    sasl_conn_t *conn;
    bool stepping; /* the last start or step asked for more */
};

/* --- the -Y file --- */

static int
read_file(const char *path, char **data, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int rc = -errno;
        err_set("-Y: cannot open auth file %s: %s", path, strerror(errno));
        return rc;
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        err_set("-Y: auth file %s is not a regular file", path);
        rc = -EINVAL;
        goto err_close;
    }
    if (st.st_size > AUTH_FILE_MAX) {
        err_set("-Y: auth file %s is larger than %u bytes", path,
                AUTH_FILE_MAX);
        rc = -EFBIG;
        goto err_close;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        err_set("-Y: no memory for auth file %s", path);
        rc = -ENOMEM;
        goto err_close;
    }
    size_t n = 0;
    while (n < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            err_set("-Y: cannot read auth file %s: %s", path, strerror(errno));
            free(buf);
            goto err_close;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    *data = buf;
    *len = n;
    return 0;

err_close:
    close(fd);
    return rc;
}

/* One line (without its "\n"): 0, or -EINVAL with the reason. */
static int
parse_line(const char *path, unsigned lineno, const char *p, size_t n,
           struct auth_user *u)
{
    if (n > 0 && p[n - 1] == '\r')
        n--;
    const char *colon = memchr(p, ':', n);
    const char *why = NULL;
    if (n == 0)
        why = "is empty";
    else if (!colon)
        why = "has no ':'";
    else if (colon == p)
        why = "has an empty user";
    else if (colon == p + n - 1)
        why = "has an empty password";
    else if (memchr(p, ' ', n) || memchr(p, '\t', n))
        why = "has a space or tab, which a login cannot send";
    if (why) {
        err_set("-Y: auth file %s line %u %s; expected user:password", path,
                lineno, why);
        return -EINVAL;
    }
    u->user = p;
    u->ulen = (size_t)(colon - p);
    u->pass = colon + 1;
    u->plen = (size_t)(p + n - colon - 1);
    return 0;
}

static void
table_free(struct auth_table *t)
{
    if (!t)
        return;
    free(t->users);
    free(t->data);
    free(t);
}

static int
table_fill(struct auth_table *a, const char *path)
{
    size_t len = 0;
    int rc = read_file(path, &a->data, &len);
    if (rc)
        return rc;
    unsigned lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += a->data[i] == '\n';
    a->users = calloc(lines + 1, sizeof(*a->users));
    if (!a->users) {
        err_set("-Y: no memory for the users of %s", path);
        return -ENOMEM;
    }
    size_t pos = 0;
    while (pos < len) {
        const char *p = a->data + pos;
        const char *nl = memchr(p, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - p) : len - pos;
        rc = parse_line(path, a->nusers + 1, p, n, &a->users[a->nusers]);
        if (rc)
            return rc;
        a->nusers++;
        pos += n + (nl != NULL);
    }
    if (a->nusers == 0) {
        err_set("-Y: auth file %s has no user:password line", path);
        return -EINVAL;
    }
    return 0;
}

static int
load_file(const char *path, struct auth_table **out)
{
    struct auth_table *t = calloc(1, sizeof(*t));
    if (!t) {
        err_set("-Y: no memory for the users of %s", path);
        return -ENOMEM;
    }
    int rc = table_fill(t, path);
    if (rc) {
        table_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int
auth_reload(struct auth *a)
{
    if (!a || !a->path)
        return 0;
    struct auth_table *t = NULL;
    int rc = load_file(a->path, &t);
    if (rc)
        return rc;
    pthread_rwlock_wrlock(&a->tab_lock);
    struct auth_table *old = a->tab;
    a->tab = t;
    pthread_rwlock_unlock(&a->tab_lock);
    table_free(old);
    return 0;
}

/* Equal, in time that depends on known's length only. */
static unsigned
same_bytes(const char *known, size_t klen, const char *given, size_t glen)
{
    volatile unsigned char diff = (unsigned char)(klen != glen);
    for (size_t i = 0; i < klen; i++) {
        unsigned char g = i < glen ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)known[i] ^ g;
    }
    return diff == 0;
}

bool
auth_file_check(struct auth *a, const char *user, size_t ulen, const char *pass,
                size_t plen)
{
    unsigned found = 0;
    pthread_rwlock_rdlock(&a->tab_lock);
    const struct auth_table *t = a->tab;
    /* every line, whatever matched before: the time says nothing of which */
    for (unsigned i = 0; t && i < t->nusers; i++) {
        const struct auth_user *u = &t->users[i];
        found |= same_bytes(u->user, u->ulen, user, ulen) &
                 same_bytes(u->pass, u->plen, pass, plen);
    }
    pthread_rwlock_unlock(&a->tab_lock);
    return found != 0;
}

/* --- SASL --- */

static int
sasl_log(void *ctx, int level, const char *msg)
{
    (void)ctx;
    if (level <= SASL_LOG_ERR)
        log_warn("sasl: %s", msg);
    else
        log_debug("sasl: %s", msg);
    return SASL_OK;
}

static const sasl_callback_t sasl_callbacks[] = {
    {SASL_CB_LOG, (int (*)(void))(void (*)(void))sasl_log, NULL},
    {SASL_CB_LIST_END, NULL, NULL},
};

static int
new_conn(sasl_conn_t **conn)
{
    return sasl_server_new(AUTH_SASL_APP, NULL, NULL, NULL, NULL, NULL, 0,
                           conn);
}

static int
mechs_locked(sasl_conn_t *conn, const char **mechs, size_t *len)
{
    const char *res = NULL;
    unsigned n = 0;
    int count = 0;
    int rc = sasl_listmech(conn, NULL, "", " ", "", &res, &n, &count);
    if (rc != SASL_OK || count <= 0)
        return -ENOENT;
    *mechs = res;
    *len = n;
    return 0;
}

static int
setup_sasl(struct auth *a)
{
    int rc = sasl_server_init(sasl_callbacks, AUTH_SASL_APP);
    if (rc != SASL_OK) {
        err_set("-S: cannot initialize SASL: %s",
                sasl_errstring(rc, NULL, NULL));
        return -EINVAL;
    }
    a->sasl = true;
    sasl_conn_t *conn = NULL;
    rc = new_conn(&conn);
    if (rc != SASL_OK) {
        err_set("-S: cannot start a SASL exchange: %s",
                sasl_errstring(rc, NULL, NULL));
        return -EINVAL;
    }
    const char *mechs;
    size_t len;
    rc = mechs_locked(conn, &mechs, &len);
    if (!rc)
        log_info("SASL mechanisms: %.*s", (int)len, mechs);
    sasl_dispose(&conn);
    if (rc) {
        err_set("-S: SASL offers no mechanism (set mech_list in "
                "memcached.conf under SASL_CONF_PATH or /etc/sasl2)");
        return -EINVAL;
    }
    return 0;
}

static int
ensure_conn(struct auth_sasl **x)
{
    if (*x)
        return 0;
    struct auth_sasl *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    if (new_conn(&s->conn) != SASL_OK) {
        free(s);
        return -ENOMEM;
    }
    *x = s;
    return 0;
}

int
auth_sasl_mechs(struct auth *a, struct auth_sasl **x, const char **mechs,
                size_t *len)
{
    pthread_mutex_lock(&a->lock);
    int rc = ensure_conn(x);
    if (!rc)
        rc = mechs_locked((*x)->conn, mechs, len);
    pthread_mutex_unlock(&a->lock);
    return rc;
}

static enum auth_result
result(int rc)
{
    return rc == SASL_OK         ? AUTH_OK
           : rc == SASL_CONTINUE ? AUTH_CONTINUE
                                 : AUTH_FAIL;
}

enum auth_result
auth_sasl_start(struct auth *a, struct auth_sasl **x, const char *mech,
                size_t mlen, const char *data, size_t dlen, const char **out,
                size_t *outlen)
{
    char name[AUTH_MECH_MAX + 1];
    if (mlen > AUTH_MECH_MAX || dlen > UINT32_MAX)
        return AUTH_FAIL;
    memcpy(name, mech, mlen);
    name[mlen] = '\0';
    int rc = SASL_FAIL;
    unsigned n = 0;
    *out = NULL;
    pthread_mutex_lock(&a->lock);
    if (*x) { /* a new AUTH starts over on a fresh exchange */
        sasl_dispose(&(*x)->conn);
        free(*x);
        *x = NULL;
    }
    if (ensure_conn(x) == 0) {
        rc = sasl_server_start((*x)->conn, name, data, (unsigned)dlen, out, &n);
        (*x)->stepping = rc == SASL_CONTINUE;
    }
    pthread_mutex_unlock(&a->lock);
    *outlen = n;
    return result(rc);
}

enum auth_result
auth_sasl_step(struct auth *a, struct auth_sasl **x, const char *data,
               size_t dlen, const char **out, size_t *outlen)
{
    int rc = SASL_FAIL;
    unsigned n = 0;
    *out = NULL;
    /* no exchange under way (libsasl2 must not step a finished or failed
     * one): refused */
    if (!*x || !(*x)->stepping || dlen > UINT32_MAX)
        return AUTH_FAIL;
    pthread_mutex_lock(&a->lock);
    rc = sasl_server_step((*x)->conn, data, (unsigned)dlen, out, &n);
    (*x)->stepping = rc == SASL_CONTINUE;
    pthread_mutex_unlock(&a->lock);
    *outlen = n;
    return result(rc);
}

void
auth_sasl_free(struct auth *a, struct auth_sasl *x)
{
    if (!x)
        return;
    pthread_mutex_lock(&a->lock);
    sasl_dispose(&x->conn);
    pthread_mutex_unlock(&a->lock);
    free(x);
}

/* --- life --- */

int
auth_create(const char *auth_file, bool sasl, struct auth **out)
{
    struct auth *a = calloc(1, sizeof(*a));
    if (!a) {
        err_set("no memory for authentication");
        return -ENOMEM;
    }
    pthread_mutex_init(&a->lock, NULL);
    pthread_rwlock_init(&a->tab_lock, NULL);
    int rc = 0;
    if (auth_file) {
        a->path = strdup(auth_file);
        rc = a->path ? load_file(auth_file, &a->tab) : -ENOMEM;
        if (rc == -ENOMEM)
            err_set("no memory for authentication");
    }
    if (!rc && sasl)
        rc = setup_sasl(a);
    if (rc) {
        auth_destroy(a);
        return rc;
    }
    *out = a;
    return 0;
}

void
auth_destroy(struct auth *a)
{
    if (!a)
        return;
    if (a->sasl)
        sasl_server_done();
    pthread_mutex_destroy(&a->lock);
    pthread_rwlock_destroy(&a->tab_lock);
    table_free(a->tab);
    free(a->path);
    free(a);
}
