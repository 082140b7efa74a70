/*
 * os/loop_win.c - the event loop on Windows (os/loop.h): an I/O completion port.
 *
 * Named pipes have no readiness to wait for, only I/O that completes. So each stream in the loop
 * keeps one read of its own pending, into a buffer of its registration; when it completes, the
 * stream is reported readable and comem_loop_read hands out that buffer, arming the next read
 * once it is empty (and posting a packet of its own while bytes are left, so that readiness is
 * level-triggered as epoll's is). A listener's connect and a process's end are events: a wait
 * registered on each (RegisterWaitForSingleObject) posts a packet to the port when it fires.
 *
 * Every packet points into a registration the loop owns (its OVERLAPPED, or the one kept for
 * posted packets), never into the stream or listener itself: an object removed and closed while a
 * packet for it is still queued leaves its registration behind, marked removed, and the loop frees
 * it when the last packet due for it is taken (or when the loop is closed).
 */
#include "os/loop.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "comem/common.h"
#include "os/stream_win.h"

#define LOOP_READ_BUFFER (16 * 1024)
#define LOOP_WRITE_BUFFER (64 * 1024) /* the most one send takes: copied, and written while the caller goes on */
#define KEY_IO 0     /* a read that completed (the key the pipe was associated with) */
#define KEY_POSTED 1 /* a packet this file posted for a registration */
#define KEY_WAKE 2   /* comem_loop_wake */

/* A stream's read or write in flight: its packet says which, and whose. */
typedef struct loop_io {
    OVERLAPPED ov;
    loop_reg *reg;
    bool write;
} loop_io;

struct loop_reg {
    comem_loop *loop;
    unsigned what;        /* COMEM_LOOP_READ, _ACCEPT or _EXITED */
    void *tag;
    void *owner;          /* the stream, listener or process watch; NULL once removed */
    HANDLE handle;        /* the pipe (streams), the connect's event (listeners), the process */
    loop_io rd;           /* streams: the pending read (its event lets removal wait for its end) */
    loop_io wr;           /* streams: the pending write of comem_loop_send (its event lets close wait for it) */
    OVERLAPPED posted;    /* the identity of packets posted for this registration */
    bool reading;         /* the read is pending: a packet will come */
    int posted_due;       /* posted packets not yet taken */
    HANDLE wait;          /* listeners, processes: the registered wait */
    atomic_bool fired;    /* its callback ran (and posted) */
    uint8_t *buf;         /* streams: what the read brought, [pos, len) not yet handed out */
    DWORD len, pos;
    int status;           /* COMEM_OK, or how the stream ended (COMEM_ECLOSED, COMEM_EIO) */
    uint8_t *wbuf;        /* streams: the bytes of the write in flight */
    bool writing;         /* that write is pending: a packet will come */
    bool want_write;      /* report COMEM_LOOP_WRITE while no write is pending */
    int wstatus;          /* COMEM_OK, or how writing ended */
    struct loop_reg *next;
};

struct comem_loop {
    HANDLE port;
    loop_reg *regs; /* every registration, removed ones whose packets are due included */
};

int comem_loop_open(comem_loop **out)
{
    comem_loop *l = calloc(1, sizeof *l);
    if (!l)
        return COMEM_ENOMEM;
    l->port = CreateIoCompletionPort(INVALID_HANDLE_VALUE, NULL, 0, 1);
    if (!l->port) {
        free(l);
        return COMEM_EIO;
    }
    *out = l;
    return COMEM_OK;
}

static void reg_free(loop_reg *r)
{
    if (r->rd.ov.hEvent)
        CloseHandle(r->rd.ov.hEvent);
    if (r->wr.ov.hEvent)
        CloseHandle(r->wr.ov.hEvent);
    free(r->buf);
    free(r->wbuf);
    free(r);
}

/* Frees r when it is removed and nothing is due for it any more. */
static void reg_settle(loop_reg *r)
{
    if (r->owner || r->reading || r->writing || r->posted_due > 0)
        return;
    for (loop_reg **p = &r->loop->regs; *p; p = &(*p)->next) {
        if (*p == r) {
            *p = r->next;
            break;
        }
    }
    reg_free(r);
}

