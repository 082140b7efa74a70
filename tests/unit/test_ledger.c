/*
 * tests/unit/test_ledger.c - the ledger's rules and invariants.
 *
 * Census sequence rules follow comfy-env's apply_residency vectors
 * (comfy-env-code.md 5.3); every test runs with checking on and asserts that
 * no invariant broke, and one test corrupts the ledger to prove the check fires.
 */
#include "unit/cmocka_all.h"

#include <string.h>

#include "arith/evict.h"
#include "base/bytes.h"
#include "comem/common.h"
#include "ledger/ledger.h"
#include "wire/wire.h" /* the roles, capabilities and holder kinds the coordinator passes through */

#define GIB COMEM_GIB

static comem_ledger g_l;

static int setup(void **s)
{
    (void)s;
    ledger_device d[2] = {{.index = 0, .capacity = 24 * GIB}, {.index = 1, .capacity = 8 * GIB}};
    assert_int_equal(comem_ledger_init(&g_l, d, 2, 16 * GIB), 0);
    comem_ledger_set_checking(&g_l, true);
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    assert_int_equal(g_l.violations, 0);
    assert_true(g_l.checks > 0);
    comem_ledger_fini(&g_l);
    return 0;
}

static uint64_t session(const char *name)
{
    uint64_t id;
    assert_int_equal(comem_ledger_session_add(&g_l, 100, 0, COMEM_ROLE_WORKER, 0, COMEM_CAP_RELEASE, name, 0, &id), 0);
    return id;
}

static uint64_t holder(uint64_t s, int device)
{
    uint64_t id;
    assert_int_equal(comem_ledger_holder_add(&g_l, s, device, COMEM_HOLDER_MODELS, COMEM_CAP_RELEASE, "models", 0, &id),
                     0);
    return id;
}

static uint64_t entry(uint64_t s, uint64_t h, int64_t size, int64_t resident)
{
    uint64_t id;
    assert_int_equal(comem_ledger_entry_add(&g_l, s, h, "m", size, resident, false, 0, &id), 0);
    return id;
}

static void census1(uint64_t s, uint64_t h, uint64_t e, uint64_t seq, int64_t resident)
{
    ledger_residency it = {e, seq, resident, 0};
    assert_int_equal(comem_ledger_census(&g_l, s, h, seq, -1, -1, &it, 1, 0, NULL), 0);
}

static void test_census_sequence_rules(void **st)
{
    (void)st;
    uint64_t s = session("w"), h = holder(s, 0);
    uint64_t e = entry(s, h, 8 * GIB, 0);
    ledger_entry *x = comem_ledger_entry(&g_l, e);
    assert_true(x->peak == 8 * GIB); /* registration primes the peak to the size */
    census1(s, h, e, 1, 2 * GIB);
    assert_true(x->resident == 2 * GIB && x->peak == 2 * GIB);
    census1(s, h, e, 5, 0);
    census1(s, h, e, 4, 8 * GIB); /* strictly older: dropped */
    assert_true(x->resident == 0);
    census1(s, h, e, 5, 6 * GIB); /* equal: applies */
    assert_true(x->resident == 6 * GIB);
    census1(s, h, e, 5, 1 * GIB);
    assert_true(x->resident == 1 * GIB && x->peak == 1 * GIB);
    census1(s, h, e, 6, 9 * GIB); /* above size: clamped */
    assert_true(x->resident == 8 * GIB);
    /* an empty census and an unknown id change nothing */
    assert_int_equal(comem_ledger_census(&g_l, s, h, 7, -1, -1, NULL, 0, 0, NULL), 0);
    ledger_residency unknown = {0x12345, 9, 1, 0};
    assert_int_equal(comem_ledger_census(&g_l, s, h, 8, -1, -1, &unknown, 1, 0, NULL), 0);
    assert_true(x->resident == 8 * GIB);
}

