/*
 * tests/integration/test_coord_mp.c - the coordinator with real processes.
 *
 * comemd runs as its own process (with ledger checks after every mutation)
 * over a simulated card that every process maps; each holder and requester is
 * a forked process using libcomem. Covered: cross-process eviction for an
 * admission; a holder that answers busy is left out and the plan is made
 * again; a holder marked busy is not asked; idle release, by the timer and
 * early when the card is tight and a holder's prompt is over; a requester
 * SIGKILLed in the middle of its admission leaks no grant; a coordinator
 * restart re-registers everything once; a RELEASE (a host's stand-in) asks
 * another process's holder for one entry's bytes and relays its receipt.
 */
#include "unit/cmocka_all.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "harness.h"

#define GIB COMEM_GIB
#define MIB COMEM_MIB

/* SERVED_P1 / SERVED_P2: computed for that prompt and went idle; HOST_ON_P2: a host computing prompt p2. */
enum behaviour { FREES, SAYS_BUSY, SLOW, MARKS_BUSY, SERVED_P1, SERVED_P2, HOST_ON_P2 };
enum command { CMD_EXIT = 0, CMD_RESIDENT = 1, CMD_SHRINK = 2, CMD_ASKS = 3, CMD_RESERVE = 4 };

typedef struct holder_args {
    const harness *h;
    const char *name;
    int role;
    int64_t load;
    unsigned flags;
    enum behaviour how;
    chan down, up; /* parent -> child, child -> parent */
} holder_args;

/* State of a holder process, shared with its release callback (service thread). */
typedef struct hstate {
    pthread_mutex_t lock;
    comem_client *c;
    comem_sim *sim;
    uint64_t entry;
    int64_t resident;
    int asks;
    enum behaviour how;
} hstate;

static int on_release(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                      const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder;
    (void)entries;
    hstate *st = user;
    pthread_mutex_lock(&st->lock);
    st->asks++;
    enum behaviour how = st->how;
    pthread_mutex_unlock(&st->lock);
    *freed = 0;
    if (how == SAYS_BUSY)
        return COMEM_EBUSY;
    if (how == SLOW)
        usleep(1500 * 1000);
    pthread_mutex_lock(&st->lock);
    int64_t want = kind == COMEM_RELEASE_IDLE ? st->resident : bytes;
    for (size_t k = 0; k < n; k++)
        want = amounts[k];
    int64_t give = comem_min(st->resident, (want + 64 * MIB - 1) / (64 * MIB) * (64 * MIB));
    if (give > 0) {
        comem_sim_free(st->sim, 0, give);
        st->resident -= give;
        *freed = give;
        comem_entry_set_resident(st->c, st->entry, st->resident);
    }
    pthread_mutex_unlock(&st->lock);
    return COMEM_OK;
}

