/*
 * client/conn.h - the client's end of the socket (client/conn.c): whole
 * frames written under the write lock, reading into the reader's buffer, and
 * the HELLO that opens every connection. Connecting, and the system's side of
 * all of it, is client/port.h's. It knows frames, not
 * requests: request ids and waiting are client/request.h's. For the files of
 * src/client/ only.
 */
#ifndef COMEM_CLIENT_CONN_H
#define COMEM_CLIENT_CONN_H

#include "client/state.h"

/*
 * Sends m as one frame on the connection of generation gen. COMEM_ECLOSED when
 * that connection is gone or the write fails (the socket is then shut down so
 * the service thread notices); COMEM_ERANGE/COMEM_EINVAL when m cannot be
 * encoded. Thread-safe: frames are never interleaved.
 */
int comem_conn_send(comem_client *c, uint64_t gen, const comem_msg *m);

/*
 * Reads what s has (NULL: nothing, only the wait) into the reader's buffer,
 * waiting up to timeout_ms (-1: forever) and returning early when the service
 * thread is woken; shares riding on the bytes are kept (c->beside). Returns 1
 * when bytes came, 2 when woken, 0 on timeout, COMEM_ECLOSED on EOF,
 * COMEM_EIO on an error. Service thread (or open, before it starts) only.
 */
int comem_conn_read(comem_client *c, client_sock *s, int timeout_ms);

/* Reader role held: decodes the next whole frame of the buffer into c->in: 1, 0 (need more) or COMEM_EPROTO. */
int comem_conn_next(comem_client *c);

/*
 * Reader role held: reads what c->sock has now into the buffer without waiting.
 * 1 bytes came, 0 none, COMEM_ECLOSED on EOF, COMEM_EIO.
 */
int comem_conn_fill(comem_client *c);

/* How long a leader's blocking read waits at most before it looks at its deadline and at stopping again. */
#define COMEM_CONN_WAIT_SLICE_MS 100

/*
 * Reader role held, as a leader (comem_port_socket_moves): waits for bytes on
 * c->sock. timeout_ms -1 (adopted sockets only: c->fd_blocks): in a blocking
 * recv, as a bare protocol client waits for its reply (one wake-up, one system
 * call), at most COMEM_CONN_WAIT_SLICE_MS; else in a poll of up to timeout_ms.
 * 1 bytes came, 0 none, COMEM_ECLOSED on EOF, COMEM_EIO.
 */
int comem_conn_fill_wait(comem_client *c, int timeout_ms);

/*
 * Says HELLO on a fresh socket and reads the reply. COMEM_OK with *session; a
 * refusal's status with *refused set and its message in why; COMEM_ETIMEDOUT,
 * COMEM_ECLOSED or COMEM_EPROTO when the exchange failed. The booking area and
 * sealed view the reply names (os/shm.h) are kept in c->area and c->view_share.
 */
int comem_conn_hello(comem_client *c, client_sock *s, uint64_t *session, bool *refused, char *why, size_t whylen);

/* Lets go of the shares received and not mapped (a failed HELLO, a new one coming). */
void comem_conn_drop_area(comem_client *c);

#endif
