/* arith/lowvram.c - the per-model lowvram budget of load_models_gpu. */
#include "arith/lowvram.h"

#include "base/bytes.h"

comem_budget comem_lowvram_budget(const comem_lowvram_in *in)
{
    comem_vram_state state = in->load_device_is_cpu ? COMEM_VRAM_DISABLED : in->vram_state;
    double budget = 0;
    if (in->lowvram_available && (state == COMEM_VRAM_LOW || state == COMEM_VRAM_NORMAL) &&
        !in->force_full_load) {
        double cur = in->free + in->loaded;
        budget = comem_fmax(comem_fmax(0, cur - in->mmr),
                            comem_fmin(cur * in->ratio, cur - in->inference));
        budget = budget - in->loaded;
        if (budget == 0)
            budget = COMEM_LOAD_NOTHING_BUDGET;
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
