/* base/token.c - COMEM_TOKEN, checked once for the coordinator and the client alike. */
#include "base/token.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comem/common.h"
#include "os/env.h"

int comem_token_from_env(char *buf, size_t len, char *err, size_t errlen)
{
    const char *t = comem_env("COMEM_TOKEN");
    size_t n = t ? strlen(t) : 0;
    if (n > COMEM_TOKEN_MAX || len < COMEM_TOKEN_MAX + 1) {
        if (err && errlen)
            snprintf(err, errlen, "COMEM_TOKEN is %zu bytes long; at most %d are allowed (the protocol carries no more)",
                     n, COMEM_TOKEN_MAX);
        if (len)
            buf[0] = '\0';
        return COMEM_EINVAL;
    }
    memcpy(buf, t ? t : "", n + 1);
    return COMEM_OK;
}
