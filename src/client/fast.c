/*
 * client/fast.c - admissions that fit this session's stock, booked in its
 * booking area without a round trip (shm/book.h has the layout and the
 * rules, docs/booking.md the whole story and the threat model).
 *
 * The area comes with the HELLO_REPLY, which names it (os/shm.h): the
 * coordinator makes one per session and shares it with this process alone; it
 * is mapped here and nothing else names it any more (os/shm.h: a sealed memfd
 * whose descriptor is gone; a section whose handle is closed). A booking is charged
 * first, compared with the limit, and rolled back when it does not fit, so
 * this process's threads never share bytes; a booking that does not fit, or
 * any doubt (no area, a closed limit, no free record), goes to the
 * coordinator as before, which may ask holders for room. A mapping is never
 * unmapped while the client lives (a caller may still be inside it); a new
 * connection maps the new session's area beside it.
 */
#include <stdlib.h>
#include <string.h>

#include "arith/cross_reserve.h"
#include "base/bytes.h"
#include "base/clock.h"
#include "base/log.h"
#include "client/conn.h"
#include "client/frames.h"
#include "client/shared.h"
#include "os/env.h"
#include "shm/book.h"

struct client_fast {
    comem_shm *m;
    book_area *a; /* m's memory */
    uint64_t gen;
    int n_devices;
    _Atomic uint32_t hint; /* where the next claim starts looking */
    struct client_fast *next;
};

void comem_fast_attach(comem_client *c, uint64_t gen, uint64_t session)
{
    client_share share = c->area;
    c->area = (client_share){0};
    if (!share.named)
        return; /* COMEM_NO_FAST at the coordinator, or a tool: every admission goes through the socket */
    const char *off = comem_env("COMEM_NO_FAST");
    comem_shm *m = NULL;
    if (off && *off && strcmp(off, "0") != 0) {
        comem_shm_token_discard(share.t);
        return;
    }
    /* Only a region of the area's size that cannot shrink under the mapping is mapped (os/shm.h). */
    if (comem_shm_open(share.t, sizeof(book_area), COMEM_SHM_WRITABLE, &m) != COMEM_OK)
        return;
    book_area *a = comem_shm_addr(m);
    bool ours = a->magic == BOOK_MAGIC && a->version == BOOK_VERSION && a->n_devices <= COMEM_MAX_DEVICES &&
                a->session == session && a->pid == comem_client_this_process();
    client_fast *f = ours ? calloc(1, sizeof *f) : NULL;
    if (!f) {
        comem_shm_close(m);
        return;
    }
    comem_shm_stop_sharing(m); /* nothing here names it any more */
    f->m = m;
    f->a = a;
    f->gen = gen;
    f->n_devices = (int)a->n_devices;
    pthread_mutex_lock(&c->lock);
    f->next = c->fast_all;
    c->fast_all = f;
    atomic_store(&c->fast, f);
    pthread_mutex_unlock(&c->lock);
    comem_debug("booking area mapped: admissions that fit this session's stock take no round trip");
}

void comem_fast_detach(comem_client *c) { atomic_store(&c->fast, NULL); }

void comem_fast_free(comem_client *c)
{
    client_fast *f = c->fast_all;
    while (f) {
        client_fast *next = f->next;
        comem_shm_close(f->m);
        free(f);
        f = next;
    }
    c->fast_all = NULL;
    atomic_store(&c->fast, NULL);
}

bool comem_fast_coordinator_dozing(const client_fast *f, int64_t now_ns)
{
    int64_t until = atomic_load_explicit(&f->a->looking_until_ns, memory_order_relaxed);
    return now_ns >= until - BOOK_NUDGE_EARLY_NS;
}

void comem_fast_wake(comem_client *c, uint64_t gen)
{
    comem_msg m;
    (void)comem_conn_send(c, gen, comem_frame_bare(&m, COMEM_MSG_BOOKED));
}

client_fast *comem_fast_for(comem_client *c, uint64_t gen)
{
    client_fast *f = atomic_load_explicit(&c->fast, memory_order_acquire);
    return f && f->gen == gen ? f : NULL;
}

COMEM_FAST_STALL_POINT void comem_fast_stall_point(int where) { (void)where; }

