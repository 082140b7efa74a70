/* arith/planners.c - pressure, idle and pin-pressure release planners. */
#include "arith/planners.h"

#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/sort.h"

static int held_desc_then_key(const void *pa, const void *pb, void *ctx)
{
    const comem_release_holder *h = ctx;
    const comem_release_holder *a = &h[((const comem_release_ask *)pa)->holder];
    const comem_release_holder *b = &h[((const comem_release_ask *)pb)->holder];
    int64_t ha = comem_clamp0(a->held), hb = comem_clamp0(b->held);
    if (ha != hb)
        return ha > hb ? -1 : 1;
    return strcmp(a->key, b->key);
}

size_t comem_plan_pressure_release(const comem_release_holder *holders, size_t n, int64_t shortfall,
                                   size_t requester, comem_release_ask *asks)
{
    int64_t remaining = comem_clamp0(shortfall);
    if (remaining == 0)
        return 0;
    /* Gather the candidates into asks[], sort them there, then size the asks in place. */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const comem_release_holder *h = &holders[i];
        if (i == requester || !h->alive || !h->advertises || h->in_flight || comem_clamp0(h->held) <= 0)
            continue;
        asks[m++] = (comem_release_ask){.holder = i, .bytes = 0};
    }
    comem_sort(asks, m, sizeof *asks, held_desc_then_key, (void *)holders);
    size_t k = 0;
    while (k < m && remaining > 0) {
        int64_t ask = comem_min(comem_clamp0(holders[asks[k].holder].held), remaining);
        asks[k++].bytes = ask;
        remaining = comem_sub(remaining, ask);
    }
    return k;
}

static int idle_key_cmp(const void *pa, const void *pb, void *ctx)
{
    const comem_idle_holder *h = ctx;
    return strcmp(h[*(const size_t *)pa].key, h[*(const size_t *)pb].key);
}

size_t comem_plan_idle_release(const comem_idle_holder *holders, size_t n, double now, double min_idle,
                               const char *current_prompt, bool card_tight, size_t *out)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const comem_idle_holder *h = &holders[i];
        if (!h->alive || !h->advertises || h->in_flight || !h->holding)
            continue;
        bool prompt_over = current_prompt && h->last_prompt && strcmp(h->last_prompt, current_prompt) != 0;
        bool timer_due = h->idle_known && (now - h->idle_since) >= min_idle;
        if (timer_due || (prompt_over && card_tight))
            out[m++] = i;
    }
    comem_sort(out, m, sizeof *out, idle_key_cmp, (void *)holders);
    return m;
}

size_t comem_plan_pin_pressure(const comem_pin_report *reports, size_t n, int64_t target, double now,
                               double last_sweep, int64_t min_slice, double interval,
                               comem_release_ask *asks)
{
    if (now - last_sweep < interval || target <= 0)
        return 0;
    int64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(reports[i].key, "host") != 0 && reports[i].pinned >= min_slice)
            total = comem_add(total, reports[i].pinned);
    }
    if (total <= 0)
        return 0;
    int64_t ask_total = comem_min(target, total);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(reports[i].key, "host") == 0 || reports[i].pinned < min_slice)
            continue;
        /* Python's // on exact ints: the product can pass 2^63, so widen it. */
        __int128 prod = (__int128)ask_total * reports[i].pinned;
        __int128 q = prod / total;
        if (prod % total != 0 && prod < 0)
            q -= 1;
        int64_t share = q > INT64_MAX ? INT64_MAX : (int64_t)q;
        asks[k++] = (comem_release_ask){.holder = i, .bytes = comem_max(min_slice, share)};
    }
    return k;
}
