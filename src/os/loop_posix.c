/* os/loop_posix.c - the event loop on Linux (os/loop.h): one epoll set, level-triggered, and an eventfd. */
#include "os/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "comem/common.h"

/* What an epoll entry carries: the caller's tag and what readiness of its descriptor means. */
typedef struct entry {
    void *tag;
    unsigned what;
    int fd;
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

int comem_loop_wait(comem_loop *l, comem_loop_event *ev, int max, int timeout_ms)
{
    struct epoll_event got[64];
    if (max <= 0)
        return COMEM_EINVAL;
    int n = epoll_wait(l->ep, got, max < 64 ? max : 64, timeout_ms < 0 ? -1 : timeout_ms);
    if (n < 0)
        return errno == EINTR ? 0 : COMEM_EIO;
    for (int i = 0; i < n; i++) {
        const entry *e = got[i].data.ptr;
        if (e == &l->woken) {
            uint64_t v;
            ssize_t r = read(l->wake, &v, sizeof v);
            (void)r;
        }
        ev[i] = (comem_loop_event){.tag = e->tag, .what = e->what};
    }
    return n;
}

int comem_loop_read(comem_loop *l, comem_stream *s, void *buf, size_t cap)
{
    (void)l; /* the socket itself is what epoll watches: read it, not waiting */
    return comem_stream_read(s, buf, cap, 0);
}

void comem_loop_wake(comem_loop *l)
{
    uint64_t one = 1;
    ssize_t w = write(l->wake, &one, sizeof one);
    (void)w;
}
