/*
 * tests/gpu/test_gpu_pager.c - the pager's CUDA backend on a real GPU.
 *
 * Exits 77 (ctest: skipped) without a CUDA driver or device, or with less
 * than 2 GiB free. Otherwise, on device 0, one 512 MiB VBAR of 32 MiB pages:
 *   1. fault every page, write a pattern, read it back;
 *   2. evict everything from another thread (no context current there, as on
 *      the client's service thread): one sync before and one after the batch;
 *   3. re-fault: every signature is new; write again, read back;
 *   4. evict the upper half only: the lower half keeps its signatures and its
 *      bytes, the upper half comes back with new signatures and is rewritten;
 *   5. with pages 0..3 pinned by this thread, evict everything from another:
 *      the pinned pages survive with their bytes;
 *   6. the kept pool: evicted pages' memory kept and mapped again by the next
 *      fault-in, the bytes written through it read back, the card's free
 *      reading counting it, and released when the bound goes to 0;
 * and prints the measured costs (commit and evict per page, copy rates).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bytes.h"
#include "comem/common.h"
#include "comem/pager.h"
#include "pager/pager_seam.h"

#define SKIP 77
#define MIB COMEM_MIB
#define PS (32 * MIB)
#define PAGES 16
#define SIZE (PAGES * PS)

static int g_failures;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (cond) {                                                                                \
            printf("  ok: ");                                                                      \
        } else {                                                                                   \
            printf("FAIL: ");                                                                      \
            g_failures++;                                                                          \
        }                                                                                          \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct evict_job {
    comem_pager *p;
    int64_t freed;
    double seconds;
    int rc;
} evict_job;

static void *evict_all(void *arg)
{
    evict_job *j = arg;
    double t = now_s();
    j->rc = comem_pager_free_memory(j->p, INT64_MAX, &j->freed);
    j->seconds = now_s() - t;
    return NULL;
}

/* Evicts everything evictable from a fresh thread; returns the bytes freed. */
static int64_t evict_from_another_thread(comem_pager *p, double *seconds)
{
    evict_job j = {p, 0, 0, -1};
    pthread_t t;
    if (pthread_create(&t, NULL, evict_all, &j) != 0)
        return -1;
    pthread_join(t, NULL);
    if (seconds)
        *seconds = j.seconds;
    return j.rc == COMEM_OK ? j.freed : -1;
}

static void fill(uint8_t *buf, int64_t n, unsigned salt)
{
    for (int64_t i = 0; i < n; i += 8) {
        uint64_t v = ((uint64_t)i * 0x9e3779b97f4a7c15ull) ^ salt;
        memcpy(buf + i, &v, 8);
    }
}