static int holder_main(void *arg)
{
    holder_args *a = arg;
    hstate st = {.how = a->how};
    pthread_mutex_init(&st.lock, NULL);
    st.sim = h_sim(a->h);
    if (!st.sim || comem_client_open(a->h->sock, a->role, a->name, a->role == COMEM_CLIENT_HOST ? 400 * MIB : -1,
                                     COMEM_OPEN_NO_LOCAL, &st.c) != COMEM_OK)
        return 10;
    comem_sim_touch(st.sim, 0); /* the process's context exists before it asks */
    uint64_t holder, grant;
    if (comem_holder_add(st.c, "models", 0, COMEM_KIND_MODELS, a->flags, on_release, &st, &holder) != COMEM_OK)
        return 11;
    if (a->load > 0) {
        if (comem_admit(st.c, 0, holder, a->load, 0, 0, NULL, 0, 10000, &grant, NULL) != COMEM_OK)
            return 12;
        pthread_mutex_lock(&st.lock);
        if (comem_sim_alloc(st.sim, 0, a->load) != COMEM_OK)
            return 13; /* a granted load that does not fit: overcommit */
        st.resident = a->load;
        comem_entry_add(st.c, holder, "model", a->load, 0, 0, &st.entry);
        pthread_mutex_unlock(&st.lock);
        comem_grant_done(st.c, grant, st.entry, a->load);
    }
    if (a->how == MARKS_BUSY)
        comem_holder_busy(st.c, 0, 1, "p1");
    if (a->how == SERVED_P1 || a->how == SERVED_P2) {
        const char *prompt = a->how == SERVED_P1 ? "p1" : "p2";
        comem_holder_busy(st.c, 0, 1, prompt);
        comem_holder_busy(st.c, 0, 0, prompt);
    }
    if (a->how == HOST_ON_P2)
        comem_holder_busy(st.c, 0, 1, "p2");
    ch_put(a->up.wr, 1); /* ready */
    for (;;) {
        int64_t cmd;
        if (!ch_get(a->down.rd, &cmd, 60000) || cmd == CMD_EXIT)
            break;
        pthread_mutex_lock(&st.lock);
        if (cmd == CMD_SHRINK && st.resident >= GIB) {
            comem_sim_free(st.sim, 0, GIB);
            st.resident -= GIB;
            comem_entry_set_resident(st.c, st.entry, st.resident);
        }
        int64_t v = cmd == CMD_ASKS ? st.asks : st.resident;
        pthread_mutex_unlock(&st.lock);
        if (cmd == CMD_RESERVE) {
            int64_t headroom = -1;
            if (comem_reserve(st.c, 0, &v, &headroom) != COMEM_OK)
                v = -1;
            ch_put(a->up.wr, v);
            v = headroom;
        }
        ch_put(a->up.wr, v);
    }
    comem_client_close(st.c);
    return 0;
}

typedef struct proc {
    holder_args a;
    pid_t pid;
} proc;

static void spawn(proc *p, const harness *h, const char *name, int role, int64_t load, unsigned flags,
                  enum behaviour how)
{
    p->a = (holder_args){h, name, role, load, flags, how, {0, 0}, {0, 0}};
    ch_open(&p->a.down, &p->a.up);
    p->pid = h_child(holder_main, &p->a);
    int64_t ready;
    assert_true(ch_get(p->a.up.rd, &ready, 20000));
}

static int64_t ask_child(proc *p, int64_t cmd)
{
    int64_t v = -1;
    ch_put(p->a.down.wr, cmd);
    assert_true(ch_get(p->a.up.rd, &v, 20000));
    return v;
}

/* The reserve a child should keep, and its pager headroom. */
static int64_t reserve_of(proc *p, int64_t *headroom)
{
    int64_t r = ask_child(p, CMD_RESERVE);
    assert_true(ch_get(p->a.up.rd, headroom, 20000));
    return r;
}

static void finish(proc *p)
{
    ch_put(p->a.down.wr, CMD_EXIT);
    assert_int_equal(h_wait(p->pid), 0);
}

/* A requester process: admits `load`, reports the outcome and the admission figures. */
typedef struct req_args {
    const harness *h;
    int64_t load;
    chan up;
} req_args;

static int requester_main(void *arg)
{
    req_args *a = arg;
    comem_sim *sim = h_sim(a->h);
    comem_client *c = NULL;
    if (!sim || comem_client_open(a->h->sock, COMEM_CLIENT_WORKER, "requester", -1, COMEM_OPEN_NO_LOCAL, &c))
        return 10;
    comem_sim_touch(sim, 0);
    ch_put(a->up.wr, 1); /* about to ask */
    uint64_t grant = 0;
    int64_t short_by = 0;
    int rc = comem_admit(c, 0, 0, a->load, 1 * GIB, 0, NULL, 0, 15000, &grant, &short_by);
    int64_t freed = 0;
    int asked = 0, busy = 0;
    comem_admit_details(c, NULL, NULL, NULL, &freed, &asked, &busy);
    if (rc == COMEM_OK && comem_sim_alloc(sim, 0, a->load) != COMEM_OK)
        rc = -1000; /* granted but does not fit: the grant was a lie */
    ch_put(a->up.wr, rc);
    ch_put(a->up.wr, freed);
    ch_put(a->up.wr, asked);
    ch_put(a->up.wr, busy);
    comem_client_close(c);
    return 0;
}

