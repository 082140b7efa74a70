/*
 * os/xlock.h - a lock between processes that outlives its holder's death: the next taker is told
 * the holder died holding it (what it guarded may be half-changed) and gets the lock. One
 * interface, one backend per platform, chosen at build time:
 *
 *   xlock_posix.c  a robust, process-shared pthread mutex living in the shared memory it guards
 *                  (the kernel hands a dead owner's lock on with EOWNERDEAD)
 *   xlock_win.c    a named mutex with an access list for this user alone (a dead owner's mutex is
 *                  handed on as WAIT_ABANDONED); the shared memory holds nothing of it, and the
 *                  name says which one: every process that attaches under one name shares it
 *
 * The maker of the shared memory initialises the storage once, before sharing it; every process
 * then attaches under the same name (on Linux the storage is the lock and the name is not used).
 * A holder is one thread: the thread that took the lock gives it, and takes it only once.
 * Statuses: COMEM_ETIMEDOUT, COMEM_EPERM (Windows: another user's object has the name),
 * COMEM_ENOMEM, COMEM_EIO.
 */
#ifndef COMEM_OS_XLOCK_H
#define COMEM_OS_XLOCK_H

#include <stdbool.h>
#include <stdint.h>

/* The bytes of shared memory a lock's storage takes, aligned to 8. */
#define COMEM_XLOCK_STORAGE 64

typedef struct comem_xlock comem_xlock;

/* Makes the lock in storage (shared memory not yet shared with anyone). */
int comem_xlock_init(void *storage);

/* This process's way to the lock in storage, known by name (Windows builds the mutex's name of it). */
int comem_xlock_attach(void *storage, const char *name, comem_xlock **out);

/*
 * Takes the lock, waiting up to wait_ns (0: only if free; < 0: as long as it takes). *recovered
 * (may be NULL) says its last holder died holding it: the lock is held now, and what it guards
 * must be put right before it is given.
 */
int comem_xlock_take(comem_xlock *l, int64_t wait_ns, bool *recovered);

void comem_xlock_give(comem_xlock *l);

/* Lets go of this process's way to the lock (not of the lock: give it first). */
void comem_xlock_detach(comem_xlock *l);

#endif