static void test_census_pins_equal_seq_dropped(void **st)
{
    (void)st;
    uint64_t s = session("w"), h = holder(s, 0);
    assert_int_equal(comem_ledger_census(&g_l, s, h, 10, 5 * GIB, -1, NULL, 0, 0, NULL), 0);
    assert_int_equal(comem_ledger_census(&g_l, s, h, 9, 99 * GIB, -1, NULL, 0, 0, NULL), 0);
    assert_int_equal(comem_ledger_census(&g_l, s, h, 10, 1, -1, NULL, 0, 0, NULL), 0);
    assert_true(comem_ledger_holder(&g_l, h)->pinned == 5 * GIB);
    assert_int_equal(comem_ledger_census(&g_l, s, h, 11, -1, 700, NULL, 0, 0, NULL), 0);
    assert_true(comem_ledger_holder(&g_l, h)->overhead == 700);
    assert_true(comem_ledger_holder(&g_l, h)->pinned == 5 * GIB); /* not listed: kept */
}

static void test_census_refused_above_capacity(void **st)
{
    (void)st;
    uint64_t s = session("w"), h = holder(s, 1); /* 8 GiB device */
    uint64_t a = entry(s, h, 6 * GIB, 6 * GIB), b = entry(s, h, 6 * GIB, 0);
    ledger_residency it[2] = {{a, 1, 6 * GIB, 0}, {b, 1, 3 * GIB, 0}};
    assert_int_equal(comem_ledger_census(&g_l, s, h, 1, -1, -1, it, 2, 0, NULL), COMEM_ERANGE);
    assert_true(comem_ledger_entry(&g_l, b)->resident == 0); /* nothing applied */
    uint64_t id;
    assert_int_equal(comem_ledger_entry_add(&g_l, s, h, "big", 4 * GIB, 4 * GIB, false, 0, &id), COMEM_ERANGE);
}

/* A census is judged as a whole: the same entry listed many times is refused, not applied last-wins. */
static void test_census_duplicates_refused(void **st)
{
    (void)st;
    uint64_t s = session("w"), h = holder(s, 0); /* 24 GiB device */
    uint64_t a = entry(s, h, 20 * GIB, 0), b = entry(s, h, 20 * GIB, 0);
    static ledger_residency it[COMEM_LEDGER_MAX_ITEMS];
    for (size_t i = 0; i < COMEM_LEDGER_MAX_ITEMS; i++)
        it[i] = (ledger_residency){i % 2 ? a : b, 1, 20 * GIB, 0};
    assert_int_equal(comem_ledger_census(&g_l, s, h, 1, -1, -1, it, COMEM_LEDGER_MAX_ITEMS, 0, NULL), COMEM_EINVAL);
    assert_true(comem_ledger_entry(&g_l, a)->resident == 0 && comem_ledger_entry(&g_l, b)->resident == 0);
    /* Each item alone fits (20 GiB on a 24 GiB card), both together do not: refused as a whole. */
    ledger_residency two[2] = {{a, 1, 20 * GIB, 0}, {b, 1, 20 * GIB, 0}};
    assert_int_equal(comem_ledger_census(&g_l, s, h, 1, -1, -1, two, 2, 0, NULL), COMEM_ERANGE);
    assert_true(comem_ledger_attributed(&g_l, 0) == 0);
    ledger_residency one = {a, 1, 20 * GIB, 0};
    assert_int_equal(comem_ledger_census(&g_l, s, h, 1, -1, -1, &one, 1, 0, NULL), 0);
    assert_true(comem_ledger_attributed(&g_l, 0) == 20 * GIB);
    assert_int_equal(comem_ledger_census(&g_l, s, h, 1, -1, -1, it, COMEM_LEDGER_MAX_ITEMS + 1, 0, NULL), COMEM_EINVAL);
}

/* An entry's size is bounded by where its bytes could live: without a bound given, the card itself. */
static void test_entry_size_bounded(void **st)
{
    (void)st;
    uint64_t s = session("w"), h = holder(s, 1); /* 8 GiB device, no entry_max given */
    uint64_t id;
    assert_int_equal(comem_ledger_entry_add(&g_l, s, h, "huge", COMEM_TIB, 0, false, 0, &id), COMEM_ERANGE);
    assert_int_equal(comem_ledger_entry_add(&g_l, s, h, "fits", 8 * GIB, 0, false, 0, &id), 0);
    g_l.devices[1].entry_max = 64 * GIB; /* the coordinator allows the card plus host RAM and swap */
    assert_int_equal(comem_ledger_entry_add(&g_l, s, h, "paged", 40 * GIB, 0, false, 0, &id), 0);
    assert_int_equal(comem_ledger_entry_add(&g_l, s, h, "huge", COMEM_TIB, 0, false, 0, &id), COMEM_ERANGE);
}

