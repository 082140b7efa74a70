/*
 * tests/unit/endpoint.h - a name to listen under for the transport's tests, on both systems: a
 * named pipe of this process's (Windows), or a socket in a fresh private folder (Linux), removed
 * with the folder. A test keeps one in g_endpoint and uses endpoint_setup/endpoint_teardown as
 * cmocka's setup and teardown.
 */
#ifndef COMEM_TEST_ENDPOINT_H
#define COMEM_TEST_ENDPOINT_H

#include <limits.h>
#include <stdio.h>

#include "base/rundir.h"
#ifndef _WIN32
#include "unit/tmpdir.h"
#endif
#include "unit/child.h"

static struct {
    char name[400]; /* what to listen under and connect to */
    char what[32];  /* the test's word for it */
#ifndef _WIN32
    char dir[256];
#endif
} g_endpoint;

/* cmocka setup: a fresh name, its folder made (Linux); `what` tells the tests' names apart. */
static inline int endpoint_make(const char *what)
{
    snprintf(g_endpoint.what, sizeof g_endpoint.what, "%s", what);
#ifdef _WIN32
    snprintf(g_endpoint.name, sizeof g_endpoint.name, "\\\\.\\pipe\\comem-test-%s-%lld", what, (long long)own_pid());
    return 0;
#else
    if (test_tmpdir_make(g_endpoint.dir, sizeof g_endpoint.dir, what) != 0)
        return -1;
    snprintf(g_endpoint.name, sizeof g_endpoint.name, "%s/s", g_endpoint.dir);
    return 0;
#endif
}

/*
 * A file of the test's own beside the endpoint, named leaf: in its folder (Linux), or in the temporary
 * folder under a name of this test process's (Windows, where a pipe has no folder). Removed by the
 * caller on Windows; with the folder on Linux.
 */
static inline void endpoint_file(char *buf, size_t len, const char *leaf)
{
#ifdef _WIN32
    char dir[MAX_PATH];
    if (!GetTempPathA(sizeof dir, dir))
        dir[0] = '\0';
    snprintf(buf, len, "%scomem-test-%s-%lld-%s", dir, g_endpoint.what, (long long)own_pid(), leaf);
#else
    snprintf(buf, len, "%s/%s", g_endpoint.dir, leaf);
#endif
}

/* A coordinator's lock file under the endpoint's name stays after it (on Windows in the runtime folder). */
static inline void endpoint_remove_lock_file(void)
{
    char lock[PATH_MAX + 16];
    if (comem_socket_sidecar(g_endpoint.name, ".lock", lock, sizeof lock) == COMEM_OK)
        remove(lock);
}

/* cmocka teardown: the folder removed with what is in it (Linux). */
static inline int endpoint_teardown(void **s)
{
    (void)s;
#ifdef _WIN32
    return 0;
#else
    return test_tmpdir_remove(g_endpoint.dir);
#endif
}

#endif
