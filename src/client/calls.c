/*
 * client/calls.c - the calls that ask for a decision: admission, grants,
 * pressure, pinned RAM, the reserve and the status text.
 *
 * With the link up they are the coordinator's: ids are translated to its
 * own, the caller waits at most its timeout, and the reply's figures come
 * back. Without it they are decided locally (client/local.c), or fail with
 * COMEM_ECLOSED when the client was opened with COMEM_OPEN_NO_LOCAL. On the
 * library's service thread a call that needs a reply's figures returns
 * COMEM_EBUSY: that thread reads the replies, so waiting there would wait for
 * itself. (Release callbacks run on the callback thread and may wait.)
 */
#include <stdlib.h>
#include <string.h>

#include "arith/cross_reserve.h"
#include "base/bytes.h"
#include "base/log.h"
#include "client/client_internal.h"

/*
 * The public API answers comem_admit_details and comem_admit_asked for "the
 * last admission this thread made on c", so it keeps one record per thread.
 * Nothing travels through it: an admission hands its figures up explicitly
 * (client_admission, from the reply or from comem_local_admit), and only the
 * two public entry points, comem_admit and comem_admit_figures, copy a
 * decision's figures here for those two readers.
 */
static _Thread_local struct {
    const comem_client *c;
    client_admission fig;
} tl_last;

static void remember(const comem_client *c, const client_admission *fig)
{
    if (!fig->decided)
        return; /* no decision: the last one stands */
    tl_last.c = c;
    tl_last.fig = *fig;
}

void comem_admit_details(comem_client *c, int64_t *need, int64_t *free_before, int64_t *free_after, int64_t *freed,
                         int *asked, int *busy)
{
    static const client_admission none;
    const client_admission *f = c && tl_last.c == c ? &tl_last.fig : &none;
    if (need)
        *need = f->need;
    if (free_before)
        *free_before = f->free_before;
    if (free_after)
        *free_after = f->free_after;
    if (freed)
        *freed = f->freed;
    if (asked)
        *asked = f->asked;
    if (busy)
        *busy = f->busy;
}

size_t comem_admit_asked(comem_client *c, uint64_t *holders, size_t cap)
{
    if (!c || tl_last.c != c)
        return 0;
    const client_admission *f = &tl_last.fig;
    size_t n = f->n_ids < cap ? f->n_ids : cap;
    if (n && holders)
        memcpy(holders, f->ids, n * sizeof holders[0]);
    return holders ? n : f->n_ids;
}

/* The coordinator's budget: a little under the caller's wait, so its answer still finds the caller. */
static uint32_t coord_budget(int timeout_ms)
{
    int margin = timeout_ms / 10 < 250 ? timeout_ms / 10 : 250;
    return (uint32_t)(timeout_ms - margin);
}

/* A reply that is not the expected type: an error status, or a protocol error. */
static int reply_status(const client_reply *rep, uint16_t want)
{
    if (rep->type == want)
        return COMEM_OK;
    if (rep->type == COMEM_MSG_REPLY && rep->u.reply.status != COMEM_OK) {
        comem_client_set_reason(rep->u.reply.message);
        return rep->u.reply.status;
    }
    comem_error("the coordinator answered with %s where %s was due", comem_wire_type_name(rep->type),
                comem_wire_type_name(want));
    return COMEM_EPROTO;
}

/* Lock held: the call cannot go to the coordinator now. Returns true when it must be decided here. */
static bool decide_locally(comem_client *c) { return c->link != LINK_UP; }

/* Lock held, link up: the call waits for figures, which the service thread cannot do. */
static bool cannot_wait(comem_client *c)
{
    if (!comem_on_service_thread(c))
        return false;
    comem_warn("a call that waits for the coordinator was made on the library's service thread; refused as busy");
    return true;
}

