/*
 * tests/unit/test_pager.c - the pager's rules on the simulated card, one
 * thread.
 *
 * Each test opens a pager on a fresh card in a temporary directory (no
 * reserved slice, no context cost, so the arithmetic reads plainly). Most
 * tests zero the simple and device headrooms and read the device at every
 * call, so pressure appears exactly when the card is full; the headroom tests
 * set them on purpose and drive the device reading's cache with an injected
 * clock. A residency map is asserted as text: '.' absent, 'r' resident,
 * 'P' resident and pinned. comem_pager_check verifies the invariants
 * (usage = Σ resident pages, no unpinned resident page above a watermark, the
 * card's charge = usage) after every test.
 */
#include "unit/cmocka_all.h"
#include "unit/tmpdir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "comem/common.h"
#include "comem/pager.h"
#include "pager/pager_seam.h"
#include "probe/sim.h"

#define MIB COMEM_MIB
#define GIB COMEM_GIB
#define PS (4 * MIB) /* the page size of most tests */

static char g_dir[256];
static char g_spec[400];
static int g_card;
static comem_pager *g_p;

static int setup(void **s)
{
    (void)s;
    assert_int_equal(test_tmpdir_make(g_dir, sizeof g_dir, "pager"), 0);
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    return test_tmpdir_remove(g_dir);
}

/* Opens g_p on a fresh card of `size` ("64MiB"); plain = zero headrooms, a reading at every call. */
static comem_pager *open_card(const char *size, bool plain)
{
    snprintf(g_spec, sizeof g_spec, "sim:%s:reserved=0:ctx=0:path=%s/card%d", size, g_dir, ++g_card);
    assert_int_equal(comem_pager_open(COMEM_PAGER_SIM, 0, g_spec, &g_p), COMEM_OK);
    if (plain) {
        assert_int_equal(comem_pager_set_simple_headroom(g_p, 0), COMEM_OK);
        assert_int_equal(comem_pager_set_device_poll(g_p, 0, 0), COMEM_OK);
    }
    return g_p;
}

static void close_card(void)
{
    assert_int_equal(comem_pager_check(g_p), COMEM_OK);
    comem_pager_close(g_p);
    g_p = NULL;
}

/* A second handle on the current card, as another allocator of this process would have. */
static comem_sim *card_handle(void)
{
    comem_sim_spec spec;
    comem_sim *sim = NULL;
    assert_int_equal(comem_sim_spec_parse(g_spec, &spec, NULL, 0), COMEM_OK);
    assert_int_equal(comem_sim_open(&spec, &sim), COMEM_OK);
    return sim;
}

static comem_vbar *vbar(int64_t pages, int64_t page_size)
{
    comem_vbar *v = NULL;
    assert_int_equal(comem_vbar_create(g_p, pages * page_size, page_size, &v), COMEM_OK);
    return v;
}

/* Faults pages [first, first+count) of v. */
static int fault(comem_vbar *v, int64_t first, int64_t count)
{
    uint32_t sig[64];
    int64_t ps = comem_vbar_page_size(v);
    return comem_vbar_fault(v, first * ps, count * ps, sig, 64);
}

static void unpin(comem_vbar *v, int64_t first, int64_t count)
{
    int64_t ps = comem_vbar_page_size(v);
    assert_int_equal(comem_vbar_unpin(v, first * ps, count * ps), COMEM_OK);
}

/* Faults and unpins pages [first, first+count) one at a time; each must come back resident. */
static void load(comem_vbar *v, int64_t first, int64_t count)
{
    for (int64_t i = first; i < first + count; i++) {
        assert_int_equal(fault(v, i, 1), COMEM_VBAR_RESIDENT);
        unpin(v, i, 1);
    }
}

static const char *map(comem_vbar *v)
{
    static char text[4][256];
    static int k;
    char *t = text[k++ % 4];
    uint8_t m[255];
    int64_t n = comem_vbar_residency(v, m, sizeof m);
    assert_true(n >= 0);
    for (int64_t i = 0; i < n; i++)
        t[i] = (m[i] & 2) ? 'P' : (m[i] & 1) ? 'r' : '.';
    t[n] = '\0';
    return t;
}

static int64_t pager_stat(int which) { return comem_pager_stat(g_p, which); }

/* ---------------------------------------------------------------- basics */

static void test_create(void **s)
{
    (void)s;
    open_card("64MiB", true);
    assert_int_equal(comem_pager_granularity(g_p), 2 * MIB);
    comem_vbar *v = NULL;
    assert_int_equal(comem_vbar_create(g_p, 10 * MIB + 1, PS, &v), COMEM_OK); /* rounded up to whole pages */
    assert_int_equal(comem_vbar_pages(v), 3);
    assert_int_equal(comem_vbar_size(v), 12 * MIB);
    assert_int_equal(comem_vbar_page_size(v), PS);
    assert_true(comem_vbar_base(v) != 0);
    assert_int_equal(comem_vbar_watermark(v), 12 * MIB);
    assert_int_equal(comem_vbar_watermark_limit(v), 0);
    assert_string_equal(map(v), "...");
    comem_vbar_destroy(v);

    assert_int_equal(comem_vbar_create(g_p, 100 * MIB, 0, &v), COMEM_OK); /* 0: 32 MiB pages */
    assert_int_equal(comem_vbar_page_size(v), 32 * MIB);
    assert_int_equal(comem_vbar_pages(v), 4);
    comem_vbar_destroy(v);

    /* Never clamped to the card: 64 GiB of address space on a 64 MiB card. */
    assert_int_equal(comem_vbar_create(g_p, 64 * GIB, 32 * MIB, &v), COMEM_OK);
    assert_int_equal(comem_vbar_size(v), 64 * GIB);
    assert_int_equal(comem_vbar_pages(v), 2048);
    comem_vbar_destroy(v);

    assert_int_equal(comem_vbar_create(g_p, 8 * MIB, 3 * MIB, &v), COMEM_EINVAL); /* not a granularity multiple */
    assert_int_equal(comem_vbar_create(g_p, 8 * MIB, MIB, &v), COMEM_EINVAL);
    assert_int_equal(comem_vbar_create(g_p, 0, PS, &v), COMEM_EINVAL);
    assert_int_equal(comem_vbar_create(g_p, -1, PS, &v), COMEM_EINVAL);
    assert_int_equal(comem_vbar_create(g_p, 8 * MIB, -2, &v), COMEM_EINVAL);
    assert_int_equal(comem_vbar_create(NULL, 8 * MIB, PS, &v), COMEM_EINVAL);
    assert_int_equal(comem_pager_open(3, 0, g_spec, &g_p), COMEM_EINVAL);
    assert_int_equal(comem_pager_open(COMEM_PAGER_SIM, 1, g_spec, &(comem_pager *){NULL}), COMEM_ENODEV);
    assert_int_equal(comem_pager_open(COMEM_PAGER_SIM, 0, "sim:lots", &(comem_pager *){NULL}), COMEM_EINVAL);
    close_card();
}

