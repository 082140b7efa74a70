/*
 * tests/integration/test_idle_pager.c - idle release and a pager in use, with
 * a real comemd (a short --idle-release) and real processes on a simulated card.
 *
 * A worker process ("kid") attaches a pager, faults a VBAR in, and then either
 * keeps faulting it (as a model's forward passes do, without node
 * boundaries), stops, or is marked busy. Beside the pager it registers a
 * plain idle holder, the sentinel, which idle release empties once per idle
 * period and the kid fills again: the sentinel's asks are this test's clock,
 * so every wait is "until idle release has run N times", never a duration.
 *
 * Covered: a pager that keeps faulting keeps every page across several idle
 * periods (no page evicted, none committed again, every fault resident, and
 * any idle ask it got was declined); a pager that stops faulting is emptied
 * by idle release after that; a pager marked busy is never asked; and a
 * TOUCH naming another session's holder does not keep it from idle release.
 */
#include "unit/cmocka_all.h"

#include <json-c/json.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "comem/pager.h"
#include "harness.h"
#include "raw.h"

#define MIB COMEM_MIB
#define CARD "sim:8GiB:reserved=256MiB:ctx=300MiB"
#define PS (32 * MIB)        /* the pager's page */
#define PAGES 8              /* the VBAR: 256 MiB, all of it resident */
#define SENTINEL (64 * MIB)  /* what the sentinel holds while it is not released */
#define HANG_GUARD_MS 60000  /* only so a broken build cannot hang the suite */

enum command { CMD_EXIT = 0, CMD_RUN = 1, CMD_STOP = 2, CMD_QUERY = 3, CMD_BUSY = 4 };

/* What the kid reports, in this order, after every command. */
typedef struct figures {
    int64_t sentinel_asks; /* idle asks the sentinel answered */
    int64_t usage;         /* the pager's resident bytes */
    int64_t faults;        /* faults the loop made */
    int64_t offloaded;     /* ... answered OFFLOADED (a page had been taken) */
    int64_t reloaded;      /* ... whose signature changed (a page committed again) */
    int64_t commits, evictions, release_asks, idle_declined, touches; /* COMEM_PAGER_STAT_* */
    int64_t holder;        /* the pager's holder id in this process */
} figures;
#define N_FIGURES ((int)(sizeof(figures) / sizeof(int64_t)))

typedef struct kid_args {
    const harness *h;
    chan down, up;
} kid_args;

typedef struct sentinel {
    pthread_mutex_t lock;
    comem_client *c;
    comem_sim *sim;
    uint64_t entry;
    int64_t resident;
    int64_t asks;
} sentinel;

static int sentinel_release(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                            const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder, (void)bytes, (void)entries, (void)amounts, (void)n;
    sentinel *st = user;
    *freed = 0;
    pthread_mutex_lock(&st->lock);
    if (kind == COMEM_RELEASE_IDLE) {
        st->asks++;
        if (st->resident > 0) {
            comem_sim_free(st->sim, 0, st->resident);
            *freed = st->resident;
            st->resident = 0;
            comem_entry_set_resident(st->c, st->entry, 0);
        }
    }
    pthread_mutex_unlock(&st->lock);
    return COMEM_OK;
}

/* The sentinel holds its bytes again after a release, so the next idle period asks it again. */
static void sentinel_fill(sentinel *st)
{
    pthread_mutex_lock(&st->lock);
    if (st->resident == 0 && comem_sim_alloc(st->sim, 0, SENTINEL) == COMEM_OK) {
        st->resident = SENTINEL;
        comem_entry_set_resident(st->c, st->entry, SENTINEL);
    }
    pthread_mutex_unlock(&st->lock);
}

