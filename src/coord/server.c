/* coord/server.c - the socket, the epoll loop, framed non-blocking I/O, and the tick. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "arith/pinned.h"
#include "base/log.h"
#include "base/rundir.h"
#include "comem/comem.h"
#include "comem/common.h"
#include "coord/coord_internal.h"
#include "probe/hostmem.h"
#include "probe/select.h"

#define TIMER_PERIOD_MS 20 /* ask deadlines are checked this often; the tick runs every cfg.tick_ms */

void comem_coord_config_defaults(comem_coord_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->idle_release_s = 60.0;
    cfg->ask_deadline_ms = 2000;
    cfg->grant_ttl_ms = 60000;
    cfg->reading_max_age_ms = 20;
    cfg->tick_ms = 250;
    const char *e;
    if ((e = getenv("COMEM_DEVICE")) && *e)
        snprintf(cfg->device_spec, sizeof cfg->device_spec, "%s", e);
    if ((e = getenv("COMEM_TOKEN")) && *e)
        snprintf(cfg->token, sizeof cfg->token, "%s", e);
    if ((e = getenv("COMEM_IDLE_SECONDS")) && *e) {
        double v = strtod(e, NULL);
        if (v > 0)
            cfg->idle_release_s = v;
    }
    if ((e = getenv("COMEM_CHECK")) && *e && strcmp(e, "0") != 0)
        cfg->check = true;
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
    }
    want_out(s, c, false);
    return true;
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
        c->closing = true;
        return;
    }
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

static void accept_all(comem_coord_srv *s)
{
    for (;;) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN: no more; other errors: try again on the next event */
        struct ucred cred;
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
            close(fd);
            continue;
        }
        int slot = -1;
        for (int i = 0; i < COORD_MAX_CONNS && slot < 0; i++)
            if (!s->conns[i])
                slot = i;
        conn *c = slot >= 0 ? calloc(1, sizeof *c) : NULL;
        if (c)
            c->in = malloc(COMEM_WIRE_MAX_FRAME);
        if (!c || !c->in) {
            comem_error("refusing a connection from pid %d: no room", (int)cred.pid);
            if (c)
                free(c);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->pidfd = -1;
        c->pid = cred.pid;
        c->uid = cred.uid;
        c->slot = slot;
        c->tag = (ep_tag){EP_CONN, c};
        c->pid_tag = (ep_tag){EP_PIDFD, c};
        s->conns[slot] = c;
        ep_add(s, fd, EPOLLIN, &c->tag);
        if (cred.uid != getuid()) {
            /* Another user may never read or change this user's ledger. */
            comem_warn("refused pid %d: uid %u is not the coordinator's uid %u", (int)cred.pid, cred.uid, getuid());
            coord_reply(s, c, 0, COMEM_EPERM, "refused: another user's coordinator");
            c->closing = true;
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
    c->closing = true; /* EOF or error */
    c->out_len = 0;
}

/* ---- the tick ---- */

static void tick(comem_coord_srv *s)
{
    uint64_t expirations;
    ssize_t r = read(s->timer_fd, &expirations, sizeof expirations);
    (void)r;
    int64_t now = comem_now_ns();
    coord_asks_tick(s, now);
    coord_jobs_tick(s, now);
    if (now - s->last_tick_ns < (int64_t)s->cfg.tick_ms * 1000000)
        return;
    s->last_tick_ns = now;
    if (comem_ledger_grants_expire(&s->ledger, now) > 0)
        comem_info("expired unused grants");
    for (int d = 0; d < s->ledger.n_devices; d++)
        coord_measure(s, d);
    coord_idle_tick(s, now);
    coord_pressure_tick(s, now);
}

/* ---- lifecycle ---- */

static int bind_socket(comem_coord_srv *s)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(s->cfg.socket_path) >= sizeof addr.sun_path) {
        comem_error("socket path too long: %s", s->cfg.socket_path);
        return COMEM_ERANGE;
    }
    strcpy(addr.sun_path, s->cfg.socket_path);
    /* A live coordinator answers a connect; a stale file does not and is replaced. */
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0 && connect(probe, (struct sockaddr *)&addr, sizeof addr) == 0) {
        close(probe);
        return COMEM_EEXIST;
    }
    if (probe >= 0)
        close(probe);
    unlink(s->cfg.socket_path);
    s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0)
        return COMEM_EIO;
    mode_t old = umask(0077); /* the socket is born 0600 */
    int rc = bind(s->listen_fd, (struct sockaddr *)&addr, sizeof addr);
    umask(old);
    if (rc != 0 || listen(s->listen_fd, 128) != 0) {
        int err = errno;
        comem_error("cannot listen on %s: %s", s->cfg.socket_path, strerror(err));
        /* Not ours: never unlink a path we did not bind (another coordinator may own it). */
        close(s->listen_fd);
        s->listen_fd = -1;
        return err == EADDRINUSE ? COMEM_EEXIST : COMEM_EIO;
    }
    return COMEM_OK;
}