bool comem_fast_book(client_fast *f, int device, uint64_t holder, int64_t weights, int64_t working,
                     client_grant *g, comem_admission *out)
{
    if (!f || device < 0 || device >= COMEM_MAX_DEVICES || weights <= 0)
        return false;
    book_area *a = f->a;
    device = atomic_load_explicit(&a->map[device], memory_order_relaxed); /* the coordinator's index */
    if (device < 0 || device >= f->n_devices)
        return false;
    book_stock *d = &a->dev[device];
    /* The coordinator's target (coord/admit.c need_of) without the reserve and context floor: the
       stock was sized to leave those free beyond it. */
    int64_t need = comem_admit_target(weights, working, 0);
    if (atomic_load_explicit(&d->limit, memory_order_relaxed) < need)
        return false; /* closed, or plainly too small: the coordinator may make room */
    int64_t now = comem_now_ns(); /* one reading: the limit's age, the booking's time, the doze check */
    if (now - atomic_load_explicit(&a->confirmed_ns, memory_order_relaxed) > BOOK_STALE_NS)
        return false; /* not confirmed lately: the coordinator is stopped or stuck */
    /* Claim a record. */
    uint32_t start = atomic_fetch_add_explicit(&f->hint, 1, memory_order_relaxed);
    book_record *r = NULL;
    int idx = -1;
    for (int k = 0; k < BOOK_RECORDS; k++) {
        int i = (int)((start + (uint32_t)k) % BOOK_RECORDS);
        uint32_t want = BOOK_FREE;
        if (atomic_compare_exchange_strong(&a->rec[i].state, &want, BOOK_CLAIMED)) {
            r = &a->rec[i];
            idx = i;
            break;
        }
    }
    if (!r)
        return false;
    uint32_t seq = atomic_load_explicit(&r->seq, memory_order_relaxed) + 1;
    atomic_store_explicit(&r->seq, seq, memory_order_relaxed);
    atomic_store_explicit(&r->device, device, memory_order_relaxed);
    atomic_store_explicit(&r->holder, holder, memory_order_relaxed);
    atomic_store_explicit(&r->bytes, weights, memory_order_relaxed);
    atomic_store_explicit(&r->booked_ns, now, memory_order_relaxed);
    /* page_counter_try_charge: charge first, compare, roll back. */
    int64_t old = atomic_fetch_add(&d->charged, weights);
    comem_fast_stall_point(1);
    int64_t lim = atomic_load(&d->limit);
    if (lim < 0 || old < 0 || comem_add(old, need) > lim) {
        atomic_fetch_sub(&d->charged, weights);
        atomic_store(&r->state, BOOK_FREE);
        return false;
    }
    atomic_store(&r->state, BOOK_BOOKED);
    comem_fast_stall_point(2);
    atomic_fetch_add_explicit(&a->booked, 1, memory_order_relaxed);
    atomic_fetch_add(&a->posted, 1); /* the coordinator reconciles it at its next turn */
    g->fast = true;
    g->fast_idx = idx;
    g->fast_seq = seq;
    g->fast_dev = device;
    g->bytes = weights;
    g->wake = comem_fast_coordinator_dozing(f, now);
    /* The figures as the coordinator states them: the target and the room with the margin kept beyond the stock. */
    int64_t margin = comem_clamp0(atomic_load_explicit(&d->reserve, memory_order_relaxed));
    int64_t room = comem_add(comem_sub(lim, old), margin);
    out->decided = 1;
    out->need = comem_add(need, margin);
    out->free_before = out->free_after = room;
    return true;
}

void comem_fast_cancel(client_fast *f, const client_grant *g)
{
    book_record *r = &f->a->rec[g->fast_idx];
    if (atomic_load(&r->seq) != g->fast_seq)
        return; /* not this booking any more: nothing of it is booked */
    /* Not reconciled yet: take the charge back here (CANCELLING says so if this process dies now). */
    uint32_t want = BOOK_BOOKED;
    if (atomic_compare_exchange_strong(&r->state, &want, BOOK_CANCELLING)) {
        atomic_fetch_sub(&f->a->dev[g->fast_dev].charged, g->bytes);
        atomic_store(&r->state, BOOK_FREE);
        atomic_fetch_add(&f->a->posted, 1);
        return;
    }
    /* A ledger grant holds it: the coordinator cancels that at its next turn. */
    want = BOOK_GRANTED;
    if (atomic_compare_exchange_strong(&r->state, &want, BOOK_DONE))
        atomic_fetch_add(&f->a->posted, 1);
}