static void run_requester(const harness *h, int64_t load, int64_t out[4])
{
    req_args a = {h, load, {0, 0}};
    chan unused;
    ch_open(&unused, &a.up);
    pid_t pid = h_child(requester_main, &a);
    int64_t started;
    assert_true(ch_get(a.up.rd, &started, 20000));
    for (int i = 0; i < 4; i++)
        assert_true(ch_get(a.up.rd, &out[i], 30000));
    assert_int_equal(h_wait(pid), 0);
}

static void assert_ledger_clean(const harness *h)
{
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    assert_true(h_status_num(h, "coordinator.checks") > 0);
}

/* ---- tests ---- */

static void test_admission_evicts_across_processes(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:reserved=256MiB:ctx=300MiB");
    h_start(h, NULL);
    proc host;
    spawn(&host, h, "host", COMEM_CLIENT_HOST, 10 * GIB, COMEM_ANSWERS_RELEASE, FREES);
    assert_true(h_process_resident(h, "host") == 10 * GIB);
    int64_t r[4];
    run_requester(h, 6 * GIB, r);
    assert_int_equal(r[0], COMEM_OK); /* granted, and the 6 GiB really fit */
    assert_true(r[1] > 0);            /* the host freed bytes for it */
    assert_int_equal(r[2], 1);        /* one holder asked */
    int64_t left = ask_child(&host, CMD_RESIDENT);
    assert_true(left < 10 * GIB && left > 5 * GIB); /* a partial release, not the whole model */
    assert_true(h_process_resident(h, "host") == left);
    assert_int_equal(ask_child(&host, CMD_ASKS), 1);
    finish(&host);
    assert_ledger_clean(h);
}

static void test_busy_answer_is_replanned(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:reserved=256MiB:ctx=300MiB");
    h_start(h, NULL);
    proc b, a;
    spawn(&b, h, "b", COMEM_CLIENT_WORKER, 5 * GIB, COMEM_ANSWERS_RELEASE, FREES);
    spawn(&a, h, "a", COMEM_CLIENT_WORKER, 5 * GIB, COMEM_ANSWERS_RELEASE, SAYS_BUSY); /* newer: asked first */
    int64_t r[4];
    run_requester(h, 4 * GIB, r);
    assert_int_equal(r[0], COMEM_OK);
    assert_int_equal(r[2], 2); /* a, then b after a said busy */
    assert_int_equal(r[3], 1);
    assert_int_equal(ask_child(&a, CMD_ASKS), 1);
    assert_true(ask_child(&a, CMD_RESIDENT) == 5 * GIB);
    assert_true(ask_child(&b, CMD_RESIDENT) < 5 * GIB);
    finish(&a);
    finish(&b);
    assert_ledger_clean(h);
}

static void test_marked_busy_is_not_asked(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:reserved=256MiB:ctx=300MiB");
    h_start(h, NULL);
    proc b, a;
    spawn(&b, h, "b", COMEM_CLIENT_WORKER, 5 * GIB, COMEM_ANSWERS_RELEASE, FREES);
    spawn(&a, h, "a", COMEM_CLIENT_WORKER, 5 * GIB, COMEM_ANSWERS_RELEASE, MARKS_BUSY);
    int64_t r[4];
    run_requester(h, 4 * GIB, r);
    assert_int_equal(r[0], COMEM_OK);
    assert_int_equal(r[2], 1);
    assert_int_equal(r[3], 0);
    assert_int_equal(ask_child(&a, CMD_ASKS), 0); /* never interrupted while computing */
    assert_true(ask_child(&b, CMD_RESIDENT) < 5 * GIB);
    finish(&a);
    finish(&b);
    assert_ledger_clean(h);
}

