/* coord/server.c - the socket, the epoll loop, framed non-blocking I/O, and the tick. */
#include <errno.h>
#include <fcntl.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/log.h"
#include "base/rundir.h"
#include "base/size.h"
#include "base/token.h"
#include "comem/comem.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

#define TIMER_PERIOD_MS 20 /* ask deadlines are checked this often; the tick runs every cfg.tick_ms */
#define OUT_KEEP (64 << 10)  /* an output buffer larger than this is freed once it drains */

int comem_coord_config_defaults(comem_coord_config *cfg, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->idle_release_s = 60.0;
    cfg->ask_deadline_ms = 2000;
    cfg->grant_ttl_ms = 60000;
    cfg->reading_max_age_ms = 20;
    cfg->tick_ms = 250;
    cfg->hello_timeout_ms = 5000;
    cfg->reserve_base = -1;
    const char *e;
    if ((e = getenv("COMEM_DEVICE")) && *e)
        snprintf(cfg->device_spec, sizeof cfg->device_spec, "%s", e);
    if ((e = getenv("COMEM_CHECK")) && *e && strcmp(e, "0") != 0)
        cfg->check = true;
    int rc = comem_token_from_env(cfg->token, sizeof cfg->token, err, errlen);
    if (rc == COMEM_OK && (e = getenv("COMEM_IDLE_SECONDS")) && *e)
        rc = comem_parse_seconds("COMEM_IDLE_SECONDS", e, &cfg->idle_release_s, err, errlen);
    return rc;
}

double coord_now_s(const comem_coord_srv *s) { return (double)(comem_now_ns() - s->started_ns) / 1e9; }

const char *comem_coord_socket(const comem_coord_srv *s) { return s->cfg.socket_path; }

/* ---- connections ---- */

static int ep_add(comem_coord_srv *s, int fd, uint32_t events, ep_tag *tag)
{
    struct epoll_event ev = {.events = events, .data.ptr = tag};
    return epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev);
}

conn *coord_conn_of(comem_coord_srv *s, uint64_t session)
{
    for (int i = 0; i < COORD_MAX_CONNS; i++)
        if (s->conns[i] && s->conns[i]->session == session && !s->conns[i]->closing)
            return s->conns[i];
    return NULL;
}

static void conn_free(comem_coord_srv *s, conn *c)
{
    if (c->session)
        coord_session_end(s, c, "connection closed");
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->pidfd >= 0) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->pidfd, NULL);
        close(c->pidfd);
    }
    s->conns[c->slot] = NULL;
    s->out_total -= c->out_len;
    free(c->in);
    free(c->out);
    free(c);
}

/* Arms or disarms EPOLLOUT, touching epoll only when that changes (a syscall saved per reply). */
static void want_out(comem_coord_srv *s, conn *c, bool on)
{
    if (c->want_out == on)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0u), .data.ptr = &c->tag};
    epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = on;
}

/* Writes what is queued; arms EPOLLOUT while the socket is full. False: the peer is gone. */
static bool flush(comem_coord_srv *s, conn *c)
{
    while (c->out_len > 0) {
        ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                want_out(s, c, true);
                return true;
            }
            return false;
        }
        memmove(c->out, c->out + n, c->out_len - (size_t)n);
        c->out_len -= (size_t)n;
        s->out_total -= (size_t)n;
    }
    if (c->out_cap > OUT_KEEP) { /* a burst (a large status) is over: give its buffer back */
        free(c->out);
        c->out = NULL;
        c->out_cap = 0;
    }
    want_out(s, c, false);
    return true;
}

/* Drops what c has queued (it is being closed for not reading). */
static void drop_output(comem_coord_srv *s, conn *c)
{
    s->out_total -= c->out_len;
    c->out_len = 0;
    c->closing = true;
}