/* What one process may register is bounded over all its sessions; the bound is refused clearly and freed with them. */
static void test_process_bounds(void **st)
{
    (void)st;
    uint64_t s = session("w"), s2 = session("w"), h = holder(s, 0), id; /* both sessions: pid 100 */
    for (int i = 1; i < COMEM_LEDGER_PROCESS_HOLDERS - 1; i++)
        holder(s, 0);
    uint64_t h2 = holder(s2, 0);
    assert_int_equal(comem_ledger_holder_add(&g_l, s2, 0, COMEM_HOLDER_MODELS, 0, "one-too-many", 0, &id), COMEM_ERANGE);
    char why[128];
    assert_true(comem_ledger_bound_why(&g_l, s2, LEDGER_HOLDERS, why, sizeof why) > 0);
    assert_string_equal(why, "too many holders: this process holds 256 over its 2 sessions (at most 256 a process)");
    comem_ledger_set_checking(&g_l, false); /* 4096 adds: check once at the end */
    for (int i = 0; i < COMEM_LEDGER_PROCESS_ENTRIES - 1; i++)
        assert_int_equal(comem_ledger_entry_add(&g_l, s, h, "m", 1, 0, false, 0, &id), 0);
    assert_int_equal(comem_ledger_entry_add(&g_l, s2, h2, "m", 1, 0, false, 0, &id), 0);
    assert_int_equal(comem_ledger_entry_add(&g_l, s2, h2, "m", 1, 0, false, 0, &id), COMEM_ERANGE);
    assert_int_equal(comem_ledger_entry_add(&g_l, s, h, "m", 1, 0, false, 0, &id), COMEM_ERANGE);
    for (int i = 0; i < COMEM_LEDGER_PROCESS_GRANTS; i++)
        assert_int_equal(comem_ledger_grant_add(&g_l, s, h, 0, 1, INT64_MAX, &id), 0);
    assert_int_equal(comem_ledger_grant_add(&g_l, s2, h2, 0, 1, INT64_MAX, &id), COMEM_ERANGE);
    comem_ledger_set_checking(&g_l, true);
    char chk[256];
    assert_int_equal(comem_ledger_check(&g_l, chk, sizeof chk), 0);
    uint64_t other; /* another process is not affected */
    assert_int_equal(comem_ledger_session_add(&g_l, 200, 0, COMEM_ROLE_WORKER, 0, 0, "other", 0, &other), 0);
    uint64_t oh = holder(other, 0);
    assert_int_equal(comem_ledger_entry_add(&g_l, other, oh, "m", 1, 0, false, 0, &id), 0);
    assert_int_equal(comem_ledger_bound_why(&g_l, other, LEDGER_HOLDERS, why, sizeof why), 0);
    assert_int_equal(comem_ledger_session_end(&g_l, s, NULL), 0); /* what s held is the process's again */
    assert_true(g_l.entries.used == 2 && g_l.grants.used == 0 && g_l.holders.used == 2);
    assert_int_equal(comem_ledger_entry_add(&g_l, s2, h2, "m", 1, 0, false, 0, &id), 0);
    assert_int_equal(comem_ledger_holder_add(&g_l, s2, 0, COMEM_HOLDER_MODELS, 0, "again", 0, &id), 0);
}

