/* os/proc_posix.c - other processes on Linux (os/proc.h): /proc/PID/stat and pidfds. */
#include "os/proc.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "comem/common.h"

#define PF_EXITING_FLAG 0x4u /* the kernel's PF_EXITING: set when a task enters do_exit */

struct comem_proc_watch {
    int fd;
};

int comem_proc_look(int64_t pid, comem_proc_info *info)
{
    if (pid <= 0 || pid > INT32_MAX)
        return COMEM_ENOENT;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == EACCES ? COMEM_EPERM : COMEM_ENOENT;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return COMEM_ENOENT; /* it went between the open and the read */
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    char state = 0;
    unsigned long flags = 0;
    unsigned long long start = 0;
    /* after "(comm)": 3 state, 4 ppid, 5 pgrp, 6 session, 7 tty_nr, 8 tpgid, 9 flags, ..., 22 starttime */
    if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %lu %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                     &state, &flags, &start) != 3)
        return COMEM_EIO; /* there, but unreadable: not taken for gone */
    *info = (comem_proc_info){.start = start, .ended = state == 'Z' || state == 'X',
                              .exiting = (flags & PF_EXITING_FLAG) != 0, .stopped = state == 'T' || state == 't'};
    return COMEM_OK;
}

bool comem_proc_alive(int64_t pid, uint64_t start)
{
    comem_proc_info in;
    return comem_proc_look(pid, &in) == COMEM_OK && !in.ended && in.start == start;
}

int comem_proc_self(int64_t *pid, uint64_t *numbering)
{
    char buf[24];
    struct stat st;
    ssize_t n = readlink("/proc/self", buf, sizeof buf - 1);
    long long v = 0;
    if (n > 0) {
        buf[n] = '\0';
        char *end;
        v = strtoll(buf, &end, 10);
        if (*end != '\0' || v <= 0 || v > INT32_MAX)
            v = 0;
    }
    if (v <= 0 || stat("/proc/self", &st) != 0) {
        *pid = getpid();
        *numbering = 0;
        return COMEM_EIO; /* no /proc of ours mounted */
    }
    *pid = v;
    *numbering = (uint64_t)st.st_dev;
    return COMEM_OK;
}

void comem_proc_self_user(char *buf, size_t len) { snprintf(buf, len, "%u", (unsigned)getuid()); }

int comem_proc_user(int64_t pid, char *buf, size_t len)
{
    if (pid <= 0 || pid > INT32_MAX)
        return COMEM_ENOENT;
    char path[32];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%lld", (long long)pid);
    if (stat(path, &st) != 0)
        return errno == ENOENT || errno == ESRCH ? COMEM_ENOENT : COMEM_EIO;
    snprintf(buf, len, "%u", (unsigned)st.st_uid); /* /proc/PID belongs to the process's effective uid */
    return COMEM_OK;
}

int comem_proc_protect_self(void) { return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 ? COMEM_OK : COMEM_EIO; }

static void (*volatile g_stop)(void);

static void on_signal(int sig)
{
    (void)sig;
    void (*stop)(void) = g_stop;
    if (stop)
        stop();
}

int64_t comem_proc_id(void) { return (int64_t)getpid(); }

int comem_proc_on_fork(void (*fn)(void)) { return pthread_atfork(NULL, NULL, fn) == 0 ? COMEM_OK : COMEM_ENOMEM; }

void comem_proc_on_stop(void (*stop)(void))
{
    g_stop = stop;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

void comem_proc_raise_open_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int comem_proc_watch_open(int64_t pid, comem_proc_watch **out)
{
    *out = NULL;
    if (pid <= 0 || pid > INT32_MAX)
        return COMEM_ENOENT;
#ifdef SYS_pidfd_open
    int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0); /* close-on-exec by the kernel's rule */
#else
    int fd = -1;
    errno = ENOSYS;
#endif
    if (fd < 0)
        return errno == ESRCH ? COMEM_ENOENT : errno == EPERM ? COMEM_EPERM : COMEM_EIO;
    comem_proc_watch *w = malloc(sizeof *w);
    if (!w) {
        close(fd);
        return COMEM_ENOMEM;
    }
    w->fd = fd;
    *out = w;
    return COMEM_OK;
}

int comem_proc_watch_wait(comem_proc_watch *w, int timeout_ms)
{
    struct pollfd p = {.fd = w->fd, .events = POLLIN};
    int n;
    while ((n = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR)
        ;
    return n == 1 && (p.revents & POLLIN) ? COMEM_OK : COMEM_ETIMEDOUT;
}

intptr_t comem_proc_watch_handle(const comem_proc_watch *w) { return w->fd; }

int comem_proc_watch_look(comem_proc_watch *const *w, int n, uint8_t *seen)
{
    enum { BATCH = 64 };
    int found = 0;
    for (int at = 0; at < n; at += BATCH) {
        struct pollfd p[BATCH];
        int k = n - at < BATCH ? n - at : BATCH;
        for (int i = 0; i < k; i++)
            p[i] = (struct pollfd){.fd = w[at + i]->fd, .events = POLLIN};
        int r;
        while ((r = poll(p, (nfds_t)k, 0)) < 0 && errno == EINTR)
            ;
        for (int i = 0; i < k; i++) {
            short ev = r > 0 ? p[i].revents : 0;
            seen[at + i] = ev == 0                                  ? COMEM_PROC_WATCH_QUIET
                           : (ev & POLLIN) && !(ev & POLLNVAL) ? COMEM_PROC_WATCH_FIRED
                                                                    : COMEM_PROC_WATCH_UNSURE;
            found += seen[at + i] != COMEM_PROC_WATCH_QUIET;
        }
    }
    return found;
}

void comem_proc_watch_forget(comem_proc_watch *w) { free(w); }

void comem_proc_watch_close(comem_proc_watch *w)
{
    if (!w)
        return;
    close(w->fd);
    free(w);
}
