/*
 * os/stream_win.c - os/stream.h over a named pipe (Windows).
 *
 * The listener holds one pipe instance waiting for a client at a time: accept hands that
 * instance to the caller as the stream and makes the next. Every instance is byte mode,
 * overlapped (each wait is an event with a timeout; a wait that times out cancels its I/O),
 * local clients only, with an access list for this user alone; the first is created with
 * FILE_FLAG_FIRST_PIPE_INSTANCE, so a second listener under the same name is refused
 * (ERROR_ACCESS_DENIED: COMEM_EEXIST). The peer's pid comes from
 * GetNamedPipeClientProcessId and its user from that process's token. A client
 * talks only to a server of its own user (GetNamedPipeServerProcessId and its
 * token): pipe names are shared by every user, and another could create the
 * name first.
 */
#include "os/stream.h"
#include "os/stream_win.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>
#include <aclapi.h>

#include "comem/common.h"
#include "os/user_win.h"
#include "os/wide_win.h"

#define PIPE_BUFFER (64 * 1024)

/* Waits for an overlapped operation on h up to timeout_ms; cancels it when the time is up. */
static int finish(HANDLE h, OVERLAPPED *ov, DWORD *bytes, int timeout_ms)
{
    DWORD w = WaitForSingleObject(comem_ov_event(ov), timeout_ms < 0 ? INFINITE : (DWORD)timeout_ms);
    if (w == WAIT_TIMEOUT) {
        CancelIoEx(h, ov);
        GetOverlappedResult(h, ov, bytes, TRUE); /* the cancelled I/O is over before ov is reused */
        return COMEM_ETIMEDOUT;
    }
    if (w != WAIT_OBJECT_0)
        return COMEM_EIO;
    if (GetOverlappedResult(h, ov, bytes, FALSE))
        return COMEM_OK;
    DWORD err = GetLastError();
    return err == ERROR_BROKEN_PIPE || err == ERROR_PIPE_NOT_CONNECTED || err == ERROR_NO_DATA ? COMEM_ECLOSED
                                                                                               : COMEM_EIO;
}

static int make_instance(comem_listener *l, bool first)
{
    DWORD open = PIPE_ACCESS_DUPLEX | FILE_FLAG_OVERLAPPED | (first ? FILE_FLAG_FIRST_PIPE_INSTANCE : 0);
    DWORD mode = PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS;
    l->next = CreateNamedPipeW(l->name, open, mode, PIPE_UNLIMITED_INSTANCES, PIPE_BUFFER, PIPE_BUFFER, 0, &l->sa);
    if (l->next == INVALID_HANDLE_VALUE) {
        DWORD err = GetLastError();
        return first && (err == ERROR_ACCESS_DENIED || err == ERROR_PIPE_BUSY) ? COMEM_EEXIST : COMEM_EIO;
    }
    ResetEvent(l->ov.hEvent);
    l->pending = false;
    if (ConnectNamedPipe(l->next, &l->ov))
        return COMEM_OK; /* overlapped: does not happen, but then a client is there */
    DWORD err = GetLastError();
    if (err == ERROR_IO_PENDING)
        l->pending = true;
    else if (err == ERROR_PIPE_CONNECTED)
        SetEvent(l->ov.hEvent); /* a client came between create and connect */
    else
        return COMEM_EIO;
    return COMEM_OK;
}

int comem_listen(const char *name, comem_listener **out, char *why, size_t whylen)
{
    if (!name || !out)
        return COMEM_EINVAL;
    comem_listener *l = calloc(1, sizeof *l);
    if (!l)
        return COMEM_ENOMEM;
    int rc = COMEM_EIO;
    l->name = comem_wide(name);
    l->ov.hEvent = CreateEventW(NULL, TRUE, FALSE, NULL);
    if (!l->name || !l->ov.hEvent || !comem_user_only(&l->sa)) /* this user alone */
        goto fail;
    rc = make_instance(l, true);
    if (rc != COMEM_OK)
        goto fail;
    *out = l;
    return COMEM_OK;
fail:
    if (why && whylen)
        snprintf(why, whylen, rc == COMEM_EEXIST ? "another listener has the pipe %s" : "cannot listen on %s (error %lu)",
                 name, (unsigned long)GetLastError());
    if (l->sa.lpSecurityDescriptor)
        LocalFree(l->sa.lpSecurityDescriptor);
    if (l->ov.hEvent)
        CloseHandle(l->ov.hEvent);
    free(l->name);
    free(l);
    return rc;
}

