/* coord/socket.c - the coordinator's address: claimed, locked, listened on, and given back only if ours. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/rundir.h"
#include "comem/common.h"
#include "coord/coord_internal.h"
#include "os/lock.h"

/*
 * The address, and what may be done to it. A coordinator first makes sure the
 * address is free to take: whatever is there must be something a listener may
 * replace (os/stream.h: on Linux nothing or a socket of this user; never a
 * regular file, a directory, or another user's socket: those are refused,
 * untouched). It then takes an exclusive lock on the lock file beside it
 * (PATH.lock on Linux; in the runtime folder on Windows: comem_socket_sidecar),
 * created once and left in place, never truncated or removed, so two
 * coordinators can never both think they own the address, even when started
 * at the same instant; the loser gives COMEM_EEXIST and touches nothing. Under
 * the lock an address that answers belongs to a live coordinator that took no
 * lock (COMEM_EEXIST too); a stale socket that does not is replaced by the
 * listener. At exit only the socket this process bound (same inode) is
 * removed, never a newer one someone else put at the path.
 */

/* What is at the address may be replaced: nothing, or a stale one of ours. COMEM_EPERM (said) otherwise. */
static int address_replaceable(const char *path)
{
    char why[PATH_MAX + 128] = "";
    int rc = comem_listen_check(path, why, sizeof why);
    if (rc == COMEM_EPERM || rc == COMEM_ERANGE)
        comem_error("%s", why);
    return rc;
}

static int take_lock(comem_coord_srv *s)
{
    char lock[PATH_MAX + 8];
    int rc = comem_socket_sidecar(s->cfg.socket_path, ".lock", lock, sizeof lock);
    if (rc != COMEM_OK) {
        comem_error("no lock file can go beside %s: %s", s->cfg.socket_path, comem_status_str(rc));
        return rc;
    }
    char me[192];
    comem_proc_self_user(me, sizeof me);
    errno = 0;
    rc = comem_lockfile_take(lock, &s->lock);
    int err = errno;
    if (rc == COMEM_EPERM)
        comem_error("refusing %s: the lock file must be a regular file of uid %s", lock, me);
    else if (rc != COMEM_OK && rc != COMEM_EEXIST) /* EEXIST: another coordinator owns this address */
        comem_error("cannot lock %s: %s", lock, err ? strerror(err) : comem_status_str(rc));
    return rc;
}

int coord_socket_claim(comem_coord_srv *s)
{
    int rc = address_replaceable(s->cfg.socket_path);
    if (rc == COMEM_OK)
        rc = take_lock(s);
    return rc;
}

int coord_socket_bind(comem_coord_srv *s)
{
    /* Under the lock. A live coordinator answers a connect; a stale socket does not and is replaced. */
    comem_stream *probe = NULL;
    if (comem_connect(s->cfg.socket_path, 0, &probe) == COMEM_OK) {
        comem_stream_close(probe);
        return COMEM_EEXIST;
    }
    int rc = address_replaceable(s->cfg.socket_path); /* again: it may have changed before the lock */
    if (rc != COMEM_OK)
        return rc;
    /* Born this user's alone; the listener remembers what it bound, the only socket it removes at exit. */
    char why[PATH_MAX + 64] = "";
    rc = comem_listen(s->cfg.socket_path, &s->listener, why, sizeof why);
    if (rc != COMEM_OK) /* never an address we did not bind given back: another coordinator may own it */
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
