/* os/loop_posix.c - the event loop on Linux (os/loop.h): one epoll set, level-triggered, and an eventfd. */
#include "os/loop.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comem/common.h"
#include "os/stream_posix.h"

/* What an epoll entry carries: the caller's tag and what readiness of its descriptor means. */
typedef struct entry {
    void *tag;
    unsigned what;
    int fd;
    bool want_write; /* EPOLLOUT is asked too */
    struct entry *next;
} entry;

struct comem_loop {
    int ep, wake;
    entry woken;    /* the eventfd's entry */
    entry *entries; /* every object in the set, to find its entry again at removal */
};

int comem_loop_open(comem_loop **out)
{
    comem_loop *l = calloc(1, sizeof *l);
    if (!l)
        return COMEM_ENOMEM;
    l->ep = epoll_create1(EPOLL_CLOEXEC);
    l->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    l->woken = (entry){.tag = NULL, .what = COMEM_LOOP_WOKEN, .fd = l->wake};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &l->woken};
    if (l->ep < 0 || l->wake < 0 || epoll_ctl(l->ep, EPOLL_CTL_ADD, l->wake, &ev) != 0) {
        comem_loop_close(l);
        return COMEM_EIO;
    }
    *out = l;
    return COMEM_OK;
}

void comem_loop_close(comem_loop *l)
{
    if (!l)
        return;
    while (l->entries) {
        entry *e = l->entries;
        l->entries = e->next;
        free(e);
    }
    if (l->ep >= 0)
        close(l->ep);
    if (l->wake >= 0)
        close(l->wake);
    free(l);
}

static int add(comem_loop *l, int fd, void *tag, unsigned what)
{
    if (!tag || fd < 0)
        return COMEM_EINVAL;
    entry *e = malloc(sizeof *e);
    if (!e)
        return COMEM_ENOMEM;
    *e = (entry){.tag = tag, .what = what, .fd = fd, .next = l->entries};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = e};
    if (epoll_ctl(l->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        free(e);
        return errno == ENOMEM ? COMEM_ENOMEM : COMEM_EIO;
    }
    l->entries = e;
    return COMEM_OK;
}

static void drop(comem_loop *l, int fd)
{
    epoll_ctl(l->ep, EPOLL_CTL_DEL, fd, NULL);
    for (entry **p = &l->entries; *p; p = &(*p)->next) {
        if ((*p)->fd == fd) {
            entry *e = *p;
            *p = e->next;
            free(e);
            return;
        }
    }
}

int comem_loop_add_stream(comem_loop *l, comem_stream *s, void *tag)
{
    return add(l, (int)comem_stream_handle(s), tag, COMEM_LOOP_READ);
}

int comem_loop_add_listener(comem_loop *l, comem_listener *ls, void *tag)
{
    return add(l, (int)comem_listener_handle(ls), tag, COMEM_LOOP_ACCEPT);
}

int comem_loop_add_process(comem_loop *l, comem_proc_watch *w, void *tag)
{
    return add(l, (int)comem_proc_watch_handle(w), tag, COMEM_LOOP_EXITED);
}

void comem_loop_remove_stream(comem_loop *l, comem_stream *s) { drop(l, (int)comem_stream_handle(s)); }

void comem_loop_remove_listener(comem_loop *l, comem_listener *ls) { drop(l, (int)comem_listener_handle(ls)); }

void comem_loop_remove_process(comem_loop *l, comem_proc_watch *w) { drop(l, (int)comem_proc_watch_handle(w)); }

/* epoll_wait with a timeout in microseconds: epoll_pwait2 where the kernel has it, else rounded up to a millisecond. */
static int epoll_wait_us(int ep, struct epoll_event *got, int max, int64_t timeout_us)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
    static _Atomic bool no_pwait2; /* one answer for the process */
    if (timeout_us > 0 && timeout_us % 1000 != 0 && !atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
        struct timespec ts = {(time_t)(timeout_us / 1000000), (long)(timeout_us % 1000000) * 1000};
        int n = epoll_pwait2(ep, got, max, &ts, NULL);
        if (n >= 0 || errno != ENOSYS)
            return n;
        atomic_store_explicit(&no_pwait2, true, memory_order_relaxed);
    }
#endif
    int ms = timeout_us < 0 ? -1 : timeout_us > (int64_t)INT32_MAX * 1000 ? INT32_MAX : (int)((timeout_us + 999) / 1000);
    return epoll_wait(ep, got, max, ms);
}

int comem_loop_wait_us(comem_loop *l, comem_loop_event *ev, int max, int64_t timeout_us)
{
    struct epoll_event got[64];
    if (max <= 0)
        return COMEM_EINVAL;
    int n = epoll_wait_us(l->ep, got, max < 64 ? max : 64, timeout_us);
    if (n < 0)
        return errno == EINTR ? 0 : COMEM_EIO;
    int out = 0;
    for (int i = 0; i < n; i++) {
        const entry *e = got[i].data.ptr;
        if (e == &l->woken) {
            uint64_t v;
            ssize_t r = read(l->wake, &v, sizeof v);
            (void)r;
        }
        uint32_t evs = got[i].events;
        /* In, or the peer gone (the read then says so); out only where it is wanted. */
        unsigned what = evs & (EPOLLIN | EPOLLHUP | EPOLLERR) ? e->what : 0;
        if ((evs & EPOLLOUT) && e->want_write)
            what |= COMEM_LOOP_WRITE;
        if (what)
            ev[out++] = (comem_loop_event){.tag = e->tag, .what = what};
    }
    return out;
}

int comem_loop_wait(comem_loop *l, comem_loop_event *ev, int max, int timeout_ms)
{
    return comem_loop_wait_us(l, ev, max, timeout_ms < 0 ? -1 : (int64_t)timeout_ms * 1000);
}

static entry *entry_of(comem_loop *l, int fd)
{
    for (entry *e = l->entries; e; e = e->next)
        if (e->fd == fd)
            return e;
    return NULL;
}

int comem_loop_want_write(comem_loop *l, comem_stream *s, bool on)
{
    entry *e = entry_of(l, (int)comem_stream_handle(s));
    if (!e || e->what != COMEM_LOOP_READ)
        return COMEM_EINVAL;
    if (e->want_write == on)
        return COMEM_OK; /* a syscall saved */
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0u), .data.ptr = e};
    if (epoll_ctl(l->ep, EPOLL_CTL_MOD, e->fd, &ev) != 0)
        return COMEM_EIO;
    e->want_write = on;
    return COMEM_OK;
}

int comem_loop_send(comem_loop *l, comem_stream *s, const void *buf, size_t len, const comem_shm_token *shares,
                    int n)
{
    (void)l; /* the socket is non-blocking: it takes what it has room for */
    return comem_stream_send_now(s, buf, len, shares, n);
}

int comem_loop_read(comem_loop *l, comem_stream *s, void *buf, size_t cap)
{
    (void)l; /* the socket itself is what epoll watches: read it, never waiting (one syscall) */
    if (cap > (size_t)INT32_MAX)
        cap = INT32_MAX;
    for (;;) {
        ssize_t r = recv((int)comem_stream_handle(s), buf, cap, MSG_DONTWAIT);
        if (r > 0)
            return (int)r;
        if (r == 0 || errno == ECONNRESET)
            return COMEM_ECLOSED;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return COMEM_ETIMEDOUT;
        if (errno != EINTR)
            return COMEM_EIO;
    }
}

void comem_loop_wake(comem_loop *l)
{
    uint64_t one = 1;
    ssize_t w = write(l->wake, &one, sizeof one);
    (void)w;
}
