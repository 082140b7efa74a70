/*
 * tests/integration/test_bounds.c - one process cannot take what the others need (issue 20 item 10).
 *
 * Played against a real comemd (ledger checks after every mutation) by real
 * processes on raw connections: a process's bound spans all its sessions; the
 * holders beyond what every process is sure of are shared first come, and a
 * process is refused there with a reply that says so and who holds the most;
 * and a process that tries to fill the global bounds through 64 sessions
 * leaves `comem status`, another process's RESERVE and its first HOLDER_ADD
 * answered within the client's ordinary timeout.
 */
#include "unit/cmocka_all.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "comem/comem.h"
#include "harness.h"
#include "raw.h"

/* What README.md promises ("What one client can make the coordinator hold is bounded"). */
#define PROCESS_HOLDERS 256    /* a process, over all its sessions */
#define PROCESS_ENTRIES 4096
#define ALL_HOLDERS 16384      /* the coordinator's, in all */
#define ALL_ENTRIES 65536
#define SURE_HOLDERS 8         /* every process may always register this many */
#define MAX_SESSIONS 1024      /* sessions the coordinator serves at once */
#define SHARED_HOLDERS (ALL_HOLDERS - SURE_HOLDERS * MAX_SESSIONS)
#define PEER_CONNS 64          /* connections one process may hold */

static comem_msg g_m, g_r; /* large: kept off the stack */

/* Sends m with request id rid and waits for the frame answering it. */
static int raw_call(int fd, comem_msg *m, uint32_t rid, comem_msg *reply)
{
    m->request_id = rid;
    if (!raw_send(fd, m))
        return -1;
    for (;;) {
        if (raw_recv(fd, reply, 5000) != 1)
            return -1;
        if (reply->request_id == rid)
            return reply->type;
    }
}

static int raw_session(const harness *h, const char *name)
{
    int fd = raw_connect(h->sock);
    int status = -1;
    if (fd < 0 || raw_hello(fd, COMEM_ROLE_WORKER, name, NULL, &status) != COMEM_MSG_HELLO_REPLY) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* HOLDER_ADD: the holder's id, or 0 with *status and why (the reply's text) set when refused. */
static uint64_t add_holder(int fd, int *status, char *why)
{
    memset(&g_m, 0, sizeof g_m);
    g_m.type = COMEM_MSG_HOLDER_ADD;
    g_m.u.holder_add.kind = COMEM_HOLDER_MODELS;
    g_m.u.holder_add.flags = COMEM_CAP_RELEASE | COMEM_CAP_IDLE_RELEASE;
    snprintf(g_m.u.holder_add.name, sizeof g_m.u.holder_add.name, "models");
    int t = raw_call(fd, &g_m, 2, &g_r);
    *status = t == COMEM_MSG_REPLY ? g_r.u.reply.status : t == COMEM_MSG_ID_REPLY ? 0 : -1000;
    if (why)
        snprintf(why, COMEM_WIRE_TEXT_MAX, "%s", t == COMEM_MSG_REPLY ? g_r.u.reply.message : "");
    return t == COMEM_MSG_ID_REPLY ? g_r.u.id.id : 0;
}

static uint64_t add_entry(int fd, uint64_t holder, int *status, char *why)
{
    memset(&g_m, 0, sizeof g_m);
    g_m.type = COMEM_MSG_ENTRY_ADD;
    g_m.u.entry_add.holder_id = holder;
    g_m.u.entry_add.size = 1;
    snprintf(g_m.u.entry_add.name, sizeof g_m.u.entry_add.name, "m");
    int t = raw_call(fd, &g_m, 3, &g_r);
    *status = t == COMEM_MSG_REPLY ? g_r.u.reply.status : t == COMEM_MSG_ID_REPLY ? 0 : -1000;
    if (why)
        snprintf(why, COMEM_WIRE_TEXT_MAX, "%s", t == COMEM_MSG_REPLY ? g_r.u.reply.message : "");
    return t == COMEM_MSG_ID_REPLY ? g_r.u.id.id : 0;
}

