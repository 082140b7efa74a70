/*
 * tools/simulate/tmpdir.c - a private scratch folder where the user keeps temporary files.
 */
#include "simulate/tmpdir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

int cli_mkdtemp(char *buf, size_t len, const char *prefix)
{
    const char *tmp = getenv("TMPDIR");
    /* room for "/PREFIX-XXXXXX/comem.sock" and the terminator inside sun_path */
    size_t need = strlen(prefix) + sizeof "/-XXXXXX/comem.sock";
    if (!tmp || tmp[0] != '/' || strlen(tmp) + need > sizeof(((struct sockaddr_un *)0)->sun_path))
        tmp = "/tmp";
    int n = snprintf(buf, len, "%s/%s-XXXXXX", tmp, prefix);
    if (n < 0 || (size_t)n >= len) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return mkdtemp(buf) ? 0 : -1;
}
