/*
 * tests/integration/test_hostram.c - host RAM as a ledger device, through the C API, with real memory.
 *
 * comemd runs with --ram 2GiB beside a simulated card: host RAM is device 1,
 * which every process names COMEM_DEVICE_HOST_RAM. Each holder is a forked
 * process whose bytes are an anonymous mapping of the size it registers,
 * every page written; its release callback unmaps them (munmap, so the bytes
 * leave its resident set at once, under a sanitizer's allocator too).
 * Covered: an admission that does not fit asks the idle process's RAM holder
 * (never the busy one), whose receipt and resident set both show the bytes
 * gone, and is granted; a process SIGKILLed between its grant and its
 * allocation's end gives both back; an ordinal that is not host RAM's never
 * names it.
 */
#include "unit/cmocka_all.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "harness.h"
#include "probe/hostram.h"

#define MIB COMEM_MIB
#define BUDGET (2 * COMEM_GIB)

typedef struct hargs {
    const harness *h;
    const char *name;
    int64_t bytes;
    bool busy;
    chan down, up;
} hargs;

typedef struct hstate {
    pthread_mutex_t lock;
    comem_client *c;
    uint64_t entry;
    void *mem;
    int64_t resident;
    int asks;
} hstate;

static void *touch(int64_t bytes)
{
    void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    memset(p, 1, (size_t)bytes);
    return p;
}

/* Drops the whole cache, whatever was asked: a RAM cache entry goes as a whole. */
static int on_release(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                      const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder, (void)kind, (void)bytes, (void)entries, (void)amounts, (void)n;
    hstate *st = user;
    pthread_mutex_lock(&st->lock);
    st->asks++;
    *freed = 0;
    if (st->mem) {
        munmap(st->mem, (size_t)st->resident);
        st->mem = NULL;
        *freed = st->resident;
        st->resident = 0;
        comem_entry_set_resident(st->c, st->entry, 0);
    }
    pthread_mutex_unlock(&st->lock);
    return COMEM_OK;
}

/* Holds `bytes` of RAM as a cache; answers the test: 1 asks, 2 RSS, 0 exit. */
static int cache_main(void *arg)
{
    hargs *a = arg;
    hstate st = {0};
    pthread_mutex_init(&st.lock, NULL);
    if (comem_client_open(a->h->sock, COMEM_CLIENT_WORKER, a->name, -1, COMEM_OPEN_NO_LOCAL, &st.c))
        return 10;
    uint64_t holder;
    if (comem_holder_add(st.c, "ram-cache", COMEM_DEVICE_HOST_RAM, COMEM_KIND_MODELS,
                         COMEM_ANSWERS_RELEASE | COMEM_ANSWERS_IDLE, on_release, &st, &holder))
        return 11;
    pthread_mutex_lock(&st.lock);
    if (!(st.mem = touch(a->bytes)))
        return 12;
    st.resident = a->bytes;
    if (comem_entry_add(st.c, holder, "outputs", a->bytes, a->bytes, 0, &st.entry))
        return 13;
    pthread_mutex_unlock(&st.lock);
    if (a->busy)
        comem_holder_busy(st.c, 0, 1, "p1");
    ch_put(a->up.wr, 1);
    int64_t cmd;
    while (ch_get(a->down.rd, &cmd, 60000) && cmd != 0) {
        int64_t rss = -1;
        comem_hostram_rss(NULL, getpid(), &rss);
        pthread_mutex_lock(&st.lock);
        int64_t v = cmd == 1 ? st.asks : rss;
        pthread_mutex_unlock(&st.lock);
        ch_put(a->up.wr, v);
    }
    comem_client_close(st.c);
    return 0;
}

/*
 * Admits `bytes` on host RAM; reports granted (1) or not, the bytes freed for it and the asks sent, then
 * allocates and reports that; on the next command registers the bytes and finishes the grant.
 */
static int admit_main(void *arg)
{
    hargs *a = arg;
    comem_client *c;
    if (comem_client_open(a->h->sock, COMEM_CLIENT_WORKER, a->name, -1, COMEM_OPEN_NO_LOCAL, &c))
        return 10;
    uint64_t holder;
    if (comem_holder_add(c, "loads", COMEM_DEVICE_HOST_RAM, COMEM_KIND_MODELS, 0, NULL, NULL, &holder))
        return 11;
    comem_admission fig;
    int rc = comem_admit_record(c, COMEM_DEVICE_HOST_RAM, holder, a->bytes, 0, 0, NULL, 0, 20000, &fig);
    ch_put(a->up.wr, rc == COMEM_OK);
    ch_put(a->up.wr, fig.freed);
    ch_put(a->up.wr, fig.n_asked);
    if (rc != COMEM_OK)
        return 1;
    void *mem = touch(a->bytes);
    ch_put(a->up.wr, mem != NULL);
    int64_t cmd; /* the kill test kills it here: allocated, the grant never done */
    if (!ch_get(a->down.rd, &cmd, 60000) || cmd == 0)
        return 2;
    uint64_t entry;
    comem_entry_add(c, holder, "offloaded", a->bytes, 0, 0, &entry);
    comem_grant_done(c, fig.grant, entry, a->bytes);
    ch_put(a->up.wr, 1);
    while (ch_get(a->down.rd, &cmd, 60000) && cmd != 0)
        ch_put(a->up.wr, 1);
    comem_client_close(c);
    return 0;
}