static int kid_main(void *arg)
{
    kid_args *a = arg;
    sentinel st = {0};
    pthread_mutex_init(&st.lock, NULL);
    st.sim = h_sim(a->h);
    if (!st.sim || comem_client_open(a->h->sock, COMEM_CLIENT_WORKER, "kid", -1, COMEM_OPEN_NO_LOCAL, &st.c) != COMEM_OK)
        return 10;
    comem_client_set_timeout(st.c, 20000);
    comem_sim_touch(st.sim, 0);
    comem_pager *p = NULL;
    comem_vbar *v = NULL;
    if (comem_pager_open(COMEM_PAGER_SIM, 0, a->h->spec, &p) != COMEM_OK || comem_pager_attach(p, st.c, "weights") ||
        comem_vbar_create(p, PAGES * PS, PS, &v) != COMEM_OK)
        return 11;
    uint32_t sig[PAGES], s1;
    for (int i = 0; i < PAGES; i++) {
        if (comem_vbar_fault(v, i * PS, PS, &sig[i], 1) != COMEM_VBAR_RESIDENT)
            return 12;
        comem_vbar_unpin(v, i * PS, PS);
    }
    uint64_t sh = 0;
    if (comem_holder_add(st.c, "sentinel", 0, COMEM_KIND_RAW, COMEM_ANSWERS_IDLE, sentinel_release, &st, &sh) ||
        comem_entry_add(st.c, sh, "sentinel", SENTINEL, 0, 0, &st.entry) != COMEM_OK)
        return 13;
    sentinel_fill(&st);

    figures f = {0};
    f.holder = (int64_t)comem_pager_holder(p);
    bool running = false;
    ch_put(a->up.wr, 1); /* ready */
    for (;;) {
        int64_t cmd;
        if (ch_get(a->down.rd, &cmd, running ? 1 : HANG_GUARD_MS)) {
            if (cmd == CMD_EXIT)
                break;
            if (cmd == CMD_RUN || cmd == CMD_STOP)
                running = cmd == CMD_RUN;
            if (cmd == CMD_BUSY)
                comem_holder_busy(st.c, comem_pager_holder(p), 1, "computing");
            pthread_mutex_lock(&st.lock);
            f.sentinel_asks = st.asks;
            pthread_mutex_unlock(&st.lock);
            f.usage = comem_pager_usage(p);
            f.commits = comem_pager_stat(p, COMEM_PAGER_STAT_COMMITS);
            f.evictions = comem_pager_stat(p, COMEM_PAGER_STAT_EVICTIONS);
            f.release_asks = comem_pager_stat(p, COMEM_PAGER_STAT_RELEASE_ASKS);
            f.idle_declined = comem_pager_stat(p, COMEM_PAGER_STAT_IDLE_DECLINED);
            f.touches = comem_pager_stat(p, COMEM_PAGER_STAT_TOUCHES);
            const int64_t *out = (const int64_t *)&f;
            for (int i = 0; i < N_FIGURES; i++)
                ch_put(a->up.wr, out[i]);
        } else if (!running) {
            break; /* the test is gone */
        }
        if (running) {
            /* One forward pass: every page, in order, faulted, used and unpinned. */
            for (int i = 0; i < PAGES; i++) {
                f.faults++;
                int rc = comem_vbar_fault(v, i * PS, PS, &s1, 1);
                if (rc != COMEM_VBAR_RESIDENT) {
                    f.offloaded++;
                    continue;
                }
                if (s1 != sig[i])
                    f.reloaded++;
                sig[i] = s1;
                comem_vbar_unpin(v, i * PS, PS);
            }
        }
        sentinel_fill(&st);
    }
    comem_pager_close(p);
    comem_client_close(st.c);
    return 0;
}

typedef struct kid {
    kid_args a;
    pid_t pid;
} kid;

static void spawn_kid(kid *k, const harness *h)
{
    k->a = (kid_args){h, {0, 0}, {0, 0}};
    ch_open(&k->a.down, &k->a.up);
    k->pid = h_child(kid_main, &k->a);
    int64_t ready;
    assert_true(ch_get(k->a.up.rd, &ready, 20000));
}

static figures command(kid *k, int64_t cmd)
{
    figures f;
    int64_t *in = (int64_t *)&f;
    ch_put(k->a.down.wr, cmd);
    for (int i = 0; i < N_FIGURES; i++)
        assert_true(ch_get(k->a.up.rd, &in[i], 20000));
    return f;
}

