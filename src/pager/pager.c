/*
 * pager/pager.c - the pager object: open and close, the headrooms, the
 * pressure formula with its cached device reading, and the pager-wide
 * figures (usage, reclaimable, free_memory, counters). What only the
 * simulator and the tests do to a pager is in seam.c (pager_seam.h).
 *
 * The pressure formula is aimdo's (reference/aimdo-pager.md section 2),
 * with every headroom a per-pager setting instead of a global or a constant:
 *
 *   reading, at most every cache_ms:  deficit_sync  = device_headroom - device_free
 *                                     usage_at_poll = held
 *   simple  = (held + size) + simple_headroom - capacity
 *   delta   = deficit_sync + (held - usage_at_poll) + size
 *   deficit = max(simple, delta) + extra_headroom
 *
 * held is aimdo's usage plus the kept pool (keep.c; 0 unless a bound is set):
 * kept memory is on the card as much as a resident page. Between readings the
 * device term is extrapolated by the pager's own change in what it holds, so
 * commits and evictions since the reading count at once; what other processes
 * did since is seen at the next reading, at most cache_ms
 * late (the tolerated inaccuracy). A failed reading leaves the simple term
 * alone in charge until the next one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/clock.h"
#include "base/log.h"
#include "comem/pager.h"
#include "pager/pager_internal.h"

int64_t comem_pager_monotonic_ms(void *user)
{
    (void)user;
    return comem_now_ns() / 1000000;
}

int comem_pager_open(int backend, int device, const char *sim_spec, comem_pager **out)
{
    if (!out || device < 0 || (backend != COMEM_PAGER_SIM && backend != COMEM_PAGER_CUDA))
        return COMEM_EINVAL;
    comem_pager *p = calloc(1, sizeof *p);
    if (!p)
        return COMEM_ENOMEM;
    int rc = comem_vmm_open(backend, device, sim_spec, &p->vmm);
    if (rc != COMEM_OK) {
        free(p);
        return rc;
    }
    int64_t free_bytes = 0;
    if ((rc = p->vmm->ops->read_free(p->vmm, &free_bytes, &p->capacity)) != COMEM_OK) {
        comem_warn("pager: cannot read device %d: %s", device, comem_status_str(rc));
        p->vmm->ops->close(p->vmm);
        free(p);
        return rc;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->attach_mu, NULL);
    pthread_cond_init(&p->idle_cv, NULL);
    p->device = device;
    p->simple_headroom = COMEM_PAGER_DEFAULT_SIMPLE_HEADROOM;
    p->device_headroom = COMEM_PAGER_DEFAULT_DEVICE_HEADROOM;
    p->cache_ms = COMEM_PAGER_DEFAULT_POLL_MS;
    p->clock = comem_pager_monotonic_ms;
    *out = p;
    comem_debug("pager: %s device %d, capacity %lld, granularity %lld", p->vmm->name, device,
                (long long)p->capacity, (long long)p->vmm->granularity);
    return COMEM_OK;
}

void comem_pager_close(comem_pager *p)
{
    if (!p)
        return;
    (void)comem_pager_detach(p);
    pthread_mutex_lock(&p->attach_mu);
    pthread_mutex_lock(&p->lock);
    p->keep_limit = 0; /* what the VBARs free now goes back, and so does the pool */
    (void)comem_pager_drain_kept(p, INT64_MAX);
    while (p->top) {
        comem_vbar *v = p->top;
        comem_pager_evict_all(p, v);
        comem_pager_unlink(p, v);
        p->vmm->ops->unreserve(p->vmm, v->base, v->size);
        free(v->pages);
        free(v);
    }
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->attach_mu);
    p->vmm->ops->close(p->vmm);
    pthread_cond_destroy(&p->idle_cv);
    pthread_mutex_destroy(&p->attach_mu);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

int64_t comem_pager_granularity(comem_pager *p) { return p ? p->vmm->granularity : 0; }

/* ---- headrooms ---- */

int comem_pager_set_simple_headroom(comem_pager *p, int64_t bytes)
{
    if (!p || bytes < 0)
        return COMEM_EINVAL;
    pthread_mutex_lock(&p->lock);
    p->simple_headroom = bytes;
    pthread_mutex_unlock(&p->lock);
    return COMEM_OK;
}

int64_t comem_pager_simple_headroom(comem_pager *p)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->lock);
    int64_t v = p->simple_headroom;
    pthread_mutex_unlock(&p->lock);
    return v;
}

int comem_pager_set_extra_headroom(comem_pager *p, int64_t bytes)
{
    if (!p || bytes < 0)
        return COMEM_EINVAL;
    pthread_mutex_lock(&p->lock);
    p->extra_headroom = bytes;
    pthread_mutex_unlock(&p->lock);
    return COMEM_OK;
}

