/* arith/evict.c - free_memory's candidate order and per-victim escalation. */
#include "arith/evict.h"

#include <stdlib.h>

#include "base/bytes.h"
#include "comem/common.h"

/* The key tuple (-offloaded, refs, size, index), compared lexicographically. */
static int key_cmp(const void *pa, const void *pb, void *ctx)
{
    const comem_evict_entry *entries = ctx;
    size_t ia = *(const size_t *)pa, ib = *(const size_t *)pb;
    const comem_evict_entry *a = &entries[ia], *b = &entries[ib];
    int64_t oa = comem_sub(a->size, a->loaded), ob = comem_sub(b->size, b->loaded);
    if (oa != ob)
        return oa > ob ? -1 : 1; /* more offloaded first */
    if (a->refs != b->refs)
        return a->refs < b->refs ? -1 : 1;
    if (a->size != b->size)
        return a->size < b->size ? -1 : 1;
    return ia < ib ? -1 : (ia > ib);
}

size_t comem_evict_order(const comem_evict_request *req, const comem_evict_entry *entries, size_t n,
                         size_t *order)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const comem_evict_entry *e = &entries[i];
        if ((!req->device_none && e->device != req->device) || e->keep || e->dead)
            continue;
        order[m++] = i;
    }
    qsort_r(order, m, sizeof *order, key_cmp, (void *)entries);
    return m;
}

int comem_evict_run(const comem_evict_request *req, const comem_evict_entry *entries, size_t n,
                    const comem_evict_ops *ops, size_t *order, comem_evict_action *actions,
                    comem_evict_result *result)
{
    if (!req || (n && (!entries || !order || !actions)) || !ops || !result)
        return COMEM_EINVAL;
    if (!req->device_none && req->smart_memory && !ops->free_now)
        return COMEM_EINVAL;

    size_t m = comem_evict_order(req, entries, n, order);
    double required = req->required;
    size_t n_actions = 0, n_detached = 0;

    for (size_t k = 0; k < m; k++) {
        size_t i = order[k];
        const comem_evict_entry *e = &entries[i];
        double to_free = COMEM_SMART_OFF_TO_FREE;
        if (req->smart_memory || req->device_none) {
            if (e->dynamic && req->for_dynamic) {
                /* Dynamic residents page on demand; count them as reclaimable instead. */
                required -= (double)e->loaded;
                to_free = 0;
            } else {
                to_free = req->device_none ? 0 : required - ops->free_now(ops->user);
            }
        }
        if (!(to_free > 0))
            continue;

        comem_evict_action a = {.entry = i, .asked = to_free};
        if (to_free < (double)e->loaded && ops->partial) {
            a.partial_freed = ops->partial(ops->user, i, to_free);
            if (a.partial_freed >= to_free) {
                a.kind = COMEM_EVICT_PARTIAL;
                actions[n_actions++] = a;
                continue;
            }
            a.tried_partial = true;
        }
        a.kind = COMEM_EVICT_DETACH;
        if (ops->detach)
            ops->detach(ops->user, i);
        actions[n_actions++] = a;
        n_detached++;
    }
    result->n_order = m;
    result->n_actions = n_actions;
    result->n_detached = n_detached;
    result->required_after = required;
    return COMEM_OK;
}

bool comem_should_empty_cache(bool unloaded_any, bool device_none, comem_vram_state state,
                              double free_total, double free_torch)
{
    if (unloaded_any)
        return true;
    if (device_none || state == COMEM_VRAM_HIGH)
        return false;
    return free_torch > free_total * 0.25;
}
