/*
 * client/calls.c - the calls besides admission (client/admit.c) that ask
 * for a decision or settle one: a grant's end, pressure, another process's
 * release, pinned RAM, the reserve, the status text and the session's id.
 *
 * With the link up they are the coordinator's: ids are translated to its
 * own, the caller waits at most its timeout, and the reply's figures come
 * back. Without it they are decided locally (client/local.c), or fail with
 * COMEM_ECLOSED when the client was opened with COMEM_OPEN_NO_LOCAL. On the
 * library's service thread a call that needs a reply's figures returns
 * COMEM_EBUSY: that thread reads the replies, so waiting there would wait for
 * itself. (Release callbacks run on the callback thread and may wait.) Each
 * is one builder (client/frames.h) and the call helper (client/call.h).
 */
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/clock.h"
#include "base/log.h"
#include "client/call.h"
#include "client/frames.h"
#include "client/local.h"
#include "client/shared.h"
#include "shm/book.h"

/*
 * Lock held, a grant was taken: its bytes are resident in e now, and no GRANT_DONE will carry the
 * growth (the grant was local, or booked by a coordinator that is gone, or e is not registered yet).
 * A new census sequence makes the residency reach the coordinator: begun on call now when e is
 * registered on this connection (stale says the grant's connection is not it), else with the resync
 * or its registration.
 */
static int census_of_growth(comem_client *c, client_entry *e, bool stale, client_call *call, comem_msg *m)
{
    e->seq++;
    client_holder *h = comem_tab_holder(c, e->holder);
    if (stale && c->link == LINK_UP && h && comem_tab_entry_live(c, e) && comem_tab_holder_live(c, h)) {
        comem_frame_census_item(comem_frame_census(m, h), e);
        e->synced_seq = e->seq;
        return comem_call_begin(c, call, m);
    }
    if (c->link != LINK_DOWN)
        comem_client_want_sync(c);
    return COMEM_OK;
}

int comem_grant_done(comem_client *c, uint64_t grant, uint64_t entry, int64_t used)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (used < 0)
        return COMEM_EINVAL;
    comem_msg m;
    client_grant g;
    pthread_mutex_lock(&c->lock);
    client_entry *e = entry ? comem_tab_entry(c, entry) : NULL;
    if ((entry && !e) || comem_tab_take_grant(c, grant, &g) != COMEM_OK) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_ENOENT;
    }
    bool grew = false;
    if (e) {
        /*
         * The grant's bytes are resident now. The coordinator applies the same rule
         * on GRANT_DONE (at most the grant's bytes, never past the entry's size), so
         * both books agree without a new census sequence; a later receipt or resync
         * that lists this entry carries the same figure.
         */
        int64_t grow = comem_sub(used, e->resident);
        if (grow > g.bytes)
            grow = g.bytes;
        if (grow > 0) {
            e->resident = comem_min(comem_add(e->resident, grow), e->size);
            grew = true;
        }
    }
    bool stale = g.gen == 0 || g.gen != c->gen || c->link == LINK_DOWN;
    /* A grant a new coordinator could not book again: the load stands (the census counts it), but the
       caller is told no bytes were kept for it. */
    int told = g.lost ? COMEM_ENOSPC : COMEM_OK;
    if (grew && (stale || !comem_tab_entry_live(c, e))) {
        client_call census = {0};
        int rc = census_of_growth(c, e, stale, &census, &m);
        if (rc != COMEM_OK || census.begun) {
            pthread_mutex_unlock(&c->lock);
            rc = rc != COMEM_OK ? rc : comem_call_update(c, &census); /* lost again: the resync replays it */
            return rc == COMEM_OK ? told : rc;
        }
    }
    /* A local grant, one from a coordinator that is gone, or one a new coordinator lost: nothing is booked. */
    if (stale) {
        pthread_mutex_unlock(&c->lock);
        return told;
    }
    uint64_t entry_coord = e && comem_tab_entry_live(c, e) ? e->coord_id : 0;
    if (g.fast && entry_coord == 0) { /* a cancelled booking: given back in shared memory, no round trip */
        client_fast *f = comem_fast_for(c, g.gen);
        pthread_mutex_unlock(&c->lock);
        if (f) {
            comem_fast_cancel(f, &g);
            if (comem_fast_coordinator_dozing(f, comem_now_ns()))
                comem_fast_wake(c, g.gen);
        }
        return COMEM_OK;
    }
    if (g.fast) /* a load: through the socket, in order with the censuses that follow it */
        g.coord_id = BOOK_REF(g.fast_idx, g.fast_seq);
    /* ENOENT: the coordinator went with its grants, or the grant expired there. */
    client_call call = {.removal = true};
    int rc = comem_call_begin(c, &call, comem_frame_grant_done(&m, g.coord_id, entry_coord, used));
    pthread_mutex_unlock(&c->lock);
    if (rc != COMEM_OK)
        return rc;
    rc = comem_call_update(c, &call);
    if (call.refused == COMEM_ENOENT && entry_coord)
        /* Expired there (an unused grant lasts 60 s): the load stands, its residency is reported by
           the census; but the bytes were not held for it at the end, and that is worth a line. */
        comem_warn("grant %llx had expired at the coordinator before its load was reported (%s); the load is "
                   "counted from its residency",
                   (unsigned long long)g.coord_id, call.rep.u.reply.message);
    return rc;
}

