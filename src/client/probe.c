/*
 * client/probe.c - comem_probe: does a coordinator answer at a socket, and if not, why.
 *
 * One attempt, as a tool: look at the path, connect, say HELLO, wait for the
 * answer until a deadline. Every way it can fail has its own status and its
 * own line for a person: nothing at the path, not a socket, a socket nobody
 * listens on, another user's listener (left before a byte is sent: its uid
 * named), refused (another user's, a bad token), full, not accepting, or
 * accepted and silent (then the view next to the socket names the
 * coordinator's pid, and the system says whether that process is stopped or gone),
 * or a coordinator of another comem that speaks another protocol version
 * (COMEM_EVERSION: the version its answer's header names). comem_probe_peer
 * also says who listens (the pid the system names) and that version.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/rundir.h"
#include "base/token.h"
#include "client/conn.h"
#include "os/proc.h"
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
    comem_proc_info info;
    int rc = comem_proc_look(pid, &info);
    if (rc == COMEM_ENOENT || (rc == COMEM_OK && info.ended))
        snprintf(buf, len, "; its view names pid %d, which is gone", (int)pid);
    else if (rc == COMEM_OK && info.stopped)
        snprintf(buf, len, "; its process (pid %d) is stopped: continue it (kill -CONT %d) or restart it", (int)pid,
                 (int)pid);
    else
        snprintf(buf, len, "; its process (pid %d) is running but does not answer: overloaded or stuck", (int)pid);
}

/*
 * Waits for one whole frame into buf: 1, 0 at EOF, -1 at the deadline or on an error, 2 when its
 * header carries comem's magic and another protocol version (*other: that version). Every version
 * answers a frame it cannot take with a REPLY in its own header before it closes, so the first 6
 * bytes of an answer say what a coordinator of another comem speaks.
 */