/* Above COORD_OUT_TOTAL: the connection with the most unread output is dropped. True when that is c. */
static bool over_total(comem_coord_srv *s, conn *c, size_t n)
{
    while (s->out_total + n > COORD_OUT_TOTAL) {
        conn *worst = NULL;
        for (int i = 0; i < COORD_MAX_CONNS; i++)
            if (s->conns[i] && s->conns[i]->out_len > 0 && (!worst || s->conns[i]->out_len > worst->out_len))
                worst = s->conns[i];
        if (!worst)
            return false;
        comem_warn("pid %d has %zu bytes of replies unread, the most of any; closing its connection", (int)worst->pid,
                   worst->out_len);
        drop_output(s, worst);
        if (worst == c)
            return true;
    }
    return false;
}

void coord_send(comem_coord_srv *s, conn *c, comem_msg *m)
{
    if (!c || c->fd < 0)
        return;
    int n = comem_wire_encode(m, s->frame, COMEM_WIRE_MAX_FRAME);
    if (n < 0) {
        comem_error("cannot encode %s for pid %d: %s", comem_wire_type_name(m->type), (int)c->pid,
                    comem_status_str(n));
        return;
    }
    if (c->out_len + (size_t)n > COORD_OUT_LIMIT) {
        comem_warn("pid %d does not read its replies; closing its connection", (int)c->pid);
        drop_output(s, c);
        return;
    }
    if (over_total(s, c, (size_t)n))
        return;
    if (c->out_len + (size_t)n > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + (size_t)n)
            cap *= 2;
        uint8_t *p = realloc(c->out, cap);
        if (!p) {
            c->closing = true;
            return;
        }
        c->out = p;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, s->frame, (size_t)n);
    c->out_len += (size_t)n;
    s->out_total += (size_t)n;
    if (!flush(s, c))
        c->closing = true;
}

void coord_reply(comem_coord_srv *s, conn *c, uint32_t request_id, int status, const char *message)
{
    comem_msg m = {.type = COMEM_MSG_REPLY, .request_id = request_id};
    m.u.reply.status = status;
    snprintf(m.u.reply.message, sizeof m.u.reply.message, "%s", message ? message : comem_status_str(status));
    coord_send(s, c, &m);
}

/* A malformed frame: answer with an error and close; other clients are untouched. */
static void protocol_error(comem_coord_srv *s, conn *c, uint32_t request_id, const char *why)
{
    comem_warn("malformed frame from pid %d (%s); closing its connection", (int)c->pid, why);
    coord_reply(s, c, request_id, COMEM_EPROTO, why);
    c->closing = true;
}

/*
 * Who may hold a connection. A connection that has not said HELLO holds a
 * slot and 64 KiB for nothing, so such connections are bounded: at most
 * COORD_PEER_UNAUTH per process and COORD_MAX_UNAUTH in all, the oldest
 * making room for a new one, and none for longer than the HELLO deadline.
 * A process holds at most COORD_PEER_CONNS connections. When the table is
 * full of sessions, a newcomer is told so (COMEM_EBUSY) before it is closed.
 * So a real client, which says HELLO at once, always gets in unless the
 * table is full of real sessions.
 */

/* Refuses c with one REPLY and closes it at the end of this loop turn. */
static void refuse(comem_coord_srv *s, conn *c, int status, const char *why)
{
    coord_reply(s, c, 0, status, why);
    c->closing = true;
}

/* The oldest connection without HELLO (of pid, or of anyone when pid < 0), not already closing. */
static conn *oldest_unauth(comem_coord_srv *s, int32_t pid)
{
    conn *old = NULL;
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        conn *c = s->conns[i];
        if (c && !c->session && !c->closing && (pid < 0 || c->pid == pid) &&
            (!old || c->accepted_ns < old->accepted_ns))
            old = c;
    }
    return old;
}

/* Counts open connections: without HELLO (of pid, or all when pid < 0), and all of pid. */
static void count_conns(comem_coord_srv *s, int32_t pid, int *unauth, int *of_pid)
{
    *unauth = *of_pid = 0;
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        conn *c = s->conns[i];
        if (!c || c->closing)
            continue;
        if (!c->session && (pid < 0 || c->pid == pid))
            (*unauth)++;
        if (pid >= 0 && c->pid == pid)
            (*of_pid)++;
    }
}