static pid_t spawn(hargs *a, int (*fn)(void *), bool wait_ready)
{
    ch_open(&a->down, &a->up);
    pid_t pid = h_child(fn, a);
    int64_t ready;
    if (wait_ready)
        assert_true(ch_get(a->up.rd, &ready, 30000));
    return pid;
}

static int64_t ask(hargs *a, int64_t cmd)
{
    int64_t v = -1;
    ch_put(a->down.wr, cmd);
    assert_true(ch_get(a->up.rd, &v, 30000));
    return v;
}

static int64_t get(hargs *a)
{
    int64_t v = -1;
    assert_true(ch_get(a->up.rd, &v, 30000));
    return v;
}

static int setup(void **state)
{
    static harness h;
    h_init(&h, "sim:8GiB");
    h_start(&h, (const char *const[]){"--ram", "2GiB", "--check", NULL});
    *state = &h;
    return 0;
}

static void test_admission_asks_the_idle_cache(void **state)
{
    harness *h = *state;
    assert_int_equal(h_status_num(h, "devices.1.capacity"), BUDGET);
    hargs busy = {.h = h, .name = "busy", .bytes = 640 * MIB, .busy = true};
    hargs idle = {.h = h, .name = "idle", .bytes = 640 * MIB};
    pid_t pb = spawn(&busy, cache_main, true), pi = spawn(&idle, cache_main, true);
    int64_t rss_before = ask(&idle, 2);
    assert_true(rss_before >= 640 * MIB);
    assert_int_equal(h_status_num(h, "devices.1.resident"), 1280 * MIB);
    /* 2 GiB - 1.25 GiB of caches - the processes' own: 768 MiB does not fit without a release. */
    assert_true(h_status_num(h, "devices.1.free") < 768 * MIB);
    hargs ad = {.h = h, .name = "loader", .bytes = 768 * MIB};
    pid_t pa = spawn(&ad, admit_main, false);
    assert_int_equal(get(&ad), 1);             /* granted */
    assert_int_equal(get(&ad), 640 * MIB);     /* the receipt: the idle cache, all of it */
    assert_int_equal(get(&ad), 1);             /* one ask */
    assert_int_equal(get(&ad), 1);             /* allocated */
    assert_int_equal(ask(&idle, 1), 1);
    assert_int_equal(ask(&busy, 1), 0);        /* a computing process is not asked */
    assert_true(ask(&idle, 2) < rss_before - 600 * MIB); /* the bytes left its resident set */
    assert_int_equal(ask(&ad, 1), 1);          /* the grant is done */
    assert_int_equal(h_status_num(h, "devices.1.resident"), 640 * MIB + 768 * MIB);
    assert_int_equal(h_status_num(h, "devices.1.granted"), 0);
    assert_int_equal(h_status_num(h, "devices.0.resident"), 0); /* nothing on the card */
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    ch_put(busy.down.wr, 0); /* exit */
    ch_put(idle.down.wr, 0);
    ch_put(ad.down.wr, 0);
    assert_int_equal(h_wait(pb), 0);
    assert_int_equal(h_wait(pi), 0);
    assert_int_equal(h_wait(pa), 0);
}

static void test_killed_mid_allocation(void **state)
{
    harness *h = *state;
    hargs ad = {.h = h, .name = "doomed", .bytes = 1024 * MIB};
    pid_t pa = spawn(&ad, admit_main, false);
    assert_int_equal(get(&ad), 1);
    get(&ad), get(&ad);
    assert_int_equal(get(&ad), 1); /* allocated; the grant not done yet */
    assert_int_equal(h_status_num(h, "devices.1.granted"), 1024 * MIB);
    int64_t free_before = h_status_num(h, "devices.1.free"); /* read with its gigabyte resident */
    assert_true(free_before <= BUDGET - 1024 * MIB);
    kill(pa, SIGKILL);
    assert_int_equal(h_wait(pa), -1);
    int64_t granted = -1, free_now = -1;
    for (int i = 0; i < 500 && (granted != 0 || free_now < free_before + 1000 * MIB); i++) {
        usleep(20000);
        granted = h_status_num(h, "devices.1.granted");
        free_now = h_status_num(h, "devices.1.free");
    }
    assert_int_equal(granted, 0);
    assert_true(free_now >= free_before + 1000 * MIB); /* its gigabyte is back in the budget */
    assert_int_equal(h_process_count(h, "doomed"), 0);
    assert_true(h_status_num(h, "counters.sessions_died") >= 1);
}

static void test_raw_index_is_not_host_ram(void **state)
{
    harness *h = *state;
    comem_client *c;
    assert_int_equal(comem_client_open(h->sock, COMEM_CLIENT_WORKER, "names", -1, COMEM_OPEN_NO_LOCAL, &c), COMEM_OK);
    uint64_t holder;
    /* Device 1 is the coordinator's host RAM index, but to a process it is its second GPU. */
    assert_int_equal(comem_holder_add(c, "x", 1, COMEM_KIND_MODELS, 0, NULL, NULL, &holder), COMEM_ENODEV);
    assert_int_equal(comem_client_map_device(c, COMEM_DEVICE_HOST_RAM, COMEM_HOSTRAM_UUID), COMEM_EINVAL);
    assert_int_equal(comem_holder_add(c, "y", COMEM_DEVICE_HOST_RAM, COMEM_KIND_MODELS, 0, NULL, NULL, &holder),
                     COMEM_OK);
    comem_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admission_asks_the_idle_cache),
        cmocka_unit_test(test_killed_mid_allocation),
        cmocka_unit_test(test_raw_index_is_not_host_ram),
    };
    return cmocka_run_group_tests(tests, setup, h_teardown);
}