/* Until idle release has asked the sentinel `asks` times in all: that many idle periods passed. */
static figures wait_sentinel(kid *k, int64_t asks)
{
    figures f = command(k, CMD_QUERY);
    for (int waited = 0; f.sentinel_asks < asks && waited < HANG_GUARD_MS; waited += 50) {
        usleep(50 * 1000);
        f = command(k, CMD_QUERY);
    }
    assert_true(f.sentinel_asks >= asks);
    return f;
}

static void finish(kid *k)
{
    ch_put(k->a.down.wr, CMD_EXIT);
    assert_int_equal(h_wait(k->pid), 0);
}

/* The pager holder's resident bytes in the coordinator's status, and (optionally) its id; -1 when absent. */
static int64_t weights_resident(const harness *h, uint64_t *id)
{
    char *text = h_status(h);
    json_object *root = text ? json_tokener_parse(text) : NULL;
    comem_free(text);
    int64_t resident = -1;
    json_object *devs, *ps, *x;
    if (root && json_object_object_get_ex(root, "devices", &devs) &&
        json_object_object_get_ex(json_object_array_get_idx(devs, 0), "processes", &ps)) {
        for (size_t i = 0; i < json_object_array_length(ps); i++) {
            json_object *hs;
            if (!json_object_object_get_ex(json_object_array_get_idx(ps, i), "holders", &hs))
                continue;
            for (size_t j = 0; j < json_object_array_length(hs); j++) {
                json_object *ho = json_object_array_get_idx(hs, j), *es;
                if (!json_object_object_get_ex(ho, "name", &x) || strcmp(json_object_get_string(x), "weights"))
                    continue;
                resident = 0;
                if (id && json_object_object_get_ex(ho, "id", &x))
                    *id = strtoull(json_object_get_string(x), NULL, 16);
                if (json_object_object_get_ex(ho, "entries", &es))
                    for (size_t e = 0; e < json_object_array_length(es); e++)
                        if (json_object_object_get_ex(json_object_array_get_idx(es, e), "resident", &x))
                            resident += json_object_get_int64(x);
            }
        }
    }
    json_object_put(root);
    return resident;
}

static void assert_ledger_clean(const harness *h)
{
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    assert_true(h_status_num(h, "coordinator.checks") > 0);
}

/* ---- tests ---- */

/*
 * The bug of issue 19 item 5: faults were not activity, so after idle_release_s
 * the coordinator emptied a pager in the middle of its work, lowered its
 * watermark to 0, and every later fault streamed.
 */
static void test_faulting_pager_keeps_its_pages(void **s)
{
    harness *h = *s;
    h_init(h, CARD);
    const char *extra[] = {"--idle-release", "2", NULL};
    h_start(h, extra);
    kid k;
    spawn_kid(&k, h);
    figures f = command(&k, CMD_RUN);
    int64_t asks0 = f.sentinel_asks;
    f = wait_sentinel(&k, asks0 + 3); /* three idle periods while the pager works */
    f = command(&k, CMD_STOP);
    assert_true(f.faults >= PAGES);
    assert_int_equal(f.offloaded, 0);             /* every fault found its pages... */
    assert_int_equal(f.reloaded, 0);              /* ...never committed again */
    assert_int_equal(f.usage, PAGES * PS);
    assert_int_equal(f.commits, PAGES);
    assert_int_equal(f.evictions, 0);
    assert_int_equal(f.release_asks, f.idle_declined); /* an idle ask that came anyway was declined */
    assert_true(f.touches > 0);                   /* the coordinator was told */
    assert_int_equal(weights_resident(h, NULL), PAGES * PS);
    finish(&k);
    assert_ledger_clean(h);
}

