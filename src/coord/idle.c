/*
 * coord/idle.c - idle release and the pin sweep, run from the tick.
 *
 * Idle release (comfy-env's newest rule): a holder that answers idle asks, is
 * alive, not computing, and holds something is asked to release everything
 * when it has been idle for idle_release_s, or early when its last prompt is
 * over and the card is tight (true free below the published reserve).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arith/planners.h"
#include "base/bytes.h"
#include "base/log.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

static bool asking(comem_coord_srv *s, uint64_t holder)
{
    for (int i = 0; i < s->n_idle_asking; i++)
        if (s->idle_asking[i] == holder)
            return true;
    return false;
}

/* The prompt the host is serving now, or NULL. */
static const char *current_prompt(comem_coord_srv *s)
{
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.sessions); i++) {
        const ledger_session *ss = comem_slab_at(&s->ledger.sessions, i, NULL);
        if (ss && ss->role == COMEM_ROLE_HOST && ss->prompt[0])
            return ss->prompt;
    }
    return NULL;
}

static void idle_ask_done(comem_coord_srv *s, const ask *a, uint8_t outcome, int64_t freed);

void coord_idle_tick(comem_coord_srv *s, int64_t now_ns)
{
    size_t cap = s->ledger.holders.used;
    if (cap == 0)
        return;
    comem_idle_holder *hs = malloc(cap * sizeof *hs);
    uint64_t *ids = malloc(cap * sizeof *ids);
    char (*keys)[24] = malloc(cap * sizeof *keys);
    size_t *sel = malloc(cap * sizeof *sel);
    if (!hs || !ids || !keys || !sel)
        goto done;
    const char *prompt = current_prompt(s);
    double now = coord_now_s(s);
    for (int d = 0; d < s->ledger.n_devices; d++) {
        /* tight: the device-wide free cannot cover the reserve the operator asked for (the published
           one counts, for a blind WDDM host, workers this reading already sees) */
        const ledger_device *ld = &s->ledger.devices[d];
        int64_t keep = ld->reserve_base >= 0 ? ld->reserve_base : ld->published;
        bool tight = s->meas[d].valid && s->meas[d].r.free < keep;
        size_t n = 0;
        for (size_t i = 0; i < comem_slab_slots(&s->ledger.holders) && n < cap; i++) {
            uint64_t hid;
            const ledger_holder *h = comem_slab_at(&s->ledger.holders, i, &hid);
            if (!h || h->device != d || !(h->flags & COMEM_CAP_IDLE_RELEASE) || asking(s, hid) ||
                now_ns < h->unanswered_until_ns)
                continue;
            snprintf(keys[n], sizeof keys[n], "%016llx", (unsigned long long)hid);
            ids[n] = hid;
            hs[n] = (comem_idle_holder){
                .key = keys[n],
                .alive = true,
                .advertises = true,
                .in_flight = h->busy,
                .holding = comem_ledger_session_resident(&s->ledger, h->session, hid, d) > 0,
                .idle_known = h->idle_known,
                .idle_since = h->idle_since,
                .last_prompt = h->last_prompt[0] ? h->last_prompt : NULL,
            };
            n++;
        }
        size_t k = comem_plan_idle_release(hs, n, now, s->cfg.idle_release_s, prompt, tight, sel);
        for (size_t i = 0; i < k; i++) {
            uint64_t hid = ids[sel[i]];
            const ledger_holder *h = comem_ledger_holder(&s->ledger, hid);
            int64_t held = comem_ledger_session_resident(&s->ledger, h->session, hid, d);
            if (s->n_idle_asking < (int)(sizeof s->idle_asking / sizeof s->idle_asking[0]) &&
                coord_ask(s, hid, COMEM_ASK_IDLE, held, NULL, 0, idle_ask_done, 0)) {
                s->idle_asking[s->n_idle_asking++] = hid;
                comem_info("idle release: asked holder '%s' (idle %.1f s%s) to release %lld bytes", h->name,
                           now - h->idle_since, tight ? ", card tight" : "", (long long)held);
            }
        }
    }
done:
    free(hs);
    free(ids);
    free(keys);
    free(sel);
}

/* An idle ask settled, whatever its outcome: the holder may be asked again, from now. */
static void idle_ask_done(comem_coord_srv *s, const ask *a, uint8_t outcome, int64_t freed)
{
    (void)outcome;
    (void)freed;
    uint64_t holder = a->holder;
    for (int i = 0; i < s->n_idle_asking; i++) {
        if (s->idle_asking[i] == holder) {
            s->idle_asking[i] = s->idle_asking[--s->n_idle_asking];
            break;
        }
    }
    ledger_holder *h = comem_ledger_holder(&s->ledger, holder);
    if (h) {
        /* Released: its idle clock starts again, and its last prompt is forgotten. */
        h->idle_since = coord_now_s(s);
        h->idle_known = true;
        h->last_prompt[0] = '\0';
    }
}

void coord_pin_pressure(comem_coord_srv *s, uint64_t requester, int64_t shortfall)
{
    int64_t now = comem_now_ns();
    size_t cap = s->ledger.holders.used;
    if (cap == 0 || (s->last_pin_sweep_ns && now - s->last_pin_sweep_ns < (int64_t)(COMEM_PIN_PRESSURE_INTERVAL * 1e9)))
        return;
    comem_pin_report *rs = malloc(cap * sizeof *rs);
    uint64_t *ids = malloc(cap * sizeof *ids);
    char (*keys)[24] = malloc(cap * sizeof *keys);
    comem_release_ask *asks = malloc(cap * sizeof *asks);
    size_t n = 0;
    if (!rs || !ids || !keys || !asks)
        goto done;
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.holders); i++) {
        uint64_t hid;
        const ledger_holder *h = comem_slab_at(&s->ledger.holders, i, &hid);
        if (!h || h->session == requester || !(h->flags & COMEM_CAP_PIN_RELEASE))
            continue;
        const ledger_session *ss = comem_ledger_session(&s->ledger, h->session);
        snprintf(keys[n], sizeof keys[n], "%016llx", (unsigned long long)hid);
        ids[n] = hid;
        rs[n] = (comem_pin_report){keys[n], ss ? ss->pinned : 0};
        n++;
    }
    size_t k = comem_plan_pin_pressure(rs, n, shortfall, 1e18, 0, COMEM_PIN_PRESSURE_MIN_SLICE, 0, asks);
    /* Nobody waits for these receipts: the holder reports its unpinning itself (PIN_RELEASE). */
    for (size_t i = 0; i < k; i++)
        coord_ask(s, ids[asks[i].holder], COMEM_ASK_PINS, asks[i].bytes, NULL, 0, NULL, 0);
    s->last_pin_sweep_ns = now;
done:
    free(rs);
    free(ids);
    free(keys);
    free(asks);
}
