/*
 * os/stream_win.h - for os/ only: the named pipe's objects (stream_win.c), which the event loop
 * (loop_win.c) registers. A stream in a loop is read through the loop (its pending read lands in
 * the loop's buffer), so the stream's own read refuses it; a listener in a loop has its connect's
 * event watched by a registered wait (every instance's connect signals the same event).
 */
#ifndef COMEM_OS_STREAM_WIN_H
#define COMEM_OS_STREAM_WIN_H

#include <stdbool.h>
#include <stdint.h>
#include <windows.h>

#include "os/stream.h"

typedef struct loop_reg loop_reg; /* loop_win.c: one object's registration */

struct comem_listener {
    wchar_t *name;
    HANDLE next;   /* the instance waiting for the next client */
    OVERLAPPED ov; /* its ConnectNamedPipe */
    bool pending;  /* that connect is in progress */
    SECURITY_ATTRIBUTES sa;
    loop_reg *reg; /* its loop registration, or NULL */
};

struct comem_stream {
    HANDLE h;
    OVERLAPPED rd, wr; /* their events carry the low bit once h is in a completion port: no packet for them */
    loop_reg *reg;     /* its loop registration, or NULL */
    HANDLE port;       /* the completion port h was associated with (NULL: none); for good */
    uint8_t *left;     /* bytes a loop had read and not handed out when the stream left it: read first */
    DWORD left_len, left_pos;
};

/* An OVERLAPPED's event as a handle to wait on: without the low bit that keeps its packet out of a port. */
static inline HANDLE comem_ov_event(const OVERLAPPED *ov) { return (HANDLE)((ULONG_PTR)ov->hEvent & ~(ULONG_PTR)1); }

#endif
