/* tests/gpu/gpu_child.c - forked CUDA workers that hold memory and answer over pipes. */
#include "gpu/gpu_child.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comem/common.h"
#include "probe/cuda_driver.h"
#include "probe/cuda_view.h"
#include "probe/device.h"

/* The parent's ends of every live child's pipes: a new child closes them, so
 * a sibling never holds another child's command pipe open. */
#define MAX_FDS 256
static int g_parent_fds[MAX_FDS];
static int g_n_parent_fds;

static void remember_fd(int fd)
{
    if (g_n_parent_fds < MAX_FDS)
        g_parent_fds[g_n_parent_fds++] = fd;
}

static void forget_fd(int fd)
{
    for (int i = 0; i < g_n_parent_fds; i++) {
        if (g_parent_fds[i] == fd) {
            g_parent_fds[i] = g_parent_fds[--g_n_parent_fds];
            return;
        }
    }
}

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -EIO;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t len, int timeout_ms)
{
    char *p = buf;
    int64_t deadline = comem_now_ns() + (int64_t)timeout_ms * 1000000;
    while (len) {
        int64_t left_ms = (deadline - comem_now_ns()) / 1000000;
        if (left_ms <= 0)
            return -ETIMEDOUT;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int n = poll(&pfd, 1, (int)left_ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            return -ETIMEDOUT;
        ssize_t r = read(fd, p, len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -EIO;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void report_error(comem_gpuchild_report *rep, int status, const char *what, CUresult r)
{
    rep->status = status;
    snprintf(rep->reason, sizeof rep->reason, "%s: %s (CUresult %d)", what,
             comem_cuda_errstr((int)r), (int)r);
}

/* Everything the child does; returns only by _exit. */
static void child_main(const char *uuid, int64_t bytes, int cmd_fd, int rep_fd)
{
    comem_gpuchild_report rep;
    memset(&rep, 0, sizeof rep);
    rep.cuda_device = -1;
    const comem_cuda *cu = NULL;
    CUresult r = CUDA_SUCCESS;
    CUdevice dev = 0;
    CUcontext ctx = NULL;
    size_t f = 0, t = 0;
    int n = 0;
    int rc = comem_cuda_load(&cu);
    if (rc != COMEM_OK) {
        rep.status = rc;
        snprintf(rep.reason, sizeof rep.reason, "%s", comem_cuda_load_error());
        goto report;
    }
    if ((r = cu->DeviceGetCount(&n)) != CUDA_SUCCESS) {
        report_error(&rep, comem_cuda_status((int)r), "cuDeviceGetCount", r);
        goto report;
    }
    rep.status = COMEM_ENODEV;
    snprintf(rep.reason, sizeof rep.reason, "no CUDA device has UUID %s (CUDA_VISIBLE_DEVICES?)",
             uuid && *uuid ? uuid : "(any)");
    for (int i = 0; i < n; i++) {
        CUuuid u;
        char text[64];
        if (cu->DeviceGet(&dev, i) != CUDA_SUCCESS || cu->DeviceGetUuid(&u, dev) != CUDA_SUCCESS)
            continue;
        comem_cuda_format_uuid((const unsigned char *)u.bytes, text, sizeof text);
        if (!uuid || !*uuid || strcmp(text, uuid) == 0) {
            rep.status = COMEM_OK;
            rep.reason[0] = '\0';
            rep.cuda_device = i;
            break;
        }
    }
    if (rep.status != COMEM_OK)
        goto report;

    if ((r = cu->DevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS) {
        report_error(&rep, comem_cuda_status((int)r), "cuDevicePrimaryCtxRetain", r);
        goto report;
    }
    if ((r = cu->CtxSetCurrent(ctx)) != CUDA_SUCCESS) {
        report_error(&rep, comem_cuda_status((int)r), "cuCtxSetCurrent", r);
        goto report;
    }
    if (bytes > 0) {
        CUdeviceptr p = 0;
        if ((r = cu->MemAlloc(&p, (size_t)bytes)) != CUDA_SUCCESS) {
            report_error(&rep, comem_cuda_status((int)r), "cuMemAlloc", r);
            goto report;
        }
        /* touch it, so nothing is lazily deferred */
        if ((r = cu->MemsetD8(p, 0x5a, (size_t)bytes)) != CUDA_SUCCESS ||
            (r = cu->CtxSynchronize()) != CUDA_SUCCESS) {
            report_error(&rep, comem_cuda_status((int)r), "cuMemsetD8", r);
            goto report;
        }
    }
    if ((rc = comem_cuda_granularity(rep.cuda_device, &rep.gran_min, &rep.gran_rec)) != COMEM_OK) {
        rep.status = rc;
        snprintf(rep.reason, sizeof rep.reason, "cuMemGetAllocationGranularity failed");
        goto report;
    }
    if ((r = cu->MemGetInfo(&f, &t)) != CUDA_SUCCESS) {
        report_error(&rep, comem_cuda_status((int)r), "cuMemGetInfo", r);
        goto report;
    }
    rep.free = (int64_t)f;
    rep.total = (int64_t)t;

report:
    if (write_all(rep_fd, &rep, sizeof rep) != 0 || rep.status != COMEM_OK)
        _exit(0);
    for (;;) {
        char cmd;
        ssize_t got = read(cmd_fd, &cmd, 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            _exit(0); /* parent closed the pipe: exit holding everything */
        rep.status = COMEM_OK;
        if (cmd == 'm' || cmd == 'b') {
            int reps = cmd == 'm' ? 1 : COMEM_GPUCHILD_BENCH_N;
            int64_t ns[COMEM_GPUCHILD_BENCH_N];
            for (int i = 0; i < reps; i++) {
                int64_t t0 = comem_now_ns();
                r = cu->MemGetInfo(&f, &t);
                ns[i] = comem_now_ns() - t0;
                if (r != CUDA_SUCCESS) {
                    report_error(&rep, comem_cuda_status((int)r), "cuMemGetInfo", r);
                    break;
                }
            }
            rep.free = (int64_t)f;
            rep.total = (int64_t)t;
            qsort(ns, (size_t)reps, sizeof ns[0], cmp_i64);
            rep.p50_ns = ns[reps / 2];
            rep.p99_ns = ns[(reps * 99) / 100 < reps ? (reps * 99) / 100 : reps - 1];
        } else {
            rep.status = COMEM_EINVAL;
            snprintf(rep.reason, sizeof rep.reason, "unknown command '%c'", cmd);
        }
        if (write_all(rep_fd, &rep, sizeof rep) != 0)
            _exit(0);
    }
}

int comem_gpuchild_start(const char *uuid, int64_t bytes, comem_gpuchild *c)
{
    int cmd[2], rep[2];
    if (pipe(cmd) != 0)
        return -errno;
    if (pipe(rep) != 0) {
        int e = errno;
        close(cmd[0]);
        close(cmd[1]);
        return -e;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(cmd[0]), close(cmd[1]), close(rep[0]), close(rep[1]);
        return -e;
    }
    if (pid == 0) {
        for (int i = 0; i < g_n_parent_fds; i++)
            close(g_parent_fds[i]);
        close(cmd[1]);
        close(rep[0]);
        signal(SIGPIPE, SIG_IGN);
        child_main(uuid, bytes, cmd[0], rep[1]);
        _exit(0);
    }
    close(cmd[0]);
    close(rep[1]);
    c->pid = pid;
    c->cmd_fd = cmd[1];
    c->rep_fd = rep[0];
    c->bytes = bytes;
    remember_fd(c->cmd_fd);
    remember_fd(c->rep_fd);
    return 0;
}

int comem_gpuchild_ready(comem_gpuchild *c, int timeout_ms, comem_gpuchild_report *rep)
{
    return read_all(c->rep_fd, rep, sizeof *rep, timeout_ms);
}

int comem_gpuchild_ask(comem_gpuchild *c, char cmd, int timeout_ms, comem_gpuchild_report *rep)
{
    if (c->cmd_fd < 0 || write_all(c->cmd_fd, &cmd, 1) != 0)
        return -EIO;
    return read_all(c->rep_fd, rep, sizeof *rep, timeout_ms);
}

void comem_gpuchild_kill(comem_gpuchild *c)
{
    if (c->pid > 0)
        kill(c->pid, SIGKILL);
}

int comem_gpuchild_try_reap(comem_gpuchild *c)
{
    if (c->pid <= 0)
        return 1;
    int st;
    pid_t w = waitpid(c->pid, &st, WNOHANG);
    if (w == c->pid || (w < 0 && errno == ECHILD)) {
        c->pid = 0;
        return 1;
    }
    return 0;
}

static void close_fds(comem_gpuchild *c)
{
    if (c->cmd_fd >= 0) {
        forget_fd(c->cmd_fd);
        close(c->cmd_fd);
        c->cmd_fd = -1;
    }
    if (c->rep_fd >= 0) {
        forget_fd(c->rep_fd);
        close(c->rep_fd);
        c->rep_fd = -1;
    }
}

void comem_gpuchild_stop(comem_gpuchild *c)
{
    close_fds(c);
    int64_t deadline = comem_now_ns() + 5 * (int64_t)1000000000;
    while (!comem_gpuchild_try_reap(c)) {
        if (comem_now_ns() > deadline) {
            comem_gpuchild_kill(c);
            deadline = INT64_MAX;
        }
        usleep(1000);
    }
}
