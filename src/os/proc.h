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
#include <stddef.h>
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

/*
 * This process as the system numbers it to others, and which numbering that is. Linux: the pid the
 * mounted /proc gives it (readlink /proc/self; in a pid namespace of its own getpid() is another
 * number) and that /proc's device. Windows: its pid and 0. COMEM_EIO when /proc cannot say: then
 * getpid() and 0.
 */
int comem_proc_self(int64_t *pid, uint64_t *numbering);

/* This process's own id, as the process itself knows it (getpid(); GetCurrentProcessId()). */
int64_t comem_proc_id(void);

/*
 * Calls fn in the child of every fork of this process from now on (pthread_atfork); Windows has no
 * fork and never calls it. COMEM_OK, or COMEM_ENOMEM when it cannot be watched.
 */
int comem_proc_on_fork(void (*fn)(void));

/* This process's user as the system names it, as os/stream.h's comem_peer does: a uid; a SID. */
void comem_proc_self_user(char *buf, size_t len);

/*
 * The user process pid runs as, named as comem_proc_self_user names this one (Linux: the owner of
 * /proc/PID; Windows: its token's user SID). COMEM_OK, COMEM_ENOENT, COMEM_EPERM (Windows: a process
 * this user may not query), COMEM_EIO.
 */
int comem_proc_user(int64_t pid, char *buf, size_t len);

/*
 * Shuts this process to the other processes of its user: none may read or write its memory or take
 * its handles (Linux: not dumpable, so no ptrace and no /proc/PID/fd; Windows: an access list on the
 * process that lets the user, the owner's implicit rights included, only query it and wait for it).
 * What a daemon holding others' shared memory needs (docs/booking.md). COMEM_OK, or COMEM_EIO.
 */
int comem_proc_protect_self(void);

/*
 * Calls stop when the system asks this process to stop: Linux, SIGTERM or SIGINT (stop runs in the
 * signal handler: it must be async-signal-safe); Windows, Ctrl-C, Ctrl-Break, the console closed,
 * log-off or shutdown (stop runs on a thread of the system's). SIGPIPE is ignored on Linux.
 */
void comem_proc_on_stop(void (*stop)(void));

/* Lifts the limit on open descriptors to the most allowed (Linux's RLIMIT_NOFILE; Windows has none). */
void comem_proc_raise_open_limit(void);

/* A watch on one process. */
typedef struct comem_proc_watch comem_proc_watch;

/* Watches pid: COMEM_OK, COMEM_ENOENT (gone already), COMEM_EPERM, COMEM_ENOMEM, COMEM_EIO (no pidfds). */
int comem_proc_watch_open(int64_t pid, comem_proc_watch **out);

/* Waits up to timeout_ms (-1: forever) for the process to exit: COMEM_OK when it has, else COMEM_ETIMEDOUT. */
int comem_proc_watch_wait(comem_proc_watch *w, int timeout_ms);

/* What an event loop waits on for this watch: the pidfd (Linux), the process HANDLE (Windows). */
intptr_t comem_proc_watch_handle(const comem_proc_watch *w);

/* What comem_proc_watch_look found of each watch. */
enum {
    COMEM_PROC_WATCH_QUIET = 0, /* its process runs */
    COMEM_PROC_WATCH_FIRED = 1, /* its process has exited (or the descriptor names something else now) */
    COMEM_PROC_WATCH_UNSURE = 2 /* the watch is not what it was (Linux: its descriptor was closed behind it) */
};

/*
 * Looks at n watches at once without waiting (Linux: one poll), filling seen[i]: the count not
 * quiet. A program may close descriptors it does not own, and the number may be reused: a watch
 * found FIRED whose process still lives, or UNSURE, is to be forgotten (comem_proc_watch_forget), not
 * closed, and its process judged another way.
 */
int comem_proc_watch_look(comem_proc_watch *const *w, int n, uint8_t *seen);

void comem_proc_watch_close(comem_proc_watch *w);

/* Frees a watch without closing what it held (it may be another's now: comem_proc_watch_look). */
void comem_proc_watch_forget(comem_proc_watch *w);

#endif
