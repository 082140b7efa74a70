/* os/shm_posix.c - shared memory on Linux (os/shm.h): memfds, passed as descriptors. */
#include "os/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comem/common.h"

struct comem_shm {
    int fd;
    void *addr;
    size_t size;
    bool frozen;
};

static int status_of(int err)
{
    return err == ENOMEM ? COMEM_ENOMEM : err == EACCES || err == EPERM ? COMEM_EPERM : COMEM_EIO;
}

int comem_shm_create(const char *what, size_t size, comem_shm **out)
{
    *out = NULL;
    if (size == 0)
        return COMEM_EINVAL;
    comem_shm *m = calloc(1, sizeof *m);
    if (!m)
        return COMEM_ENOMEM;
    m->fd = memfd_create(what, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (m->fd < 0 || fchmod(m->fd, 0600) != 0 || ftruncate(m->fd, (off_t)size) != 0 ||
        fcntl(m->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
        int rc = status_of(errno);
        if (m->fd >= 0)
            close(m->fd);
        free(m);
        return rc;
    }
    m->addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
    if (m->addr == MAP_FAILED) {
        int rc = status_of(errno);
        close(m->fd);
        free(m);
        return rc;
    }
    m->size = size;
    *out = m;
    return COMEM_OK;
}

int comem_shm_freeze(comem_shm *m)
{
    if (fcntl(m->fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) != 0)
        return status_of(errno);
    m->frozen = true;
    return COMEM_OK;
}

int comem_shm_share(comem_shm *m, int64_t peer_pid, bool writable, comem_shm_token *out)
{
    (void)peer_pid; /* a descriptor goes to whoever the socket's peer is */
    if (writable && m->frozen)
        return COMEM_EPERM;
    if (m->fd < 0)
        return COMEM_EINVAL; /* it stopped sharing */
    int fd;
    if (writable) {
        fd = fcntl(m->fd, F_DUPFD_CLOEXEC, 0);
    } else {
        char path[64]; /* the same memfd opened again, read-only: no writable mapping can come of it */
        snprintf(path, sizeof path, "/proc/self/fd/%d", m->fd);
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0)
        return status_of(errno);
    *out = fd;
    return COMEM_OK;
}

void comem_shm_token_drop(comem_shm_token t)
{
    if (t >= 0 && t <= INT32_MAX)
        close((int)t);
}

void comem_shm_token_discard(comem_shm_token t) { comem_shm_token_drop(t); }

void comem_shm_stop_sharing(comem_shm *m)
{
    if (m->fd < 0)
        return;
    /* The seals are settled now: a receiver may add none (a frozen region has this seal already). */
    (void)fcntl(m->fd, F_ADD_SEALS, F_SEAL_SEAL);
    close(m->fd);
    m->fd = -1;
}

uint64_t comem_shm_token_number(comem_shm_token t, int place)
{
    (void)t; /* the descriptor itself rides beside the frame */
    return place >= 0 ? (uint64_t)place + 1 : 0;
}

int comem_shm_token_named(uint64_t number, comem_shm_token *beside, int n, comem_shm_token *out)
{
    *out = -1;
    if (number == 0)
        return COMEM_ENOENT;
    if (number > (uint64_t)n || beside[number - 1] < 0)
        return COMEM_EINVAL; /* names a place nothing came in, or one already taken */
    *out = beside[number - 1];
    beside[number - 1] = -1;
    return COMEM_OK;
}

int comem_shm_open(comem_shm_token t, size_t size, unsigned how, comem_shm **out)
{
    *out = NULL;
    if (t < 0 || t > INT32_MAX)
        return COMEM_EINVAL;
    int fd = (int)t;
    bool writable = how & COMEM_SHM_WRITABLE;
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || size == 0 || st.st_size != (off_t)size || seals < 0 ||
        (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
        close(fd);
        return COMEM_EINVAL; /* not a region of that size that stays that size (a shrink would fault here) */
    }
    if ((how & COMEM_SHM_FROZEN) && !(seals & F_SEAL_FUTURE_WRITE)) {
        close(fd);
        return COMEM_EPERM; /* someone could still write it */
    }
    comem_shm *m = calloc(1, sizeof *m);
    if (!m) {
        close(fd);
        return COMEM_ENOMEM;
    }
    m->addr = mmap(NULL, size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
    if (m->addr == MAP_FAILED) {
        int rc = status_of(errno); /* a read-only descriptor, or a frozen region: EACCES, EPERM */
        close(fd);
        free(m);
        return rc;
    }
    m->fd = fd;
    m->size = size;
    *out = m;
    return COMEM_OK;
}

void *comem_shm_addr(const comem_shm *m) { return m->addr; }

size_t comem_shm_size(const comem_shm *m) { return m->size; }

void comem_shm_close(comem_shm *m)
{
    if (!m)
        return;
    munmap(m->addr, m->size);
    if (m->fd >= 0)
        close(m->fd);
    free(m);
}
