/*
 * tests/unit/test_calc.c - the public rule API (comem/calc.h): 783545f6's rules and the a125cd84 snapshot's.
 *
 * The ComfyUI conformance test (tests/python/test_conformance.py) compares these with
 * ComfyUI's own code when COMFYUI_DIR is set; these cases hold without it: the worked
 * vectors through the public entry points, and each place where the snapshot's rules and
 * the current ones part (docs/conformance.md).
 */
#include "unit/cmocka_all.h"

#include <string.h>

#include "comem/calc.h"

#define GIB (1024.0 * 1024 * 1024)
#define MIB (1024.0 * 1024)

static void test_reserve_and_admission(void **st)
{
    (void)st;
    double r, mi, extra, mmr;
    assert_int_equal(comem_calc_reserve(1, 16376, 0, 0, &r, &mi), COMEM_OK);
    assert_true(r == 734003200.0 && mi == 1592996659.2);
    assert_int_equal(comem_calc_reserve(1, 15360, 0, 0, &r, NULL), COMEM_OK);
    assert_true(r == 629145600.0); /* strictly above 15 GiB */
    assert_int_equal(comem_calc_reserve(0, 0, 1, 2, &r, &mi), COMEM_OK);
    assert_true(r == 2147483648.0 && mi == 3006477107.2);
    assert_int_equal(comem_calc_admission(1 * GIB, 0, 0, 400 * MIB, &mi, &extra, &mmr), COMEM_OK);
    assert_true(extra == 1493172224.0 && mmr == extra && mi == 1278423859.2);
    assert_true(comem_calc_free_target(6 * GIB, extra) == 8579868262.400001); /* V2, bit for bit */
    assert_int_equal(comem_calc_needs_second_pass(mmr, mmr), 0);
    assert_int_equal(comem_calc_needs_second_pass(mmr - 1, mmr), 1);
}

static void test_load_needs(void **st)
{
    (void)st;
    comem_calc_model m[3] = {
        {.size = 6LL << 30, .loaded = 2LL << 30, .device = 0, .current_device = 0},
        {.size = 1LL << 30, .device = 1, .current_device = COMEM_CALC_CPU, .flags = COMEM_CALC_DYNAMIC},
        {.size = 3LL << 30, .loaded = 3LL << 30, .device = 0, .current_device = 1}, /* elsewhere: full size */
    };
    int32_t dev[2];
    int64_t need[2], pins[2];
    size_t rows;
    int all_dynamic;
    assert_int_equal(comem_calc_load_needs(m, 3, dev, need, pins, 2, &rows, &all_dynamic), COMEM_OK);
    assert_int_equal(rows, 2);
    assert_int_equal(dev[0], 0);
    assert_int_equal(need[0], (4LL + 3) << 30);
    assert_int_equal(pins[0], 9LL << 30);
    assert_int_equal(dev[1], 1);
    assert_int_equal(pins[1], 0);
    assert_int_equal(all_dynamic, 0);
    assert_int_equal(comem_calc_load_needs(m, 3, dev, need, pins, 1, &rows, &all_dynamic), COMEM_ERANGE);
}

static double budget(int rules, int state, unsigned flags, double free_now, double loaded, int *kind)
{
    double b = -1;
    assert_int_equal(comem_calc_lowvram_budget(rules, state, flags, free_now, loaded, 1493172224.0, 1278423859.2,
                                               0.0, kind, &b),
                     COMEM_OK);
    return b;
}

