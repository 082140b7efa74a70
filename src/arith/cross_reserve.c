/* arith/cross_reserve.c - comfy-env's charge, total, shrink rule, ask target and forwards. */
#include "arith/cross_reserve.h"

#include "arith/reserve.h"
#include "base/bytes.h"

int64_t comem_charge(int64_t residency, bool process_local_free, int64_t floor)
{
    if (!process_local_free)
        return 0; /* a device-wide reading already sees the worker */
    return comem_add(floor, comem_clamp0(residency));
}

int64_t comem_total_reserve(int64_t base, const int64_t *charges, size_t n, int64_t device_total)
{
    int64_t total = comem_clamp0(base);
    for (size_t i = 0; i < n; i++)
        total = comem_add(total, comem_clamp0(charges[i]));
    if (device_total != 0)
        total = comem_min(total, comem_trunc((double)device_total * 0.75));
    return total;
}

int64_t comem_next_reserve(int64_t current, int64_t proposed, bool shrink_allowed)
{
    current = comem_clamp0(current);
    proposed = comem_clamp0(proposed);
    if (proposed >= current)
        return proposed;
    return shrink_allowed ? proposed : current;
}

int64_t comem_ask_target(int64_t weights, double slack, int64_t min_inference,
                         int64_t extra_reserved, int64_t want_inference)
{
    int64_t w = comem_clamp0(weights);
    int64_t scaled = comem_trunc((double)w * slack);
    return comem_add(scaled, comem_max(min_inference, comem_add(want_inference, extra_reserved)));
}

int64_t comem_admit_target(int64_t weights, int64_t working, int64_t reserve)
{
    int64_t min_inference = comem_trunc(comem_minimum_inference_memory((double)reserve));
    return comem_ask_target(weights, COMEM_WEIGHT_SLACK, min_inference, reserve, working);
}

/* Whether weights fit's scaled term is at least short_by below full's. */
static bool fit_covers(int64_t full, int64_t fit, int64_t short_by)
{
    return comem_sub(full, comem_trunc((double)fit * COMEM_WEIGHT_SLACK)) >= short_by;
}

int64_t comem_admit_fitting(int64_t weights, int64_t short_by)
{
    int64_t w = comem_clamp0(weights);
    if (short_by <= 0)
        return w;
    int64_t full = comem_trunc((double)w * COMEM_WEIGHT_SLACK);
    /* A saturated term (weights over ~7.4 EiB: an absurd request) hides the target's fixed part, so
       no part can be said to fit; a target saturated by that fixed part alone only errs low. */
    if (full == INT64_MAX || !fit_covers(full, 0, short_by))
        return 0;
    /* The largest fit in [0, w] that covers: a bisection, 63 steps at most (a step-down from the
       quotient walked ~2^59 values near saturation). */
    int64_t lo = 0, hi = w;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2 + (hi - lo) % 2;
        if (fit_covers(full, mid, short_by))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

int64_t comem_pager_headroom_forward(bool seed_set, int64_t seed, int64_t published, int64_t base)
{
    if (!seed_set)
        seed = COMEM_PAGER_DEFAULT_HEADROOM;
    int64_t added = comem_clamp0(comem_sub(published, comem_clamp0(base)));
    return comem_add(comem_clamp0(seed), added);
}

int64_t comem_reserve_for_requester(int64_t published, int64_t own_charge)
{
    return comem_clamp0(comem_sub(published, comem_clamp0(own_charge)));
}

int64_t comem_forward_cast_need(int64_t largest_tensor, int64_t num_streams)
{
    if (largest_tensor == 0 || num_streams == 0)
        return 0;
    return comem_mul(comem_clamp0(num_streams), comem_clamp0(largest_tensor));
}

int64_t comem_held_from_snapshot(const comem_held_worker *workers, size_t n, int64_t floor,
                                 bool cap_set, int64_t cap)
{
    int64_t total = 0;
    for (size_t w = 0; w < n; w++) {
        const comem_held_worker *wk = &workers[w];
        for (size_t m = 0; m < wk->n_models; m++) {
            const comem_held_model *md = &wk->models[m];
            int64_t held = comem_max(md->ledger, md->peak);
            if (wk->in_flight)
                held = comem_max(md->size, held);
            total = comem_add(total, held);
        }
        int64_t excess = wk->excess_known ? comem_clamp0(wk->excess) : 0;
        if (cap_set)
            excess = comem_min(excess, comem_clamp0(comem_sub(cap, floor)));
        /* floor and excess add: the allocator's own figure cannot see the context */
        total = comem_add(total, comem_add(floor, excess));
    }
    return total;
}
