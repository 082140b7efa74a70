/* probe/sim_store_posix.c - a simulated card's memory on Linux (probe/sim_store.h): a private file, mapped shared. */
#include "probe/sim_store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "comem/common.h"
#include "os/file_posix.h"

struct sim_store {
    int fd;
    void *mem;
    size_t size;
};

/* Creates the file fully initialised under a temporary name, then links it into place (os/file_posix.h). */
static int create_file(const char *path, const sim_store_layout *lay)
{
    return comem_file_create_whole(path, lay->size, lay->init, lay->ctx, false);
}

/* An auto-named card file left by another comem version (another layout) is
 * replaced, not reused: the runtime directory is this user's own. The old
 * file's lock serialises replacers, and only the one that still finds the old
 * inode at path renames a fresh card over it; the others reopen. Processes
 * still mapping the old file keep it. */
static int replace_stale_file(int stale_fd, const char *path, const sim_store_layout *lay)
{
    if (flock(stale_fd, LOCK_EX) != 0)
        return COMEM_EIO;
    struct stat now, old;
    int rc = COMEM_OK;
    if (fstat(stale_fd, &old) == 0 && stat(path, &now) == 0 && now.st_ino == old.st_ino && now.st_dev == old.st_dev) {
        char tmp[PATH_MAX + 32];
        snprintf(tmp, sizeof tmp, "%s.%d.new", path, (int)getpid());
        unlink(tmp);
        rc = create_file(tmp, lay) == COMEM_OK && rename(tmp, path) == 0 ? COMEM_OK : COMEM_EIO;
        if (rc == COMEM_OK)
            comem_warn("sim: %s was a simulated card of another comem version; replaced it with a new card", path);
        unlink(tmp);
    }
    flock(stale_fd, LOCK_UN);
    return rc;
}

/* Whether fd holds a card of this build's layout. */
static bool is_this_layout(int fd, off_t size, const sim_store_layout *lay)
{
    if (size < (off_t)lay->size)
        return false;
    void *mem = mmap(NULL, lay->size, PROT_READ, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED)
        return false;
    bool ok = lay->is_ours(mem);
    munmap(mem, lay->size);
    return ok;
}

/* Opens (creating it if absent) the card file at path, checked to be this user's, private, and of
 * this build's layout; *fd_out on success. */
static int open_card_file(const char *path, bool replace, const sim_store_layout *lay, int *fd_out)
{
    for (int attempt = 0;; attempt++) {
        int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0 && errno == ENOENT) {
            if (create_file(path, lay) != COMEM_OK) {
                comem_error("sim: cannot create %s: %s", path, strerror(errno));
                return COMEM_EIO;
            }
            fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        }
        if (fd < 0) {
            comem_error("sim: cannot open %s: %s", path, strerror(errno));
            return COMEM_EIO;
        }
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077) != 0) {
            comem_error("sim: refusing %s: it must be a regular file of uid %d with mode 0600", path, (int)getuid());
            close(fd);
            return COMEM_EPERM;
        }
        if (is_this_layout(fd, st.st_size, lay)) {
            *fd_out = fd;
            return COMEM_OK;
        }
        if (!replace || attempt == 3) {
            comem_error("sim: %s is not a simulated card of this comem version; remove it or choose another path=",
                        path);
            close(fd);
            return COMEM_EINVAL;
        }
        int rc = replace_stale_file(fd, path, lay);
        close(fd);
        if (rc != COMEM_OK) {
            comem_error("sim: cannot replace %s, a card of another comem version: %s", path, strerror(errno));
            return rc;
        }
    }
}

int comem_sim_store_open(const char *path, bool replace_other_layout, const sim_store_layout *layout,
                         sim_store **out, void **mem)
{
    int fd;
    int rc = open_card_file(path, replace_other_layout, layout, &fd);
    if (rc != COMEM_OK)
        return rc;
    sim_store *st = malloc(sizeof *st);
    void *m = st ? mmap(NULL, layout->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (m == MAP_FAILED) {
        free(st);
        close(fd);
        return st ? COMEM_EIO : COMEM_ENOMEM;
    }
    *st = (sim_store){.fd = fd, .mem = m, .size = layout->size};
    *out = st;
    *mem = m;
    return COMEM_OK;
}

void comem_sim_store_close(sim_store *st)
{
    if (!st)
        return;
    munmap(st->mem, st->size);
    close(st->fd);
    free(st);
}
