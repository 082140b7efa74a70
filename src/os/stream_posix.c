/* os/stream_posix.c - os/stream.h over a Unix stream socket (Linux). */
#include "os/stream.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "comem/common.h"
#include "os/stream_posix.h"

struct comem_listener {
    int fd;
    int spare; /* /dev/null, given up for a moment to accept a client only to refuse it (out of descriptors) */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    dev_t dev; /* the socket this listener bound: the only one close removes */
    ino_t ino;
};

struct comem_stream {
    int fd;
};

static int address(const char *name, struct sockaddr_un *a)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    size_t n = strlen(name);
    if (n >= sizeof a->sun_path)
        return COMEM_ERANGE;
    memcpy(a->sun_path, name, n + 1);
    return COMEM_OK;
}

/* Waits up to timeout_ms for events on fd: COMEM_OK, COMEM_ETIMEDOUT or COMEM_EIO. */
static int wait_for(int fd, short events, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = events};
    for (;;) {
        int r = poll(&p, 1, timeout_ms);
        if (r > 0)
            return COMEM_OK;
        if (r == 0)
            return COMEM_ETIMEDOUT;
        if (errno != EINTR)
            return COMEM_EIO;
    }
}

/* A socket of this user's at name that nobody listens on any more: removed (true), or left (false). */
static bool stale(const char *name, const struct sockaddr_un *a)
{
    struct stat st;
    if (lstat(name, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != getuid())
        return false;
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool dead = probe >= 0 && connect(probe, (const struct sockaddr *)a, sizeof *a) != 0 && errno == ECONNREFUSED;
    if (probe >= 0)
        close(probe);
    return dead && unlink(name) == 0;
}

static const char *kind_of(mode_t m)
{
    return S_ISREG(m) ? "a regular file" : S_ISDIR(m) ? "a directory" : S_ISLNK(m) ? "a symbolic link" : "not a socket";
}

int comem_listen_check(const char *name, char *why, size_t whylen)
{
    struct sockaddr_un a;
    if (address(name, &a) != COMEM_OK) {
        if (why && whylen)
            snprintf(why, whylen, "socket path too long: %s", name);
        return COMEM_ERANGE;
    }
    struct stat st;
    if (lstat(name, &st) != 0)
        return errno == ENOENT ? COMEM_OK : COMEM_EIO;
    if (!S_ISSOCK(st.st_mode)) {
        if (why && whylen)
            snprintf(why, whylen, "refusing %s: it is %s, not a coordinator's socket; choose another --socket path",
                     name, kind_of(st.st_mode));
        return COMEM_EPERM;
    }
    if (st.st_uid != getuid()) {
        if (why && whylen)
            snprintf(why, whylen, "refusing %s: the socket belongs to uid %u", name, (unsigned)st.st_uid);
        return COMEM_EPERM;
    }
    return COMEM_OK;
}

int comem_listen(const char *name, comem_listener **out, char *why, size_t whylen)
{
    struct sockaddr_un a;
    if (!name || !out || address(name, &a) != COMEM_OK) {
        if (why && whylen)
            snprintf(why, whylen, "the socket path is too long for a Unix socket");
        return COMEM_ERANGE;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return COMEM_EIO;
    mode_t old = umask(0077); /* born 0600 */
    int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    if (rc != 0 && errno == EADDRINUSE && stale(name, &a))
        rc = bind(fd, (struct sockaddr *)&a, sizeof a); /* a dead listener's socket of ours, removed */
    umask(old);
    if (rc != 0 || listen(fd, 128) != 0) {
        int err = errno;
        close(fd);
        if (why && whylen)
            snprintf(why, whylen, "cannot listen on %s: %s", name, strerror(err));
        return err == EADDRINUSE ? COMEM_EEXIST : err == EACCES ? COMEM_EPERM : COMEM_EIO;
    }
    comem_listener *l = calloc(1, sizeof *l);
    if (!l) {
        close(fd);
        unlink(name);
        return COMEM_ENOMEM;
    }
    l->fd = fd;
    l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    memcpy(l->path, a.sun_path, sizeof l->path);
    struct stat st;
    if (lstat(name, &st) == 0) {
        l->dev = st.st_dev;
        l->ino = st.st_ino;
    }
    *out = l;
    return COMEM_OK;
}

int comem_accept(comem_listener *l, int timeout_ms, comem_stream **out, comem_peer *peer)
{
    int rc = wait_for(l->fd, POLLIN, timeout_ms);
    if (rc != COMEM_OK)
        return rc;
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return errno == EAGAIN || errno == EINTR ? COMEM_ETIMEDOUT
               : errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS ? COMEM_ENOMEM
                                                                                            : COMEM_EIO;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        close(fd);
        return COMEM_EIO;
    }
    comem_stream *s = malloc(sizeof *s);
    if (!s) {
        close(fd);
        return COMEM_ENOMEM;
    }
    s->fd = fd;
    if (peer) {
        peer->pid = cred.pid;
        peer->same_user = cred.uid == getuid();
        snprintf(peer->user, sizeof peer->user, "%u", (unsigned)cred.uid);
    }
    *out = s;
    return COMEM_OK;
}

int comem_listener_refuse_one(comem_listener *l, const void *why, size_t len)
{
    bool spared = l->spare >= 0;
    if (spared)
        close(l->spare); /* one descriptor free for the moment it takes */
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    int err = errno;
    if (fd >= 0) {
        ssize_t w = send(fd, why, len, MSG_NOSIGNAL | MSG_DONTWAIT); /* best effort: it may not read */
        (void)w;
        close(fd);
    }
    if (spared)
        l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return fd >= 0 ? COMEM_OK : err == EAGAIN ? COMEM_ETIMEDOUT : COMEM_EIO;
}

void comem_listener_close(comem_listener *l)
{
    if (!l)
        return;
    if (l->spare >= 0)
        close(l->spare);
    struct stat st; /* never a socket someone else put at the path since */
    if (l->ino && lstat(l->path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == l->dev && st.st_ino == l->ino)
        unlink(l->path);
    close(l->fd);
    free(l);
}

/*
 * Whoever listens first at a path in a shared directory gets the connections, so a client checks who
 * accepted it before it says a word (its HELLO carries COMEM_TOKEN; its answers run release callbacks).
 * Only the same uid passes, root included: a coordinator of root's refuses every other uid at accept
 * anyway (coord/input.c), so a root listener could never be ours, and root gains nothing from our
 * token it could not take from our memory. One rule, the coordinator's own, on both ends.
 */
int comem_stream_peer_check(int fd, const char *name, char *why, size_t whylen)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        if (why && whylen)
            snprintf(why, whylen, "cannot tell who listens at %s: %s", name, strerror(errno));
        return COMEM_EIO;
    }
    if (cred.uid == getuid())
        return COMEM_OK;
    if (why && whylen)
        snprintf(why, whylen,
                 "refusing %s: the socket belongs to another user (its listener runs as uid %u, this process as "
                 "uid %u); nothing was sent to it",
                 name, (unsigned)cred.uid, (unsigned)getuid());
    return COMEM_EPERM;
}

