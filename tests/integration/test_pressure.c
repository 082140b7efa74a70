/*
 * tests/integration/test_pressure.c - the card's own pressure, and pins on a unified-memory card.
 *
 * comemd runs over a simulated card; holders are forked processes using
 * libcomem. Covered: bytes nobody registered push the card below its
 * reserve, and a holder that releases while busy (a pager) is asked for the
 * difference while it computes, one round at a time; a holder marked busy
 * that does not release while busy is left alone. On a uma card, where pinned
 * RAM is the device's memory, a pin larger than the device's free beyond the
 * reserve is refused with the shortfall, and one that fits is granted.
 */
#include "unit/cmocka_all.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "harness.h"

#define GIB COMEM_GIB
#define MIB COMEM_MIB

typedef struct hargs {
    const harness *h;
    const char *name;
    unsigned flags;
    int64_t load;
    chan down, up;
} hargs;

typedef struct hstate {
    pthread_mutex_t lock;
    comem_client *c;
    comem_sim *sim;
    uint64_t entry;
    int64_t resident;
    int asks;
} hstate;

/* Frees what was asked, in 32 MiB pages. */
static int on_release(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                      const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder;
    (void)entries;
    hstate *st = user;
    pthread_mutex_lock(&st->lock);
    st->asks++;
    int64_t want = kind == COMEM_RELEASE_IDLE ? st->resident : bytes;
    for (size_t k = 0; k < n; k++)
        want = amounts[k];
    int64_t give = comem_min(st->resident, (want + 32 * MIB - 1) / (32 * MIB) * (32 * MIB));
    *freed = 0;
    if (give > 0 && comem_sim_free(st->sim, 0, give) == COMEM_OK) {
        st->resident -= give;
        *freed = give;
        comem_entry_set_resident(st->c, st->entry, st->resident);
    }
    pthread_mutex_unlock(&st->lock);
    return COMEM_OK;
}

/* Loads `load`, marks itself busy (computing), then answers the test: 1 asks, 2 resident, 0 exit. */
static int holder_main(void *arg)
{
    hargs *a = arg;
    hstate st = {0};
    pthread_mutex_init(&st.lock, NULL);
    st.sim = h_sim(a->h);
    if (!st.sim || comem_client_open(a->h->sock, COMEM_CLIENT_WORKER, a->name, -1, COMEM_OPEN_NO_LOCAL, &st.c))
        return 10;
    comem_sim_touch(st.sim, 0);
    uint64_t holder, grant;
    if (comem_holder_add(st.c, "weights", 0, COMEM_KIND_PAGER, a->flags, on_release, &st, &holder) ||
        comem_admit(st.c, 0, holder, a->load, 0, 0, NULL, 0, 10000, &grant, NULL))
        return 11;
    pthread_mutex_lock(&st.lock);
    if (comem_sim_alloc(st.sim, 0, a->load) != COMEM_OK)
        return 12;
    st.resident = a->load;
    comem_entry_add(st.c, holder, "model", a->load, 0, COMEM_ENTRY_PAGED, &st.entry);
    pthread_mutex_unlock(&st.lock);
    comem_grant_done(st.c, grant, st.entry, a->load);
    comem_holder_busy(st.c, 0, 1, "p1"); /* computing from here on */
    ch_put(a->up.wr, 1);
    int64_t cmd;
    while (ch_get(a->down.rd, &cmd, 60000) && cmd != 0) {
        pthread_mutex_lock(&st.lock);
        int64_t v = cmd == 1 ? st.asks : st.resident;
        pthread_mutex_unlock(&st.lock);
        ch_put(a->up.wr, v);
    }
    comem_client_close(st.c);
    return 0;
}

static pid_t spawn(hargs *a)
{
    ch_open(&a->down, &a->up);
    pid_t pid = h_child(holder_main, a);
    int64_t ready;
    assert_true(ch_get(a->up.rd, &ready, 20000));
    return pid;
}

static int64_t ask(hargs *a, int64_t cmd)
{
    int64_t v = -1;
    ch_put(a->down.wr, cmd);
    assert_true(ch_get(a->up.rd, &v, 20000));
    return v;
}

static int64_t card_free(comem_sim *sim)
{
    comem_device_reading r;
    assert_int_equal(comem_sim_read(sim, 0, &r), COMEM_OK);
    return r.free;
}