static loop_reg *reg_new(comem_loop *l, unsigned what, void *tag, void *owner, HANDLE handle)
{
    loop_reg *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    *r = (loop_reg){.loop = l, .what = what, .tag = tag, .owner = owner, .handle = handle, .status = COMEM_OK};
    r->rd.reg = r->wr.reg = r;
    r->wr.write = true;
    r->next = l->regs;
    l->regs = r;
    return r;
}

/* Posts a packet for r: the next wait reports it. */
static void post(loop_reg *r)
{
    if (PostQueuedCompletionStatus(r->loop->port, 0, KEY_POSTED, &r->posted))
        r->posted_due++;
}

/* ---- streams ---- */

static int pipe_status(DWORD err)
{
    return err == ERROR_BROKEN_PIPE || err == ERROR_PIPE_NOT_CONNECTED || err == ERROR_NO_DATA ? COMEM_ECLOSED
                                                                                               : COMEM_EIO;
}

/* Starts the stream's next read into its buffer; a read that cannot start ends the stream (reported). */
static void arm(loop_reg *r)
{
    if (r->reading || r->status != COMEM_OK)
        return;
    HANDLE ev = r->rd.ov.hEvent;
    memset(&r->rd.ov, 0, sizeof r->rd.ov);
    r->rd.ov.hEvent = ev; /* without the low bit: its completion is queued to the port, and signals ev */
    ResetEvent(ev);
    r->len = r->pos = 0;
    if (ReadFile(r->handle, r->buf, LOOP_READ_BUFFER, NULL, &r->rd.ov) || GetLastError() == ERROR_IO_PENDING) {
        r->reading = true; /* done or not, its packet comes through the port */
        return;
    }
    r->status = pipe_status(GetLastError());
    post(r); /* readable: the read says how it ended */
}

int comem_loop_add_stream(comem_loop *l, comem_stream *s, void *tag)
{
    if (!tag || s->reg)
        return COMEM_EINVAL;
    loop_reg *r = reg_new(l, COMEM_LOOP_READ, tag, s, s->h);
    if (!r)
        return COMEM_ENOMEM;
    r->buf = malloc(LOOP_READ_BUFFER);
    r->rd.ov.hEvent = CreateEventW(NULL, TRUE, FALSE, NULL);
    r->wr.ov.hEvent = CreateEventW(NULL, TRUE, FALSE, NULL);
    bool made = r->buf && r->rd.ov.hEvent && r->wr.ov.hEvent;
    /* A pipe is associated with one port for good: once with this loop's, it stays (removed and added again). */
    bool joined = made && (s->port == l->port || CreateIoCompletionPort(s->h, l->port, KEY_IO, 0));
    if (!joined) {
        int rc = made ? COMEM_EIO : COMEM_ENOMEM;
        r->owner = NULL;
        reg_settle(r);
        return rc;
    }
    s->port = l->port;
    /* The stream's own reads and writes keep their packets out of the port (the low bit). */
    s->rd.hEvent = (HANDLE)((ULONG_PTR)comem_ov_event(&s->rd) | 1);
    s->wr.hEvent = (HANDLE)((ULONG_PTR)comem_ov_event(&s->wr) | 1);
    s->reg = r;
    if (s->left) { /* bytes an earlier loop read and did not hand out: they come first */
        DWORD n = s->left_len - s->left_pos;
        memcpy(r->buf, s->left + s->left_pos, n); /* at most a loop's buffer: they were in one */
        r->len = n;
        free(s->left);
        s->left = NULL;
        post(r);
    } else {
        arm(r);
    }
    return COMEM_OK;
}

