/*
 * client/admit.c - admission: the calls that ask to load, and the one record
 * every decision comes back in (comem_admission, include/comem/comem.h).
 *
 * An admission is decided in one of three places, tried in this order, and
 * each writes the same record: the booking area, when it fits this session's
 * stock (client/fast.c: no round trip); the coordinator, with the link up
 * (an ADMIT, through the call helper: the figures are its ADMIT_REPLY's); this
 * process alone, without a coordinator (client/local.c). comem_admit_record
 * gives the record to its caller through its pointer and keeps nothing.
 * comem_admit and the preload's comem_admit_acked (client/admit.h) write two
 * of its figures to their callers and keep the whole record on the client
 * (c->last_admit), where comem_admit_details reads it for callers written
 * before the record.
 */
#include <stdlib.h>
#include <string.h>

#include "arith/cross_reserve.h"
#include "base/bytes.h"
#include "client/admit.h"
#include "client/call.h"
#include "client/conn.h"
#include "client/frames.h"
#include "client/local.h"
#include "client/shared.h"

/*
 * The fast path (client/fast.c): an admission that fits the room the
 * coordinator published is booked in shared memory, without a round trip.
 * *done false: it must go to the coordinator (no area, no room, any doubt);
 * true: the return value is the answer (COMEM_OK booked, with a's figures;
 * COMEM_ENOENT an unknown holder or keep entry, COMEM_ENOMEM).
 */
static int admit_fast(comem_client *c, const client_admit_ask *q, comem_admission *a, bool *done)
{
    *done = false;
    client_fast *f = NULL;
    uint64_t holder_coord = 0;
    pthread_mutex_lock(&c->lock);
    uint64_t gen = c->gen;
    client_holder *h = q->holder ? comem_tab_holder(c, q->holder) : NULL;
    bool known = !q->holder || h;
    for (size_t i = 0; known && i < q->n_keep; i++)
        known = comem_tab_entry(c, q->keep[i]) != NULL;
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
    if (!f || !comem_fast_book(f, q->device, holder_coord, q->weights, comem_add(q->inference, q->cast_forward),
                               &booked, a))
        return COMEM_OK; /* nothing written to *a */
    *done = true;
    pthread_mutex_lock(&c->lock);
    client_grant *g = comem_tab_add_grant(c);
    if (g) {
        booked.id = g->id;
        booked.gen = gen;
        booked.holder = q->holder;
        booked.device = q->device;
        *g = booked;
    }
    pthread_mutex_unlock(&c->lock);
    if (!g) {
        comem_fast_cancel(f, &booked); /* cannot remember it: give it back */
        return COMEM_ENOMEM;
    }
    if (booked.wake)
        comem_fast_wake(c, gen);
    a->grant = booked.id;
    return COMEM_OK;
}

/* The ADMIT's builder, under the lock (call.h's build): the question in the coordinator's ids. */
static int admit_frame(comem_client *c, client_call *call)
{
    return comem_frame_admit(call->m, c, call->arg, comem_call_budget(call->timeout_ms));
}

/* The coordinator's decision: its ADMIT_REPLY's figures into *a, and a granted grant into the mirror. */
static int admit_reply(comem_client *c, const client_call *call, comem_admission *a)
{
    const comem_msg_admit_reply *x = &call->rep.u.admit_reply;
    a->decided = 1;
    a->need = x->need;
    a->free_before = x->free_before;
    a->free_after = x->free_after;
    a->freed = x->freed;
    a->n_asked = x->n_asked;
    a->n_busy = x->n_busy;
    a->n_ids = x->n_ids < COMEM_ADMISSION_ASKED_MAX ? x->n_ids : COMEM_ADMISSION_ASKED_MAX;
    memcpy(a->asked, x->asked, a->n_ids * sizeof a->asked[0]);
    if (!x->granted) {
        a->short_by = comem_clamp0(x->short_by);
        return COMEM_ENOSPC;
    }
    pthread_mutex_lock(&c->lock);
    client_grant *g = comem_tab_add_grant(c);
    if (g) {
        const client_admit_ask *q = call->arg;
        g->coord_id = x->grant_id;
        g->gen = call->r.gen;
        g->bytes = x->bytes;
        g->holder = q->holder;
        g->device = q->device;
        a->grant = g->id;
    }
    pthread_mutex_unlock(&c->lock);
    if (!g) {
        /* Cannot remember it: give it back rather than leave bytes booked. */
        comem_msg back;
        comem_frame_grant_done(&back, x->grant_id, 0, 0)->request_id = comem_client_next_req(c);
        (void)comem_conn_send(c, call->r.gen, &back);
        return COMEM_ENOMEM;
    }
    return COMEM_OK;
}

