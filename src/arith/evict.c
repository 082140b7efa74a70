/* arith/evict.c - free_memory's candidate order and per-victim escalation. */
#include "arith/evict.h"

#include <stdlib.h>

#include "base/bytes.h"
#include "base/sort.h"
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
    comem_sort(order, m, sizeof *order, key_cmp, (void *)entries);
    return m;
}

/* One victim: what free_memory does for it. Returns true when an action was taken. */
static bool visit(const comem_evict_request *req, double *required, size_t i, const comem_evict_entry *e,
                  double (*free_now)(void *), double (*partial)(void *, size_t, double), void (*detach)(void *, size_t),
                  void *user, comem_evict_action *a, bool *covered)
{
    double to_free = COMEM_SMART_OFF_TO_FREE;
    *covered = false;
    if (req->smart_memory || req->device_none) {
        /* Measured for every candidate, a dynamic one passed over below included (783545f6). */
        to_free = req->device_none ? 0 : *required - free_now(user);
        if (e->dynamic && req->for_dynamic) {
            /* Dynamic residents page on demand; count them as reclaimable instead. */
            *required -= (double)e->loaded;
            to_free = 0;
        } else {
            *covered = !(to_free > 0);
        }
    }
    if (!(to_free > 0))
        return false;
    *a = (comem_evict_action){.entry = i, .asked = to_free};
    if (to_free < (double)e->loaded && partial) {
        a->partial_freed = partial(user, i, to_free);
        if (a->partial_freed >= to_free) {
            a->kind = COMEM_EVICT_PARTIAL;
            return true;
        }
        a->tried_partial = true;
    }
    a->kind = COMEM_EVICT_DETACH;
    if (detach)
        detach(user, i);
    return true;
}

int comem_evict_walk(const comem_evict_request *req, const comem_evict_walk_ops *ops, comem_evict_action *actions,
                     size_t max_actions, comem_evict_result *result)
{
    if (!req || !ops || !ops->next || !result || (max_actions && !actions))
        return COMEM_EINVAL;
    if (!req->device_none && req->smart_memory && !ops->free_now)
        return COMEM_EINVAL;
    double required = req->required;
    size_t visited = 0, n_actions = 0, n_detached = 0, i;
    comem_evict_entry e;
    while (n_actions < max_actions && ops->next(ops->user, &i, &e)) {
        visited++;
        bool covered;
        comem_evict_action *a = &actions[n_actions];
        if (visit(req, &required, i, &e, ops->free_now, ops->partial, ops->detach, ops->user, a, &covered)) {
            n_detached += a->kind == COMEM_EVICT_DETACH;
            n_actions++;
        } else if (covered && req->stop_when_covered) {
            break;
        }
    }
    *result = (comem_evict_result){.n_order = visited, .n_actions = n_actions, .n_detached = n_detached,
                                   .required_after = required};
    return COMEM_OK;
}

/* The array form walks a sorted index list. */
typedef struct array_walk {
    const comem_evict_entry *entries;
    const size_t *order;
    size_t n, pos;
    const comem_evict_ops *ops;
} array_walk;

static bool array_next(void *u, size_t *index, comem_evict_entry *e)
{
    array_walk *w = u;
    if (w->pos >= w->n)
        return false;
    *index = w->order[w->pos++];
    *e = w->entries[*index];
    return true;
}
static double array_free(void *u) { return ((array_walk *)u)->ops->free_now(((array_walk *)u)->ops->user); }
static double array_partial(void *u, size_t i, double f)
{
    return ((array_walk *)u)->ops->partial(((array_walk *)u)->ops->user, i, f);
}
static void array_detach(void *u, size_t i) { ((array_walk *)u)->ops->detach(((array_walk *)u)->ops->user, i); }

int comem_evict_run(const comem_evict_request *req, const comem_evict_entry *entries, size_t n,
                    const comem_evict_ops *ops, size_t *order, comem_evict_action *actions,
                    comem_evict_result *result)
{
    if (!req || (n && (!entries || !order || !actions)) || !ops || !result)
        return COMEM_EINVAL;
    if (!req->device_none && req->smart_memory && !ops->free_now)
        return COMEM_EINVAL;
    size_t m = comem_evict_order(req, entries, n, order);
    array_walk w = {.entries = entries, .order = order, .n = m, .ops = ops};
    comem_evict_walk_ops wops = {
        .next = array_next,
        .free_now = ops->free_now ? array_free : NULL,
        .partial = ops->partial ? array_partial : NULL,
        .detach = ops->detach ? array_detach : NULL,
        .user = &w,
    };
    comem_evict_request r = *req;
    r.stop_when_covered = false; /* ComfyUI visits every candidate */
    int rc = comem_evict_walk(&r, &wops, actions, m, result);
    result->n_order = m;
    return rc;
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

bool comem_evict_ensures_pins(bool for_dynamic, double pins_required) { return !for_dynamic && pins_required > 0; }