/* Counts device 0's holders and entries of the sessions of process pid in a status text; -1 when unreadable. */
static void count_in_status(const char *text, int pid, int *sessions, int *holders, int *entries)
{
    *sessions = *holders = *entries = -1;
    json_object *root = text ? json_tokener_parse(text) : NULL, *devs, *ps;
    if (!root || !json_object_object_get_ex(root, "devices", &devs) ||
        !json_object_object_get_ex(json_object_array_get_idx(devs, 0), "processes", &ps)) {
        json_object_put(root);
        return;
    }
    *sessions = *holders = *entries = 0;
    for (size_t i = 0; i < json_object_array_length(ps); i++) {
        json_object *p = json_object_array_get_idx(ps, i), *v, *hs;
        if (!json_object_object_get_ex(p, "pid", &v) || json_object_get_int(v) != pid ||
            !json_object_object_get_ex(p, "holders", &hs))
            continue;
        (*sessions)++;
        for (size_t k = 0; k < json_object_array_length(hs); k++) {
            json_object *es;
            (*holders)++;
            if (json_object_object_get_ex(json_object_array_get_idx(hs, k), "entries", &es))
                *entries += (int)json_object_array_length(es);
        }
    }
    json_object_put(root);
}

/* ---- 1. a process's bound spans its sessions ---- */

typedef struct other_args {
    const harness *h;
} other_args;

/* Another process: its first holder and entry are taken. 0 when both were. */
static int other_main(void *arg)
{
    other_args *a = arg;
    int fd = raw_session(a->h, "other"), st;
    if (fd < 0)
        return 10;
    uint64_t hid = add_holder(fd, &st, NULL);
    if (!hid)
        return 20;
    return add_entry(fd, hid, &st, NULL) ? 0 : 30;
}

static void test_the_bound_is_the_processs_over_its_sessions(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:ctx=300MiB");
    h_start(h, NULL);
    int a = raw_session(h, "two-sessions"), b = raw_session(h, "two-sessions"), st;
    assert_true(a >= 0 && b >= 0);
    char why[COMEM_WIRE_TEXT_MAX];
    uint64_t ha = 0, hb;
    for (int i = 0; i < PROCESS_HOLDERS - 1; i++) {
        uint64_t id = add_holder(a, &st, why);
        assert_int_equal(st, 0);
        ha = ha ? ha : id;
    }
    hb = add_holder(b, &st, why); /* the process's 256th */
    assert_int_equal(st, 0);
    assert_int_equal(add_holder(b, &st, why), 0); /* the 257th, on either session */
    assert_int_equal(st, COMEM_ERANGE);
    print_message("holder refused: %s\n", why);
    assert_non_null(strstr(why, "this process holds 256 over its 2 sessions"));
    assert_int_equal(add_holder(a, &st, why), 0);
    assert_int_equal(st, COMEM_ERANGE);

    for (int i = 0; i < PROCESS_ENTRIES; i++) {
        add_entry(a, ha, &st, why);
        assert_int_equal(st, 0);
    }
    assert_int_equal(add_entry(b, hb, &st, why), 0);
    assert_int_equal(st, COMEM_ERANGE);
    print_message("entry refused: %s\n", why);
    assert_non_null(strstr(why, "this process holds 4096 over its 2 sessions"));

    other_args oa = {h};
    assert_int_equal(h_wait(h_child(other_main, &oa)), 0); /* another process is not affected */

    close(a); /* the bound frees with the session; the status counts b and its own */
    for (int tries = 0; tries < 500 && h_status_num(h, "coordinator.sessions") != 2; tries++)
        usleep(10000);
    assert_int_equal(h_status_num(h, "coordinator.sessions"), 2);
    assert_true(add_holder(b, &st, why) != 0);
    assert_true(add_entry(b, hb, &st, why) != 0);
    close(b);
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
}

