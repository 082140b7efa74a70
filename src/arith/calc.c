/*
 * arith/calc.c - the public face of the rules (comem/calc.h): plain C types in, the arith/
 * functions applied, plain C types out. No rule is computed here; it only translates.
 */
#include "comem/calc.h"

#include <stdlib.h>

#include "arith/admission.h"
#include "arith/comfy_a125cd84.h"
#include "arith/evict.h"
#include "arith/lowvram.h"
#include "arith/pinned.h"
#include "arith/reserve.h"

static bool known_rules(int rules)
{
    return rules == COMEM_COMFYUI_CURRENT || rules == COMEM_COMFYUI_A125CD84 || rules == COMEM_COMFYUI_783545F6 ||
           rules == COMEM_COMFYUI_V039;
}
_Static_assert(COMEM_CALC_PINS_WEIGHTS == COMEM_PIN_WEIGHTS && COMEM_CALC_PINS_PATCHES == COMEM_PIN_PATCHES &&
                   COMEM_CALC_PINS_WEIGHTS_LOADED == COMEM_PIN_WEIGHTS_LOADED &&
                   COMEM_CALC_PINS_PATCHES_LOADED == COMEM_PIN_PATCHES_LOADED &&
                   COMEM_CALC_PINS_WEIGHTS_FAST == COMEM_PIN_WEIGHTS_FAST &&
                   COMEM_CALC_PINS_PATCHES_FAST == COMEM_PIN_PATCHES_FAST,
               "calc.h's subset bits are arith's");

/* CURRENT and 783545F6 name the same rules today; the snapshot's differ, and v0.39's pin rules. */
static bool snapshot(int rules) { return rules == COMEM_COMFYUI_A125CD84; }
static comem_pin_era pin_era(int rules)
{
    return rules == COMEM_COMFYUI_V039 ? COMEM_PIN_ERA_V039 : COMEM_PIN_ERA_783545F6;
}
static bool known_state(int s) { return s >= COMEM_CALC_VRAM_DISABLED && s <= COMEM_CALC_VRAM_SHARED; }

COMEM_API int comem_calc_reserve(int windows, double total_vram_mib, int reserve_vram_set, double reserve_vram_gb,
                                 double *reserve, double *minimum_inference)
{
    comem_reserve_opts o = {.windows = windows != 0,
                            .total_vram_mib = total_vram_mib,
                            .reserve_vram_set = reserve_vram_set != 0,
                            .reserve_vram_gb = reserve_vram_gb};
    double r = comem_extra_reserved_vram(&o);
    if (reserve)
        *reserve = r;
    if (minimum_inference)
        *minimum_inference = comem_minimum_inference_memory(r);
    return COMEM_OK;
}

COMEM_API int comem_calc_admission(double memory_required, int has_minimum, double minimum_memory_required,
                                   double reserve, double *minimum_inference, double *extra_mem, double *mmr)
{
    comem_admission_targets t;
    comem_admission_targets_compute(memory_required, has_minimum != 0, minimum_memory_required, reserve, &t);
    if (minimum_inference)
        *minimum_inference = t.inference;
    if (extra_mem)
        *extra_mem = t.extra_mem;
    if (mmr)
        *mmr = t.mmr;
    return COMEM_OK;
}

COMEM_API double comem_calc_nothing_budget(void) { return COMEM_LOAD_NOTHING_BUDGET; }

COMEM_API double comem_calc_full_load_sentinel(void) { return COMEM_FULL_LOAD_SENTINEL; }

COMEM_API double comem_calc_free_target(double need, double extra_mem)
{
    return comem_admission_free_target(need, extra_mem);
}

COMEM_API int comem_calc_needs_second_pass(double free_now, double mmr)
{
    return comem_admission_needs_second_pass(free_now, mmr) ? 1 : 0;
}