int comem_pressure(comem_client *c, int device, int64_t bytes, int timeout_ms, int64_t *freed)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (device < 0 || device >= COMEM_MAX_DEVICES || bytes < 0)
        return COMEM_EINVAL;
    int timeout = comem_client_timeout(c, timeout_ms);
    comem_msg m;
    client_call call = {.m = comem_frame_pressure(&m, device, bytes, comem_call_budget(timeout)),
                        .want = COMEM_MSG_PRESSURE_REPLY, .timeout_ms = timeout};
    int rc = comem_call_decide(c, &call);
    if (rc == COMEM_CALL_LOCAL) {
        if (freed)
            *freed = 0; /* no siblings to ask */
        return COMEM_OK;
    }
    if (rc == COMEM_OK && freed)
        *freed = comem_clamp0(call.rep.u.pressure_reply.freed);
    return rc;
}

int comem_ask_release(comem_client *c, uint64_t entry, int64_t bytes, int timeout_ms, int64_t *freed,
                      int64_t *resident)
{
    if (freed)
        *freed = 0;
    if (resident)
        *resident = 0;
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (entry == 0)
        return COMEM_EINVAL;
    int timeout = comem_client_timeout(c, timeout_ms);
    comem_msg m;
    client_call call = {.m = comem_frame_release(&m, entry, bytes, comem_call_budget(timeout)),
                        .want = COMEM_MSG_RELEASE_REPLY, .timeout_ms = timeout};
    int rc = comem_call_decide(c, &call);
    if (rc == COMEM_CALL_LOCAL)
        return COMEM_ECLOSED; /* another process's entry exists only at a coordinator */
    if (rc != COMEM_OK)
        return rc;
    const comem_msg_release_reply *x = &call.rep.u.release_reply;
    if (freed)
        *freed = comem_clamp0(x->freed);
    if (resident)
        *resident = comem_clamp0(x->resident);
    switch (x->outcome) {
    case COMEM_RECEIPT_DONE: return COMEM_OK;
    case COMEM_RECEIPT_BUSY: return COMEM_EBUSY;
    case COMEM_RECEIPT_GONE: return COMEM_ENOENT;
    default: return COMEM_EIO;
    }
}

uint64_t comem_client_session(comem_client *c)
{
    if (comem_client_owned(c) != COMEM_OK)
        return 0;
    pthread_mutex_lock(&c->lock);
    uint64_t id = c->link != LINK_DOWN ? c->session_id : 0;
    pthread_mutex_unlock(&c->lock);
    return id;
}

/* ---- pinned RAM ---- */

/* Lock held: the pin counters of holder (0: the process), or false when unknown. */
static bool pin_counters(comem_client *c, uint64_t holder, int64_t **pins, int64_t **synced, uint64_t *coord,
                         bool *live)
{
    if (holder == 0) {
        *pins = &c->sess_pins;
        *synced = &c->synced_sess_pins;
        *coord = 0;
        *live = c->link != LINK_DOWN;
        return true;
    }
    client_holder *h = comem_tab_holder(c, holder);
    if (!h)
        return false;
    *pins = &h->pins;
    *synced = &h->synced_pins;
    *coord = h->coord_id;
    *live = comem_tab_holder_live(c, h);
    return true;
}

/* One pin call's question: whose counters, how many bytes. */
typedef struct pin_ask {
    uint64_t holder;
    int64_t bytes;
} pin_ask;

/* PIN_ACQUIRE's builder, under the lock (call.h's build): a holder not registered yet books locally. */
static int pin_frame(comem_client *c, client_call *call)
{
    const pin_ask *q = call->arg;
    int64_t *pins, *synced;
    bool live;
    if (!pin_counters(c, q->holder, &pins, &synced, &call->obj, &live))
        return COMEM_ENOENT;
    if (!live)
        return COMEM_CALL_LOCAL;
    call->snap = (uint64_t)q->bytes; /* given back if granted after this caller gave up (request.h) */
    comem_frame_pin(call->m, COMEM_MSG_PIN_ACQUIRE, call->obj, q->bytes);
    return COMEM_OK;
}