static void test_fault_pins_and_signatures(void **s)
{
    (void)s;
    open_card("64MiB", true);
    comem_vbar *v = vbar(4, PS);
    uint32_t sig[8] = {0};
    assert_int_equal(comem_vbar_fault(v, 2 * MIB, 4 * MIB, sig, 8), COMEM_VBAR_RESIDENT); /* pages 0 and 1 */
    assert_int_equal(sig[0], 1);
    assert_int_equal(sig[1], 1);
    assert_string_equal(map(v), "PP..");
    assert_int_equal(comem_pager_usage(g_p), 2 * PS);
    assert_int_equal(comem_vbar_loaded_size(v), 2 * PS);
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_COMMITS), 2);
    assert_int_equal(comem_vbar_unpin(v, 2 * MIB, 4 * MIB), COMEM_OK);
    assert_string_equal(map(v), "rr..");
    /* Faulting again commits nothing: the signatures are the same. */
    memset(sig, 0, sizeof sig);
    assert_int_equal(comem_vbar_fault(v, 0, 2 * PS, sig, 2), COMEM_VBAR_RESIDENT);
    assert_int_equal(sig[0], 1);
    assert_int_equal(sig[1], 1);
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_COMMITS), 2);
    unpin(v, 0, 2);
    /* A zero-sized range touches no page. */
    assert_int_equal(comem_vbar_fault(v, PS, 0, NULL, 0), COMEM_VBAR_RESIDENT);
    assert_string_equal(map(v), "rr..");
    /* Bad arguments. */
    assert_int_equal(comem_vbar_fault(v, 3 * PS, 2 * PS, sig, 8), COMEM_ERANGE);
    assert_int_equal(comem_vbar_fault(v, 0, 3 * PS, sig, 2), COMEM_EINVAL); /* too few signature slots */
    assert_int_equal(comem_vbar_fault(v, -1, PS, sig, 8), COMEM_EINVAL);
    assert_int_equal(comem_vbar_fault(v, 0, PS, NULL, 1), COMEM_EINVAL);
    assert_int_equal(comem_vbar_fault(NULL, 0, PS, sig, 8), COMEM_EINVAL);
    assert_int_equal(comem_vbar_fault(v, 0, PS, NULL, 0), COMEM_VBAR_RESIDENT); /* signatures are optional */
    unpin(v, 0, 1);
    assert_string_equal(map(v), "rr..");
    close_card();
}

/* ---------------------------------------------------------------- the watermark */

static void test_watermark_gate(void **s)
{
    (void)s;
    open_card("64MiB", true);
    comem_vbar *v = vbar(8, PS);
    assert_int_equal(comem_vbar_set_watermark(v, 3 * PS + 1), COMEM_OK); /* rounds up: 4 pages */
    assert_int_equal(comem_vbar_watermark(v), 4 * PS);
    int64_t polls = pager_stat(COMEM_PAGER_STAT_POLLS);
    assert_int_equal(fault(v, 5, 1), COMEM_VBAR_OFFLOADED);
    assert_int_equal(fault(v, 3, 2), COMEM_VBAR_OFFLOADED); /* ends above the watermark */
    /* Refused without allocating anything. */
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_COMMITS), 0);
    assert_int_equal(comem_pager_usage(g_p), 0);
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_OFFLOADED), 2);
    assert_true(pager_stat(COMEM_PAGER_STAT_POLLS) > polls); /* the stopgap still ran */
    assert_int_equal(fault(v, 0, 4), COMEM_VBAR_RESIDENT);
    unpin(v, 0, 4);
    assert_string_equal(map(v), "rrrr....");
    /* Lowering it evicts the unpinned pages at and above it, but not pinned ones. */
    assert_int_equal(fault(v, 3, 1), COMEM_VBAR_RESIDENT);
    assert_int_equal(comem_vbar_set_watermark(v, 2 * PS), COMEM_OK);
    assert_string_equal(map(v), "rr.P....");
    unpin(v, 3, 1); /* unpinned above the watermark: freed now */
    assert_string_equal(map(v), "rr......");
    /* Raising it lets faults through again. */
    assert_int_equal(comem_vbar_set_watermark(v, 100 * GIB), COMEM_OK);
    assert_int_equal(comem_vbar_watermark(v), 8 * PS);
    assert_int_equal(fault(v, 7, 1), COMEM_VBAR_RESIDENT);
    unpin(v, 7, 1);
    assert_string_equal(map(v), "rr.....r");
    assert_int_equal(comem_vbar_set_watermark(v, -1), COMEM_EINVAL);
    close_card();
}

/* A model larger than the card settles into a resident prefix and a streamed suffix. */
static void test_settles_into_prefix(void **s)
{
    (void)s;
    open_card("32MiB", true);
    comem_vbar *v = vbar(16, PS);
    for (int pass = 0; pass < 3; pass++) {
        int resident = 0, offloaded = 0;
        for (int64_t i = 0; i < 16; i++) {
            int rc = fault(v, i, 1);
            assert_true(rc == COMEM_VBAR_RESIDENT || rc == COMEM_VBAR_OFFLOADED);
            if (rc == COMEM_VBAR_RESIDENT) {
                resident++;
                unpin(v, i, 1);
            } else {
                offloaded++;
            }
        }
        assert_int_equal(resident, 8);
        assert_int_equal(offloaded, 8);
        assert_string_equal(map(v), "rrrrrrrr........");
        assert_int_equal(comem_vbar_watermark(v), 8 * PS);
    }
    /* No thrash: after the first pass, nothing was committed or evicted again. */
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_COMMITS), 8);
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_EVICTIONS), 0);
    close_card();
}

/* ---------------------------------------------------------------- the miss-allocation check */

static void test_miss_allocation_makes_room_for_lower_pages(void **s)
{
    (void)s;
    open_card("64MiB", true);
    comem_vbar *a = vbar(16, PS);
    load(a, 0, 16); /* the card is full */
    assert_int_equal(comem_pager_usage(g_p), 64 * MIB);
    comem_vbar *b = vbar(8, PS); /* newer: higher priority */
    /*
     * Faulting B's page 5 alone: the room made covers it and B's missing
     * pages 0..4, which have priority over it: 6 pages come off A's top.
     */
    int64_t evictions = pager_stat(COMEM_PAGER_STAT_EVICTIONS);
    assert_int_equal(fault(b, 5, 1), COMEM_VBAR_RESIDENT);
    unpin(b, 5, 1);
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_EVICTIONS) - evictions, 6);
    assert_string_equal(map(a), "rrrrrrrrrr......");
    assert_int_equal(comem_vbar_watermark(a), 10 * PS);
    assert_string_equal(map(b), ".....r..");
    /* B's lower pages now fit without another eviction. */
    load(b, 0, 5);
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_EVICTIONS) - evictions, 6);
    assert_string_equal(map(b), "rrrrrr..");
    assert_int_equal(comem_pager_usage(g_p), 64 * MIB);
    close_card();
}

