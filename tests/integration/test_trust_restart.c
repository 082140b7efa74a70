/*
 * tests/integration/test_trust_restart.c - a restarted coordinator never grants the same bytes twice
 * (issue 40 item 1).
 *
 * X is granted 5 GiB of an 8 GiB card and is still loading when comemd is
 * SIGKILLed and started again. Before, the new ledger knew nothing of X's
 * grant: Y was granted the same bytes, and X's allocation failed while its
 * grant_done said OK. Now the new coordinator keeps what the old one had
 * granted (the status view's figure) for X to claim again:
 *   - Y, admitting at once, is refused; X claims its grant again, loads, and
 *     its grant_done is OK;
 *   - an X that stays stopped past the window loses its grant: Y is granted,
 *     and X's grant_done then says ENOSPC instead of claiming bytes nobody kept;
 *   - a RECLAIM takes only what a previous coordinator granted, never the room
 *     (it skips the admission queue).
 */
#include "unit/cmocka_all.h"

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "harness.h"
#include "raw.h"

#define GIB COMEM_GIB
#define MIB COMEM_MIB
#define SPEC "sim:8GiB:reserved=256MiB:ctx=300MiB"
#define LOAD (5 * GIB)

typedef struct x_args {
    const harness *h;
    chan down, up;
} x_args;

/* X: admits LOAD, says so, waits for the word; then, once connected again, loads and reports grant_done. */
static int x_main(void *arg)
{
    x_args *a = arg;
    comem_sim *sim = h_sim(a->h);
    comem_client *c = NULL;
    if (!sim || comem_client_open(a->h->sock, COMEM_CLIENT_WORKER, "x", -1, COMEM_OPEN_NO_LOCAL, &c))
        return 10;
    comem_sim_touch(sim, 0);
    uint64_t holder, grant, entry;
    if (comem_holder_add(c, "models", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder) ||
        comem_admit(c, 0, holder, LOAD, 0, 0, NULL, 0, 10000, &grant, NULL) ||
        comem_entry_add(c, holder, "model", LOAD, 0, 0, &entry))
        return 11;
    ch_put(a->up.wr, 1); /* granted, not loaded: the coordinator may go now */
    int64_t cmd;
    if (!ch_get(a->down.rd, &cmd, 60000))
        return 12;
    for (int i = 0; i < 2000 && !comem_client_connected(c); i++) /* its resync (and claim) done */
        usleep(10000);
    if (!comem_client_connected(c))
        return 13;
    int alloc = comem_sim_alloc(sim, 0, LOAD);
    ch_put(a->up.wr, alloc);
    ch_put(a->up.wr, comem_grant_done(c, grant, entry, alloc == COMEM_OK ? LOAD : 0));
    if (!ch_get(a->down.rd, &cmd, 60000))
        return 14;
    comem_client_close(c);
    return 0;
}

/* Y: a new process after the restart; admits LOAD (within timeout_ms) and reports, loading what it is granted. */
typedef struct y_args {
    const harness *h;
    int timeout_ms;
    chan down, up;
} y_args;

static int y_main(void *arg)
{
    y_args *a = arg;
    comem_sim *sim = h_sim(a->h);
    comem_client *c = NULL;
    if (!sim || comem_client_open(a->h->sock, COMEM_CLIENT_WORKER, "y", -1, COMEM_OPEN_NO_LOCAL, &c))
        return 10;
    comem_sim_touch(sim, 0);
    uint64_t holder, grant = 0, entry;
    if (comem_holder_add(c, "models", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder))
        return 11;
    int64_t cmd;
    while (ch_get(a->down.rd, &cmd, 60000) && cmd > 0) {
        int rc = comem_admit(c, 0, holder, LOAD, 0, 0, NULL, 0, a->timeout_ms, &grant, NULL);
        if (rc == COMEM_OK) {
            rc = comem_sim_alloc(sim, 0, LOAD) == COMEM_OK ? COMEM_OK : -1000; /* -1000: a grant that lied */
            comem_entry_add(c, holder, "model", LOAD, 0, 0, &entry);
            comem_grant_done(c, grant, entry, LOAD);
        }
        ch_put(a->up.wr, rc);
    }
    comem_client_close(c);
    return 0;
}

static void stop_process(pid_t pid)
{
    int st;
    kill(pid, SIGSTOP);
    assert_int_equal(waitpid(pid, &st, WUNTRACED), pid);
    assert_true(WIFSTOPPED(st));
}

/* Waits until the status shows a session of the process named `name`. */
static void wait_for_session(const harness *h, const char *name)
{
    for (int i = 0; i < 2000 && h_process_count(h, name) < 1; i++)
        usleep(10000);
    assert_int_equal(h_process_count(h, name), 1);
}

