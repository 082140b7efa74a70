/* os/stream_posix.h - for os/ only: what the event loop (loop_posix.c) needs of a Unix socket stream. */
#ifndef COMEM_OS_STREAM_POSIX_H
#define COMEM_OS_STREAM_POSIX_H

#include "os/stream.h"

/*
 * Sends what the socket takes now, never waiting, n shares riding on the first byte (SCM_RIGHTS):
 * the count (> 0), COMEM_ETIMEDOUT (no room), COMEM_ECLOSED, COMEM_EINVAL, COMEM_EIO.
 */
int comem_stream_send_now(comem_stream *s, const void *buf, size_t len, const comem_shm_token *shares, int n);

#endif
