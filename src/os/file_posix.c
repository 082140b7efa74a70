/* os/file_posix.c - a shared file made whole before it is seen (os/file_posix.h). */
#include "os/file_posix.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "comem/common.h"

/*
 * Allocates the blocks of fd's first size bytes: 0, or an errno (ENOSPC on a full disk). A shared
 * mapping of a file's hole gets its page when first written, and a filesystem with no room then
 * answers with SIGBUS, not an error: every block is taken here, before the mapping, so a full disk
 * is a status. Filesystems without fallocate get the zeros written.
 */
static int allocate(int fd, size_t size)
{
    int err = posix_fallocate(fd, 0, (off_t)size); /* returns the error; errno is left alone */
    if (err != EOPNOTSUPP && err != EINVAL)
        return err;
    static const char zeros[4096];
    for (size_t off = 0; off < size;) {
        size_t n = size - off < sizeof zeros ? size - off : sizeof zeros;
        ssize_t w = pwrite(fd, zeros, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : ENOSPC;
        off += (size_t)w;
    }
    return 0;
}

int comem_file_create_whole(const char *path, size_t size, int (*fill)(void *mem, const void *ctx), const void *ctx,
                            bool replace)
{
    char tmp[PATH_MAX + 32];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid()) >= sizeof tmp)
        return COMEM_EIO;
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return COMEM_EIO;
    int rc = COMEM_EIO, err = 0;
    if (ftruncate(fd, (off_t)size) != 0 || (err = allocate(fd, size)) != 0) {
        err = err ? err : errno;
    } else {
        void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (mem == MAP_FAILED) {
            err = errno;
        } else {
            rc = fill(mem, ctx);
            munmap(mem, size);
            /* link() never replaces: if one appeared meanwhile, that one is used (and checked). */
            if (rc == COMEM_OK && replace)
                rc = rename(tmp, path) == 0 ? COMEM_OK : COMEM_EIO;
            else if (rc == COMEM_OK)
                rc = link(tmp, path) == 0 || errno == EEXIST ? COMEM_OK : COMEM_EIO;
            err = rc == COMEM_OK ? 0 : errno;
        }
    }
    close(fd);
    unlink(tmp); /* the temporary name goes whatever happened: the file is in place, or never will be */
    errno = err; /* the caller says why (a full disk: ENOSPC) */
    return rc;
}
