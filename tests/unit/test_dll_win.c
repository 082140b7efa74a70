/*
 * tests/unit/test_dll_win.c - comem.dll as a binding uses it (Windows, under wine in CI): loaded at
 * run time from beside this program and called only through the addresses its exports give, as
 * Python's ctypes does (LoadLibrary, GetProcAddress). What the test links of comem statically (the
 * loader, os/dl.h; the status texts and the lock file's name) only loads the DLL and checks it.
 *
 * Through the DLL: the version's constants and a status's text; a coordinator started in this
 * process on a named pipe of the test's own; a host client opened on it, connected, an admission of
 * 1 GiB granted on its simulated 4 GiB card and one of 8 GiB refused short; the coordinator's
 * status names the client; comem_probe says the coordinator answers; after the client and the
 * coordinator are closed, the probe says nobody listens.
 */
#include "unit/cmocka_all.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "base/rundir.h"
#include "comem/comem.h"
#include "os/dl.h"
#include "unit/child.h"

#define GIB ((int64_t)1 << 30)

/* The entry points, as a binding declares them. */
static struct api {
    const char *(*status_str)(int);
    int64_t (*constant)(const char *, int *);
    int (*coord_start)(const char *, const char *, comem_coord **);
    void (*coord_stop)(comem_coord *);
    int (*client_open)(const char *, int, const char *, int64_t, unsigned, comem_client **);
    void (*client_close)(comem_client *);
    int (*client_connected)(comem_client *);
    int (*admit)(comem_client *, int, uint64_t, int64_t, int64_t, int64_t, const uint64_t *, size_t, int, uint64_t *,
                 int64_t *);
    int (*grant_done)(comem_client *, uint64_t, uint64_t, int64_t);
    int (*status_json)(comem_client *, char **);
    void (*free)(void *);
    int (*probe)(const char *, int, char *, size_t);
} g_api;

static comem_dl *g_dl;

/* The address of an export, which must be there. */
static void *need(const char *name)
{
    void *p = comem_dl_sym(g_dl, name);
    if (!p)
        fail_msg("comem.dll exports no %s", name);
    return p;
}

static int setup(void **s)
{
    (void)s;
    char path[MAX_PATH + 32], why[300];
    snprintf(path, sizeof path, "%s\\comem.dll", test_bin_dir());
    g_dl = comem_dl_open(path, false, why, sizeof why);
    if (!g_dl) {
        fprintf(stderr, "cannot load %s: %s\n", path, why);
        return -1;
    }
    g_api.status_str = (const char *(*)(int))need("comem_status_str");
    g_api.constant = (int64_t(*)(const char *, int *))need("comem_constant");
    g_api.coord_start = (int (*)(const char *, const char *, comem_coord **))need("comem_coord_start");
    g_api.coord_stop = (void (*)(comem_coord *))need("comem_coord_stop");
    g_api.client_open =
        (int (*)(const char *, int, const char *, int64_t, unsigned, comem_client **))need("comem_client_open");
    g_api.client_close = (void (*)(comem_client *))need("comem_client_close");
    g_api.client_connected = (int (*)(comem_client *))need("comem_client_connected");
    g_api.admit = (int (*)(comem_client *, int, uint64_t, int64_t, int64_t, int64_t, const uint64_t *, size_t, int,
                           uint64_t *, int64_t *))need("comem_admit");
    g_api.grant_done = (int (*)(comem_client *, uint64_t, uint64_t, int64_t))need("comem_grant_done");
    g_api.status_json = (int (*)(comem_client *, char **))need("comem_status_json");
    g_api.free = (void (*)(void *))need("comem_free");
    g_api.probe = (int (*)(const char *, int, char *, size_t))need("comem_probe");
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    comem_dl_close(g_dl);
    return 0;
}

static void test_the_exports_say_what_the_headers_say(void **s)
{
    (void)s;
    assert_string_equal(g_api.status_str(COMEM_ENOSPC), comem_status_str(COMEM_ENOSPC));
    int found = 0;
    assert_int_equal(g_api.constant("ADMISSION_SIZE", &found), (int64_t)sizeof(comem_admission));
    assert_int_equal(found, 1);
    assert_int_equal(g_api.constant("ADMISSION_OFFSET_FREED", &found), (int64_t)offsetof(comem_admission, freed));
    g_api.constant("NO_SUCH_CONSTANT", &found);
    assert_int_equal(found, 0);
    assert_null(comem_dl_sym(g_dl, "comem_client_wake")); /* internals stay inside */
}

static void test_a_client_through_the_dll(void **s)
{
    (void)s;
    char pipe[96], card[MAX_PATH + 64], dir[MAX_PATH], why[300];
    snprintf(pipe, sizeof pipe, "\\\\.\\pipe\\comem-test-dll-%lld", (long long)own_pid());
    if (!GetTempPathA(sizeof dir, dir))
        dir[0] = '\0';
    snprintf(card, sizeof card, "sim:4GiB:path=%scomem-test-dll-%lld-card", dir, (long long)own_pid());

    comem_coord *coord = NULL;
    assert_int_equal(g_api.coord_start(pipe, card, &coord), COMEM_OK);
    comem_client *c = NULL;
    assert_int_equal(g_api.client_open(pipe, COMEM_CLIENT_HOST, "through-the-dll", -1, COMEM_OPEN_NO_LOCAL, &c),
                     COMEM_OK);
    assert_int_equal(g_api.client_connected(c), 1);

    uint64_t grant = 0;
    int64_t short_by = 0;
    assert_int_equal(g_api.admit(c, 0, 0, GIB, 0, 0, NULL, 0, 5000, &grant, &short_by), COMEM_OK);
    assert_true(grant != 0);
    assert_int_equal(g_api.admit(c, 0, 0, 8 * GIB, 0, 0, NULL, 0, 5000, NULL, &short_by), COMEM_ENOSPC);
    assert_true(short_by > 4 * GIB); /* 8 GiB and the reserve on a 4 GiB card, 1 GiB granted */
    assert_int_equal(g_api.grant_done(c, grant, 0, 0), COMEM_OK);

    char *json = NULL;
    assert_int_equal(g_api.status_json(c, &json), COMEM_OK);
    assert_non_null(strstr(json, "\"through-the-dll\""));
    g_api.free(json);
    assert_int_equal(g_api.probe(pipe, 5000, why, sizeof why), COMEM_OK);
    assert_non_null(strstr(why, "answers"));

    g_api.client_close(c);
    g_api.coord_stop(coord);
    assert_int_equal(g_api.probe(pipe, 1000, why, sizeof why), COMEM_ENOENT);
    assert_non_null(strstr(why, "nothing listens"));
    char lock[MAX_PATH + 64];
    if (comem_socket_sidecar(pipe, ".lock", lock, sizeof lock) == COMEM_OK)
        remove(lock);
    remove(card + strlen("sim:4GiB:path="));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_exports_say_what_the_headers_say),
        cmocka_unit_test(test_a_client_through_the_dll),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