static void test_ownership(void **st)
{
    (void)st;
    uint64_t a = session("a"), b = session("b");
    uint64_t ha = holder(a, 0);
    uint64_t ea = entry(a, ha, GIB, GIB);
    uint64_t id;
    assert_int_equal(comem_ledger_entry_add(&g_l, b, ha, "x", 1, 0, false, 0, &id), COMEM_ENOENT);
    assert_int_equal(comem_ledger_entry_remove(&g_l, b, ea), COMEM_ENOENT);
    assert_int_equal(comem_ledger_holder_remove(&g_l, b, ha), COMEM_ENOENT);
    ledger_residency it = {ea, 1, 0, 0};
    assert_int_equal(comem_ledger_census(&g_l, b, ha, 1, -1, -1, &it, 1, 0, NULL), COMEM_ENOENT);
    assert_int_equal(comem_ledger_holder_add(&g_l, a, 7, COMEM_HOLDER_MODELS, 0, "x", 0, &id), COMEM_ENODEV);
    assert_int_equal(comem_ledger_holder_add(&g_l, a, 0, 9, 0, "x", 0, &id), COMEM_EINVAL);
    /* removing a holder removes its entries; the stale id never resolves again */
    assert_int_equal(comem_ledger_holder_remove(&g_l, a, ha), 0);
    assert_null(comem_ledger_entry(&g_l, ea));
    assert_null(comem_ledger_holder(&g_l, ha));
    uint64_t hb = holder(b, 0);
    assert_null(comem_ledger_holder(&g_l, ha));
    assert_non_null(comem_ledger_holder(&g_l, hb));
}

static void test_session_end_releases_everything(void **st)
{
    (void)st;
    uint64_t s = session("sam3"), other = session("host");
    uint64_t h = holder(s, 0), ho = holder(other, 0);
    entry(s, h, 6 * GIB, 6 * GIB);
    entry(s, h, 2 * GIB, 1 * GIB);
    entry(other, ho, 3 * GIB, 3 * GIB);
    uint64_t g;
    assert_int_equal(comem_ledger_grant_add(&g_l, s, h, 0, 4 * GIB, 1000, &g), 0);
    int64_t sf;
    assert_int_equal(comem_ledger_pin_acquire(&g_l, s, 2 * GIB, &sf), 0);
    assert_int_equal(comem_ledger_set_floor(&g_l, s, 0, 300 * COMEM_MIB), 0);
    assert_true(comem_ledger_attributed(&g_l, 0) == 14 * GIB + 300 * COMEM_MIB);
    ledger_release_summary sum;
    assert_int_equal(comem_ledger_session_end(&g_l, s, &sum), 0);
    assert_int_equal(sum.grants, 1);
    assert_int_equal(sum.entries, 2);
    assert_int_equal(sum.holders, 1);
    assert_true(sum.grant_bytes == 4 * GIB && sum.resident_bytes == 7 * GIB && sum.pinned_bytes == 2 * GIB);
    assert_true(comem_ledger_attributed(&g_l, 0) == 3 * GIB); /* only the other session's */
    assert_true(g_l.total_pinned == 0);
    assert_null(comem_ledger_grant(&g_l, g));
    assert_int_equal(comem_ledger_session_end(&g_l, s, NULL), COMEM_ENOENT);
}

static void test_grants(void **st)
{
    (void)st;
    uint64_t s = session("w"), h = holder(s, 1);
    uint64_t e = entry(s, h, 6 * GIB, 0);
    uint64_t g1, g2, g3;
    assert_int_equal(comem_ledger_grant_add(&g_l, s, h, 1, 5 * GIB, 100, &g1), 0);
    /* two grants never share bytes: 3 GiB more does not fit on the 8 GiB card */
    assert_int_equal(comem_ledger_grant_add(&g_l, s, h, 1, 3 * GIB + 1, 100, &g2), COMEM_ENOSPC);
    assert_int_equal(comem_ledger_grant_add(&g_l, s, h, 1, 3 * GIB, 50, &g2), 0);
    assert_int_equal(comem_ledger_grant_add(&g_l, s, h, 1, 0, 50, &g3), COMEM_EINVAL);
    /* grant turns into residency, never more than it booked */
    assert_int_equal(comem_ledger_grant_done(&g_l, s, g1, e, 7 * GIB), 0);
    assert_true(comem_ledger_entry(&g_l, e)->resident == 5 * GIB);
    assert_true(comem_ledger_granted(&g_l, 1) == 3 * GIB);
    assert_int_equal(comem_ledger_grant_done(&g_l, s, g1, e, 1), COMEM_ENOENT); /* once */
    /* what the process holds on a card: 5 GiB resident and 3 GiB granted, by both of its sessions */
    uint64_t s2 = session("w2"); /* pid 100 too */
    int n = 0;
    assert_true(comem_ledger_process_held(&g_l, s2, 1, &n) == 8 * GIB);
    assert_int_equal(n, 2);
    assert_true(comem_ledger_process_held(&g_l, s, 0, &n) == 0); /* nothing on the other card */
    assert_true(comem_ledger_process_held(&g_l, 12345, 1, &n) == 0); /* no such session */
    assert_int_equal(n, 1);
    assert_int_equal(comem_ledger_grants_expire(&g_l, 49), 0);
    assert_int_equal(comem_ledger_grants_expire(&g_l, 50), 1);
    assert_true(comem_ledger_granted(&g_l, 1) == 0);
    assert_true(comem_ledger_process_held(&g_l, s, 1, &n) == 5 * GIB); /* the expired grant is not held */
}

