/*
 * os/shm.h - shared memory between processes of one user: a region one process makes, maps
 * writable and shares with another, read-only or writable. One interface, one backend per
 * platform, chosen at build time:
 *
 *   shm_posix.c  a memfd (its size sealed); a share is a descriptor to pass over the socket
 *                (SCM_RIGHTS), reopened read-only through /proc/self/fd for a read-only share;
 *                frozen, it is sealed against every new writable mapping (F_SEAL_FUTURE_WRITE)
 *   shm_win.c    an unnamed section with an access list for this user alone (no name another
 *                process could take first); a share is a handle duplicated into the peer with
 *                FILE_MAP_READ (and FILE_MAP_WRITE when writable), whose value is sent as a number
 *
 * A read-only share cannot be mapped writable by its receiver, on either system. On Linux a process
 * of the same user that may read the maker's /proc (as it may trace it) can open the memfd again
 * writable from there: what must stay unwritten is frozen, which binds every opening. On Windows a
 * process of the same user that may duplicate the maker's handles (PROCESS_DUP_HANDLE on it) can
 * take its writable one: there "frozen" holds only as far as the maker's process is shut to
 * others. Statuses: COMEM_EINVAL (a size that is not the region's, or not a region at all),
 * COMEM_EPERM (writable asked of what is not, or frozen of what is not), COMEM_ENOENT (no such
 * peer), COMEM_ENOMEM, COMEM_EIO.
 *
 * Shares travel beside a frame of the wire and are named in it by a number (0: none), so one
 * protocol serves both systems: on Linux the descriptors ride on the frame's bytes (SCM_RIGHTS,
 * os/stream.h) and the number is a share's place among them, from 1; on Windows nothing rides,
 * the share is already a handle in the receiver's process and the number is its value.
 */
#ifndef COMEM_OS_SHM_H
#define COMEM_OS_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct comem_shm comem_shm;

/*
 * What the receiver needs to open a share. Linux: a descriptor of the sender's, to pass with
 * SCM_RIGHTS and then close (comem_shm_token_drop); the receiver opens the copy it got. Windows: a
 * handle in the receiver's process already, sent as a number; the sender has nothing to drop.
 */
typedef intptr_t comem_shm_token;

/* Makes a region of size bytes (zeroed), mapped writable in this process: `what` names it in tools' listings. */
int comem_shm_create(const char *what, size_t size, comem_shm **out);

/* From now on every share is read-only (Linux: and no new writable mapping is possible at all). */
int comem_shm_freeze(comem_shm *m);

/* A share of m for process peer_pid: COMEM_EPERM when writable is asked of a frozen region. */
int comem_shm_share(comem_shm *m, int64_t peer_pid, bool writable, comem_shm_token *out);

/* The sender's part of a token once it has been sent (Linux: closes the descriptor; Windows: nothing). */
void comem_shm_token_drop(comem_shm_token t);

/* A share received and not to be opened: let go (Linux: the descriptor; Windows: the handle, if a section's). */
void comem_shm_token_discard(comem_shm_token t);

/*
 * No more shares of m: the system's object goes (a descriptor, a section handle), the mapping stays.
 * On Linux the seals are settled first (F_SEAL_SEAL): nobody holding a share may add one.
 */
void comem_shm_stop_sharing(comem_shm *m);

/* How comem_shm_open maps a share, and what it demands of it. */
#define COMEM_SHM_WRITABLE 1u /* mapped writable (else read-only) */
#define COMEM_SHM_FROZEN 2u   /* refused (COMEM_EPERM) unless its maker froze it */

/*
 * Opens a share received, as `how` says: COMEM_EINVAL when it is not a region of size bytes that
 * cannot change size under the mapping (Linux: sealed against shrinking and growing; Windows: a
 * section, which never can). Takes t, except on Windows when t is not a section handle at all: a
 * number from another process's frame may name any handle of this process, which is left alone.
 */
int comem_shm_open(comem_shm_token t, size_t size, unsigned how, comem_shm **out);

/* The number that names share t in a frame, given its place among the shares sent beside it (from 0). */
uint64_t comem_shm_token_number(comem_shm_token t, int place);

/*
 * The share a frame's number names, from the n shares that came beside the frame (Linux; none on
 * Windows). On Linux the one named is taken out of beside[] (set to -1) and the caller drops the rest
 * (comem_shm_token_drop). COMEM_ENOENT: the number is 0; COMEM_EINVAL: it names nothing that came.
 */
int comem_shm_token_named(uint64_t number, comem_shm_token *beside, int n, comem_shm_token *out);

void *comem_shm_addr(const comem_shm *m);
size_t comem_shm_size(const comem_shm *m);

/* Unmaps and closes. */
void comem_shm_close(comem_shm *m);

#endif