/* A pager that stops faulting is idle, and idle release empties it after that, and only after. */
static void test_pager_that_stops_is_released(void **s)
{
    harness *h = *s;
    h_init(h, CARD);
    const char *extra[] = {"--idle-release", "2", NULL};
    h_start(h, extra);
    kid k;
    spawn_kid(&k, h);
    figures f = command(&k, CMD_RUN);
    f = wait_sentinel(&k, f.sentinel_asks + 1);
    f = command(&k, CMD_STOP);
    assert_int_equal(f.offloaded, 0);
    assert_int_equal(f.usage, PAGES * PS); /* working: kept */
    int64_t asks_at_stop = f.release_asks;
    for (int waited = 0; f.usage > 0 && waited < HANG_GUARD_MS; waited += 50) {
        usleep(50 * 1000);
        f = command(&k, CMD_QUERY);
    }
    assert_int_equal(f.usage, 0); /* idle: released */
    assert_true(f.release_asks > asks_at_stop);
    assert_int_equal(f.evictions, PAGES);
    assert_int_equal(weights_resident(h, NULL), 0);
    assert_true(h_status_num(h, "counters.idle_releases") >= 1);
    finish(&k);
    assert_ledger_clean(h);
}

/* A pager marked busy (computing) is not idle, faulting or not: never asked. */
static void test_busy_pager_is_not_asked(void **s)
{
    harness *h = *s;
    h_init(h, CARD);
    const char *extra[] = {"--idle-release", "1", NULL};
    h_start(h, extra);
    kid k;
    spawn_kid(&k, h);
    figures f = command(&k, CMD_BUSY);
    f = wait_sentinel(&k, f.sentinel_asks + 3);
    assert_int_equal(f.release_asks, 0);
    assert_int_equal(f.usage, PAGES * PS);
    assert_int_equal(weights_resident(h, NULL), PAGES * PS);
    finish(&k);
    assert_ledger_clean(h);
}

/*
 * Another process's writes are hostile input: a session that sends TOUCH for a
 * holder of another session (whose id it can read in the status) changes
 * nothing; that holder is idle-released as if nobody had spoken, and the
 * sender's connection stays open (it is not a malformed frame).
 */
static void test_touch_of_another_sessions_holder_is_ignored(void **s)
{
    harness *h = *s;
    h_init(h, CARD);
    const char *extra[] = {"--idle-release", "1", NULL};
    h_start(h, extra);
    kid k;
    spawn_kid(&k, h); /* faulted its pages in, and stopped */
    uint64_t victim = 0;
    assert_int_equal(weights_resident(h, &victim), PAGES * PS);
    assert_true(victim != 0);
    int fd = raw_connect(h->sock);
    assert_true(fd >= 0);
    int st = 0;
    assert_int_equal(raw_hello(fd, COMEM_ROLE_WORKER, "intruder", "", &st), COMEM_MSG_HELLO_REPLY);
    figures f = command(&k, CMD_QUERY);
    for (int waited = 0; f.usage > 0 && waited < HANG_GUARD_MS; waited += 20) {
        comem_msg m = {.type = COMEM_MSG_TOUCH, .u.id.id = victim};
        assert_true(raw_send(fd, &m));
        usleep(20 * 1000);
        if (waited % 100 == 0)
            f = command(&k, CMD_QUERY);
    }
    assert_int_equal(f.usage, 0);
    assert_true(f.release_asks >= 1);
    comem_msg m = {.type = COMEM_MSG_DEVICES, .request_id = 7}, r;
    assert_true(raw_send(fd, &m));
    assert_int_equal(raw_recv(fd, &r, 10000), 1);
    assert_int_equal(r.type, COMEM_MSG_DEVICES_REPLY);
    close(fd);
    finish(&k);
    assert_ledger_clean(h);
}

static harness g_h;

static int setup(void **s)
{
    signal(SIGPIPE, SIG_IGN);
    *s = &g_h;
    return 0;
}

#define MP_TEST(f) cmocka_unit_test_setup_teardown(f, setup, h_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        MP_TEST(test_faulting_pager_keeps_its_pages),
        MP_TEST(test_pager_that_stops_is_released),
        MP_TEST(test_busy_pager_is_not_asked),
        MP_TEST(test_touch_of_another_sessions_holder_is_ignored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
