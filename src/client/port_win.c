/*
 * client/port_win.c - client/port.h on Windows: a named pipe (os/stream.h) in the service
 * thread's event loop (os/loop.h) from connect to close, and a loop with nothing in it but its
 * wake-up for every other wait set.
 *
 * A pipe is associated with one completion port for good, and the loop keeps one read of its own
 * pending on it, so the socket never moves between threads: the service thread reads every frame.
 * A frame half written cannot be taken back, and a pipe's client end has no shutdown: the stream
 * is marked broken instead, and the service thread, woken, reads its end from the mark.
 */
#include "client/port.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <windows.h>

#include "base/clock.h"
#include "comem/common.h"
#include "os/loop.h"
#include "os/stream.h"

struct client_sock {
    comem_stream *st;
    client_waits *home; /* the set whose loop it is in (NULL: none, a tool's exchange) */
    atomic_bool broken; /* comem_port_shut: the stream ended here */
};

struct client_waits {
    comem_loop *loop;
    client_sock *sock; /* the connection in its loop (NULL: none); the waiting thread's */
    bool woken;        /* a wake-up that came with bytes, reported at the next wait */
};

bool comem_port_socket_moves(void) { return false; }

int comem_port_look(const char *name, char *why, size_t whylen)
{
    (void)name, (void)why, (void)whylen; /* a pipe's name is looked for by connecting */
    return COMEM_OK;
}

int comem_port_connect(const char *name, client_waits *service, client_sock **out, char *why, size_t whylen)
{
    client_sock *s = calloc(1, sizeof *s);
    if (!s)
        return COMEM_ENOMEM;
    atomic_init(&s->broken, false);
    /* Every instance taken is a listener that does not accept now: as a full queue on Linux, at once. */
    int rc = comem_connect_why(name, 1, &s->st, why, whylen);
    if (rc == COMEM_ETIMEDOUT)
        rc = COMEM_EBUSY;
    if (rc == COMEM_OK && service && (rc = comem_loop_add_stream(service->loop, s->st, s)) == COMEM_OK) {
        s->home = service;
        service->sock = s;
    }
    if (rc != COMEM_OK) {
        comem_stream_close(s->st);
        free(s);
        return rc;
    }
    *out = s;
    return COMEM_OK;
}

int64_t comem_port_peer_pid(client_sock *s)
{
    ULONG pid = 0;
    if (!GetNamedPipeServerProcessId((HANDLE)comem_stream_handle(s->st), &pid))
        return 0;
    return (int64_t)pid;
}

void comem_port_close(client_sock *s)
{
    if (!s)
        return;
    if (s->home) {
        comem_loop_remove_stream(s->home->loop, s->st);
        s->home->sock = NULL;
    }
    comem_stream_close(s->st);
    free(s);
}

bool comem_port_adopt(client_sock *s, int slice_ms)
{
    (void)s, (void)slice_ms; /* nobody but the service thread reads it */
    return false;
}

int comem_port_send(client_sock *s, const void *buf, size_t len, int timeout_ms)
{
    if (atomic_load(&s->broken))
        return COMEM_ECLOSED;
    return comem_stream_write(s->st, buf, len, timeout_ms);
}

void comem_port_shut(client_sock *s)
{
    atomic_store(&s->broken, true);
    if (s->home)
        comem_waits_wake(s->home);
}

/* What a read's result r means: 1 bytes came (*got), 0 none yet, or the stream's end. */
static int took(int r, size_t *got)
{
    if (r > 0) {
        *got = (size_t)r;
        return 1;
    }
    return r == COMEM_ETIMEDOUT ? 0 : r == 0 ? COMEM_ECLOSED : r;
}

int comem_port_fill(client_waits *service, client_sock *s, void *buf, size_t cap, size_t *got)
{
    if (atomic_load(&s->broken))
        return COMEM_ECLOSED;
    if (!service || s->home != service)
        return took(comem_stream_read(s->st, buf, cap, 0), got);
    return took(comem_loop_read(service->loop, s->st, buf, cap), got);
}

int comem_port_read_wait(client_waits *service, client_sock *s, void *buf, size_t cap, size_t *got,
                         comem_shm_token *shares, int share_cap, int *n, int timeout_ms)
{
    (void)shares, (void)share_cap; /* shares are handles in this process already: the frame names them */
    (void)n;
    if (!service) /* a tool's exchange: the stream is in no loop */
        return s ? took(comem_stream_read(s->st, buf, cap, timeout_ms), got) : 0;
    if (s) {
        int rc = comem_port_fill(service, s, buf, cap, got);
        if (rc != 0)
            return rc;
    }
    int w = comem_waits_wait(service, timeout_ms);
    if (w != 1 || !s)
        return w == 1 ? 0 : w;
    return comem_port_fill(service, s, buf, cap, got);
}

int comem_port_fill_wait(client_sock *s, void *buf, size_t cap, size_t *got, int timeout_ms)
{
    (void)s, (void)buf, (void)cap, (void)got, (void)timeout_ms;
    return COMEM_EINVAL; /* no leader: the socket never leaves the service thread (comem_port_socket_moves) */
}

struct timespec comem_port_cond_deadline(int64_t deadline_ns)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t left = deadline_ns - comem_now_ns();
    int64_t at = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec + (left > 0 ? left : 0);
    struct timespec ts = {.tv_sec = (time_t)(at / 1000000000), .tv_nsec = (long)(at % 1000000000)};
    return ts;
}

/* ---- the wait sets ---- */

int comem_waits_open(client_waits **out)
{
    client_waits *w = calloc(1, sizeof *w);
    if (!w)
        return COMEM_ENOMEM;
    int rc = comem_loop_open(&w->loop);
    if (rc != COMEM_OK) {
        free(w);
        return rc;
    }
    *out = w;
    return COMEM_OK;
}

void comem_waits_close(client_waits *w)
{
    if (!w)
        return;
    comem_loop_close(w->loop);
    free(w);
}

void comem_waits_close_forked(client_waits *w) { (void)w; /* no fork on Windows */ }

void comem_waits_wake(client_waits *w) { comem_loop_wake(w->loop); }

int comem_waits_wait(client_waits *w, int timeout_ms)
{
    if (w->woken) {
        w->woken = false;
        return 2;
    }
    if (w->sock && atomic_load(&w->sock->broken))
        return 1; /* its reader meets the end */
    comem_loop_event ev[4];
    int n = comem_loop_wait(w->loop, ev, 4, timeout_ms);
    if (n < 0)
        return n;
    bool readable = false, woken = false;
    for (int i = 0; i < n; i++) {
        if (ev[i].what & COMEM_LOOP_WOKEN)
            woken = true;
        else if (ev[i].what & COMEM_LOOP_READ)
            readable = true;
    }
    /* Bytes first: the loop reports a completed read once, and the wake-up is kept for the next wait. */
    if (readable) {
        w->woken = woken;
        return 1;
    }
    return woken ? 2 : 0;
}

void comem_waits_hold(client_waits *w, client_sock *s, bool on)
{
    (void)w, (void)s, (void)on; /* the socket stays in the loop it was connected in */
}
