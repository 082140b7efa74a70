/*
 * pager/fault.c - fault and unpin: the steps of reference/aimdo-pager.md
 * sections 1.5 and 1.6, under the pager lock.
 *
 * fault(v, [offset, offset+size)), pages [first, end):
 *   1. stopgap: evict budget_deficit(0) when positive (every fault, resident or not)
 *   2. watermark gate: end > watermark -> OFFLOADED, nothing allocated
 *   3. per page: resident -> its serial. At the first miss (page i), the
 *      miss-allocation check: surplus = capacity - (usage + need × page +
 *      simple_headroom), need being the missing pages of [i, end); evict
 *      lowest priority first until the surplus also covers every missing page
 *      of v below i (those lower pages win over this one, so room is made for
 *      them now, not one fault at a time); OFFLOADED if v's own watermark fell
 *      below end. Then commit: when budget_deficit(page) > 0 or the commit
 *      runs out of memory, evict max(deficit, page), OFFLOADED if v's
 *      watermark fell below end, else try once more; a second shortfall is
 *      COMEM_ENOSPC. Serial + 1 on each commit; signature = serial.
 *   4. all resident: one more pin on each page -> RESIDENT.
 * Pages committed before an OFFLOADED or an error stay resident, unpinned.
 *
 * Every eviction a fault starts stops as soon as v's own watermark falls
 * below end: from then on the answer is OFFLOADED whatever else is freed.
 *
 * Every fault, whatever its answer, also counts as activity (pager_client.c):
 * a faulting pager is not idle, and an attached one says so now and then.
 */
#include "base/bytes.h"
#include "base/log.h"
#include "comem/pager.h"
#include "pager/pager_internal.h"

static int64_t absent_in(const comem_vbar *v, int64_t from, int64_t to)
{
    int64_t n = 0;
    for (int64_t i = from; i < to; i++)
        n += !v->pages[i].resident;
    return n;
}

/* The miss-allocation check at the first missing page i. Returns false when v is now offloaded at end. */
static bool make_room(comem_pager *p, comem_vbar *v, int64_t i, int64_t end)
{
    int64_t need = comem_mul(absent_in(v, i, end), v->page_size);
    int64_t grow = comem_sub(need, comem_min(need, comem_pager_kept_of(p, v->page_size))); /* kept: held already */
    int64_t surplus = comem_sub(p->capacity, comem_add(comem_add(comem_pager_held(p), grow), p->simple_headroom));
    int64_t lower = comem_mul(absent_in(v, 0, i), v->page_size);
    int64_t want = comem_sub(lower, surplus);
    if (want > 0)
        comem_pager_free_lowest(p, want, 0, v, end); /* for this pager's own pages: may keep */
    return v->watermark >= end;
}

/* Commits page i under the budget: evicts and retries once when short. */
static int commit_budgeted(comem_pager *p, comem_vbar *v, int64_t i, int64_t end)
{
    for (int attempt = 0;; attempt++) {
        int64_t grow = comem_pager_kept_of(p, v->page_size) > 0 ? 0 : v->page_size; /* kept: held already */
        int64_t deficit = comem_pager_deficit_locked(p, grow);
        int rc = deficit > 0 ? COMEM_ENOSPC : comem_pager_commit_page(p, v, i);
        if (rc != COMEM_ENOSPC)
            return rc;
        if (attempt > 0) {
            if (deficit > 0)
                comem_warn("pager: vbar %llu page %lld: still %lld bytes short after evicting",
                           (unsigned long long)v->id, (long long)i, (long long)deficit);
            else
                comem_warn("pager: vbar %llu page %lld: the device is out of memory even after evicting",
                           (unsigned long long)v->id, (long long)i);
            return COMEM_ENOSPC;
        }
        p->stats[COMEM_PAGER_STAT_PRESSURE_RETRIES]++;
        comem_pager_free_lowest(p, comem_max(deficit, v->page_size), PAGER_GIVE_BACK, v, end);
        if (v->watermark < end)
            return COMEM_VBAR_OFFLOADED;
    }
}

