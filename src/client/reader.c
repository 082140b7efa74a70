/*
 * client/reader.c - THE READER ROLE in one place (client/state.h draws it):
 * whoever holds c->read_lock reads the socket and dispatches what it reads,
 * replies to their waiting records (client/pending.c), asks to the callback
 * thread's queue (client/callbacks.c), late grants and orphaned adds given
 * back. Where the socket rests while no caller leads: the callback thread's
 * set while it idles (comem_reader_idle), else the service thread's
 * (comem_reader_pump); a caller
 * waiting for a reply takes the role when it finds it free (lead), so the
 * reply costs no thread wake-up; else it sleeps on its record until the
 * reader signals it. And a request's whole wait: send, lead or sleep or (on
 * the service thread) pump, then take the reply or give up.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "base/bytes.h"
#include "base/clock.h"
#include "base/hops.h"
#include "base/log.h"
#include "base/spin.h"
#include "client/callbacks.h"
#include "client/conn.h"
#include "client/frames.h"
#include "client/request.h"

/* A reply nobody waits for: its caller timed out. A late grant is given back at once. */
static void late_reply(comem_client *c, const comem_msg *m, uint64_t gen)
{
    if (m->type == COMEM_MSG_ADMIT_REPLY && m->u.admit_reply.granted) {
        comem_info("an admission was granted after its caller gave up; giving grant %llu back",
                   (unsigned long long)m->u.admit_reply.grant_id);
        comem_msg g;
        comem_frame_grant_done(&g, m->u.admit_reply.grant_id, 0, 0)->request_id = comem_client_next_req(c);
        (void)comem_conn_send(c, gen, &g);
        return;
    }
    comem_debug("dropping a late %s (request %u)", comem_wire_type_name(m->type), m->request_id);
}

/*
 * An add answered after its object was removed, or a pin granted after its caller
 * gave up: take it back out of the ledger.
 */
static void give_back(comem_client *c, pend_kind kind, uint64_t coord_id, int64_t bytes, uint64_t gen)
{
    comem_msg g;
    if (kind == PEND_PIN) {
        comem_info("pinned RAM was granted after its caller gave up; giving %lld bytes back", (long long)bytes);
        comem_frame_pin(&g, COMEM_MSG_PIN_RELEASE, coord_id, bytes);
    } else {
        comem_frame_id(&g, kind == PEND_HOLDER_ADD ? COMEM_MSG_HOLDER_REMOVE : COMEM_MSG_ENTRY_REMOVE, coord_id);
    }
    g.request_id = comem_client_next_req(c);
    (void)comem_conn_send(c, gen, &g);
}

/* Dispatches the frame in c->in. COMEM_EPROTO for a frame a coordinator must not send. */
static int dispatch(comem_client *c)
{
    const comem_msg *m = c->in;
    if (m->type == COMEM_MSG_ASK) {
        comem_hop(COMEM_HOP_ASK_READ);
        comem_callbacks_queue(c, &m->u.ask); /* answered by the callback thread, which may be this one */
        return COMEM_OK;
    }
    if (m->type < COMEM_MSG_REPLY ||
        (m->type > COMEM_MSG_STATUS_REPLY && m->type != COMEM_MSG_RELEASE_REPLY && m->type != COMEM_MSG_ADMIT_QUEUED)) {
        comem_error("the coordinator sent a %s frame, which only clients send; reconnecting",
                    comem_wire_type_name(m->type));
        return COMEM_EPROTO;
    }
    pend_kind orphan_kind = PEND_PLAIN;
    uint64_t orphan = 0;
    int64_t orphan_bytes = 0;
    pthread_mutex_lock(&c->lock);
    bool matched = comem_pending_complete(c, m, &orphan_kind, &orphan, &orphan_bytes);
    uint64_t gen = c->gen;
    pthread_mutex_unlock(&c->lock);
    if (!matched)
        late_reply(c, m, gen);
    else if (atomic_load(&c->service_reads) && !comem_on_service_thread(c))
        comem_client_wake(c); /* it may be the service thread's reply, and it waits in its set, not on a cond */
    if (orphan_kind != PEND_PLAIN)
        give_back(c, orphan_kind, orphan, orphan_bytes, gen);
    return COMEM_OK;
}