static comem_stream *stream_of(HANDLE h)
{
    comem_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->h = h;
    s->rd.hEvent = CreateEventW(NULL, TRUE, FALSE, NULL);
    s->wr.hEvent = CreateEventW(NULL, TRUE, FALSE, NULL);
    if (!s->rd.hEvent || !s->wr.hEvent) {
        if (s->rd.hEvent)
            CloseHandle(s->rd.hEvent);
        if (s->wr.hEvent)
            CloseHandle(s->wr.hEvent);
        free(s);
        return NULL;
    }
    return s;
}

int comem_accept(comem_listener *l, int timeout_ms, comem_stream **out, comem_peer *peer)
{
    DWORD n = 0;
    if (l->next == INVALID_HANDLE_VALUE && make_instance(l, false) != COMEM_OK) {
        l->next = INVALID_HANDLE_VALUE;
        return COMEM_EIO; /* the last accept could not make the next instance, nor can this one */
    }
    if (l->pending) {
        DWORD w = WaitForSingleObject(l->ov.hEvent, timeout_ms < 0 ? INFINITE : (DWORD)timeout_ms);
        if (w == WAIT_TIMEOUT)
            return COMEM_ETIMEDOUT; /* the connect stays pending for the next accept */
        if (w != WAIT_OBJECT_0 || !GetOverlappedResult(l->next, &l->ov, &n, FALSE))
            return COMEM_EIO;
    }
    HANDLE h = l->next;
    comem_stream *s = stream_of(h);
    if (!s)
        return COMEM_ENOMEM;
    if (peer) {
        ULONG pid = 0;
        memset(peer, 0, sizeof *peer);
        if (GetNamedPipeClientProcessId(h, &pid)) {
            peer->pid = (int64_t)pid;
            HANDLE proc = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, pid);
            char mine[192];
            if (proc && comem_user_sid_text(proc, peer->user, sizeof peer->user) &&
                comem_user_sid_text(GetCurrentProcess(), mine, sizeof mine))
                peer->same_user = strcmp(peer->user, mine) == 0;
            if (proc)
                CloseHandle(proc);
        }
    }
    *out = s;
    int rc = make_instance(l, false); /* the next client's */
    if (rc != COMEM_OK)
        l->next = INVALID_HANDLE_VALUE; /* in a loop, the next connect signals the same event, watched there */
    return COMEM_OK;
}

int comem_listen_check(const char *name, char *why, size_t whylen)
{
    (void)name; /* a pipe's name holds nothing to be in the way: a listener's instance is refused, or not */
    (void)why;
    (void)whylen;
    return COMEM_OK;
}

int comem_listener_refuse_one(comem_listener *l, const void *why, size_t len)
{
    comem_stream *s = NULL;
    int rc = comem_accept(l, 0, &s, NULL); /* a process has handles to spare: no reserve is kept */
    if (rc != COMEM_OK)
        return rc;
    (void)comem_stream_write(s, why, len, 0); /* best effort: it may not read */
    comem_stream_close(s);
    return COMEM_OK;
}

void comem_listener_close(comem_listener *l)
{
    if (!l)
        return;
    if (l->next != INVALID_HANDLE_VALUE) {
        DWORD n;
        if (l->pending && CancelIoEx(l->next, &l->ov))
            GetOverlappedResult(l->next, &l->ov, &n, TRUE);
        CloseHandle(l->next);
    }
    CloseHandle(l->ov.hEvent);
    LocalFree(l->sa.lpSecurityDescriptor);
    free(l->name);
    free(l);
}

