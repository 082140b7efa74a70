/* os/user_win.c - who a process runs as, and this user's private access list (os/user_win.h). */
#include "os/user_win.h"

#include <stdio.h>
#include <stdlib.h>
#include <sddl.h>

#include "os/wide_win.h"

bool comem_user_sid_text(HANDLE process, char *buf, size_t len)
{
    HANDLE tok;
    if (!OpenProcessToken(process, TOKEN_QUERY, &tok))
        return false;
    BYTE info[sizeof(TOKEN_USER) + SECURITY_MAX_SID_SIZE];
    DWORD n = 0;
    bool ok = GetTokenInformation(tok, TokenUser, info, sizeof info, &n);
    CloseHandle(tok);
    LPWSTR s = NULL;
    if (!ok || !ConvertSidToStringSidW(((TOKEN_USER *)info)->User.Sid, &s))
        return false;
    ok = comem_narrow(s, buf, len);
    LocalFree(s);
    return ok;
}

bool comem_user_only(SECURITY_ATTRIBUTES *sa)
{
    char me[192], sddl[256];
    *sa = (SECURITY_ATTRIBUTES){.nLength = sizeof *sa};
    if (!comem_user_sid_text(GetCurrentProcess(), me, sizeof me))
        return false;
    snprintf(sddl, sizeof sddl, "D:P(A;;GA;;;%s)", me); /* protected: nothing inherited; this user alone */
    wchar_t *w = comem_wide(sddl);
    bool ok = w && ConvertStringSecurityDescriptorToSecurityDescriptorW(w, SDDL_REVISION_1, &sa->lpSecurityDescriptor,
                                                                         NULL);
    free(w);
    return ok;
}
