/* base/rundir.c - the private per-user runtime directory, and the socket paths in it. */
#include "base/rundir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/log.h"
#include "comem/comem.h"
#include "comem/common.h"

int comem_private_dir(const char *path)
{
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        comem_error("cannot create %s: %s", path, strerror(errno));
        return COMEM_EIO;
    }
    struct stat st;
    if (lstat(path, &st) != 0) {
        comem_error("cannot stat %s: %s", path, strerror(errno));
        return COMEM_EIO;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077) != 0) {
        comem_error("refusing %s: it must be a directory owned by uid %d with mode 0700", path, (int)getuid());
        return COMEM_EPERM;
    }
    return COMEM_OK;
}

int comem_runtime_dir(char *buf, size_t len)
{
    const char *over = getenv("COMEM_RUNTIME_DIR");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    int n;
    if (over && *over)
        n = snprintf(buf, len, "%s", over);
    else if (xdg && *xdg && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode))
        n = snprintf(buf, len, "%s/comem", xdg);
    else
        n = snprintf(buf, len, "/tmp/comem-%d", (int)getuid());
    if (n < 0 || (size_t)n >= len)
        return COMEM_ERANGE;
    return comem_private_dir(buf);
}

int comem_default_socket(char *buf, size_t len)
{
    if (!buf || len == 0)
        return COMEM_EINVAL;
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int rc = comem_runtime_dir(dir, sizeof dir);
    if (rc != COMEM_OK)
        return rc;
    int n = snprintf(buf, len, "%s/comem.sock", dir);
    if (n < 0 || (size_t)n >= len)
        return COMEM_ERANGE;
    return COMEM_OK;
}

int comem_socket_resolve(const char *arg, char *buf, size_t len)
{
    const char *env = getenv("COMEM_SOCKET");
    const char *path = arg && *arg ? arg : env && *env ? env : NULL;
    if (!path)
        return comem_default_socket(buf, len);
    /* A Unix socket path must fit sun_path with its NUL; say so rather than truncate. */
    int n = snprintf(buf, len, "%s", path);
    if (n < 0 || (size_t)n >= len)
        return COMEM_ERANGE;
    return COMEM_OK;
}