/*
 * Reader role held: dispatches every whole frame in the buffer. COMEM_OK, or
 * COMEM_EPROTO for a frame a coordinator must not send (the service thread
 * then drops the link).
 */
static int dispatch_all(comem_client *c)
{
    int rc;
    while ((rc = comem_conn_next(c)) == 1)
        if ((rc = dispatch(c)) != COMEM_OK)
            return rc;
    return rc < 0 ? rc : COMEM_OK;
}

/* *done, read where it is written (a leading caller may complete this thread's requests). */
static bool is_done(comem_client *c, const bool *done)
{
    if (!done)
        return false;
    pthread_mutex_lock(&c->lock);
    bool d = *done;
    pthread_mutex_unlock(&c->lock);
    return d;
}

static int pump(comem_client *c, const bool *done, int64_t deadline_ns);

/* ---- where the socket rests (request.h) ---- */

static client_waits *rest_wanted(comem_client *c)
{
    bool with_callback = comem_port_socket_moves() && atomic_load(&c->cb_idle) && !atomic_load(&c->service_reads) &&
                         !atomic_load(&c->read_failed);
    return with_callback ? c->cb : c->svc;
}

/* Reader role held: the socket waits in set (NULL: in none; a leader reads it). */
static void rest_in(comem_client *c, client_waits *set)
{
    client_waits *now = atomic_load(&c->rest);
    if (!c->sock || now == set)
        return;
    if (now)
        comem_waits_hold(now, c->sock, false);
    if (set)
        comem_waits_hold(set, c->sock, true);
    atomic_store(&c->rest, set);
}

void comem_reader_settle(comem_client *c)
{
    /* Whoever changes the wish tries the role after; whoever holds the role looks at the wish after
       letting go (reader_unlock): one of the two always moves the socket. */
    for (;;) {
        if (atomic_load(&c->rest) == rest_wanted(c) || pthread_mutex_trylock(&c->read_lock) != 0)
            return;
        client_waits *before = atomic_load(&c->rest);
        if (before)
            rest_in(c, rest_wanted(c));
        bool moved = atomic_load(&c->rest) != before;
        pthread_mutex_unlock(&c->read_lock);
        if (!moved)
            return; /* no socket, or it is out with a leader, which settles it as it hands it back */
    }
}

void comem_reader_rest_with(comem_client *c, bool callback)
{
    atomic_store(&c->cb_idle, callback);
    comem_reader_settle(c);
}

void comem_reader_rest_new(comem_client *c)
{
    atomic_store(&c->rest, NULL);
    rest_in(c, rest_wanted(c));
}

/* Lets the reader role go, the socket left where it is wished. */
static void reader_unlock(comem_client *c)
{
    if (atomic_load(&c->rest))
        rest_in(c, rest_wanted(c));
    pthread_mutex_unlock(&c->read_lock);
    comem_reader_settle(c);
}

void comem_reader_idle(comem_client *c)
{
    if (pthread_mutex_trylock(&c->read_lock) != 0)
        return; /* a leader or the service thread has the role: it reads */
    int rc = c->sock ? comem_conn_fill(c) : 0;
    if (rc >= 0)
        rc = dispatch_all(c);
    if (rc < 0)
        atomic_store(&c->read_failed, rc); /* the socket rests with the service thread from now on */
    reader_unlock(c);
    if (rc < 0)
        comem_client_wake(c); /* it drops the link */
}

/* ---- the service thread as the reader ---- */

