/*
 * tests/unit/test_pager_stress.c - the pager under concurrent faults and
 * evictions (run it under TSan: make tsan, or the build-tsan tree).
 *
 * For a couple of seconds: two fault threads each fault and unpin random
 * weight-sized ranges (sharing pages, unaligned) of four shared VBARs that
 * are together larger than the card, and keep a private VBAR whose pages they
 * fill with a pattern named by the page's signature; an evictor thread frees
 * random amounts with comem_pager_free_memory (as the client's service thread
 * does for a release ask) and runs comem_pager_check; a fourth thread moves
 * the simple headroom and the priorities. Checked throughout:
 *   - while a thread holds a pin, its pages stay resident and a re-fault of
 *     the range that comes back RESIDENT returns the same signatures (no
 *     pinned page is ever evicted);
 *   - an unchanged signature means unchanged bytes;
 *   - usage = Σ resident pages × page size, and the simulated card charges
 *     this process exactly the pager's usage (comem_pager_check).
 */
#include "unit/cmocka_all.h"
#include "unit/tmpdir.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/common.h"
#include "comem/pager.h"
#include "pager/pager_seam.h"

#define MIB COMEM_MIB
#define PS (2 * MIB)
#define SHARED 4
#define SHARED_PAGES 48 /* 4 × 96 MiB on a 256 MiB card */
#define PRIVATE_PAGES 8
#define FAULTERS 2
#define RUN_MS 2000

static char g_dir[256];
static comem_pager *g_p;
static comem_vbar *g_shared[SHARED];
static atomic_bool g_stop;
static atomic_int g_failures;
static atomic_long g_resident, g_offloaded, g_evicted_bytes, g_checks, g_data_checks;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            atomic_fetch_add(&g_failures, 1);                                                      \
        }                                                                                          \
    } while (0)

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The pattern of a page under a signature: 16 bytes at the start, the middle and the end. */
static void pattern(uint8_t out[16], int64_t page, uint32_t sig, int at)
{
    for (int i = 0; i < 16; i++)
        out[i] = (uint8_t)(page * 7 + sig * 13 + at * 3 + i);
}

static const int64_t k_at[3] = {0, PS / 2, PS - 16};

/* Fills (new signature) or verifies (same signature) one page of the private VBAR. */
static void data_page(comem_vbar *v, int64_t page, uint32_t sig, uint32_t *saved)
{
    uint8_t want[16], got[16];
    for (int a = 0; a < 3; a++) {
        pattern(want, page, sig, a);
        if (sig != saved[page]) {
            CHECK(comem_vbar_write(v, page * PS + k_at[a], want, 16) == COMEM_OK, "write to a pinned page");
        } else {
            CHECK(comem_vbar_read(v, page * PS + k_at[a], got, 16) == COMEM_OK, "read of a pinned page");
            CHECK(memcmp(want, got, 16) == 0, "page %lld changed under an unchanged signature %u", (long long)page,
                  sig);
            atomic_fetch_add(&g_data_checks, 1);
        }
    }
    saved[page] = sig;
}

