/*
 * base/socket_name.c - which name a coordinator is reached by (base/rundir.h), the same on every
 * system: the name given, else $COMEM_SOCKET, else the default in the runtime folder. What a
 * given name may be is the platform's (comem_socket_name_check: rundir.c, rundir_win.c).
 */
#include <stdlib.h>

#include "base/rundir.h"
#include "comem/comem.h"
#include "os/env.h"

int comem_socket_resolve_why(const char *arg, char *buf, size_t len, char *why, size_t whylen)
{
    const char *env = comem_env("COMEM_SOCKET");
    const char *name = arg && *arg ? arg : env && *env ? env : NULL;
    if (!name)
        return comem_default_socket_why(buf, len, why, whylen);
    return comem_socket_name_check(name, buf, len, why, whylen);
}

int comem_socket_resolve(const char *arg, char *buf, size_t len)
{
    return comem_socket_resolve_why(arg, buf, len, NULL, 0);
}

int comem_default_socket(char *buf, size_t len) { return comem_default_socket_why(buf, len, NULL, 0); }