/* Lock held: where a call goes. *local when the link is down; COMEM_EBUSY when it cannot wait. */
static int route(comem_client *c, bool *local)
{
    *local = decide_locally(c);
    return !*local && cannot_wait(c) ? COMEM_EBUSY : COMEM_OK;
}

/* A change made in the booking area while the coordinator dozes: wake it, so the ledger (and the
   view) has it within a millisecond. One send, only after a quiet spell; never waited on. */
static void wake_coordinator(comem_client *c, uint64_t gen)
{
    comem_msg m;
    memset(&m, 0, sizeof m);
    m.type = COMEM_MSG_BOOKED;
    (void)comem_conn_send(c, gen, &m);
}

/*
 * The fast path (client/fast.c): an admission that fits the room the
 * coordinator published is booked in shared memory, without a round trip.
 * *done false: it must go to the coordinator (no area, no room, any doubt);
 * true: the return value is the answer (COMEM_OK booked, COMEM_ENOENT an
 * unknown holder or keep entry, COMEM_ENOMEM).
 */
static int admit_fast(comem_client *c, int device, uint64_t holder, int64_t weights, int64_t working,
                      const uint64_t *keep, size_t n_keep, uint64_t *grant, int64_t *short_by, client_admission *fig,
                      bool *done)
{
    *done = false;
    client_fast *f = NULL;
    uint64_t holder_coord = 0;
    pthread_mutex_lock(&c->lock);
    uint64_t gen = c->gen;
    client_holder *h = holder ? comem_tab_holder(c, holder) : NULL;
    bool known = !holder || h;
    for (size_t i = 0; known && i < n_keep; i++)
        known = comem_tab_entry(c, keep[i]) != NULL;
    if (known && c->link == LINK_UP && (!h || comem_tab_holder_live(c, h))) {
        f = comem_fast_for(c, gen);
        holder_coord = h ? h->coord_id : 0;
    }
    pthread_mutex_unlock(&c->lock);
    if (!known) {
        *done = true;
        return COMEM_ENOENT;
    }
    client_grant booked = {0};
    if (!f || !comem_fast_book(f, device, holder_coord, weights, working, &booked, fig)) {
        fig->decided = false;
        return COMEM_OK;
    }
    *done = true;
    pthread_mutex_lock(&c->lock);
    client_grant *g = comem_tab_add_grant(c);
    if (g) {
        booked.id = g->id;
        booked.gen = gen;
        *g = booked;
    }
    pthread_mutex_unlock(&c->lock);
    if (!g) {
        comem_fast_cancel(f, &booked); /* cannot remember it: give it back */
        return COMEM_ENOMEM;
    }
    if (booked.wake)
        wake_coordinator(c, gen);
    if (grant)
        *grant = booked.id;
    if (short_by)
        *short_by = 0;
    return COMEM_OK;
}

/*
 * comem_admit with its figures written to *fig (fig->decided false when it failed before deciding). With
 * ack_ms > 0, a coordinator that neither answers nor acknowledges the ADMIT within ack_ms is not waited
 * for further: COMEM_ETIMEDOUT, *unanswered true (comem_req_finish_acked).
 */