static void test_lowvram_versions(void **st)
{
    (void)st;
    int k;
    /* V4b: both versions agree well above the floor. */
    assert_true(budget(COMEM_COMFYUI_CURRENT, COMEM_CALC_VRAM_NORMAL, 0, 6 * GIB, 0, &k) == 4949278720.0);
    assert_true(budget(COMEM_COMFYUI_A125CD84, COMEM_CALC_VRAM_NORMAL, 0, 6 * GIB, 0, &k) == 4949278720.0);
    assert_int_equal(k, COMEM_CALC_BUDGET_BYTES);
    /* V4c: nothing fits. Current: 0 -> 0.1; the snapshot's 128 MiB floor loads 128 MiB. */
    assert_true(budget(COMEM_COMFYUI_CURRENT, COMEM_CALC_VRAM_NORMAL, 0, 1 * GIB, 0, &k) == 0.1);
    assert_int_equal(k, COMEM_CALC_BUDGET_NOTHING);
    assert_true(comem_calc_nothing_budget() == 0.1 && comem_calc_full_load_sentinel() == 1e32); /* the sentinels */
    assert_true(budget(COMEM_COMFYUI_A125CD84, COMEM_CALC_VRAM_NORMAL, 0, 1 * GIB, 0, &k) == 128 * MIB);
    /* V4i: more resident than fits. Current sheds (negative); the snapshot clamps at 0.1. */
    assert_true(budget(COMEM_COMFYUI_CURRENT, COMEM_CALC_VRAM_LOW, 0, 0.5 * GIB, 3 * GIB, &k) == -956301312.0);
    assert_true(budget(COMEM_COMFYUI_A125CD84, COMEM_CALC_VRAM_LOW, 0, 0.5 * GIB, 3 * GIB, &k) == 0.1);
    assert_int_equal(k, COMEM_CALC_BUDGET_NOTHING);
    /* Full loads and NO_VRAM are the same in both. */
    for (int r = 0; r <= 1; r++) {
        assert_true(budget(r, COMEM_CALC_VRAM_HIGH, 0, 1 * GIB, 0, &k) == 0 && k == COMEM_CALC_BUDGET_FULL);
        assert_true(budget(r, COMEM_CALC_VRAM_NORMAL, COMEM_CALC_LOAD_DEVICE_CPU, 1 * GIB, 0, &k) == 0);
        assert_true(budget(r, COMEM_CALC_VRAM_NORMAL, COMEM_CALC_FORCE_FULL_LOAD, 1 * GIB, 0, &k) == 0);
        assert_true(budget(r, COMEM_CALC_VRAM_NO, COMEM_CALC_NO_LOWVRAM, 1 * GIB, 0, &k) == 0.1);
    }
    double b;
    assert_int_equal(comem_calc_lowvram_budget(9, 3, 0, 0, 0, 0, 0, 0, &k, &b), COMEM_EINVAL);
    /* v0.39's load rules are 783545f6's. */
    assert_true(budget(COMEM_COMFYUI_V039, COMEM_CALC_VRAM_LOW, 0, 0.5 * GIB, 3 * GIB, &k) == -956301312.0);
    /* 783545f6 is what current means today. */
    assert_true(budget(COMEM_COMFYUI_783545F6, COMEM_CALC_VRAM_NORMAL, 0, 1 * GIB, 0, &k) == 0.1);
    assert_true(budget(COMEM_COMFYUI_783545F6, COMEM_CALC_VRAM_LOW, 0, 0.5 * GIB, 3 * GIB, &k) == -956301312.0);
    assert_int_equal(comem_calc_lowvram_budget(0, 6, 0, 0, 0, 0, 0, 0, &k, &b), COMEM_EINVAL);
}

/* A card: free rises by what is unloaded; a partial unload frees exactly what it is asked. */
typedef struct card {
    double free;
    int reads;
    const comem_calc_model *m;
    double partial_asked[4];
    int partials;
} card;

static double c_free(void *u)
{
    card *c = u;
    c->reads++;
    return c->free;
}
static double c_partial(void *u, size_t i, double to_free)
{
    card *c = u;
    (void)i;
    c->partial_asked[c->partials++] = to_free;
    c->free += to_free;
    return to_free;
}
static void c_detach(void *u, size_t i)
{
    card *c = u;
    c->free += (double)c->m[i].loaded;
}