static void on_readable(comem_coord_srv *s, conn *c);

static void count_conns(comem_coord_srv *s, int32_t pid, int *unauth, int *of_pid);

/*
 * While more than limit connections (of pid; of anyone when pid < 0) have not
 * said HELLO, closes the oldest, to make room. A connection accepted in the
 * same burst may have its HELLO waiting unread: each candidate is read first,
 * and one that turns out to be a session is kept (and no longer counts). True
 * when one was closed.
 */
static bool reclaim_unauth(comem_coord_srv *s, int32_t pid, int limit, const char *why)
{
    for (;;) {
        int unauth, of_pid;
        count_conns(s, pid, &unauth, &of_pid);
        conn *old = unauth > limit ? oldest_unauth(s, pid) : NULL;
        if (!old)
            return false;
        on_readable(s, old);
        if (old->session || old->closing)
            continue; /* it said HELLO after all (or went): not silent */
        refuse(s, old, COMEM_ETIMEDOUT, why);
        return true;
    }
}

/* Tells a connection that gets no slot why, in one frame written at once, and closes it. */
static void refuse_unslotted(comem_coord_srv *s, int fd, int32_t pid, const char *why)
{
    comem_msg m = {.type = COMEM_MSG_REPLY, .request_id = 0};
    m.u.reply.status = COMEM_EBUSY;
    snprintf(m.u.reply.message, sizeof m.u.reply.message, "%s", why);
    int n = comem_wire_encode(&m, s->frame, COMEM_WIRE_MAX_FRAME);
    if (n > 0 && send(fd, s->frame, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        comem_debug("could not tell pid %d it was refused: %s", (int)pid, strerror(errno));
    close(fd);
}

/* Out of descriptors: accept one connection on the spare descriptor only to refuse it. */
static void refuse_on_spare(comem_coord_srv *s)
{
    if (s->spare_fd < 0)
        return;
    close(s->spare_fd);
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
        comem_warn("out of file descriptors; refusing a connection");
        refuse_unslotted(s, fd, -1, "refused: the coordinator is out of file descriptors");
    }
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static int free_slot(comem_coord_srv *s)
{
    for (int i = 0; i < COORD_MAX_CONNS; i++)
        if (!s->conns[i])
            return i;
    return -1;
}

static void accept_all(comem_coord_srv *s)
{
    for (;;) {
        int slot = free_slot(s);
        if (slot < 0) {
            /* Full. A connection that never said HELLO gives its slot up (it is freed at the
               end of this turn, and the newcomer accepted on the next); else the newcomer is
               told the coordinator is full. */
            if (reclaim_unauth(s, -1, 0, "closed: its slot went to a newer connection (no HELLO)"))
                return;
            for (int i = 0; i < COORD_MAX_CONNS; i++)
                if (s->conns[i] && s->conns[i]->closing)
                    return; /* a slot frees at the end of this turn: accept on the next */
        }
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if ((errno == EMFILE || errno == ENFILE) &&
                !reclaim_unauth(s, -1, 0, "closed: its descriptor went to a newer connection (no HELLO)"))
                refuse_on_spare(s);
            return; /* EAGAIN: no more; other errors: try again on the next event */
        }
        struct ucred cred;
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
            close(fd);
            continue;
        }
        if (slot < 0) {
            comem_warn("refusing a connection from pid %d: %d connections, all of them sessions", (int)cred.pid,
                       COORD_MAX_CONNS);
            refuse_unslotted(s, fd, cred.pid, "refused: the coordinator is full (" COORD_STR(COORD_MAX_CONNS) " sessions)");
            continue;
        }
        conn *c = calloc(1, sizeof *c);
        if (c)
            c->in = malloc(COMEM_WIRE_MAX_FRAME);
        if (!c || !c->in) {
            comem_error("refusing a connection from pid %d: no memory", (int)cred.pid);
            if (c)
                free(c);
            refuse_unslotted(s, fd, cred.pid, "refused: the coordinator is out of memory");
            continue;
        }
        c->fd = fd;
        c->pidfd = -1;
        c->pid = cred.pid;
        c->uid = cred.uid;
        c->slot = slot;
        c->accepted_ns = comem_now_ns();
        c->tag = (ep_tag){EP_CONN, c};
        c->pid_tag = (ep_tag){EP_PIDFD, c};
        s->conns[slot] = c;
        ep_add(s, fd, EPOLLIN, &c->tag);
        if (cred.uid != getuid()) {
            /* Another user may never read or change this user's ledger. */
            comem_warn("refused pid %d: uid %u is not the coordinator's uid %u", (int)cred.pid, cred.uid, getuid());
            char why[80];
            snprintf(why, sizeof why, "refused: this coordinator serves uid %u only", (unsigned)getuid());
            refuse(s, c, COMEM_EPERM, why);
            continue;
        }
        if (cred.pid > 0) { /* 0: a peer in another pid namespace; only the totals bound those */
            int unauth, of_pid;
            count_conns(s, cred.pid, &unauth, &of_pid);
            if (of_pid > COORD_PEER_CONNS) {
                comem_warn("refused pid %d: it holds %d connections already", (int)cred.pid, of_pid - 1);
                refuse(s, c, COMEM_EBUSY, "refused: this process holds " COORD_STR(COORD_PEER_CONNS) " connections");
                continue;
            }
            /* the same process keeps opening and not saying HELLO */
            reclaim_unauth(s, cred.pid, COORD_PEER_UNAUTH, "closed: this process opened more connections without HELLO");
        }
        reclaim_unauth(s, -1, COORD_MAX_UNAUTH, "closed: its slot went to a newer connection (no HELLO)");
    }
}

