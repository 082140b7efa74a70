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
 * writable from there: what must stay unwritten is frozen, which binds every opening. Statuses:
 * COMEM_EINVAL (a size that is not the region's), COMEM_EPERM (writable asked of what is not),
 * COMEM_ENOENT (no such peer), COMEM_ENOMEM, COMEM_EIO.
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

/*
 * Opens a share received, mapped read-only or writable: COMEM_EINVAL when it is not size bytes. Takes t.
 * On Windows t is a handle value; one read from another process's frame must first be checked to
 * name a section (not yet: nothing takes a token from a frame so far), since a failed open closes it.
 */
int comem_shm_open(comem_shm_token t, size_t size, bool writable, comem_shm **out);

void *comem_shm_addr(const comem_shm *m);
size_t comem_shm_size(const comem_shm *m);

/* Unmaps and closes. */
void comem_shm_close(comem_shm *m);

#endif