static void test_refusal_says_how_short(void **s)
{
    harness *h = *s;
    h_init(h, "sim:8GiB:reserved=256MiB:ctx=300MiB");
    h_start(h, NULL);
    proc a;
    spawn(&a, h, "a", COMEM_CLIENT_WORKER, 5 * GIB, COMEM_ANSWERS_RELEASE, MARKS_BUSY);
    int64_t r[4];
    run_requester(h, 4 * GIB, r);
    assert_int_equal(r[0], COMEM_ENOSPC);
    assert_int_equal(h_status_num(h, "devices.0.granted"), 0);
    finish(&a);
    assert_ledger_clean(h);
}

static void test_idle_release(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:reserved=256MiB:ctx=300MiB");
    const char *extra[] = {"--idle-release", "1", NULL};
    h_start(h, extra);
    proc idle, busy;
    spawn(&idle, h, "idle", COMEM_CLIENT_WORKER, 2 * GIB, COMEM_ANSWERS_RELEASE | COMEM_ANSWERS_IDLE, FREES);
    spawn(&busy, h, "busy", COMEM_CLIENT_WORKER, 2 * GIB, COMEM_ANSWERS_RELEASE | COMEM_ANSWERS_IDLE, MARKS_BUSY);
    bool released = false;
    for (int i = 0; i < 100 && !released; i++) {
        usleep(100 * 1000);
        released = h_process_resident(h, "idle") == 0;
    }
    assert_true(released);
    assert_int_equal(ask_child(&idle, CMD_RESIDENT), 0);
    assert_true(ask_child(&busy, CMD_RESIDENT) == 2 * GIB); /* computing: left alone */
    assert_int_equal(ask_child(&busy, CMD_ASKS), 0);
    finish(&idle);
    finish(&busy);
    assert_ledger_clean(h);
}

/*
 * Early idle release: long before the idle timer, a holder whose last prompt is over (the
 * host is computing another one) is asked to release once the card is tight (true free below
 * the published reserve), and only then; a holder that served the current prompt stays.
 */
static void test_idle_release_early_when_tight(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:reserved=256MiB:ctx=300MiB");
    h_start(h, NULL); /* the idle timer is the default 60 s: only the early rule can fire */
    proc old, cur, host;
    spawn(&old, h, "served-p1", COMEM_CLIENT_WORKER, 2 * GIB, COMEM_ANSWERS_RELEASE | COMEM_ANSWERS_IDLE, SERVED_P1);
    spawn(&cur, h, "served-p2", COMEM_CLIENT_WORKER, 1 * GIB, COMEM_ANSWERS_RELEASE | COMEM_ANSWERS_IDLE, SERVED_P2);
    spawn(&host, h, "host", COMEM_CLIENT_HOST, 0, 0, HOST_ON_P2);
    int64_t headroom = -1, published = reserve_of(&host, &headroom);
    assert_int_equal(published, 400 * MIB); /* Linux: the host's base, no charges */

    usleep(1000 * 1000); /* several ticks with room on the card: nobody is asked */
    assert_int_equal(ask_child(&old, CMD_ASKS), 0);
    assert_true(ask_child(&old, CMD_RESIDENT) == 2 * GIB);

    /* Someone the ledger does not know takes the card down to 200 MiB free. */
    comem_sim *sim = h_sim(h);
    assert_non_null(sim);
    assert_int_equal(comem_sim_touch(sim, 0), COMEM_OK); /* its context first, then the reading */
    comem_device_reading r;
    assert_int_equal(comem_sim_read(sim, 0, &r), COMEM_OK);
    int64_t take = r.free - 200 * MIB;
    assert_true(take > 0);
    assert_int_equal(comem_sim_alloc(sim, 0, take), COMEM_OK);

    bool released = false;
    for (int i = 0; i < 50 && !released; i++) {
        usleep(100 * 1000);
        released = h_process_resident(h, "served-p1") == 0;
    }
    assert_true(released);
    assert_int_equal(ask_child(&old, CMD_RESIDENT), 0);
    assert_int_equal(ask_child(&old, CMD_ASKS), 1);
    usleep(600 * 1000); /* still tight, but the current prompt's holder is left alone */
    assert_int_equal(ask_child(&cur, CMD_ASKS), 0);
    assert_true(ask_child(&cur, CMD_RESIDENT) == 1 * GIB);
    assert_true(h_process_resident(h, "served-p2") == 1 * GIB);

    assert_int_equal(comem_sim_free(sim, 0, take), COMEM_OK);
    comem_sim_close(sim);
    finish(&old);
    finish(&cur);
    finish(&host);
    assert_ledger_clean(h);
}

