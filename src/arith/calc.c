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
#include "arith/reserve.h"

static bool known_rules(int rules) { return rules == COMEM_COMFYUI_CURRENT || rules == COMEM_COMFYUI_A125CD84; }
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
    comem_budget b = rules == COMEM_COMFYUI_A125CD84 ? comem_lowvram_budget_a125cd84(&in) : comem_lowvram_budget(&in);
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
    int rc = rules == COMEM_COMFYUI_A125CD84 ? comem_evict_run_a125cd84(&req, entries, n, &ops, order, actions, &res)
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

COMEM_API int comem_calc_should_empty_cache(int unloaded_any, int device_none, int vram_state, double free_total,
                                            double free_torch)
{
    return comem_should_empty_cache(unloaded_any != 0, device_none != 0, (comem_vram_state)vram_state, free_total,
                                    free_torch)
               ? 1
               : 0;
}