int comem_pager_set_device_wide(comem_pager *p, int on)
{
    if (!p)
        return COMEM_EINVAL;
    if (on && !p->vmm->ops->read_free_wide)
        return COMEM_ENOTSUP;
    pthread_mutex_lock(&p->lock);
    p->device_wide = on != 0;
    p->polled = false;
    pthread_mutex_unlock(&p->lock);
    return COMEM_OK;
}

int comem_pager_set_device_poll(comem_pager *p, int64_t headroom_bytes, int64_t cache_ms)
{
    if (!p || headroom_bytes < 0 || cache_ms < 0)
        return COMEM_EINVAL;
    pthread_mutex_lock(&p->lock);
    p->device_headroom = headroom_bytes;
    p->cache_ms = cache_ms;
    p->polled = false; /* the old reading was taken against the old margin */
    pthread_mutex_unlock(&p->lock);
    return COMEM_OK;
}

/* ---- the pressure formula ---- */

/* Takes a device reading when none is cached or the cached one is cache_ms old. */
static void poll_device(comem_pager *p)
{
    int64_t now = p->clock(p->clock_user);
    p->clock_ms = now; /* every fault passes here first: its activity reuses this reading */
    if (p->polled && comem_sub(now, p->poll_ms) < p->cache_ms)
        return;
    int64_t free_bytes = 0, capacity = 0;
    int rc = p->vmm->ops->read_free(p->vmm, &free_bytes, &capacity);
    if (rc == COMEM_OK && p->device_wide && p->vmm->ops->read_free_wide)
        rc = p->vmm->ops->read_free_wide(p->vmm, &free_bytes); /* the capacity stays this process's own */
    if (rc == COMEM_OK) {
        p->deficit_sync = comem_sub(p->device_headroom, free_bytes);
        p->capacity = capacity;
    } else {
        comem_warn("pager: reading device %d failed (%s); the simple term alone decides until the next reading",
                   p->device, comem_status_str(rc));
        p->deficit_sync = PAGER_SIMPLE_ONLY;
    }
    p->usage_at_poll = comem_pager_held(p);
    p->poll_ms = now;
    p->polled = true;
    p->stats[COMEM_PAGER_STAT_POLLS]++;
}

int64_t comem_pager_deficit_locked(comem_pager *p, int64_t size)
{
    poll_device(p);
    int64_t held = comem_pager_held(p);
    int64_t simple = comem_sub(comem_add(comem_add(held, size), p->simple_headroom), p->capacity);
    int64_t delta = comem_add(comem_add(p->deficit_sync, comem_sub(held, p->usage_at_poll)), size);
    return comem_add(comem_max(simple, delta), p->extra_headroom);
}

int64_t comem_pager_budget_deficit(comem_pager *p, int64_t size)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->lock);
    int64_t d = comem_pager_deficit_locked(p, size);
    pthread_mutex_unlock(&p->lock);
    return d;
}

/* ---- figures ---- */

int64_t comem_pager_usage(comem_pager *p)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->lock);
    int64_t u = p->usage;
    pthread_mutex_unlock(&p->lock);
    return u;
}

int64_t comem_pager_reclaimable(comem_pager *p)
{
    if (!p)
        return 0;
    int64_t sum = 0;
    pthread_mutex_lock(&p->lock);
    for (const comem_vbar *v = p->top; v; v = v->lower)
        for (int64_t i = v->limit; i < v->nr_pages; i++)
            if (v->pages[i].resident && v->pages[i].pins == 0)
                sum = comem_add(sum, v->page_size);
    pthread_mutex_unlock(&p->lock);
    return sum;
}

int comem_pager_free_memory(comem_pager *p, int64_t bytes, int64_t *freed)
{
    if (!p || bytes < 0)
        return COMEM_EINVAL;
    pthread_mutex_lock(&p->lock);
    int64_t got = comem_pager_free_lowest(p, bytes, 0, NULL, 0); /* may keep (keep.c) */
    pthread_mutex_unlock(&p->lock);
    if (got > 0)
        comem_pager_report(p);
    if (freed)
        *freed = got;
    return COMEM_OK;
}

int comem_pager_reset_watermark_limits(comem_pager *p)
{
    if (!p)
        return COMEM_EINVAL;
    pthread_mutex_lock(&p->lock);
    for (comem_vbar *v = p->top; v; v = v->lower)
        v->limit = 0;
    pthread_mutex_unlock(&p->lock);
    return COMEM_OK;
}

int64_t comem_pager_stat(comem_pager *p, int which)
{
    if (!p || which < 0 || which >= COMEM_PAGER_STAT_COUNT)
        return -1;
    pthread_mutex_lock(&p->lock);
    int64_t v = p->stats[which];
    pthread_mutex_unlock(&p->lock);
    return v;
}