/*
 * Books bytes in the mirror (lock held) on connection gen (0: decided locally). Booked on the
 * connection it was asked on, the coordinator has them; a newer one, or none, learns them from the resync.
 */
static int pin_book(comem_client *c, uint64_t holder, int64_t bytes, uint64_t gen)
{
    int64_t *pins, *synced;
    uint64_t coord;
    bool live;
    if (!pin_counters(c, holder, &pins, &synced, &coord, &live))
        return COMEM_ENOENT;
    *pins = comem_add(*pins, bytes);
    if (gen && live && c->gen == gen)
        *synced = comem_add(*synced, bytes);
    else if (gen ? c->link != LINK_DOWN : c->link == LINK_UP)
        comem_client_want_sync(c);
    return COMEM_OK;
}

int comem_pin_acquire(comem_client *c, uint64_t holder, int64_t bytes, int64_t *shortfall)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (bytes < 0)
        return COMEM_EINVAL;
    comem_msg m;
    pin_ask q = {holder, bytes};
    client_call call = {.m = &m, .build = pin_frame, .arg = &q, .kind = PEND_PIN, .want = COMEM_MSG_PIN_REPLY,
                        .timeout_ms = comem_client_timeout(c, -1)};
    int rc = comem_call_decide(c, &call);
    if (rc == COMEM_OK && !call.rep.u.pin_reply.granted) {
        if (shortfall)
            *shortfall = comem_clamp0(call.rep.u.pin_reply.shortfall);
        return COMEM_ENOSPC;
    }
    if (rc != COMEM_OK && rc != COMEM_CALL_LOCAL)
        return rc;
    /* Granted, or decided here: no machine-wide ceiling to check; the next coordinator books it. */
    pthread_mutex_lock(&c->lock);
    (void)pin_book(c, holder, bytes, rc == COMEM_OK ? call.r.gen : 0);
    pthread_mutex_unlock(&c->lock);
    if (shortfall)
        *shortfall = 0;
    return COMEM_OK;
}

int comem_pin_release(comem_client *c, uint64_t holder, int64_t bytes)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (bytes < 0)
        return COMEM_EINVAL;
    comem_msg m;
    client_call call = {.want = COMEM_MSG_PIN_REPLY};
    int64_t *pins, *synced;
    uint64_t coord;
    bool live;
    pthread_mutex_lock(&c->lock);
    if (!pin_counters(c, holder, &pins, &synced, &coord, &live)) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_ENOENT;
    }
    if (bytes > *pins) { /* giving back more than it pinned is a caller's mistake, said, not clamped */
        pthread_mutex_unlock(&c->lock);
        return COMEM_ERANGE;
    }
    *pins = comem_sub(*pins, bytes);
    if (live) {
        *synced = comem_clamp0(comem_sub(*synced, bytes));
        (void)comem_call_begin(c, &call, comem_frame_pin(&m, COMEM_MSG_PIN_RELEASE, coord, bytes));
    }
    pthread_mutex_unlock(&c->lock);
    return comem_call_update(c, &call);
}

/* ---- the reserve and the status text ---- */

int comem_reserve(comem_client *c, int device, int64_t *reserve, int64_t *pager_headroom)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (device < 0 || device >= COMEM_MAX_DEVICES)
        return COMEM_EINVAL;
    comem_msg m;
    client_call call = {.m = comem_frame_reserve(&m, device), .want = COMEM_MSG_RESERVE_REPLY,
                        .timeout_ms = comem_client_timeout(c, -1)};
    int rc = comem_call_decide(c, &call);
    if (rc == COMEM_CALL_LOCAL) {
        comem_local_reserve(c, reserve, pager_headroom);
        return COMEM_OK;
    }
    if (rc != COMEM_OK)
        return rc;
    if (reserve)
        *reserve = call.rep.u.reserve_reply.for_requester;
    if (pager_headroom)
        *pager_headroom = call.rep.u.reserve_reply.pager_headroom;
    return COMEM_OK;
}

int comem_status_json(comem_client *c, char **json)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (!json)
        return COMEM_EINVAL;
    *json = NULL;
    comem_msg m;
    client_call call = {.m = comem_frame_bare(&m, COMEM_MSG_STATUS), .kind = PEND_STATUS,
                        .want = COMEM_MSG_STATUS_REPLY, .timeout_ms = comem_client_timeout(c, -1)};
    int rc = comem_call_decide(c, &call);
    if (rc == COMEM_CALL_LOCAL)
        return comem_local_status(c, json);
    if (rc != COMEM_OK) {
        free(call.text);
        return rc;
    }
    *json = call.text;
    return COMEM_OK;
}

void comem_free(void *p) { free(p); }