COMEM_API int comem_calc_load_needs(const comem_calc_model *models, size_t n, int32_t *devices, int64_t *need,
                                    int64_t *pins, size_t cap, size_t *n_rows, int *free_for_dynamic)
{
    if ((n && !models) || (cap && (!devices || !need || !pins)) || !n_rows || !free_for_dynamic)
        return COMEM_EINVAL;
    comem_load_model *lm = calloc(n ? n : 1, sizeof *lm);
    comem_device_need *rows = calloc(cap ? cap : 1, sizeof *rows);
    int rc = COMEM_ENOMEM;
    if (lm && rows) {
        for (size_t i = 0; i < n; i++)
            lm[i] = (comem_load_model){.size = models[i].size,
                                       .loaded = models[i].loaded,
                                       .load_device = models[i].device,
                                       .current_device = models[i].current_device,
                                       .dynamic = (models[i].flags & COMEM_CALC_DYNAMIC) != 0};
        bool all_dynamic = false;
        rc = comem_admission_needs(lm, n, rows, cap, n_rows, &all_dynamic);
        if (rc == COMEM_OK) {
            for (size_t r = 0; r < *n_rows; r++) {
                devices[r] = rows[r].device;
                need[r] = rows[r].need;
                pins[r] = rows[r].pins;
            }
            *free_for_dynamic = all_dynamic ? 1 : 0;
        }
    }
    free(lm);
    free(rows);
    return rc;
}

COMEM_API int comem_calc_load_order(int rules, const uint64_t *ids, size_t n, size_t *order, size_t *n_order)
{
    if (!known_rules(rules) || (n && (!ids || !order)) || !n_order)
        return COMEM_EINVAL;
    if (snapshot(rules))
        return COMEM_ENOTSUP;
    return comem_admission_load_order(ids, n, order, n_order);
}

COMEM_API int comem_calc_lowvram_budget(int rules, int vram_state, unsigned flags, double free_now, double loaded,
                                        double mmr, double inference, double ratio, int *kind, double *budget)
{
    if (!known_rules(rules) || !known_state(vram_state) || !kind || !budget)
        return COMEM_EINVAL;
    comem_lowvram_in in = {
        .vram_state = (comem_vram_state)vram_state,
        .load_device_is_cpu = (flags & COMEM_CALC_LOAD_DEVICE_CPU) != 0,
        .lowvram_available = (flags & COMEM_CALC_NO_LOWVRAM) == 0,
        .force_full_load = (flags & COMEM_CALC_FORCE_FULL_LOAD) != 0,
        .free = free_now,
        .loaded = loaded,
        .mmr = mmr,
        .inference = inference,
        .ratio = ratio,
    };
    comem_budget b = snapshot(rules) ? comem_lowvram_budget_a125cd84(&in) : comem_lowvram_budget(&in);
    *kind = b.kind == COMEM_BUDGET_FULL      ? COMEM_CALC_BUDGET_FULL
            : b.kind == COMEM_BUDGET_NOTHING ? COMEM_CALC_BUDGET_NOTHING
                                             : COMEM_CALC_BUDGET_BYTES;
    *budget = b.value;
    return COMEM_OK;
}

/* The public callbacks behind arith's ops table. */
typedef struct calc_ops {
    comem_calc_free_fn free_now;
    comem_calc_partial_fn partial;
    comem_calc_detach_fn detach;
    void *user;
} calc_ops;

static double ops_free(void *u) { return ((calc_ops *)u)->free_now(((calc_ops *)u)->user); }
static double ops_partial(void *u, size_t i, double f) { return ((calc_ops *)u)->partial(((calc_ops *)u)->user, i, f); }
static void ops_detach(void *u, size_t i) { ((calc_ops *)u)->detach(((calc_ops *)u)->user, i); }

