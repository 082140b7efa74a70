/*
 * os/stream_posix.h - for the Linux backends only: what the event loop (loop_posix.c) needs of a Unix
 * socket stream, and the one receive that takes descriptors riding on the bytes and the peer's check,
 * which the client's own socket (client/port_posix.c) uses too.
 */
#ifndef COMEM_OS_STREAM_POSIX_H
#define COMEM_OS_STREAM_POSIX_H

#include <sys/types.h>

#include "os/stream.h"

/*
 * Sends what the socket takes now, never waiting, n shares riding on the first byte (SCM_RIGHTS):
 * the count (> 0), COMEM_ETIMEDOUT (no room), COMEM_ECLOSED, COMEM_EINVAL, COMEM_EIO.
 */
int comem_stream_send_now(comem_stream *s, const void *buf, size_t len, const comem_shm_token *shares, int n);

/*
 * recvmsg on fd with flags, keeping the descriptors that rode on the bytes (SCM_RIGHTS, close-on-exec)
 * in shares[] from *n on, any beyond cap closed: recvmsg's result (errno set when it is < 0).
 */
ssize_t comem_recv_shares(int fd, void *buf, size_t len, int flags, comem_shm_token *shares, int cap, int *n);

/*
 * Whether the peer of the connected socket fd (reached at name) runs as this process's uid: COMEM_OK;
 * COMEM_EPERM for any other uid (root's too), COMEM_EIO when the system cannot say, with why for a
 * person (naming name and the peer's uid). A client calls it before it sends anything.
 */
int comem_stream_peer_check(int fd, const char *name, char *why, size_t whylen);

#endif
