/*
 * tests/unit/test_arith.c - the rules the vectors cannot reach: callbacks and invariants.
 *
 * The eviction ladder re-measures free memory through its callback per victim,
 * escalates a short partial unload to a detach, and accumulates dynamic
 * reductions; the pin ladders walk their tiers in ComfyUI's order. These
 * tests drive the callbacks with scripted cards and check every step.
 */
#include "unit/cmocka_all.h"

#include <string.h>

#include "arith/admission.h"
#include "arith/cross_reserve.h"
#include "arith/evict.h"
#include "arith/pinned.h"
#include "arith/planners.h"
#include "arith/reserve.h"
#include "base/bytes.h"
#include "comem/common.h"

/* ---- eviction ladder ---- */

typedef struct script {
    double free;
    int measures;       /* free_now calls */
    double short_by;    /* a partial unload frees asked - short_by (falls short when > 0) */
    size_t detached[8];
    size_t n_detached;
    const comem_evict_entry *e;
} script;

static double s_free(void *u)
{
    script *s = u;
    s->measures++;
    return s->free;
}
static double s_partial(void *u, size_t i, double asked)
{
    script *s = u;
    (void)i;
    double got = asked - s->short_by;
    s->free += got;
    return got;
}
static void s_detach(void *u, size_t i)
{
    script *s = u;
    s->free += (double)s->e[i].loaded;
    s->detached[s->n_detached++] = i;
}

static void test_ladder_remeasures_every_victim(void **st)
{
    (void)st;
    comem_evict_entry e[3] = {
        {.size = 1 * COMEM_GIB, .loaded = 1 * COMEM_GIB, .refs = 1},
        {.size = 1 * COMEM_GIB, .loaded = 1 * COMEM_GIB, .refs = 1},
        {.size = 1 * COMEM_GIB, .loaded = 1 * COMEM_GIB, .refs = 1},
    };
    script s = {.free = 0, .e = e};
    comem_evict_request req = {.required = 2.5 * (double)COMEM_GIB, .smart_memory = true};
    comem_evict_ops ops = {s_free, s_partial, s_detach, &s};
    size_t order[3];
    comem_evict_action a[3];
    comem_evict_result r;
    assert_int_equal(comem_evict_run(&req, e, 3, &ops, order, a, &r), 0);
    assert_int_equal(s.measures, 3);
    assert_int_equal(r.n_actions, 3);
    /* two detaches (1 GiB asked >= loaded is a detach only when asked >= loaded) */
    assert_true(a[0].asked == 2.5 * (double)COMEM_GIB && a[0].kind == COMEM_EVICT_DETACH);
    assert_true(a[1].asked == 1.5 * (double)COMEM_GIB && a[1].kind == COMEM_EVICT_DETACH);
    assert_true(a[2].asked == 0.5 * (double)COMEM_GIB && a[2].kind == COMEM_EVICT_PARTIAL);
    assert_true(s.free == 2.5 * (double)COMEM_GIB);
}

static void test_short_partial_escalates_to_detach(void **st)
{
    (void)st;
    comem_evict_entry e[1] = {{.size = 4 * COMEM_GIB, .loaded = 4 * COMEM_GIB, .refs = 1}};
    script s = {.free = 0, .short_by = 1, .e = e};
    comem_evict_request req = {.required = 1 * (double)COMEM_GIB, .smart_memory = true};
    comem_evict_ops ops = {s_free, s_partial, s_detach, &s};
    size_t order[1];
    comem_evict_action a[1];
    comem_evict_result r;
    assert_int_equal(comem_evict_run(&req, e, 1, &ops, order, a, &r), 0);
    assert_int_equal(r.n_actions, 1);
    assert_int_equal(a[0].kind, COMEM_EVICT_DETACH);
    assert_true(a[0].tried_partial);
    assert_true(a[0].partial_freed == (double)COMEM_GIB - 1);
    assert_int_equal(s.n_detached, 1);
    assert_int_equal(r.n_detached, 1);
}

