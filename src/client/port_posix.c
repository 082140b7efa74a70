/*
 * client/port_posix.c - client/port.h on Linux: a Unix stream socket, and epoll sets with an
 * eventfd each, between which the socket moves (client/reader.c says where it rests when).
 */
#include "client/port.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "comem/common.h"
#include "os/stream_posix.h"

_Static_assert(sizeof(((struct sockaddr_un *)0)->sun_path) == COMEM_PORT_NAME_MAX, "a name is a socket's path");

struct client_sock {
    int fd;
};

struct client_waits {
    int epfd;
    int efd; /* the wake-up */
};

bool comem_port_socket_moves(void) { return true; }

int comem_port_look(const char *name, char *why, size_t whylen)
{
    struct stat st;
    if (lstat(name, &st) != 0) {
        if (errno == ENOENT) {
            snprintf(why, whylen, "nothing at %s (no such file): no coordinator was started there", name);
            return COMEM_ENOENT;
        }
        snprintf(why, whylen, "cannot look at %s: %s", name, strerror(errno));
        return COMEM_EPERM;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(why, whylen, "%s is not a socket%s", name,
                 S_ISDIR(st.st_mode) ? " (a directory)" : S_ISREG(st.st_mode) ? " (a regular file)" : "");
        return COMEM_EINVAL;
    }
    return COMEM_OK;
}

int comem_port_connect(const char *name, client_waits *service, client_sock **out, char *why, size_t whylen)
{
    (void)service; /* a socket joins a set when it rests there (comem_waits_hold) */
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    size_t n = strlen(name);
    if (n >= sizeof sa.sun_path)
        return COMEM_ERANGE;
    memcpy(sa.sun_path, name, n + 1);
    client_sock *s = malloc(sizeof *s);
    if (!s)
        return COMEM_ENOMEM;
    /* Non-blocking from the start: a Unix stream connect does not wait for accept(), it
       succeeds or fails at once, and with a full queue (a coordinator that stopped accepting)
       it fails with EAGAIN instead of waiting; no write can hang past its deadline either. */
    s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s->fd < 0) {
        free(s);
        return COMEM_EIO;
    }
    if (connect(s->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        comem_port_close(s);
        switch (e) {
        case ENOENT: return COMEM_ENOENT;       /* nothing at the path */
        case ECONNREFUSED: return COMEM_ECLOSED; /* a socket nobody listens on, or not a socket */
        case EAGAIN: return COMEM_EBUSY;        /* its queue is full: it does not accept */
        case EACCES: case EPERM: return COMEM_EPERM;
        default: return COMEM_EIO;
        }
    }
    int rc = comem_stream_peer_check(s->fd, name, why, whylen); /* before the HELLO and its token */
    if (rc != COMEM_OK) {
        comem_port_close(s);
        return rc;
    }
    *out = s;
    return COMEM_OK;
}

int64_t comem_port_peer_pid(client_sock *s)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(s->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return 0;
    return cred.pid > 0 ? cred.pid : 0;
}

void comem_port_close(client_sock *s)
{
    if (!s)
        return;
    close(s->fd); /* leaves the epoll sets with it */
    free(s);
}

bool comem_port_adopt(client_sock *s, int slice_ms)
{
    int flags = fcntl(s->fd, F_GETFL);
    struct timeval slice = {slice_ms / 1000, (slice_ms % 1000) * 1000};
    if (flags >= 0 && setsockopt(s->fd, SOL_SOCKET, SO_RCVTIMEO, &slice, sizeof slice) == 0 &&
        fcntl(s->fd, F_SETFL, flags & ~O_NONBLOCK) == 0)
        return true;
    comem_debug("client: the socket stays non-blocking (%s): a leader waits in poll", strerror(errno));
    return false;
}

int comem_port_send(client_sock *s, const void *buf, size_t len, int timeout_ms)
{
    int64_t deadline = comem_now_ns() + (int64_t)timeout_ms * 1000000;
    const uint8_t *p = buf;
    size_t off = 0;
    while (off < len) {
        ssize_t w = send(s->fd, p + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT); /* the socket may block: adopt */
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int left = comem_ms_until(deadline);
            if (left == 0)
                return COMEM_ETIMEDOUT;
            struct pollfd pfd = {.fd = s->fd, .events = POLLOUT};
            if (poll(&pfd, 1, left) < 0 && errno != EINTR)
                return COMEM_EIO;
            continue;
        }
        return COMEM_ECLOSED;
    }
    return COMEM_OK;
}