/* Not booked in the area: the coordinator decides, or with no coordinator this process does. */
static int admit_slow(comem_client *c, const client_admit_ask *q, int ack_ms, int timeout_ms, comem_admission *a,
                      bool *unanswered)
{
    comem_msg *m = malloc(sizeof *m); /* 16 KiB: not on a caller's (possibly small) stack */
    if (!m)
        return COMEM_ENOMEM;
    client_call call = {.m = m, .build = admit_frame, .arg = q, .want = COMEM_MSG_ADMIT_REPLY,
                        .timeout_ms = comem_client_timeout(c, timeout_ms), .ack_ms = ack_ms};
    int rc = comem_call_decide(c, &call);
    free(m);
    *unanswered = call.unanswered;
    if (rc == COMEM_CALL_LOCAL)
        return comem_local_admit(c, q->device, q->weights, q->inference, q->cast_forward, a);
    return rc == COMEM_OK ? admit_reply(c, &call, a) : rc;
}

/*
 * One admission, decided where it can be (above). *a is zeroed first and filled
 * with the decision (a->decided stays 0 when the call failed before any).
 * With ack_ms > 0, a coordinator that neither answers nor acknowledges the ADMIT
 * within ack_ms is not waited for further: COMEM_ETIMEDOUT, *unanswered true.
 */
static int admit(comem_client *c, const client_admit_ask *q, int ack_ms, int timeout_ms, comem_admission *a,
                 bool *unanswered)
{
    memset(a, 0, sizeof *a);
    *unanswered = false;
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (q->device < 0 || q->device >= COMEM_MAX_DEVICES || q->weights < 0 || q->inference < 0 ||
        q->cast_forward < 0 || q->n_keep > COMEM_WIRE_MAX_ITEMS || (q->n_keep && !q->keep))
        return COMEM_EINVAL;
    bool done;
    int rc = admit_fast(c, q, a, &done);
    if (!done)
        rc = admit_slow(c, q, ack_ms, timeout_ms, a, unanswered);
    if (a->decided)
        a->fits = comem_admit_fitting(q->weights, a->short_by);
    return rc;
}

int comem_admit_record(comem_client *c, int device, uint64_t holder, int64_t weights, int64_t inference,
                       int64_t cast_forward, const uint64_t *keep, size_t n_keep, int timeout_ms, comem_admission *out)
{
    client_admit_ask q = {device, holder, weights, inference, cast_forward, keep, n_keep};
    comem_admission scratch;
    bool unanswered;
    return admit(c, &q, 0, timeout_ms, out ? out : &scratch, &unanswered);
}

/*
 * The copy comem_admit and comem_admit_acked keep for comem_admit_details: a
 * decision replaces it, a failure before one leaves it.
 */
static void keep_last(comem_client *c, const comem_admission *a)
{
    if (!a->decided)
        return;
    pthread_mutex_lock(&c->lock);
    c->last_admit = *a;
    pthread_mutex_unlock(&c->lock);
}

/* What comem_admit has always written: the grant on success, short_by on a decision. */
static void plain_out(int rc, const comem_admission *a, uint64_t *grant, int64_t *short_by)
{
    if (rc == COMEM_OK && grant)
        *grant = a->grant;
    if ((rc == COMEM_OK || rc == COMEM_ENOSPC) && short_by)
        *short_by = a->short_by;
}

int comem_admit(comem_client *c, int device, uint64_t holder, int64_t weights, int64_t inference,
                int64_t cast_forward, const uint64_t *keep, size_t n_keep, int timeout_ms, uint64_t *grant,
                int64_t *short_by)
{
    client_admit_ask q = {device, holder, weights, inference, cast_forward, keep, n_keep};
    comem_admission a;
    bool unanswered;
    int rc = admit(c, &q, 0, timeout_ms, &a, &unanswered);
    keep_last(c, &a);
    plain_out(rc, &a, grant, short_by);
    return rc;
}

int comem_admit_acked(comem_client *c, int device, uint64_t holder, int64_t weights, int ack_ms, int timeout_ms,
                      uint64_t *grant, int64_t *short_by, bool *unanswered)
{
    client_admit_ask q = {device, holder, weights, 0, 0, NULL, 0};
    comem_admission a;
    int rc = admit(c, &q, ack_ms, timeout_ms, &a, unanswered);
    keep_last(c, &a);
    plain_out(rc, &a, grant, short_by);
    return rc;
}

void comem_admit_details(comem_client *c, int64_t *need, int64_t *free_before, int64_t *free_after, int64_t *freed,
                         int *asked, int *busy)
{
    comem_admission l = {0};
    if (c && c->opener == comem_client_this_process()) { /* not in a forked child: its lock may be held */
        pthread_mutex_lock(&c->lock);
        l = c->last_admit;
        pthread_mutex_unlock(&c->lock);
    }
    if (need)
        *need = l.need;
    if (free_before)
        *free_before = l.free_before;
    if (free_after)
        *free_after = l.free_after;
    if (freed)
        *freed = l.freed;
    if (asked)
        *asked = l.n_asked;
    if (busy)
        *busy = l.n_busy;
}

int64_t comem_admit_fits(int64_t weights, int64_t short_by) { return comem_admit_fitting(weights, short_by); }
