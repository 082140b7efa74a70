/* os/proc_win.c - other processes on Windows (os/proc.h): process handles. */
#include "os/proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <windows.h>
#include <aclapi.h>
#include <sddl.h>

#include "comem/common.h"
#include "os/user_win.h"

struct comem_proc_watch {
    HANDLE process;
};

/* The process handle for pid with access, or NULL with *rc set. */
static HANDLE open_process(int64_t pid, DWORD access, int *rc)
{
    if (pid <= 0 || pid > (int64_t)UINT32_MAX) {
        *rc = COMEM_ENOENT;
        return NULL;
    }
    HANDLE h = OpenProcess(access, FALSE, (DWORD)pid);
    if (!h)
        *rc = GetLastError() == ERROR_ACCESS_DENIED ? COMEM_EPERM : COMEM_ENOENT;
    return h;
}

int comem_proc_look(int64_t pid, comem_proc_info *info)
{
    int rc = COMEM_OK;
    HANDLE h = open_process(pid, PROCESS_QUERY_LIMITED_INFORMATION, &rc);
    if (!h)
        return rc;
    FILETIME created, exited, kernel, user;
    DWORD code = 0;
    if (!GetProcessTimes(h, &created, &exited, &kernel, &user) || !GetExitCodeProcess(h, &code)) {
        CloseHandle(h);
        return COMEM_ENOENT;
    }
    CloseHandle(h);
    /* A process that exits with STILL_ACTIVE (259) as its code reads as running: Windows' own ambiguity. */
    *info = (comem_proc_info){.start = ((uint64_t)created.dwHighDateTime << 32) | created.dwLowDateTime,
                              .ended = code != STILL_ACTIVE, .exiting = false, .stopped = false};
    return COMEM_OK;
}

bool comem_proc_alive(int64_t pid, uint64_t start)
{
    comem_proc_info in;
    return comem_proc_look(pid, &in) == COMEM_OK && !in.ended && in.start == start;
}

int comem_proc_self(int64_t *pid, uint64_t *numbering)
{
    *pid = (int64_t)GetCurrentProcessId();
    *numbering = 0; /* one numbering for the whole system */
    return COMEM_OK;
}

int64_t comem_proc_id(void) { return (int64_t)GetCurrentProcessId(); }

int comem_proc_on_fork(void (*fn)(void))
{
    (void)fn; /* no fork on Windows: a process's copy is never made */
    return COMEM_OK;
}

void comem_proc_self_user(char *buf, size_t len)
{
    if (!comem_user_sid_text(GetCurrentProcess(), buf, len) && len > 0)
        buf[0] = '\0';
}

int comem_proc_user(int64_t pid, char *buf, size_t len)
{
    int rc = COMEM_OK;
    HANDLE h = open_process(pid, PROCESS_QUERY_LIMITED_INFORMATION, &rc);
    if (!h)
        return rc;
    bool ok = comem_user_sid_text(h, buf, len);
    CloseHandle(h);
    return ok ? COMEM_OK : COMEM_EPERM;
}

int comem_proc_protect_self(void)
{
    char me[192], sddl[512];
    if (!comem_user_sid_text(GetCurrentProcess(), me, sizeof me))
        return COMEM_EIO;
    /* The user may query and wait (its clients watch the coordinator end) and end it (as a signal of
       the same uid does on Linux: Task Manager's End task, a test's cleanup), nothing more: no reading,
       writing or duplicating from it. OWNER RIGHTS (OW) takes the owner's implicit right to change this
       list back; SYSTEM keeps everything. */
    snprintf(sddl, sizeof sddl, "D:P(A;;0x%lx;;;%s)(A;;0x%lx;;;OW)(A;;GA;;;SY)",
             (unsigned long)(PROCESS_QUERY_LIMITED_INFORMATION | SYNCHRONIZE | PROCESS_TERMINATE), me,
             (unsigned long)(PROCESS_QUERY_LIMITED_INFORMATION | SYNCHRONIZE | READ_CONTROL));
    PSECURITY_DESCRIPTOR sd = NULL;
    BOOL present = FALSE, defaulted = FALSE;
    PACL dacl = NULL;
    if (!ConvertStringSecurityDescriptorToSecurityDescriptorA(sddl, SDDL_REVISION_1, &sd, NULL))
        return COMEM_EIO;
    DWORD err = GetSecurityDescriptorDacl(sd, &present, &dacl, &defaulted)
                    ? SetSecurityInfo(GetCurrentProcess(), SE_KERNEL_OBJECT,
                                      DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION, NULL, NULL,
                                      dacl, NULL)
                    : GetLastError();
    LocalFree(sd);
    return err == ERROR_SUCCESS ? COMEM_OK : COMEM_EIO;
}

static void (*volatile g_stop)(void);

static BOOL WINAPI on_console(DWORD event)
{
    void (*stop)(void) = g_stop;
    if (!stop || (event != CTRL_C_EVENT && event != CTRL_BREAK_EVENT && event != CTRL_CLOSE_EVENT &&
                  event != CTRL_LOGOFF_EVENT && event != CTRL_SHUTDOWN_EVENT))
        return FALSE;
    stop();
    return TRUE;
}

void comem_proc_on_stop(void (*stop)(void))
{
    g_stop = stop;
    SetConsoleCtrlHandler(on_console, TRUE);
}

void comem_proc_raise_open_limit(void) { /* handles have no per-process limit to lift */ }

int comem_proc_watch_open(int64_t pid, comem_proc_watch **out)
{
    *out = NULL;
    int rc = COMEM_OK;
    HANDLE h = open_process(pid, SYNCHRONIZE | PROCESS_QUERY_LIMITED_INFORMATION, &rc);
    if (!h)
        return rc;
    comem_proc_watch *w = malloc(sizeof *w);
    if (!w) {
        CloseHandle(h);
        return COMEM_ENOMEM;
    }
    w->process = h;
    *out = w;
    return COMEM_OK;
}

int comem_proc_watch_wait(comem_proc_watch *w, int timeout_ms)
{
    DWORD r = WaitForSingleObject(w->process, timeout_ms < 0 ? INFINITE : (DWORD)timeout_ms);
    return r == WAIT_OBJECT_0 ? COMEM_OK : COMEM_ETIMEDOUT;
}

intptr_t comem_proc_watch_handle(const comem_proc_watch *w) { return (intptr_t)w->process; }

int comem_proc_watch_look(comem_proc_watch *const *w, int n, uint8_t *seen)
{
    int found = 0;
    for (int i = 0; i < n; i++) { /* WaitForMultipleObjects names only the first that is signalled */
        DWORD r = WaitForSingleObject(w[i]->process, 0);
        seen[i] = r == WAIT_TIMEOUT      ? COMEM_PROC_WATCH_QUIET
                  : r == WAIT_OBJECT_0 ? COMEM_PROC_WATCH_FIRED
                                       : COMEM_PROC_WATCH_UNSURE;
        found += seen[i] != COMEM_PROC_WATCH_QUIET;
    }
    return found;
}

void comem_proc_watch_forget(comem_proc_watch *w) { free(w); }

void comem_proc_watch_close(comem_proc_watch *w)
{
    if (!w)
        return;
    CloseHandle(w->process);
    free(w);
}
