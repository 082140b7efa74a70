/*
 * pager/keep.c - the kept pool: device memory of evicted pages, unmapped but
 * not released, for the next commits of the same page size.
 *
 * Why: a commit right after an eviction of gigabytes copies slower (the
 * driver is still busy with the memory it was given back), and cuMemCreate
 * plus cuMemRelease cost about as much as mapping again. A page whose memory
 * comes from the pool is one cuMemMap and one cuMemSetAccess.
 *
 * What it costs: the pool is this process's memory on the card as much as a
 * resident page is. So it is counted wherever the pager's own bytes are (the
 * budget's held bytes: usage + kept), reported to the ledger as the holder's
 * entry "kept" while attached, and given back first:
 *   - by every eviction that must shrink what the pager holds (a deficit at a
 *     fault, a commit out of memory, a release ask from the coordinator, an
 *     idle release): the pool goes before any loaded page, and it costs
 *     nothing to give (no sync, no data lost);
 *   - when the bound is lowered (comem_pager_set_keep), and at close.
 * Evictions that make room for this pager's own pages (the walk at a fault's
 * first miss, comem_pager_free_memory, unpin above the watermark, destroy)
 * put their memory in the pool while it is under its bound, and release the
 * rest. The bound is 0 by default: nothing is kept, aimdo's behaviour.
 *
 * Every function here runs with the pager lock held.
 */
#include <stdlib.h>

#include "base/bytes.h"
#include "base/log.h"
#include "comem/pager.h"
#include "pager/pager_internal.h"

static bool can_keep(const comem_pager *p)
{
    const comem_vmm_ops *o = p->vmm->ops;
    return o->unmap_keep && o->remap && o->release;
}

bool comem_pager_keep_page(comem_pager *p, uint64_t va, int64_t size, uint64_t handle)
{
    if (!can_keep(p) || comem_add(p->kept_bytes, size) > p->keep_limit)
        return false;
    if (p->n_kept == p->cap_kept) {
        int64_t cap = p->cap_kept ? p->cap_kept * 2 : 16;
        pager_kept *k = realloc(p->kept, (size_t)cap * sizeof *k);
        if (!k)
            return false; /* released instead: the pool is an optimisation */
        p->kept = k;
        p->cap_kept = cap;
    }
    if (!p->vmm->ops->unmap_keep(p->vmm, va, size, handle))
        return true; /* the backend could not unmap it and gave the memory back: gone either way */
    p->kept[p->n_kept++] = (pager_kept){size, handle};
    p->kept_bytes = comem_add(p->kept_bytes, size);
    p->stats[COMEM_PAGER_STAT_KEPT]++;
    return true;
}

int64_t comem_pager_kept_of(const comem_pager *p, int64_t size)
{
    int64_t n = 0;
    for (int64_t i = 0; i < p->n_kept; i++)
        if (p->kept[i].size == size)
            n = comem_add(n, size);
    return n;
}

bool comem_pager_take_kept(comem_pager *p, int64_t size, uint64_t *handle)
{
    for (int64_t i = p->n_kept; i-- > 0;) /* the newest first */
        if (p->kept[i].size == size) {
            *handle = p->kept[i].handle;
            p->kept[i] = p->kept[--p->n_kept];
            p->kept_bytes = comem_sub(p->kept_bytes, size);
            return true;
        }
    return false;
}

void comem_pager_drop_kept(comem_pager *p, int64_t size, uint64_t handle)
{
    p->vmm->ops->release(p->vmm, size, handle);
}

int64_t comem_pager_drain_kept(comem_pager *p, int64_t bytes)
{
    int64_t given = 0;
    while (p->n_kept > 0 && given < bytes) {
        pager_kept k = p->kept[--p->n_kept];
        p->vmm->ops->release(p->vmm, k.size, k.handle);
        p->kept_bytes = comem_sub(p->kept_bytes, k.size);
        given = comem_add(given, k.size);
    }
    if (p->n_kept == 0) {
        free(p->kept);
        p->kept = NULL;
        p->cap_kept = 0;
    }
    return given;
}

int comem_pager_set_keep(comem_pager *p, int64_t bytes)
{
    if (!p || bytes < 0)
        return COMEM_EINVAL;
    pthread_mutex_lock(&p->lock);
    int rc = COMEM_OK;
    if (bytes > 0 && !can_keep(p))
        rc = COMEM_ENOTSUP;
    else if (p->client && bytes != p->keep_limit)
        rc = COMEM_EBUSY; /* the ledger's entry for the pool is sized at attach */
    else {
        p->keep_limit = bytes;
        if (p->kept_bytes > bytes)
            (void)comem_pager_drain_kept(p, comem_sub(p->kept_bytes, bytes));
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int64_t comem_pager_keep(comem_pager *p)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->lock);
    int64_t b = p->keep_limit;
    pthread_mutex_unlock(&p->lock);
    return b;
}

int64_t comem_pager_kept(comem_pager *p)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->lock);
    int64_t b = p->kept_bytes;
    pthread_mutex_unlock(&p->lock);
    return b;
}
