/* os/lock_posix.c - a lock file on Linux (os/lock.h): flock on a regular file of this user. */
#include "os/lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comem/common.h"

struct comem_lockfile {
    int fd;
};

int comem_lockfile_take(const char *path, comem_lockfile **out)
{
    *out = NULL;
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) /* errno stays the system's, for the caller's message */
        return errno == ELOOP || errno == EISDIR || errno == EACCES ? COMEM_EPERM : COMEM_EIO;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid()) {
        close(fd);
        return COMEM_EPERM; /* someone else's file, or not a file: never locked, never changed */
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        close(fd);
        errno = err; /* the system's reason, for the caller's message */
        return err == EWOULDBLOCK ? COMEM_EEXIST : COMEM_EIO;
    }
    comem_lockfile *l = malloc(sizeof *l);
    if (!l) {
        close(fd);
        return COMEM_ENOMEM;
    }
    l->fd = fd;
    *out = l;
    return COMEM_OK;
}

void comem_lockfile_release(comem_lockfile *l)
{
    if (!l)
        return;
    close(l->fd); /* the lock goes with the descriptor */
    free(l);
}