static void *faulter(void *arg)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)((intptr_t)arg + 1);
    comem_vbar *mine = NULL;
    CHECK(comem_vbar_create(g_p, PRIVATE_PAGES * PS, PS, &mine) == COMEM_OK, "private vbar");
    uint32_t saved[PRIVATE_PAGES] = {0};
    uint32_t sig[8], again[8];
    uint8_t map[SHARED_PAGES];
    while (!atomic_load(&g_stop) && mine) {
        /* A shared weight: 1 to 3 MiB at any offset, so neighbours share pages. */
        comem_vbar *v = g_shared[next_rand(&seed) % SHARED];
        int64_t size = (int64_t)(next_rand(&seed) % (3 * MIB)) + 1;
        int64_t off = (int64_t)(next_rand(&seed) % (uint64_t)(SHARED_PAGES * PS - size));
        int64_t first = off / PS, end = (off + size + PS - 1) / PS;
        int rc = comem_vbar_fault(v, off, size, sig, 8);
        CHECK(rc == COMEM_VBAR_RESIDENT || rc == COMEM_VBAR_OFFLOADED, "fault: %d", rc);
        if (rc == COMEM_VBAR_RESIDENT) {
            atomic_fetch_add(&g_resident, 1);
            usleep((useconds_t)(next_rand(&seed) % 200)); /* "compute" while others evict */
            CHECK(comem_vbar_residency(v, map, SHARED_PAGES) == SHARED_PAGES, "residency");
            for (int64_t i = first; i < end; i++)
                CHECK((map[i] & 3) == 3, "page %lld of a pinned range is not resident and pinned", (long long)i);
            rc = comem_vbar_fault(v, off, size, again, 8);
            CHECK(rc == COMEM_VBAR_RESIDENT || rc == COMEM_VBAR_OFFLOADED, "re-fault: %d", rc);
            if (rc == COMEM_VBAR_RESIDENT) {
                CHECK(memcmp(sig, again, (size_t)(end - first) * sizeof sig[0]) == 0,
                      "a pinned range changed signatures");
                comem_vbar_unpin(v, off, size);
            }
            comem_vbar_unpin(v, off, size);
        } else {
            atomic_fetch_add(&g_offloaded, 1);
            if (next_rand(&seed) % 8 == 0)
                comem_vbar_prioritize(v); /* the model is needed again: lift its watermark */
        }
        /* The private VBAR: one or two pages, the data follows the signature. */
        int64_t p0 = (int64_t)(next_rand(&seed) % PRIVATE_PAGES);
        int64_t n = p0 + 1 < PRIVATE_PAGES && (next_rand(&seed) & 1) ? 2 : 1;
        rc = comem_vbar_fault(mine, p0 * PS, n * PS, sig, 8);
        CHECK(rc == COMEM_VBAR_RESIDENT || rc == COMEM_VBAR_OFFLOADED, "private fault: %d", rc);
        if (rc == COMEM_VBAR_RESIDENT) {
            for (int64_t i = 0; i < n; i++)
                data_page(mine, p0 + i, sig[i], saved);
            comem_vbar_unpin(mine, p0 * PS, n * PS);
        } else if (next_rand(&seed) % 4 == 0) {
            comem_vbar_prioritize(mine);
        }
    }
    comem_vbar_destroy(mine);
    return NULL;
}

static void *evictor(void *arg)
{
    (void)arg;
    uint64_t seed = 12345;
    while (!atomic_load(&g_stop)) {
        int64_t freed = -1, want = (int64_t)(next_rand(&seed) % (16 * MIB));
        CHECK(comem_pager_free_memory(g_p, want, &freed) == COMEM_OK, "free_memory");
        CHECK(freed >= 0, "freed %lld", (long long)freed);
        atomic_fetch_add(&g_evicted_bytes, freed);
        CHECK(comem_pager_check(g_p) == COMEM_OK, "invariants");
        atomic_fetch_add(&g_checks, 1);
        usleep((useconds_t)(next_rand(&seed) % 2000));
    }
    return NULL;
}

static void *steerer(void *arg)
{
    (void)arg;
    uint64_t seed = 777;
    while (!atomic_load(&g_stop)) {
        comem_vbar *v = g_shared[next_rand(&seed) % SHARED];
        switch (next_rand(&seed) % 5) {
        case 0: comem_vbar_prioritize(v); break;
        case 1: comem_vbar_deprioritize(v); break;
        case 2: comem_pager_set_simple_headroom(g_p, (int64_t)(next_rand(&seed) % 4) * 32 * MIB); break;
        case 3: comem_vbar_set_watermark_limit(v, (int64_t)(next_rand(&seed) % 8) * PS); break;
        default: comem_pager_reset_watermark_limits(g_p); break;
        }
        usleep(1000);
    }
    return NULL;
}

