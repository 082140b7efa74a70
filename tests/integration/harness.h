/*
 * tests/integration/harness.h - real processes for multi-process tests.
 *
 * A test gets a private temp directory holding the coordinator's socket and a
 * simulated card; comemd is started as its own process (from COMEM_BIN_DIR)
 * and stopped with SIGTERM. Client processes are forked before any thread
 * exists in them, arm an alarm so a failure can never hang the suite, and
 * report back through pipes.
 */
#ifndef COMEM_TESTS_HARNESS_H
#define COMEM_TESTS_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "comem/comem.h"
#include "probe/sim.h"

typedef struct harness {
    char dir[128];
    char sock[256];
    char spec[320];
    pid_t comemd;
} harness;

/* Creates the directory; spec_prefix is e.g. "sim:16GiB:ctx=300MiB" (the path is appended). */
void h_init(harness *h, const char *spec_prefix);
/* Starts comemd with extra arguments (NULL-terminated list); waits until it answers. */
void h_start(harness *h, const char *const *extra);
/* Stops comemd (SIGTERM, or SIGKILL when hard) and waits for it. */
void h_stop(harness *h, bool hard);
/* Stops everything and removes the directory. */
void h_fini(harness *h);

/* A child's simulated card handle (opened in the child). */
comem_sim *h_sim(const harness *h);
/* The coordinator's status as JSON text (malloc'd), via a tool client. */
char *h_status(const harness *h);
/* A number from the status: path like "devices.0.granted" or "coordinator.violations". */
int64_t h_status_num(const harness *h, const char *path);
/* Σ resident of processes named `name` on device 0; -1 when no such process. */
int64_t h_process_resident(const harness *h, const char *name);
/* The coordinator's id of the first entry of the process named `name` on device 0; 0 when none. */
uint64_t h_entry_id(const harness *h, const char *name);
/* Number of sessions named `name` on device 0. */
int h_process_count(const harness *h, const char *name);

/*
 * Runs COMEM_BIN_DIR/argv[0] with argv, after applying envs ("NAME=value" sets,
 * "NAME" unsets; NULL-terminated, may be NULL), and captures its stdout and
 * stderr (NUL-terminated, truncated to fit). Kills it after timeout_ms.
 * Returns its exit status, -1 when a signal ended it, -2 when it timed out.
 */
int h_run(const char *const *argv, const char *const *envs, int timeout_ms, char *out, size_t outlen, char *err,
          size_t errlen);

/* Pipes between a test and a child. */
typedef struct chan {
    int rd, wr;
} chan;
void ch_open(chan *to_child, chan *to_parent);
void ch_put(int fd, int64_t v);
/* Reads one value within timeout_ms; false on timeout or EOF. */
bool ch_get(int fd, int64_t *v, int timeout_ms);

/* Forks a child that runs fn(arg) and _exits with its return value; alarm after 90 s. */
pid_t h_child(int (*fn)(void *), void *arg);
/* Waits for a child; returns its exit status or -1 when killed by a signal. */
int h_wait(pid_t pid);
/* Adds a process this test forked itself to those h_kill_children kills; h_forget takes it off (reaped). */
void h_track(pid_t pid);
void h_forget(pid_t pid);
/* Kills and reaps every child still running (a failed test's cleanup). */
void h_kill_children(void);
/* A cmocka teardown: kills the children, stops comemd, removes the directory of *state (a harness). */
int h_teardown(void **state);

#endif
