/*
 * coord/idle.c - idle release and the pin sweep, run from the tick.
 *
 * Idle release (comfy-env's newest rule): a holder that answers idle asks, is
 * alive, not computing, and holds something is asked to release everything
 * when it has been idle for idle_release_s, or early when its last prompt is
 * over and the card is tight (true free below the operator's reserve,
 * coord_base_reserve). The holders reach the planner through the roster
 * (coord/plan.h), as they reach the pressure and pin planners.
 *
 * Idle means neither computing nor in use: a holder's idle clock starts when
 * its node ends (ACTIVITY) and again at every TOUCH it sends (handlers.c: a
 * pager's faults, which mark no node boundary). What reaches the holder may
 * still be stale; a holder that is computing, or a pager that has just
 * faulted, answers busy (client/ask.c, pager/pager_client.c), and the busy
 * receipt restarts its clock here like a release does.
 */
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

static void idle_ask_done(comem_coord_srv *s, const ask *a, uint8_t outcome, int64_t freed);

void coord_idle_tick(comem_coord_srv *s, int64_t now_ns)
{
    coord_roster r;
    if (s->ledger.holders.used == 0 || !coord_roster_init(&r, &s->ledger, sizeof(comem_idle_holder)))
        return;
    size_t *sel = r.out;
    const char *prompt = coord_current_prompt(&s->ledger);
    double now = coord_now_s(s);
    for (int d = 0; d < s->ledger.n_devices; d++) {
        /* tight: the device-wide free cannot cover the reserve the operator asked for (the published
           one counts, for a blind WDDM host, workers this reading already sees) */
        bool tight = s->meas[d].valid && s->meas[d].r.free < coord_base_reserve(s, d);
        r.n = 0; /* a fresh roster for each device */
        for (size_t i = 0; i < comem_slab_slots(&s->ledger.holders); i++) {
            uint64_t hid;
            const ledger_holder *h = comem_slab_at(&s->ledger.holders, i, &hid);
            if (!h || h->device != d || !(h->flags & COMEM_CAP_IDLE_RELEASE) || asking(s, hid) ||
                now_ns < h->unanswered_until_ns)
                continue;
            const char *key;
            comem_idle_holder *row = coord_roster_add(&r, hid, &key);
            if (!row)
                break;
            /* comfy-env's idle rule: a holder inside a call is not idle, whether or not it could release */
            *row = (comem_idle_holder){
                .key = key,
                .alive = true,
                .advertises = true,
                .in_flight = h->busy,
                .holding = comem_ledger_session_resident(&s->ledger, h->session, hid, d) > 0,
                .idle_known = h->idle_known,
                .idle_since = h->idle_since,
                .last_prompt = h->last_prompt[0] ? h->last_prompt : NULL,
            };
        }
        size_t k = comem_plan_idle_release(r.rows, r.n, now, s->cfg.idle_release_s, prompt, tight, sel);
        for (size_t i = 0; i < k; i++) {
            uint64_t hid = r.ids[sel[i]];
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
    coord_roster_free(&r);
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
        /* Released, or busy after all: its idle clock starts again, and its last prompt is forgotten. */
        h->idle_since = coord_now_s(s);
        h->idle_known = true;
        h->last_prompt[0] = '\0';
    }
}

void coord_pin_pressure(comem_coord_srv *s, uint64_t requester, int64_t shortfall)
{
    int64_t now = comem_now_ns();
    coord_roster r;
    if (s->ledger.holders.used == 0 ||
        (s->last_pin_sweep_ns && now - s->last_pin_sweep_ns < (int64_t)(COMEM_PIN_PRESSURE_INTERVAL * 1e9)) ||
        !coord_roster_init(&r, &s->ledger, sizeof(comem_pin_report)))
        return;
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.holders); i++) {
        uint64_t hid;
        const ledger_holder *h = comem_slab_at(&s->ledger.holders, i, &hid);
        if (!h || h->session == requester || !(h->flags & COMEM_CAP_PIN_RELEASE))
            continue;
        const ledger_session *ss = comem_ledger_session(&s->ledger, h->session);
        const char *key;
        comem_pin_report *row = coord_roster_add(&r, hid, &key);
        if (!row)
            break;
        *row = (comem_pin_report){key, ss ? ss->pinned : 0};
    }
    comem_release_ask *asks = r.out;
    size_t k = comem_plan_pin_pressure(r.rows, r.n, shortfall, 1e18, 0, COMEM_PIN_PRESSURE_MIN_SLICE, 0, asks);
    /* Nobody waits for these receipts: the holder reports its unpinning itself (PIN_RELEASE). */
    for (size_t i = 0; i < k; i++)
        coord_ask(s, r.ids[asks[i].holder], COMEM_ASK_PINS, asks[i].bytes, NULL, 0, NULL, 0);
    s->last_pin_sweep_ns = now;
    coord_roster_free(&r);
}