int comem_connect(const char *name, int timeout_ms, comem_stream **out)
{
    return comem_connect_why(name, timeout_ms, out, NULL, 0);
}

int comem_connect_why(const char *name, int timeout_ms, comem_stream **out, char *why, size_t whylen)
{
    struct sockaddr_un a;
    if (!name || !out || address(name, &a) != COMEM_OK)
        return COMEM_ERANGE;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return COMEM_EIO;
    /* A Unix stream connect does not wait for accept: it succeeds at once, or fails with EAGAIN while
       the listener's queue is full, which is what the timeout waits out. */
    for (int waited = 0;; waited += 10) {
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            break;
        int err = errno;
        if (err == EAGAIN && (timeout_ms < 0 || waited < timeout_ms)) {
            usleep(10000);
            continue;
        }
        close(fd);
        return err == ENOENT ? COMEM_ENOENT : err == ECONNREFUSED ? COMEM_ENOENT : err == EAGAIN ? COMEM_ETIMEDOUT
               : err == EACCES                                 ? COMEM_EPERM
                                                               : COMEM_EIO;
    }
    int rc = comem_stream_peer_check(fd, name, why, whylen);
    if (rc != COMEM_OK) {
        close(fd);
        return rc;
    }
    comem_stream *s = malloc(sizeof *s);
    if (!s) {
        close(fd);
        return COMEM_ENOMEM;
    }
    s->fd = fd;
    *out = s;
    return COMEM_OK;
}

