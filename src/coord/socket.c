/* coord/socket.c - the listening socket's path: claimed, locked, bound, and removed only if ours. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/log.h"
#include "comem/common.h"
#include "coord/coord_internal.h"
#include "os/lock.h"

/*
 * The socket path, and what may be done to it. A coordinator first makes sure
 * the path is free to take: whatever is there must be a socket of this user
 * (never a regular file, a directory, or another user's socket: those are
 * refused, untouched). It then takes an exclusive lock on PATH.lock (a file
 * that is created once and left in place, never truncated or removed), so two
 * coordinators can never both think they own PATH, even when started at the
 * same instant; the loser gives COMEM_EEXIST and touches nothing. Under the
 * lock a socket that answers belongs to a live coordinator that took no lock
 * (COMEM_EEXIST too); one that does not answer is stale and is replaced. At
 * exit only the socket this process bound is removed (same inode), never a
 * newer one someone else put at the path.
 */

static const char *kind_of(mode_t m)
{
    return S_ISREG(m) ? "a regular file" : S_ISDIR(m) ? "a directory" : S_ISLNK(m) ? "a symbolic link" : "not a socket";
}

/* What is at the path may be replaced: nothing, or a socket of ours. COMEM_EPERM (and why) otherwise. */
static int path_replaceable(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? COMEM_OK : COMEM_EIO;
    if (!S_ISSOCK(st.st_mode)) {
        comem_error("refusing %s: it is %s, not a coordinator's socket; choose another --socket path", path,
                    kind_of(st.st_mode));
        return COMEM_EPERM;
    }
    if (st.st_uid != getuid()) {
        comem_error("refusing %s: the socket belongs to uid %u", path, (unsigned)st.st_uid);
        return COMEM_EPERM;
    }
    return COMEM_OK;
}

static int take_lock(comem_coord_srv *s)
{
    char lock[PATH_MAX + 8];
    if ((size_t)snprintf(lock, sizeof lock, "%s.lock", s->cfg.socket_path) >= sizeof lock)
        return COMEM_ERANGE;
    errno = 0;
    int rc = comem_lockfile_take(lock, &s->lock);
    int err = errno;
    if (rc == COMEM_EPERM)
        comem_error("refusing %s: the lock file must be a regular file of uid %u", lock, (unsigned)getuid());
    else if (rc != COMEM_OK && rc != COMEM_EEXIST) /* EEXIST: another coordinator owns this socket path */
        comem_error("cannot lock %s: %s", lock, err ? strerror(err) : comem_status_str(rc));
    return rc;
}

int coord_socket_claim(comem_coord_srv *s)
{
    struct sockaddr_un addr;
    if (strlen(s->cfg.socket_path) >= sizeof addr.sun_path) {
        comem_error("socket path too long: %s", s->cfg.socket_path);
        return COMEM_ERANGE;
    }
    int rc = path_replaceable(s->cfg.socket_path);
    if (rc == COMEM_OK)
        rc = take_lock(s);
    return rc;
}

int coord_socket_bind(comem_coord_srv *s)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    strcpy(addr.sun_path, s->cfg.socket_path);
    /* Under the lock. A live coordinator answers a connect; a stale socket does not and is replaced. */
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0 && connect(probe, (struct sockaddr *)&addr, sizeof addr) == 0) {
        close(probe);
        return COMEM_EEXIST;
    }
    if (probe >= 0)
        close(probe);
    int rc = path_replaceable(s->cfg.socket_path); /* again: it may have changed before the lock */
    if (rc != COMEM_OK)
        return rc;
    if (unlink(s->cfg.socket_path) != 0 && errno != ENOENT) {
        comem_error("cannot replace the stale socket %s: %s", s->cfg.socket_path, strerror(errno));
        return COMEM_EIO;
    }
    /* Born 0600; the listener remembers what it bound, the only socket it removes at exit. */
    char why[PATH_MAX + 64] = "";
    rc = comem_listen(s->cfg.socket_path, &s->listener, why, sizeof why);
    if (rc != COMEM_OK) /* never a path we did not bind removed: another coordinator may own it */
        comem_error("%s", why[0] ? why : comem_status_str(rc));
    return rc;
}

void coord_socket_release(comem_coord_srv *s)
{
    comem_listener_close(s->listener); /* only the socket this process bound, never one put there since */
    s->listener = NULL;
    comem_lockfile_release(s->lock); /* the file stays for the next coordinator */
    s->lock = NULL;
}
