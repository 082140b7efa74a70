/*
 * tests/integration/test_trust_receipts.c - a receipt counts what came off, not what its holder says
 * (issue 40, item 10).
 *
 * A holder answers a release ask with the bytes it says it freed. The coordinator counts at most what
 * came off: the drop in that holder's registered bytes as the ledger sees them after the receipt
 * (per entry, for a RELEASE), and, where the card reads each process's use, the drop in its
 * process's use. comemd runs as its own process over a simulated card; each holder is a forked
 * process speaking raw frames, so it can say exactly what a careless or lying holder says:
 *   - a RELEASE of one 1 GiB entry answered "2 GiB freed" is relayed as 1 GiB, and counted so;
 *   - `comem release --json` over two 1 GiB entries, each answered "2 GiB", reports 2 GiB;
 *   - a holder that frees nothing and answers 1 TiB, asked by an admission round after round,
 *     adds nothing to counters.bytes_freed, and the refusal says nothing was freed;
 *   - a holder that marks its entry released in the ledger but leaves its bytes on the card is
 *     counted by the card: nothing.
 */
#include "unit/cmocka_all.h"

#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "harness.h"
#include "raw.h"

#define GIB COMEM_GIB
#define MIB COMEM_MIB
#define TIB (1024 * COMEM_GIB)
#define SPEC "sim:8GiB:reserved=256MiB:ctx=300MiB"
#define WAIT_MS 30000 /* a bound that only a broken build reaches; no test asserts a speed */

/* How the holder answers an ask. */
enum mode {
    MODE_DOUBLE = 1, /* frees the entries named (card and ledger) and says it freed twice the bytes asked */
    MODE_LIE = 2,    /* frees nothing, lists nothing, says 1 TiB */
    MODE_LEDGER = 3, /* lists the entries named as released but leaves their bytes on the card */
};

/* ---- the holder: a forked process speaking raw frames ---- */

typedef struct holder_args {
    const harness *h;
    enum mode mode;
    int n;        /* entries */
    int64_t size; /* each, allocated on the card and registered resident */
    chan down, up;
} holder_args;

static comem_msg g_m, g_r; /* large: kept off the stack */

/* Sends m with request id rid and waits for the frame answering it (asks and acknowledgements skipped). */
static int raw_call(int fd, comem_msg *m, uint32_t rid, comem_msg *reply)
{
    m->request_id = rid;
    if (!raw_send(fd, m))
        return -1;
    for (;;) {
        if (raw_recv(fd, reply, WAIT_MS) != 1)
            return -1;
        if (reply->request_id == rid && reply->type != COMEM_MSG_ADMIT_QUEUED)
            return reply->type;
    }
}

static int holder_main(void *arg)
{
    holder_args *a = arg;
    comem_sim *sim = h_sim(a->h);
    int fd = raw_connect(a->h->sock), st = -1;
    if (!sim || fd < 0 || raw_hello(fd, COMEM_ROLE_WORKER, "holder", NULL, &st) != COMEM_MSG_HELLO_REPLY)
        return 10;
    comem_sim_touch(sim, 0);
    memset(&g_m, 0, sizeof g_m);
    g_m.type = COMEM_MSG_HOLDER_ADD;
    g_m.u.holder_add.kind = COMEM_HOLDER_MODELS;
    g_m.u.holder_add.flags = COMEM_CAP_RELEASE;
    snprintf(g_m.u.holder_add.name, sizeof g_m.u.holder_add.name, "models");
    if (raw_call(fd, &g_m, 2, &g_r) != COMEM_MSG_ID_REPLY)
        return 11;
    uint64_t holder = g_r.u.id.id, ids[4] = {0};
    int64_t resident[4] = {0};
    for (int i = 0; i < a->n; i++) {
        if (comem_sim_alloc(sim, 0, a->size) != COMEM_OK)
            return 12;
        memset(&g_m, 0, sizeof g_m);
        g_m.type = COMEM_MSG_ENTRY_ADD;
        g_m.u.entry_add.holder_id = holder;
        g_m.u.entry_add.size = g_m.u.entry_add.resident = a->size;
        snprintf(g_m.u.entry_add.name, sizeof g_m.u.entry_add.name, "model-%d", i);
        if (raw_call(fd, &g_m, (uint32_t)(3 + i), &g_r) != COMEM_MSG_ID_REPLY)
            return 13;
        ids[i] = g_r.u.id.id;
        resident[i] = a->size;
        ch_put(a->up.wr, (int64_t)ids[i]);
    }
    uint64_t seq = 1;
    for (;;) { /* answers asks until the coordinator goes */
        if (raw_recv(fd, &g_m, 3600 * 1000) != 1)
            return 0;
        if (g_m.type != COMEM_MSG_ASK)
            continue;
        comem_msg_ask ask = g_m.u.ask;
        memset(&g_r, 0, sizeof g_r);
        g_r.type = COMEM_MSG_RECEIPT;
        g_r.u.receipt.ask_id = ask.ask_id;
        g_r.u.receipt.outcome = COMEM_RECEIPT_DONE;
        g_r.u.receipt.freed = a->mode == MODE_LIE ? TIB : a->mode == MODE_DOUBLE ? 2 * ask.bytes : ask.bytes;
        for (uint16_t k = 0; a->mode != MODE_LIE && k < ask.n; k++) {
            for (int i = 0; i < a->n; i++) {
                if (ids[i] != ask.items[k].entry_id || resident[i] == 0)
                    continue;
                if (a->mode == MODE_DOUBLE && comem_sim_free(sim, 0, resident[i]) != COMEM_OK)
                    return 14;
                resident[i] = 0;
                g_r.u.receipt.items[g_r.u.receipt.n++] = (comem_wire_residency){ids[i], seq++, 0, 0};
            }
        }
        if (!raw_send(fd, &g_r))
            return 0;
        ch_put(a->up.wr, 1); /* one ask answered */
    }
}