static void test_sigkill_mid_admission_leaks_no_grant(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:reserved=256MiB:ctx=300MiB");
    h_start(h, NULL);
    proc slow;
    spawn(&slow, h, "slow", COMEM_CLIENT_WORKER, 10 * GIB, COMEM_ANSWERS_RELEASE, SLOW);
    req_args ra = {h, 6 * GIB, {0, 0}};
    chan unused;
    ch_open(&unused, &ra.up);
    pid_t req = h_child(requester_main, &ra);
    int64_t started;
    assert_true(ch_get(ra.up.rd, &started, 20000));
    usleep(400 * 1000); /* it is waiting on the slow holder's receipt now */
    kill(req, SIGKILL);
    assert_int_equal(h_wait(req), -1);
    usleep(2500 * 1000); /* the slow receipt arrives, the admission has no one to answer */
    assert_int_equal(h_status_num(h, "devices.0.granted"), 0);
    assert_int_equal(h_process_count(h, "requester"), 0);
    /* The device queue is not stuck: the next admission is answered. */
    int64_t r[4];
    run_requester(h, 1 * GIB, r);
    assert_int_equal(r[0], COMEM_OK);
    finish(&slow);
    assert_ledger_clean(h);
}

static void test_coordinator_restart_reregisters_once(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:reserved=256MiB:ctx=300MiB");
    h_start(h, NULL);
    proc w;
    spawn(&w, h, "w", COMEM_CLIENT_WORKER, 3 * GIB, COMEM_ANSWERS_RELEASE, FREES);
    assert_true(h_process_resident(h, "w") == 3 * GIB);
    h_stop(h, true); /* SIGKILL: no goodbye */
    h_start(h, NULL);
    bool back = false;
    for (int i = 0; i < 100 && !back; i++) {
        usleep(100 * 1000);
        back = h_process_resident(h, "w") == 3 * GIB;
    }
    assert_true(back);
    assert_int_equal(h_process_count(h, "w"), 1); /* once, not twice */
    assert_true(h_status_num(h, "devices.0.resident") == 3 * GIB);
    /* its ids still work after the reconnect */
    assert_true(ask_child(&w, CMD_SHRINK) == 2 * GIB);
    bool shrunk = false;
    for (int i = 0; i < 50 && !shrunk; i++) {
        usleep(50 * 1000);
        shrunk = h_process_resident(h, "w") == 2 * GIB;
    }
    assert_true(shrunk);
    finish(&w);
    assert_ledger_clean(h);
}

/* Linux: the host's free reading sees every worker, so no worker is charged. */
static void test_reserve_linux(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:reserved=256MiB:ctx=300MiB");
    setenv("COMEM_DEVICE", h->spec, 1);
    h_start(h, NULL);
    proc host, w;
    spawn(&host, h, "host", COMEM_CLIENT_HOST, 0, COMEM_ANSWERS_RELEASE, FREES);
    spawn(&w, h, "w", COMEM_CLIENT_WORKER, 3 * GIB, COMEM_ANSWERS_RELEASE, FREES);
    int64_t headroom;
    assert_true(reserve_of(&host, &headroom) == 400 * MIB); /* the operator's base, unchanged */
    assert_true(headroom == 256 * MIB);                     /* the pager's seed: nothing added */
    assert_true(reserve_of(&w, &headroom) == 400 * MIB);
    finish(&w);
    finish(&host);
    unsetenv("COMEM_DEVICE");
    assert_ledger_clean(h);
}