static int resident_pages(comem_vbar *v)
{
    uint8_t map[PAGES];
    int n = 0;
    comem_vbar_residency(v, map, PAGES);
    for (int i = 0; i < PAGES; i++)
        n += map[i] & 1;
    return n;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    comem_pager *p = NULL;
    int rc = comem_pager_open(COMEM_PAGER_CUDA, 0, NULL, &p);
    if (rc == COMEM_ENODEV || rc == COMEM_ENOTSUP) {
        printf("skipped: no CUDA device with virtual memory management (%s)\n", comem_status_str(rc));
        return SKIP;
    }
    if (rc != COMEM_OK) {
        printf("FAIL: comem_pager_open: %s\n", comem_status_str(rc));
        return 1;
    }
    int64_t gran = comem_pager_granularity(p);
    /* The device term alone: deficit(0) = 256 MiB - free while the simple term is far below. */
    comem_pager_set_device_poll(p, 0, 0);
    int64_t free_bytes = -comem_pager_budget_deficit(p, 0);
    printf("device 0: granularity %lld KiB, free %.0f MiB\n", (long long)(gran >> 10), (double)free_bytes / MIB);
    if (free_bytes < 2048 * MIB) {
        printf("skipped: the test needs 2 GiB free\n");
        comem_pager_close(p);
        return SKIP;
    }
    EXPECT(gran > 0 && PS % gran == 0, "granularity %lld divides the 32 MiB page", (long long)gran);
    comem_pager_set_device_poll(p, COMEM_PAGER_DEFAULT_DEVICE_HEADROOM, COMEM_PAGER_DEFAULT_POLL_MS);

    comem_vbar *v = NULL;
    if (comem_vbar_create(p, SIZE, PS, &v) != COMEM_OK) {
        printf("FAIL: comem_vbar_create\n");
        return 1;
    }
    uint8_t *pat = malloc(SIZE), *back = malloc(SIZE);
    if (!pat || !back)
        return 1;
    uint32_t s1[PAGES + 2], s2[PAGES + 2], s3[PAGES + 2];

    /* 1. fault, write, read back */
    double t = now_s();
    rc = comem_vbar_fault(v, 0, SIZE, s1, PAGES + 2);
    double commit_s = now_s() - t;
    EXPECT(rc == COMEM_VBAR_RESIDENT, "fault of %d pages: %s, %.1f us per page commit", PAGES,
           rc == COMEM_VBAR_RESIDENT ? "resident" : comem_status_str(rc), commit_s * 1e6 / PAGES);
    int ones = 0;
    for (int i = 0; i < PAGES; i++)
        ones += s1[i] == 1;
    EXPECT(ones == PAGES, "first signatures are all 1");
    fill(pat, SIZE, 1);
    t = now_s();
    rc = comem_vbar_write(v, 0, pat, SIZE);
    double w_s = now_s() - t;
    t = now_s();
    int rc2 = comem_vbar_read(v, 0, back, SIZE);
    double r_s = now_s() - t;
    EXPECT(rc == COMEM_OK && rc2 == COMEM_OK && !memcmp(pat, back, SIZE),
           "512 MiB written (%.1f GB/s pageable) and read back (%.1f GB/s) intact", SIZE / w_s / 1e9,
           SIZE / r_s / 1e9);
    comem_vbar_unpin(v, 0, SIZE);

    /* 2. evict everything from a thread with no context */
    int64_t syncs = comem_pager_stat(p, COMEM_PAGER_STAT_SYNCS);
    double ev_s = 0;
    int64_t freed = evict_from_another_thread(p, &ev_s);
    EXPECT(freed == SIZE, "evicted %lld MiB from another thread, %.1f us per page (two syncs included)",
           (long long)(freed / MIB), ev_s * 1e6 / PAGES);
    EXPECT(comem_pager_stat(p, COMEM_PAGER_STAT_SYNCS) - syncs == 2, "one sync before the batch, one after");
    EXPECT(resident_pages(v) == 0 && comem_pager_usage(p) == 0, "nothing resident");
    EXPECT(comem_vbar_read(v, 0, back, 16) == COMEM_ENOENT, "reading an evicted page is refused");

    /* 3. re-fault: new signatures, rewrite, read back */
    comem_vbar_prioritize(v);
    rc = comem_vbar_fault(v, 0, SIZE, s2, PAGES + 2);
    int changed = 0;
    for (int i = 0; i < PAGES; i++)
        changed += s2[i] != s1[i];
    EXPECT(rc == COMEM_VBAR_RESIDENT && changed == PAGES, "re-faulted: %d of %d signatures new", changed, PAGES);
    fill(pat, SIZE, 2);
    rc = comem_vbar_write(v, 0, pat, SIZE);
    rc2 = comem_vbar_read(v, 0, back, SIZE);
    EXPECT(rc == COMEM_OK && rc2 == COMEM_OK && !memcmp(pat, back, SIZE), "rewritten and read back intact");
    comem_vbar_unpin(v, 0, SIZE);

    /* 4. the upper half only */
    rc = comem_vbar_free_memory(v, SIZE / 2, &freed);
    EXPECT(rc == COMEM_OK && freed == SIZE / 2, "upper half evicted (%lld MiB)", (long long)(freed / MIB));
    comem_vbar_prioritize(v);
    rc = comem_vbar_fault(v, 0, SIZE, s3, PAGES + 2);
    int kept = 0, renewed = 0;
    for (int i = 0; i < PAGES; i++) {
        kept += i < PAGES / 2 && s3[i] == s2[i];
        renewed += i >= PAGES / 2 && s3[i] != s2[i];
    }
    EXPECT(rc == COMEM_VBAR_RESIDENT && kept == PAGES / 2 && renewed == PAGES / 2,
           "lower half kept its signatures (%d), upper half got new ones (%d)", kept, renewed);
    rc = comem_vbar_read(v, 0, back, SIZE / 2);
    EXPECT(rc == COMEM_OK && !memcmp(pat, back, SIZE / 2), "lower half kept its bytes");
    for (int i = 0; i < PAGES; i++)
        if (s3[i] != s2[i])
            comem_vbar_write(v, (int64_t)i * PS, pat + (int64_t)i * PS, PS);
    rc = comem_vbar_read(v, 0, back, SIZE);
    EXPECT(rc == COMEM_OK && !memcmp(pat, back, SIZE), "after copying the changed pages, all bytes right");
    comem_vbar_unpin(v, 0, SIZE);

    /* 5. pinned pages survive an eviction from another thread */
    rc = comem_vbar_fault(v, 0, 4 * PS, s3, PAGES + 2);
    freed = evict_from_another_thread(p, NULL);
    rc2 = comem_vbar_read(v, 0, back, 4 * PS);
    EXPECT(rc == COMEM_VBAR_RESIDENT && freed == SIZE - 4 * PS && resident_pages(v) == 4 && rc2 == COMEM_OK &&
               !memcmp(pat, back, 4 * PS),
           "with pages 0..3 pinned, %lld MiB evicted and the pinned 128 MiB intact", (long long)(freed / MIB));
    comem_vbar_unpin(v, 0, 4 * PS);
    EXPECT(comem_pager_check(p) == COMEM_OK, "invariants hold");

    /* 6. the kept pool: evicted memory stays this process's, and the next fault-in maps it again */
    EXPECT(comem_pager_set_keep(p, SIZE) == COMEM_OK, "kept pool bounded at 512 MiB");
    comem_pager_set_device_poll(p, 0, 0); /* the deficit's device term, read at every call: -free */
    comem_vbar_prioritize(v);
    rc = comem_vbar_fault(v, 0, SIZE, s3, PAGES + 2);
    comem_vbar_unpin(v, 0, SIZE);
    int64_t free_loaded = -comem_pager_budget_deficit(p, 0);
    rc2 = comem_vbar_free_memory(v, SIZE, &freed);
    int64_t free_kept = -comem_pager_budget_deficit(p, 0);
    EXPECT(rc == COMEM_VBAR_RESIDENT && rc2 == COMEM_OK && freed == SIZE && comem_pager_kept(p) == SIZE &&
               resident_pages(v) == 0 && free_kept < free_loaded + 64 * MIB,
           "16 pages evicted into the pool: 512 MiB kept, and the card's free reading still counts them "
           "(%+.0f MiB)", (double)(free_kept - free_loaded) / MIB);
    comem_vbar_prioritize(v);
    int64_t reused = comem_pager_stat(p, COMEM_PAGER_STAT_REUSED);
    rc = comem_vbar_fault(v, 0, SIZE, s2, PAGES + 2);
    changed = 0;
    for (int i = 0; i < PAGES; i++)
        changed += s2[i] != s3[i];
    fill(pat, SIZE, 3);
    rc2 = comem_vbar_write(v, 0, pat, SIZE);
    int rc3 = comem_vbar_read(v, 0, back, SIZE);
    EXPECT(rc == COMEM_VBAR_RESIDENT && rc2 == COMEM_OK && rc3 == COMEM_OK && !memcmp(pat, back, SIZE) &&
               comem_pager_stat(p, COMEM_PAGER_STAT_REUSED) - reused == PAGES && comem_pager_kept(p) == 0 &&
               changed == PAGES,
           "re-faulted: all 16 pages mapped kept memory (new signatures), written and read back intact");
    comem_vbar_unpin(v, 0, SIZE);
    comem_vbar_free_memory(v, SIZE, &freed);
    int rc4 = comem_pager_set_keep(p, 0);
    int64_t free_back = -comem_pager_budget_deficit(p, 0);
    EXPECT(rc4 == COMEM_OK && comem_pager_kept(p) == 0 && free_back >= free_kept + SIZE - 64 * MIB,
           "bound 0: the pool released, the card's free reading up by %.0f MiB", (double)(free_back - free_kept) / MIB);
    EXPECT(comem_pager_check(p) == COMEM_OK, "invariants hold");
    comem_pager_set_device_poll(p, COMEM_PAGER_DEFAULT_DEVICE_HEADROOM, COMEM_PAGER_DEFAULT_POLL_MS);
    printf("stats: commits %lld, evictions %lld, syncs %lld, transient retries %lld\n",
           (long long)comem_pager_stat(p, COMEM_PAGER_STAT_COMMITS),
           (long long)comem_pager_stat(p, COMEM_PAGER_STAT_EVICTIONS),
           (long long)comem_pager_stat(p, COMEM_PAGER_STAT_SYNCS),
           (long long)comem_pager_stat(p, COMEM_PAGER_STAT_TRANSIENT_RETRIES));
    comem_vbar_destroy(v);
    EXPECT(comem_pager_usage(p) == 0, "destroyed: nothing committed");
    comem_pager_close(p);
    free(pat);
    free(back);
    printf("%s\n", g_failures ? "FAILED" : "passed");
    return g_failures ? 1 : 0;
}