static void test_dynamic_reduction_accumulates(void **st)
{
    (void)st;
    /* Two dynamic residents of 1 GiB reduce the requirement before the static victim is measured. */
    comem_evict_entry e[3] = {
        {.size = 1 * COMEM_GIB, .loaded = 1 * COMEM_GIB, .refs = 1, .dynamic = true},
        {.size = 1 * COMEM_GIB, .loaded = 1 * COMEM_GIB, .refs = 1, .dynamic = true},
        {.size = 8 * COMEM_GIB, .loaded = 8 * COMEM_GIB, .refs = 1},
    };
    script s = {.free = 1 * (double)COMEM_GIB, .e = e};
    comem_evict_request req = {.required = 5 * (double)COMEM_GIB, .for_dynamic = true, .smart_memory = true};
    comem_evict_ops ops = {s_free, s_partial, s_detach, &s};
    size_t order[3];
    comem_evict_action a[3];
    comem_evict_result r;
    assert_int_equal(comem_evict_run(&req, e, 3, &ops, order, a, &r), 0);
    assert_true(r.required_after == 3 * (double)COMEM_GIB);
    assert_int_equal(r.n_actions, 1);
    assert_int_equal(a[0].entry, 2);
    assert_true(a[0].asked == 2 * (double)COMEM_GIB); /* 5 - 1 - 1 GiB required, 1 GiB free */
    assert_int_equal(a[0].kind, COMEM_EVICT_PARTIAL);
}

static void test_filters_device_keep_dead(void **st)
{
    (void)st;
    comem_evict_entry e[4] = {
        {.size = 1, .loaded = 1, .device = 1},
        {.size = 1, .loaded = 1, .device = 0, .keep = true},
        {.size = 1, .loaded = 1, .device = 0, .dead = true},
        {.size = 1, .loaded = 1, .device = 0},
    };
    size_t order[4];
    comem_evict_request req = {.device = 0, .smart_memory = true};
    assert_int_equal(comem_evict_order(&req, e, 4, order), 1);
    assert_int_equal(order[0], 3);
    req.device_none = true; /* any device: the device filter goes, keep and dead stay */
    assert_int_equal(comem_evict_order(&req, e, 4, order), 2);
}

static void test_device_none_frees_nothing(void **st)
{
    (void)st;
    comem_evict_entry e[1] = {{.size = 4, .loaded = 4}};
    script s = {.free = 0, .e = e};
    comem_evict_request req = {.required = 1e30, .device_none = true, .smart_memory = false};
    comem_evict_ops ops = {s_free, s_partial, s_detach, &s};
    size_t order[1];
    comem_evict_action a[1];
    comem_evict_result r;
    assert_int_equal(comem_evict_run(&req, e, 1, &ops, order, a, &r), 0);
    assert_int_equal(r.n_actions, 0);
    assert_int_equal(s.measures, 0);
}

static void test_ladder_rejects_missing_callbacks(void **st)
{
    (void)st;
    comem_evict_entry e[1] = {{.size = 4, .loaded = 4}};
    comem_evict_request req = {.required = 1, .smart_memory = true};
    comem_evict_ops ops = {0};
    size_t order[1];
    comem_evict_action a[1];
    comem_evict_result r;
    assert_int_equal(comem_evict_run(&req, e, 1, &ops, order, a, &r), -1);
}

static void test_empty_cache_rule(void **st)
{
    (void)st;
    assert_true(comem_should_empty_cache(true, false, COMEM_VRAM_HIGH, 0, 0));
    assert_false(comem_should_empty_cache(false, true, COMEM_VRAM_NORMAL, 1, 100));
    assert_false(comem_should_empty_cache(false, false, COMEM_VRAM_HIGH, 1, 100));
    assert_true(comem_should_empty_cache(false, false, COMEM_VRAM_NORMAL, 4, 1.0000001));
    assert_false(comem_should_empty_cache(false, false, COMEM_VRAM_NORMAL, 4, 1));
}