static void test_a_restart_keeps_a_loading_grant(void **s)
{
    harness *h = *s;
    h_init(h, SPEC);
    h_start(h, NULL);
    x_args x = {h, {0, 0}, {0, 0}};
    ch_open(&x.down, &x.up);
    pid_t xid = h_child(x_main, &x);
    int64_t v;
    assert_true(ch_get(x.up.rd, &v, 20000));
    h_stop(h, true); /* SIGKILL, while X still loads */
    h_start(h, NULL);

    y_args y = {h, 2000, {0, 0}, {0, 0}};
    ch_open(&y.down, &y.up);
    pid_t yid = h_child(y_main, &y);
    ch_put(y.down.wr, 1);
    assert_true(ch_get(y.up.rd, &v, 30000));
    assert_int_equal(v, COMEM_ENOSPC); /* before: granted the bytes X was still loading into */

    wait_for_session(h, "x");
    ch_put(x.down.wr, 1);
    int64_t alloc, done;
    assert_true(ch_get(x.up.rd, &alloc, 30000));
    assert_true(ch_get(x.up.rd, &done, 30000));
    assert_int_equal(alloc, COMEM_OK); /* the card still had X's bytes */
    assert_int_equal(done, COMEM_OK);
    for (int i = 0; i < 200 && h_process_resident(h, "x") != LOAD; i++)
        usleep(10000);
    assert_int_equal(h_process_resident(h, "x"), LOAD);
    assert_int_equal(h_status_num(h, "devices.0.granted"), 0); /* claimed, then loaded */

    ch_put(x.down.wr, 1);
    ch_put(y.down.wr, 0);
    assert_int_equal(h_wait(xid), 0);
    assert_int_equal(h_wait(yid), 0);
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
}

static void test_a_grant_not_claimed_in_time_is_lost_and_said_so(void **s)
{
    harness *h = *s;
    h_init(h, SPEC);
    h_start(h, NULL);
    x_args x = {h, {0, 0}, {0, 0}};
    ch_open(&x.down, &x.up);
    pid_t xid = h_child(x_main, &x);
    int64_t v;
    assert_true(ch_get(x.up.rd, &v, 20000));
    stop_process(xid); /* X cannot reconnect: its grant is not claimed */
    h_stop(h, true);
    h_start(h, NULL);

    y_args y = {h, 500, {0, 0}, {0, 0}};
    ch_open(&y.down, &y.up);
    pid_t yid = h_child(y_main, &y);
    int refused = 0;
    do { /* refused while the new coordinator keeps X's grant; granted once the window has closed */
        ch_put(y.down.wr, 1);
        assert_true(ch_get(y.up.rd, &v, 30000));
        refused += v == COMEM_ENOSPC;
        if (v == COMEM_ENOSPC)
            usleep(100000);
    } while (v == COMEM_ENOSPC && refused < 300);
    assert_true(refused >= 1);
    assert_int_equal(v, COMEM_OK);

    kill(xid, SIGCONT);
    wait_for_session(h, "x");
    ch_put(x.down.wr, 1);
    int64_t alloc, done;
    assert_true(ch_get(x.up.rd, &alloc, 30000));
    assert_true(ch_get(x.up.rd, &done, 30000));
    assert_int_not_equal(alloc, COMEM_OK); /* Y holds those bytes now */
    assert_int_equal(done, COMEM_ENOSPC);  /* before: OK, for bytes nobody kept */

    ch_put(x.down.wr, 1);
    ch_put(y.down.wr, 0);
    assert_int_equal(h_wait(xid), 0);
    assert_int_equal(h_wait(yid), 0);
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
}

/* With nothing inherited, a RECLAIM is refused however free the card is: it is no admission. */
static void test_a_reclaim_never_takes_the_room(void **s)
{
    harness *h = *s;
    h_init(h, SPEC);
    h_start(h, NULL);
    int fd = raw_connect(h->sock), st;
    assert_true(fd >= 0);
    assert_int_equal(raw_hello(fd, COMEM_ROLE_WORKER, "claimer", NULL, &st), COMEM_MSG_HELLO_REPLY);
    comem_msg m = {.type = COMEM_MSG_RECLAIM, .request_id = 7}, r;
    m.u.reclaim.device = 0;
    m.u.reclaim.bytes = GIB; /* an 8 GiB card with nobody on it */
    assert_true(raw_send(fd, &m));
    assert_int_equal(raw_recv(fd, &r, 5000), 1);
    assert_int_equal(r.type, COMEM_MSG_REPLY);
    assert_int_equal(r.u.reply.status, COMEM_ENOSPC);
    assert_int_equal(h_status_num(h, "devices.0.granted"), 0);
    close(fd);
}

static harness g_h;

static int setup(void **s)
{
    *s = &g_h;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_restart_keeps_a_loading_grant, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_a_grant_not_claimed_in_time_is_lost_and_said_so, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_a_reclaim_never_takes_the_room, setup, h_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
