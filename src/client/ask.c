/*
 * client/ask.c - answering the coordinator's release asks, on the callback
 * thread (client/callbacks.c): the busy rule, the holder's callback with this
 * client's ids, and the RECEIPT with what was freed and the holder's
 * residency after it.
 *
 * The callback runs without any lock held, so it may call the API; the
 * receipt's residency is read after it returns, so a comem_entry_set_resident
 * made inside is included. One that shrinks an entry of the asked holder is
 * not sent on its own at all (register.c, rides_on_receipt): the receipt is
 * its census, and the callback waits on no round trip. The receipt lists each
 * entry as a census does (frames.c, comem_frame_residency).
 */
#include <stdio.h>
#include <string.h>

#include "arith/planners.h"
#include "base/hops.h"
#include "base/log.h"
#include "base/size.h"
#include "client/ask.h"
#include "client/conn.h"
#include "client/frames.h"

static int release_kind(uint8_t ask_kind)
{
    switch (ask_kind) {
    case COMEM_ASK_IDLE: return COMEM_RELEASE_IDLE;
    case COMEM_ASK_PINS: return COMEM_RELEASE_PINS;
    default: return COMEM_RELEASE_BYTES;
    }
}

static const char *outcome_name(int outcome)
{
    return outcome == COMEM_RECEIPT_DONE ? "done" : outcome == COMEM_RECEIPT_BUSY ? "busy" : "error";
}

void comem_ask_handle(comem_client *c, const comem_msg_ask *ask, bool busy_now)
{
    int outcome = COMEM_RECEIPT_ERROR;
    bool call = false;
    comem_release_fn fn = NULL;
    void *user = NULL;
    uint64_t hid = 0;
    size_t n = 0;
    char name[COMEM_WIRE_NAME_MAX] = "";

    pthread_mutex_lock(&c->lock);
    uint64_t gen = c->gen;
    client_holder *h = comem_tab_holder_by_coord(c, ask->holder_id);
    if (!h) {
        /* Removed while the ask was on its way. */
        comem_debug("release ask %llu names holder %llu, which this process no longer has",
                    (unsigned long long)ask->ask_id, (unsigned long long)ask->holder_id);
    } else {
        hid = h->id;
        snprintf(name, sizeof name, "%s", h->name);
        bool computing = h->busy || c->sess_busy;
        /* An idle ask is planned only for a holder that is not computing (comem_plan_idle_release);
           one that started since is not idle, even if it could release while busy (a pager). */
        bool idle_but_computing = ask->kind == COMEM_ASK_IDLE && computing;
        if (busy_now || idle_but_computing ||
            !comem_may_release_now(true, computing, (h->flags & COMEM_CAP_WHILE_BUSY) != 0)) {
            outcome = COMEM_RECEIPT_BUSY; /* never block a computing holder on a release */
        } else if (!h->fn) {
            outcome = COMEM_RECEIPT_ERROR;
        } else {
            call = true;
            fn = h->fn;
            user = h->user;
            c->answering = hid; /* its censuses made from the callback ride on the receipt */
            c->answering_gen = gen;
            c->n_in_receipt = 0;
            for (size_t i = 0; i < ask->n && i < COMEM_WIRE_MAX_ITEMS; i++) {
                client_entry *e = comem_tab_entry_by_coord(c, ask->items[i].entry_id);
                if (!e || e->holder != hid)
                    continue; /* not this holder's (or gone): the holder may free elsewhere */
                c->ask_ids[n] = e->id;
                c->ask_amounts[n] = ask->items[i].bytes;
                n++;
            }
        }
    }
    pthread_mutex_unlock(&c->lock);

    int64_t freed = 0;
    if (call) {
        comem_hop(COMEM_HOP_CALLBACK_START);
        int rc = fn(user, hid, release_kind(ask->kind), ask->bytes, c->ask_ids, c->ask_amounts, n, &freed);
        comem_hop(COMEM_HOP_CALLBACK_END);
        outcome = rc == COMEM_OK ? COMEM_RECEIPT_DONE : rc == COMEM_EBUSY ? COMEM_RECEIPT_BUSY : COMEM_RECEIPT_ERROR;
    }
    if (freed < 0)
        freed = 0;

    comem_msg local_msg, *m = busy_now ? &local_msg : c->receipt; /* c->receipt is the callback thread's */
    memset(m, 0, sizeof *m);
    m->type = COMEM_MSG_RECEIPT;
    m->request_id = comem_client_next_req(c);
    m->u.receipt.ask_id = ask->ask_id;
    m->u.receipt.outcome = (uint8_t)outcome;
    m->u.receipt.freed = freed;
    pthread_mutex_lock(&c->lock);
    /* Entries whose census rides here first (they fit: at most COMEM_WIRE_MAX_ITEMS), then the rest. */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; hid && i < c->n_entries && m->u.receipt.n < COMEM_WIRE_MAX_ITEMS; i++) {
            const client_entry *e = &c->entries[i];
            if (e->holder != hid || e->in_receipt != (pass == 0) || !comem_tab_entry_live(c, e))
                continue;
            m->u.receipt.items[m->u.receipt.n++] = comem_frame_residency(e);
        }
    }
    if (call) { /* this thread's: the service thread answering busy leaves them be */
        for (size_t i = 0; c->n_in_receipt && i < c->n_entries; i++)
            c->entries[i].in_receipt = false;
        c->answering = 0;
        c->n_in_receipt = 0;
    }
    pthread_mutex_unlock(&c->lock);
    comem_hop(COMEM_HOP_RECEIPT_SENT);
    (void)comem_conn_send(c, gen, m);

    char asked[32], got[32];
    comem_info("release ask for holder '%s': %s asked, %s freed (%s)", name,
               comem_format_bytes(ask->bytes, asked, sizeof asked), comem_format_bytes(freed, got, sizeof got),
               outcome_name(outcome));
}