int comem_reader_pump(comem_client *c, const bool *done, int64_t deadline_ns)
{
    if (done) { /* replies to the service thread's own requests: the socket rests with it meanwhile */
        atomic_store(&c->service_reads, true);
        comem_reader_settle(c);
    }
    int rc = pump(c, done, deadline_ns);
    if (done) {
        atomic_store(&c->service_reads, false);
        comem_reader_settle(c);
    }
    return rc;
}

static int pump(comem_client *c, const bool *done, int64_t deadline_ns)
{
    for (;;) {
        pthread_mutex_lock(&c->read_lock);
        int rc = dispatch_all(c);
        reader_unlock(c);
        if (rc != COMEM_OK)
            return rc;
        if (is_done(c, done))
            return COMEM_OK;
        if (atomic_load(&c->stopping))
            return COMEM_ECLOSED;
        int wait = -1;
        if (deadline_ns >= 0 && (wait = comem_ms_until(deadline_ns)) == 0)
            return COMEM_ETIMEDOUT;
        rc = comem_waits_wait(c->svc, wait);
        if (rc < 0)
            return rc;
        if (rc == 2 && !done)
            return COMEM_OK; /* woken: the loop looks at stopping and need_sync */
        if (rc == 1) {
            pthread_mutex_lock(&c->read_lock);
            rc = comem_conn_fill(c); /* 0: a leading caller read it first */
            reader_unlock(c);
            if (rc < 0)
                return rc;
        }
    }
}

/* ---- a caller as the reader: the leader ---- */

/*
 * Takes the reader role for request r when nobody holds it: the socket leaves
 * the service thread's wait set, so the reply wakes this thread and no other.
 * False: the service thread (or another caller) reads, and this caller waits
 * to be signalled.
 */
static bool lead_begin(comem_client *c, const client_req *r)
{
    if (!comem_port_socket_moves() || !r->p || !r->p->waiting || comem_on_service_thread(c) ||
        pthread_mutex_trylock(&c->read_lock) != 0)
        return false;
    if (!c->sock || c->fd_gen != r->gen) {
        pthread_mutex_unlock(&c->read_lock);
        return false;
    }
    rest_in(c, NULL); /* out of whichever set it rested in: the reply wakes this thread alone */
    return true;
}

/*
 * When a waiter stops waiting (CLOCK_MONOTONIC ns): the deadline, or the
 * acknowledgement's (ack_deadline, 0: none) while no ADMIT_QUEUED has come.
 */
static int64_t wait_until(comem_client *c, const client_pending *p, int64_t deadline, int64_t ack_deadline)
{
    if (!ack_deadline)
        return deadline;
    pthread_mutex_lock(&c->lock);
    bool acked = p->acked;
    pthread_mutex_unlock(&c->lock);
    return acked || ack_deadline > deadline ? deadline : ack_deadline;
}

/*
 * The leader reads and dispatches until its own reply is there, the deadline passes or the stream fails.
 * For the spin budget (base/spin.h) it looks for the reply without sleeping, yielding the CPU between
 * looks (a coordinator on the same CPU runs): a reply due within microseconds then costs no wake-up.
 * After that it waits as a bare protocol client does, in a blocking recv (comem_conn_fill_wait): one
 * wake-up and one system call when the reply comes. A poll and then a recv cost 3.8-4.5 us more per
 * call across CPUs on the H200 host (docs/measurements.md, issue 24 item 2). A wait shorter than the
 * recv's slice (an acknowledgement's deadline) is a poll, so no deadline is overshot.
 */
static void lead(comem_client *c, client_pending *p, int64_t deadline, int64_t ack_deadline)
{
    int64_t spin_until = comem_add(comem_now_ns(), comem_spin_ns());
    for (;;) {
        if (dispatch_all(c) != COMEM_OK)
            return; /* a bad frame: the service thread meets it too and drops the link */
        pthread_mutex_lock(&c->lock);
        bool done = p->done;
        pthread_mutex_unlock(&c->lock);
        if (done || atomic_load(&c->stopping))
            return;
        int wait = comem_ms_until(wait_until(c, p, deadline, ack_deadline));
        if (wait == 0)
            return;
        int rc;
        if (comem_now_ns() < spin_until) {
            if ((rc = comem_conn_fill(c)) == 0) {
                sched_yield();
                continue;
            }
        } else {
            /* stopping is looked at every slice; a wait shorter than the slice is a poll of its own length */
            rc = comem_conn_fill_wait(c, c->fd_blocks && wait >= COMEM_CONN_WAIT_SLICE_MS ? -1 : wait);
        }
        if (rc < 0)
            return; /* EOF or an error: the service thread sees it as well, and fails what waits */
    }
}