void comem_loop_remove_stream(comem_loop *l, comem_stream *s)
{
    (void)l;
    loop_reg *r = s->reg;
    if (!r)
        return;
    s->reg = NULL;
    r->owner = NULL;
    if (r->reading) { /* cancelled, and over before its buffer may go; its packet is still due */
        DWORD n = 0;
        CancelIoEx(r->handle, &r->rd.ov);
        if (GetOverlappedResult(r->handle, &r->rd.ov, &n, TRUE) && n > 0) { /* it had completed: bytes */
            r->len = n;
            r->pos = 0;
        }
    }
    if (r->pos < r->len) { /* read by the loop, not handed out: the stream keeps them, read first */
        DWORD n = r->len - r->pos;
        uint8_t *keep = malloc(n);
        if (keep) {
            memcpy(keep, r->buf + r->pos, n);
            free(s->left); /* none: a stream leaves a loop with its own bytes read first */
            s->left = keep;
            s->left_len = n;
            s->left_pos = 0;
        }
        r->len = r->pos = 0;
    }
    reg_settle(r);
}

static int reg_read(loop_reg *r, void *buf, size_t cap)
{
    if (r->pos < r->len) {
        DWORD n = r->len - r->pos;
        if (cap < n)
            n = (DWORD)cap;
        memcpy(buf, r->buf + r->pos, n);
        r->pos += n;
        if (r->pos < r->len) {
            if (r->posted_due == 0)
                post(r); /* bytes left: readable again at the next wait */
        } else {
            arm(r);
        }
        return (int)n;
    }
    return r->status != COMEM_OK ? r->status : COMEM_ETIMEDOUT;
}

/* A stream's read completed: what it brought is the buffer's. */
static void read_done(loop_reg *r)
{
    r->reading = false;
    if (!r->owner)
        return;
    DWORD n = 0;
    if (GetOverlappedResult(r->handle, &r->rd.ov, &n, FALSE)) {
        r->len = n;
        r->pos = 0;
        if (n == 0)
            arm(r); /* an empty read: nothing to report yet */
    } else {
        r->status = pipe_status(GetLastError());
    }
}

/* A stream's write completed: the stream takes bytes again, or writing has ended. */
static void write_done(loop_reg *r)
{
    r->writing = false;
    DWORD n = 0;
    if (!GetOverlappedResult(r->handle, &r->wr.ov, &n, FALSE))
        r->wstatus = pipe_status(GetLastError());
}

/* What a stream is ready for now: bytes (or its end) to read; room to write, where wanted. */
static unsigned stream_ready(const loop_reg *r)
{
    unsigned what = r->len > r->pos || r->status != COMEM_OK ? COMEM_LOOP_READ : 0;
    if (r->want_write && !r->writing)
        what |= COMEM_LOOP_WRITE;
    return what;
}

/* ---- listeners and processes: registered waits ---- */

static void CALLBACK fired(void *arg, BOOLEAN timed_out)
{
    loop_reg *r = arg;
    (void)timed_out;
    atomic_store(&r->fired, true);
    PostQueuedCompletionStatus(r->loop->port, 0, KEY_POSTED, &r->posted); /* counted when it was registered */
}

/* Registers the wait on r->handle, once; its packet is counted as due from now. */
static bool watch(loop_reg *r)
{
    atomic_store(&r->fired, false);
    if (!RegisterWaitForSingleObject(&r->wait, r->handle, fired, r, INFINITE, WT_EXECUTEONLYONCE)) {
        r->wait = NULL;
        return false;
    }
    r->posted_due++;
    return true;
}

/* Ends the registered wait; a packet it did not post is no longer due. */
static void unwatch(loop_reg *r)
{
    if (!r->wait)
        return;
    UnregisterWaitEx(r->wait, INVALID_HANDLE_VALUE); /* returns once its callback, if running, is over */
    r->wait = NULL;
    if (!atomic_load(&r->fired))
        r->posted_due--;
}

/* A registration whose readiness is handle signalled, watched from now: COMEM_OK with *out, or a status. */
static int add_watched(comem_loop *l, unsigned what, void *tag, void *owner, HANDLE handle, loop_reg **out)
{
    if (!tag)
        return COMEM_EINVAL;
    loop_reg *r = reg_new(l, what, tag, owner, handle);
    if (!r)
        return COMEM_ENOMEM;
    if (!watch(r)) {
        r->owner = NULL;
        reg_settle(r);
        return COMEM_EIO;
    }
    *out = r;
    return COMEM_OK;
}