/* ---- admission sums ---- */

static void test_admission_needs_per_device(void **st)
{
    (void)st;
    comem_load_model m[4] = {
        {.size = 6 * COMEM_GIB, .loaded = 2 * COMEM_GIB, .load_device = 0, .current_device = 0},  /* offloaded part */
        {.size = 2 * COMEM_GIB, .loaded = 0, .load_device = 0, .current_device = COMEM_DEVICE_CPU}, /* full */
        {.size = 1 * COMEM_GIB, .loaded = 1 * COMEM_GIB, .load_device = 1, .current_device = 1, .dynamic = true},
        {.size = 3 * COMEM_GIB, .loaded = 3 * COMEM_GIB, .load_device = 1, .current_device = 0}, /* elsewhere: full */
    };
    comem_device_need rows[4];
    size_t n;
    bool all_dynamic;
    assert_int_equal(comem_admission_needs(m, 4, rows, 4, &n, &all_dynamic), 0);
    assert_int_equal(n, 2);
    assert_false(all_dynamic);
    assert_int_equal(rows[0].device, 0);
    assert_int_equal(rows[0].need, 6 * COMEM_GIB);
    assert_int_equal(rows[0].pins, 8 * COMEM_GIB);
    assert_int_equal(rows[1].device, 1);
    assert_int_equal(rows[1].need, 3 * COMEM_GIB);
    assert_int_equal(rows[1].pins, 3 * COMEM_GIB); /* the dynamic model adds no pins */
    assert_int_equal(comem_admission_needs(m, 4, rows, 1, &n, &all_dynamic), COMEM_ERANGE);
    assert_int_equal(comem_admission_needs(&m[2], 1, rows, 4, &n, &all_dynamic), 0);
    assert_true(all_dynamic);
}

/* ---- pin ladders ---- */

typedef struct pin_walk {
    comem_pin_tier seen[16];
    double asked[16];
    int n;
    double give; /* bytes each tier frees */
} pin_walk;

static double walk_fn(void *u, double size, const comem_pin_tier *t)
{
    pin_walk *w = u;
    w->seen[w->n] = *t;
    w->asked[w->n++] = size;
    return size > 0 ? w->give : 0;
}

static void test_pin_eviction_tiers(void **st)
{
    (void)st;
    comem_pin_tier t[COMEM_PIN_TIERS_MAX];
    /* 783545f6: no fast-pin subset; 3 rungs, +1 when not loaded, +1 more with evict_active */
    assert_int_equal(comem_pin_eviction_tiers(COMEM_PIN_ERA_783545F6, true, true, t), 3);
    assert_int_equal(comem_pin_eviction_tiers(COMEM_PIN_ERA_783545F6, false, false, t), 4);
    assert_int_equal(comem_pin_eviction_tiers(COMEM_PIN_ERA_783545F6, false, true, t), 5);
    assert_int_equal(t[0].subsets, COMEM_PIN_SET);
    assert_int_equal(t[0].current_prompt, COMEM_NO);
    assert_int_equal(t[0].active, COMEM_ANY);
    assert_int_equal(t[2].subsets, COMEM_PIN_SET_LOADED);
    assert_int_equal(t[2].current_prompt, COMEM_YES);
    assert_int_equal(t[3].active, COMEM_NO);
    assert_int_equal(t[4].subsets, COMEM_PIN_SET);
    assert_int_equal(t[4].active, COMEM_YES);
    /* every registration rung only unregisters */
    assert_int_equal(comem_registration_eviction_tiers(COMEM_PIN_ERA_783545F6, false, t), 2);
    assert_int_equal(comem_registration_eviction_tiers(COMEM_PIN_ERA_783545F6, true, t), 4);
    assert_true(t[0].unregister && t[3].unregister);
    assert_int_equal(t[0].subsets, COMEM_PIN_SET | COMEM_PIN_SET_LOADED);
    assert_int_equal(t[2].active, COMEM_YES);
}

