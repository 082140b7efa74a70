/*
 * os/stream.h - the coordinator's transport: a local byte stream between processes of one
 * machine, with the peer's identity from the system, not from anything it sends. One interface,
 * one backend per platform, chosen at build time:
 *
 *   stream_posix.c  a Unix stream socket at a path; the peer's pid and uid from SO_PEERCRED
 *   stream_win.c    a named pipe \\.\pipe\NAME, byte mode, local clients only
 *                   (PIPE_REJECT_REMOTE_CLIENTS), its first instance claimed
 *                   (FILE_FLAG_FIRST_PIPE_INSTANCE), an access list for this user alone; the
 *                   peer's pid from GetNamedPipeClientProcessId, its user from that process's token
 *
 * Every wait takes a timeout in milliseconds (-1: none) and every call says what went wrong
 * with a comem status: COMEM_ETIMEDOUT, COMEM_ECLOSED (the other end went away), COMEM_ENOENT
 * (nothing listens under that name), COMEM_EEXIST (another listener has it), COMEM_EPERM,
 * COMEM_EIO. Names are UTF-8 (UTF-16 at the Windows API). Not thread-safe per object: one
 * reader and one writer at a time, as the wire's frames need anyway.
 *
 * Today it serves the tests and the Windows build (issue 26); the coordinator and the client
 * on Linux still use their own socket code (coord/socket.c, client/conn.c), which this
 * interface is to replace.
 */
#ifndef COMEM_OS_STREAM_H
#define COMEM_OS_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "os/shm.h"

typedef struct comem_listener comem_listener;
typedef struct comem_stream comem_stream;

/* Who is at the other end, as the system says. */
typedef struct comem_peer {
    int64_t pid;
    bool same_user; /* the same user as this process (uid; the token's SID) */
    char user[192]; /* that user: a uid or a SID, as text */
} comem_peer;

/*
 * Whether a listener may take name: COMEM_OK when nothing is there or what is there may be replaced
 * (Linux: a socket of this user, live or not; Windows: any pipe's name); else COMEM_EPERM and why
 * (Linux: a file that is not a socket, another user's socket), left untouched; COMEM_ERANGE and why
 * when name is too long to be a socket's path.
 */
int comem_listen_check(const char *name, char *why, size_t whylen);

/* Listens under name (a socket path; a pipe's name \\.\pipe\...). COMEM_EEXIST when another has it. */
int comem_listen(const char *name, comem_listener **out, char *why, size_t whylen);
/*
 * The next client, waiting up to timeout_ms; *peer (may be NULL) says who it is. COMEM_ENOMEM: this
 * process is out of descriptors (or memory): comem_listener_refuse_one can still turn one away.
 */
int comem_accept(comem_listener *l, int timeout_ms, comem_stream **out, comem_peer *peer);

/*
 * Takes the next waiting client only to tell it why (bytes written once, never waited on) and close
 * it, when this process cannot keep it: Linux keeps a spare descriptor per listener for this, so it
 * works when every other is taken. COMEM_OK, COMEM_ETIMEDOUT (nobody waits), COMEM_EIO.
 */
int comem_listener_refuse_one(comem_listener *l, const void *why, size_t len);
/* Stops listening: the name is given back (a socket path is removed). */
void comem_listener_close(comem_listener *l);

/*
 * Connects to name, waiting up to timeout_ms for a listener that is busy accepting others. A listener
 * of another user (Linux: its uid, root's too; Windows: the pipe server's token user) is left at
 * once, nothing sent: COMEM_EPERM.
 */
int comem_connect(const char *name, int timeout_ms, comem_stream **out);
/* comem_connect, and why it failed for a person (why may be NULL): a listener of another user is named. */
int comem_connect_why(const char *name, int timeout_ms, comem_stream **out, char *why, size_t whylen);
/* Writes all len bytes, waiting up to timeout_ms for room. */
int comem_stream_write(comem_stream *s, const void *buf, size_t len, int timeout_ms);
/* Reads what is there, at most cap bytes, waiting up to timeout_ms for some: the count (> 0), or a status. */
int comem_stream_read(comem_stream *s, void *buf, size_t cap, int timeout_ms);
void comem_stream_close(comem_stream *s);

/* The most shares one write carries. */
#define COMEM_STREAM_SHARES_MAX 4

/*
 * Writes all len bytes with n shares riding on them (os/shm.h; at most COMEM_STREAM_SHARES_MAX).
 * Linux: the descriptors go with the first byte (SCM_RIGHTS); the sender drops its copies after
 * (comem_shm_token_drop). Windows: nothing rides, the shares are handles the peer holds already;
 * the frame names them (comem_shm_token_number), on both systems.
 */
int comem_stream_write_shares(comem_stream *s, const void *buf, size_t len, const comem_shm_token *shares, int n,
                              int timeout_ms);
/*
 * Reads as comem_stream_read, keeping the shares that rode on the bytes in shares[] (at most cap;
 * any more are let go) and their count in *n (Linux; always 0 on Windows).
 */
int comem_stream_read_shares(comem_stream *s, void *buf, size_t len, comem_shm_token *shares, int cap, int *n,
                             int timeout_ms);

/* What the system names the object by: the socket's descriptor; the pipe's HANDLE. For os/loop. */
intptr_t comem_stream_handle(const comem_stream *s);
intptr_t comem_listener_handle(const comem_listener *l);

#endif