/* Starts a holder of n entries of size bytes each, answering as mode; its entries' ids in ids. */
static pid_t start_holder(holder_args *a, const harness *h, enum mode mode, int n, int64_t size, uint64_t *ids)
{
    *a = (holder_args){.h = h, .mode = mode, .n = n, .size = size};
    ch_open(&a->down, &a->up);
    pid_t pid = h_child(holder_main, a);
    for (int i = 0; i < n; i++) {
        int64_t id = 0;
        assert_true(ch_get(a->up.rd, &id, WAIT_MS));
        ids[i] = (uint64_t)id;
    }
    return pid;
}

/* ---- reading the coordinator ---- */

/* A number of the holder process's first holder ("receipts_over", "resident"); INT64_MIN when absent. */
static int64_t holder_num(const harness *h, const char *key)
{
    char *text = h_status(h);
    json_object *root = text ? json_tokener_parse(text) : NULL, *devs, *ps, *v;
    comem_free(text);
    int64_t r = INT64_MIN;
    if (root && json_object_object_get_ex(root, "devices", &devs) &&
        json_object_object_get_ex(json_object_array_get_idx(devs, 0), "processes", &ps)) {
        for (size_t i = 0; i < json_object_array_length(ps); i++) {
            json_object *p = json_object_array_get_idx(ps, i), *name, *hs;
            if (json_object_object_get_ex(p, "name", &name) && !strcmp(json_object_get_string(name), "holder") &&
                json_object_object_get_ex(p, "holders", &hs) &&
                json_object_object_get_ex(json_object_array_get_idx(hs, 0), key, &v))
                r = json_object_get_int64(v);
        }
    }
    json_object_put(root);
    return r;
}

/* A raw session of another process's role: the requester. */
static int requester(const harness *h, const char *name)
{
    int fd = raw_connect(h->sock), st = -1;
    assert_true(fd >= 0);
    assert_int_equal(raw_hello(fd, COMEM_ROLE_WORKER, name, NULL, &st), COMEM_MSG_HELLO_REPLY);
    return fd;
}

/* RELEASE of entry (all of it); the reply in g_r. */
static void release(int fd, uint64_t entry)
{
    memset(&g_m, 0, sizeof g_m);
    g_m.type = COMEM_MSG_RELEASE;
    g_m.u.release.entry_id = entry;
    g_m.u.release.bytes = -1;
    g_m.u.release.timeout_ms = WAIT_MS;
    assert_int_equal(raw_call(fd, &g_m, 7, &g_r), COMEM_MSG_RELEASE_REPLY);
}

static void assert_ledger_clean(const harness *h)
{
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    assert_true(h_status_num(h, "coordinator.checks") > 0);
}

/* ---- 1. a RELEASE relays what came off the entry ---- */

static void test_a_release_reply_counts_what_came_off_the_entry(void **s)
{
    harness *h = *s;
    h_init(h, SPEC);
    h_start(h, NULL);
    holder_args a;
    uint64_t ids[2];
    start_holder(&a, h, MODE_DOUBLE, 2, GIB, ids); /* two 1 GiB entries: the holder held 2 GiB when asked */
    int fd = requester(h, "requester");
    release(fd, ids[0]);
    assert_int_equal(g_r.u.release_reply.outcome, COMEM_RECEIPT_DONE);
    assert_int_equal(g_r.u.release_reply.resident, 0);
    assert_int_equal(g_r.u.release_reply.freed, GIB); /* it said 2 GiB: the entry held 1 */
    assert_int_equal(h_status_num(h, "counters.bytes_freed"), GIB);
    assert_int_equal(holder_num(h, "resident"), GIB); /* the other entry stays */
    assert_int_equal(holder_num(h, "receipts_over"), 1); /* the claim, kept for diagnosis */
    close(fd);
    assert_ledger_clean(h);
}