static void test_pins(void **st)
{
    (void)st;
    uint64_t a = session("a"), b = session("b");
    int64_t sf = -1;
    assert_int_equal(comem_ledger_pin_acquire(&g_l, a, 10 * GIB, &sf), 0);
    assert_int_equal(sf, 0);
    assert_int_equal(comem_ledger_pin_acquire(&g_l, b, 7 * GIB, &sf), COMEM_ENOSPC);
    assert_true(sf == 1 * GIB); /* the refusal says how short */
    assert_int_equal(comem_ledger_pin_acquire(&g_l, b, 6 * GIB, &sf), 0);
    assert_int_equal(comem_ledger_pin_release(&g_l, a, 11 * GIB), 0); /* clamped to what a holds */
    assert_true(g_l.total_pinned == 6 * GIB);
    assert_int_equal(comem_ledger_pin_acquire(&g_l, a, -1, &sf), COMEM_EINVAL);
}

static void test_activity(void **st)
{
    (void)st;
    uint64_t s = session("w"), h = holder(s, 0);
    assert_int_equal(comem_ledger_activity(&g_l, s, 0, true, "p1", 10.0), 0);
    assert_true(comem_ledger_holder(&g_l, h)->busy);
    assert_int_equal(comem_ledger_activity(&g_l, s, 0, false, NULL, 12.5), 0);
    ledger_holder *x = comem_ledger_holder(&g_l, h);
    assert_false(x->busy);
    assert_true(x->idle_known && x->idle_since == 12.5);
    assert_string_equal(x->last_prompt, "p1");
    assert_int_equal(comem_ledger_activity(&g_l, s, 0, false, NULL, 20.0), 0);
    assert_true(x->idle_since == 12.5); /* idle stays idle since it started */
}

static void test_check_detects_corruption(void **st)
{
    (void)st;
    uint64_t s = session("w"), h = holder(s, 1);
    uint64_t e = entry(s, h, 4 * GIB, 4 * GIB);
    char why[256];
    assert_int_equal(comem_ledger_check(&g_l, why, sizeof why), 0);
    ledger_entry *x = comem_ledger_entry(&g_l, e);
    x->resident = -1;
    assert_int_equal(comem_ledger_check(&g_l, why, sizeof why), COMEM_ERANGE);
    assert_non_null(strstr(why, "resident"));
    x->resident = 4 * GIB;
    x->size = 100 * GIB;
    x->resident = 9 * GIB; /* more than the 8 GiB card */
    assert_int_equal(comem_ledger_check(&g_l, why, sizeof why), COMEM_ERANGE);
    assert_non_null(strstr(why, "capacity"));
    x->size = 4 * GIB;
    x->resident = 0; /* a key changed behind the ledger's back: the eviction order is now wrong */
    assert_int_equal(comem_ledger_check(&g_l, why, sizeof why), COMEM_ERANGE);
    assert_non_null(strstr(why, "order"));
    x->resident = 4 * GIB;
    g_l.total_pinned = 5;
    assert_int_equal(comem_ledger_check(&g_l, why, sizeof why), COMEM_ERANGE);
    g_l.total_pinned = 0;
    assert_int_equal(comem_ledger_check(&g_l, why, sizeof why), 0);
}

