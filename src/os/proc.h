/*
 * os/proc.h - other processes: who a pid is now, and a watch that says when one has exited.
 * One interface, one backend per platform, chosen at build time:
 *
 *   proc_posix.c  /proc/PID/stat (state, flags, start time in clock ticks since boot) and a pidfd
 *                 (pidfd_open, Linux 5.3), which polls readable once the process has exited
 *   proc_win.c    a process handle (OpenProcess): its creation time, its exit code, and the
 *                 handle itself, signalled when the process ends
 *
 * A pid can be reused once its process is gone: the start time tells a later process from the
 * one a pid was learnt for, and a watch names one process for its whole life, whatever its pid
 * becomes. Statuses: COMEM_ENOENT (no such process), COMEM_EPERM (one the system will not describe
 * to this user), COMEM_ETIMEDOUT, COMEM_ENOMEM, COMEM_EINVAL, COMEM_EIO.
 */
#ifndef COMEM_OS_PROC_H
#define COMEM_OS_PROC_H

#include <stdbool.h>
#include <stdint.h>

/* What the system says of a process now. */
typedef struct comem_proc_info {
    uint64_t start; /* when it started, in the system's own unit (Linux: clock ticks since boot; Windows: FILETIME) */
    bool ended;     /* it has exited (Linux: a zombie, or dead) and holds nothing any more */
    bool exiting;   /* it is inside its exit (Linux's PF_EXITING): its files are being closed */
    bool stopped;   /* it is stopped (Linux: by a signal or a tracer; Windows does not say) */
} comem_proc_info;

/* Describes pid into *info: COMEM_OK, COMEM_ENOENT, COMEM_EPERM, COMEM_EIO (there, but not readable as expected). */
int comem_proc_look(int64_t pid, comem_proc_info *info);

/* True when pid is a process that started at start and has not ended. */
bool comem_proc_alive(int64_t pid, uint64_t start);

/* A watch on one process. */
typedef struct comem_proc_watch comem_proc_watch;

/* Watches pid: COMEM_OK, COMEM_ENOENT (gone already), COMEM_EPERM, COMEM_ENOMEM, COMEM_EIO (no pidfds). */
int comem_proc_watch_open(int64_t pid, comem_proc_watch **out);

/* Waits up to timeout_ms (-1: forever) for the process to exit: COMEM_OK when it has, else COMEM_ETIMEDOUT. */
int comem_proc_watch_wait(comem_proc_watch *w, int timeout_ms);

/* What an event loop waits on for this watch: the pidfd (Linux), the process HANDLE (Windows). */
intptr_t comem_proc_watch_handle(const comem_proc_watch *w);

void comem_proc_watch_close(comem_proc_watch *w);

#endif