static int admit(comem_client *c, int device, uint64_t holder, int64_t weights, int64_t inference,
                 int64_t cast_forward, const uint64_t *keep, size_t n_keep, int ack_ms, int timeout_ms,
                 uint64_t *grant, int64_t *short_by, client_admission *fig, bool *unanswered)
{
    fig->decided = false;
    *unanswered = false;
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (device < 0 || device >= COMEM_MAX_DEVICES || weights < 0 || inference < 0 || cast_forward < 0 ||
        n_keep > COMEM_WIRE_MAX_ITEMS || (n_keep && !keep))
        return COMEM_EINVAL;
    bool done;
    int frc = admit_fast(c, device, holder, weights, comem_add(inference, cast_forward), keep, n_keep, grant, short_by,
                         fig, &done);
    if (done)
        return frc;
    int timeout = comem_client_timeout(c, timeout_ms);
    comem_msg *m = malloc(sizeof *m); /* 16 KiB: not on a caller's (possibly small) stack */
    if (!m)
        return COMEM_ENOMEM;
    memset(m, 0, sizeof *m);
    client_req r = {0};
    int rc = COMEM_OK;

    pthread_mutex_lock(&c->lock);
    client_holder *h = holder ? comem_tab_holder(c, holder) : NULL;
    if (holder && !h)
        rc = COMEM_ENOENT;
    uint16_t nk = 0;
    for (size_t i = 0; rc == COMEM_OK && i < n_keep; i++) {
        client_entry *e = comem_tab_entry(c, keep[i]);
        if (!e)
            rc = COMEM_ENOENT;
        else if (comem_tab_entry_live(c, e))
            m->u.admit.keep[nk++] = e->coord_id; /* one the coordinator does not know yet cannot be asked anyway */
    }
    bool local = false;
    if (rc == COMEM_OK)
        rc = route(c, &local);
    if (rc == COMEM_OK && !local) {
        m->type = COMEM_MSG_ADMIT;
        m->u.admit.device = (uint16_t)device;
        m->u.admit.holder_id = h && comem_tab_holder_live(c, h) ? h->coord_id : 0;
        m->u.admit.weights = weights;
        m->u.admit.inference = inference;
        m->u.admit.cast_forward = cast_forward;
        m->u.admit.timeout_ms = coord_budget(timeout);
        m->u.admit.n_keep = nk;
        rc = comem_req_begin(c, &r, PEND_PLAIN, 0, 0, true);
    }
    pthread_mutex_unlock(&c->lock);
    if (rc != COMEM_OK) {
        free(m);
        return rc;
    }
    if (local) {
        free(m);
        if (c->flags & COMEM_OPEN_NO_LOCAL)
            return COMEM_ECLOSED;
        return comem_local_admit(c, device, weights, inference, cast_forward, grant, short_by, fig);
    }

    client_reply rep;
    rc = comem_req_finish_acked(c, &r, m, ack_ms, timeout, &rep, unanswered);
    free(m);
    if (rc != COMEM_OK)
        return rc;
    if ((rc = reply_status(&rep, COMEM_MSG_ADMIT_REPLY)) != COMEM_OK)
        return rc;
    const comem_msg_admit_reply *a = &rep.u.admit_reply;
    *fig = (client_admission){.decided = true, .need = a->need, .free_before = a->free_before,
                              .free_after = a->free_after, .freed = a->freed, .asked = a->n_asked, .busy = a->n_busy,
                              .n_ids = a->n_ids < COMEM_WIRE_MAX_ASKED ? a->n_ids : COMEM_WIRE_MAX_ASKED};
    memcpy(fig->ids, a->asked, fig->n_ids * sizeof fig->ids[0]);
    if (!a->granted) {
        if (short_by)
            *short_by = comem_clamp0(a->short_by);
        return COMEM_ENOSPC;
    }
    pthread_mutex_lock(&c->lock);
    client_grant *g = comem_tab_add_grant(c);
    uint64_t id = 0;
    if (g) {
        g->coord_id = a->grant_id;
        g->gen = r.gen;
        g->bytes = a->bytes;
        id = g->id;
    }
    pthread_mutex_unlock(&c->lock);
    if (!g) {
        /* Cannot remember it: give it back rather than leave bytes booked. */
        comem_msg back;
        memset(&back, 0, sizeof back);
        back.type = COMEM_MSG_GRANT_DONE;
        back.request_id = comem_client_next_req(c);
        back.u.grant_done.grant_id = a->grant_id;
        (void)comem_conn_send(c, r.gen, &back);
        return COMEM_ENOMEM;
    }
    if (grant)
        *grant = id;
    if (short_by)
        *short_by = 0;
    return COMEM_OK;
}