/* The eviction order: ComfyUI's key, kept through every change, checked after each. */
static void test_eviction_order(void **st)
{
    (void)st;
    uint64_t s = session("w"), h = holder(s, 0);
    uint64_t big = entry(s, h, 8 * GIB, 8 * GIB);      /* 0 offloaded */
    uint64_t part = entry(s, h, 6 * GIB, 4 * GIB);     /* 2 GiB offloaded: first */
    uint64_t small = entry(s, h, 1 * GIB, 1 * GIB);    /* 0 offloaded, smaller than big */
    uint64_t none = entry(s, h, 2 * GIB, 0);           /* nothing resident: not in the order */
    uint64_t want[3] = {part, small, big}, got[8];
    size_t n = 0;
    comem_order_iter it;
    comem_order_begin(&g_l, 0, &it);
    const ledger_entry *e;
    for (uint64_t id; comem_order_next(&it, &id, &e);)
        got[n++] = id;
    assert_int_equal(n, 3);
    assert_memory_equal(got, want, sizeof want);
    /* a census moves entries: `none` becomes the most offloaded resident one, `part` leaves */
    ledger_residency items[2] = {{none, 1, 1, 0}, {part, 1, 0, 0}};
    assert_int_equal(comem_ledger_census(&g_l, s, h, 1, -1, -1, items, 2, 0, NULL), 0);
    n = 0;
    comem_order_begin(&g_l, 0, &it);
    for (uint64_t id; comem_order_next(&it, &id, &e);)
        got[n++] = id;
    assert_int_equal(n, 3);
    assert_int_equal(got[0], none);
    /* many entries: the order stays consistent through random changes (checked after each) */
    uint64_t ids[300];
    unsigned seed = 7;
    for (int i = 0; i < 300; i++)
        ids[i] = entry(s, h, (int64_t)(i % 17 + 1) * COMEM_MIB, (int64_t)(i % 5) * COMEM_MIB / 4);
    for (int k = 0; k < 2000; k++) {
        seed = seed * 1103515245u + 12345u;
        uint64_t id = ids[(seed >> 8) % 300];
        const ledger_entry *x = comem_ledger_entry(&g_l, id);
        ledger_residency it1 = {id, (uint64_t)k + 10, (int64_t)((seed >> 16) % 5) * x->size / 4, 0};
        assert_int_equal(comem_ledger_census(&g_l, s, h, 0, -1, -1, &it1, 1, k, NULL), 0);
    }
    assert_int_equal(comem_ledger_holder_remove(&g_l, s, h), 0);
    comem_order_begin(&g_l, 0, &it);
    assert_false(comem_order_next(&it, &got[0], &e));
}

/* UMA: on a unified device VRAM and pinned RAM are one pool, and the books never exceed it. */
static void test_unified_device_is_one_pool(void **st)
{
    (void)st;
    comem_ledger_fini(&g_l);
    ledger_device d[2] = {{.index = 0, .capacity = 16 * GIB, .unified = true}, {.index = 1, .capacity = 8 * GIB}};
    assert_int_equal(comem_ledger_init(&g_l, d, 2, 12 * GIB), 0);
    comem_ledger_set_checking(&g_l, true);
    uint64_t s = session("w"), h = holder(s, 0);
    entry(s, h, 10 * GIB, 10 * GIB);
    int64_t shortfall = 0;
    /* 8 GiB is within the pin ceiling (12 GiB) but not within the pool: 10 + 8 > 16 */
    assert_int_equal(comem_ledger_pin_acquire(&g_l, s, 8 * GIB, &shortfall), COMEM_ENOSPC);
    assert_int_equal(shortfall, 2 * GIB);
    assert_int_equal(g_l.total_pinned, 0);
    assert_int_equal(comem_ledger_pin_acquire(&g_l, s, 6 * GIB, &shortfall), 0);
    assert_int_equal(comem_ledger_attributed(&g_l, 0), 16 * GIB);
    assert_int_equal(comem_ledger_attributed(&g_l, 1), 0); /* a discrete card is not charged for RAM */
    /* the pool is full: no grant, no residency more */
    uint64_t g;
    assert_int_equal(comem_ledger_grant_add(&g_l, s, 0, 0, GIB, 1, &g), COMEM_ENOSPC);
    assert_int_equal(comem_ledger_entry_add(&g_l, s, h, "m", GIB, GIB, false, 0, &g), COMEM_ERANGE);
    assert_int_equal(comem_ledger_grant_add(&g_l, s, 0, 1, GIB, 1, &g), 0);
    assert_int_equal(comem_ledger_pin_release(&g_l, s, 2 * GIB), 0);
    assert_int_equal(comem_ledger_grant_add(&g_l, s, 0, 0, GIB, 1, &g), 0);
}