static int open_devices(comem_coord_srv *s)
{
    char note[512];
    int rc = comem_devices_open(s->cfg.device_spec[0] ? s->cfg.device_spec : NULL, &s->src, note, sizeof note);
    if (rc != COMEM_OK) {
        comem_error("coordinator: cannot open devices: %s", note);
        return rc;
    }
    if (note[0])
        comem_info("coordinator: %s", note);
    int n = 0;
    comem_device_count(s->src, &n);
    if (n > COMEM_MAX_DEVICES)
        n = COMEM_MAX_DEVICES;
    ledger_device devs[COMEM_MAX_DEVICES];
    for (int i = 0; i < n; i++) {
        comem_device_reading *r = &s->meas[i].r;
        memset(&devs[i], 0, sizeof devs[i]);
        if (comem_device_read(s->src, i, r) != COMEM_OK)
            return COMEM_ENODEV;
        devs[i].index = i;
        snprintf(devs[i].uuid, sizeof devs[i].uuid, "%s", r->uuid);
        snprintf(devs[i].name, sizeof devs[i].name, "%s", r->name);
        devs[i].capacity = r->total;
        devs[i].scope = r->scope;
        devs[i].reserve_base = -1;
        devs[i].last_free = r->free;
    }
    /* The machine-wide pinned ceiling, from cgroup-clamped RAM (ComfyUI's rule). Its Windows form
       (40 % of RAM) applies once a process says its free reading is process-local (session.c). */
    comem_hostmem host;
    double max_pinned = COMEM_PINNING_DISABLED;
    s->max_pinned_windows = (int64_t)COMEM_PINNING_DISABLED;
    if (comem_hostmem_read(NULL, &host) == COMEM_OK) {
        comem_pin_ceiling_in pin = {.ram = (double)host.total, .disk_swap = host.disk_swap,
                                    .cgroup_limited = host.cgroup_limited, .enabled = true};
        max_pinned = comem_max_pinned(&pin);
        pin.windows = true;
        s->max_pinned_windows = (int64_t)comem_max_pinned(&pin);
    }
    rc = comem_ledger_init(&s->ledger, devs, n, (int64_t)max_pinned);
    comem_ledger_set_checking(&s->ledger, s->cfg.check);
    return rc;
}

int comem_coord_create(const comem_coord_config *cfg, comem_coord_srv **out)
{
    comem_coord_srv *s = calloc(1, sizeof *s);
    if (!s)
        return COMEM_ENOMEM;
    s->cfg = *cfg;
    s->epfd = s->listen_fd = s->wake_fd = s->timer_fd = -1;
    s->host_base = -1;
    s->started_ns = s->last_tick_ns = comem_now_ns();
    comem_slab_init(&s->asks, sizeof(ask));
    comem_slab_init(&s->jobs, sizeof(job));
    s->frame = malloc(COMEM_WIRE_MAX_FRAME);
    int rc = s->frame ? COMEM_OK : COMEM_ENOMEM;
    if (rc == COMEM_OK && !s->cfg.socket_path[0])
        rc = comem_default_socket(s->cfg.socket_path, sizeof s->cfg.socket_path);
    if (rc == COMEM_OK)
        rc = open_devices(s);
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
        comem_view_writer_open(&s->view, s->cfg.socket_path, s->ledger.n_devices);
        for (int d = 0; d < s->ledger.n_devices; d++) {
            coord_publish_reserve(s, d, false);
            coord_measure(s, d);
        }
        comem_info("coordinator: listening on %s, %d device(s)%s", s->cfg.socket_path, s->ledger.n_devices,
                   s->cfg.token[0] ? ", token required" : "");
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
        close(s->listen_fd);
        unlink(s->cfg.socket_path);
    }
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    if (s->timer_fd >= 0)
        close(s->timer_fd);
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