/* The miss check takes the faulting VBAR's own tail, and refuses when that reaches the range. */
static void test_miss_allocation_takes_own_tail(void **s)
{
    (void)s;
    open_card("48MiB", true);
    comem_vbar *v = vbar(12, PS);
    load(v, 4, 8); /* pages 4..11, with room kept for the missing 0..3 */
    assert_string_equal(map(v), "....rrrrrrrr");
    /* With 16 MiB of headroom, page 2 needs room for itself and pages 0..1: v's own 11..9 go. */
    assert_int_equal(comem_pager_set_simple_headroom(g_p, 16 * MIB), COMEM_OK);
    assert_int_equal(fault(v, 2, 1), COMEM_VBAR_RESIDENT);
    unpin(v, 2, 1);
    assert_string_equal(map(v), "..r.rrrrr...");
    assert_int_equal(comem_vbar_watermark(v), 9 * PS);
    assert_int_equal(fault(v, 8, 2), COMEM_VBAR_OFFLOADED); /* page 9 is above the watermark now */
    /*
     * With 40 MiB: the stopgap frees 16 MiB (8..5), then page 3 needs 12 MiB
     * more for itself and pages 0..1; taking page 4 is not enough, and the
     * watermark passes page 3: refused.
     */
    assert_int_equal(comem_pager_set_simple_headroom(g_p, 40 * MIB), COMEM_OK);
    assert_int_equal(fault(v, 3, 1), COMEM_VBAR_OFFLOADED);
    assert_string_equal(map(v), "..r.........");
    assert_int_equal(comem_vbar_watermark(v), 3 * PS);
    close_card();
}

/* ---------------------------------------------------------------- priority */

static void test_priority_across_vbars(void **s)
{
    (void)s;
    open_card("64MiB", true);
    comem_vbar *a = vbar(4, PS), *b = vbar(4, PS), *c = vbar(4, PS); /* c is the top */
    load(a, 0, 4);
    load(b, 0, 4);
    load(c, 0, 4);
    int64_t freed = 0;
    assert_int_equal(comem_pager_free_memory(g_p, PS, &freed), COMEM_OK); /* the oldest loses first */
    assert_int_equal(freed, PS);
    assert_string_equal(map(a), "rrr.");
    assert_string_equal(map(b), "rrrr");
    assert_string_equal(map(c), "rrrr");
    /* Prioritized: a goes to the top and may fault its whole range again. */
    assert_int_equal(comem_vbar_prioritize(a), COMEM_OK);
    assert_int_equal(comem_vbar_watermark(a), 4 * PS);
    load(a, 3, 1);
    assert_int_equal(comem_pager_free_memory(g_p, 2 * PS, &freed), COMEM_OK); /* now b is the bottom */
    assert_int_equal(freed, 2 * PS);
    assert_string_equal(map(a), "rrrr");
    assert_string_equal(map(b), "rr..");
    assert_string_equal(map(c), "rrrr");
    /* Deprioritized: c becomes the first candidate. */
    assert_int_equal(comem_vbar_deprioritize(c), COMEM_OK);
    assert_int_equal(comem_pager_free_memory(g_p, PS + 1, &freed), COMEM_OK); /* whole pages: two */
    assert_int_equal(freed, 2 * PS);
    assert_string_equal(map(c), "rr..");
    assert_string_equal(map(b), "rr..");
    /* A fault of the newest takes from the bottom: c, then b. */
    comem_vbar *d = vbar(10, PS);
    load(d, 0, 10); /* the last two pages need room */
    assert_string_equal(map(c), "....");
    assert_string_equal(map(b), "rr..");
    assert_string_equal(map(a), "rrrr");
    assert_string_equal(map(d), "rrrrrrrrrr");
    close_card();
}

/* Within a VBAR: from the top down, past absent and pinned pages; pins are never evicted. */
static void test_within_vbar_from_the_top(void **s)
{
    (void)s;
    open_card("64MiB", true);
    comem_vbar *v = vbar(8, PS);
    load(v, 0, 3);
    load(v, 5, 1);
    assert_int_equal(fault(v, 2, 1), COMEM_VBAR_RESIDENT); /* page 2 stays pinned */
    assert_string_equal(map(v), "rrP..r..");
    int64_t freed = 0;
    assert_int_equal(comem_pager_free_memory(g_p, PS, &freed), COMEM_OK);
    assert_int_equal(freed, PS); /* pages 7 and 6 were absent: only page 5 counted */
    assert_string_equal(map(v), "rrP.....");
    assert_int_equal(comem_vbar_watermark(v), 5 * PS);
    assert_int_equal(comem_pager_free_memory(g_p, PS, &freed), COMEM_OK);
    assert_int_equal(freed, PS); /* 4, 3 absent; 2 pinned, passed; 1 freed */
    assert_string_equal(map(v), "r.P.....");
    assert_int_equal(comem_vbar_watermark(v), 1 * PS);
    assert_int_equal(comem_pager_check(g_p), COMEM_OK); /* a pinned page above the watermark is allowed */
    unpin(v, 2, 1);                                     /* and is freed when unpinned */
    assert_string_equal(map(v), "r.......");
    assert_int_equal(comem_pager_usage(g_p), PS);
    close_card();
}

/* ---------------------------------------------------------------- pins and signatures */

static void test_pins_are_refcounts(void **s)
{
    (void)s;
    open_card("64MiB", true);
    comem_vbar *v = vbar(4, PS);
    /* Two weights share page 0: w1 = [0, 3 MiB), w2 = [3 MiB, 6 MiB) on pages 0 and 1. */
    uint32_t s1[4], s2[4];
    assert_int_equal(comem_vbar_fault(v, 0, 3 * MIB, s1, 4), COMEM_VBAR_RESIDENT);
    assert_int_equal(comem_vbar_fault(v, 3 * MIB, 3 * MIB, s2, 4), COMEM_VBAR_RESIDENT);
    assert_int_equal(comem_vbar_unpin(v, 0, 3 * MIB), COMEM_OK); /* page 0 keeps w2's pin */
    assert_string_equal(map(v), "PP..");
    int64_t freed = -1;
    assert_int_equal(comem_pager_free_memory(g_p, INT64_MAX, &freed), COMEM_OK);
    assert_int_equal(freed, 0); /* nothing pinned goes */
    assert_string_equal(map(v), "PP..");
    assert_int_equal(comem_vbar_watermark(v), 0); /* but the watermark went past them */
    assert_int_equal(comem_pager_reclaimable(g_p), 0);
    assert_int_equal(comem_vbar_unpin(v, 3 * MIB, 3 * MIB), COMEM_OK);
    assert_string_equal(map(v), "....");
    assert_int_equal(comem_pager_usage(g_p), 0);
    /* Unpinning more than was pinned stays at zero, and ranges past the end are ignored. */
    assert_int_equal(comem_vbar_unpin(v, 0, 100 * PS), COMEM_OK);
    assert_int_equal(comem_vbar_unpin(v, 100 * PS, PS), COMEM_OK);
    assert_int_equal(comem_vbar_prioritize(v), COMEM_OK);
    assert_int_equal(fault(v, 0, 1), COMEM_VBAR_RESIDENT);
    assert_string_equal(map(v), "P...");
    unpin(v, 0, 1);
    assert_string_equal(map(v), "r...");
    close_card();
}