/* Device 0's eviction order as the ledger keeps it; returns how many. */
static size_t ledger_order(uint64_t *got, size_t cap)
{
    size_t n = 0;
    comem_order_iter it;
    const ledger_entry *e;
    comem_order_begin(&g_l, 0, &it);
    for (uint64_t id; n < cap && comem_order_next(&it, &id, &e);)
        got[n++] = id;
    return n;
}

static uint64_t entry_at(uint64_t s, uint64_t h, int64_t size, int64_t resident, int64_t refs, int64_t loaded_ns)
{
    uint64_t id;
    assert_int_equal(comem_ledger_entry_add(&g_l, s, h, "m", size, resident, false, loaded_ns, &id), 0);
    assert_int_equal(comem_ledger_entry_set_refs(&g_l, s, id, refs), 0);
    return id;
}

/*
 * References are the order's second key, as in ComfyUI's free_memory: the
 * worked vector V6 (B, C, A), then refs deciding between equally offloaded
 * entries of two processes, and the ledger's order against arith's
 * comem_evict_order (ComfyUI's sort, list index = most recent first) on
 * random entries across three processes.
 */
static void test_eviction_order_refs(void **st)
{
    (void)st;
    uint64_t s1 = session("host"), h1 = holder(s1, 0), s2 = session("worker"), h2 = holder(s2, 0);
    /* V6: idx0 C (0.3 GiB, loaded last), idx1 B (6 GiB, 2 GiB offloaded), idx2 A (2 GiB, loaded first). */
    uint64_t a = entry_at(s1, h1, 2 * GIB, 2 * GIB, 3, 1);
    uint64_t b = entry_at(s2, h2, 6 * GIB, 4 * GIB, 3, 2);
    uint64_t c = entry_at(s1, h1, 322122547, 322122547, 3, 3);
    uint64_t got[512];
    assert_int_equal(ledger_order(got, 512), 3);
    assert_int_equal(got[0], b);
    assert_int_equal(got[1], c);
    assert_int_equal(got[2], a);
    /* C's process now holds more references on it: A (fewer) goes before C though C is smaller. */
    ledger_residency more = {c, 1, 322122547, 5};
    assert_int_equal(comem_ledger_census(&g_l, s1, h1, 1, -1, -1, &more, 1, 3, NULL), 0);
    assert_int_equal(comem_ledger_entry(&g_l, c)->refs, 5);
    assert_int_equal(ledger_order(got, 512), 3);
    assert_int_equal(got[0], b);
    assert_int_equal(got[1], a);
    assert_int_equal(got[2], c);
    /* References never outrank offloading: B stays first even with many. */
    ledger_residency many = {b, 1, 4 * GIB, 1000};
    assert_int_equal(comem_ledger_census(&g_l, s2, h2, 1, -1, -1, &many, 1, 2, NULL), 0);
    assert_int_equal(ledger_order(got, 512), 3);
    assert_int_equal(got[0], b);
    assert_int_equal(comem_ledger_entry_set_refs(&g_l, s1, b, 1), COMEM_ENOENT); /* not s1's */
    assert_int_equal(comem_ledger_holder_remove(&g_l, s1, h1), 0);
    assert_int_equal(comem_ledger_holder_remove(&g_l, s2, h2), 0);

    /* Random entries of three processes: the ledger's order is ComfyUI's sort. */
    uint64_t ss[3] = {s1, s2, session("third")}, hs[3];
    for (int i = 0; i < 3; i++)
        hs[i] = holder(ss[i], 0);
    enum { N = 120 };
    uint64_t ids[N];
    comem_evict_entry ee[N];
    unsigned seed = 11;
    for (int i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        int64_t size = (int64_t)((seed >> 8) % 4 + 1) * 64 * COMEM_MIB;
        int64_t resident = size - (int64_t)((seed >> 12) % 3) * 16 * COMEM_MIB;
        int64_t refs = (int64_t)((seed >> 16) % 3) + 2;
        /* loaded at time i: ComfyUI's list has the newest at index 0, so entry i sits at index N-1-i */
        ids[i] = entry_at(ss[i % 3], hs[i % 3], size, resident, refs, i + 10);
        ee[N - 1 - i] = (comem_evict_entry){.size = size, .loaded = resident, .refs = refs};
    }
    size_t want[N];
    comem_evict_request req = {.device = 0};
    assert_int_equal(comem_evict_order(&req, ee, N, want), N);
    assert_int_equal(ledger_order(got, 512), N);
    for (int k = 0; k < N; k++)
        assert_int_equal(got[k], ids[N - 1 - want[k]]);
}