/*
 * Whether the server of the pipe h (reached by name) runs as this process's user: its process's token
 * user SID equal to ours (COMEM_OK), else COMEM_EPERM and why naming that user. A server whose process
 * cannot be read (another user's, as a rule) is refused too: nothing says it is ours. As on Linux,
 * an administrator's or SYSTEM's server is another user's.
 */
static int server_is_mine(HANDLE h, const char *name, char *why, size_t whylen)
{
    ULONG spid = 0;
    BYTE theirs_info[COMEM_USER_SID_ROOM], mine_info[COMEM_USER_SID_ROOM];
    HANDLE proc = GetNamedPipeServerProcessId(h, &spid) ? OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, spid)
                                                         : NULL;
    PSID theirs = proc ? comem_user_sid(proc, theirs_info, sizeof theirs_info) : NULL;
    DWORD err = theirs ? 0 : GetLastError();
    PSID mine = comem_user_sid(GetCurrentProcess(), mine_info, sizeof mine_info);
    if (proc)
        CloseHandle(proc);
    if (theirs && mine && EqualSid(theirs, mine))
        return COMEM_OK;
    if (why && whylen) {
        char t[192] = "", m[192] = "?";
        PSID owner = NULL;
        PSECURITY_DESCRIPTOR sd = NULL;
        if (!theirs && GetSecurityInfo(h, SE_KERNEL_OBJECT, OWNER_SECURITY_INFORMATION, &owner, NULL, NULL, NULL,
                                       &sd) != ERROR_SUCCESS)
            owner = NULL; /* for the message alone: who made the pipe, when its server cannot be read */
        if (theirs || owner)
            comem_sid_text(theirs ? theirs : owner, t, sizeof t);
        if (mine)
            comem_sid_text(mine, m, sizeof m);
        if (theirs)
            snprintf(why, whylen,
                     "refusing the pipe %s: it belongs to another user (its server, pid %lu, runs as %s; this "
                     "process as %s); nothing was sent to it",
                     name, (unsigned long)spid, t, m);
        else
            snprintf(why, whylen,
                     "refusing the pipe %s: its server (pid %lu) cannot be read (error %lu), so it is another "
                     "user's%s%s; nothing was sent to it",
                     name, (unsigned long)spid, (unsigned long)err, t[0] ? ": the pipe's owner is " : "", t);
        if (sd)
            LocalFree(sd);
    }
    return COMEM_EPERM;
}

int comem_connect(const char *name, int timeout_ms, comem_stream **out)
{
    return comem_connect_why(name, timeout_ms, out, NULL, 0);
}

int comem_connect_why(const char *name, int timeout_ms, comem_stream **out, char *why, size_t whylen)
{
    wchar_t *w = comem_wide(name);
    if (!w)
        return COMEM_EINVAL;
    HANDLE h = INVALID_HANDLE_VALUE;
    for (;;) {
        h = CreateFileW(w, GENERIC_READ | GENERIC_WRITE, 0, NULL, OPEN_EXISTING, FILE_FLAG_OVERLAPPED, NULL);
        if (h != INVALID_HANDLE_VALUE)
            break;
        DWORD err = GetLastError();
        if (err != ERROR_PIPE_BUSY) {
            free(w);
            if (err == ERROR_ACCESS_DENIED && why && whylen) /* a pipe whose access list leaves this user out */
                snprintf(why, whylen, "refusing the pipe %s: access denied, it belongs to another user", name);
            return err == ERROR_FILE_NOT_FOUND ? COMEM_ENOENT : err == ERROR_ACCESS_DENIED ? COMEM_EPERM : COMEM_EIO;
        }
        /* every instance is taken: wait for the listener's next one */
        if (!WaitNamedPipeW(w, timeout_ms < 0 ? NMPWAIT_WAIT_FOREVER : (DWORD)timeout_ms)) {
            free(w);
            return COMEM_ETIMEDOUT;
        }
    }
    free(w);
    /* Pipe names are one namespace for every user: whoever created the name first serves it. Talk only
       to a server of this user's, before a byte is written (the HELLO carries COMEM_TOKEN). */
    int rc = server_is_mine(h, name, why, whylen);
    if (rc != COMEM_OK) {
        CloseHandle(h);
        return rc;
    }
    comem_stream *s = stream_of(h);
    if (!s) {
        CloseHandle(h);
        return COMEM_ENOMEM;
    }
    *out = s;
    return COMEM_OK;
}

