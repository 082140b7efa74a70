/*
 * tests/integration/test_client_fork.c - a process that forks after connecting.
 *
 * comemd runs over a simulated card. A client process registers a model
 * (2 GiB, 1 GiB resident) and holds a 512 MiB grant, then forks. Checked, in
 * order: every call the child makes on the inherited client fails with
 * COMEM_EFORKED and a reason naming the parent's pid, closing the inherited
 * client in the child says nothing to the coordinator, the child opens a
 * session of its own; then the parent's session, entry and grant are as it
 * left them, and its grant still turns into residency.
 */
#include "unit/cmocka_all.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "harness.h"

#define GIB COMEM_GIB
#define MIB COMEM_MIB

/* ThreadSanitizer cannot start threads in the child of a multi-threaded fork: there the child
   checks only what it must not do with its parent's client, and opens none of its own. */
#if defined(__SANITIZE_THREAD__)
#define OWN_CLIENT_IN_CHILD 0
#else
#define OWN_CLIENT_IN_CHILD 1
#endif

/* What the child reports, in this order. */
enum {
    R_SET_RESIDENT,
    R_REASON_NAMES_PARENT,
    R_ADMIT,
    R_GRANT_DONE,
    R_ENTRY_REMOVE,
    R_HOLDER_REMOVE,
    R_STATUS,
    R_CONNECTED,
    R_SESSION,
    R_OWN_OPEN,
    R_OWN_SESSION_DIFFERS,
    R_OWN_ENTRY,
    N_REPORTS
};

typedef struct fargs {
    const harness *h;
    chan down, up;
} fargs;

/* The forked child: reports each result to the test, then exits. */
static void child(comem_client *c, uint64_t holder, uint64_t entry, uint64_t grant, uint64_t parent_session,
                  int up)
{
    alarm(30); /* nothing here may hang: the threads the calls would wait on are not in this process */
    char reason[256], want[64];
    ch_put(up, comem_entry_set_resident(c, entry, 0));
    comem_take_reason(reason, sizeof reason);
    snprintf(want, sizeof want, "opened by pid %d", (int)getppid());
    ch_put(up, strstr(reason, want) != NULL);
    uint64_t g = 0;
    int64_t short_by = 0;
    ch_put(up, comem_admit(c, 0, holder, 256 * MIB, 0, 0, NULL, 0, 2000, &g, &short_by));
    ch_put(up, comem_grant_done(c, grant, entry, 512 * MIB));
    ch_put(up, comem_entry_remove(c, entry));
    ch_put(up, comem_holder_remove(c, holder));
    char *json = NULL;
    ch_put(up, comem_status_json(c, &json));
    ch_put(up, comem_client_connected(c));
    ch_put(up, (int64_t)comem_client_session(c));
    comem_client_close(c); /* the child's copy: the parent's session must not end */
    if (!OWN_CLIENT_IN_CHILD) {
        for (int i = R_OWN_OPEN; i < N_REPORTS; i++)
            ch_put(up, INT64_MIN);
        _exit(0);
    }

    comem_client *own = NULL;
    int rc = comem_client_open(NULL, COMEM_CLIENT_WORKER, "child", -1, COMEM_OPEN_NO_LOCAL, &own);
    ch_put(up, rc);
    ch_put(up, rc == COMEM_OK && comem_client_session(own) != 0 && comem_client_session(own) != parent_session);
    uint64_t h2 = 0, e2 = 0;
    rc = rc == COMEM_OK ? comem_holder_add(own, "models", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &h2) : rc;
    rc = rc == COMEM_OK ? comem_entry_add(own, h2, "small", 256 * MIB, 256 * MIB, 0, &e2) : rc;
    ch_put(up, rc);
    comem_client_close(own);
    _exit(0);
}