static void test_signatures_change_only_on_recommit(void **s)
{
    (void)s;
    open_card("64MiB", true);
    comem_vbar *v = vbar(4, PS);
    /* w1 = page 0, w2 = pages 0 and 1 (shares page 0), w3 = page 3. */
    uint32_t s1[4], s2[4], s3[4];
    assert_int_equal(comem_vbar_fault(v, 0, 3 * MIB, s1, 4), COMEM_VBAR_RESIDENT);
    assert_int_equal(comem_vbar_fault(v, 3 * MIB, 3 * MIB, s2, 4), COMEM_VBAR_RESIDENT);
    assert_int_equal(comem_vbar_fault(v, 3 * PS, PS, s3, 4), COMEM_VBAR_RESIDENT);
    assert_int_equal(s1[0], 1);
    assert_int_equal(s2[0], 1);
    assert_int_equal(s2[1], 1);
    assert_int_equal(s3[0], 1);
    comem_vbar_unpin(v, 0, 4 * PS);
    comem_vbar_unpin(v, 0, 4 * PS);
    /* Faults, unpins, watermark moves without an eviction: no change. */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(comem_vbar_fault(v, 3 * MIB, 3 * MIB, s2, 4), COMEM_VBAR_RESIDENT);
        assert_int_equal(s2[0], 1);
        assert_int_equal(s2[1], 1);
        comem_vbar_unpin(v, 3 * MIB, 3 * MIB);
    }
    assert_int_equal(comem_vbar_set_watermark(v, 4 * PS), COMEM_OK);
    /* Evict page 3 only: page 3's serial moves, the others do not. */
    int64_t freed = 0;
    assert_int_equal(comem_vbar_free_memory(v, PS, &freed), COMEM_OK);
    assert_int_equal(freed, PS);
    assert_string_equal(map(v), "rr..");
    assert_int_equal(comem_vbar_prioritize(v), COMEM_OK);
    assert_int_equal(comem_vbar_fault(v, 3 * PS, PS, s3, 4), COMEM_VBAR_RESIDENT);
    assert_int_equal(s3[0], 2);
    assert_int_equal(comem_vbar_fault(v, 3 * MIB, 3 * MIB, s2, 4), COMEM_VBAR_RESIDENT);
    assert_int_equal(s2[0], 1);
    assert_int_equal(s2[1], 1);
    comem_vbar_unpin(v, 0, 4 * PS);
    /* Evict everything: the shared page comes back with a new serial for both weights. */
    assert_int_equal(comem_vbar_free_memory(v, INT64_MAX, &freed), COMEM_OK);
    assert_int_equal(freed, 3 * PS);
    assert_int_equal(comem_vbar_prioritize(v), COMEM_OK);
    assert_int_equal(comem_vbar_fault(v, 0, 3 * MIB, s1, 4), COMEM_VBAR_RESIDENT);
    assert_int_equal(comem_vbar_fault(v, 3 * MIB, 3 * MIB, s2, 4), COMEM_VBAR_RESIDENT);
    assert_int_equal(s1[0], 2);
    assert_int_equal(s2[0], 2);
    assert_int_equal(s2[1], 2);
    comem_vbar_unpin(v, 0, 4 * PS);
    comem_vbar_unpin(v, 0, 4 * PS);
    close_card();
}

/* ---------------------------------------------------------------- limits and figures */

static void test_watermark_limit(void **s)
{
    (void)s;
    open_card("64MiB", true);
    comem_vbar *a = vbar(8, PS);
    load(a, 0, 8);
    assert_int_equal(comem_vbar_set_watermark_limit(a, 2 * PS + 1), COMEM_OK); /* 3 pages */
    assert_int_equal(comem_vbar_watermark_limit(a), 3 * PS);
    assert_int_equal(comem_pager_reclaimable(g_p), 5 * PS);
    int64_t freed = 0;
    assert_int_equal(comem_pager_free_memory(g_p, INT64_MAX, &freed), COMEM_OK);
    assert_int_equal(freed, 5 * PS);
    assert_string_equal(map(a), "rrr.....");
    assert_int_equal(comem_vbar_watermark(a), 3 * PS);
    assert_int_equal(comem_pager_reclaimable(g_p), 0);
    assert_int_equal(comem_vbar_free_memory(a, INT64_MAX, &freed), COMEM_OK);
    assert_int_equal(freed, 0);
    /* A fault of a newer VBAR cannot take the protected prefix either. */
    comem_vbar *b = vbar(16, PS);
    load(b, 0, 13);
    assert_int_equal(fault(b, 13, 1), COMEM_VBAR_OFFLOADED); /* only b's own tail could give */
    assert_string_equal(map(a), "rrr.....");
    /* Reset: the prefix is fair game again. */
    assert_int_equal(comem_pager_reset_watermark_limits(g_p), COMEM_OK);
    assert_int_equal(comem_vbar_watermark_limit(a), 0);
    assert_int_equal(comem_pager_reclaimable(g_p), 3 * PS + 13 * PS);
    assert_int_equal(comem_vbar_free_memory(a, INT64_MAX, &freed), COMEM_OK);
    assert_int_equal(freed, 3 * PS);
    assert_int_equal(comem_vbar_set_watermark_limit(a, -1), COMEM_EINVAL);
    close_card();
}

static void test_free_memory_and_reclaimable(void **s)
{
    (void)s;
    open_card("64MiB", true);
    comem_vbar *a = vbar(4, PS), *b = vbar(4, PS);
    load(a, 0, 4);
    load(b, 0, 2);
    assert_int_equal(fault(b, 0, 1), COMEM_VBAR_RESIDENT); /* pinned: not reclaimable */
    assert_int_equal(comem_pager_reclaimable(g_p), 5 * PS);
    assert_int_equal(comem_pager_usage(g_p), 6 * PS);
    int64_t freed = -1;
    assert_int_equal(comem_pager_free_memory(g_p, 0, &freed), COMEM_OK);
    assert_int_equal(freed, 0);
    assert_int_equal(comem_pager_free_memory(g_p, 6 * PS, &freed), COMEM_OK);
    assert_int_equal(freed, 5 * PS); /* all it could */
    assert_int_equal(comem_pager_usage(g_p), PS);
    assert_int_equal(comem_pager_reclaimable(g_p), 0);
    assert_int_equal(comem_pager_free_memory(g_p, -1, &freed), COMEM_EINVAL);
    assert_int_equal(comem_pager_free_memory(g_p, PS, NULL), COMEM_OK);
    unpin(b, 0, 1);
    assert_int_equal(comem_pager_usage(g_p), 0); /* unpinned above b's watermark (0): freed */
    /* Every unmap batch is bracketed by exactly two syncs. */
    int64_t syncs = pager_stat(COMEM_PAGER_STAT_SYNCS);
    assert_int_equal(comem_vbar_prioritize(a), COMEM_OK);
    load(a, 0, 4);
    assert_int_equal(comem_pager_free_memory(g_p, 4 * PS, &freed), COMEM_OK);
    assert_int_equal(freed, 4 * PS);
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_SYNCS) - syncs, 2);
    close_card();
}