/* ---- 2. the shared holders: first come, and never what a process is sure of ---- */

typedef struct filler_args {
    const harness *h;
    chan to_child, to_parent;
} filler_args;

/* A process that registers holders until refused (or at its bound), says how many and why, and waits. */
static int filler_main(void *arg)
{
    filler_args *a = arg;
    int fd = raw_session(a->h, "filler"), st = 0, n = 0;
    char why[COMEM_WIRE_TEXT_MAX] = "";
    if (fd < 0)
        return 10;
    while (n < PROCESS_HOLDERS + 1 && add_holder(fd, &st, why))
        n++;
    ch_put(a->to_parent.wr, n);
    ch_put(a->to_parent.wr, st);
    ssize_t w = write(a->to_parent.wr, why, sizeof why);
    (void)w;
    int64_t go;
    ch_get(a->to_child.rd, &go, 120000); /* hold them until the parent is done */
    return 0;
}

static void test_every_process_is_sure_of_some_holders(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:ctx=300MiB");
    h_start(h, NULL);
    static filler_args kids[80];
    pid_t pids[80];
    int n_kids = 0, shared = 0, last = -1, last_st = 0;
    char why[COMEM_WIRE_TEXT_MAX] = "";
    /* Fillers, one after another, until one is refused below its own bound: the shared ones are taken. */
    while (n_kids < 80) {
        filler_args *k = &kids[n_kids];
        k->h = h;
        ch_open(&k->to_child, &k->to_parent);
        pids[n_kids] = h_child(filler_main, k);
        int64_t n, st;
        assert_true(ch_get(k->to_parent.rd, &n, 60000) && ch_get(k->to_parent.rd, &st, 5000));
        assert_int_equal(read(k->to_parent.rd, why, sizeof why), (ssize_t)sizeof why);
        n_kids++;
        shared += (int)n - SURE_HOLDERS;
        last = (int)n;
        last_st = (int)st;
        if (n < PROCESS_HOLDERS)
            break;
        assert_int_equal(st, COMEM_ERANGE); /* 256, and the 257th refused by its own bound */
    }
    print_message("%d fillers; the last took %d holders, refused: %s\n", n_kids, last, why);
    assert_int_equal(last_st, COMEM_ERANGE);
    assert_int_equal(shared, SHARED_HOLDERS); /* every shared holder was taken, none beyond */
    assert_true(last >= SURE_HOLDERS && last < PROCESS_HOLDERS);
    assert_non_null(strstr(why, "shared holders are taken"));
    assert_non_null(strstr(why, "filler")); /* whose: the process holding the most */

    /* A process that comes now still gets what every process is sure of, and no more. */
    int fd = raw_session(h, "late"), st;
    assert_true(fd >= 0);
    for (int i = 0; i < SURE_HOLDERS; i++) {
        assert_true(add_holder(fd, &st, why) != 0);
    }
    assert_int_equal(add_holder(fd, &st, why), 0);
    assert_int_equal(st, COMEM_ERANGE);
    print_message("late process refused: %s\n", why);
    assert_non_null(strstr(why, "shared holders are taken"));

    /* A filler leaves: what it held beyond its sure share is shared again. */
    ch_put(kids[0].to_child.wr, 1);
    assert_int_equal(h_wait(pids[0]), 0);
    int64_t left = n_kids - 1 + 1 + 1; /* the fillers still there, the late one, the status's own */
    for (int tries = 0; tries < 500 && h_status_num(h, "coordinator.sessions") != left; tries++)
        usleep(10000);
    assert_int_equal(h_status_num(h, "coordinator.sessions"), left);
    assert_true(add_holder(fd, &st, why) != 0);
    for (int i = 1; i < n_kids; i++)
        ch_put(kids[i].to_child.wr, 1);
    for (int i = 1; i < n_kids; i++)
        assert_int_equal(h_wait(pids[i]), 0);
    close(fd);
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
}

