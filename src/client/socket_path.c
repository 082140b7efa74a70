/* client/socket_path.c - where the coordinator's socket is: an argument, $COMEM_SOCKET, or the per-user default. */
#include <stdio.h>
#include <stdlib.h>

#include "base/rundir.h"
#include "client/client_internal.h"
#include "comem/comem.h"

int comem_default_socket(char *buf, size_t len)
{
    if (!buf || len == 0)
        return COMEM_EINVAL;
    char dir[COMEM_CLIENT_PATH_MAX];
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