/* ---------------------------------------------------------------- headrooms */

static int64_t g_now_ms;
static int64_t test_clock(void *user)
{
    (void)user;
    return g_now_ms;
}

static void test_simple_headroom_is_live(void **s)
{
    (void)s;
    open_card("64MiB", false);
    assert_int_equal(comem_pager_simple_headroom(g_p), 256 * MIB); /* the default */
    assert_int_equal(comem_pager_set_simple_headroom(g_p, 0), COMEM_OK);
    assert_int_equal(comem_pager_set_device_poll(g_p, 0, 0), COMEM_OK);
    comem_vbar *a = vbar(8, PS);
    load(a, 0, 8);
    /* simple = usage 32 + headroom 48 - capacity 64 = 16 MiB short: the very next fault frees it. */
    assert_int_equal(comem_pager_set_simple_headroom(g_p, 48 * MIB), COMEM_OK);
    assert_int_equal(comem_pager_simple_headroom(g_p), 48 * MIB);
    assert_int_equal(comem_pager_budget_deficit(g_p, 0), 16 * MIB);
    assert_int_equal(fault(a, 0, 1), COMEM_VBAR_RESIDENT); /* a resident page: only the stopgap runs */
    unpin(a, 0, 1);
    assert_string_equal(map(a), "rrrr....");
    assert_int_equal(comem_pager_budget_deficit(g_p, 0), 0);
    /* And back: the room is there at the next fault (after prioritize lifts the watermark). */
    assert_int_equal(comem_pager_set_simple_headroom(g_p, 0), COMEM_OK);
    assert_int_equal(comem_vbar_prioritize(a), COMEM_OK);
    load(a, 4, 4);
    assert_string_equal(map(a), "rrrrrrrr");
    /* The miss-allocation check uses it too: with 32 MiB of headroom, b's first page costs a's top one. */
    comem_vbar *b = vbar(2, PS);
    assert_int_equal(comem_pager_set_simple_headroom(g_p, 32 * MIB), COMEM_OK);
    assert_int_equal(fault(b, 0, 1), COMEM_VBAR_RESIDENT);
    unpin(b, 0, 1);
    assert_string_equal(map(a), "rrrrrrr.");
    assert_string_equal(map(b), "r.");
    assert_int_equal(comem_pager_set_simple_headroom(g_p, -1), COMEM_EINVAL);
    close_card();
}

static void test_device_term_and_cache(void **s)
{
    (void)s;
    open_card("1GiB", false);
    assert_int_equal(comem_pager_set_simple_headroom(g_p, 0), COMEM_OK);
    g_now_ms = 0;
    comem_pager_set_clock(g_p, test_clock, NULL);
    comem_vbar *a = vbar(16, 32 * MIB);
    /* The first reading: free 1 GiB, margin 256 MiB. */
    assert_int_equal(comem_pager_budget_deficit(g_p, 0), 256 * MIB - 1 * GIB);
    load(a, 0, 16);
    assert_int_equal(comem_pager_usage(g_p), 512 * MIB);
    int64_t polls = pager_stat(COMEM_PAGER_STAT_POLLS);
    assert_int_equal(polls, 1); /* every fault reused the reading */
    /* Between readings, the term moves by the pager's own usage: -768 + 512 + size. */
    assert_int_equal(comem_pager_budget_deficit(g_p, 32 * MIB), -224 * MIB);

    /* Someone else takes 400 MiB: not seen until the reading is 2 s old. */
    comem_sim *other = card_handle();
    assert_int_equal(comem_sim_alloc(other, 0, 400 * MIB), COMEM_OK);
    g_now_ms = 1999;
    assert_int_equal(fault(a, 0, 1), COMEM_VBAR_RESIDENT);
    unpin(a, 0, 1);
    assert_int_equal(comem_vbar_loaded_size(a), 512 * MIB);
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_POLLS), 1);
    /* At 2 s it reads again: free 112 MiB, 144 MiB short of the margin; 5 pages go (160 MiB). */
    g_now_ms = 2000;
    assert_int_equal(fault(a, 0, 1), COMEM_VBAR_RESIDENT);
    unpin(a, 0, 1);
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_POLLS), 2);
    assert_int_equal(comem_vbar_loaded_size(a), 352 * MIB);
    /* Extrapolated from that reading: 144 - 160 = -16 MiB; and the card agrees (free 272 >= 256). */
    assert_int_equal(comem_pager_budget_deficit(g_p, 0), -16 * MIB);
    comem_device_reading *r = malloc(sizeof *r);
    assert_int_equal(comem_sim_read_local(other, 0, r), COMEM_OK);
    assert_int_equal(r->free, 272 * MIB);
    free(r);

    /* The other allocator leaves; the pager may grow back after the next reading. */
    assert_int_equal(comem_sim_free(other, 0, 400 * MIB), COMEM_OK);
    g_now_ms = 3000;
    assert_int_equal(comem_pager_budget_deficit(g_p, 0), -16 * MIB); /* still the cached reading */
    g_now_ms = 4000;
    assert_int_equal(comem_pager_budget_deficit(g_p, 0), 256 * MIB - (1 * GIB - 352 * MIB));
    assert_int_equal(comem_vbar_prioritize(a), COMEM_OK);
    load(a, 11, 5);
    assert_int_equal(comem_vbar_loaded_size(a), 512 * MIB);
    comem_sim_close(other);

    /* A zero cache reads at every call; a changed margin is read afresh. */
    assert_int_equal(comem_pager_set_device_poll(g_p, 512 * MIB, 0), COMEM_OK);
    polls = pager_stat(COMEM_PAGER_STAT_POLLS);
    assert_int_equal(comem_pager_budget_deficit(g_p, 0), 0);
    assert_int_equal(comem_pager_budget_deficit(g_p, MIB), MIB);
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_POLLS) - polls, 2);
    assert_int_equal(comem_pager_set_device_poll(g_p, -1, 0), COMEM_EINVAL);
    assert_int_equal(comem_pager_set_device_poll(g_p, 0, -1), COMEM_EINVAL);
    close_card();
}

/*
 * WDDM: this process's own free figure is its budget and does not move when another process
 * allocates; the device-wide term (aimdo's nvml_pressure) sees the other process.
 */