/* The client process: registers, is granted, forks, and answers the test's checks after the child is gone. */
static int parent(void *arg)
{
    fargs *a = arg;
    setenv("COMEM_SOCKET", a->h->sock, 1);
    comem_client *c = NULL;
    uint64_t holder = 0, entry = 0, grant = 0;
    int64_t short_by = 0;
    if (comem_client_open(NULL, COMEM_CLIENT_WORKER, "parent", -1, COMEM_OPEN_NO_LOCAL, &c) != COMEM_OK ||
        comem_holder_add(c, "models", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder) != COMEM_OK ||
        comem_entry_add(c, holder, "model", 2 * GIB, 1 * GIB, 0, &entry) != COMEM_OK ||
        comem_admit(c, 0, holder, 512 * MIB, 0, 0, NULL, 0, 5000, &grant, &short_by) != COMEM_OK)
        return 10;
    uint64_t session = comem_client_session(c);
    fflush(NULL);
    pid_t kid = fork();
    if (kid == 0)
        child(c, holder, entry, grant, session, a->up.wr);
    int st = 0;
    if (waitpid(kid, &st, 0) != kid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 11;
    ch_put(a->up.wr, -1); /* the child is gone: the test looks at the coordinator now */
    int64_t go = 0;
    if (!ch_get(a->down.rd, &go, 30000))
        return 12;
    ch_put(a->up.wr, comem_client_connected(c));
    ch_put(a->up.wr, comem_client_session(c) == session);
    ch_put(a->up.wr, comem_grant_done(c, grant, entry, 1 * GIB + 512 * MIB));
    if (!ch_get(a->down.rd, &go, 30000))
        return 13;
    comem_client_close(c);
    return 0;
}

static int64_t get(int fd)
{
    int64_t v = INT64_MIN;
    assert_true(ch_get(fd, &v, 30000));
    return v;
}

static void test_forked_child_never_acts_in_the_parents_session(void **s)
{
    harness *h = *s;
    h_init(h, "sim:8GiB:ctx=256MiB");
    h_start(h, NULL);
    fargs a = {.h = h};
    ch_open(&a.down, &a.up);
    pid_t p = h_child(parent, &a);

    int64_t r[N_REPORTS];
    for (int i = 0; i < N_REPORTS; i++)
        r[i] = get(a.up.rd);
    assert_int_equal(r[R_SET_RESIDENT], COMEM_EFORKED);
    assert_int_equal(r[R_REASON_NAMES_PARENT], 1);
    assert_int_equal(r[R_ADMIT], COMEM_EFORKED);
    assert_int_equal(r[R_GRANT_DONE], COMEM_EFORKED);
    assert_int_equal(r[R_ENTRY_REMOVE], COMEM_EFORKED);
    assert_int_equal(r[R_HOLDER_REMOVE], COMEM_EFORKED);
    assert_int_equal(r[R_STATUS], COMEM_EFORKED);
    assert_int_equal(r[R_CONNECTED], 0);
    assert_int_equal(r[R_SESSION], 0);
    if (OWN_CLIENT_IN_CHILD) {
        assert_int_equal(r[R_OWN_OPEN], COMEM_OK);
        assert_int_equal(r[R_OWN_SESSION_DIFFERS], 1);
        assert_int_equal(r[R_OWN_ENTRY], COMEM_OK);
    }
    assert_int_equal(get(a.up.rd), -1); /* the child has exited */

    /* The parent's session is as it left it: one session, its entry 1 GiB resident, its grant open. */
    assert_int_equal(h_process_count(h, "parent"), 1);
    assert_int_equal(h_process_resident(h, "parent"), 1 * GIB);
    assert_int_equal(h_status_num(h, "devices.0.grants.0.bytes"), 512 * MIB);
    assert_int_equal(h_process_count(h, "child"), 0); /* its own session ended with it */

    ch_put(a.down.wr, 1);
    assert_int_equal(get(a.up.rd), 1); /* still connected */
    assert_int_equal(get(a.up.rd), 1); /* in the same session */
    assert_int_equal(get(a.up.rd), COMEM_OK); /* its grant turns into residency */
    assert_int_equal(h_process_resident(h, "parent"), 1 * GIB + 512 * MIB);
    ch_put(a.down.wr, 2);
    assert_int_equal(h_wait(p), 0);
}

static int setup(void **s)
{
    static harness h;
    *s = &h;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_forked_child_never_acts_in_the_parents_session, setup, h_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