static void test_free_pins_asks_remaining(void **st)
{
    (void)st;
    pin_walk w = {.give = 100};
    double freed = comem_free_pins(COMEM_PIN_ERA_783545F6, 250, false, false, walk_fn, &w);
    assert_int_equal(w.n, 4);
    assert_true(w.asked[0] == 250 && w.asked[1] == 150 && w.asked[2] == 50 && w.asked[3] == -50);
    assert_true(freed == 300); /* whole pins over-free */
}

static void test_ensure_pin_budget(void **st)
{
    (void)st;
    /* V12 row 1: shortfall 641728512, ask 910163968; passes only if >= shortfall is freed */
    pin_walk enough = {.give = 641728512};
    assert_true(comem_ensure_pin_budget(104857600, 3435973836, 1610612736, false, false, false, walk_fn, &enough));
    assert_true(enough.asked[0] == 910163968);
    pin_walk little = {.give = 1000};
    assert_false(comem_ensure_pin_budget(104857600, 3435973836, 1610612736, false, false, false, walk_fn, &little));
    pin_walk none = {.give = 0};
    assert_true(comem_ensure_pin_budget(64 * COMEM_MIB, 0, 3 * (double)COMEM_GIB, false, false, false, walk_fn, &none));
    assert_int_equal(none.n, 0);
    assert_true(comem_ensure_pin_budget(1e15, 0, 0, true, false, false, walk_fn, &none)); /* --high-ram */
}

static void test_free_registrations(void **st)
{
    (void)st;
    pin_walk w = {.give = 1 * (double)COMEM_GIB};
    assert_false(comem_free_registrations(COMEM_PIN_ERA_783545F6, 1, -1, true, walk_fn, &w));
    assert_true(comem_free_registrations(COMEM_PIN_ERA_783545F6, 0, 48 * (double)COMEM_GIB, true, walk_fn, &w));
    assert_int_equal(w.n, 0);
    /* shortfall 0.5 GiB: target 2.5 GiB; the first tier frees 1 GiB, leaving 1.5 <= 2 GiB */
    const double gib = (double)COMEM_GIB;
    assert_true(comem_free_registrations(COMEM_PIN_ERA_783545F6, 0.5 * gib, 48 * gib, false, walk_fn, &w));
    assert_true(w.asked[0] == 2.5 * (double)COMEM_GIB);
    assert_true(w.asked[1] == 1.5 * (double)COMEM_GIB);
    pin_walk tiny = {.give = 1};
    assert_false(comem_free_registrations(COMEM_PIN_ERA_783545F6, 0.5 * gib, 48 * gib, false, walk_fn, &tiny));
}

/* v0.39's ladders (model_management.py of the assembled v0.39 tree, pin_eviction_tiers and
   registration_eviction_tiers), rung by rung. */
