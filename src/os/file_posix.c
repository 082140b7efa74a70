/* os/file_posix.c - a shared file made whole before it is seen (os/file_posix.h). */
#include "os/file_posix.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "comem/common.h"

int comem_file_create_whole(const char *path, size_t size, int (*fill)(void *mem, const void *ctx), const void *ctx,
                            bool replace)
{
    char tmp[PATH_MAX + 32];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid()) >= sizeof tmp)
        return COMEM_EIO;
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return COMEM_EIO;
    int rc = COMEM_EIO;
    if (ftruncate(fd, (off_t)size) == 0) {
        void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (mem != MAP_FAILED) {
            rc = fill(mem, ctx);
            munmap(mem, size);
            /* link() never replaces: if one appeared meanwhile, that one is used (and checked). */
            if (rc == COMEM_OK && replace)
                rc = rename(tmp, path) == 0 ? COMEM_OK : COMEM_EIO;
            else if (rc == COMEM_OK)
                rc = link(tmp, path) == 0 || errno == EEXIST ? COMEM_OK : COMEM_EIO;
        }
    }
    close(fd);
    unlink(tmp);
    return rc;
}