/* Connections that did not say HELLO within the deadline are closed. */
static void hello_deadlines(comem_coord_srv *s, int64_t now)
{
    int64_t limit = (int64_t)s->cfg.hello_timeout_ms * 1000000;
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        conn *c = s->conns[i];
        if (c && !c->session && !c->closing && now - c->accepted_ns > limit) {
            comem_info("pid %d said no HELLO within %d ms; closing its connection", (int)c->pid,
                       s->cfg.hello_timeout_ms);
            refuse(s, c, COMEM_ETIMEDOUT, "closed: no HELLO in time");
        }
    }
}

/* Parses and handles every whole frame in the input buffer. */
static void consume(comem_coord_srv *s, conn *c)
{
    size_t off = 0;
    while (!c->closing && c->in_len - off >= COMEM_WIRE_HEADER_SIZE) {
        comem_wire_header h;
        if (comem_wire_decode_header(c->in + off, c->in_len - off, &h) != COMEM_OK) {
            protocol_error(s, c, 0, "bad frame header");
            break;
        }
        if (c->in_len - off < COMEM_WIRE_HEADER_SIZE + (size_t)h.length)
            break; /* wait for the rest */
        if (comem_wire_decode(&h, c->in + off + COMEM_WIRE_HEADER_SIZE, &s->msg) != COMEM_OK) {
            protocol_error(s, c, h.request_id, "malformed payload");
            break;
        }
        off += COMEM_WIRE_HEADER_SIZE + h.length;
        if (!c->session && s->msg.type != COMEM_MSG_HELLO) {
            protocol_error(s, c, h.request_id, "the first frame must be HELLO");
            break;
        }
        coord_handle(s, c, &s->msg);
    }
    if (off) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
}

/*
 * Reads once: epoll is level-triggered, so if more is waiting it wakes us again.
 * (Reading on until EAGAIN would cost one more syscall on every request.)
 */
