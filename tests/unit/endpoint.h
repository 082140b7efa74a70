/*
 * tests/unit/endpoint.h - a name to listen under for the transport's tests, on both systems: a
 * named pipe of this process's (Windows), or a socket in a fresh private folder (Linux), removed
 * with the folder. A test keeps one in g_endpoint and uses endpoint_setup/endpoint_teardown as
 * cmocka's setup and teardown.
 */
#ifndef COMEM_TEST_ENDPOINT_H
#define COMEM_TEST_ENDPOINT_H

#include <stdio.h>
#ifndef _WIN32
#include "unit/tmpdir.h"
#endif
#include "unit/child.h"

static struct {
    char name[400]; /* what to listen under and connect to */
#ifndef _WIN32
    char dir[256];
#endif
} g_endpoint;

/* cmocka setup: a fresh name, its folder made (Linux); `what` tells the tests' names apart. */
static inline int endpoint_make(const char *what)
{
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