/* WDDM: the host's budget cannot see the worker, so it is charged context + residency. */
static void test_reserve_wddm(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:wddm:reserved=256MiB:ctx=300MiB");
    setenv("COMEM_DEVICE", h->spec, 1); /* the children read process-local free, as under WDDM */
    h_start(h, NULL);
    proc host, w;
    spawn(&host, h, "host", COMEM_CLIENT_HOST, 0, COMEM_ANSWERS_RELEASE, FREES);
    spawn(&w, h, "w", COMEM_CLIENT_WORKER, 3 * GIB, COMEM_ANSWERS_RELEASE, FREES);
    int64_t headroom, want = 400 * MIB + 300 * MIB + 3 * GIB; /* base + floor + residency */
    bool seen = false;
    for (int i = 0; i < 50 && !seen; i++) { /* the floor is measured at the next reading */
        seen = reserve_of(&host, &headroom) == want;
        if (!seen)
            usleep(50 * 1000);
    }
    assert_true(seen);
    assert_true(headroom == 256 * MIB + (want - 400 * MIB)); /* seed + what comem added on top of the base */
    assert_true(reserve_of(&w, &headroom) == 400 * MIB);     /* the requester's own charge is its load */
    finish(&w);                                              /* its session ends: the evidence for a shrink */
    bool shrunk = false;
    for (int i = 0; i < 50 && !shrunk; i++) {
        shrunk = reserve_of(&host, &headroom) == 400 * MIB;
        if (!shrunk)
            usleep(50 * 1000);
    }
    assert_true(shrunk);
    finish(&host);
    unsetenv("COMEM_DEVICE");
    assert_ledger_clean(h);
}

/* Pinned host RAM: one machine-wide ceiling; a refusal says how short; pin holders are asked. */
typedef struct pin_args {
    const harness *h;
    int64_t bytes;
    chan down, up;
} pin_args;

typedef struct pin_state {
    comem_client *c;
    uint64_t holder;
    atomic_llong asked;
} pin_state;

static int on_pins(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                   const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)entries;
    (void)amounts;
    (void)n;
    pin_state *ps = user;
    *freed = 0;
    if (kind != COMEM_RELEASE_PINS)
        return COMEM_OK;
    atomic_fetch_add(&ps->asked, bytes);
    if (comem_pin_release(ps->c, holder, bytes) == COMEM_OK) /* unpinned: give the booking back */
        *freed = bytes;
    return COMEM_OK;
}

static int pinner_main(void *arg)
{
    pin_args *a = arg;
    pin_state ps = {0};
    if (comem_client_open(a->h->sock, COMEM_CLIENT_WORKER, "pinner", -1, COMEM_OPEN_NO_LOCAL, &ps.c) ||
        comem_holder_add(ps.c, "pins", 0, COMEM_KIND_PINS, COMEM_ANSWERS_PINS, on_pins, &ps, &ps.holder))
        return 10;
    int64_t shortfall = -1;
    int rc = comem_pin_acquire(ps.c, ps.holder, a->bytes, &shortfall);
    ch_put(a->up.wr, rc);
    ch_put(a->up.wr, shortfall);
    int64_t cmd;
    while (ch_get(a->down.rd, &cmd, 60000) && cmd != CMD_EXIT) {
        if (cmd == CMD_ASKS) {
            ch_put(a->up.wr, atomic_load(&ps.asked));
        } else { /* try again */
            rc = comem_pin_acquire(ps.c, ps.holder, a->bytes, &shortfall);
            ch_put(a->up.wr, rc);
            ch_put(a->up.wr, shortfall);
        }
    }
    comem_client_close(ps.c);
    return 0;
}

static pid_t pinner(pin_args *a, const harness *h, int64_t bytes, int64_t *rc, int64_t *shortfall)
{
    *a = (pin_args){h, bytes, {0, 0}, {0, 0}};
    ch_open(&a->down, &a->up);
    pid_t pid = h_child(pinner_main, a);
    assert_true(ch_get(a->up.rd, rc, 20000));
    assert_true(ch_get(a->up.rd, shortfall, 20000));
    return pid;
}