static void test_concurrent_faults_and_evictions(void **s)
{
    (void)s;
    char spec[400];
    snprintf(spec, sizeof spec, "sim:256MiB:reserved=0:ctx=0:path=%s/card", g_dir);
    assert_int_equal(comem_pager_open(COMEM_PAGER_SIM, 0, spec, &g_p), COMEM_OK);
    assert_int_equal(comem_pager_set_simple_headroom(g_p, 0), COMEM_OK);
    assert_int_equal(comem_pager_set_device_poll(g_p, 16 * MIB, 5), COMEM_OK);
    for (int i = 0; i < SHARED; i++)
        assert_int_equal(comem_vbar_create(g_p, SHARED_PAGES * PS, PS, &g_shared[i]), COMEM_OK);

    pthread_t f[FAULTERS], e, st;
    atomic_store(&g_stop, false);
    for (intptr_t i = 0; i < FAULTERS; i++)
        assert_int_equal(pthread_create(&f[i], NULL, faulter, (void *)i), 0);
    assert_int_equal(pthread_create(&e, NULL, evictor, NULL), 0);
    assert_int_equal(pthread_create(&st, NULL, steerer, NULL), 0);
    int64_t t0 = now_ms();
    while (now_ms() - t0 < RUN_MS && atomic_load(&g_failures) == 0)
        usleep(20000);
    atomic_store(&g_stop, true);
    for (int i = 0; i < FAULTERS; i++)
        pthread_join(f[i], NULL);
    pthread_join(e, NULL);
    pthread_join(st, NULL);

    printf("faults resident %ld, offloaded %ld; evicted %ld MiB by free_memory; %ld checks, %ld data checks; "
           "commits %lld, evictions %lld, syncs %lld\n",
           atomic_load(&g_resident), atomic_load(&g_offloaded), atomic_load(&g_evicted_bytes) / MIB,
           atomic_load(&g_checks), atomic_load(&g_data_checks), (long long)comem_pager_stat(g_p, COMEM_PAGER_STAT_COMMITS),
           (long long)comem_pager_stat(g_p, COMEM_PAGER_STAT_EVICTIONS),
           (long long)comem_pager_stat(g_p, COMEM_PAGER_STAT_SYNCS));
    assert_int_equal(atomic_load(&g_failures), 0);
    assert_true(atomic_load(&g_resident) > 0);
    assert_true(atomic_load(&g_offloaded) > 0);
    assert_true(atomic_load(&g_evicted_bytes) > 0);
    assert_true(atomic_load(&g_checks) > 0);
    assert_true(atomic_load(&g_data_checks) > 0);
    /* Quiet now: nothing is pinned, and the figures add up. */
    assert_int_equal(comem_pager_check(g_p), COMEM_OK);
    int64_t loaded = 0;
    uint8_t map[SHARED_PAGES];
    for (int i = 0; i < SHARED; i++) {
        loaded += comem_vbar_loaded_size(g_shared[i]);
        assert_int_equal(comem_vbar_residency(g_shared[i], map, SHARED_PAGES), SHARED_PAGES);
        for (int k = 0; k < SHARED_PAGES; k++)
            assert_int_equal(map[k] & 2, 0);
    }
    assert_int_equal(comem_pager_usage(g_p), loaded);
    comem_pager_reset_watermark_limits(g_p);
    assert_int_equal(comem_pager_reclaimable(g_p), loaded);
    int64_t freed = 0;
    assert_int_equal(comem_pager_free_memory(g_p, INT64_MAX, &freed), COMEM_OK);
    assert_int_equal(freed, loaded);
    assert_int_equal(comem_pager_usage(g_p), 0);
    assert_int_equal(comem_pager_check(g_p), COMEM_OK);
    comem_pager_close(g_p);
}

static int setup(void **s)
{
    (void)s;
    assert_int_equal(test_tmpdir_make(g_dir, sizeof g_dir, "pager-stress"), 0);
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    return test_tmpdir_remove(g_dir);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_faults_and_evictions),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
