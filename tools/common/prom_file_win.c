/*
 * tools/common/prom_file_win.c - the metrics text file a collector reads (comem_prom_write_atomic,
 * prom.h) on Windows: a new file beside path (CREATE_NEW: nothing planted there is opened), written,
 * flushed to disk, then moved over path in one step (MoveFileExW with MOVEFILE_REPLACE_EXISTING),
 * so a collector reads the old file or the new one, never half. It is owned by this user and takes
 * the folder's inherited access list (a collector service reads it through the folder's). What is
 * at path must be this user's regular file: a folder, a link or junction (a reparse point), or
 * another owner's file is left alone.
 */
#include "common/prom.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "os/user_win.h"
#include "os/wide_win.h"

/* -1 with errno e, the wide strings freed. */
static int fail(int e, wchar_t *a, wchar_t *b)
{
    free(a);
    free(b);
    errno = e;
    return -1;
}

/* A descriptor naming this user the owner and no access list of its own (the folder's is inherited). */
static bool owned_by_me(SECURITY_DESCRIPTOR *sd, BYTE *info, DWORD len)
{
    PSID me = comem_user_sid(GetCurrentProcess(), info, len);
    return me && InitializeSecurityDescriptor(sd, SECURITY_DESCRIPTOR_REVISION) && SetSecurityDescriptorOwner(sd, me, FALSE);
}

int comem_prom_write_atomic(const char *path, const char *text)
{
    wchar_t *w = comem_wide(path);
    if (!w)
        return fail(EINVAL, NULL, NULL);
    DWORD attr = GetFileAttributesW(w);
    if (attr != INVALID_FILE_ATTRIBUTES) {
        if (attr & (FILE_ATTRIBUTE_DIRECTORY | FILE_ATTRIBUTE_REPARSE_POINT))
            return fail(EEXIST, w, NULL);
        HANDLE h = CreateFileW(w, READ_CONTROL, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                               OPEN_EXISTING, FILE_FLAG_OPEN_REPARSE_POINT, NULL);
        bool mine = h != INVALID_HANDLE_VALUE && comem_user_owns(h);
        if (h != INVALID_HANDLE_VALUE)
            CloseHandle(h);
        if (!mine)
            return fail(EPERM, w, NULL);
    }
    static LONG g_seq;
    char tmp_name[MAX_PATH * 3];
    snprintf(tmp_name, sizeof tmp_name, "%s.%lu-%ld.tmp", path, (unsigned long)GetCurrentProcessId(),
             (long)InterlockedIncrement(&g_seq)); /* a name the collector ignores: not *.prom */
    wchar_t *tmp = comem_wide(tmp_name);
    if (!tmp)
        return fail(ENOMEM, w, NULL);
    SECURITY_DESCRIPTOR sd;
    BYTE info[COMEM_USER_SID_ROOM];
    SECURITY_ATTRIBUTES sa = {.nLength = sizeof sa, .lpSecurityDescriptor = &sd};
    if (!owned_by_me(&sd, info, sizeof info))
        return fail(EIO, w, tmp);
    HANDLE h = CreateFileW(tmp, GENERIC_WRITE, 0, &sa, CREATE_NEW, FILE_ATTRIBUTE_NORMAL, NULL);
    if (h == INVALID_HANDLE_VALUE)
        return fail(GetLastError() == ERROR_ACCESS_DENIED ? EACCES : EIO, w, tmp);
    size_t n = strlen(text), off = 0;
    while (off < n) {
        DWORD chunk = n - off > (1u << 30) ? (1u << 30) : (DWORD)(n - off), wrote = 0;
        if (!WriteFile(h, text + off, chunk, &wrote, NULL) || wrote == 0)
            break;
        off += wrote;
    }
    bool ok = off == n && FlushFileBuffers(h);
    CloseHandle(h);
    if (ok && MoveFileExW(tmp, w, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH)) {
        free(w);
        free(tmp);
        return 0;
    }
    DeleteFileW(tmp);
    return fail(EIO, w, tmp);
}