static void on_readable(comem_coord_srv *s, conn *c)
{
    if (c->in_len == COMEM_WIRE_MAX_FRAME) { /* cannot happen with a valid header; be safe */
        protocol_error(s, c, 0, "frame too large");
        return;
    }
    ssize_t n;
    do
        n = recv(c->fd, c->in + c->in_len, COMEM_WIRE_MAX_FRAME - c->in_len, 0);
    while (n < 0 && errno == EINTR);
    if (n > 0) {
        c->in_len += (size_t)n;
        consume(s, c);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    drop_output(s, c); /* EOF or error: nobody reads what is queued */
}

/* ---- the tick ---- */

static void tick(comem_coord_srv *s)
{
    uint64_t expirations;
    ssize_t r = read(s->timer_fd, &expirations, sizeof expirations);
    (void)r;
    int64_t now = comem_now_ns();
    hello_deadlines(s, now);
    coord_asks_tick(s, now);
    coord_jobs_tick(s, now);
    if (now - s->last_tick_ns < (int64_t)s->cfg.tick_ms * 1000000)
        return;
    s->last_tick_ns = now;
#ifdef __GLIBC__
    if (s->trim_due) { /* what an ended session's records and buffers took goes back to the system */
        malloc_trim(0);
        s->trim_due = false;
    }
#endif
    if (comem_ledger_grants_expire(&s->ledger, now) > 0)
        comem_info("expired unused grants");
    for (int d = 0; d < s->ledger.n_devices; d++)
        coord_measure(s, d);
    coord_idle_tick(s, now);
    coord_pressure_tick(s, now);
}

/* ---- lifecycle ---- */

/*
 * The socket path, and what may be done to it. A coordinator first makes sure
 * the path is free to take: whatever is there must be a socket of this user
 * (never a regular file, a directory, or another user's socket: those are
 * refused, untouched). It then takes an exclusive lock on PATH.lock (a file
 * that is created once and left in place, never truncated or removed), so two
 * coordinators can never both think they own PATH, even when started at the
 * same instant; the loser gives COMEM_EEXIST and touches nothing. Under the
 * lock a socket that answers belongs to a live coordinator that took no lock
 * (COMEM_EEXIST too); one that does not answer is stale and is replaced. At
 * exit only the socket this process bound is removed (same inode), never a
 * newer one someone else put at the path.
 */
static const char *kind_of(mode_t m)
{
    return S_ISREG(m) ? "a regular file" : S_ISDIR(m) ? "a directory" : S_ISLNK(m) ? "a symbolic link" : "not a socket";
}

/* What is at the path may be replaced: nothing, or a socket of ours. COMEM_EPERM (and why) otherwise. */
static int path_replaceable(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? COMEM_OK : COMEM_EIO;
    if (!S_ISSOCK(st.st_mode)) {
        comem_error("refusing %s: it is %s, not a coordinator's socket; choose another --socket path", path,
                    kind_of(st.st_mode));
        return COMEM_EPERM;
    }
    if (st.st_uid != getuid()) {
        comem_error("refusing %s: the socket belongs to uid %u", path, (unsigned)st.st_uid);
        return COMEM_EPERM;
    }
    return COMEM_OK;
}

static int take_lock(comem_coord_srv *s)
{
    char lock[PATH_MAX + 8];
    if ((size_t)snprintf(lock, sizeof lock, "%s.lock", s->cfg.socket_path) >= sizeof lock)
        return COMEM_ERANGE;
    int fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        comem_error("cannot open the lock file %s: %s", lock, strerror(errno));
        return COMEM_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid()) {
        comem_error("refusing %s: the lock file must be a regular file of uid %u", lock, (unsigned)getuid());
        close(fd);
        return COMEM_EPERM;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        close(fd);
        if (err == EWOULDBLOCK)
            return COMEM_EEXIST; /* another coordinator owns this socket path */
        comem_error("cannot lock %s: %s", lock, strerror(err));
        return COMEM_EIO;
    }
    s->lock_fd = fd;
    return COMEM_OK;
}

