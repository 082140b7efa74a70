/*
 * pager/evict.c - committing and evicting pages: the transient-retry loop,
 * eviction batches with their syncs, and the watermark walk that every
 * reclaim (faults, release asks, free_memory) goes through.
 *
 * Eviction order (aimdo's): across VBARs the lowest priority first; within a
 * VBAR from the top down, taking the page just below the watermark and
 * lowering the watermark by one even when that page is absent or pinned, so
 * a model settles into a resident prefix. Never below the VBAR's limit (an
 * idle release excepted), never a pinned page.
 *
 * Synchronisation: a batch syncs the backend once before its first unmap (no
 * kernel may still read a page being unmapped) and once after its last (a
 * fence, as aimdo does), and nothing else: the driver's cost is per mapping
 * (about 45 us to set access and 60 us to unmap and release one, measured on
 * an H200), so one sync per batch is all the batching there is to have. All
 * of it runs under the pager lock: a fault waits for an eviction in progress
 * rather than seeing a page half gone. The cost of that: an eviction from the
 * client's callback thread holds the lock through a whole-context sync, so the owner's
 * next fault waits until the kernels queued before it have finished.
 *
 * The kept pool (keep.c): an eviction puts its page's memory in the pool
 * unless its batch gives memory back; a commit maps kept memory of its size
 * before it creates any.
 *
 * Transient commit failures (F13) are retried up to PAGER_TRANSIENT_RETRIES
 * times, sleeping 50 us doubling to at most 2 ms between tries (about 7 ms
 * in all, under the lock), then reported as COMEM_EDRIVER.
 */
#include <time.h>

#include "base/bytes.h"
#include "base/log.h"
#include "comem/common.h"
#include "pager/pager_internal.h"

/* Sleeps between transient retries: none before the first, then 50 us doubling, at most 2 ms. */
static void backoff(int attempt)
{
    if (attempt == 0)
        return;
    long us = 50L << (attempt - 1 < 6 ? attempt - 1 : 6);
    if (us > 2000)
        us = 2000;
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

int comem_pager_commit_page(comem_pager *p, comem_vbar *v, int64_t idx)
{
    pager_page *pg = &v->pages[idx];
    uint64_t va = v->base + (uint64_t)(idx * v->page_size);
    uint64_t handle = 0;
    int rc;
    if (comem_pager_take_kept(p, v->page_size, &handle)) {
        rc = p->vmm->ops->remap(p->vmm, va, v->page_size, handle);
        if (rc == COMEM_OK) {
            p->stats[COMEM_PAGER_STAT_REUSED]++;
            goto committed;
        }
        comem_pager_drop_kept(p, v->page_size, handle); /* a fresh commit instead */
        comem_debug("pager: vbar %llu page %lld: kept memory would not map (%s); committing afresh",
                    (unsigned long long)v->id, (long long)idx, comem_status_str(rc));
    }
    for (int attempt = 0;; attempt++) {
        backoff(attempt);
        rc = p->vmm->ops->commit(p->vmm, va, v->page_size, &handle);
        if (rc != COMEM_EBUSY)
            break;
        if (attempt == PAGER_TRANSIENT_RETRIES) {
            comem_warn("pager: vbar %llu page %lld: the device stayed not ready through %d retries",
                       (unsigned long long)v->id, (long long)idx, PAGER_TRANSIENT_RETRIES);
            return COMEM_EDRIVER;
        }
        p->stats[COMEM_PAGER_STAT_TRANSIENT_RETRIES]++;
        comem_debug("pager: vbar %llu page %lld: transient commit failure, retrying", (unsigned long long)v->id,
                    (long long)idx);
    }
    if (rc != COMEM_OK)
        return rc;
committed:
    pg->handle = handle;
    pg->resident = true;
    pg->serial++;
    if (pg->serial == 0)
        pg->serial = 1; /* 0 never names a commit: a caller may use it for "nothing saved" */
    v->resident_count++;
    p->usage = comem_add(p->usage, v->page_size);
    p->stats[COMEM_PAGER_STAT_COMMITS]++;
    return COMEM_OK;
}

void comem_pager_evict_page(comem_pager *p, comem_vbar *v, int64_t idx, pager_batch *b)
{
    pager_page *pg = &v->pages[idx];
    if (!b->synced) {
        int rc = p->vmm->ops->sync(p->vmm);
        if (rc != COMEM_OK)
            comem_warn("pager: sync before evicting failed: %s", comem_status_str(rc));
        p->stats[COMEM_PAGER_STAT_SYNCS]++;
        b->synced = true;
    }
    uint64_t va = v->base + (uint64_t)(idx * v->page_size);
    if (b->give_back || !comem_pager_keep_page(p, va, v->page_size, pg->handle))
        p->vmm->ops->evict(p->vmm, va, v->page_size, pg->handle);
    pg->handle = 0;
    pg->resident = false;
    pg->pins = 0;
    v->resident_count--;
    p->usage = comem_sub(p->usage, v->page_size);
    b->freed = comem_add(b->freed, v->page_size);
    p->stats[COMEM_PAGER_STAT_EVICTIONS]++;
}

void comem_pager_batch_end(comem_pager *p, pager_batch *b)
{
    if (!b->synced)
        return;
    int rc = p->vmm->ops->sync(p->vmm);
    if (rc != COMEM_OK)
        comem_warn("pager: sync after evicting failed: %s", comem_status_str(rc));
    p->stats[COMEM_PAGER_STAT_SYNCS]++;
    b->synced = false;
}

static bool stopped(const comem_vbar *stop, int64_t stop_page) { return stop && stop->watermark < stop_page; }

bool comem_pager_lower(comem_pager *p, comem_vbar *v, int64_t floor, int64_t want, pager_batch *b,
                       const comem_vbar *stop, int64_t stop_page)
{
    while (v->watermark > floor && b->freed < want && !stopped(stop, stop_page)) {
        int64_t idx = --v->watermark;
        const pager_page *pg = &v->pages[idx];
        if (pg->resident && pg->pins == 0)
            comem_pager_evict_page(p, v, idx, b);
    }
    return stopped(stop, stop_page);
}

int64_t comem_pager_free_lowest(comem_pager *p, int64_t bytes, int how, const comem_vbar *stop, int64_t stop_page)
{
    if (bytes <= 0)
        return 0;
    pager_batch b = {.give_back = how & PAGER_GIVE_BACK};
    if (b.give_back)
        b.freed = comem_pager_drain_kept(p, bytes);
    for (comem_vbar *v = p->bottom; v && b.freed < bytes; v = v->higher)
        if (comem_pager_lower(p, v, how & PAGER_IGNORE_LIMITS ? 0 : v->limit, bytes, &b, stop, stop_page))
            break;
    comem_pager_batch_end(p, &b);
    return b.freed;
}

void comem_pager_evict_all(comem_pager *p, comem_vbar *v)
{
    pager_batch b = {0};
    for (int64_t i = 0; i < v->nr_pages; i++)
        if (v->pages[i].resident)
            comem_pager_evict_page(p, v, i, &b);
    comem_pager_batch_end(p, &b);
}
