/* os/dl_win.c - os/dl.h over LoadLibraryW (Windows): paths are UTF-16 at the API. */
#include "os/dl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "os/wide_win.h"

/* The system's words for the last error, without its line break. */
static void last_error(char *why, size_t whylen, DWORD code)
{
    if (!why || !whylen)
        return;
    char msg[256] = "";
    FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, code, 0, msg, sizeof msg, NULL);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r' || msg[n - 1] == ' '))
        msg[--n] = '\0';
    snprintf(why, whylen, "%s (error %lu)", n ? msg : "cannot load it", (unsigned long)code);
}

comem_dl *comem_dl_open(const char *path, bool prefer_loaded, char *why, size_t whylen)
{
    wchar_t *wide = comem_wide(path);
    if (!wide) {
        if (why && whylen)
            snprintf(why, whylen, "the path is not UTF-8");
        return NULL;
    }
    HMODULE h = NULL;
    if (!prefer_loaded || !GetModuleHandleExW(0, wide, &h)) /* a loaded copy: its count is raised */
        h = LoadLibraryW(wide);
    DWORD code = GetLastError();
    free(wide);
    if (!h)
        last_error(why, whylen, code);
    return (comem_dl *)h;
}

bool comem_dl_loaded(const char *path)
{
    wchar_t *wide = comem_wide(path);
    HMODULE h = NULL;
    bool loaded = wide && GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT, wide, &h);
    free(wide);
    return loaded;
}

void *comem_dl_sym(comem_dl *dl, const char *name)
{
    if (!dl)
        return NULL;
    FARPROC f = GetProcAddress((HMODULE)dl, name);
    void *p;
    memcpy(&p, &f, sizeof p); /* a function's address as data, as dlsym gives it */
    return p;
}

void comem_dl_close(comem_dl *dl)
{
    if (dl)
        FreeLibrary((HMODULE)dl);
}
