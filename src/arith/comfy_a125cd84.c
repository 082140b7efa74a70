/* arith/comfy_a125cd84.c - free_memory and the lowvram budget as ComfyUI a125cd84 computes them. */
#include "arith/comfy_a125cd84.h"

#include "base/bytes.h"
#include "comem/common.h"

int comem_evict_run_a125cd84(const comem_evict_request *req, const comem_evict_entry *entries, size_t n,
                             const comem_evict_ops *ops, size_t *order, comem_evict_action *actions,
                             comem_evict_result *result)
{
    if (!req || (n && (!entries || !order || !actions)) || !ops || !result || req->for_dynamic)
        return COMEM_EINVAL;
    if (req->smart_memory && !req->device_none && !ops->free_now)
        return COMEM_EINVAL;
    /* `entry.device == None` holds for no entry: a walk over no device has no candidates. */
    size_t m = req->device_none ? 0 : comem_evict_order(req, entries, n, order);
    size_t n_actions = 0, n_detached = 0;
    for (size_t k = 0; k < m; k++) {
        size_t i = order[k];
        const comem_evict_entry *e = &entries[i];
        comem_evict_action *a = &actions[n_actions];
        *a = (comem_evict_action){.entry = i, .asked = COMEM_SMART_OFF_TO_FREE, .kind = COMEM_EVICT_DETACH};
        if (req->smart_memory) {
            double f = ops->free_now(ops->user);
            if (f > req->required)
                break; /* the snapshot leaves the loop, not just this candidate */
            a->asked = req->required - f;
            if (a->asked < (double)e->loaded && ops->partial) {
                a->partial_freed = ops->partial(ops->user, i, a->asked);
                if (a->partial_freed >= a->asked) {
                    a->kind = COMEM_EVICT_PARTIAL;
                    n_actions++;
                    continue;
                }
                a->tried_partial = true;
            }
        }
        /* Smart memory off passes None: a detach without a partial try (asked stays 1e32). */
        if (ops->detach)
            ops->detach(ops->user, i);
        n_actions++;
        n_detached++;
    }
    *result = (comem_evict_result){.n_order = m, .n_actions = n_actions, .n_detached = n_detached,
                                   .required_after = req->required};
    return COMEM_OK;
}

comem_budget comem_lowvram_budget_a125cd84(const comem_lowvram_in *in)
{
    comem_vram_state state = in->load_device_is_cpu ? COMEM_VRAM_DISABLED : in->vram_state;
    double budget = 0;
    if (in->lowvram_available && (state == COMEM_VRAM_LOW || state == COMEM_VRAM_NORMAL) &&
        !in->force_full_load) {
        double cur = in->free + in->loaded;
        budget = comem_fmax(comem_fmax(COMEM_A125CD84_LOWVRAM_FLOOR, cur - in->mmr),
                            comem_fmin(cur * in->ratio, cur - in->inference));
        budget = comem_fmax(COMEM_LOAD_NOTHING_BUDGET, budget - in->loaded);
    }
    if (state == COMEM_VRAM_NO)
        budget = COMEM_LOAD_NOTHING_BUDGET;

    comem_budget out = {.kind = COMEM_BUDGET_BYTES, .value = budget};
    if (budget == 0)
        out.kind = COMEM_BUDGET_FULL;
    else if (budget == COMEM_LOAD_NOTHING_BUDGET)
        out.kind = COMEM_BUDGET_NOTHING;
    return out;
}