/* ---- 3. one process tries to fill the global bounds through 64 sessions ---- */

typedef struct hog_args {
    const harness *h;
    chan to_child, to_parent;
} hog_args;

static int hog_main(void *arg)
{
    hog_args *a = arg;
    int fds[PEER_CONNS], n_fds = 0, st;
    uint64_t first[PEER_CONNS] = {0};
    while (n_fds < PEER_CONNS && (fds[n_fds] = raw_session(a->h, "hog")) >= 0)
        n_fds++;
    int64_t holders = 0, entries = 0;
    for (int i = 0; i < n_fds && holders < ALL_HOLDERS; i++) {
        for (uint64_t id; holders < ALL_HOLDERS && (id = add_holder(fds[i], &st, NULL)) != 0; holders++)
            first[i] = first[i] ? first[i] : id;
    }
    for (int i = 0; i < n_fds && entries < ALL_ENTRIES; i++)
        while (first[i] && entries < ALL_ENTRIES && add_entry(fds[i], first[i], &st, NULL))
            entries++;
    ch_put(a->to_parent.wr, n_fds);
    ch_put(a->to_parent.wr, holders);
    ch_put(a->to_parent.wr, entries);
    int64_t go;
    ch_get(a->to_child.rd, &go, 120000);
    return 0;
}

static void test_a_process_filling_the_bounds_leaves_others_served(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:ctx=300MiB");
    h_start(h, NULL);
    static hog_args hog;
    hog.h = h;
    ch_open(&hog.to_child, &hog.to_parent);
    pid_t hp = h_child(hog_main, &hog);
    int64_t n_fds, holders, entries;
    assert_true(ch_get(hog.to_parent.rd, &n_fds, 300000));
    assert_true(ch_get(hog.to_parent.rd, &holders, 5000) && ch_get(hog.to_parent.rd, &entries, 5000));
    print_message("the hog opened %lld sessions, registered %lld holders and %lld entries\n", (long long)n_fds,
                  (long long)holders, (long long)entries);
    assert_int_equal(n_fds, PEER_CONNS);
    assert_int_equal(holders, PROCESS_HOLDERS);
    assert_int_equal(entries, PROCESS_ENTRIES);

    /* Status answers within the client's ordinary timeout, listing all of it. */
    char *text = h_status(h);
    assert_non_null(text);
    int sessions, hs, es;
    count_in_status(text, (int)hp, &sessions, &hs, &es);
    comem_free(text);
    assert_int_equal(sessions, PEER_CONNS);
    assert_int_equal(hs, PROCESS_HOLDERS);
    assert_int_equal(es, PROCESS_ENTRIES);

    /* Another process: its RESERVE is answered, and its first holder and entry are taken. */
    comem_client *c = NULL;
    assert_int_equal(comem_client_open(h->sock, COMEM_CLIENT_WORKER, "neighbour", -1, COMEM_OPEN_NO_LOCAL, &c), 0);
    int64_t reserve = -1, headroom = -1;
    assert_int_equal(comem_reserve(c, 0, &reserve, &headroom), COMEM_OK);
    assert_true(reserve >= 0);
    uint64_t holder = 0, entry = 0;
    assert_int_equal(comem_holder_add(c, "models", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder), COMEM_OK);
    assert_int_equal(comem_entry_add(c, holder, "m", 1 << 20, 0, 0, &entry), COMEM_OK);
    comem_client_close(c);

    ch_put(hog.to_child.wr, 1);
    assert_int_equal(h_wait(hp), 0);
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
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
    const char *only = getenv("COMEM_TEST_FILTER");
    if (only && *only)
        cmocka_set_test_filter(only);
    const struct CMUnitTest tests[] = {
        MP_TEST(test_the_bound_is_the_processs_over_its_sessions),
        MP_TEST(test_every_process_is_sure_of_some_holders),
        MP_TEST(test_a_process_filling_the_bounds_leaves_others_served),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