static void test_free_memory_versions(void **st)
{
    (void)st;
    /* V6: B (most offloaded), C (smaller), A. */
    comem_calc_model m[3] = {
        {.size = 300LL << 20, .loaded = 300LL << 20},
        {.size = 6LL << 30, .loaded = 4LL << 30},
        {.size = 2LL << 30, .loaded = 2LL << 30},
    };
    size_t order[3], n_order, n_un;
    comem_calc_unload un[3];
    for (int r = 0; r <= 1; r++) {
        card c = {.free = 1 * GIB, .m = m};
        assert_int_equal(comem_calc_free_memory(r, 7 * GIB, 0, 0, m, 3, c_free, c_partial, c_detach, &c, order,
                                                &n_order, un, &n_un, NULL),
                         COMEM_OK);
        assert_int_equal(n_order, 3);
        assert_true(order[0] == 1 && order[1] == 0 && order[2] == 2);
        /* B is asked 6 GiB, more than its 4 GiB resident: detached; C too; A, asked 1.7 GiB, partially. */
        assert_int_equal(n_un, 3);
        assert_true(un[0].entry == 1 && un[0].detached && un[1].entry == 0 && un[1].detached);
        assert_true(un[2].entry == 2 && !un[2].detached);
        /* Current rules measure once per candidate; the snapshot stops measuring once covered. */
        assert_int_equal(c.reads, 3);
    }
    /* Exactly covered: the snapshot still calls model_unload(0) (a partial of 0 bytes), current skips. */
    comem_calc_model one[1] = {{.size = 1LL << 30, .loaded = 1LL << 30}};
    card c = {.free = 2 * GIB, .m = one};
    assert_int_equal(comem_calc_free_memory(COMEM_COMFYUI_A125CD84, 2 * GIB, 0, 0, one, 1, c_free, c_partial,
                                            c_detach, &c, order, &n_order, un, &n_un, NULL),
                     COMEM_OK);
    assert_int_equal(n_un, 1);
    assert_true(un[0].asked == 0 && !un[0].detached && c.partials == 1 && c.partial_asked[0] == 0);
    c = (card){.free = 2 * GIB, .m = one};
    assert_int_equal(comem_calc_free_memory(COMEM_COMFYUI_CURRENT, 2 * GIB, 0, 0, one, 1, c_free, c_partial,
                                            c_detach, &c, order, &n_order, un, &n_un, NULL),
                     COMEM_OK);
    assert_int_equal(n_un, 0);
    /* A fully offloaded entry with nothing to free: the snapshot detaches it (0 is not < 0 loaded). */
    comem_calc_model off[1] = {{.size = 1LL << 30, .loaded = 0}};
    c = (card){.free = 2 * GIB, .m = off};
    assert_int_equal(comem_calc_free_memory(COMEM_COMFYUI_A125CD84, 2 * GIB, 0, 0, off, 1, c_free, c_partial,
                                            c_detach, &c, order, &n_order, un, &n_un, NULL),
                     COMEM_OK);
    assert_true(n_un == 1 && un[0].detached && c.partials == 0);
    /* The snapshot has neither device None candidates nor for_dynamic. */
    c = (card){.free = 0, .m = m};
    assert_int_equal(comem_calc_free_memory(COMEM_COMFYUI_A125CD84, 8 * GIB, 0, COMEM_CALC_DEVICE_NONE, m, 3, c_free,
                                            c_partial, c_detach, &c, order, &n_order, un, &n_un, NULL),
                     COMEM_OK);
    assert_true(n_order == 0 && n_un == 0);
    assert_int_equal(comem_calc_free_memory(COMEM_COMFYUI_A125CD84, 8 * GIB, 0, COMEM_CALC_FOR_DYNAMIC, m, 3, c_free,
                                            c_partial, c_detach, &c, order, &n_order, un, &n_un, NULL),
                     COMEM_EINVAL);
    /* Smart memory off: every candidate detached, no partial tried, in both. */
    for (int r = 0; r <= 1; r++) {
        c = (card){.free = 100 * GIB, .m = m};
        assert_int_equal(comem_calc_free_memory(r, 0, 0, COMEM_CALC_NO_SMART_MEMORY, m, 3, NULL, c_partial, c_detach,
                                                &c, order, &n_order, un, &n_un, NULL),
                         COMEM_OK);
        assert_true(n_un == 3 && un[0].detached && un[1].detached && un[2].detached && c.partials == 0);
    }
    assert_int_equal(comem_calc_free_memory(0, 0, 0, 0, m, 3, NULL, NULL, NULL, NULL, order, &n_order, un, &n_un,
                                            NULL),
                     COMEM_EINVAL); /* smart memory needs a measurement */
    assert_int_equal(comem_calc_free_memory(5, 0, 0, 0, NULL, 0, c_free, NULL, NULL, &c, order, &n_order, un, &n_un,
                                            NULL),
                     COMEM_EINVAL);
}

static void test_empty_cache(void **st)
{
    (void)st;
    assert_int_equal(comem_calc_should_empty_cache(1, 0, COMEM_CALC_VRAM_HIGH, 0, 0), 1);
    assert_int_equal(comem_calc_should_empty_cache(0, 0, COMEM_CALC_VRAM_NORMAL, 4.0 * GIB, 1.0 * GIB), 0);
    assert_int_equal(comem_calc_should_empty_cache(0, 0, COMEM_CALC_VRAM_NORMAL, 4.0 * GIB, 1.0 * GIB + 1), 1);
    assert_int_equal(comem_calc_should_empty_cache(0, 0, COMEM_CALC_VRAM_HIGH, 4.0 * GIB, 3.0 * GIB), 0);
}