static void test_device_wide_term(void **s)
{
    (void)s;
    open_card("1GiB:wddm", false);
    assert_int_equal(comem_pager_set_simple_headroom(g_p, 0), COMEM_OK);
    assert_int_equal(comem_pager_set_device_poll(g_p, 256 * MIB, 0), COMEM_OK);
    int ready[2], done[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(done), 0);
    pid_t child = fork();
    if (child == 0) { /* another process takes 600 MiB of the card */
        comem_sim_spec spec;
        comem_sim *sim = NULL;
        char c = 0;
        if (comem_sim_spec_parse(g_spec, &spec, NULL, 0) || comem_sim_open(&spec, &sim) ||
            comem_sim_alloc(sim, 0, 600 * MIB) || write(ready[1], &c, 1) != 1 || read(done[0], &c, 1) != 1)
            _exit(3);
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    assert_int_equal(comem_pager_budget_deficit(g_p, 0), 256 * MIB - 1 * GIB); /* blind: its own budget */
    assert_int_equal(comem_pager_set_device_wide(g_p, 1), COMEM_OK);
    assert_int_equal(comem_pager_budget_deficit(g_p, 0), 256 * MIB - (1 * GIB - 600 * MIB));
    assert_int_equal(comem_pager_set_device_wide(g_p, 0), COMEM_OK);
    assert_int_equal(comem_pager_budget_deficit(g_p, 0), 256 * MIB - 1 * GIB);
    assert_int_equal(comem_pager_set_device_wide(NULL, 1), COMEM_EINVAL);
    assert_int_equal(write(done[1], &c, 1), 1);
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    for (int i = 0; i < 2; i++) {
        close(ready[i]);
        close(done[i]);
    }
    close_card();
}

static void test_extra_headroom_after_the_max(void **s)
{
    (void)s;
    open_card("1GiB", false);
    g_now_ms = 0;
    comem_pager_set_clock(g_p, test_clock, NULL);
    /* Device term wins: 256 - 1024 = -768 MiB against simple 0 + 256 - 1024 = -768: equal. Make them differ. */
    assert_int_equal(comem_pager_set_simple_headroom(g_p, 128 * MIB), COMEM_OK);
    int64_t simple = 128 * MIB - 1 * GIB, delta = 256 * MIB - 1 * GIB;
    assert_int_equal(comem_pager_budget_deficit(g_p, 0), comem_max(simple, delta));
    assert_int_equal(comem_pager_set_extra_headroom(g_p, 100 * MIB), COMEM_OK);
    assert_int_equal(comem_pager_budget_deficit(g_p, 0), delta + 100 * MIB);
    /* Simple term wins: the extra is added to it, not to the device term. */
    assert_int_equal(comem_pager_set_simple_headroom(g_p, 900 * MIB), COMEM_OK);
    simple = 900 * MIB - 1 * GIB;
    assert_int_equal(comem_pager_budget_deficit(g_p, 8 * MIB), simple + 8 * MIB + 100 * MIB);
    /* The extra alone makes a deficit where both terms have room: the next fault evicts for it. */
    assert_int_equal(comem_pager_set_simple_headroom(g_p, 0), COMEM_OK);
    assert_int_equal(comem_pager_set_extra_headroom(g_p, 0), COMEM_OK);
    comem_vbar *a = vbar(8, 32 * MIB);
    load(a, 0, 8);
    assert_int_equal(comem_pager_set_extra_headroom(g_p, 768 * MIB - 256 * MIB + 64 * MIB), COMEM_OK);
    /* deficit(0) = max(256 - 1024, -768 + 256) + 576 = -512 + 576 = 64 MiB: two pages go. */
    assert_int_equal(comem_pager_budget_deficit(g_p, 0), 64 * MIB);
    assert_int_equal(fault(a, 0, 1), COMEM_VBAR_RESIDENT);
    unpin(a, 0, 1);
    assert_int_equal(comem_vbar_loaded_size(a), 6 * 32 * MIB);
    assert_int_equal(comem_pager_set_extra_headroom(g_p, -1), COMEM_EINVAL);
    close_card();
}

/* ---------------------------------------------------------------- failures */

static void test_transient_commit_failures_are_retried(void **s)
{
    (void)s;
    open_card("64MiB", true);
    comem_vbar *a = vbar(4, PS), *b = vbar(4, PS);
    load(a, 0, 4);
    /* F13: an eviction, then a fault straight away whose mapping says "not ready" three times. */
    int64_t freed = 0;
    assert_int_equal(comem_pager_free_memory(g_p, 2 * PS, &freed), COMEM_OK);
    assert_int_equal(freed, 2 * PS);
    comem_pager_inject_commit_failures(g_p, 0, 3, 0);
    assert_int_equal(fault(b, 0, 2), COMEM_VBAR_RESIDENT);
    unpin(b, 0, 2);
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_TRANSIENT_RETRIES), 3);
    assert_string_equal(map(b), "rr..");
    /* Bounded: a device that never gets ready is an error, not a hang. */
    comem_pager_inject_commit_failures(g_p, 0, 100, 0);
    assert_int_equal(fault(b, 2, 1), COMEM_EDRIVER);
    assert_string_equal(map(b), "rr..");
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_TRANSIENT_RETRIES), 3 + 8);
    comem_pager_inject_commit_failures(g_p, 0, 0, 0);
    assert_int_equal(fault(b, 2, 1), COMEM_VBAR_RESIDENT);
    unpin(b, 2, 1);
    close_card();
}

static void test_oom_is_recovered_once(void **s)
{
    (void)s;
    open_card("64MiB", true);
    comem_vbar *a = vbar(4, PS), *b = vbar(4, PS);
    load(a, 0, 4);
    /* One OOM: evict a page (from a, the bottom), commit again. */
    comem_pager_inject_commit_failures(g_p, 0, 0, 1);
    assert_int_equal(fault(b, 0, 1), COMEM_VBAR_RESIDENT);
    unpin(b, 0, 1);
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_PRESSURE_RETRIES), 1);
    assert_string_equal(map(a), "rrr.");
    /* Page 1 commits, page 2 runs out twice: an error; page 1 stays resident, unpinned. */
    comem_pager_inject_commit_failures(g_p, 1, 0, 2);
    uint32_t sig[4] = {0};
    assert_int_equal(comem_vbar_fault(b, 1 * PS, 2 * PS, sig, 4), COMEM_ENOSPC);
    assert_int_equal(sig[0], 1);
    assert_string_equal(map(b), "rr..");
    assert_string_equal(map(a), "rr..");
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_PRESSURE_RETRIES), 2);
    close_card();
}

static void test_persistent_deficit_is_an_error(void **s)
{
    (void)s;
    open_card("64MiB", true);
    comem_vbar *v = vbar(4, PS);
    load(v, 0, 2);
    assert_int_equal(comem_vbar_set_watermark_limit(v, 4 * PS), COMEM_OK); /* nothing of it may go */
    assert_int_equal(comem_pager_set_extra_headroom(g_p, 1 * GIB), COMEM_OK);
    uint32_t sig[4] = {0};
    assert_int_equal(comem_vbar_fault(v, 0, 3 * PS, sig, 4), COMEM_ENOSPC);
    assert_int_equal(sig[0], 1); /* written for the pages seen */
    assert_int_equal(sig[1], 1);
    assert_string_equal(map(v), "rr..");
    close_card();
}