int comem_admit(comem_client *c, int device, uint64_t holder, int64_t weights, int64_t inference,
                int64_t cast_forward, const uint64_t *keep, size_t n_keep, int timeout_ms, uint64_t *grant,
                int64_t *short_by)
{
    client_admission fig;
    bool unanswered;
    int rc = admit(c, device, holder, weights, inference, cast_forward, keep, n_keep, 0, timeout_ms, grant, short_by,
                   &fig, &unanswered);
    remember(c, &fig);
    return rc;
}

int comem_admit_acked(comem_client *c, int device, uint64_t holder, int64_t weights, int ack_ms, int timeout_ms,
                      uint64_t *grant, int64_t *short_by, bool *unanswered)
{
    client_admission fig;
    int rc = admit(c, device, holder, weights, 0, 0, NULL, 0, ack_ms, timeout_ms, grant, short_by, &fig, unanswered);
    remember(c, &fig);
    return rc;
}

int64_t comem_admit_fits(int64_t weights, int64_t short_by) { return comem_admit_fitting(weights, short_by); }

int comem_admit_figures(comem_client *c, int device, uint64_t holder, int64_t weights, int64_t inference,
                        int64_t cast_forward, const uint64_t *keep, size_t n_keep, int timeout_ms, int64_t *figures)
{
    uint64_t grant = 0;
    int64_t short_by = 0;
    client_admission fig;
    bool unanswered;
    int rc = admit(c, device, holder, weights, inference, cast_forward, keep, n_keep, 0, timeout_ms, &grant, &short_by,
                   &fig, &unanswered);
    remember(c, &fig);
    if (figures) {
        if (!fig.decided)
            fig = (client_admission){0};
        figures[COMEM_ADMIT_GRANT] = (int64_t)grant;
        figures[COMEM_ADMIT_SHORT_BY] = short_by;
        figures[COMEM_ADMIT_NEED] = fig.need;
        figures[COMEM_ADMIT_FREE_BEFORE] = fig.free_before;
        figures[COMEM_ADMIT_FREE_AFTER] = fig.free_after;
        figures[COMEM_ADMIT_FREED] = fig.freed;
        figures[COMEM_ADMIT_ASKED] = fig.asked;
        figures[COMEM_ADMIT_BUSY] = fig.busy;
    }
    return rc;
}

