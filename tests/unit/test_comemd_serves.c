/*
 * tests/unit/test_comemd_serves.c - comemd as a program serving processes, the same assertions on
 * Linux (a Unix socket) and on Windows (comemd.exe over a named pipe, under wine in CI: issue 26's
 * integration tests): every client is a process of its own or this test speaking the protocol
 * itself (unit/rawwire.h), on a simulated card of the test's own.
 *
 * A second daemon under the same address is refused (exit 3). A child (this test run again) admits
 * 2 GiB of the 4 GiB card and holds the grant: another admission of 2 GiB is refused while it lives;
 * the child is killed, and its bytes come back: the same admission is granted.
 */
#include "unit/cmocka_all.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#include <windows.h>
#else
#include <unistd.h>
#endif

#include "base/rundir.h"
#include "comem/common.h"
#include "os/stream.h"
#include "unit/endpoint.h"
#include "unit/rawwire.h"

#define GIB ((int64_t)1 << 30)

static char g_card[PATH_MAX + 64]; /* a simulated card of this test's own */
static char g_note[480];           /* where the child says it holds its grant */
static char g_comemd[PATH_MAX];    /* the daemon's program, beside this one */

/* The child's hook, given "SOCKET|NOTE": admits 2 GiB, says so in NOTE, and holds the grant (it sleeps). */
static void hold(const char *arg)
{
    const char *bar = strchr(arg, '|');
    if (!bar)
        exit(2);
    char sock[400];
    snprintf(sock, sizeof sock, "%.*s", (int)(bar - arg), arg);
    comem_stream *st = NULL;
    if (comem_connect(sock, 10000, &st) != COMEM_OK)
        exit(3);
    static comem_msg m;
    raw_hello(st, "holder", &m, NULL, NULL);
    raw_admit(st, 2, 2 * GIB, 2000, &m);
    if (!m.u.admit_reply.granted)
        exit(4);
    FILE *f = fopen(bar + 1, "w");
    if (!f)
        exit(5);
    fclose(f);
}

static int64_t start_comemd(void **handle)
{
    char *argv[] = {g_comemd, "--socket", g_endpoint.name, "--device", g_card, NULL};
    return start_program(argv, handle);
}

static void test_admission_a_killed_clients_bytes_and_a_second_daemon(void **s)
{
    (void)s;
    void *daemon;
    int64_t pid = start_comemd(&daemon);
    comem_stream *st = NULL;
    int rc = COMEM_ENOENT;
    for (int i = 0; i < 300 && (rc = comem_connect(g_endpoint.name, 100, &st)) != COMEM_OK; i++)
        pause_ms(100); /* it is starting */
    assert_int_equal(rc, COMEM_OK);

    void *second_h;
    int64_t second = start_comemd(&second_h);
    assert_int_equal(wait_child(second, second_h), 3); /* another runs there: refused, not to be retried */

    static char arg[900];
    snprintf(arg, sizeof arg, "%s|%s", g_endpoint.name, g_note);
    remove(g_note);
    void *holder_h;
    int64_t holder = start_child_with(120000, arg, &holder_h);
    assert_true(wait_for_file(g_note, 30000)); /* the child holds 2 GiB */

    static comem_msg m;
    raw_hello(st, "asker", &m, NULL, NULL);
    raw_admit(st, 2, 2 * GIB, 100, &m);
    assert_int_equal(m.u.admit_reply.granted, 0); /* 4 GiB, 2 held: no room for 2 more */
    assert_true(m.u.admit_reply.short_by > 0);

    end_child(holder, holder_h); /* killed: nothing is said */
    wait_child(holder, holder_h);
    bool granted = false;
    for (uint32_t req = 3; req < 300 && !granted; req++) { /* once its end is seen, its bytes are back */
        raw_admit(st, req, 2 * GIB, 100, &m);
        granted = m.u.admit_reply.granted;
        if (!granted)
            pause_ms(20);
    }
    assert_true(granted);
    assert_int_equal(m.u.admit_reply.bytes, 2 * GIB);

    comem_stream_close(st);
    end_child(pid, daemon);
    wait_child(pid, daemon);
}

static int setup(void **s)
{
    (void)s;
    if (endpoint_make("comemd") != 0)
        return -1;
    char card[sizeof g_card - 16];
    endpoint_file(card, sizeof card, "card");
    snprintf(g_card, sizeof g_card, "sim:4GiB:path=%s", card);
    endpoint_file(g_note, sizeof g_note, "note");
#ifdef _WIN32
    snprintf(g_comemd, sizeof g_comemd, "%s\\comemd.exe", test_bin_dir());
#else
    snprintf(g_comemd, sizeof g_comemd, "%s/comemd", test_bin_dir());
#endif
    return 0;
}

/* The coordinator's lock file stays (on Windows in the runtime folder, outside the endpoint's). */
static void remove_lock_file(void)
{
    char lock[PATH_MAX + 16];
    if (comem_socket_sidecar(g_endpoint.name, ".lock", lock, sizeof lock) == COMEM_OK)
        remove(lock);
}

static int teardown(void **s)
{
    remove(g_note);
    remove_lock_file(); /* the rest goes with the endpoint's folder (Linux) or with its last handle (Windows) */
    return endpoint_teardown(s);
}

int main(int argc, char **argv)
{
    if (child_main(argc, argv, hold))
        return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_admission_a_killed_clients_bytes_and_a_second_daemon, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
