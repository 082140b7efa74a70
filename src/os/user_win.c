/* os/user_win.c - who a process runs as, and this user's private access list (os/user_win.h). */
#include "os/user_win.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <aclapi.h>
#include <sddl.h>

#include "os/wide_win.h"

PSID comem_user_sid(HANDLE process, BYTE *buf, DWORD len)
{
    HANDLE tok;
    if (!OpenProcessToken(process, TOKEN_QUERY, &tok))
        return NULL;
    DWORD n = 0;
    bool ok = GetTokenInformation(tok, TokenUser, buf, len, &n);
    CloseHandle(tok);
    return ok ? ((TOKEN_USER *)buf)->User.Sid : NULL;
}

bool comem_sid_text(PSID sid, char *buf, size_t len)
{
    LPWSTR s = NULL;
    if (!sid || !ConvertSidToStringSidW(sid, &s))
        return false;
    bool ok = comem_narrow(s, buf, len);
    LocalFree(s);
    return ok;
}

bool comem_user_sid_text(HANDLE process, char *buf, size_t len)
{
    BYTE info[COMEM_USER_SID_ROOM];
    return comem_sid_text(comem_user_sid(process, info, sizeof info), buf, len);
}

bool comem_user_only(SECURITY_ATTRIBUTES *sa)
{
    char me[192], sddl[448];
    *sa = (SECURITY_ATTRIBUTES){.nLength = sizeof *sa};
    if (!comem_user_sid_text(GetCurrentProcess(), me, sizeof me))
        return false;
    /* Owned by this user (not the Administrators an elevated token names for new objects, so an owner
       check finds it), protected (nothing inherited), and this user alone let in. */
    snprintf(sddl, sizeof sddl, "O:%sD:P(A;;GA;;;%s)", me, me);
    wchar_t *w = comem_wide(sddl);
    bool ok = w && ConvertStringSecurityDescriptorToSecurityDescriptorW(w, SDDL_REVISION_1, &sa->lpSecurityDescriptor,
                                                                         NULL);
    free(w);
    return ok;
}

bool comem_user_owns(HANDLE h)
{
    PSID owner = NULL;
    PSECURITY_DESCRIPTOR sd = NULL;
    if (GetSecurityInfo(h, SE_KERNEL_OBJECT, OWNER_SECURITY_INFORMATION, &owner, NULL, NULL, NULL, &sd) !=
        ERROR_SUCCESS)
        return false;
    BYTE info[COMEM_USER_SID_ROOM];
    PSID me = comem_user_sid(GetCurrentProcess(), info, sizeof info);
    bool mine = me && owner && EqualSid(owner, me);
    LocalFree(sd);
    return mine;
}

wchar_t *comem_user_object_name(const char *kind, const char *text)
{
    char sid[192], name[320];
    if (!comem_user_sid_text(GetCurrentProcess(), sid, sizeof sid))
        return NULL;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char *c = text; *c; c++)
        h = (h ^ (unsigned char)*c) * 0x100000001b3ULL;
    snprintf(name, sizeof name, "Local\\comem-%s-%s-%016llx", kind, sid, (unsigned long long)h);
    return comem_wide(name);
}
