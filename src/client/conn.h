/*
 * client/conn.h - the client's end of the socket (client/conn.c): connecting,
 * whole frames written under the write lock, reading into the reader's
 * buffer, and the HELLO that opens every connection. It knows frames, not
 * requests: request ids and waiting are client/request.h's. For the files of
 * src/client/ only.
 */
#ifndef COMEM_CLIENT_CONN_H
#define COMEM_CLIENT_CONN_H

#include "client/state.h"

/*
 * Connects to path; returns the socket (non-blocking, close-on-exec; the
 * client makes it its own with comem_conn_adopt) or a
 * negative status: COMEM_ENOENT (nothing there), COMEM_ECLOSED (nobody
 * listens), COMEM_EBUSY (its queue is full), COMEM_EPERM, COMEM_EIO.
 */
int comem_conn_connect(const char *path);

/*
 * Sends m as one frame on the connection of generation gen. COMEM_ECLOSED when
 * that connection is gone or the write fails (the socket is then shut down so
 * the service thread notices); COMEM_ERANGE/COMEM_EINVAL when m cannot be
 * encoded. Thread-safe: frames are never interleaved.
 */
int comem_conn_send(comem_client *c, uint64_t gen, const comem_msg *m);

/*
 * Reads what fd has into the reader's buffer, waiting up to timeout_ms (-1:
 * forever) and returning early when wake_fd fires. Returns 1 when bytes came,
 * 2 when woken, 0 on timeout, COMEM_ECLOSED on EOF, COMEM_EIO on an error.
 * Service thread (or open, before it starts) only.
 */
int comem_conn_read(comem_client *c, int fd, int timeout_ms);

/* Reader role held: decodes the next whole frame of the buffer into c->in: 1, 0 (need more) or COMEM_EPROTO. */
int comem_conn_next(comem_client *c);

/*
 * Reader role held: reads what c->fd has now into the buffer without waiting.
 * 1 bytes came, 0 none, COMEM_ECLOSED on EOF, COMEM_EIO.
 */
int comem_conn_fill(comem_client *c);

/* How long a leader's blocking read waits at most before it looks at its deadline and at stopping again. */
#define COMEM_CONN_WAIT_SLICE_MS 100

/*
 * Reader role held: waits for bytes on c->fd in a blocking recv, as a bare
 * protocol client waits for its reply (one wake-up, one system call), at most
 * COMEM_CONN_WAIT_SLICE_MS. 1 bytes came, 0 none (the slice passed),
 * COMEM_ECLOSED on EOF, COMEM_EIO.
 */
int comem_conn_fill_wait(comem_client *c);

/*
 * Makes a connected socket the client's: blocking, with reads bounded by
 * COMEM_CONN_WAIT_SLICE_MS (SO_RCVTIMEO), for comem_conn_fill_wait. Every
 * other read and every write on it passes MSG_DONTWAIT, so nothing else ever
 * waits in the socket: a stalled coordinator cannot hold a write past its
 * deadline. False when it stays non-blocking (then leaders wait in poll).
 */
bool comem_conn_adopt(int fd);

/* The socket fd joins (events EPOLLIN) or leaves (0) the epoll set epfd (a thread's: client/request.h's rest). */
void comem_conn_watch(int epfd, int fd, bool on);

/*
 * Says HELLO on a fresh socket and reads the reply. COMEM_OK with *session; a
 * refusal's status with *refused set and its message in why; COMEM_ETIMEDOUT,
 * COMEM_ECLOSED or COMEM_EPROTO when the exchange failed. The booking area and
 * sealed view the reply names (os/shm.h) are kept in c->area and c->view_share.
 */
int comem_conn_hello(comem_client *c, int fd, uint64_t *session, bool *refused, char *why, size_t whylen);

/* Lets go of the shares received and not mapped (a failed HELLO, a new one coming). */
void comem_conn_drop_area(comem_client *c);

#endif