static int read_frame(client_sock *s, uint8_t *buf, size_t cap, int64_t deadline, comem_wire_header *h,
                      uint16_t *other)
{
    size_t got = 0, want = COMEM_WIRE_HEADER_SIZE;
    for (;;) {
        if (want == COMEM_WIRE_HEADER_SIZE && comem_wire_header_version(buf, got, other) == COMEM_OK &&
            *other != COMEM_WIRE_VERSION)
            return 2;
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
        size_t n = 0;
        comem_shm_token shares[CLIENT_BESIDE_MAX];
        int n_shares = 0;
        int rc = comem_port_read_wait(NULL, s, buf + got, want - got, &n, shares, CLIENT_BESIDE_MAX, &n_shares, left);
        for (int i = 0; i < n_shares; i++)
            comem_shm_token_discard(shares[i]); /* a tool maps nothing */
        if (rc == COMEM_ECLOSED)
            return 0;
        if (rc < 0)
            return -1;
        if (rc == 1)
            got += n;
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

/* comem_probe_peer, with *pid and *version always written (to -1 and 0 until known). */
static int probe(const char *socket_path, int timeout_ms, int64_t *pid, int *version, char *why, size_t whylen)
{
    char path[COMEM_CLIENT_PATH_MAX], token[COMEM_TOKEN_MAX + 1], err[512];
    *pid = -1;
    *version = 0;
    if (why && whylen)
        why[0] = '\0';
    if (timeout_ms < 0)
        timeout_ms = COMEM_CLIENT_DEFAULT_TIMEOUT_MS;
    int rc = comem_socket_resolve_why(socket_path, path, sizeof path, err, sizeof err);
    if (rc != COMEM_OK)
        return say(why, whylen, rc, "%s", err);
    if (comem_token_from_env(token, sizeof token, err, sizeof err) != COMEM_OK)
        return say(why, whylen, COMEM_EINVAL, "%s", err);
    if ((rc = comem_port_look(path, err, sizeof err)) != COMEM_OK)
        return say(why, whylen, rc, "%s", err);
    client_sock *s = NULL;
    err[0] = '\0';
    rc = comem_port_connect(path, NULL, &s, err, sizeof err);
    char state[160];
    switch (rc) {
    case COMEM_OK:
        break;
    case COMEM_ENOENT:
        return say(why, whylen, COMEM_ENOENT, "nothing listens at %s: no coordinator was started there", path);
    case COMEM_ECLOSED:
        return say(why, whylen, COMEM_ECLOSED,
                   "%s is a socket nobody listens on: the coordinator that made it is gone", path);
    case COMEM_EBUSY:
        coordinator_state(path, state, sizeof state);
        return say(why, whylen, COMEM_EBUSY,
                   "the coordinator at %s does not accept connections (its queue is full)%s", path, state);
    case COMEM_EPERM: /* another user's listener (err says whose), or a socket this user may not open */
        if (err[0])
            return say(why, whylen, COMEM_EPERM, "%s", err);
        return say(why, whylen, COMEM_EPERM, "permission denied on %s (another user's socket?)", path);
    default:
        return say(why, whylen, rc, "cannot connect to %s: %s", path, comem_status_str(rc));
    }
    *pid = comem_port_peer_pid(s);
    comem_msg m;
    memset(&m, 0, sizeof m);
    m.type = COMEM_MSG_HELLO;
    m.request_id = 1;
    m.u.hello.proto_version = COMEM_WIRE_VERSION;
    m.u.hello.role = COMEM_ROLE_TOOL;
    m.u.hello.pid = (uint32_t)comem_client_this_process();
    m.u.hello.reserve_base = -1;
    snprintf(m.u.hello.name, sizeof m.u.hello.name, "comem-probe");
    snprintf(m.u.hello.token, sizeof m.u.hello.token, "%s", token);
    static _Thread_local uint8_t buf[COMEM_WIRE_MAX_FRAME];
    int n = comem_wire_encode(&m, buf, sizeof buf);
    int64_t deadline = comem_now_ns() + (int64_t)timeout_ms * 1000000;
    comem_wire_header h;
    /* Read even when the send failed: a coordinator that refused at accept wrote why and closed. */
    int sent = n > 0 ? comem_port_send(s, buf, (size_t)n, timeout_ms) : n;
    if (sent != COMEM_OK)
        comem_debug("probe: HELLO not sent whole (%s); reading what was said", comem_status_str(sent));
    uint16_t other = 0;
    int got = n > 0 ? read_frame(s, buf, sizeof buf, deadline, &h, &other) : 0;
    if (got == 1)
        *version = h.version; /* this library's: a header of another version is refused */
    if (got == 2) {
        *version = other;
        rc = say(why, whylen, COMEM_EVERSION,
                 "the coordinator at %s speaks protocol version %u, this comem %u "
                 "(another comem install's coordinator)",
                 path, (unsigned)other, (unsigned)COMEM_WIRE_VERSION);
    } else if (got < 0) {
        coordinator_state(path, state, sizeof state);
        rc = say(why, whylen, COMEM_ETIMEDOUT, "the coordinator at %s accepted the connection but did not answer within %d ms%s",
                 path, timeout_ms, state[0] ? state : ": it is frozen or overloaded");
    } else if (got == 0) {
        rc = say(why, whylen, COMEM_ECLOSED, "the coordinator at %s closed the connection without a word", path);
    } else if (comem_wire_decode(&h, buf + COMEM_WIRE_HEADER_SIZE, &m) != COMEM_OK) {
        rc = say(why, whylen, COMEM_EPROTO, "%s answered with a malformed frame (not a comem coordinator?)", path);
    } else if (m.type == COMEM_MSG_HELLO_REPLY) {
        rc = say(why, whylen, COMEM_OK, "the coordinator at %s answers (pid %u)", path, (unsigned)m.u.hello_reply.coord_pid);
    } else if (m.type == COMEM_MSG_REPLY && m.u.reply.status == COMEM_EPROTO &&
               strstr(m.u.reply.message, "protocol version")) {
        /* Its frames' header is this one's, its HELLO another's (coord/session.c's "protocol version
           not supported"): it names no version of its own. */
        *version = 0;
        rc = say(why, whylen, COMEM_EVERSION,
                 "the coordinator at %s refused this comem's protocol version %u (%s): "
                 "another comem install's coordinator",
                 path, (unsigned)COMEM_WIRE_VERSION, m.u.reply.message);
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
    comem_port_close(s);
    return rc;
}

int comem_probe(const char *socket_path, int timeout_ms, char *why, size_t whylen)
{
    int64_t pid;
    int version;
    return probe(socket_path, timeout_ms, &pid, &version, why, whylen);
}

int comem_probe_peer(const char *socket_path, int timeout_ms, int64_t *pid, int *version, char *why, size_t whylen)
{
    int64_t p;
    int v;
    int rc = probe(socket_path, timeout_ms, &p, &v, why, whylen);
    if (pid)
        *pid = p;
    if (version)
        *version = v;
    return rc;
}