int comem_grant_done(comem_client *c, uint64_t grant, uint64_t entry, int64_t used)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (used < 0)
        return COMEM_EINVAL;
    comem_msg m;
    memset(&m, 0, sizeof m);
    client_req r = {0};
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
    if (grew && (stale || !comem_tab_entry_live(c, e))) {
        /*
         * No GRANT_DONE will carry the growth: the grant was local, or booked by a
         * coordinator that is gone (the entry may already be registered with the new
         * one, at its old residency), or the entry is not registered yet. A new census
         * sequence makes the residency reach the coordinator: now, when the entry is
         * registered on this connection, else with the resync or its registration.
         */
        e->seq++;
        client_holder *h = comem_tab_holder(c, e->holder);
        if (stale && c->link == LINK_UP && h && comem_tab_entry_live(c, e) && comem_tab_holder_live(c, h)) {
            m.type = COMEM_MSG_CENSUS;
            m.u.census.holder_id = h->coord_id;
            m.u.census.seq = h->report_seq;
            m.u.census.n = 1;
            m.u.census.items[0] = (comem_wire_residency){e->coord_id, e->seq, e->resident, e->refs};
            e->synced_seq = e->seq;
            bool wait = !comem_on_service_thread(c);
            int rc = comem_req_begin(c, &r, PEND_PLAIN, 0, 0, wait);
            pthread_mutex_unlock(&c->lock);
            if (rc != COMEM_OK)
                return rc;
            client_reply rep;
            rc = comem_req_finish(c, &r, &m, comem_client_timeout(c, -1), &rep, NULL);
            if (rc == COMEM_ECLOSED)
                return COMEM_OK; /* lost again: the resync replays the residency */
            if (rc != COMEM_OK || rep.type == 0)
                return rc;
            if (rep.type != COMEM_MSG_REPLY)
                return reply_status(&rep, COMEM_MSG_REPLY);
            if (rep.u.reply.status != COMEM_OK)
                comem_client_set_reason(rep.u.reply.message);
            return rep.u.reply.status;
        }
        if (c->link != LINK_DOWN) {
            c->need_sync = true;
            comem_client_wake(c);
        }
    }
    /* A local grant, or one from a coordinator that is gone: nothing is booked anywhere. */
    if (stale) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_OK;
    }
    uint64_t entry_coord = e && comem_tab_entry_live(c, e) ? e->coord_id : 0;
    if (g.fast && entry_coord == 0) { /* a cancelled booking: given back in shared memory, no round trip */
        client_fast *f = comem_fast_for(c, g.gen);
        pthread_mutex_unlock(&c->lock);
        if (f) {
            comem_fast_cancel(f, &g);
            if (comem_fast_coordinator_dozing(f, comem_now_ns()))
                wake_coordinator(c, g.gen);
        }
        return COMEM_OK;
    }
    if (g.fast) /* a load: through the socket, in order with the censuses that follow it */
        g.coord_id = BOOK_REF(g.fast_idx, g.fast_seq);
    m.type = COMEM_MSG_GRANT_DONE;
    m.u.grant_done.grant_id = g.coord_id;
    m.u.grant_done.entry_id = e && comem_tab_entry_live(c, e) ? e->coord_id : 0;
    m.u.grant_done.used = used;
    int rc = comem_req_begin(c, &r, PEND_PLAIN, 0, 0, !comem_on_service_thread(c));
    pthread_mutex_unlock(&c->lock);
    if (rc != COMEM_OK)
        return rc;
    client_reply rep;
    rc = comem_req_finish(c, &r, &m, comem_client_timeout(c, -1), &rep, NULL);
    if (rc == COMEM_ECLOSED)
        return COMEM_OK; /* the coordinator went with its grants */
    if (rc != COMEM_OK || rep.type == 0)
        return rc;
    if (rep.type != COMEM_MSG_REPLY)
        return reply_status(&rep, COMEM_MSG_REPLY);
    if (rep.u.reply.status == COMEM_ENOENT && m.u.grant_done.entry_id) {
        /* Expired there (an unused grant lasts 60 s): the load stands, its residency is reported by
           the census; but the bytes were not held for it at the end, and that is worth a line. */
        comem_warn("grant %llx had expired at the coordinator before its load was reported (%s); the load is "
                   "counted from its residency",
                   (unsigned long long)g.coord_id, rep.u.reply.message);
        return COMEM_OK;
    }
    return rep.u.reply.status == COMEM_ENOENT ? COMEM_OK : rep.u.reply.status; /* a cancel of what expired */
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
    memset(&m, 0, sizeof m);
    client_req r = {0};
    int rc = COMEM_OK;
    pthread_mutex_lock(&c->lock);
    bool local;
    rc = route(c, &local);
    if (rc == COMEM_OK && !local) {
        m.type = COMEM_MSG_PRESSURE;
        m.u.pressure.device = (uint16_t)device;
        m.u.pressure.bytes = bytes;
        m.u.pressure.timeout_ms = coord_budget(timeout);
        rc = comem_req_begin(c, &r, PEND_PLAIN, 0, 0, true);
    }
    pthread_mutex_unlock(&c->lock);
    if (rc != COMEM_OK)
        return rc;
    if (local) {
        if (c->flags & COMEM_OPEN_NO_LOCAL)
            return COMEM_ECLOSED;
        if (freed)
            *freed = 0; /* no siblings to ask */
        return COMEM_OK;
    }
    client_reply rep;
    if ((rc = comem_req_finish(c, &r, &m, timeout, &rep, NULL)) != COMEM_OK)
        return rc;
    if ((rc = reply_status(&rep, COMEM_MSG_PRESSURE_REPLY)) != COMEM_OK)
        return rc;
    if (freed)
        *freed = comem_clamp0(rep.u.pressure_reply.freed);
    return COMEM_OK;
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
    memset(&m, 0, sizeof m);
    client_req r = {0};
    pthread_mutex_lock(&c->lock);
    bool local;
    int rc = route(c, &local);
    if (rc == COMEM_OK && local)
        rc = COMEM_ECLOSED; /* another process's entry exists only at a coordinator */
    if (rc == COMEM_OK) {
        m.type = COMEM_MSG_RELEASE;
        m.u.release.entry_id = entry;
        m.u.release.bytes = bytes < 0 ? -1 : bytes;
        m.u.release.timeout_ms = coord_budget(timeout);
        rc = comem_req_begin(c, &r, PEND_PLAIN, 0, 0, true);
    }
    pthread_mutex_unlock(&c->lock);
    if (rc != COMEM_OK)
        return rc;
    client_reply rep;
    if ((rc = comem_req_finish(c, &r, &m, timeout, &rep, NULL)) != COMEM_OK)
        return rc;
    if ((rc = reply_status(&rep, COMEM_MSG_RELEASE_REPLY)) != COMEM_OK)
        return rc;
    const comem_msg_release_reply *x = &rep.u.release_reply;
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