int comem_loop_add_listener(comem_loop *l, comem_listener *ls, void *tag)
{
    if (ls->reg)
        return COMEM_EINVAL;
    return add_watched(l, COMEM_LOOP_ACCEPT, tag, ls, comem_ov_event(&ls->ov), &ls->reg);
}

void comem_loop_remove_listener(comem_loop *l, comem_listener *ls)
{
    (void)l;
    loop_reg *r = ls->reg;
    if (!r)
        return;
    ls->reg = NULL;
    r->owner = NULL;
    unwatch(r);
    reg_settle(r);
}

int comem_loop_add_process(comem_loop *l, comem_proc_watch *w, void *tag)
{
    loop_reg *r;
    return add_watched(l, COMEM_LOOP_EXITED, tag, w, (HANDLE)comem_proc_watch_handle(w), &r);
}

void comem_loop_remove_process(comem_loop *l, comem_proc_watch *w)
{
    for (loop_reg *r = l->regs; r; r = r->next) {
        if (r->owner == w && r->what == COMEM_LOOP_EXITED) {
            r->owner = NULL;
            unwatch(r);
            reg_settle(r);
            return;
        }
    }
}

/* ---- waiting ---- */

/* What one packet means: the registration to report and *what it is ready for (NULL: nothing to report). */
static loop_reg *take(comem_loop *l, const OVERLAPPED_ENTRY *e, unsigned *what)
{
    (void)l;
    if (e->lpCompletionKey == KEY_IO) {
        loop_io *io = CONTAINING_RECORD(e->lpOverlapped, loop_io, ov);
        loop_reg *r = io->reg;
        if (io->write)
            write_done(r);
        else
            read_done(r);
        *what = r->owner ? stream_ready(r) : 0;
        loop_reg *report = *what ? r : NULL;
        reg_settle(r);
        return report;
    }
    loop_reg *r = CONTAINING_RECORD(e->lpOverlapped, loop_reg, posted);
    r->posted_due--;
    if (!r->owner) {
        reg_settle(r);
        return NULL;
    }
    if (r->what == COMEM_LOOP_READ) { /* posted while bytes were left, for the end, or for room: still so? */
        *what = stream_ready(r);
        if ((*what & COMEM_LOOP_WRITE) && r->posted_due == 0)
            post(r); /* level-triggered as EPOLLOUT: room stays reported while it is wanted */
        return *what ? r : NULL;
    }
    /* Level-triggered as epoll is: what has fired stays ready until it is taken (accept) or removed
       (a process that exited), so the wait is registered again, and fires again at once while its
       object is signalled. A packet queued before the object was taken (a client accepted since)
       reports nothing: the object is asked again. */
    if (r->wait && atomic_load(&r->fired)) {
        UnregisterWaitEx(r->wait, NULL); /* it fired once and is over; this frees it without waiting */
        r->wait = NULL;
        watch(r);
    }
    *what = r->what;
    return WaitForSingleObject(r->handle, 0) == WAIT_OBJECT_0 ? r : NULL;
}

int comem_loop_wait(comem_loop *l, comem_loop_event *ev, int max, int timeout_ms)
{
    return comem_loop_wait_us(l, ev, max, timeout_ms < 0 ? -1 : (int64_t)timeout_ms * 1000);
}

int comem_loop_wait_us(comem_loop *l, comem_loop_event *ev, int max, int64_t timeout_us)
{
    if (max <= 0)
        return COMEM_EINVAL;
    OVERLAPPED_ENTRY got[64];
    ULONG n = 0;
    /* The port waits in milliseconds: a shorter wait is rounded up, never down to a look. */
    DWORD wait = timeout_us < 0                          ? INFINITE
                 : timeout_us >= (int64_t)INFINITE * 1000 ? INFINITE - 1
                                                          : (DWORD)((timeout_us + 999) / 1000);
    if (!GetQueuedCompletionStatusEx(l->port, got, (ULONG)(max < 64 ? max : 64), &n, wait, FALSE))
        return GetLastError() == WAIT_TIMEOUT ? 0 : COMEM_EIO;
    int out = 0;
    for (ULONG i = 0; i < n; i++) {
        comem_loop_event e;
        if (got[i].lpCompletionKey == KEY_WAKE) {
            e = (comem_loop_event){.tag = NULL, .what = COMEM_LOOP_WOKEN};
        } else {
            unsigned what = 0;
            loop_reg *r = take(l, &got[i], &what);
            if (!r)
                continue;
            e = (comem_loop_event){.tag = r->tag, .what = what};
        }
        bool dup = false; /* one event per object and wait, as epoll gives: what it is ready for, together */
        for (int k = 0; k < out && !dup; k++)
            if (ev[k].tag == e.tag && (ev[k].tag || ev[k].what == e.what)) {
                ev[k].what |= e.what;
                dup = true;
            }
        if (!dup)
            ev[out++] = e;
    }
    return out;
}