int comem_stream_write(comem_stream *s, const void *buf, size_t len, int timeout_ms)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = send(s->fd, p, len, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            len -= (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            int rc = errno == EINTR ? COMEM_OK : wait_for(s->fd, POLLOUT, timeout_ms);
            if (rc != COMEM_OK)
                return rc;
        } else {
            return errno == EPIPE || errno == ECONNRESET ? COMEM_ECLOSED : COMEM_EIO;
        }
    }
    return COMEM_OK;
}

int comem_stream_read(comem_stream *s, void *buf, size_t cap, int timeout_ms)
{
    if (cap > (size_t)INT32_MAX)
        cap = INT32_MAX;
    for (;;) {
        ssize_t r = recv(s->fd, buf, cap, 0);
        if (r > 0)
            return (int)r;
        if (r == 0)
            return COMEM_ECLOSED;
        if (errno == ECONNRESET)
            return COMEM_ECLOSED;
        if (errno != EAGAIN && errno != EINTR)
            return COMEM_EIO;
        if (errno == EAGAIN) {
            int rc = wait_for(s->fd, POLLIN, timeout_ms);
            if (rc != COMEM_OK)
                return rc;
        }
    }
}

int comem_stream_send_now(comem_stream *s, const void *buf, size_t len, const comem_shm_token *shares, int n)
{
    if (len == 0 || n < 0 || n > COMEM_STREAM_SHARES_MAX)
        return COMEM_EINVAL; /* descriptors need a byte to ride on */
    if (len > (size_t)INT32_MAX)
        len = INT32_MAX;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(COMEM_STREAM_SHARES_MAX * sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n > 0) {
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
        for (int i = 0; i < n; i++) {
            int fd = (int)shares[i];
            memcpy(CMSG_DATA(cm) + (size_t)i * sizeof fd, &fd, sizeof fd);
        }
    }
    for (;;) {
        ssize_t w = sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0)
            return (int)w;
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return COMEM_ETIMEDOUT;
        return w < 0 && (errno == EPIPE || errno == ECONNRESET) ? COMEM_ECLOSED : COMEM_EIO;
    }
}

int comem_stream_write_shares(comem_stream *s, const void *buf, size_t len, const comem_shm_token *shares, int n,
                              int timeout_ms)
{
    for (;;) {
        int w = comem_stream_send_now(s, buf, len, shares, n);
        if (w > 0) /* the descriptors went with these bytes; the rest is plain */
            return comem_stream_write(s, (const char *)buf + w, len - (size_t)w, timeout_ms);
        if (w != COMEM_ETIMEDOUT)
            return w;
        int rc = wait_for(s->fd, POLLOUT, timeout_ms);
        if (rc != COMEM_OK)
            return rc;
    }
}

ssize_t comem_recv_shares(int fd, void *buf, size_t len, int flags, comem_shm_token *shares, int cap, int *n)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(COMEM_STREAM_SHARES_MAX * sizeof(int))];
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t r = recvmsg(fd, &mh, flags | MSG_CMSG_CLOEXEC);
    if (r < 0)
        return r;
    /* Whatever rode on these bytes is this process's now: kept, or closed when there is no room. */
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int got;
            memcpy(&got, CMSG_DATA(cm) + i * sizeof got, sizeof got);
            if (*n < cap)
                shares[(*n)++] = got;
            else
                close(got);
        }
    }
    return r;
}

int comem_stream_read_shares(comem_stream *s, void *buf, size_t len, comem_shm_token *shares, int cap, int *n,
                             int timeout_ms)
{
    *n = 0;
    if (len > (size_t)INT32_MAX)
        len = INT32_MAX;
    for (;;) {
        ssize_t r = comem_recv_shares(s->fd, buf, len, 0, shares, cap, n);
        if (r < 0 && errno == EAGAIN) {
            int rc = wait_for(s->fd, POLLIN, timeout_ms);
            if (rc != COMEM_OK)
                return rc;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r > 0)
            return (int)r;
        if (r == 0)
            return COMEM_ECLOSED;
        return errno == ECONNRESET ? COMEM_ECLOSED : COMEM_EIO;
    }
}

void comem_stream_close(comem_stream *s)
{
    if (!s)
        return;
    close(s->fd);
    free(s);
}

intptr_t comem_stream_handle(const comem_stream *s) { return s->fd; }

intptr_t comem_listener_handle(const comem_listener *l) { return l->fd; }