static void test_pins_across_processes(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB");
    h_start(h, NULL);
    int64_t max = h_status_num(h, "pins.max");
    assert_true(max > 2 * GIB); /* the ceiling from this machine's (cgroup-clamped) RAM */
    pin_args a, b;
    int64_t rc, shortfall;
    pid_t pa = pinner(&a, h, max - 1 * GIB, &rc, &shortfall);
    assert_int_equal(rc, COMEM_OK);
    pid_t pb = pinner(&b, h, 2 * GIB, &rc, &shortfall);
    assert_int_equal(rc, COMEM_ENOSPC);
    assert_true(shortfall == 1 * GIB); /* the refusal carries the shortfall */
    assert_true(h_status_num(h, "pins.total") <= max - 1 * GIB); /* a may already be giving back */
    int64_t asked = 0;
    for (int i = 0; i < 50 && asked == 0; i++) { /* the pin holder was asked to give back */
        usleep(50 * 1000);
        ch_put(a.down.wr, CMD_ASKS);
        assert_true(ch_get(a.up.rd, &asked, 20000));
    }
    assert_true(asked >= 1 * GIB);
    ch_put(b.down.wr, 1); /* b tries again, and now fits */
    assert_true(ch_get(b.up.rd, &rc, 20000));
    assert_true(ch_get(b.up.rd, &shortfall, 20000));
    assert_int_equal(rc, COMEM_OK);
    assert_true(h_status_num(h, "pins.total") <= max);
    ch_put(a.down.wr, CMD_EXIT);
    ch_put(b.down.wr, CMD_EXIT);
    assert_int_equal(h_wait(pa), 0);
    assert_int_equal(h_wait(pb), 0);
    assert_int_equal(h_status_num(h, "pins.total"), 0); /* ended sessions give their pins back */
    assert_ledger_clean(h);
}

/* A process that asks for another's entry (a host's stand-in): entry and bytes in, rc/freed/resident out. */
typedef struct release_args {
    const harness *h;
    chan down, up;
} release_args;

static int releaser_main(void *arg)
{
    release_args *a = arg;
    comem_client *c = NULL;
    if (comem_client_open(a->h->sock, COMEM_CLIENT_HOST, "stand-in", 400 * MIB, COMEM_OPEN_NO_LOCAL, &c))
        return 10;
    uint64_t own_holder, own_entry;
    comem_holder_add(c, "models", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &own_holder);
    comem_entry_add(c, own_holder, "own", GIB, 0, 0, &own_entry);
    ch_put(a->up.wr, 1);
    for (;;) {
        int64_t entry, bytes;
        if (!ch_get(a->down.rd, &entry, 60000) || entry == 0 || !ch_get(a->down.rd, &bytes, 60000))
            break;
        int64_t freed = -1, resident = -1;
        int rc = comem_ask_release(c, (uint64_t)entry, bytes, 10000, &freed, &resident);
        ch_put(a->up.wr, rc);
        ch_put(a->up.wr, freed);
        ch_put(a->up.wr, resident);
    }
    comem_client_close(c);
    return 0;
}

static void ask_release(release_args *a, uint64_t entry, int64_t bytes, int64_t out[3])
{
    ch_put(a->down.wr, (int64_t)entry);
    ch_put(a->down.wr, bytes);
    for (int i = 0; i < 3; i++)
        assert_true(ch_get(a->up.rd, &out[i], 30000));
}