static void test_pin_tiers_v039(void **st)
{
    (void)st;
    comem_pin_tier t[COMEM_PIN_TIERS_MAX];
    assert_int_equal(comem_pin_eviction_tiers(COMEM_PIN_ERA_V039, true, true, t), 5);
    assert_int_equal(comem_pin_eviction_tiers(COMEM_PIN_ERA_V039, false, false, t), 6);
    assert_int_equal(comem_pin_eviction_tiers(COMEM_PIN_ERA_V039, false, true, t), 9);
    const comem_pin_tier want[9] = {
        {COMEM_PIN_SET_FAST, COMEM_NO, COMEM_NO, false},   {COMEM_PIN_SET, COMEM_NO, COMEM_ANY, false},
        {COMEM_PIN_SET_LOADED, COMEM_NO, COMEM_ANY, false}, {COMEM_PIN_SET_FAST, COMEM_YES, COMEM_NO, false},
        {COMEM_PIN_SET_LOADED, COMEM_YES, COMEM_ANY, false}, {COMEM_PIN_SET, COMEM_YES, COMEM_NO, false},
        {COMEM_PIN_SET_FAST, COMEM_NO, COMEM_YES, false},  {COMEM_PIN_SET_FAST, COMEM_YES, COMEM_YES, false},
        {COMEM_PIN_SET, COMEM_YES, COMEM_YES, false},
    };
    for (size_t i = 0; i < 9; i++) {
        assert_int_equal(t[i].subsets, want[i].subsets);
        assert_int_equal(t[i].current_prompt, want[i].current_prompt);
        assert_int_equal(t[i].active, want[i].active);
        assert_false(t[i].unregister);
    }
    /* registration: the fast pool destroyed, then the rest unregistered, per (prompt, active) */
    assert_int_equal(comem_registration_eviction_tiers(COMEM_PIN_ERA_V039, false, t), 4);
    assert_int_equal(comem_registration_eviction_tiers(COMEM_PIN_ERA_V039, true, t), 8);
    const unsigned rest = COMEM_PIN_SET | COMEM_PIN_SET_LOADED;
    for (size_t i = 0; i < 8; i++) {
        bool fast = i % 2 == 0;
        assert_int_equal(t[i].subsets, fast ? COMEM_PIN_SET_FAST : rest);
        assert_int_equal(t[i].unregister, !fast);
        assert_int_equal(t[i].current_prompt, (i / 2) % 2 ? COMEM_YES : COMEM_NO);
        assert_int_equal(t[i].active, i >= 4 ? COMEM_YES : COMEM_NO);
    }
}

/* v0.39's gate has no --fast-disk branch, and its ceiling counts no swap under a cgroup limit. */
static void test_pin_budget_and_ceiling_v039(void **st)
{
    (void)st;
    const double gib = (double)COMEM_GIB;
    /* --fast-disk with 783545f6: total 10 + size 1 - ceiling 20 GiB < 0 passes without a walk;
       v0.39 reads RAM instead: 1 + 2 (the floor) - 2 GiB available = 1 GiB short */
    comem_pin_budget_in in = {.size = gib, .available = 2 * gib, .fast_disk = true, .total_pinned = 10 * gib,
                              .max_pinned = 20 * gib};
    comem_pin_budget_check c;
    comem_pin_budget_of(&in, &c);
    assert_true(c.passes_now && c.shortfall == -9 * gib);
    in.era = COMEM_PIN_ERA_V039;
    comem_pin_budget_of(&in, &c);
    assert_false(c.passes_now);
    assert_true(c.shortfall == gib && c.ask == gib + 256.0 * COMEM_MIB);
    /* 24 GiB RAM, 64 GiB swap: min(21.6, 20, 72) = 20 GiB either way without a limit */
    comem_pin_ceiling_in p = {.ram = 24 * gib, .disk_swap = (int64_t)64 << 30, .enabled = true, .cgroup_limited = true};
    assert_true(comem_max_pinned(&p) == 20 * gib);
    /* 16 GiB RAM, 8 GiB swap: 783545f6 max(6.4, min(14.4, 12, 8)) = 8 GiB; v0.39 under a limit: max(6.4, 0) */
    p.ram = 16 * gib;
    p.disk_swap = (int64_t)8 << 30;
    assert_true(comem_max_pinned(&p) == 8 * gib);
    p.era = COMEM_PIN_ERA_V039;
    assert_true(comem_max_pinned(&p) == 16 * gib * 0.40);
    p.cgroup_limited = false;
    assert_true(comem_max_pinned(&p) == 8 * gib);
}

