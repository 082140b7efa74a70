/*
 * os/lock_win.c - a lock file on Windows (os/lock.h): LockFileEx on its first byte. The folder
 * it lies in is this user's alone (base/rundir_win.c checks that), so its owner is not looked at
 * again here; a path that is a folder or a reparse point (a link) is refused.
 */
#include "os/lock.h"

#include <stdlib.h>
#include <windows.h>

#include "comem/common.h"
#include "os/wide_win.h"

struct comem_lockfile {
    HANDLE h;
};

int comem_lockfile_take(const char *path, comem_lockfile **out)
{
    *out = NULL;
    wchar_t *w = comem_wide(path);
    if (!w)
        return COMEM_ENOMEM;
    /* Others may open it (the lock is what excludes); FILE_FLAG_OPEN_REPARSE_POINT: a link is opened as itself. */
    HANDLE h = CreateFileW(w, GENERIC_READ | GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE, NULL, OPEN_ALWAYS,
                           FILE_ATTRIBUTE_NORMAL | FILE_FLAG_OPEN_REPARSE_POINT, NULL);
    free(w);
    if (h == INVALID_HANDLE_VALUE)
        return GetLastError() == ERROR_ACCESS_DENIED ? COMEM_EPERM : COMEM_EIO;
    BY_HANDLE_FILE_INFORMATION info;
    if (!GetFileInformationByHandle(h, &info) ||
        (info.dwFileAttributes & (FILE_ATTRIBUTE_DIRECTORY | FILE_ATTRIBUTE_REPARSE_POINT))) {
        CloseHandle(h);
        return COMEM_EPERM;
    }
    OVERLAPPED ov = {0};
    if (!LockFileEx(h, LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ov)) {
        DWORD err = GetLastError();
        CloseHandle(h);
        return err == ERROR_LOCK_VIOLATION || err == ERROR_IO_PENDING ? COMEM_EEXIST : COMEM_EIO;
    }
    comem_lockfile *l = malloc(sizeof *l);
    if (!l) {
        CloseHandle(h);
        return COMEM_ENOMEM;
    }
    l->h = h;
    *out = l;
    return COMEM_OK;
}

void comem_lockfile_release(comem_lockfile *l)
{
    if (!l)
        return;
    CloseHandle(l->h); /* the lock goes with the handle */
    free(l);
}
