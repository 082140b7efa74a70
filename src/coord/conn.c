/*
 * coord/conn.c - what goes out: each connection's buffered frames, flushed, and their bounds.
 *
 * Frames are encoded into the connection's buffer and flushed as the socket
 * takes them; what a peer may leave unread is bounded.
 *
 * Every handler answers through coord_send and coord_reply; nothing here
 * calls back into the handlers or the loop. A frame is written at once when
 * the socket has room; what does not fit waits in the connection's buffer
 * with EPOLLOUT armed, and the loop flushes it when the socket drains. A peer
 * that leaves COORD_OUT_LIMIT unread is dropped; above COORD_OUT_TOTAL over
 * all connections, the worst reader is.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

#define OUT_KEEP (64 << 10) /* an output buffer larger than this is freed once it drains */

int coord_watch(comem_coord_srv *s, int fd, uint32_t events, ep_tag *tag)
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

/* Arms or disarms EPOLLOUT, touching epoll only when that changes (a syscall saved per reply). */
static void want_out(comem_coord_srv *s, conn *c, bool on)
{
    if (c->want_out == on)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0u), .data.ptr = &c->tag};
    epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = on;
}

/* Sends what is queued with the session's shares riding on its first byte (SCM_RIGHTS), in their places. */
static ssize_t send_with_shares(conn *c)
{
    int fds[2], n_fds = c->n_pass;
    for (int i = 0; i < n_fds; i++)
        fds[i] = (int)c->pass[i];
    struct iovec iov = {.iov_base = c->out, .iov_len = c->out_len};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(2 * sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                        .msg_controllen = CMSG_SPACE((size_t)n_fds * sizeof(int))};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN((size_t)n_fds * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, (size_t)n_fds * sizeof(int));
    ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
    if (n > 0) { /* they went with those bytes: the client holds the only other copies now */
        for (int i = 0; i < n_fds; i++)
            comem_shm_token_drop(c->pass[i]);
        c->n_pass = 0;
    }
    return n;
}

bool coord_flush(comem_coord_srv *s, conn *c)
{
    while (c->out_len > 0) {
        ssize_t n = c->n_pass > 0 ? send_with_shares(c) : send(c->fd, c->out, c->out_len, MSG_NOSIGNAL);
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

void coord_drop_output(comem_coord_srv *s, conn *c)
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
        coord_drop_output(s, worst);
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
        coord_drop_output(s, c);
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
    if (!coord_flush(s, c))
        c->closing = true;
}

void coord_reply(comem_coord_srv *s, conn *c, uint32_t request_id, int status, const char *message)
{
    comem_msg m = {.type = COMEM_MSG_REPLY, .request_id = request_id};
    m.u.reply.status = status;
    snprintf(m.u.reply.message, sizeof m.u.reply.message, "%s", message ? message : comem_status_str(status));
    coord_send(s, c, &m);
}