static void test_load_order(void **st)
{
    (void)st;
    /* load_models_gpu([A, B, A]) where B's model_patches_models() is [C]: visited A, B, C, A. */
    uint64_t ids[4] = {7, 8, 9, 7};
    size_t order[4], n;
    assert_int_equal(comem_calc_load_order(COMEM_COMFYUI_783545F6, ids, 4, order, &n), COMEM_OK);
    assert_int_equal(n, 3);
    assert_true(order[0] == 2 && order[1] == 1 && order[2] == 0); /* C, B, A */
    assert_int_equal(comem_calc_load_order(COMEM_COMFYUI_CURRENT, ids, 0, order, &n), COMEM_OK);
    assert_int_equal(n, 0);
    assert_int_equal(comem_calc_load_order(COMEM_COMFYUI_A125CD84, ids, 4, order, &n), COMEM_ENOTSUP);
}

/* Records each pin free; every model gives up to what it is asked, 1 GiB at most. */
typedef struct pins {
    size_t model[8];
    unsigned subsets[8];
    int unregister[8];
    int n;
} pins;

static double p_free(void *u, size_t model, double size, unsigned subsets, int unregister)
{
    pins *p = u;
    p->model[p->n] = model;
    p->subsets[p->n] = subsets;
    p->unregister[p->n++] = unregister;
    return size < GIB ? size : GIB;
}