/* Asserts which devices' generations moved since *seen (and remembers them now). */
static void moved(uint64_t seen[2], bool d0, bool d1)
{
    assert_true((g_l.devices[0].changes != seen[0]) == d0);
    assert_true((g_l.devices[1].changes != seen[1]) == d1);
    seen[0] = g_l.devices[0].changes;
    seen[1] = g_l.devices[1].changes;
}

/* The device generation moves with what the card may show, never with a grant. */
static void test_device_generation(void **st)
{
    (void)st;
    uint64_t seen[2] = {g_l.devices[0].changes, g_l.devices[1].changes};
    uint64_t s = session("w");
    moved(seen, true, true); /* a process may hold a context anywhere */
    uint64_t h = holder(s, 1);
    moved(seen, false, true);
    uint64_t e = entry(s, h, 2 * GIB, 0);
    moved(seen, false, true);
    uint64_t g;
    assert_int_equal(comem_ledger_grant_add(&g_l, s, h, 1, GIB, 1000, &g), 0);
    assert_int_equal(comem_ledger_grant_done(&g_l, s, g, e, GIB), 0);
    assert_int_equal(comem_ledger_set_floor(&g_l, s, 1, 300 * COMEM_MIB), 0);
    assert_int_equal(comem_ledger_activity(&g_l, s, 0, true, "p", 1.0), 0);
    moved(seen, false, false); /* grants are corrected for, floors come from a reading, busy marks move nothing */
    census1(s, h, e, 1, GIB);
    moved(seen, false, false); /* a census that moves nothing */
    census1(s, h, e, 2, 0);
    moved(seen, false, true);
    assert_int_equal(comem_ledger_pin_acquire(&g_l, s, GIB, NULL), 0);
    moved(seen, true, true); /* pinned RAM is a unified device's memory */
    assert_int_equal(comem_ledger_entry_remove(&g_l, s, e), 0);
    moved(seen, false, true);
    assert_int_equal(comem_ledger_entry_remove(&g_l, s, e), COMEM_ENOENT);
    moved(seen, false, false);
    assert_int_equal(comem_ledger_holder_remove(&g_l, s, h), 0);
    moved(seen, false, true);
    assert_int_equal(comem_ledger_session_end(&g_l, s, NULL), 0);
    moved(seen, true, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_census_sequence_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_census_pins_equal_seq_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_census_refused_above_capacity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_census_duplicates_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_entry_size_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_process_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ownership, setup, teardown),
        cmocka_unit_test_setup_teardown(test_session_end_releases_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grants, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_activity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_detects_corruption, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eviction_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eviction_order_refs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unified_device_is_one_pool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_device_generation, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
