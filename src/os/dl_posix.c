/* os/dl_posix.c - os/dl.h over dlopen (Linux; any POSIX system). */
#include "os/dl.h"

#include <dlfcn.h>
#include <stdio.h>

comem_dl *comem_dl_open(const char *path, bool prefer_loaded, char *why, size_t whylen)
{
    void *h = prefer_loaded ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (!h)
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h && why && whylen) {
        const char *e = dlerror();
        snprintf(why, whylen, "%s", e ? e : "unknown dlopen error");
    }
    return (comem_dl *)h;
}

bool comem_dl_loaded(const char *path)
{
    void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    if (h)
        dlclose(h); /* NOLOAD raised its count */
    return h != NULL;
}

void *comem_dl_sym(comem_dl *dl, const char *name) { return dl ? dlsym(dl, name) : NULL; }

void comem_dl_close(comem_dl *dl)
{
    if (dl)
        dlclose(dl);
}