static int fault_locked(comem_pager *p, comem_vbar *v, int64_t first, int64_t end, uint32_t *sig)
{
    int64_t deficit = comem_pager_deficit_locked(p, 0);
    if (deficit > 0)
        comem_pager_free_lowest(p, deficit, PAGER_GIVE_BACK, NULL, 0);
    if (end > v->watermark)
        return COMEM_VBAR_OFFLOADED;
    bool missed = false;
    for (int64_t i = first; i < end; i++) {
        pager_page *pg = &v->pages[i];
        if (!pg->resident) {
            if (!missed) {
                missed = true;
                if (!make_room(p, v, i, end))
                    return COMEM_VBAR_OFFLOADED;
            }
            int rc = commit_budgeted(p, v, i, end);
            if (rc != COMEM_OK)
                return rc;
        }
        if (sig)
            sig[i - first] = pg->serial;
    }
    for (int64_t i = first; i < end; i++)
        if (v->pages[i].pins < UINT32_MAX)
            v->pages[i].pins++;
    return COMEM_VBAR_RESIDENT;
}

int comem_vbar_fault(comem_vbar *v, int64_t offset, int64_t size, uint32_t *signatures, size_t n)
{
    if (!v || offset < 0 || size < 0 || (!signatures && n))
        return COMEM_EINVAL;
    if (comem_add(offset, size) > v->size)
        return COMEM_ERANGE;
    int64_t first = offset / v->page_size;
    int64_t end = size ? comem_vbar_pages_ceil(v, offset + size) : first;
    if (signatures && (uint64_t)(end - first) > n)
        return COMEM_EINVAL;
    comem_pager *p = v->pager;
    pthread_mutex_lock(&p->lock);
    int64_t changes = p->stats[COMEM_PAGER_STAT_COMMITS] + p->stats[COMEM_PAGER_STAT_EVICTIONS];
    p->stats[COMEM_PAGER_STAT_FAULTS]++;
    int rc = fault_locked(p, v, first, end, signatures);
    if (rc == COMEM_VBAR_OFFLOADED)
        p->stats[COMEM_PAGER_STAT_OFFLOADED]++;
    bool report = p->client && p->stats[COMEM_PAGER_STAT_COMMITS] + p->stats[COMEM_PAGER_STAT_EVICTIONS] != changes;
    /* A fault, resident or offloaded, is the pager in use: idle release must not empty it. */
    comem_client *tc = NULL;
    uint64_t th = 0;
    bool touch = comem_pager_activity_locked(p, &tc, &th);
    pthread_mutex_unlock(&p->lock);
    if (touch)
        comem_pager_touch_send(p, tc, th);
    if (report)
        comem_pager_report(p);
    return rc;
}

int comem_vbar_unpin(comem_vbar *v, int64_t offset, int64_t size)
{
    if (!v || offset < 0 || size < 0)
        return COMEM_EINVAL;
    int64_t first = comem_min(offset / v->page_size, v->nr_pages);
    int64_t end = size ? comem_vbar_pages_ceil(v, comem_add(offset, size)) : first;
    comem_pager *p = v->pager;
    pthread_mutex_lock(&p->lock);
    for (int64_t i = first; i < end; i++)
        if (v->pages[i].pins > 0)
            v->pages[i].pins--;
    pager_batch b = {0};
    for (int64_t i = comem_max(first, v->watermark); i < end; i++)
        if (v->pages[i].resident && v->pages[i].pins == 0)
            comem_pager_evict_page(p, v, i, &b);
    comem_pager_batch_end(p, &b);
    bool report = p->client != NULL; /* a boundary: also sends what an earlier report left */
    pthread_mutex_unlock(&p->lock);
    if (report)
        comem_pager_report(p);
    return COMEM_OK;
}