/* ---------------------------------------------------------------- data */

static void test_data_integrity(void **s)
{
    (void)s;
    open_card("64MiB", true);
    const int64_t ps = 2 * MIB, n = 4;
    comem_vbar *v = vbar(n, ps);
    uint8_t *pat = malloc((size_t)(n * ps)), *back = malloc((size_t)(n * ps));
    for (int64_t i = 0; i < n * ps; i++)
        pat[i] = (uint8_t)(i * 31 + 7);
    uint32_t s1[8], s2[8];
    assert_int_equal(comem_vbar_write(v, 0, pat, n * ps), COMEM_ENOENT); /* not resident yet */
    assert_int_equal(comem_vbar_fault(v, 0, n * ps, s1, 8), COMEM_VBAR_RESIDENT);
    assert_int_equal(comem_vbar_write(v, 0, pat, n * ps), COMEM_OK);
    assert_int_equal(comem_vbar_read(v, 0, back, n * ps), COMEM_OK);
    assert_memory_equal(pat, back, (size_t)(n * ps));
    /* Through the base address too (the sim backend is host memory). */
    assert_memory_equal((const void *)(uintptr_t)comem_vbar_base(v), pat, (size_t)(n * ps));
    /* Evict the upper half, re-fault: new signatures there, fresh (zeroed) memory; the lower half kept its bytes. */
    assert_int_equal(comem_vbar_unpin(v, 0, n * ps), COMEM_OK);
    int64_t freed = 0;
    assert_int_equal(comem_vbar_free_memory(v, 2 * ps, &freed), COMEM_OK);
    assert_int_equal(freed, 2 * ps);
    assert_int_equal(comem_vbar_read(v, 0, back, n * ps), COMEM_ENOENT);
    assert_int_equal(comem_vbar_read(v, 0, back, 2 * ps), COMEM_OK);
    assert_memory_equal(pat, back, (size_t)(2 * ps));
    assert_int_equal(comem_vbar_prioritize(v), COMEM_OK);
    assert_int_equal(comem_vbar_fault(v, 0, n * ps, s2, 8), COMEM_VBAR_RESIDENT);
    assert_int_equal(s2[0], s1[0]);
    assert_int_equal(s2[1], s1[1]);
    assert_true(s2[2] != s1[2]);
    assert_true(s2[3] != s1[3]);
    assert_int_equal(comem_vbar_read(v, 2 * ps, back, 2 * ps), COMEM_OK);
    for (int64_t i = 0; i < 2 * ps; i++)
        if (back[i] != 0)
            fail_msg("byte %lld of a fresh page is %u", (long long)i, back[i]);
    /* The caller copies again where the signature changed, and reads its bytes back. */
    for (int64_t pg = 0; pg < n; pg++)
        if (s2[pg] != s1[pg])
            assert_int_equal(comem_vbar_write(v, pg * ps, pat + pg * ps, ps), COMEM_OK);
    assert_int_equal(comem_vbar_read(v, 0, back, n * ps), COMEM_OK);
    assert_memory_equal(pat, back, (size_t)(n * ps));
    /* Partial and unaligned copies. */
    assert_int_equal(comem_vbar_read(v, ps - 3, back, 7), COMEM_OK);
    assert_memory_equal(pat + ps - 3, back, 7);
    assert_int_equal(comem_vbar_read(v, n * ps - 1, back, 2), COMEM_ERANGE);
    assert_int_equal(comem_vbar_read(v, -1, back, 2), COMEM_EINVAL);
    assert_int_equal(comem_vbar_write(v, 0, NULL, 2), COMEM_EINVAL);
    assert_int_equal(comem_vbar_write(v, 0, pat, 0), COMEM_OK);
    assert_int_equal(comem_vbar_unpin(v, 0, n * ps), COMEM_OK);
    free(pat);
    free(back);
    close_card();
}

/* ---------------------------------------------------------------- the kept pool */

/* This process's allocations on the current card, as the card itself counts them. */
static int64_t card_charge(comem_sim *card)
{
    int64_t ctx = -1, alloc = -1;
    assert_int_equal(comem_sim_usage(card, 0, (int32_t)getpid(), &ctx, &alloc), COMEM_OK);
    return alloc;
}

static void test_kept_pool_serves_the_next_commits(void **s)
{
    (void)s;
    open_card("64MiB", true);
    comem_sim *card = card_handle();
    assert_int_equal(comem_pager_keep(g_p), 0); /* off by default: aimdo's behaviour */
    assert_int_equal(comem_pager_set_keep(g_p, -1), COMEM_EINVAL);
    assert_int_equal(comem_pager_set_keep(g_p, 3 * PS), COMEM_OK);
    comem_vbar *v = vbar(4, PS);
    load(v, 0, 4);
    assert_int_equal(card_charge(card), 4 * PS);
    /* Four pages freed for the pager's own use: three kept (the bound), one released. */
    int64_t freed = 0;
    assert_int_equal(comem_pager_free_memory(g_p, 4 * PS, &freed), COMEM_OK);
    assert_int_equal(freed, 4 * PS);
    assert_string_equal(map(v), "....");
    assert_int_equal(comem_pager_usage(g_p), 0);
    assert_int_equal(comem_pager_kept(g_p), 3 * PS);
    assert_int_equal(card_charge(card), 3 * PS); /* kept memory is still this process's on the card */
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_KEPT), 3);
    assert_int_equal(comem_pager_check(g_p), COMEM_OK);
    /* Faulted back: three pages map kept memory, the fourth is created. */
    int64_t commits = pager_stat(COMEM_PAGER_STAT_COMMITS);
    assert_int_equal(comem_vbar_prioritize(v), COMEM_OK);
    load(v, 0, 4);
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_COMMITS) - commits, 4);
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_REUSED), 3);
    assert_int_equal(comem_pager_kept(g_p), 0);
    assert_int_equal(card_charge(card), 4 * PS);
    assert_int_equal(comem_pager_check(g_p), COMEM_OK);
    /* Lowering the bound releases the excess at once. */
    assert_int_equal(comem_pager_free_memory(g_p, 2 * PS, &freed), COMEM_OK);
    assert_int_equal(comem_pager_kept(g_p), 2 * PS);
    assert_int_equal(comem_pager_set_keep(g_p, PS), COMEM_OK);
    assert_int_equal(comem_pager_kept(g_p), PS);
    assert_int_equal(card_charge(card), 3 * PS);
    assert_int_equal(comem_pager_check(g_p), COMEM_OK);
    comem_pager_close(g_p); /* close gives the pool back too */
    g_p = NULL;
    assert_int_equal(card_charge(card), 0);
    comem_sim_close(card);
}

