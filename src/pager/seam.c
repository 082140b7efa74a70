/*
 * pager/seam.c - the pager's seam for the simulator and the tests
 * (pager_seam.h): scripted commit failures, an injected clock, the invariant
 * check, and a release ask answered without a client.
 *
 * Kept apart from the pager's own files so that what only comem simulate and
 * the tests do is in one place the product never calls. Each function takes
 * the pager lock as the pager's own calls do; the core holds only the state
 * they set (the clock; the backend's injection counters, through its ops).
 */
#include "pager/pager_seam.h"

#include "base/log.h"
#include "comem/common.h"
#include "pager/pager_internal.h"

int comem_pager_inject_commit_failures(comem_pager *p, int after, int transient, int oom)
{
    if (!p || after < 0 || transient < 0 || oom < 0)
        return COMEM_EINVAL;
    if (!p->vmm->ops->inject)
        return COMEM_ENOTSUP;
    p->vmm->ops->inject(p->vmm, after, transient, oom); /* atomics: no pager lock needed */
    return COMEM_OK;
}

void comem_pager_set_clock(comem_pager *p, int64_t (*fn)(void *user), void *user)
{
    pthread_mutex_lock(&p->lock);
    p->clock = fn ? fn : comem_pager_monotonic_ms;
    p->clock_user = fn ? user : NULL;
    p->polled = false;
    pthread_mutex_unlock(&p->lock);
}

int64_t comem_pager_answer_release(comem_pager *p, int kind, int64_t bytes)
{
    pthread_mutex_lock(&p->lock);
    int64_t got = comem_pager_release_locked(p, kind, bytes);
    pthread_mutex_unlock(&p->lock);
    comem_pager_report(p);
    return got;
}

/* ---- the invariant check ---- */

#define VIOLATION(...)                                                                             \
    do {                                                                                           \
        comem_error("pager check: " __VA_ARGS__);                                                  \
        rc = COMEM_ERANGE;                                                                         \
        goto out;                                                                                  \
    } while (0)

int comem_pager_check(comem_pager *p)
{
    int rc = COMEM_OK;
    pthread_mutex_lock(&p->lock);
    int64_t usage = 0, n = 0;
    const comem_vbar *prev = NULL;
    for (const comem_vbar *v = p->top; v; prev = v, v = v->lower) {
        n++;
        if (v->higher != prev)
            VIOLATION("vbar %llu: broken priority links", (unsigned long long)v->id);
        if (v->watermark < 0 || v->watermark > v->nr_pages || v->limit < 0 || v->limit > v->nr_pages)
            VIOLATION("vbar %llu: watermark %lld or limit %lld outside [0, %lld]", (unsigned long long)v->id,
                      (long long)v->watermark, (long long)v->limit, (long long)v->nr_pages);
        int64_t resident = 0;
        for (int64_t i = 0; i < v->nr_pages; i++) {
            const pager_page *pg = &v->pages[i];
            if (pg->resident) {
                resident++;
                if (i >= v->watermark && pg->pins == 0)
                    VIOLATION("vbar %llu page %lld: resident, unpinned, above the watermark %lld",
                              (unsigned long long)v->id, (long long)i, (long long)v->watermark);
            } else if (pg->pins) {
                VIOLATION("vbar %llu page %lld: pinned but not resident", (unsigned long long)v->id, (long long)i);
            }
        }
        if (resident != v->resident_count)
            VIOLATION("vbar %llu: resident_count %lld, counted %lld", (unsigned long long)v->id,
                      (long long)v->resident_count, (long long)resident);
        usage += resident * v->page_size;
    }
    if (prev != p->bottom || n != p->n_vbars)
        VIOLATION("priority list: %lld linked, %lld counted, bottom %s", (long long)n, (long long)p->n_vbars,
                  prev == p->bottom ? "ok" : "wrong");
    if (usage != p->usage)
        VIOLATION("usage %lld, resident pages make %lld", (long long)p->usage, (long long)usage);
    int64_t kept = 0;
    for (int64_t i = 0; i < p->n_kept; i++)
        kept += p->kept[i].size;
    if (kept != p->kept_bytes || kept > p->keep_limit)
        VIOLATION("the pool holds %lld bytes, counted %lld, bound %lld", (long long)kept, (long long)p->kept_bytes,
                  (long long)p->keep_limit);
    if (p->vmm->ops->charged) {
        int64_t charged = 0;
        if (p->vmm->ops->charged(p->vmm, &charged) != COMEM_OK)
            VIOLATION("cannot read what the %s device charges this process", p->vmm->name);
        if (charged != comem_pager_held(p))
            VIOLATION("the card charges this process %lld, the pager holds %lld (%lld kept)", (long long)charged,
                      (long long)comem_pager_held(p), (long long)p->kept_bytes);
    }
out:
    pthread_mutex_unlock(&p->lock);
    return rc;
}
