/*
 * pager/vbar.c - VBARs: creation and destruction, the priority list, the
 * watermark and its limit, and the per-VBAR figures and copies.
 *
 * A VBAR is reserved at the size asked, rounded up to whole pages. It enters
 * the priority list at the top with its watermark at the last page: nothing
 * of it is offloaded until an eviction lowers the watermark.
 */
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/log.h"
#include "comem/pager.h"
#include "pager/pager_internal.h"

/* ---- the priority list (caller holds the lock) ---- */

void comem_pager_link_top(comem_pager *p, comem_vbar *v)
{
    v->higher = NULL;
    v->lower = p->top;
    if (p->top)
        p->top->higher = v;
    else
        p->bottom = v;
    p->top = v;
}

void comem_pager_link_bottom(comem_pager *p, comem_vbar *v)
{
    v->lower = NULL;
    v->higher = p->bottom;
    if (p->bottom)
        p->bottom->lower = v;
    else
        p->top = v;
    p->bottom = v;
}

void comem_pager_unlink(comem_pager *p, comem_vbar *v)
{
    if (v->higher)
        v->higher->lower = v->lower;
    else
        p->top = v->lower;
    if (v->lower)
        v->lower->higher = v->higher;
    else
        p->bottom = v->higher;
    v->higher = v->lower = NULL;
}

int64_t comem_vbar_pages_ceil(const comem_vbar *v, int64_t bytes)
{
    int64_t n = bytes / v->page_size + (bytes % v->page_size != 0);
    return comem_min(n, v->nr_pages);
}

/* ---- creation and destruction ---- */

int comem_vbar_create(comem_pager *p, int64_t size, int64_t page_size, comem_vbar **out)
{
    if (!p || !out || size <= 0 || page_size < 0)
        return COMEM_EINVAL;
    int64_t ps = page_size ? page_size : COMEM_PAGER_DEFAULT_PAGE_SIZE;
    if (ps % p->vmm->granularity != 0) {
        comem_warn("pager: page size %lld is not a multiple of the granularity %lld", (long long)ps,
                   (long long)p->vmm->granularity);
        return COMEM_EINVAL;
    }
    int64_t nr = size / ps + (size % ps != 0);
    if (nr > INT64_MAX / ps || (uint64_t)nr > SIZE_MAX / sizeof(pager_page))
        return COMEM_ERANGE;
    comem_vbar *v = calloc(1, sizeof *v);
    pager_page *pages = calloc((size_t)nr, sizeof *pages);
    if (!v || !pages) {
        free(v);
        free(pages);
        return COMEM_ENOMEM;
    }
    v->pager = p;
    v->page_size = ps;
    v->nr_pages = nr;
    v->size = nr * ps;
    v->watermark = nr;
    v->pages = pages;

    pthread_mutex_lock(&p->lock);
    int rc = p->vmm->ops->reserve(p->vmm, v->size, &v->base);
    if (rc == COMEM_OK) {
        v->id = ++p->next_id;
        comem_pager_link_top(p, v);
        p->n_vbars++;
    }
    pthread_mutex_unlock(&p->lock);
    if (rc != COMEM_OK) {
        free(pages);
        free(v);
        return rc;
    }
    pthread_mutex_lock(&p->attach_mu);
    comem_pager_register_vbar(p, v);
    pthread_mutex_unlock(&p->attach_mu);
    comem_debug("pager: vbar %llu: %lld pages of %lld bytes at 0x%llx", (unsigned long long)v->id, (long long)nr,
                (long long)ps, (unsigned long long)v->base);
    *out = v;
    return COMEM_OK;
}

void comem_vbar_destroy(comem_vbar *v)
{
    if (!v)
        return;
    comem_pager *p = v->pager;
    pthread_mutex_lock(&p->attach_mu);
    comem_pager_unregister_vbar(p, v);
    pthread_mutex_lock(&p->lock);
    comem_pager_evict_all(p, v);
    comem_pager_unlink(p, v);
    p->n_vbars--;
    p->vmm->ops->unreserve(p->vmm, v->base, v->size);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->attach_mu);
    free(v->pages);
    free(v);
}

/* ---- fixed figures ---- */

uint64_t comem_vbar_base(comem_vbar *v) { return v ? v->base : 0; }
int64_t comem_vbar_page_size(comem_vbar *v) { return v ? v->page_size : 0; }
int64_t comem_vbar_pages(comem_vbar *v) { return v ? v->nr_pages : 0; }
int64_t comem_vbar_size(comem_vbar *v) { return v ? v->size : 0; }

/* ---- priority ---- */

int comem_vbar_prioritize(comem_vbar *v)
{
    if (!v)
        return COMEM_EINVAL;
    comem_pager *p = v->pager;
    pthread_mutex_lock(&p->lock);
    comem_pager_unlink(p, v);
    comem_pager_link_top(p, v);
    v->watermark = v->nr_pages;
    pthread_mutex_unlock(&p->lock);
    return COMEM_OK;
}

