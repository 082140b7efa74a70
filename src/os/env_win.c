/* os/env_win.c - os/env.h over GetEnvironmentVariableW: the process's environment, not the C runtime's copy. */
#include "os/env.h"

#include <stdlib.h>
#include <windows.h>

#include "os/wide_win.h"

#define ENV_SLOTS 4
#define ENV_MAX 2048 /* bytes of UTF-8: a long path's worth */

const char *comem_env(const char *name)
{
    static _Thread_local char slots[ENV_SLOTS][ENV_MAX];
    static _Thread_local unsigned next;
    wchar_t *wname = comem_wide(name);
    if (!wname)
        return NULL;
    wchar_t value[ENV_MAX / 2];
    SetLastError(0);
    DWORD n = GetEnvironmentVariableW(wname, value, ENV_MAX / 2);
    DWORD err = GetLastError();
    free(wname);
    if (n == 0 && err == ERROR_ENVVAR_NOT_FOUND)
        return NULL;
    if (n >= ENV_MAX / 2)
        return NULL; /* longer than any value comem reads: taken as unset */
    if (n == 0)
        value[0] = L'\0'; /* set, and empty */
    char *out = slots[next++ % ENV_SLOTS];
    return comem_narrow(value, out, ENV_MAX) ? out : NULL;
}