COMEM_API int comem_calc_free_memory(int rules, double memory_required, int device, unsigned flags,
                                     const comem_calc_model *models, size_t n, comem_calc_free_fn free_now,
                                     comem_calc_partial_fn partial, comem_calc_detach_fn detach, void *user,
                                     size_t *order, size_t *n_order, comem_calc_unload *unloads, size_t *n_unloads,
                                     double *required_after)
{
    if (!known_rules(rules) || (n && (!models || !order || !unloads)) || !n_order || !n_unloads)
        return COMEM_EINVAL;
    comem_evict_entry *entries = calloc(n ? n : 1, sizeof *entries);
    comem_evict_action *actions = calloc(n ? n : 1, sizeof *actions);
    if (!entries || !actions) {
        free(entries);
        free(actions);
        return COMEM_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        entries[i] = (comem_evict_entry){.size = models[i].size,
                                         .loaded = models[i].loaded,
                                         .refs = models[i].refs,
                                         .device = models[i].device,
                                         .dynamic = (models[i].flags & COMEM_CALC_DYNAMIC) != 0,
                                         .keep = (models[i].flags & COMEM_CALC_KEEP) != 0,
                                         .dead = (models[i].flags & COMEM_CALC_DEAD) != 0};
    comem_evict_request req = {
        .required = memory_required,
        .device_none = (flags & COMEM_CALC_DEVICE_NONE) != 0,
        .device = device,
        .for_dynamic = (flags & COMEM_CALC_FOR_DYNAMIC) != 0,
        .smart_memory = (flags & COMEM_CALC_NO_SMART_MEMORY) == 0,
    };
    calc_ops co = {.free_now = free_now, .partial = partial, .detach = detach, .user = user};
    comem_evict_ops ops = {.free_now = free_now ? ops_free : NULL,
                           .partial = partial ? ops_partial : NULL,
                           .detach = detach ? ops_detach : NULL,
                           .user = &co};
    comem_evict_result res;
    int rc = snapshot(rules) ? comem_evict_run_a125cd84(&req, entries, n, &ops, order, actions, &res)
                                             : comem_evict_run(&req, entries, n, &ops, order, actions, &res);
    if (rc == COMEM_OK) {
        for (size_t k = 0; k < res.n_actions; k++)
            unloads[k] = (comem_calc_unload){.entry = actions[k].entry,
                                             .asked = actions[k].asked,
                                             .partial_freed = actions[k].partial_freed,
                                             .detached = actions[k].kind == COMEM_EVICT_DETACH,
                                             .tried_partial = actions[k].tried_partial};
        *n_order = res.n_order;
        *n_unloads = res.n_actions;
        if (required_after)
            *required_after = res.required_after;
    }
    free(entries);
    free(actions);
    return rc;
}

COMEM_API int comem_calc_free_memory_ensures_pins(int rules, unsigned flags, double pins_required)
{
    if (!known_rules(rules))
        return COMEM_EINVAL;
    return !snapshot(rules) && comem_evict_ensures_pins((flags & COMEM_CALC_FOR_DYNAMIC) != 0, pins_required);
}

COMEM_API int comem_calc_should_empty_cache(int unloaded_any, int device_none, int vram_state, double free_total,
                                            double free_torch)
{
    return comem_should_empty_cache(unloaded_any != 0, device_none != 0, (comem_vram_state)vram_state, free_total,
                                    free_torch)
               ? 1
               : 0;
}

/* ---- pinned host RAM ---- */

COMEM_API double comem_calc_max_pinned(int enabled, int windows, double ram, int64_t disk_swap)
{
    comem_pin_ceiling_in in = {.ram = ram, .disk_swap = disk_swap, .windows = windows != 0, .enabled = enabled != 0};
    return comem_max_pinned(&in);
}

COMEM_API int comem_calc_max_pinned_of(int rules, int enabled, int windows, double ram, int64_t disk_swap,
                                       int cgroup_limited, double *max_pinned)
{
    if (!known_rules(rules) || !max_pinned)
        return COMEM_EINVAL;
    if (snapshot(rules))
        return COMEM_ENOTSUP;
    comem_pin_ceiling_in in = {.ram = ram,
                               .disk_swap = disk_swap,
                               .windows = windows != 0,
                               .cgroup_limited = cgroup_limited != 0,
                               .enabled = enabled != 0,
                               .era = pin_era(rules)};
    *max_pinned = comem_max_pinned(&in);
    return COMEM_OK;
}

COMEM_API int64_t comem_calc_pinned_hostbuf_size(double size, double max_pinned, int high_ram)
{
    return comem_pinned_hostbuf_size(size, max_pinned, high_ram != 0);
}

/* The public per-model callback behind arith's per-tier one: free_model_pins over the list. */
typedef struct pin_walk {
    comem_pin_model *models;
    size_t n;
    comem_calc_pin_free_fn fn;
    void *user;
} pin_walk;

static double pin_model_free(void *u, size_t model, double size, const comem_pin_tier *tier)
{
    pin_walk *w = u;
    return w->fn(w->user, model, size, tier->subsets, tier->unregister ? 1 : 0);
}

static double pin_tier_free(void *u, double size, const comem_pin_tier *tier)
{
    pin_walk *w = u;
    return comem_free_model_pins(w->models, w->n, size, tier, pin_model_free, w);
}

/* Checks the common arguments and translates the list; pin_done() frees it. */
static int pin_begin(int rules, const uint32_t *flags, size_t n, comem_calc_pin_free_fn fn, void *user,
                     const void *out, pin_walk *w)
{
    if (!known_rules(rules) || (n && !flags) || !fn || !out)
        return COMEM_EINVAL;
    if (snapshot(rules))
        return COMEM_ENOTSUP; /* a125cd84 has no pinned budget */
    *w = (pin_walk){.models = calloc(n ? n : 1, sizeof *w->models), .n = n, .fn = fn, .user = user};
    if (!w->models)
        return COMEM_ENOMEM;
    for (size_t i = 0; i < n; i++)
        w->models[i] = (comem_pin_model){.dynamic = (flags[i] & COMEM_CALC_PIN_MODEL_DYNAMIC) != 0,
                                         .active = (flags[i] & COMEM_CALC_PIN_MODEL_ACTIVE) != 0,
                                         .current_prompt = (flags[i] & COMEM_CALC_PIN_MODEL_CURRENT_PROMPT) != 0};
    return COMEM_OK;
}

static int pin_done(pin_walk *w)
{
    free(w->models);
    return COMEM_OK;
}

COMEM_API int comem_calc_ensure_pin_budget(int rules, unsigned flags, double size, int64_t ram_cache_headroom,
                                           double available, double total_pinned, double max_pinned,
                                           const uint32_t *models, size_t n, comem_calc_pin_free_fn fn, void *user,
                                           int *passed, double *shortfall)
{
    pin_walk w;
    int rc = pin_begin(rules, models, n, fn, user, passed, &w);
    if (rc != COMEM_OK)
        return rc;
    comem_pin_budget_in in = {.era = pin_era(rules),
                              .size = size,
                              .ram_cache_headroom = ram_cache_headroom,
                              .available = available,
                              .high_ram = (flags & COMEM_CALC_PIN_HIGH_RAM) != 0,
                              .fast_disk = (flags & COMEM_CALC_PIN_FAST_DISK) != 0,
                              .total_pinned = total_pinned,
                              .max_pinned = max_pinned};
    if (shortfall) {
        comem_pin_budget_check c;
        comem_pin_budget_of(&in, &c);
        *shortfall = c.shortfall;
    }
    *passed = comem_ensure_pin_budget_of(&in, (flags & COMEM_CALC_PIN_EVICT_ACTIVE) != 0,
                                         (flags & COMEM_CALC_PIN_LOADED) != 0, pin_tier_free, &w)
                  ? 1
                  : 0;
    return pin_done(&w);
}

COMEM_API int comem_calc_free_pins(int rules, unsigned flags, double size, const uint32_t *models, size_t n,
                                   comem_calc_pin_free_fn fn, void *user, double *freed)
{
    pin_walk w;
    int rc = pin_begin(rules, models, n, fn, user, freed, &w);
    if (rc != COMEM_OK)
        return rc;
    *freed = comem_free_pins(pin_era(rules), size, (flags & COMEM_CALC_PIN_LOADED) != 0,
                             (flags & COMEM_CALC_PIN_EVICT_ACTIVE) != 0, pin_tier_free, &w);
    return pin_done(&w);
}

COMEM_API int comem_calc_free_registrations(int rules, unsigned flags, double shortfall, double max_pinned,
                                            const uint32_t *models, size_t n, comem_calc_pin_free_fn fn, void *user,
                                            int *passed)
{
    pin_walk w;
    int rc = pin_begin(rules, models, n, fn, user, passed, &w);
    if (rc != COMEM_OK)
        return rc;
    *passed = comem_free_registrations(pin_era(rules), shortfall, max_pinned,
                                       (flags & COMEM_CALC_PIN_EVICT_ACTIVE) != 0, pin_tier_free, &w)
                  ? 1
                  : 0;
    return pin_done(&w);
}

COMEM_API int comem_calc_ensure_pin_registerable(int rules, unsigned flags, double total_pinned, double size,
                                                 double max_pinned, const uint32_t *models, size_t n,
                                                 comem_calc_pin_free_fn fn, void *user, int *passed)
{
    pin_walk w;
    int rc = pin_begin(rules, models, n, fn, user, passed, &w);
    if (rc != COMEM_OK)
        return rc;
    *passed = comem_ensure_pin_registerable(pin_era(rules), total_pinned, size, max_pinned,
                                            (flags & COMEM_CALC_PIN_EVICT_ACTIVE) != 0, pin_tier_free, &w)
                  ? 1
                  : 0;
    return pin_done(&w);
}

COMEM_API int comem_calc_should_free_pins_for_ram_pressure(double shortfall, int windows, double available,
                                                           int swap_known, double swap_percent)
{
    return comem_should_free_pins_for_ram_pressure(shortfall, windows != 0, available, swap_known != 0, swap_percent)
               ? 1
               : 0;
}