/* Lock held: the pin counters of holder (0: the process), or NULL when unknown. */
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

int comem_pin_acquire(comem_client *c, uint64_t holder, int64_t bytes, int64_t *shortfall)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (bytes < 0)
        return COMEM_EINVAL;
    comem_msg m;
    memset(&m, 0, sizeof m);
    client_req r = {0};
    int64_t *pins, *synced;
    uint64_t coord;
    bool live;
    int rc = COMEM_OK;
    pthread_mutex_lock(&c->lock);
    if (!pin_counters(c, holder, &pins, &synced, &coord, &live)) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_ENOENT;
    }
    bool local = decide_locally(c) || !live;
    if (local) {
        if (c->flags & COMEM_OPEN_NO_LOCAL) {
            pthread_mutex_unlock(&c->lock);
            return COMEM_ECLOSED;
        }
        /* No machine-wide ceiling to check; booked with the next coordinator by the resync. */
        *pins = comem_add(*pins, bytes);
        if (c->link == LINK_UP) {
            c->need_sync = true;
            comem_client_wake(c);
        }
        pthread_mutex_unlock(&c->lock);
        if (shortfall)
            *shortfall = 0;
        return COMEM_OK;
    }
    if (cannot_wait(c))
        rc = COMEM_EBUSY;
    if (rc == COMEM_OK) {
        m.type = COMEM_MSG_PIN_ACQUIRE;
        m.u.pin.holder_id = coord;
        m.u.pin.bytes = bytes;
        rc = comem_req_begin(c, &r, PEND_PIN, coord, (uint64_t)bytes, true);
    }
    pthread_mutex_unlock(&c->lock);
    if (rc != COMEM_OK)
        return rc;
    client_reply rep;
    if ((rc = comem_req_finish(c, &r, &m, comem_client_timeout(c, -1), &rep, NULL)) != COMEM_OK)
        return rc;
    if ((rc = reply_status(&rep, COMEM_MSG_PIN_REPLY)) != COMEM_OK)
        return rc;
    if (!rep.u.pin_reply.granted) {
        if (shortfall)
            *shortfall = comem_clamp0(rep.u.pin_reply.shortfall);
        return COMEM_ENOSPC;
    }
    pthread_mutex_lock(&c->lock);
    if (pin_counters(c, holder, &pins, &synced, &coord, &live)) {
        *pins = comem_add(*pins, bytes);
        /* Booked on the connection it was asked on; a newer one learns it from the resync. */
        if (live && c->gen == r.gen)
            *synced = comem_add(*synced, bytes);
        else if (c->link != LINK_DOWN) {
            c->need_sync = true;
            comem_client_wake(c);
        }
    }
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
    memset(&m, 0, sizeof m);
    client_req r = {0};
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
    bool send = false;
    if (live) {
        *synced = comem_clamp0(comem_sub(*synced, bytes));
        m.type = COMEM_MSG_PIN_RELEASE;
        m.u.pin.holder_id = coord;
        m.u.pin.bytes = bytes;
        send = comem_req_begin(c, &r, PEND_PLAIN, 0, 0, !comem_on_service_thread(c)) == COMEM_OK;
    }
    pthread_mutex_unlock(&c->lock);
    if (!send)
        return COMEM_OK;
    client_reply rep;
    int rc = comem_req_finish(c, &r, &m, comem_client_timeout(c, -1), &rep, NULL);
    if (rc == COMEM_ECLOSED)
        return COMEM_OK;
    if (rc != COMEM_OK || rep.type == 0)
        return rc;
    return reply_status(&rep, COMEM_MSG_PIN_REPLY);
}

