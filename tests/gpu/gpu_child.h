/*
 * tests/gpu/gpu_child.h - CUDA worker processes for the real-GPU test and the probe benchmark.
 *
 * The parent never touches CUDA (a process that has initialised the driver
 * cannot use it in a fork()ed child); each child loads the driver through
 * comem's dispatch table, retains the primary context of the device with the
 * given UUID, optionally allocates and touches some memory, reports over a
 * pipe, and then serves commands until its command pipe closes:
 *   'm'  measure cuMemGetInfo once
 *   'b'  time COMEM_GPUCHILD_BENCH_N cuMemGetInfo calls (p50/p99 in the report)
 * A child exits (without freeing: the driver reclaims) when the parent closes
 * the command pipe, or dies to SIGKILL.
 */
#ifndef COMEM_TESTS_GPU_CHILD_H
#define COMEM_TESTS_GPU_CHILD_H

#include <stdint.h>
#include <sys/types.h>

#define COMEM_GPUCHILD_BENCH_N 300

typedef struct comem_gpuchild_report {
    int32_t status;      /* comem status of the child's last step; 0 = ok */
    int32_t cuda_device; /* the CUDA ordinal it used */
    int64_t free, total; /* its cuMemGetInfo */
    int64_t gran_min, gran_rec;
    int64_t p50_ns, p99_ns; /* 'b' only */
    char reason[200];       /* when status != 0 */
} comem_gpuchild_report;

typedef struct comem_gpuchild {
    pid_t pid;     /* 0 once reaped */
    int cmd_fd;    /* parent -> child; -1 once closed */
    int rep_fd;    /* child -> parent */
    int64_t bytes; /* what it allocates */
} comem_gpuchild;

/*
 * Forks one child that will hold `bytes` (0: the context only) on the CUDA
 * device whose UUID is `uuid` (NULL or "": ordinal 0). Does not wait.
 * Returns 0 or a negative errno.
 */
int comem_gpuchild_start(const char *uuid, int64_t bytes, comem_gpuchild *c);

/* Waits up to timeout_ms for the child's ready report. 0, -ETIMEDOUT or -EIO. */
int comem_gpuchild_ready(comem_gpuchild *c, int timeout_ms, comem_gpuchild_report *rep);

/* Sends a command and waits for its report. 0, -ETIMEDOUT or -EIO. */
int comem_gpuchild_ask(comem_gpuchild *c, char cmd, int timeout_ms, comem_gpuchild_report *rep);

/* SIGKILLs the child without reaping it (the caller times the reclaim). */
void comem_gpuchild_kill(comem_gpuchild *c);

/* Reaps the child if it has exited: 1 reaped (now or before), 0 still running. */
int comem_gpuchild_try_reap(comem_gpuchild *c);

/* Closes the command pipe, waits up to 5 s for the exit, then SIGKILLs; reaps. */
void comem_gpuchild_stop(comem_gpuchild *c);

#endif