/* Hands the reader role back: the socket rests where it is wished (its waiter wakes if bytes wait). */
static void lead_end(comem_client *c)
{
    rest_in(c, rest_wanted(c));
    pthread_mutex_unlock(&c->read_lock);
    comem_reader_settle(c);
}

/* ---- a request's wait ---- */

/* comem_req_finish, and comem_req_finish_acked with ack_ms > 0. */
static int finish(comem_client *c, client_req *r, comem_msg *m, int ack_ms, int timeout_ms, client_reply *out,
                  char **text, bool *unanswered)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (unanswered)
        *unanswered = false;
    int64_t deadline = comem_now_ns() + (int64_t)timeout_ms * 1000000;
    int64_t ack_deadline = ack_ms > 0 ? comem_now_ns() + (int64_t)ack_ms * 1000000 : 0;
    bool leading = lead_begin(c, r);
    int rc = m ? comem_req_send(c, r, m) : COMEM_OK;
    client_pending *p = r->p;
    if (leading) {
        if (rc == COMEM_OK)
            lead(c, p, deadline, ack_deadline);
        lead_end(c);
    }
    if (!p)
        return rc;

    pthread_mutex_lock(&c->lock);
    if (rc != COMEM_OK) {
        /* Not sent: nobody will answer it. A detached record is still ours here,
           since only the service thread makes those and we are on it. */
        comem_req_abort(c, r);
        pthread_mutex_unlock(&c->lock);
        return rc;
    }
    if (!p->waiting) {
        pthread_mutex_unlock(&c->lock); /* detached: the reply is applied by the service thread */
        return COMEM_OK;
    }
    if (comem_on_service_thread(c)) {
        /* The service thread cannot sleep on its own replies: it reads them. */
        pthread_mutex_unlock(&c->lock);
        rc = comem_reader_pump(c, &p->done, deadline);
        pthread_mutex_lock(&c->lock);
    } else {
        rc = COMEM_OK;
        while (!p->done) {
            /* Until acknowledged, the wait ends at the acknowledgement's deadline; an ADMIT_QUEUED
               signals, and the wait then runs to the whole deadline. */
            bool bounded = ack_deadline && !p->acked && ack_deadline < deadline;
            struct timespec ts = comem_port_cond_deadline(bounded ? ack_deadline : deadline);
            int w = pthread_cond_timedwait(&p->cond, &c->lock, &ts);
            if (w == ETIMEDOUT && !p->done && (!p->acked || comem_now_ns() >= deadline)) {
                rc = COMEM_ETIMEDOUT;
                break;
            }
        }
    }
    if (unanswered)
        *unanswered = !p->done && ack_deadline && !p->acked;
    if (!p->done) {
        comem_req_give_up(c, r);
        pthread_mutex_unlock(&c->lock);
        return rc == COMEM_OK ? COMEM_ETIMEDOUT : rc;
    }
    rc = comem_req_take(c, r, out, text);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int comem_req_finish(comem_client *c, client_req *r, comem_msg *m, int timeout_ms, client_reply *out, char **text)
{
    return finish(c, r, m, 0, timeout_ms, out, text, NULL);
}

int comem_req_finish_acked(comem_client *c, client_req *r, comem_msg *m, int ack_ms, int timeout_ms, client_reply *out,
                           bool *unanswered)
{
    return finish(c, r, m, ack_ms, timeout_ms, out, NULL, unanswered);
}
