/* base/rundir.c - the private per-user runtime directory, and the socket paths in it. */
#include "base/rundir.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/log.h"
#include "comem/comem.h"
#include "comem/common.h"
#include "os/env.h"

/* The reason, logged as an error and, where asked for, written to why. */
static int refuse(int status, char *why, size_t whylen, const char *fmt, ...) COMEM_PRINTF(4, 5);
static int refuse(int status, char *why, size_t whylen, const char *fmt, ...)
{
    char text[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    comem_error("%s", text);
    if (why && whylen)
        snprintf(why, whylen, "%s", text);
    return status;
}

int comem_private_dir_why(const char *path, char *why, size_t whylen)
{
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return refuse(COMEM_EIO, why, whylen, "cannot create %s: %s", path, strerror(errno));
    struct stat st;
    if (lstat(path, &st) != 0)
        return refuse(COMEM_EIO, why, whylen, "cannot stat %s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return refuse(COMEM_EPERM, why, whylen, "refusing %s: it must be a directory (not a link or a file)", path);
    if (st.st_uid != getuid())
        return refuse(COMEM_EPERM, why, whylen, "refusing %s: it belongs to uid %d, not to uid %d", path,
                      (int)st.st_uid, (int)getuid());
    if ((st.st_mode & 077) != 0)
        return refuse(COMEM_EPERM, why, whylen,
                      "refusing %s: its mode is %04o, and others must not reach the socket in it: chmod 700 %s "
                      "(or point COMEM_RUNTIME_DIR at a folder made with mkdir -m 700)",
                      path, (unsigned)(st.st_mode & 07777), path);
    return COMEM_OK;
}

int comem_private_dir(const char *path) { return comem_private_dir_why(path, NULL, 0); }

int comem_runtime_dir_why(char *buf, size_t len, char *why, size_t whylen)
{
    const char *over = comem_env("COMEM_RUNTIME_DIR");
    const char *xdg = comem_env("XDG_RUNTIME_DIR");
    struct stat st;
    int n;
    if (over && *over)
        n = snprintf(buf, len, "%s", over);
    else if (xdg && *xdg && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode))
        n = snprintf(buf, len, "%s/comem", xdg);
    else
        n = snprintf(buf, len, "/tmp/comem-%d", (int)getuid());
    if (n < 0 || (size_t)n >= len) {
        if (why && whylen)
            snprintf(why, whylen, "the runtime directory's path is too long for a Unix socket in it");
        return COMEM_ERANGE;
    }
    return comem_private_dir_why(buf, why, whylen);
}

int comem_runtime_dir(char *buf, size_t len) { return comem_runtime_dir_why(buf, len, NULL, 0); }

int comem_default_socket_why(char *buf, size_t len, char *why, size_t whylen)
{
    if (!buf || len == 0)
        return COMEM_EINVAL;
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int rc = comem_runtime_dir_why(dir, sizeof dir, why, whylen);
    if (rc != COMEM_OK)
        return rc;
    int n = snprintf(buf, len, "%s/comem.sock", dir);
    if (n < 0 || (size_t)n >= len) {
        if (why && whylen)
            snprintf(why, whylen, "%s/comem.sock is too long for a Unix socket", dir);
        return COMEM_ERANGE;
    }
    return COMEM_OK;
}

int comem_socket_name_check(const char *name, char *buf, size_t len, char *why, size_t whylen)
{
    /* A Unix socket path must fit sun_path with its NUL; say so rather than truncate. */
    int n = snprintf(buf, len, "%s", name);
    if (n < 0 || (size_t)n >= len) {
        if (why && whylen)
            snprintf(why, whylen, "the socket path is too long for a Unix socket");
        return COMEM_ERANGE;
    }
    return COMEM_OK;
}

int comem_socket_sidecar(const char *socket, const char *suffix, char *buf, size_t len)
{
    return (size_t)snprintf(buf, len, "%s%s", socket, suffix) < len ? COMEM_OK : COMEM_ERANGE;
}
