/* os/xlock_posix.c - the lock between processes on Linux (os/xlock.h): a robust, process-shared mutex. */
#include "os/xlock.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "comem/common.h"

_Static_assert(sizeof(pthread_mutex_t) <= COMEM_XLOCK_STORAGE, "the mutex fits its storage");

struct comem_xlock {
    pthread_mutex_t *m;
};

int comem_xlock_init(void *storage)
{
    pthread_mutexattr_t a;
    if (pthread_mutexattr_init(&a) != 0)
        return COMEM_EIO;
    int rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) == 0 &&
                     pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) == 0 &&
                     pthread_mutex_init((pthread_mutex_t *)storage, &a) == 0
                 ? COMEM_OK
                 : COMEM_EIO;
    pthread_mutexattr_destroy(&a);
    return rc;
}

int comem_xlock_attach(void *storage, const char *name, comem_xlock **out)
{
    (void)name; /* the storage is the lock */
    comem_xlock *l = malloc(sizeof *l);
    if (!l)
        return COMEM_ENOMEM;
    l->m = storage;
    *out = l;
    return COMEM_OK;
}

int comem_xlock_take(comem_xlock *l, int64_t wait_ns, bool *recovered)
{
    if (recovered)
        *recovered = false;
    int rc = pthread_mutex_trylock(l->m); /* uncontended: no clock reading */
    if (rc == EBUSY && wait_ns < 0) {
        rc = pthread_mutex_lock(l->m);
    } else if (rc == EBUSY && wait_ns > 0) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until); /* timedlock's clock; a jump only shortens or stretches the wait */
        until.tv_sec += (time_t)(wait_ns / 1000000000);
        until.tv_nsec += (long)(wait_ns % 1000000000);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        rc = pthread_mutex_timedlock(l->m, &until);
    }
    if (rc == EOWNERDEAD) {
        pthread_mutex_consistent(l->m); /* held now; its holder's half-done work is the caller's to mend */
        if (recovered)
            *recovered = true;
        return COMEM_OK;
    }
    return rc == 0 ? COMEM_OK : rc == EBUSY || rc == ETIMEDOUT ? COMEM_ETIMEDOUT : COMEM_EIO;
}

void comem_xlock_give(comem_xlock *l) { pthread_mutex_unlock(l->m); }

void comem_xlock_detach(comem_xlock *l) { free(l); }
