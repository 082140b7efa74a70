/* os/proc_posix.c - other processes on Linux (os/proc.h): /proc/PID/stat and pidfds. */
#include "os/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

void comem_proc_watch_close(comem_proc_watch *w)
{
    if (!w)
        return;
    close(w->fd);
    free(w);
}