static void test_pins(void **st)
{
    (void)st;
    const unsigned pin = COMEM_CALC_PINS_WEIGHTS | COMEM_CALC_PINS_PATCHES;
    const unsigned loaded = COMEM_CALC_PINS_WEIGHTS_LOADED | COMEM_CALC_PINS_PATCHES_LOADED;
    /* V7-cgroup24: 783545f6 counts the host's swap under a cgroup limit too. */
    assert_true(comem_calc_max_pinned(1, 0, 24 * GIB, 64LL << 30) == 21474836480.0);
    assert_true(comem_calc_max_pinned(0, 0, 24 * GIB, 0) == -1.0);
    assert_int_equal(comem_calc_pinned_hostbuf_size(1 * GIB, 0.4 * GIB, 0), 858993459);
    /* The pin step follows the unloads unless the load is dynamic; a125cd84 has none. */
    assert_int_equal(comem_calc_free_memory_ensures_pins(COMEM_COMFYUI_CURRENT, 0, 1), 1);
    assert_int_equal(comem_calc_free_memory_ensures_pins(COMEM_COMFYUI_783545F6, COMEM_CALC_FOR_DYNAMIC, 1), 0);
    assert_int_equal(comem_calc_free_memory_ensures_pins(COMEM_COMFYUI_783545F6, 0, 0), 0);
    assert_int_equal(comem_calc_free_memory_ensures_pins(COMEM_COMFYUI_A125CD84, 0, 1), 0);
    /* A dynamic model outside the prompt, one inside it, one not dynamic (skipped). */
    uint32_t m[3] = {COMEM_CALC_PIN_MODEL_DYNAMIC, COMEM_CALC_PIN_MODEL_DYNAMIC | COMEM_CALC_PIN_MODEL_CURRENT_PROMPT,
                     0};
    pins p = {.n = 0};
    double freed;
    assert_int_equal(comem_calc_free_pins(COMEM_COMFYUI_783545F6, 0, 4 * GIB, m, 3, p_free, &p, &freed), COMEM_OK);
    /* Rungs: (PIN, not prompt), (LOADED, not prompt), (LOADED, prompt), (PIN, prompt, inactive). */
    assert_int_equal(p.n, 4);
    assert_true(p.model[0] == 0 && p.subsets[0] == pin && p.model[1] == 0 && p.subsets[1] == loaded);
    assert_true(p.model[2] == 1 && p.subsets[2] == loaded && p.model[3] == 1 && p.subsets[3] == pin);
    assert_true(freed == 4 * GIB && !p.unregister[0]);
    /* --fast-disk: the RAM gate compares against the ceiling. 20 + 1 - 20.5 GiB short: evicts. */
    int ok = -1;
    double shortfall = 0;
    p.n = 0;
    assert_int_equal(comem_calc_ensure_pin_budget(COMEM_COMFYUI_CURRENT, COMEM_CALC_PIN_FAST_DISK, 1 * GIB, 0, 1e15,
                                                  20 * GIB, 20.5 * GIB, m, 3, p_free, &p, &ok, &shortfall),
                     COMEM_OK);
    assert_true(shortfall == 0.5 * GIB && ok == 1 && p.n == 1);
    /* Registrations only unregister, never destroy. */
    p.n = 0;
    assert_int_equal(comem_calc_ensure_pin_registerable(COMEM_COMFYUI_783545F6, 0, 20 * GIB, 1 * GIB, 20.5 * GIB, m, 3,
                                                        p_free, &p, &ok),
                     COMEM_OK);
    assert_true(p.n == 2 && p.unregister[0] && p.unregister[1]); /* evict_active off: two rungs */
    assert_true(p.subsets[0] == (pin | loaded) && ok == 1);
    assert_int_equal(comem_calc_free_pins(COMEM_COMFYUI_A125CD84, 0, 1, m, 3, p_free, &p, &freed), COMEM_ENOTSUP);
    /* v0.39: the fast pool of the model outside the prompt goes first; the same walk has six rungs. */
    const unsigned fast = COMEM_CALC_PINS_WEIGHTS_FAST | COMEM_CALC_PINS_PATCHES_FAST;
    p.n = 0;
    assert_int_equal(comem_calc_free_pins(COMEM_COMFYUI_V039, 0, 8 * GIB, m, 3, p_free, &p, &freed), COMEM_OK);
    assert_int_equal(p.n, 6);
    assert_true(p.model[0] == 0 && p.subsets[0] == fast && p.model[3] == 1 && p.subsets[3] == fast);
    /* v0.39's gate ignores --fast-disk: 1 GiB + the 2 GiB floor - 1e15 available passes without a walk. */
    p.n = 0;
    assert_int_equal(comem_calc_ensure_pin_budget(COMEM_COMFYUI_V039, COMEM_CALC_PIN_FAST_DISK, 1 * GIB, 0, 1e15,
                                                  20 * GIB, 20.5 * GIB, m, 3, p_free, &p, &ok, &shortfall),
                     COMEM_OK);
    assert_true(ok == 1 && p.n == 0 && shortfall < 0);
    /* v0.39 registrations destroy the fast pool, then unregister the rest. */
    p.n = 0;
    assert_int_equal(comem_calc_ensure_pin_registerable(COMEM_COMFYUI_V039, 0, 20 * GIB, 1 * GIB, 20.5 * GIB, m, 3,
                                                        p_free, &p, &ok),
                     COMEM_OK);
    assert_true(p.n >= 1 && p.subsets[0] == fast && !p.unregister[0]);
    /* The ceiling by version: under a cgroup limit v0.39 counts no swap (16 GiB, 8 GiB swap). */
    double max = 0;
    assert_int_equal(comem_calc_max_pinned_of(COMEM_COMFYUI_783545F6, 1, 0, 16 * GIB, 8LL << 30, 1, &max), COMEM_OK);
    assert_true(max == 8 * GIB);
    assert_int_equal(comem_calc_max_pinned_of(COMEM_COMFYUI_V039, 1, 0, 16 * GIB, 8LL << 30, 1, &max), COMEM_OK);
    assert_true(max == 16 * GIB * 0.40);
    assert_int_equal(comem_calc_max_pinned_of(COMEM_COMFYUI_A125CD84, 1, 0, 16 * GIB, 0, 0, &max), COMEM_ENOTSUP);
    assert_int_equal(comem_calc_max_pinned_of(9, 1, 0, 16 * GIB, 0, 0, &max), COMEM_EINVAL);
    assert_int_equal(comem_calc_max_pinned_of(COMEM_COMFYUI_V039, 1, 0, 16 * GIB, 0, 0, NULL), COMEM_EINVAL);
    assert_int_equal(comem_calc_should_free_pins_for_ram_pressure(1, 1, 1e12, 0, 0), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_and_admission), cmocka_unit_test(test_load_needs),
        cmocka_unit_test(test_lowvram_versions),      cmocka_unit_test(test_free_memory_versions),
        cmocka_unit_test(test_empty_cache),           cmocka_unit_test(test_load_order),
        cmocka_unit_test(test_pins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