static void test_kept_memory_comes_back_clean_of_the_budget(void **s)
{
    (void)s;
    /* A 32 MiB card: 8 pages. The pool counts against the budget as resident pages do. */
    open_card("32MiB", true);
    comem_sim *card = card_handle();
    assert_int_equal(comem_pager_set_keep(g_p, 8 * PS), COMEM_OK);
    comem_vbar *a = vbar(6, PS);
    load(a, 0, 6);
    int64_t freed = 0;
    assert_int_equal(comem_pager_free_memory(g_p, 4 * PS, &freed), COMEM_OK);
    assert_int_equal(comem_pager_kept(g_p), 4 * PS);
    assert_int_equal(comem_pager_budget_deficit(g_p, 3 * PS), PS); /* 2 resident + 4 kept + 3 > 8 */
    /* A second model's fault-in takes the kept pages first, then creates, never past the card. */
    comem_vbar *b = vbar(6, PS);
    load(b, 0, 6);
    assert_string_equal(map(b), "rrrrrr");
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_REUSED), 4);
    assert_true(comem_pager_usage(g_p) + comem_pager_kept(g_p) <= 8 * PS);
    assert_int_equal(card_charge(card), comem_pager_usage(g_p) + comem_pager_kept(g_p));
    assert_int_equal(comem_pager_check(g_p), COMEM_OK);
    /* Another process's ask: the pool goes first (nothing loaded is lost for it), then pages. */
    assert_int_equal(comem_pager_free_memory(g_p, 2 * PS, &freed), COMEM_OK);
    assert_int_equal(comem_pager_kept(g_p), 2 * PS);
    int64_t loaded = comem_pager_usage(g_p);
    assert_int_equal(comem_pager_answer_release(g_p, COMEM_RELEASE_BYTES, PS), PS);
    assert_int_equal(comem_pager_kept(g_p), PS);
    assert_int_equal(comem_pager_usage(g_p), loaded);
    assert_int_equal(comem_pager_answer_release(g_p, COMEM_RELEASE_BYTES, 2 * PS), 2 * PS);
    assert_int_equal(comem_pager_usage(g_p), loaded - PS);
    assert_int_equal(comem_pager_kept(g_p), 0); /* what an ask frees is given back, never kept */
    assert_int_equal(card_charge(card), loaded - PS);
    /* An idle release empties everything and keeps nothing. */
    assert_true(comem_pager_answer_release(g_p, COMEM_RELEASE_IDLE, 0) > 0);
    assert_int_equal(comem_pager_kept(g_p), 0);
    assert_int_equal(card_charge(card), comem_pager_usage(g_p));
    comem_sim_close(card);
    close_card();
}

static void test_kept_pool_makes_room_at_a_deficit(void **s)
{
    (void)s;
    open_card("32MiB", true); /* 8 pages */
    comem_sim *card = card_handle();
    assert_int_equal(comem_pager_set_keep(g_p, 8 * PS), COMEM_OK);
    comem_vbar *v = vbar(8, PS);
    load(v, 0, 8);
    int64_t freed = 0;
    assert_int_equal(comem_pager_free_memory(g_p, 8 * PS, &freed), COMEM_OK);
    assert_int_equal(comem_pager_kept(g_p), 8 * PS); /* the whole card kept */
    /* Two pages more of headroom: the next fault's deficit is met from the pool, released, not from
       loaded pages, and the rest of the pool serves the commits. */
    assert_int_equal(comem_pager_set_extra_headroom(g_p, 2 * PS), COMEM_OK);
    assert_int_equal(comem_vbar_prioritize(v), COMEM_OK);
    assert_int_equal(fault(v, 0, 1), COMEM_VBAR_RESIDENT);
    unpin(v, 0, 1);
    assert_int_equal(comem_pager_kept(g_p), 5 * PS);
    assert_int_equal(card_charge(card), 6 * PS);
    load(v, 1, 5);
    assert_string_equal(map(v), "rrrrrr..");
    assert_int_equal(pager_stat(COMEM_PAGER_STAT_REUSED), 6);
    assert_int_equal(comem_pager_kept(g_p), 0);
    assert_int_equal(card_charge(card), 6 * PS);
    comem_sim_close(card);
    close_card();
}

/* ---------------------------------------------------------------- lifetime */

static void test_destroy_and_close(void **s)
{
    (void)s;
    open_card("64MiB", true);
    comem_sim *card = card_handle();
    comem_vbar *a = vbar(4, PS), *b = vbar(4, PS);
    load(a, 0, 4);
    assert_int_equal(fault(b, 0, 2), COMEM_VBAR_RESIDENT); /* pinned: destroy ignores pins */
    int64_t ctx = -1, alloc = -1;
    assert_int_equal(comem_sim_usage(card, 0, (int32_t)getpid(), &ctx, &alloc), COMEM_OK);
    assert_int_equal(alloc, 6 * PS);
    comem_vbar_destroy(b);
    assert_int_equal(comem_pager_usage(g_p), 4 * PS);
    assert_int_equal(comem_pager_check(g_p), COMEM_OK);
    comem_pager_close(g_p); /* a is still there: close destroys it */
    g_p = NULL;
    assert_int_equal(comem_sim_usage(card, 0, (int32_t)getpid(), &ctx, &alloc), COMEM_OK);
    assert_int_equal(alloc, 0);
    comem_sim_close(card);
    comem_pager_close(NULL);
    comem_vbar_destroy(NULL);
    assert_int_equal(comem_pager_usage(NULL), 0);
    assert_int_equal(comem_pager_stat(NULL, 0), -1);
    assert_int_equal(comem_vbar_watermark(NULL), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create),
        cmocka_unit_test(test_fault_pins_and_signatures),
        cmocka_unit_test(test_watermark_gate),
        cmocka_unit_test(test_settles_into_prefix),
        cmocka_unit_test(test_miss_allocation_makes_room_for_lower_pages),
        cmocka_unit_test(test_miss_allocation_takes_own_tail),
        cmocka_unit_test(test_priority_across_vbars),
        cmocka_unit_test(test_within_vbar_from_the_top),
        cmocka_unit_test(test_pins_are_refcounts),
        cmocka_unit_test(test_signatures_change_only_on_recommit),
        cmocka_unit_test(test_watermark_limit),
        cmocka_unit_test(test_free_memory_and_reclaimable),
        cmocka_unit_test(test_simple_headroom_is_live),
        cmocka_unit_test(test_device_term_and_cache),
        cmocka_unit_test(test_device_wide_term),
        cmocka_unit_test(test_extra_headroom_after_the_max),
        cmocka_unit_test(test_transient_commit_failures_are_retried),
        cmocka_unit_test(test_oom_is_recovered_once),
        cmocka_unit_test(test_persistent_deficit_is_an_error),
        cmocka_unit_test(test_data_integrity),
        cmocka_unit_test(test_kept_pool_serves_the_next_commits),
        cmocka_unit_test(test_kept_memory_comes_back_clean_of_the_budget),
        cmocka_unit_test(test_kept_pool_makes_room_at_a_deficit),
        cmocka_unit_test(test_destroy_and_close),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
