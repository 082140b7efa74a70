/*
 * tests/integration/test_stall.c - one stuck holder does not stall its card (issue 20 item 16).
 *
 * comemd runs as its own process over a simulated 16 GiB card; holders and
 * requesters are forked processes using libcomem, and the stuck holder is
 * really stopped (SIGSTOP) while asked. Covered, as orders of events:
 *   - an admission that fits without asking anybody is granted while an
 *     earlier one waits on the stopped holder's ask (which then goes on with
 *     the other holders);
 *   - a holder that let an ask pass its deadline is not asked again while it
 *     stays stopped, however long that is; once it answers it is asked again;
 *   - the bytes a receipt freed for a waiting admission stay its own: a later
 *     admission that would need them waits for its turn;
 *   - the bytes asked of a stopped holder are not kept from later admissions
 *     past the hold (issue 40 item 4), nor what receipts freed for an admission
 *     that waits for a computing holder's node to end (item 3).
 */
#include "unit/cmocka_all.h"

#include <json-c/json.h>
#include <poll.h>
#include <pthread.h>
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
#define SPEC "sim:16GiB:reserved=256MiB:ctx=300MiB"
#define WAIT_MS 60000 /* a bound that only a broken build reaches; no test asserts a speed */

enum command { CMD_EXIT = 0, CMD_RESIDENT = 1, CMD_ASKS = 2, CMD_BUSY = 3, CMD_IDLE = 4 };

/* ---- a holder process: one model of `load` bytes; asked, it frees what it is asked for ---- */

typedef struct holder_args {
    const harness *h;
    const char *name;
    int64_t load;
    chan down, up;
} holder_args;

typedef struct hstate {
    pthread_mutex_t lock;
    comem_client *c;
    comem_sim *sim;
    uint64_t entry;
    int64_t resident;
    int asks;
} hstate;

static int on_release(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                      const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder;
    (void)kind;
    (void)entries;
    hstate *st = user;
    pthread_mutex_lock(&st->lock);
    st->asks++;
    int64_t want = bytes;
    for (size_t k = 0; k < n; k++)
        want = amounts[k];
    int64_t give = comem_min(st->resident, (want + 64 * MIB - 1) / (64 * MIB) * (64 * MIB));
    if (give > 0) {
        comem_sim_free(st->sim, 0, give);
        st->resident -= give;
        comem_entry_set_resident(st->c, st->entry, st->resident);
    }
    *freed = give;
    pthread_mutex_unlock(&st->lock);
    return COMEM_OK;
}

static int holder_main(void *arg)
{
    holder_args *a = arg;
    hstate st = {0};
    pthread_mutex_init(&st.lock, NULL);
    st.sim = h_sim(a->h);
    if (!st.sim || comem_client_open(a->h->sock, COMEM_CLIENT_WORKER, a->name, -1, COMEM_OPEN_NO_LOCAL, &st.c))
        return 10;
    comem_sim_touch(st.sim, 0);
    uint64_t holder, grant;
    if (comem_holder_add(st.c, "models", 0, COMEM_KIND_MODELS, COMEM_ANSWERS_RELEASE, on_release, &st, &holder))
        return 11;
    if (comem_admit(st.c, 0, holder, a->load, 0, 0, NULL, 0, 10000, &grant, NULL) != COMEM_OK)
        return 12;
    pthread_mutex_lock(&st.lock);
    if (comem_sim_alloc(st.sim, 0, a->load) != COMEM_OK)
        return 13;
    st.resident = a->load;
    comem_entry_add(st.c, holder, "model", a->load, 0, 0, &st.entry);
    pthread_mutex_unlock(&st.lock);
    comem_grant_done(st.c, grant, st.entry, a->load);
    ch_put(a->up.wr, (int64_t)holder);
    for (;;) {
        int64_t cmd;
        if (!ch_get(a->down.rd, &cmd, 120000) || cmd == CMD_EXIT)
            break;
        if (cmd == CMD_BUSY || cmd == CMD_IDLE) { /* a node starts or ends: not asked while it computes */
            ch_put(a->up.wr, comem_holder_busy(st.c, holder, cmd == CMD_BUSY, "p"));
            continue;
        }
        pthread_mutex_lock(&st.lock);
        int64_t v = cmd == CMD_ASKS ? st.asks : st.resident;
        pthread_mutex_unlock(&st.lock);
        ch_put(a->up.wr, v);
    }
    comem_client_close(st.c);
    return 0;
}