void comem_port_shut(client_sock *s) { shutdown(s->fd, SHUT_RDWR); }

/* What a read that returned r means: 1 bytes came (*got), 0 none yet, or the stream's end. */
static int took(ssize_t r, size_t *got)
{
    if (r > 0) {
        *got = (size_t)r;
        return 1;
    }
    if (r == 0)
        return COMEM_ECLOSED;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return 0;
    return errno == ECONNRESET ? COMEM_ECLOSED : COMEM_EIO;
}

int comem_port_read_wait(client_waits *service, client_sock *s, void *buf, size_t cap, size_t *got,
                         comem_shm_token *shares, int share_cap, int *n, int timeout_ms)
{
    struct pollfd pfd[2] = {{.fd = s ? s->fd : -1, .events = POLLIN}, {.fd = service ? service->efd : -1, .events = POLLIN}};
    int pr = poll(pfd, 2, timeout_ms);
    if (pr < 0)
        return errno == EINTR ? 0 : COMEM_EIO;
    if (pr == 0)
        return 0;
    if (pfd[1].revents & POLLIN) {
        uint64_t v;
        ssize_t r = read(service->efd, &v, sizeof v);
        (void)r;
        return 2;
    }
    if (!(pfd[0].revents & (POLLIN | POLLHUP | POLLERR)))
        return 0;
    return took(comem_recv_shares(s->fd, buf, cap, MSG_DONTWAIT, shares, share_cap, n), got);
}

int comem_port_fill(client_waits *service, client_sock *s, void *buf, size_t cap, size_t *got)
{
    (void)service;
    return took(recv(s->fd, buf, cap, MSG_DONTWAIT), got);
}

int comem_port_fill_wait(client_sock *s, void *buf, size_t cap, size_t *got, int timeout_ms)
{
    if (timeout_ms < 0) /* adopted: blocking, SO_RCVTIMEO bounds the wait */
        return took(recv(s->fd, buf, cap, 0), got);
    struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
    if (poll(&pfd, 1, timeout_ms) < 0 && errno != EINTR)
        return COMEM_EIO;
    return took(recv(s->fd, buf, cap, MSG_DONTWAIT), got);
}

struct timespec comem_port_cond_deadline(int64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000), .tv_nsec = (long)(deadline_ns % 1000000000)};
    return ts;
}

/* ---- the wait sets ---- */

int comem_waits_open(client_waits **out)
{
    client_waits *w = malloc(sizeof *w);
    if (!w)
        return COMEM_ENOMEM;
    w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = w->efd};
    if (w->efd < 0 || w->epfd < 0 || epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->efd, &ev) != 0) {
        comem_waits_close(w);
        return COMEM_EIO;
    }
    *out = w;
    return COMEM_OK;
}

void comem_waits_close_forked(client_waits *w)
{
    if (!w)
        return;
    if (w->efd >= 0)
        close(w->efd);
    if (w->epfd >= 0)
        close(w->epfd);
    w->efd = w->epfd = -1;
}

void comem_waits_close(client_waits *w)
{
    comem_waits_close_forked(w);
    free(w);
}

void comem_waits_wake(client_waits *w)
{
    uint64_t one = 1;
    ssize_t r = write(w->efd, &one, sizeof one);
    (void)r; /* a full counter still wakes the waiter */
}

int comem_waits_wait(client_waits *w, int timeout_ms)
{
    struct epoll_event ev[2];
    int n = epoll_wait(w->epfd, ev, 2, timeout_ms);
    if (n < 0)
        return errno == EINTR ? 0 : COMEM_EIO;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (ev[i].data.fd == w->efd) {
            uint64_t v;
            ssize_t r = read(w->efd, &v, sizeof v);
            (void)r;
            return 2; /* the socket, if ready too, is reported again: level-triggered */
        }
        rc = 1;
    }
    return rc;
}

void comem_waits_hold(client_waits *w, client_sock *s, bool on)
{
    struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.fd = s->fd};
    if (epoll_ctl(w->epfd, EPOLL_CTL_MOD, s->fd, &ev) != 0 && on)
        epoll_ctl(w->epfd, EPOLL_CTL_ADD, s->fd, &ev); /* first time on this socket */
}