int comem_stream_write(comem_stream *s, const void *buf, size_t len, int timeout_ms)
{
    const char *p = buf;
    while (len > 0) {
        DWORD chunk = len > (1u << 30) ? (1u << 30) : (DWORD)len, n = 0;
        ResetEvent(comem_ov_event(&s->wr));
        int rc = COMEM_OK;
        if (!WriteFile(s->h, p, chunk, &n, &s->wr)) {
            DWORD err = GetLastError();
            if (err != ERROR_IO_PENDING)
                return err == ERROR_BROKEN_PIPE || err == ERROR_NO_DATA ? COMEM_ECLOSED : COMEM_EIO;
            rc = finish(s->h, &s->wr, &n, timeout_ms);
        } else if (!GetOverlappedResult(s->h, &s->wr, &n, FALSE)) {
            rc = COMEM_EIO;
        }
        if (rc != COMEM_OK)
            return rc;
        p += n;
        len -= n;
    }
    return COMEM_OK;
}

int comem_stream_read(comem_stream *s, void *buf, size_t cap, int timeout_ms)
{
    if (s->reg)
        return COMEM_EINVAL; /* in a loop, whose pending read brings its bytes: comem_loop_read */
    if (s->left) { /* what a loop read before the stream left it comes first */
        DWORD n = s->left_len - s->left_pos;
        if (cap < n)
            n = (DWORD)cap;
        memcpy(buf, s->left + s->left_pos, n);
        s->left_pos += n;
        if (s->left_pos == s->left_len) {
            free(s->left);
            s->left = NULL;
        }
        return (int)n;
    }
    DWORD want = cap > (size_t)INT32_MAX ? (DWORD)INT32_MAX : (DWORD)cap, n = 0;
    ResetEvent(comem_ov_event(&s->rd));
    if (!ReadFile(s->h, buf, want, &n, &s->rd)) {
        DWORD err = GetLastError();
        if (err == ERROR_BROKEN_PIPE || err == ERROR_PIPE_NOT_CONNECTED)
            return COMEM_ECLOSED;
        if (err != ERROR_IO_PENDING && err != ERROR_MORE_DATA)
            return COMEM_EIO;
        int rc = finish(s->h, &s->rd, &n, timeout_ms);
        if (rc != COMEM_OK)
            return rc;
    } else if (!GetOverlappedResult(s->h, &s->rd, &n, FALSE)) {
        return COMEM_EIO;
    }
    return n > 0 ? (int)n : COMEM_ECLOSED;
}

int comem_stream_write_shares(comem_stream *s, const void *buf, size_t len, const comem_shm_token *shares, int n,
                              int timeout_ms)
{
    (void)shares; /* handles in the peer already: the bytes name them */
    if (n < 0 || n > COMEM_STREAM_SHARES_MAX)
        return COMEM_EINVAL;
    return comem_stream_write(s, buf, len, timeout_ms);
}

int comem_stream_read_shares(comem_stream *s, void *buf, size_t len, comem_shm_token *shares, int cap, int *n,
                             int timeout_ms)
{
    (void)shares;
    (void)cap;
    *n = 0;
    return comem_stream_read(s, buf, len, timeout_ms);
}

void comem_stream_close(comem_stream *s)
{
    if (!s)
        return;
    CloseHandle(s->h); /* no flush: a flush waits for the peer to read, which may never come */
    CloseHandle(comem_ov_event(&s->rd));
    CloseHandle(comem_ov_event(&s->wr));
    free(s->left);
    free(s);
}

intptr_t comem_stream_handle(const comem_stream *s) { return (intptr_t)s->h; }

intptr_t comem_listener_handle(const comem_listener *l) { return (intptr_t)l->next; }