/* ---- 2. `comem release --json` adds up what came off ---- */

static void test_comem_release_reports_what_came_off(void **s)
{
    harness *h = *s;
    h_init(h, SPEC);
    h_start(h, NULL);
    holder_args a;
    uint64_t ids[2];
    start_holder(&a, h, MODE_DOUBLE, 2, GIB, ids);
    static char out[16384], err[4096];
    const char *argv[] = {"comem", "release", "--holder", "models", "--json", "--socket", h->sock, NULL};
    int rc = h_run(argv, NULL, WAIT_MS, out, sizeof out, err, sizeof err);
    print_message("%s%s", out, err);
    assert_int_equal(rc, 0);
    json_object *root = json_tokener_parse(out), *v, *asks;
    assert_non_null(root);
    assert_true(json_object_object_get_ex(root, "freed", &v));
    assert_int_equal(json_object_get_int64(v), 2 * GIB); /* 2 GiB asked of two entries, each answered "2 GiB" */
    assert_true(json_object_object_get_ex(root, "asks", &asks));
    assert_int_equal(json_object_array_length(asks), 2);
    for (size_t i = 0; i < 2; i++) {
        assert_true(json_object_object_get_ex(json_object_array_get_idx(asks, i), "freed", &v));
        assert_int_equal(json_object_get_int64(v), GIB);
    }
    json_object_put(root);
    assert_int_equal(h_status_num(h, "counters.bytes_freed"), 2 * GIB);
    assert_int_equal(holder_num(h, "resident"), 0);
    assert_ledger_clean(h);
}

/* ---- 3. a holder that frees nothing is credited nothing, however much it says ---- */

static void test_a_holder_that_frees_nothing_is_credited_nothing(void **s)
{
    harness *h = *s;
    h_init(h, SPEC);
    h_start(h, NULL);
    holder_args a;
    uint64_t ids[1];
    start_holder(&a, h, MODE_LIE, 1, 5 * GIB, ids); /* 5 GiB of the 8 GiB card */
    int fd = requester(h, "admitter");
    memset(&g_m, 0, sizeof g_m);
    g_m.type = COMEM_MSG_ADMIT;
    g_m.u.admit.device = 0;
    g_m.u.admit.weights = 3 * GIB; /* fits only if the holder gives bytes back */
    g_m.u.admit.timeout_ms = WAIT_MS;
    assert_int_equal(raw_call(fd, &g_m, 9, &g_r), COMEM_MSG_ADMIT_REPLY);
    comem_msg_admit_reply r = g_r.u.admit_reply;
    int64_t asks = h_status_num(h, "counters.asks");
    print_message("asked %d time(s), freed %lld, short by %lld\n", r.n_asked, (long long)r.freed,
                  (long long)r.short_by);
    assert_false(r.granted);
    assert_true(r.n_asked >= 1); /* it was asked, and answered "1 TiB" each time */
    assert_int_equal(asks, r.n_asked);
    assert_int_equal(r.freed, 0); /* what the refusal says was freed */
    assert_true(r.short_by > 0);
    assert_int_equal(h_status_num(h, "counters.bytes_freed"), 0);
    assert_int_equal(holder_num(h, "resident"), 5 * GIB);
    assert_int_equal(holder_num(h, "receipts_over"), asks);
    close(fd);
    assert_ledger_clean(h);
}

/* ---- 4. the card has the last word where it reads each process ---- */

static void test_a_receipt_the_card_does_not_show_is_not_counted(void **s)
{
    harness *h = *s;
    h_init(h, SPEC);
    h_start(h, NULL);
    holder_args a;
    uint64_t ids[2];
    start_holder(&a, h, MODE_LEDGER, 2, GIB, ids);
    int fd = requester(h, "requester");
    release(fd, ids[0]);
    assert_int_equal(g_r.u.release_reply.outcome, COMEM_RECEIPT_DONE);
    assert_int_equal(g_r.u.release_reply.resident, 0); /* the ledger believes its residency... */
    assert_int_equal(g_r.u.release_reply.freed, 0);    /* ...but the card shows nothing leave its process */
    assert_int_equal(h_status_num(h, "counters.bytes_freed"), 0);
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
    const char *only = getenv("COMEM_TEST_FILTER"); /* e.g. "*card*": run only the tests that match */
    if (only && *only)
        cmocka_set_test_filter(only);
    const struct CMUnitTest tests[] = {
        MP_TEST(test_a_release_reply_counts_what_came_off_the_entry),
        MP_TEST(test_comem_release_reports_what_came_off),
        MP_TEST(test_a_holder_that_frees_nothing_is_credited_nothing),
        MP_TEST(test_a_receipt_the_card_does_not_show_is_not_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