int comem_vbar_deprioritize(comem_vbar *v)
{
    if (!v)
        return COMEM_EINVAL;
    comem_pager *p = v->pager;
    pthread_mutex_lock(&p->lock);
    comem_pager_unlink(p, v);
    comem_pager_link_bottom(p, v);
    pthread_mutex_unlock(&p->lock);
    return COMEM_OK;
}

/* ---- watermark and limit ---- */

int comem_vbar_set_watermark(comem_vbar *v, int64_t bytes)
{
    if (!v || bytes < 0)
        return COMEM_EINVAL;
    comem_pager *p = v->pager;
    pthread_mutex_lock(&p->lock);
    v->watermark = comem_vbar_pages_ceil(v, bytes);
    pager_batch b = {0};
    for (int64_t i = v->watermark; i < v->nr_pages; i++)
        if (v->pages[i].resident && v->pages[i].pins == 0)
            comem_pager_evict_page(p, v, i, &b);
    comem_pager_batch_end(p, &b);
    pthread_mutex_unlock(&p->lock);
    if (b.freed > 0)
        comem_pager_report(p);
    return COMEM_OK;
}

int64_t comem_vbar_watermark(comem_vbar *v)
{
    if (!v)
        return -1;
    pthread_mutex_lock(&v->pager->lock);
    int64_t w = v->watermark * v->page_size;
    pthread_mutex_unlock(&v->pager->lock);
    return w;
}

int comem_vbar_set_watermark_limit(comem_vbar *v, int64_t bytes)
{
    if (!v || bytes < 0)
        return COMEM_EINVAL;
    pthread_mutex_lock(&v->pager->lock);
    v->limit = comem_vbar_pages_ceil(v, bytes);
    pthread_mutex_unlock(&v->pager->lock);
    return COMEM_OK;
}

int64_t comem_vbar_watermark_limit(comem_vbar *v)
{
    if (!v)
        return -1;
    pthread_mutex_lock(&v->pager->lock);
    int64_t l = v->limit * v->page_size;
    pthread_mutex_unlock(&v->pager->lock);
    return l;
}

int comem_vbar_free_memory(comem_vbar *v, int64_t bytes, int64_t *freed)
{
    if (!v || bytes < 0)
        return COMEM_EINVAL;
    comem_pager *p = v->pager;
    pthread_mutex_lock(&p->lock);
    pager_batch b = {0};
    comem_pager_lower(p, v, v->limit, bytes, &b, NULL, 0);
    comem_pager_batch_end(p, &b);
    pthread_mutex_unlock(&p->lock);
    if (b.freed > 0)
        comem_pager_report(p);
    if (freed)
        *freed = b.freed;
    return COMEM_OK;
}

/* ---- residency and copies ---- */

int64_t comem_vbar_loaded_size(comem_vbar *v)
{
    if (!v)
        return 0;
    pthread_mutex_lock(&v->pager->lock);
    int64_t n = v->resident_count * v->page_size;
    pthread_mutex_unlock(&v->pager->lock);
    return n;
}

int64_t comem_vbar_residency(comem_vbar *v, uint8_t *map, size_t n)
{
    if (!v || (!map && n))
        return COMEM_EINVAL;
    pthread_mutex_lock(&v->pager->lock);
    int64_t k = n > (uint64_t)v->nr_pages ? v->nr_pages : (int64_t)n;
    for (int64_t i = 0; i < k; i++)
        map[i] = (uint8_t)((v->pages[i].resident ? 1u : 0u) | (v->pages[i].pins ? 2u : 0u));
    pthread_mutex_unlock(&v->pager->lock);
    return k;
}

/* Checks a copy's range; the pages it touches must be resident. Caller holds the lock. */
static int copy_range_ok(const comem_vbar *v, int64_t offset, int64_t size)
{
    int64_t first = offset / v->page_size;
    int64_t end = comem_vbar_pages_ceil(v, offset + size);
    for (int64_t i = first; i < end; i++)
        if (!v->pages[i].resident)
            return COMEM_ENOENT;
    return COMEM_OK;
}

static int copy(comem_vbar *v, int64_t offset, void *host, int64_t size, bool to_vbar)
{
    if (!v || offset < 0 || size < 0 || (!host && size))
        return COMEM_EINVAL;
    if (comem_add(offset, size) > v->size)
        return COMEM_ERANGE;
    if (size == 0)
        return COMEM_OK;
    comem_pager *p = v->pager;
    pthread_mutex_lock(&p->lock);
    int rc = copy_range_ok(v, offset, size);
    if (rc == COMEM_OK)
        rc = to_vbar ? p->vmm->ops->write(p->vmm, v->base + (uint64_t)offset, host, size)
                     : p->vmm->ops->read(p->vmm, v->base + (uint64_t)offset, host, size);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int comem_vbar_write(comem_vbar *v, int64_t offset, const void *src, int64_t size)
{
    return copy(v, offset, (void *)(uintptr_t)src, size, true);
}

int comem_vbar_read(comem_vbar *v, int64_t offset, void *dst, int64_t size)
{
    return copy(v, offset, dst, size, false);
}