static void test_windows_pin_pressure(void **st)
{
    (void)st;
    assert_false(comem_should_free_pins_for_ram_pressure(0, false, 0, true, 0));
    assert_true(comem_should_free_pins_for_ram_pressure(1, false, 1e12, true, 0));
    assert_false(comem_should_free_pins_for_ram_pressure(1, true, 1e12, true, 4.9));
    assert_true(comem_should_free_pins_for_ram_pressure(1, true, 1e12, true, 5.0));
    assert_true(comem_should_free_pins_for_ram_pressure(1, true, 511.0 * COMEM_MIB, true, 0));
    assert_true(comem_should_free_pins_for_ram_pressure(1, true, 1e12, false, 0));
}

static void test_disk_swap(void **st)
{
    (void)st;
    comem_swap_entry rows[3] = {{"zram0", 100}, {"sda2", 10}, {"swapfile", 5}};
    assert_int_equal(comem_disk_swap_total(rows, 3), 15 * 1024);
}

/* ---- the admission ask target: upstream's slack and minimum over comem_ask_target ---- */

static void test_admit_target(void **st)
{
    (void)st;
    const int64_t reserves[] = {0, COMEM_RESERVE_DEFAULT, 3 * COMEM_GIB + 7};
    const int64_t weights[] = {0, 1, 10 * COMEM_GIB + 3};
    const int64_t working[] = {0, 64 * COMEM_MIB, 5 * COMEM_GIB};
    for (size_t r = 0; r < 3; r++)
        for (size_t w = 0; w < 3; w++)
            for (size_t k = 0; k < 3; k++) {
                int64_t min_inf = comem_trunc(0.8 * 1024.0 * 1024.0 * 1024.0 + (double)reserves[r]);
                assert_int_equal(comem_admit_target(weights[w], working[k], reserves[r]),
                                 comem_ask_target(weights[w], 1.1, min_inf, reserves[r], working[k]));
            }
    /* 1 GiB with 2 GiB of inference under the default reserve: the working term wins */
    assert_int_equal(comem_admit_target(COMEM_GIB, 2 * COMEM_GIB, COMEM_RESERVE_DEFAULT),
                     (int64_t)((double)COMEM_GIB * 1.1) + 2 * COMEM_GIB + COMEM_RESERVE_DEFAULT);
}

/* ---- what fits of a refused admission: the target's inverse, exact and the largest ---- */

static void test_admit_fitting(void **st)
{
    (void)st;
    const int64_t weights[] = {1, 7, 1000, COMEM_GIB, 10 * COMEM_GIB + 3, 123456789012};
    const int64_t working = 2 * COMEM_GIB, reserve = COMEM_RESERVE_DEFAULT;
    for (size_t w = 0; w < sizeof weights / sizeof weights[0]; w++) {
        int64_t target = comem_admit_target(weights[w], working, reserve);
        for (int64_t short_by = 1; short_by < weights[w] * 2 && short_by > 0; short_by = short_by * 3 + 1) {
            int64_t fit = comem_admit_fitting(weights[w], short_by);
            assert_true(fit >= 0 && fit < weights[w]);
            if (fit > 0) /* its target is at least short_by lower, and one byte more would not be */
                assert_true(comem_admit_target(fit, working, reserve) <= target - short_by);
            assert_true(comem_admit_target(fit + 1, working, reserve) > target - short_by);
        }
        assert_int_equal(comem_admit_fitting(weights[w], 0), weights[w]);
        assert_int_equal(comem_admit_fitting(weights[w], -5), weights[w]);
    }
    /* short by more than the weights' whole term: nothing fits */
    assert_int_equal(comem_admit_fitting(COMEM_GIB, 2 * COMEM_GIB), 0);
    /* An absurd request (issue 40 item 9): the weights' term saturates and hides the target's fixed
       part, so nothing is said to fit; answered at once (the old step-down walked ~2^59 values). */
    const int64_t room = 7 * COMEM_GIB + 3 * COMEM_GIB / 4;
    assert_int_equal(comem_admit_fitting(INT64_MAX, INT64_MAX - room), 0);
    assert_int_equal(comem_admit_fitting(INT64_MAX, INT64_MAX), 0);
    /* Large but unsaturated: exact, by the same inverse as above. */
    const int64_t big = INT64_MAX / 2;
    int64_t target = comem_admit_target(big, working, reserve), fit = comem_admit_fitting(big, target - room);
    assert_true(comem_admit_target(fit, working, reserve) <= room);
    assert_true(comem_admit_target(fit + 1, working, reserve) > room);
}