typedef struct holder_proc {
    holder_args a;
    pid_t pid;
    uint64_t id; /* its holder's id: this client's, which is not the coordinator's */
} holder_proc;

static void spawn_holder(holder_proc *p, const harness *h, const char *name, int64_t load)
{
    p->a = (holder_args){h, name, load, {0, 0}, {0, 0}};
    ch_open(&p->a.down, &p->a.up);
    p->pid = h_child(holder_main, &p->a);
    int64_t id;
    assert_true(ch_get(p->a.up.rd, &id, 20000));
}

static int64_t ask_holder(holder_proc *p, int64_t cmd)
{
    int64_t v = -1;
    ch_put(p->a.down.wr, cmd);
    assert_true(ch_get(p->a.up.rd, &v, WAIT_MS));
    return v;
}

static void stop_process(pid_t pid)
{
    int st;
    kill(pid, SIGSTOP);
    assert_int_equal(waitpid(pid, &st, WUNTRACED), pid);
    assert_true(WIFSTOPPED(st));
}

/* ---- a requester process: admits what it is told, reports, loads what it was granted ---- */

#define MAX_IDS 4
typedef struct verdict {
    int64_t rc, need, free_before, freed, asked, busy, n_ids;
    int64_t ids[MAX_IDS]; /* the coordinator's ids of the first holders asked */
} verdict;
#define VERDICT_VALUES 11

typedef struct requester {
    const harness *h;
    const char *name;
    chan down, up;
    pid_t pid;
    int timeout_ms; /* what its admissions say they wait (0: 50 s) */
} requester;

static int requester_main(void *arg)
{
    requester *a = arg;
    comem_sim *sim = h_sim(a->h);
    comem_client *c = NULL;
    uint64_t holder;
    if (!sim || comem_client_open(a->h->sock, COMEM_CLIENT_WORKER, a->name, -1, COMEM_OPEN_NO_LOCAL, &c) ||
        comem_holder_add(c, "models", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder))
        return 10;
    comem_sim_touch(sim, 0);
    ch_put(a->up.wr, 1); /* ready */
    int64_t weights;
    while (ch_get(a->down.rd, &weights, 120000) && weights > 0) {
        comem_admission fig;
        int rc = comem_admit_record(c, 0, holder, weights, 0, 0, NULL, 0, a->timeout_ms ? a->timeout_ms : 50000, &fig);
        size_t n = (size_t)fig.n_ids < MAX_IDS ? (size_t)fig.n_ids : MAX_IDS; /* whom it asked, from the record */
        const uint64_t *ids = fig.asked;
        if (rc == COMEM_OK) { /* the load is real: the card holds it, the ledger names it */
            uint64_t entry;
            if (comem_sim_alloc(sim, 0, weights) != COMEM_OK)
                rc = -1000; /* granted, but it does not fit: a grant that was a lie */
            comem_entry_add(c, holder, "model", weights, 0, 0, &entry);
            comem_grant_done(c, fig.grant, entry, weights);
        }
        int64_t out[VERDICT_VALUES] = {rc,
                                       fig.need,
                                       fig.free_before,
                                       fig.freed,
                                       fig.n_asked,
                                       fig.n_busy,
                                       (int64_t)n};
        for (size_t i = 0; i < n; i++)
            out[7 + i] = (int64_t)ids[i];
        for (int i = 0; i < VERDICT_VALUES; i++)
            ch_put(a->up.wr, out[i]);
    }
    comem_client_close(c);
    return 0;
}

/* A requester whose admissions say they wait timeout_ms (0: 50 s). */
static void spawn_requester_waiting(requester *r, const harness *h, const char *name, int timeout_ms)
{
    r->h = h;
    r->name = name;
    r->timeout_ms = timeout_ms;
    ch_open(&r->down, &r->up);
    r->pid = h_child(requester_main, r);
    int64_t ready;
    assert_true(ch_get(r->up.rd, &ready, 20000));
}

static void spawn_requester(requester *r, const harness *h, const char *name) { spawn_requester_waiting(r, h, name, 0); }

