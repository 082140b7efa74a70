/* os/xlock_win.c - the lock between processes on Windows (os/xlock.h): a named mutex of this user's. */
#include "os/xlock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "comem/common.h"
#include "os/user_win.h"
#include "os/wide_win.h"

struct comem_xlock {
    HANDLE mutex;
};

int comem_xlock_init(void *storage)
{
    memset(storage, 0, COMEM_XLOCK_STORAGE); /* nothing of the mutex lives in shared memory */
    return COMEM_OK;
}

int comem_xlock_attach(void *storage, const char *name, comem_xlock **out)
{
    (void)storage;
    wchar_t *wide = comem_user_object_name("xlock", name); /* users never meet under one name */
    SECURITY_ATTRIBUTES sa;
    if (!wide || !comem_user_only(&sa)) {
        free(wide);
        return COMEM_EIO;
    }
    HANDLE m = CreateMutexW(&sa, FALSE, wide); /* opens the one there, or makes it */
    DWORD err = GetLastError();
    free(wide);
    LocalFree(sa.lpSecurityDescriptor);
    if (!m)
        return err == ERROR_ACCESS_DENIED ? COMEM_EPERM : COMEM_EIO; /* another user's under our name */
    if (err == ERROR_ALREADY_EXISTS && !comem_user_owns(m)) {
        CloseHandle(m); /* made first by another user, who let us in: not ours to trust */
        return COMEM_EPERM;
    }
    comem_xlock *l = malloc(sizeof *l);
    if (!l) {
        CloseHandle(m);
        return COMEM_ENOMEM;
    }
    l->mutex = m;
    *out = l;
    return COMEM_OK;
}

int comem_xlock_take(comem_xlock *l, int64_t wait_ns, bool *recovered)
{
    if (recovered)
        *recovered = false;
    DWORD ms = wait_ns < 0 ? INFINITE
               : wait_ns >= (int64_t)(INFINITE - 1) * 1000000 ? INFINITE - 1
                                                              : (DWORD)((wait_ns + 999999) / 1000000);
    switch (WaitForSingleObject(l->mutex, ms)) {
    case WAIT_OBJECT_0:
        return COMEM_OK;
    case WAIT_ABANDONED: /* its holder ended holding it: ours now, with its half-done work */
        if (recovered)
            *recovered = true;
        return COMEM_OK;
    case WAIT_TIMEOUT:
        return COMEM_ETIMEDOUT;
    default:
        return COMEM_EIO;
    }
}

void comem_xlock_give(comem_xlock *l) { ReleaseMutex(l->mutex); }

void comem_xlock_detach(comem_xlock *l)
{
    if (!l)
        return;
    CloseHandle(l->mutex);
    free(l);
}
