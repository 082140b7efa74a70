/*
 * os/loop.h - the event loop: one thread waits for any of many streams, listeners and processes,
 * and is told which are ready. One interface, one backend per platform, chosen at build time:
 *
 *   loop_posix.c  epoll: a stream's socket, a listener's socket and a process's pidfd in one set,
 *                 an eventfd for wake-ups
 *   loop_win.c    an I/O completion port: each stream keeps one read of its own pending into a
 *                 buffer of the loop's, a listener its ConnectNamedPipe, a process a registered
 *                 wait; what completes is reported as ready, as epoll would report it
 *
 * Readiness is level-triggered on both: a stream with bytes left unread is reported again at the
 * next wait. A stream in a loop is read through the loop (comem_loop_read), never waiting: it gives
 * what has come, COMEM_ETIMEDOUT when nothing has, COMEM_ECLOSED once the peer has gone and
 * everything it sent has been read. It may be written as without a loop (waiting), or through the
 * loop (comem_loop_send), never waiting: a send takes what the stream has room for now (Linux: the
 * socket's buffer; Windows: one write kept pending per stream, its bytes copied), and one that
 * takes nothing asks for COMEM_LOOP_WRITE (comem_loop_want_write), reported once the stream takes
 * bytes again. Every object is removed from the loop before it is closed, and the loop is closed
 * last. One thread waits; comem_loop_wake may be called from any.
 */
#ifndef COMEM_OS_LOOP_H
#define COMEM_OS_LOOP_H

#include "os/proc.h"
#include "os/stream.h"

typedef struct comem_loop comem_loop;

/* What is ready. */
enum {
    COMEM_LOOP_READ = 1u << 0,   /* a stream: bytes to read, or its peer gone (the read then says so) */
    COMEM_LOOP_ACCEPT = 1u << 1, /* a listener: a client waits (comem_accept with timeout 0 takes it) */
    COMEM_LOOP_EXITED = 1u << 2, /* a process: it has exited */
    COMEM_LOOP_WOKEN = 1u << 3,  /* comem_loop_wake was called (tag NULL) */
    COMEM_LOOP_WRITE = 1u << 4   /* a stream that wants to write (comem_loop_want_write) takes bytes again */
};

typedef struct comem_loop_event {
    void *tag;     /* what the object was added with */
    unsigned what; /* one bit, or for a stream COMEM_LOOP_READ and COMEM_LOOP_WRITE together */
} comem_loop_event;

/* A new loop: COMEM_OK, COMEM_ENOMEM, COMEM_EIO. */
int comem_loop_open(comem_loop **out);

/* Closes the loop. Whatever is still in it is forgotten (not closed). */
void comem_loop_close(comem_loop *l);

/* Adds an object, reported with tag (not NULL): COMEM_OK, COMEM_EINVAL, COMEM_ENOMEM, COMEM_EIO. An object is in one loop at most. */
int comem_loop_add_stream(comem_loop *l, comem_stream *s, void *tag);
int comem_loop_add_listener(comem_loop *l, comem_listener *ls, void *tag);
int comem_loop_add_process(comem_loop *l, comem_proc_watch *w, void *tag);

/* Removes an object: it is reported no more, and may be closed. */
void comem_loop_remove_stream(comem_loop *l, comem_stream *s);
void comem_loop_remove_listener(comem_loop *l, comem_listener *ls);
void comem_loop_remove_process(comem_loop *l, comem_proc_watch *w);

/*
 * Waits up to timeout_ms (0: looks, -1: forever) for something to be ready and fills at most max
 * events: their count, 0 when the time passed, COMEM_EIO. One event per object and wait.
 */
int comem_loop_wait(comem_loop *l, comem_loop_event *ev, int max, int timeout_ms);

/* As comem_loop_wait, the timeout in microseconds (Linux: as given, with epoll_pwait2; else rounded up to a millisecond). */
int comem_loop_wait_us(comem_loop *l, comem_loop_event *ev, int max, int64_t timeout_us);

/* Reads a stream in l, at most cap bytes, without waiting: the count, COMEM_ETIMEDOUT, COMEM_ECLOSED, COMEM_EIO. */
int comem_loop_read(comem_loop *l, comem_stream *s, void *buf, size_t cap);

/*
 * Sends to a stream in l what it takes now, never waiting, with n shares riding on the first byte
 * (os/stream.h; the first send of a message carries them): the count taken (> 0), COMEM_ETIMEDOUT
 * when it takes nothing now, COMEM_ECLOSED, COMEM_EIO.
 */
int comem_loop_send(comem_loop *l, comem_stream *s, const void *buf, size_t len, const comem_shm_token *shares,
                    int n);

/* Whether the waits report COMEM_LOOP_WRITE for s once it takes bytes (level-triggered, as epoll's EPOLLOUT). */
int comem_loop_want_write(comem_loop *l, comem_stream *s, bool on);

/* Makes the waiting thread's comem_loop_wait return (a COMEM_LOOP_WOKEN event); any thread. */
void comem_loop_wake(comem_loop *l);

#endif
