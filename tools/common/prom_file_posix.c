/*
 * tools/common/prom_file_posix.c - the metrics text file a collector reads (comem_prom_write_atomic,
 * prom.h) on Linux: replaced whole, never seen half written (tools/comemd's --metrics).
 */
#include "common/prom.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What is at a path must be ours to replace: this user's regular file, not another user's file, not a
   link, not a folder. 0, or -1 with errno EPERM (another user's file) or EEXIST (not a regular file). */
static int ours(const struct stat *st)
{
    if (S_ISREG(st->st_mode) && st->st_uid == getuid())
        return 0;
    errno = S_ISREG(st->st_mode) ? EPERM : EEXIST;
    return -1;
}

/*
 * Moves tmp (the new file) to path, replacing nothing that is not ours: not even what appears at path
 * after the lstat in comem_prom_write_atomic (a plain rename would replace a link planted while the
 * file is written and fsync'ed). Nothing there: RENAME_NOREPLACE. Something there: RENAME_EXCHANGE,
 * one atomic swap, then a look at what was swapped out to tmp: ours, it goes; not ours, it is swapped
 * back, so path holds it again (never opened, never followed) and tmp our file, which the caller
 * removes. A filesystem without these flags (EINVAL) gets plain rename: the lstat is all there is.
 */
static int move_into_place(const char *tmp, const char *path)
{
    for (int tries = 0; tries < 3; tries++) { /* what is at path may come and go between the two */
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0)
            return 0;
        if (errno == EEXIST && renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_EXCHANGE) == 0) {
            struct stat old;
            if (lstat(tmp, &old) == 0 && ours(&old) == 0)
                return unlink(tmp) == 0 || errno == ENOENT ? 0 : -1; /* the old file of ours, swapped out */
            int e = errno; /* EEXIST or EPERM from ours, or why tmp could not be looked at */
            /* Swapped back; path gone meanwhile (ENOENT), what was there is moved back to it. */
            if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_EXCHANGE) != 0 && errno == ENOENT)
                renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE);
            errno = e;
            return -1;
        }
        if (errno == EINVAL || errno == ENOSYS)
            return rename(tmp, path);
        if (errno != ENOENT) /* ENOENT from the exchange: path went away after EEXIST; again */
            return -1;
    }
    return -1;
}

int comem_prom_write_atomic(const char *path, const char *text)
{
    /* Checked before anything is written (what is not ours stays untouched, no temporary file made),
       and again, atomically, when the new file is moved into place (move_into_place). */
    struct stat st;
    if (lstat(path, &st) == 0 && ours(&st) != 0)
        return -1;
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp)
        return -1;
    /* Same directory, so the rename cannot cross filesystems; a name the collector ignores (not *.prom).
       mkstemps creates it new (O_EXCL: nothing planted there, a link included, is followed), mode 0600. */
    snprintf(tmp, plen + 32, "%s.XXXXXX.tmp", path);
    int fd = mkstemps(tmp, 4);
    struct stat mine; /* which file is ours, for the removal below */
    if (fd < 0 || fstat(fd, &mine) != 0) {
        int saved = errno;
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        free(tmp);
        errno = saved;
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
    if (rc == 0 && move_into_place(tmp, path) != 0) {
        rc = -1;
        saved = errno;
    }
    /* Our temporary file removed, and only ours: after a failed swap back, tmp may name what was planted. */
    if (rc != 0 && (lstat(tmp, &st) != 0 || (st.st_dev == mine.st_dev && st.st_ino == mine.st_ino)))
        unlink(tmp);
    free(tmp);
    errno = saved;
    return rc;
}