int comem_loop_read(comem_loop *l, comem_stream *s, void *buf, size_t cap)
{
    (void)l;
    return s->reg ? reg_read(s->reg, buf, cap) : comem_stream_read(s, buf, cap, 0);
}

int comem_loop_send(comem_loop *l, comem_stream *s, const void *buf, size_t len, const comem_shm_token *shares,
                    int n)
{
    (void)l;
    (void)shares; /* handles in the peer already: the bytes name them (os/shm.h) */
    loop_reg *r = s->reg;
    if (!r || len == 0 || n < 0 || n > COMEM_STREAM_SHARES_MAX)
        return COMEM_EINVAL;
    if (r->wstatus != COMEM_OK)
        return r->wstatus;
    if (r->writing)
        return COMEM_ETIMEDOUT; /* one write in flight: the stream takes more once it is done */
    if (!r->wbuf && !(r->wbuf = malloc(LOOP_WRITE_BUFFER)))
        return COMEM_ENOMEM;
    DWORD take_n = len > LOOP_WRITE_BUFFER ? LOOP_WRITE_BUFFER : (DWORD)len;
    memcpy(r->wbuf, buf, take_n);
    HANDLE ev = r->wr.ov.hEvent;
    memset(&r->wr.ov, 0, sizeof r->wr.ov);
    r->wr.ov.hEvent = ev; /* without the low bit: its completion is queued to the port */
    ResetEvent(ev);
    if (WriteFile(r->handle, r->wbuf, take_n, NULL, &r->wr.ov) || GetLastError() == ERROR_IO_PENDING) {
        r->writing = true; /* done or not, its packet comes through the port */
        return (int)take_n;
    }
    r->wstatus = pipe_status(GetLastError());
    return r->wstatus;
}

int comem_loop_want_write(comem_loop *l, comem_stream *s, bool on)
{
    (void)l;
    loop_reg *r = s->reg;
    if (!r)
        return COMEM_EINVAL;
    bool was = r->want_write;
    r->want_write = on;
    if (on && !was && !r->writing && r->posted_due == 0)
        post(r); /* room now: the next wait says so */
    return COMEM_OK;
}

void comem_loop_wake(comem_loop *l) { PostQueuedCompletionStatus(l->port, 0, KEY_WAKE, NULL); }

void comem_loop_close(comem_loop *l)
{
    if (!l)
        return;
    for (loop_reg *r = l->regs; r; r = r->next) {
        if (r->what == COMEM_LOOP_READ && r->owner)
            ((comem_stream *)r->owner)->reg = NULL;
        else if (r->what == COMEM_LOOP_ACCEPT && r->owner)
            ((comem_listener *)r->owner)->reg = NULL;
        r->owner = NULL;
        unwatch(r);
        if (r->reading) {
            DWORD n;
            CancelIoEx(r->handle, &r->rd.ov);
            GetOverlappedResult(r->handle, &r->rd.ov, &n, TRUE);
        }
        if (r->writing) { /* its buffer goes with the registration: the write must be over first */
            DWORD n;
            CancelIoEx(r->handle, &r->wr.ov);
            GetOverlappedResult(r->handle, &r->wr.ov, &n, TRUE);
        }
    }
    CloseHandle(l->port); /* no packet is taken after this: every registration goes */
    while (l->regs) {
        loop_reg *r = l->regs;
        l->regs = r->next;
        reg_free(r);
    }
    free(l);
}