/* Sends the admission; its verdict is read later (read_verdict), so the test can watch the order. */
static void admit_async(requester *r, int64_t weights) { ch_put(r->down.wr, weights); }

static void read_verdict(requester *r, verdict *v)
{
    int64_t *out = &v->rc;
    memset(v, 0, sizeof *v);
    for (int i = 0; i < VERDICT_VALUES; i++)
        assert_true(ch_get(r->up.rd, &out[i], WAIT_MS));
    print_message("%s: rc %lld, need %.2f GiB, free before %.2f GiB, freed %.2f GiB, %lld asked, %lld busy\n",
                  r->name, (long long)v->rc, (double)v->need / GIB, (double)v->free_before / GIB,
                  (double)v->freed / GIB, (long long)v->asked, (long long)v->busy);
}

/* Which of two requesters answers first (waits up to WAIT_MS); the answer is left to read_verdict. */
static requester *first_to_answer(requester *a, requester *b)
{
    struct pollfd p[2] = {{.fd = a->up.rd, .events = POLLIN}, {.fd = b->up.rd, .events = POLLIN}};
    assert_true(poll(p, 2, WAIT_MS) > 0);
    return p[0].revents ? a : b;
}

static bool has_answered(requester *r)
{
    struct pollfd p = {.fd = r->up.rd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

static void finish_requester(requester *r)
{
    ch_put(r->down.wr, 0);
    assert_int_equal(h_wait(r->pid), 0);
}

static bool asked_holder(const verdict *v, uint64_t coord_id)
{
    for (int64_t i = 0; i < v->n_ids && i < MAX_IDS; i++)
        if ((uint64_t)v->ids[i] == coord_id)
            return true;
    return false;
}

/* The coordinator's id of the first holder of the process named `name` (status JSON, hex). */
static uint64_t coord_holder_id(const harness *h, const char *name)
{
    char *text = h_status(h);
    json_object *root = text ? json_tokener_parse(text) : NULL;
    comem_free(text);
    json_object *devs, *ps;
    uint64_t id = 0;
    if (root && json_object_object_get_ex(root, "devices", &devs) &&
        json_object_object_get_ex(json_object_array_get_idx(devs, 0), "processes", &ps)) {
        for (size_t i = 0; !id && i < json_object_array_length(ps); i++) {
            json_object *p = json_object_array_get_idx(ps, i), *n, *hs, *hid;
            if (json_object_object_get_ex(p, "name", &n) && !strcmp(json_object_get_string(n), name) &&
                json_object_object_get_ex(p, "holders", &hs) && json_object_array_length(hs) > 0 &&
                json_object_object_get_ex(json_object_array_get_idx(hs, 0), "id", &hid))
                id = strtoull(json_object_get_string(hid), NULL, 16);
        }
    }
    json_object_put(root);
    assert_true(id != 0);
    return id;
}

/* Polls until the holder has answered `asks` asks (it runs: only a stopped one never does). */
static void wait_for_asks(holder_proc *p, int64_t asks)
{
    for (int i = 0; i < WAIT_MS / 10 && ask_holder(p, CMD_ASKS) < asks; i++)
        usleep(10000);
    assert_int_equal(ask_holder(p, CMD_ASKS), asks);
}

/* Whether the status marks the holder of the process named `name` as not answering its asks. */
static bool holder_unanswered(const harness *h, const char *name)
{
    char *t = h_status(h);
    char key[96];
    snprintf(key, sizeof key, "\"name\":\"%s\"", name);
    const char *p = t ? strstr(t, key) : NULL;
    const char *u = p ? strstr(p, "\"unanswered\":") : NULL;
    bool yes = u && !strncmp(u + strlen("\"unanswered\":"), "true", 4);
    comem_free(t);
    return yes;
}

static void assert_ledger_clean(const harness *h)
{
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    assert_true(h_status_num(h, "coordinator.checks") > 0);
}

/* ---- tests ---- */

/*
 * S (newest, so asked first) is stopped; A's admission asks S and waits. B's
 * 64 MiB admission needs nobody: it is granted while S is still stopped and A
 * still waits. A then goes on with R once S's ask has passed its deadline.
 * However long S stays stopped (past the 5 s a holder used to be skipped), C's
 * admission asks R, not S. Once S runs again and answers its old ask, D's
 * admission may ask it again.
 */
static void test_a_stopped_holder_stalls_nobody(void **s)
{
    harness *h = *s;
    h_init(h, SPEC);
    h_start(h, NULL);
    holder_proc r, st;
    spawn_holder(&r, h, "r", 4 * GIB);
    spawn_holder(&st, h, "s", 4 * GIB);
    requester a, b, c, d;
    spawn_requester(&a, h, "a");
    spawn_requester(&b, h, "b");
    spawn_requester(&c, h, "c");
    spawn_requester(&d, h, "d");
    uint64_t r_id = coord_holder_id(h, "r"), s_id = coord_holder_id(h, "s");

    stop_process(st.pid);
    admit_async(&a, 5 * GIB); /* short by about 1.5 GiB: S, the newest, is asked for it */
    for (int i = 0; i < WAIT_MS / 10 && h_status_num(h, "coordinator.asks_in_flight") < 1; i++)
        usleep(10000);
    assert_int_equal(h_status_num(h, "coordinator.asks_in_flight"), 1);

    admit_async(&b, 64 * MIB);
    verdict vb, va;
    assert_string_equal(first_to_answer(&a, &b)->name, "b"); /* B did not wait behind A's ask */
    read_verdict(&b, &vb);
    assert_int_equal(vb.rc, COMEM_OK);
    assert_int_equal(vb.asked, 0);
    assert_false(has_answered(&a)); /* A still waits on S, which is still stopped */

    read_verdict(&a, &va); /* S let the ask pass: A went on with R */
    assert_int_equal(va.rc, COMEM_OK);
    assert_int_equal(va.busy, 1);
    assert_true(asked_holder(&va, s_id) && asked_holder(&va, r_id));
    assert_int_equal(ask_holder(&r, CMD_ASKS), 1);

    sleep(6); /* past the 5 s a holder that let an ask pass used to be skipped; S is still stopped */
    admit_async(&c, 4 * GIB); /* more than R has left: S would be asked too, if it could answer */
    verdict vc;
    read_verdict(&c, &vc);
    assert_int_equal(vc.busy, 0);
    assert_false(asked_holder(&vc, s_id)); /* not asked while it stays stopped */
    assert_true(asked_holder(&vc, r_id));

    kill(st.pid, SIGCONT);
    wait_for_asks(&st, 1); /* it answers its old ask now (late: counted by nobody) */
    for (int i = 0; i < WAIT_MS / 10 && holder_unanswered(h, "s"); i++)
        usleep(10000); /* the coordinator has read that late receipt (another connection than D's) */
    assert_false(holder_unanswered(h, "s"));
    admit_async(&d, 4 * GIB + GIB / 2); /* R is empty now: only S can give */
    verdict vd;
    read_verdict(&d, &vd);
    assert_int_equal(vd.rc, COMEM_OK);
    assert_true(asked_holder(&vd, s_id)); /* it answers again: it may be asked again */
    assert_int_equal(vd.busy, 0);

    finish_requester(&a);
    finish_requester(&b);
    finish_requester(&c);
    finish_requester(&d);
    ch_put(r.a.down.wr, CMD_EXIT);
    ch_put(st.a.down.wr, CMD_EXIT);
    assert_int_equal(h_wait(r.pid), 0);
    assert_int_equal(h_wait(st.pid), 0);
    assert_ledger_clean(h);
}

/*
 * A asks R and the stopped S at once; R answers. While A still waits on S, C
 * asks for what fits only with the bytes R freed for A: A is granted with
 * them, and C does not take them (it asks for its own, or is refused).
 */
static void test_bytes_freed_for_a_waiting_admission_stay_its_own(void **s)
{
    harness *h = *s;
    h_init(h, SPEC);
    h_start(h, NULL);
    holder_proc q, r, st;
    spawn_holder(&q, h, "q", 4 * GIB);
    spawn_holder(&r, h, "r", 4 * GIB);
    spawn_holder(&st, h, "s", 4 * GIB);
    requester a, c;
    spawn_requester(&a, h, "a");
    spawn_requester(&c, h, "c");

    stop_process(st.pid);
    admit_async(&a, 6 * GIB); /* short by more than S holds: S and R are both asked */
    wait_for_asks(&r, 1);     /* R answered; A still waits on S */
    int64_t freed_by_r = 4 * GIB - ask_holder(&r, CMD_RESIDENT);
    assert_true(freed_by_r >= GIB / 2);
    admit_async(&c, 3 * GIB / 2); /* fits beside A only by taking what R freed for A */
    verdict va, vc;
    read_verdict(&a, &va);
    assert_int_equal(va.rc, COMEM_OK);
    assert_true(va.freed >= freed_by_r); /* A has what R freed for it */
    read_verdict(&c, &vc);
    /* C did not take those bytes: it was not granted without asking somebody for its own. (Which
       requester's answer reaches the test first is the children's scheduling, not the coordinator's
       order: a loaded machine can let C's process report first.) */
    assert_true(vc.rc != COMEM_OK || vc.asked > 0);

    kill(st.pid, SIGCONT);
    finish_requester(&a);
    finish_requester(&c);
    ch_put(q.a.down.wr, CMD_EXIT);
    ch_put(r.a.down.wr, CMD_EXIT);
    ch_put(st.a.down.wr, CMD_EXIT);
    assert_int_equal(h_wait(q.pid), 0);
    assert_int_equal(h_wait(r.pid), 0);
    assert_int_equal(h_wait(st.pid), 0);
    assert_ledger_clean(h);
}

/* The fixed part of a requester's target (minimum inference, reserve: what does not move with the weights),
   from a granted admission of 1 MiB. */
static int64_t fixed_part(requester *r)
{
    verdict v;
    admit_async(r, MIB);
    read_verdict(r, &v);
    assert_int_equal(v.rc, COMEM_OK);
    return v.need - (int64_t)((double)MIB * 1.1);
}

/* Weights whose target is `need` for a requester whose target's fixed part is `fixed`. */
static int64_t weights_for(int64_t need, int64_t fixed) { return (int64_t)((double)(need - fixed) / 1.1); }

/*
 * Issue 40 item 4. S is stopped; A's admission asks S and waits on it. B's admission fits what the
 * card has free, but not beside what A asked S for: while S's process is seen giving nothing back, those
 * bytes are not kept from B past the hold, so B is granted, asking nobody, while S's ask is still out.
 * (Before: B waited for S's ask to pass its deadline.)
 */
static void test_a_stopped_holders_ask_keeps_nothing_past_the_hold(void **s)
{
    harness *h = *s;
    h_init(h, SPEC);
    h_start(h, NULL);
    holder_proc r, st;
    spawn_holder(&r, h, "r", 4 * GIB);
    spawn_holder(&st, h, "s", 4 * GIB);
    requester a, b;
    spawn_requester(&a, h, "a");
    spawn_requester(&b, h, "b");
    int64_t fixed = fixed_part(&b);

    stop_process(st.pid);
    int64_t free0 = h_status_num(h, "devices.0.free");
    admit_async(&a, weights_for(free0 + 3 * GIB, fixed)); /* short by 3 GiB: S, the newest, is asked (its
                                                              deadline: 2 s and 1 ms per MiB) */
    for (int i = 0; i < WAIT_MS / 10 && h_status_num(h, "coordinator.asks_in_flight") < 1; i++)
        usleep(10000);
    assert_int_equal(h_status_num(h, "coordinator.asks_in_flight"), 1);
    admit_async(&b, weights_for(free0 - GIB / 2, fixed)); /* fits the card, not beside the 3 GiB asked of S */
    verdict vb, va;
    assert_string_equal(first_to_answer(&a, &b)->name, "b");
    read_verdict(&b, &vb);
    assert_int_equal(vb.rc, COMEM_OK);
    assert_int_equal(vb.asked, 0);
    assert_false(has_answered(&a)); /* A still waits on S */
    /* ... and S's ask is still out, not past its deadline: B did not wait for it to pass (before, the
       3 GiB asked were kept from B until then, and A went on first). */
    assert_int_equal(h_status_num(h, "coordinator.asks_in_flight"), 1);
    assert_false(holder_unanswered(h, "s"));

    read_verdict(&a, &va); /* S let its ask pass; A went on (granted or refused, never a lie) */
    assert_true(va.rc == COMEM_OK || va.rc == COMEM_ENOSPC);
    assert_int_equal(va.busy, 1);
    kill(st.pid, SIGCONT);
    finish_requester(&a);
    finish_requester(&b);
    ch_put(r.a.down.wr, CMD_EXIT);
    ch_put(st.a.down.wr, CMD_EXIT);
    assert_int_equal(h_wait(r.pid), 0);
    assert_int_equal(h_wait(st.pid), 0);
    assert_ledger_clean(h);
}

/*
 * Issue 40 item 3. A needs more than the card has free and idle I holds: I gives its 2 GiB, and A then
 * waits for computing K's node to end. B's admission fits the card with I's bytes: past the hold, A's
 * wait (which may last a whole node) keeps them from nobody, so B is granted, asking nobody, while K
 * still computes. When K's node ends A plans anew. (Before: B waited until A's deadline.)
 */
static void test_an_admission_waiting_for_a_node_holds_nobody_back(void **s)
{
    harness *h = *s;
    h_init(h, SPEC);
    h_start(h, NULL);
    holder_proc k, i;
    spawn_holder(&k, h, "k", 4 * GIB);
    spawn_holder(&i, h, "i", 2 * GIB);
    requester a, b;
    spawn_requester(&a, h, "a");
    spawn_requester(&b, h, "b");
    int64_t fixed = fixed_part(&b);
    assert_int_equal(ask_holder(&k, CMD_BUSY), COMEM_OK);

    int64_t free0 = h_status_num(h, "devices.0.free");
    admit_async(&a, weights_for(free0 + 2 * GIB + GIB / 2, fixed)); /* I's 2 GiB are not enough; K computes */
    wait_for_asks(&i, 1);
    verdict vb, va;
    admit_async(&b, weights_for(free0 + GIB, fixed)); /* fits only with I's bytes, freed for A */
    assert_string_equal(first_to_answer(&a, &b)->name, "b");
    read_verdict(&b, &vb);
    assert_int_equal(vb.rc, COMEM_OK);
    assert_int_equal(vb.asked, 0);
    assert_false(has_answered(&a)); /* A still waits for K's node */
    assert_int_equal(ask_holder(&k, CMD_ASKS), 0);

    assert_int_equal(ask_holder(&k, CMD_IDLE), COMEM_OK); /* K's node ends: A plans anew */
    read_verdict(&a, &va);
    assert_true(va.rc == COMEM_OK || va.rc == COMEM_ENOSPC);
    finish_requester(&a);
    finish_requester(&b);
    ch_put(k.a.down.wr, CMD_EXIT);
    ch_put(i.a.down.wr, CMD_EXIT);
    assert_int_equal(h_wait(k.pid), 0);
    assert_int_equal(h_wait(i.pid), 0);
    assert_ledger_clean(h);
}

/*
 * Issue 40 item 3. An admission that says it waits an hour for computing K's node is answered at the
 * coordinator's --max-wait (here 2 s), refused with K counted busy, long before its own hour (and the
 * test's 60 s bound: before, it stayed parked for its whole timeout, up to 49 days).
 */
static void test_no_admission_waits_past_the_max_wait(void **s)
{
    harness *h = *s;
    h_init(h, SPEC);
    const char *const args[] = {"--max-wait", "2", NULL};
    h_start(h, args);
    holder_proc k;
    spawn_holder(&k, h, "k", 4 * GIB);
    requester a;
    spawn_requester_waiting(&a, h, "a", 3600 * 1000);
    assert_int_equal(ask_holder(&k, CMD_BUSY), COMEM_OK);
    int64_t free0 = h_status_num(h, "devices.0.free");
    admit_async(&a, free0); /* needs K's bytes; K computes: the admission waits for its node */
    verdict va;
    read_verdict(&a, &va);
    assert_int_equal(va.rc, COMEM_ENOSPC);
    assert_int_equal(va.busy, 1);
    assert_int_equal(ask_holder(&k, CMD_ASKS), 0);
    finish_requester(&a);
    ch_put(k.a.down.wr, CMD_EXIT);
    assert_int_equal(h_wait(k.pid), 0);
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
    const struct CMUnitTest tests[] = {
        MP_TEST(test_a_stopped_holder_stalls_nobody),
        MP_TEST(test_bytes_freed_for_a_waiting_admission_stay_its_own),
        MP_TEST(test_a_stopped_holders_ask_keeps_nothing_past_the_hold),
        MP_TEST(test_an_admission_waiting_for_a_node_holds_nobody_back),
        MP_TEST(test_no_admission_waits_past_the_max_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