int comem_reserve(comem_client *c, int device, int64_t *reserve, int64_t *pager_headroom)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (device < 0 || device >= COMEM_MAX_DEVICES)
        return COMEM_EINVAL;
    comem_msg m;
    memset(&m, 0, sizeof m);
    client_req r = {0};
    int rc = COMEM_OK;
    pthread_mutex_lock(&c->lock);
    bool local;
    rc = route(c, &local);
    if (rc == COMEM_OK && !local) {
        m.type = COMEM_MSG_RESERVE;
        m.u.reserve.device = (uint16_t)device;
        rc = comem_req_begin(c, &r, PEND_PLAIN, 0, 0, true);
    }
    pthread_mutex_unlock(&c->lock);
    if (rc != COMEM_OK)
        return rc;
    if (local) {
        if (c->flags & COMEM_OPEN_NO_LOCAL)
            return COMEM_ECLOSED;
        comem_local_reserve(c, reserve, pager_headroom);
        return COMEM_OK;
    }
    client_reply rep;
    if ((rc = comem_req_finish(c, &r, &m, comem_client_timeout(c, -1), &rep, NULL)) != COMEM_OK)
        return rc;
    if ((rc = reply_status(&rep, COMEM_MSG_RESERVE_REPLY)) != COMEM_OK)
        return rc;
    if (reserve)
        *reserve = rep.u.reserve_reply.for_requester;
    if (pager_headroom)
        *pager_headroom = rep.u.reserve_reply.pager_headroom;
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
    memset(&m, 0, sizeof m);
    client_req r = {0};
    int rc = COMEM_OK;
    pthread_mutex_lock(&c->lock);
    bool local;
    rc = route(c, &local);
    if (rc == COMEM_OK && !local) {
        m.type = COMEM_MSG_STATUS;
        rc = comem_req_begin(c, &r, PEND_STATUS, 0, 0, true);
    }
    pthread_mutex_unlock(&c->lock);
    if (rc != COMEM_OK)
        return rc;
    if (local)
        return (c->flags & COMEM_OPEN_NO_LOCAL) ? COMEM_ECLOSED : comem_local_status(c, json);
    client_reply rep;
    char *text = NULL;
    rc = comem_req_finish(c, &r, &m, comem_client_timeout(c, -1), &rep, &text);
    if (rc == COMEM_OK)
        rc = reply_status(&rep, COMEM_MSG_STATUS_REPLY);
    if (rc != COMEM_OK) {
        free(text);
        return rc;
    }
    *json = text;
    return COMEM_OK;
}

void comem_free(void *p) { free(p); }
