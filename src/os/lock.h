/*
 * os/lock.h - a lock file: held by one process at a time, let go by the system when that process
 * ends however it ends, so "is another one running?" has an answer no crash leaves wrong. The
 * coordinator holds one beside its socket or pipe (a second coordinator under the same name is
 * refused). One interface, one backend per platform, chosen at build time:
 *
 *   lock_posix.c  flock(LOCK_EX | LOCK_NB) on a regular file of this user (not followed if a link)
 *   lock_win.c    LockFileEx(LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY) on its first byte
 *
 * The file is made once and left in place, never truncated or removed: removing it would let a
 * newcomer lock a new file of the same name while the holder keeps the old one. Locks are per
 * opening, so a second take in the same process is refused too. Statuses: COMEM_EEXIST (another
 * holds it), COMEM_EPERM (the path is not a regular file of this user), COMEM_EIO, COMEM_ENOMEM.
 */
#ifndef COMEM_OS_LOCK_H
#define COMEM_OS_LOCK_H

typedef struct comem_lockfile comem_lockfile;

/* Takes the lock at path (made if missing) without waiting: COMEM_OK with *out, or a status (POSIX:
   with COMEM_EIO, errno says what the system said). */
int comem_lockfile_take(const char *path, comem_lockfile **out);

/* Lets it go; the file stays. */
void comem_lockfile_release(comem_lockfile *l);

#endif
