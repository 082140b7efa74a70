/*
 * base/rundir_win.c - base/rundir.h on Windows: the private per-user folder and the pipe's name.
 *
 * The folder is %LOCALAPPDATA%\comem (COMEM_RUNTIME_DIR overrides it, with the same checks),
 * created with a protected DACL that grants this user alone. An existing folder is refused
 * unless it is a real folder (not a junction or a link), owned by this user (or by the
 * Administrators group when this process is one of them: what an elevated process creates),
 * and no one but this user, SYSTEM and the Administrators may reach it: the Windows reading of
 * Linux's "owned by this uid, mode 0700".
 *
 * Where Linux has a socket in that folder, Windows has a named pipe, whose names live in a
 * namespace of their own: \\.\pipe\comem-<the user's SID>, one per user, as the socket is one
 * per user's runtime directory. The pipe's own DACL (the coordinator's) keeps other users out.
 */
#include "base/rundir.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>
#include <aclapi.h>
#include <sddl.h>

#include "base/log.h"
#include "comem/comem.h"
#include "comem/common.h"
#include "os/env.h"
#include "os/user_win.h"
#include "os/wide_win.h"

#define PIPE_NAME_MAX 256 /* what CreateNamedPipe takes, the \\.\pipe\ prefix included */
#define SID_TEXT_MAX 192   /* a SID as text: S-1-5-21-... with at most 15 sub-authorities */

static int refuse(int status, char *why, size_t whylen, const char *fmt, ...) __attribute__((format(gnu_printf, 4, 5)));
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

static bool is_well_known(PSID sid, WELL_KNOWN_SID_TYPE type)
{
    return IsWellKnownSid(sid, type) != 0;
}

/* Whether this process is a member of the Administrators group. */
static bool is_admin(void)
{
    BYTE buf[SECURITY_MAX_SID_SIZE];
    DWORD n = sizeof buf;
    BOOL member = FALSE;
    if (!CreateWellKnownSid(WinBuiltinAdministratorsSid, NULL, buf, &n))
        return false;
    return CheckTokenMembership(NULL, buf, &member) && member;
}

/* The folder's owner and DACL checked as the header says: COMEM_OK or COMEM_EPERM with why. */
static int check_security(const char *path, const wchar_t *wpath, PSID me, char *why, size_t whylen)
{
    PSID owner = NULL;
    PACL dacl = NULL;
    PSECURITY_DESCRIPTOR sd = NULL;
    DWORD r = GetNamedSecurityInfoW(wpath, SE_FILE_OBJECT, OWNER_SECURITY_INFORMATION | DACL_SECURITY_INFORMATION,
                                    &owner, NULL, &dacl, NULL, &sd);
    if (r != ERROR_SUCCESS)
        return refuse(COMEM_EIO, why, whylen, "cannot read who may reach %s (error %lu)", path, (unsigned long)r);
    int rc = COMEM_OK;
    char who[SID_TEXT_MAX] = "?";
    if (!EqualSid(owner, me) && !(is_well_known(owner, WinBuiltinAdministratorsSid) && is_admin())) {
        comem_sid_text(owner, who, sizeof who);
        rc = refuse(COMEM_EPERM, why, whylen, "refusing %s: it belongs to %s, not to this user", path, who);
    } else if (!dacl) {
        rc = refuse(COMEM_EPERM, why, whylen,
                    "refusing %s: it has no access list, so everyone may reach it: make it yours alone "
                    "(icacls \"%s\" /inheritance:r /grant:r \"%%USERNAME%%:F\") or point COMEM_RUNTIME_DIR at a "
                    "folder that is",
                    path, path);
    } else {
        for (DWORD i = 0; i < dacl->AceCount && rc == COMEM_OK; i++) {
            ACE_HEADER *ace = NULL;
            if (!GetAce(dacl, i, (void **)&ace) || ace->AceType != ACCESS_ALLOWED_ACE_TYPE)
                continue; /* denials only narrow who may reach it */
            PSID sid = (PSID)&((ACCESS_ALLOWED_ACE *)ace)->SidStart;
            if (EqualSid(sid, me) || is_well_known(sid, WinLocalSystemSid) ||
                is_well_known(sid, WinBuiltinAdministratorsSid) || is_well_known(sid, WinCreatorOwnerSid))
                continue;
            comem_sid_text(sid, who, sizeof who);
            rc = refuse(COMEM_EPERM, why, whylen,
                        "refusing %s: %s may reach it, and others must not reach comem's files: make it yours "
                        "alone (icacls \"%s\" /inheritance:r /grant:r \"%%USERNAME%%:F\") or point "
                        "COMEM_RUNTIME_DIR at a folder that is",
                        path, who, path);
        }
    }
    LocalFree(sd);
    return rc;
}

