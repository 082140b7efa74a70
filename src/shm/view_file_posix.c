/* shm/view_file_posix.c - the view beside the socket on Linux (shm/view_file.h): a file and an OFD lock. */
#include "shm/view_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "comem/common.h"
#include "os/file_posix.h"

struct view_file {
    int fd;
    void *mem;
    size_t size;
};

/*
 * Opens the view file that is there, only if it is one: a regular file of
 * this user, of the view's size, carrying the view's magic. Anything else at
 * the path is someone's file and is refused untouched (COMEM_EPERM).
 */
static int open_existing(const char *path, const view_file_layout *lay, int *out, bool *old)
{
    *old = false;
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? COMEM_ENOENT : errno == EMFILE || errno == ENFILE ? COMEM_EIO : COMEM_EPERM;
    struct stat st;
    unsigned char head[16];
    bool mine = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == getuid() &&
                pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head;
    view_file_kind kind = mine ? lay->judge(head, sizeof head, (int64_t)st.st_size) : VIEW_FILE_FOREIGN;
    if (kind != VIEW_FILE_OURS) {
        *old = kind == VIEW_FILE_OLDER; /* a view of an older comem: replaced whole, its readers keep their copy */
        close(fd);
        return COMEM_EPERM;
    }
    *out = fd;
    return COMEM_OK;
}

/* Creates the view complete under a temporary name and puts it in place: never half a view at path. */
static int create_new(const char *path, const view_file_layout *lay, bool replace)
{
    return comem_file_create_whole(path, lay->size, lay->init, lay->ctx, replace);
}

int comem_view_file_create(const char *path, const view_file_layout *layout, view_file **out, void **mem)
{
    int fd = -1;
    bool old = false;
    int rc = open_existing(path, layout, &fd, &old);
    if ((rc == COMEM_ENOENT || old) && (rc = create_new(path, layout, old)) == COMEM_OK)
        rc = open_existing(path, layout, &fd, &old);
    if (rc == COMEM_EPERM) {
        comem_error("refusing %s: it is not a comem view of this user (a file of that name is in the way; "
                    "choose another --socket path, or remove it if it is yours)",
                    path);
        return rc;
    }
    if (rc != COMEM_OK) {
        comem_error("cannot create the status view %s: %s", path, strerror(errno));
        return COMEM_EIO;
    }
    /* Held for the coordinator's life: the kernel drops it at exit, so readers can tell. The socket
       lock already keeps a second coordinator out, so a conflict here is a reader's probe. */
    struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    if (fcntl(fd, F_OFD_SETLK, &lk) != 0)
        comem_warn("cannot lock the status view %s (%s): readers cannot tell whether this coordinator runs", path,
                   strerror(errno));
    view_file *f = malloc(sizeof *f);
    void *m = f ? mmap(NULL, layout->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (m == MAP_FAILED) {
        free(f);
        close(fd);
        return COMEM_EIO;
    }
    *f = (view_file){.fd = fd, .mem = m, .size = layout->size};
    *out = f;
    *mem = m;
    return COMEM_OK;
}

int comem_view_file_open(const char *path, const view_file_layout *layout, view_file **out, const void **mem)
{
    size_t size = layout->size;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? COMEM_ENOENT : COMEM_EIO;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)size || st.st_uid != getuid()) {
        close(fd);
        return COMEM_EPERM;
    }
    view_file *f = malloc(sizeof *f);
    void *m = f ? mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (m == MAP_FAILED) {
        free(f);
        close(fd);
        return f ? COMEM_EIO : COMEM_ENOMEM;
    }
    *f = (view_file){.fd = fd, .mem = m, .size = size};
    *out = f;
    *mem = m;
    return COMEM_OK;
}

int comem_view_file_alive(view_file *f)
{
    /* Is the coordinator's lock there? (F_OFD_GETLK takes no lock itself.) */
    struct flock lk = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    if (fcntl(f->fd, F_OFD_GETLK, &lk) != 0)
        return -1;
    return lk.l_type == F_UNLCK ? 0 : 1;
}

void comem_view_file_close(view_file *f)
{
    if (!f)
        return;
    munmap(f->mem, f->size);
    close(f->fd);
    free(f);
}