static void test_foreign_growth_asks_who_can_release_now(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:reserved=256MiB:ctx=300MiB");
    h_start(h, NULL);
    hargs pager = {h, "pager", COMEM_ANSWERS_RELEASE | COMEM_RELEASES_WHILE_BUSY, 8 * GIB, {0, 0}, {0, 0}};
    hargs stiff = {h, "stiff", COMEM_ANSWERS_RELEASE, 4 * GIB, {0, 0}, {0, 0}}; /* busy: never asked */
    pid_t pp = spawn(&pager), ps = spawn(&stiff);
    usleep(600 * 1000); /* ticks with room on the card: nobody is asked */
    assert_int_equal(ask(&pager, 1), 0);

    /* An app the ledger does not know takes the card down to 100 MiB free. */
    comem_sim *app = h_sim(h);
    assert_non_null(app);
    assert_int_equal(comem_sim_touch(app, 0), COMEM_OK);
    int64_t take = card_free(app) - 100 * MIB;
    assert_int_equal(comem_sim_alloc(app, 0, take), COMEM_OK);
    bool back = false;
    for (int i = 0; i < 40 && !back; i++) {
        usleep(50 * 1000);
        back = card_free(app) >= 400 * MIB; /* the operator's reserve, free again */
    }
    assert_true(back);
    int64_t resident = ask(&pager, 2);
    assert_true(resident < 8 * GIB && resident >= 8 * GIB - 512 * MIB); /* about what was missing, no more */
    assert_true(ask(&pager, 1) >= 1);
    assert_int_equal(ask(&stiff, 1), 0);
    assert_true(ask(&stiff, 2) == 4 * GIB);
    usleep(600 * 1000); /* the card has its reserve again: no further rounds */
    int asks = (int)ask(&pager, 1);
    usleep(600 * 1000);
    assert_int_equal(ask(&pager, 1), asks);

    assert_int_equal(comem_sim_free(app, 0, take), COMEM_OK);
    comem_sim_close(app);
    ch_put(pager.down.wr, 0);
    ch_put(stiff.down.wr, 0);
    assert_int_equal(h_wait(pp), 0);
    assert_int_equal(h_wait(ps), 0);
}

typedef struct pargs {
    const harness *h;
    int64_t device, pin;
    chan up;
} pargs;

/* Takes `device` bytes of the uma card, then asks to pin `pin`: reports the outcome and shortfall. */
static int pinner_main(void *arg)
{
    pargs *a = arg;
    comem_sim *sim = h_sim(a->h);
    comem_client *c = NULL;
    uint64_t holder;
    if (!sim || comem_client_open(a->h->sock, COMEM_CLIENT_WORKER, "pinner", -1, COMEM_OPEN_NO_LOCAL, &c) ||
        comem_holder_add(c, "pins", 0, COMEM_KIND_PINS, 0, NULL, NULL, &holder))
        return 10;
    if (a->device > 0 && comem_sim_alloc(sim, 0, a->device) != COMEM_OK)
        return 11;
    usleep(400 * 1000); /* the coordinator reads the card */
    int64_t shortfall = -1;
    int rc = comem_pin_acquire(c, holder, a->pin, &shortfall);
    ch_put(a->up.wr, rc);
    ch_put(a->up.wr, shortfall);
    if (rc == COMEM_OK)
        comem_pin_release(c, holder, a->pin);
    comem_client_close(c);
    return 0;
}

static void test_uma_pins_come_out_of_the_device(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:uma:reserved=0:ctx=256MiB");
    h_start(h, NULL);
    /* 12 GiB of VRAM on a 16 GiB pool: 3.75 GiB left, less the 400 MiB reserve */
    pargs a = {h, 12 * GIB, 4 * GIB, {0, 0}};
    chan unused;
    ch_open(&unused, &a.up);
    pid_t p = h_child(pinner_main, &a);
    int64_t rc = 0, shortfall = 0;
    assert_true(ch_get(a.up.rd, &rc, 20000) && ch_get(a.up.rd, &shortfall, 20000));
    assert_int_equal(rc, COMEM_ENOSPC);
    assert_true(shortfall == 4 * GIB - (16 * GIB - 256 * MIB - 12 * GIB - 400 * MIB));
    assert_int_equal(h_wait(p), 0);

    pargs b = {h, 12 * GIB, 3 * GIB, {0, 0}}; /* fits beside the reserve */
    ch_open(&unused, &b.up);
    p = h_child(pinner_main, &b);
    assert_true(ch_get(b.up.rd, &rc, 20000) && ch_get(b.up.rd, &shortfall, 20000));
    assert_int_equal(rc, COMEM_OK);
    assert_int_equal(h_wait(p), 0);
}

static int setup(void **s)
{
    static harness h;
    *s = &h;
    return 0;
}

#define MP_TEST(f) cmocka_unit_test_setup_teardown(f, setup, h_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        MP_TEST(test_foreign_growth_asks_who_can_release_now),
        MP_TEST(test_uma_pins_come_out_of_the_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