/* The path's inode now, to tell at exit whether the socket there is still the one we bound. */
static bool same_socket(const comem_coord_srv *s)
{
    struct stat st;
    return s->sock_ino && lstat(s->cfg.socket_path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == s->sock_dev &&
           st.st_ino == s->sock_ino;
}

/* Claims the path before anything touches it: its type, then the lock. */
static int claim_path(comem_coord_srv *s)
{
    struct sockaddr_un addr;
    if (strlen(s->cfg.socket_path) >= sizeof addr.sun_path) {
        comem_error("socket path too long: %s", s->cfg.socket_path);
        return COMEM_ERANGE;
    }
    int rc = path_replaceable(s->cfg.socket_path);
    if (rc == COMEM_OK)
        rc = take_lock(s);
    return rc;
}

static int bind_socket(comem_coord_srv *s)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    strcpy(addr.sun_path, s->cfg.socket_path);
    /* Under the lock. A live coordinator answers a connect; a stale socket does not and is replaced. */
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0 && connect(probe, (struct sockaddr *)&addr, sizeof addr) == 0) {
        close(probe);
        return COMEM_EEXIST;
    }
    if (probe >= 0)
        close(probe);
    int rc = path_replaceable(s->cfg.socket_path); /* again: it may have changed before the lock */
    if (rc != COMEM_OK)
        return rc;
    if (unlink(s->cfg.socket_path) != 0 && errno != ENOENT) {
        comem_error("cannot replace the stale socket %s: %s", s->cfg.socket_path, strerror(errno));
        return COMEM_EIO;
    }
    s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0)
        return COMEM_EIO;
    mode_t old = umask(0077); /* the socket is born 0600 */
    rc = bind(s->listen_fd, (struct sockaddr *)&addr, sizeof addr);
    umask(old);
    if (rc != 0 || listen(s->listen_fd, 128) != 0) {
        int err = errno;
        comem_error("cannot listen on %s: %s", s->cfg.socket_path, strerror(err));
        /* Not ours: never unlink a path we did not bind (another coordinator may own it). */
        close(s->listen_fd);
        s->listen_fd = -1;
        return err == EADDRINUSE ? COMEM_EEXIST : COMEM_EIO;
    }
    struct stat st;
    if (lstat(s->cfg.socket_path, &st) == 0) { /* what we created, and the only thing we remove at exit */
        s->sock_dev = st.st_dev;
        s->sock_ino = st.st_ino;
    }
    return COMEM_OK;
}

int comem_coord_create(const comem_coord_config *cfg, comem_coord_srv **out)
{
    comem_coord_srv *s = calloc(1, sizeof *s);
    if (!s)
        return COMEM_ENOMEM;
    s->cfg = *cfg;
    s->epfd = s->listen_fd = s->wake_fd = s->timer_fd = s->lock_fd = -1;
    s->view.fd = -1;
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    s->host_base = cfg->reserve_base >= 0 ? cfg->reserve_base : -1;
    s->started_ns = s->last_tick_ns = comem_now_ns();
    comem_slab_init(&s->asks, sizeof(ask));
    comem_slab_init(&s->jobs, sizeof(job));
    s->frame = malloc(COMEM_WIRE_MAX_FRAME);
    int rc = s->frame ? COMEM_OK : COMEM_ENOMEM;
    if (rc == COMEM_OK && !s->cfg.socket_path[0])
        rc = comem_default_socket(s->cfg.socket_path, sizeof s->cfg.socket_path);
    if (rc == COMEM_OK)
        rc = claim_path(s);
    if (rc == COMEM_OK)
        rc = coord_devices_open(s);
    if (rc == COMEM_OK)
        rc = comem_view_writer_open(&s->view, s->cfg.socket_path, s->ledger.n_devices);
    if (rc == COMEM_OK)
        rc = bind_socket(s);
    if (rc == COMEM_OK) {
        s->epfd = epoll_create1(EPOLL_CLOEXEC);
        s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        s->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        struct itimerspec its = {{0, TIMER_PERIOD_MS * 1000000L}, {0, TIMER_PERIOD_MS * 1000000L}};
        if (s->epfd < 0 || s->wake_fd < 0 || s->timer_fd < 0 || timerfd_settime(s->timer_fd, 0, &its, NULL) != 0)
            rc = COMEM_EIO;
    }
    if (rc == COMEM_OK) {
        s->listen_tag = (ep_tag){EP_LISTEN, NULL};
        s->wake_tag = (ep_tag){EP_WAKE, NULL};
        s->timer_tag = (ep_tag){EP_TIMER, NULL};
        ep_add(s, s->listen_fd, EPOLLIN, &s->listen_tag);
        ep_add(s, s->wake_fd, EPOLLIN, &s->wake_tag);
        ep_add(s, s->timer_fd, EPOLLIN, &s->timer_tag);
        for (int d = 0; d < s->ledger.n_devices; d++) {
            coord_publish_reserve(s, d, false);
            coord_measure(s, d);
        }
        char rb[32] = "";
        if (s->cfg.reserve_base >= 0)
            comem_format_bytes(s->cfg.reserve_base, rb, sizeof rb);
        comem_info("coordinator: listening on %s, %d device(s)%s%s%s", s->cfg.socket_path, s->ledger.n_devices,
                   s->cfg.token[0] ? ", token required" : "", rb[0] ? ", reserve base fixed at " : "", rb);
        *out = s;
        return COMEM_OK;
    }
    comem_coord_destroy(s);
    return rc;
}

