/*
 * client/port.h - what the client wing asks of its system, in one place: the connection to the
 * coordinator and the wait sets its threads sleep in. One interface, one backend per platform,
 * chosen at build time (as os/ does):
 *
 *   port_posix.c  a Unix stream socket. Each thread's wait set is an epoll set with an eventfd to
 *                 wake it; the socket rests in the service thread's set or the callback thread's,
 *                 moved between them, and a caller waiting for its reply may take it out of both
 *                 and read it itself (client/reader.c, the leader)
 *   port_win.c    a named pipe (os/stream.h) in the service thread's event loop (os/loop.h) from
 *                 connect to close. A pipe joins one completion port for life, so the socket never
 *                 moves (comem_port_socket_moves is false): the service thread reads every frame,
 *                 the callback thread waits on its wake-up alone, and a caller waits on its record
 *                 until the service thread signals it (one thread hand-off per reply)
 *
 * Statuses as os/stream.h's: COMEM_ENOENT (nothing listens there), COMEM_ECLOSED (the peer went
 * away, or nobody listens on a socket left behind), COMEM_EBUSY (the listener's queue is full),
 * COMEM_EPERM, COMEM_ETIMEDOUT, COMEM_EIO. For the files of src/client/ only.
 */
#ifndef COMEM_CLIENT_PORT_H
#define COMEM_CLIENT_PORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "os/shm.h"

typedef struct client_sock client_sock;   /* one connection to a coordinator */
typedef struct client_waits client_waits; /* one thread's wait set: its wake-up, and the socket while it rests there */

/* Whether the socket moves between the threads' wait sets and a caller may read it (the leader). */
bool comem_port_socket_moves(void);

/* The longest name a coordinator is reached by, its NUL included (a longer one is refused where it is
   resolved, COMEM_ERANGE): a Unix socket's path (sun_path); a pipe's name, \\.\pipe\ included. */
#ifdef _WIN32
#define COMEM_PORT_NAME_MAX 256
#else
#define COMEM_PORT_NAME_MAX 108
#endif

/* ---- the connection ---- */

/*
 * Whether anything at name could be a coordinator's (COMEM_OK), else a status and why for a person
 * (Linux: nothing there, not a socket). Windows names a pipe, which only a connect can look for.
 */
int comem_port_look(const char *name, char *why, size_t whylen);

/*
 * Connects to the coordinator at name without waiting for it to accept. The connection belongs to
 * service (Windows: it joins that set's loop for life; Linux: nothing yet), or to nobody (NULL: a
 * tool's one exchange, read with service NULL too). A listener of another user is left before a byte
 * is sent (os/stream.h): COMEM_EPERM, and why (may be NULL) names the path and that user.
 */
int comem_port_connect(const char *name, client_waits *service, client_sock **out, char *why, size_t whylen);

/*
 * The process listening at the other end of a connection, as the system names it (Linux:
 * SO_PEERCRED, the listener's pid when it listened; Windows: the pipe's server process); 0 when
 * the system does not name it (a process of another pid namespace).
 */
int64_t comem_port_peer_pid(client_sock *s);

/* Closes a connection (it leaves every wait set with it). NULL is fine. */
void comem_port_close(client_sock *s);

/*
 * Makes a connected socket the client's for good: Linux blocking, its reads bounded by slice_ms,
 * so a leader waits in recv (comem_port_fill_wait); true when done. Windows: false.
 */
bool comem_port_adopt(client_sock *s, int slice_ms);

/* Writes all len bytes, waiting up to timeout_ms for room. Never waits in a write of the system's. */
int comem_port_send(client_sock *s, const void *buf, size_t len, int timeout_ms);

/* A frame may be half written: ends the stream, so its reader meets the end and reconnects. */
void comem_port_shut(client_sock *s);

/*
 * Waits up to timeout_ms (-1: forever) for bytes on s (NULL: for nothing but the wake-up) or for
 * service's wake-up, and reads them into buf, keeping the shares that rode on them (os/shm.h) in
 * shares[] (any beyond cap let go; *n their count). 1 bytes came (*got), 2 woken, 0 the time
 * passed, COMEM_ECLOSED at the end, COMEM_EIO.
 */
int comem_port_read_wait(client_waits *service, client_sock *s, void *buf, size_t cap, size_t *got,
                         comem_shm_token *shares, int share_cap, int *n, int timeout_ms);

/* Reads what s has now into buf, never waiting: 1 bytes came (*got), 0 none, COMEM_ECLOSED, COMEM_EIO. */
int comem_port_fill(client_waits *service, client_sock *s, void *buf, size_t cap, size_t *got);

/*
 * A leader's wait (comem_port_socket_moves only): for bytes in a blocking read bounded by the adopted
 * slice (1 bytes came, 0 the slice passed), or, not adopted, a poll of up to timeout_ms and then a
 * read that does not wait. COMEM_ECLOSED, COMEM_EIO.
 */
int comem_port_fill_wait(client_sock *s, void *buf, size_t cap, size_t *got, int timeout_ms);

/*
 * When a wait on a request's condition variable (client/request.h) ends, from a CLOCK_MONOTONIC
 * deadline in nanoseconds. Linux's are made to run on CLOCK_MONOTONIC (client/pending.c); winpthreads
 * reads every deadline on the realtime clock, whatever the variable was made with.
 */
struct timespec comem_port_cond_deadline(int64_t deadline_ns);

/* ---- the wait sets ---- */

int comem_waits_open(client_waits **out);
void comem_waits_close(client_waits *w);

/*
 * A forked child's copy of a wait set: its descriptors closed, nothing freed and no lock taken (the
 * copied memory may be in use by nothing, and an allocator's lock a parent's thread held at the
 * fork stays held in the child). Windows has no fork: nothing to do.
 */
void comem_waits_close_forked(client_waits *w);

/* Makes the thread waiting in w return (2), or the next wait if none waits now; any thread. */
void comem_waits_wake(client_waits *w);

/* Waits up to timeout_ms (-1: forever): 1 the socket resting in w is readable (or ended), 2 woken, 0 the time passed, COMEM_EIO. */
int comem_waits_wait(client_waits *w, int timeout_ms);

/* The socket rests in w (on) or leaves it. Only where comem_port_socket_moves; else the socket stays where it was connected. */
void comem_waits_hold(client_waits *w, client_sock *s, bool on);

#endif