/* ---- who may be asked now: the coordinator plans by it, a holder's client answers by it ---- */

static void test_may_release_now(void **st)
{
    (void)st;
    assert_true(comem_may_release_now(true, false, false));
    assert_true(comem_may_release_now(true, true, true));   /* a pager releases while it computes */
    assert_false(comem_may_release_now(true, true, false)); /* a computing holder is never interrupted */
    assert_false(comem_may_release_now(false, false, true));
    assert_false(comem_may_release_now(false, false, false));
}

/* ---- planners: invariants over many random inputs ---- */

static void test_pressure_plan_invariants(void **st)
{
    (void)st;
    static const char *keys[] = {"a", "b", "c", "d", "e", "f"};
    unsigned seed = 12345;
    for (int round = 0; round < 2000; round++) {
        comem_release_holder h[6];
        for (int i = 0; i < 6; i++) {
            seed = seed * 1103515245u + 12345u;
            h[i] = (comem_release_holder){keys[i], (seed >> 3) % 7 != 0, (seed >> 5) % 9 != 0, (seed >> 7) % 5 == 0,
                                          (int64_t)((seed >> 9) % 8) * COMEM_GIB - COMEM_GIB};
        }
        int64_t shortfall = (int64_t)(seed % 20) * COMEM_GIB / 2 - COMEM_GIB;
        size_t req = (seed >> 11) % 7; /* 6 means no requester */
        comem_release_ask asks[6];
        size_t k = comem_plan_pressure_release(h, 6, shortfall, req == 6 ? SIZE_MAX : req, asks);
        int64_t sum = 0, eligible = 0;
        for (int i = 0; i < 6; i++)
            if ((size_t)i != req && h[i].alive && h[i].advertises && !h[i].in_flight && h[i].held > 0)
                eligible += h[i].held;
        for (size_t j = 0; j < k; j++) {
            const comem_release_holder *x = &h[asks[j].holder];
            assert_true(asks[j].holder != req && x->alive && x->advertises && !x->in_flight);
            assert_true(asks[j].bytes > 0 && asks[j].bytes <= x->held);
            if (j > 0)
                assert_true(h[asks[j - 1].holder].held >= x->held); /* largest first */
            sum += asks[j].bytes;
        }
        /* never more than the shortfall; as much of it as the eligible holders have */
        assert_true(sum == comem_min(comem_clamp0(shortfall), eligible));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ladder_remeasures_every_victim),
        cmocka_unit_test(test_short_partial_escalates_to_detach),
        cmocka_unit_test(test_dynamic_reduction_accumulates),
        cmocka_unit_test(test_filters_device_keep_dead),
        cmocka_unit_test(test_device_none_frees_nothing),
        cmocka_unit_test(test_ladder_rejects_missing_callbacks),
        cmocka_unit_test(test_empty_cache_rule),
        cmocka_unit_test(test_admission_needs_per_device),
        cmocka_unit_test(test_pin_eviction_tiers),
        cmocka_unit_test(test_free_pins_asks_remaining),
        cmocka_unit_test(test_ensure_pin_budget),
        cmocka_unit_test(test_free_registrations),
        cmocka_unit_test(test_pin_tiers_v039),
        cmocka_unit_test(test_pin_budget_and_ceiling_v039),
        cmocka_unit_test(test_windows_pin_pressure),
        cmocka_unit_test(test_disk_swap),
        cmocka_unit_test(test_admit_target),
        cmocka_unit_test(test_admit_fitting),
        cmocka_unit_test(test_may_release_now),
        cmocka_unit_test(test_pressure_plan_invariants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