static void test_release_asks_another_process(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:reserved=256MiB:ctx=300MiB");
    h_start(h, NULL);
    proc w, busy;
    spawn(&w, h, "worker", COMEM_CLIENT_WORKER, 6 * GIB, COMEM_ANSWERS_RELEASE, FREES);
    spawn(&busy, h, "busy", COMEM_CLIENT_WORKER, 1 * GIB, COMEM_ANSWERS_RELEASE, MARKS_BUSY);
    release_args r = {h, {0, 0}, {0, 0}};
    ch_open(&r.down, &r.up);
    pid_t rp = h_child(releaser_main, &r);
    int64_t ready, out[3];
    assert_true(ch_get(r.up.rd, &ready, 20000));
    uint64_t entry = h_entry_id(h, "worker");
    assert_true(entry != 0);

    /* A sized release: the holder frees in 64 MiB steps, at least what was asked. */
    ask_release(&r, entry, 1 * GIB + 1, out);
    assert_int_equal(out[0], COMEM_OK);
    assert_true(out[1] == GIB + 64 * MIB);
    assert_true(out[2] == 6 * GIB - out[1]); /* the receipt's residency, as the ledger has it now */
    assert_true(ask_child(&w, CMD_RESIDENT) == out[2]);
    assert_true(h_process_resident(h, "worker") == out[2]);
    assert_int_equal(ask_child(&w, CMD_ASKS), 1);

    /* All of it (a detach): bytes < 0. */
    int64_t before = out[2];
    ask_release(&r, entry, -1, out);
    assert_int_equal(out[0], COMEM_OK);
    assert_true(out[1] == before && out[2] == 0);
    assert_true(h_process_resident(h, "worker") == 0);

    /* Nothing resident: answered at once, the holder is not asked again. */
    ask_release(&r, entry, GIB, out);
    assert_int_equal(out[0], COMEM_OK);
    assert_true(out[1] == 0 && out[2] == 0);
    assert_int_equal(ask_child(&w, CMD_ASKS), 2);

    /* A computing holder is never interrupted. */
    ask_release(&r, h_entry_id(h, "busy"), GIB, out);
    assert_int_equal(out[0], COMEM_EBUSY);
    assert_true(out[1] == 0 && out[2] == GIB);
    assert_int_equal(ask_child(&busy, CMD_ASKS), 0);

    /* Its own entry is refused; an unknown one is gone. */
    ask_release(&r, h_entry_id(h, "stand-in"), GIB, out);
    assert_int_equal(out[0], COMEM_EINVAL);
    ask_release(&r, entry + ((uint64_t)1 << 40), GIB, out);
    assert_int_equal(out[0], COMEM_ENOENT);

    ch_put(r.down.wr, 0);
    assert_int_equal(h_wait(rp), 0);
    finish(&w);
    finish(&busy);
    assert_ledger_clean(h);
}

/* A holder killed while it is being asked: the asker is told its bytes came back. */
static void test_release_of_a_killed_holder(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:reserved=256MiB:ctx=300MiB");
    h_start(h, NULL);
    proc w;
    spawn(&w, h, "slow", COMEM_CLIENT_WORKER, 3 * GIB, COMEM_ANSWERS_RELEASE, SLOW);
    release_args r = {h, {0, 0}, {0, 0}};
    ch_open(&r.down, &r.up);
    pid_t rp = h_child(releaser_main, &r);
    int64_t ready, out[3];
    assert_true(ch_get(r.up.rd, &ready, 20000));
    uint64_t entry = h_entry_id(h, "slow");
    ch_put(r.down.wr, (int64_t)entry);
    ch_put(r.down.wr, GIB);
    usleep(300 * 1000); /* the ask is out; the holder sleeps 1.5 s before it answers */
    kill(w.pid, SIGKILL);
    for (int i = 0; i < 3; i++)
        assert_true(ch_get(r.up.rd, &out[i], 30000));
    assert_int_equal(out[0], COMEM_ENOENT);
    assert_true(out[1] == 3 * GIB); /* what the entry held came back with the process */
    assert_true(out[2] == 0);
    assert_int_equal(h_wait(w.pid), -1);
    ch_put(r.down.wr, 0);
    assert_int_equal(h_wait(rp), 0);
    assert_int_equal(h_process_count(h, "slow"), 0);
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
        MP_TEST(test_admission_evicts_across_processes),
        MP_TEST(test_busy_answer_is_replanned),
        MP_TEST(test_marked_busy_is_not_asked),
        MP_TEST(test_refusal_says_how_short),
        MP_TEST(test_idle_release),
        MP_TEST(test_idle_release_early_when_tight),
        MP_TEST(test_sigkill_mid_admission_leaks_no_grant),
        MP_TEST(test_coordinator_restart_reregisters_once),
        MP_TEST(test_reserve_linux),
        MP_TEST(test_reserve_wddm),
        MP_TEST(test_pins_across_processes),
        MP_TEST(test_release_asks_another_process),
        MP_TEST(test_release_of_a_killed_holder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