int comem_coord_run(comem_coord_srv *s)
{
    struct epoll_event evs[64];
    while (!s->stop) {
        int n = epoll_wait(s->epfd, evs, 64, 1000);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            comem_error("coordinator: epoll: %s", strerror(errno));
            return COMEM_EIO;
        }
        for (int i = 0; i < n; i++) {
            ep_tag *t = evs[i].data.ptr;
            switch (t->kind) {
            case EP_LISTEN:
                accept_all(s);
                break;
            case EP_WAKE:
                s->stop = 1;
                break;
            case EP_TIMER:
                tick(s);
                break;
            case EP_PIDFD:
                /* The process died: its session ends at once, even if its socket lingers. */
                if (t->conn->session)
                    coord_session_end(s, t->conn, "process exited");
                t->conn->closing = true;
                break;
            case EP_CONN:
                if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                    on_readable(s, t->conn);
                if (!t->conn->closing && (evs[i].events & EPOLLOUT) && !flush(s, t->conn))
                    t->conn->closing = true;
                break;
            }
        }
        for (int i = 0; i < COORD_MAX_CONNS; i++) {
            conn *c = s->conns[i];
            if (c && c->closing) {
                flush(s, c); /* best effort: the error reply */
                conn_free(s, c);
            }
        }
    }
    return COMEM_OK;
}

void comem_coord_request_stop(comem_coord_srv *s)
{
    uint64_t one = 1;
    ssize_t w = write(s->wake_fd, &one, sizeof one);
    (void)w;
}

void comem_coord_destroy(comem_coord_srv *s)
{
    if (!s)
        return;
    for (int i = 0; i < COORD_MAX_CONNS; i++)
        if (s->conns[i])
            conn_free(s, s->conns[i]);
    if (s->listen_fd >= 0) {
        if (same_socket(s)) /* only the socket this process bound, never one put there since */
            unlink(s->cfg.socket_path);
        close(s->listen_fd);
    }
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* the lock goes with it; the file stays for the next coordinator */
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    if (s->timer_fd >= 0)
        close(s->timer_fd);
    if (s->spare_fd >= 0)
        close(s->spare_fd);
    for (size_t i = 0; i < comem_slab_slots(&s->jobs); i++) { /* jobs still waiting at shutdown */
        job *j = comem_slab_at(&s->jobs, i, NULL);
        if (j)
            free(j->keep);
    }
    comem_view_writer_close(&s->view);
    comem_device_close(s->src);
    comem_ledger_fini(&s->ledger);
    comem_slab_fini(&s->asks);
    comem_slab_fini(&s->jobs);
    free(s->frame);
    free(s);
}