int comem_private_dir_why(const char *path, char *why, size_t whylen)
{
    wchar_t *wpath = comem_wide(path);
    if (!wpath)
        return refuse(COMEM_EINVAL, why, whylen, "the folder's name is not UTF-8");
    BYTE ubuf[COMEM_USER_SID_ROOM];
    PSID me = comem_user_sid(GetCurrentProcess(), ubuf, sizeof ubuf);
    int rc = COMEM_OK;
    if (!me) {
        rc = refuse(COMEM_EIO, why, whylen, "cannot tell which user this process runs as (error %lu)",
                    (unsigned long)GetLastError());
        goto out;
    }
    /* Born private: protected (nothing inherited), this user alone, for the folder and what it holds. */
    char me_text[SID_TEXT_MAX], sddl[160];
    SECURITY_ATTRIBUTES sa = {sizeof sa, NULL, FALSE};
    wchar_t *wsddl = NULL;
    if (comem_sid_text(me, me_text, sizeof me_text)) {
        snprintf(sddl, sizeof sddl, "D:P(A;OICI;FA;;;%s)", me_text);
        wsddl = comem_wide(sddl);
    }
    if (!wsddl ||
        !ConvertStringSecurityDescriptorToSecurityDescriptorW(wsddl, SDDL_REVISION_1, &sa.lpSecurityDescriptor, NULL)) {
        free(wsddl);
        rc = refuse(COMEM_EIO, why, whylen, "cannot make a private access list for %s", path);
        goto out;
    }
    free(wsddl);
    BOOL made = CreateDirectoryW(wpath, &sa);
    DWORD err = GetLastError();
    LocalFree(sa.lpSecurityDescriptor);
    if (!made && err != ERROR_ALREADY_EXISTS) {
        rc = refuse(COMEM_EIO, why, whylen, "cannot create %s (error %lu)", path, (unsigned long)err);
        goto out;
    }
    DWORD attrs = GetFileAttributesW(wpath);
    if (attrs == INVALID_FILE_ATTRIBUTES) {
        rc = refuse(COMEM_EIO, why, whylen, "cannot look at %s (error %lu)", path, (unsigned long)GetLastError());
        goto out;
    }
    if (!(attrs & FILE_ATTRIBUTE_DIRECTORY) || (attrs & FILE_ATTRIBUTE_REPARSE_POINT)) {
        rc = refuse(COMEM_EPERM, why, whylen, "refusing %s: it must be a folder (not a link, a junction or a file)",
                    path);
        goto out;
    }
    rc = check_security(path, wpath, me, why, whylen);
out:
    free(wpath);
    return rc;
}

int comem_private_dir(const char *path) { return comem_private_dir_why(path, NULL, 0); }

int comem_runtime_dir_why(char *buf, size_t len, char *why, size_t whylen)
{
    if (!buf || len == 0)
        return COMEM_EINVAL;
    const char *over = comem_env("COMEM_RUNTIME_DIR");
    wchar_t local[MAX_PATH];
    char base[MAX_PATH * 3];
    DWORD k; /* 0: failed; MAX_PATH or more: too long (the size it needs) */
    int n;
    if (over && *over)
        n = snprintf(buf, len, "%s", over);
    else if ((k = GetEnvironmentVariableW(L"LOCALAPPDATA", local, MAX_PATH)) > 0 && k < MAX_PATH &&
             comem_narrow(local, base, sizeof base))
        n = snprintf(buf, len, "%s\\comem", base);
    else if ((k = GetTempPathW(MAX_PATH, local)) > 0 && k < MAX_PATH && comem_narrow(local, base, sizeof base))
        n = snprintf(buf, len, "%scomem", base); /* GetTempPath's path ends in a backslash */
    else
        return refuse(COMEM_EIO, why, whylen, "neither %%LOCALAPPDATA%% nor the temporary folder can be read");
    if (n < 0 || (size_t)n >= len) {
        if (why && whylen)
            snprintf(why, whylen, "the runtime folder's path is too long");
        return COMEM_ERANGE;
    }
    return comem_private_dir_why(buf, why, whylen);
}

int comem_runtime_dir(char *buf, size_t len) { return comem_runtime_dir_why(buf, len, NULL, 0); }

int comem_default_socket_why(char *buf, size_t len, char *why, size_t whylen)
{
    if (!buf || len == 0)
        return COMEM_EINVAL;
    char me_text[SID_TEXT_MAX];
    if (!comem_user_sid_text(GetCurrentProcess(), me_text, sizeof me_text))
        return refuse(COMEM_EIO, why, whylen, "cannot tell which user this process runs as (error %lu)",
                      (unsigned long)GetLastError());
    int n = snprintf(buf, len, "\\\\.\\pipe\\comem-%s", me_text);
    if (n < 0 || (size_t)n >= len) {
        if (why && whylen)
            snprintf(why, whylen, "the pipe's name does not fit %zu bytes", len);
        return COMEM_ERANGE;
    }
    return COMEM_OK;
}

int comem_socket_name_check(const char *name, char *buf, size_t len, char *why, size_t whylen)
{
    int n = snprintf(buf, len, "%s", name);
    if (n < 0 || (size_t)n >= len || (size_t)n >= PIPE_NAME_MAX) {
        if (why && whylen)
            snprintf(why, whylen, "the pipe's name is too long (a pipe's name has at most %d characters)",
                     PIPE_NAME_MAX);
        return COMEM_ERANGE;
    }
    if (strncmp(name, "\\\\.\\pipe\\", 9) != 0) {
        if (why && whylen)
            snprintf(why, whylen, "'%s' is not a pipe's name: on Windows the coordinator listens on \\\\.\\pipe\\NAME",
                     name);
        return COMEM_EINVAL;
    }
    return COMEM_OK;
}

int comem_socket_sidecar(const char *socket, const char *suffix, char *buf, size_t len)
{
    static const char pipe_prefix[] = "\\\\.\\pipe\\";
    const char *name = strncmp(socket, pipe_prefix, sizeof pipe_prefix - 1) == 0 ? socket + sizeof pipe_prefix - 1
                                                                                : socket;
    char dir[MAX_PATH * 3];
    int rc = comem_runtime_dir(dir, sizeof dir);
    if (rc != COMEM_OK)
        return rc;
    if (strpbrk(name, "\\/:*?\"<>|"))
        return COMEM_EINVAL; /* the pipe's name is no file name */
    return (size_t)snprintf(buf, len, "%s\\%s%s", dir, name, suffix) < len ? COMEM_OK : COMEM_ERANGE;
}
