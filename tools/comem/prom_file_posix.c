/*
 * tools/comem/prom_file_posix.c - the metrics text file a collector reads (comem_prom_write_atomic,
 * prom.h) on Linux: replaced whole, never seen half written (tools/comemd's --metrics).
 */
#include "prom.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int comem_prom_write_atomic(const char *path, const char *text)
{
    /* What is at path must be ours to replace: not another user's file, not a link, not a folder. */
    struct stat st;
    if (lstat(path, &st) == 0 && (!S_ISREG(st.st_mode) || st.st_uid != getuid())) {
        errno = S_ISREG(st.st_mode) ? EPERM : EEXIST;
        return -1;
    }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp)
        return -1;
    /* Same directory, so the rename cannot cross filesystems; a name the collector ignores (not *.prom).
       mkstemps creates it new (O_EXCL: nothing planted there, a link included, is followed), mode 0600. */
    snprintf(tmp, plen + 32, "%s.XXXXXX.tmp", path);
    int fd = mkstemps(tmp, 4);
    if (fd < 0) {
        free(tmp);
        return -1;
    }
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    /* 0640: the collector reads it through the file's group (a setgid textfile folder gives it the
       collector's); other users do not see every process's name. */
    int rc = off == n && fchmod(fd, 0640) == 0 && fsync(fd) == 0 ? 0 : -1;
    int saved = errno;
    close(fd);
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = -1;
        saved = errno;
    }
    if (rc != 0)
        unlink(tmp);
    free(tmp);
    errno = saved;
    return rc;
}
