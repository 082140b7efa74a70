/*
 * client/probe.c - comem_probe: does a coordinator answer at a socket, and if not, why.
 *
 * One attempt, as a tool: look at the path, connect, say HELLO, wait for the
 * answer until a deadline. Every way it can fail has its own status and its
 * own line for a person: nothing at the path, not a socket, a socket nobody
 * listens on, refused (another user's, a bad token), full, not accepting, or
 * accepted and silent (then the view next to the socket names the
 * coordinator's pid, and /proc says whether that process is stopped).
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/rundir.h"
#include "base/token.h"
#include "client/conn.h"
#include "shm/view.h"

/* What the process behind the socket's view is doing, as a clause ("its process (pid 12) is stopped"). */
static void coordinator_state(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    comem_view *v = NULL;
    if (comem_view_open(path, &v) != COMEM_OK)
        return;
    int32_t pid = comem_view_coord_pid(v);
    comem_view_close(v);
    if (pid <= 0)
        return;
    char proc[64], stat[512];
    snprintf(proc, sizeof proc, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(proc, "r");
    size_t n = f ? fread(stat, 1, sizeof stat - 1, f) : 0;
    if (f)
        fclose(f);
    stat[n] = '\0';
    const char *p = strrchr(stat, ')');
    char state = p && p[1] == ' ' ? p[2] : '?';
    if (!n)
        snprintf(buf, len, "; its view names pid %d, which is gone", (int)pid);
    else if (state == 'T' || state == 't')
        snprintf(buf, len, "; its process (pid %d) is stopped: continue it (kill -CONT %d) or restart it", (int)pid,
                 (int)pid);
    else
        snprintf(buf, len, "; its process (pid %d) is running but does not answer: overloaded or stuck", (int)pid);
}

/* Waits for one whole frame into buf; 1, 0 at EOF, -1 at the deadline or on an error. */
static int read_frame(int fd, uint8_t *buf, size_t cap, int64_t deadline, comem_wire_header *h)
{
    size_t got = 0, want = COMEM_WIRE_HEADER_SIZE;
    for (;;) {
        if (got >= want) {
            if (want == COMEM_WIRE_HEADER_SIZE) {
                if (comem_wire_decode_header(buf, got, h) != COMEM_OK || COMEM_WIRE_HEADER_SIZE + h->length > cap)
                    return -1;
                want += h->length;
                if (got >= want)
                    return 1;
                continue;
            }
            return 1;
        }
        int left = comem_ms_until(deadline);
        if (left == 0)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return -1;
        ssize_t n = recv(fd, buf + got, want - got, 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return 0;
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n < 0)
            return -1;
        got += (size_t)n;
    }
}

COMEM_PRINTF(4, 5) static int say(char *why, size_t len, int status, const char *fmt, ...)
{
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return status;
}

int comem_probe(const char *socket_path, int timeout_ms, char *why, size_t whylen)
{
    char path[COMEM_CLIENT_PATH_MAX], token[COMEM_TOKEN_MAX + 1], err[512];
    if (why && whylen)
        why[0] = '\0';
    if (timeout_ms < 0)
        timeout_ms = COMEM_CLIENT_DEFAULT_TIMEOUT_MS;
    int rc = comem_socket_resolve_why(socket_path, path, sizeof path, err, sizeof err);
    if (rc != COMEM_OK)
        return say(why, whylen, rc, "%s", err);
    if (comem_token_from_env(token, sizeof token, err, sizeof err) != COMEM_OK)
        return say(why, whylen, COMEM_EINVAL, "%s", err);
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return say(why, whylen, COMEM_ENOENT, "nothing at %s (no such file): no coordinator was started there",
                       path);
        return say(why, whylen, COMEM_EPERM, "cannot look at %s: %s", path, strerror(errno));
    }
    if (!S_ISSOCK(st.st_mode))
        return say(why, whylen, COMEM_EINVAL, "%s is not a socket%s", path,
                   S_ISDIR(st.st_mode) ? " (a directory)" : S_ISREG(st.st_mode) ? " (a regular file)" : "");
    int fd = comem_conn_connect(path);
    char state[160];
    switch (fd) {
    case COMEM_ECLOSED:
        return say(why, whylen, COMEM_ECLOSED,
                   "%s is a socket nobody listens on: the coordinator that made it is gone", path);
    case COMEM_EBUSY:
        coordinator_state(path, state, sizeof state);
        return say(why, whylen, COMEM_EBUSY,
                   "the coordinator at %s does not accept connections (its queue is full)%s", path, state);
    case COMEM_EPERM:
        return say(why, whylen, COMEM_EPERM, "permission denied on %s (another user's socket?)", path);
    default:
        if (fd < 0)
            return say(why, whylen, fd, "cannot connect to %s: %s", path, comem_status_str(fd));
    }
    comem_msg m;
    memset(&m, 0, sizeof m);
    m.type = COMEM_MSG_HELLO;
    m.request_id = 1;
    m.u.hello.proto_version = COMEM_WIRE_VERSION;
    m.u.hello.role = COMEM_ROLE_TOOL;
    m.u.hello.pid = (uint32_t)getpid();
    m.u.hello.reserve_base = -1;
    snprintf(m.u.hello.name, sizeof m.u.hello.name, "comem-probe");
    snprintf(m.u.hello.token, sizeof m.u.hello.token, "%s", token);
    static _Thread_local uint8_t buf[COMEM_WIRE_MAX_FRAME];
    int n = comem_wire_encode(&m, buf, sizeof buf);
    int64_t deadline = comem_now_ns() + (int64_t)timeout_ms * 1000000;
    comem_wire_header h;
    /* Read even when the send failed: a coordinator that refused at accept wrote why and closed. */
    if (n > 0 && send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
        comem_debug("probe: HELLO not sent whole (%s); reading what was said", strerror(errno));
    int got = n > 0 ? read_frame(fd, buf, sizeof buf, deadline, &h) : 0;
    if (got < 0) {
        coordinator_state(path, state, sizeof state);
        rc = say(why, whylen, COMEM_ETIMEDOUT, "the coordinator at %s accepted the connection but did not answer within %d ms%s",
                 path, timeout_ms, state[0] ? state : ": it is frozen or overloaded");
    } else if (got == 0) {
        rc = say(why, whylen, COMEM_ECLOSED, "the coordinator at %s closed the connection without a word", path);
    } else if (comem_wire_decode(&h, buf + COMEM_WIRE_HEADER_SIZE, &m) != COMEM_OK) {
        rc = say(why, whylen, COMEM_EPROTO, "%s answered with a malformed frame (not a comem coordinator?)", path);
    } else if (m.type == COMEM_MSG_HELLO_REPLY) {
        rc = say(why, whylen, COMEM_OK, "the coordinator at %s answers (pid %u)", path, (unsigned)m.u.hello_reply.coord_pid);
    } else if (m.type == COMEM_MSG_REPLY && m.u.reply.status == COMEM_EPERM && strstr(m.u.reply.message, "token")) {
        rc = say(why, whylen, COMEM_EPERM,
                 "the coordinator at %s refused this process: bad token (COMEM_TOKEN %s the coordinator's)", path,
                 token[0] ? "is not" : "is unset; it must be");
    } else if (m.type == COMEM_MSG_REPLY && m.u.reply.status != COMEM_OK) {
        const char *msg = m.u.reply.message;
        if (!strncmp(msg, "refused: ", 9))
            msg += 9;
        if (m.u.reply.status == COMEM_EPERM || m.u.reply.status == COMEM_EBUSY)
            rc = say(why, whylen, m.u.reply.status, "the coordinator at %s refused this process: %s", path, msg);
        else
            rc = say(why, whylen, m.u.reply.status, "the coordinator at %s refused this process: %s (%s)", path, msg,
                     comem_status_str(m.u.reply.status));
    } else {
        rc = say(why, whylen, COMEM_EPROTO, "%s answered HELLO with an unexpected frame", path);
    }
    close(fd);
    return rc;
}
