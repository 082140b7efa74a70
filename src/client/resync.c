/*
 * client/resync.c - telling a coordinator what the mirror holds that it does
 * not know: after every HELLO (a new coordinator knows nothing of this
 * process) and whenever a call found something it could not send.
 *
 * One step at a time, under the lock: pick the first difference, build its
 * frame, mark it as known, unlock, send. Holders go first (entries need
 * their ids), then entries with their residency now, then newer residency,
 * holder reports, busy marks and pin bookings, then the grants a previous
 * coordinator made that are not loaded yet (RECLAIM: a new coordinator keeps
 * them a short while for this, coord/reclaim.c). Adds wait for their id reply
 * (the service thread reads while it waits, so asks are still answered);
 * the rest are sent without waiting. A record removed meanwhile is given
 * back when its id arrives (client/pending.c), and a record the coordinator
 * refuses is not tried again on this connection, so every step makes
 * progress and nothing is booked twice. When no difference is left the link
 * is up and calls go to the coordinator again.
 */
#include <stdio.h>
#include <string.h>

#include "base/bytes.h"
#include "base/log.h"
#include "base/size.h"
#include "client/conn.h"
#include "client/frames.h"
#include "client/request.h"
#include "client/resync.h"

typedef enum step_kind { STEP_NONE, STEP_HOLDER, STEP_ENTRY, STEP_PINS, STEP_GRANT, STEP_SEND } step_kind;

/* Lock held: whether any of h's registered entries has residency the coordinator was not told. */
static bool residency_changed(const comem_client *c, const client_holder *h)
{
    for (size_t j = 0; j < c->n_entries; j++) {
        const client_entry *e = &c->entries[j];
        if (e->holder == h->id && comem_tab_entry_live(c, e) && e->seq != e->synced_seq)
            return true;
    }
    return false;
}

/* Lock held: a pin booking's difference as one PIN_ACQUIRE or PIN_RELEASE, begun and awaited. */
static step_kind pins_step(comem_client *c, comem_msg *m, client_req *r, uint64_t holder_coord, int64_t *pins,
                           int64_t *synced)
{
    int64_t d = comem_sub(*pins, *synced);
    *synced = *pins;
    comem_frame_pin(m, d > 0 ? COMEM_MSG_PIN_ACQUIRE : COMEM_MSG_PIN_RELEASE, holder_coord, d > 0 ? d : -d);
    return comem_req_begin(c, r, PEND_PLAIN, 0, 0, true) == COMEM_OK ? STEP_PINS : STEP_NONE;
}

/* Lock held: a grant of an earlier connection not yet claimed on this one, as a RECLAIM; *grant its id. */
static step_kind grant_step(comem_client *c, comem_msg *m, client_req *r, uint64_t *grant)
{
    for (size_t i = 0; i < c->n_grants; i++) {
        client_grant *g = &c->grants[i];
        if (!g->gen || g->gen == c->gen || g->lost || g->reclaim_gen == c->gen || g->bytes <= 0)
            continue; /* local, this connection's, lost, claimed already, or booking nothing */
        client_holder *h = g->holder ? comem_tab_holder(c, g->holder) : NULL;
        if (comem_req_begin(c, r, PEND_PLAIN, 0, 0, true) != COMEM_OK)
            return STEP_NONE;
        comem_frame_reclaim(m, g->device, h && comem_tab_holder_live(c, h) ? h->coord_id : 0, g->bytes);
        g->reclaim_gen = c->gen;
        *grant = g->id;
        return STEP_GRANT;
    }
    return STEP_NONE;
}

/* Fills m with the next difference, built by the calls' own builders (client/frames.h); lock held. */
static step_kind next_step(comem_client *c, comem_msg *m, client_req *r, char *what, size_t whatlen, uint64_t *grant)
{
    uint64_t gen = c->gen;
    if (c->devmap_gen != gen && comem_frame_device_map(m, c)) {
        /* First: the holders that follow name devices by this process's ordinals. */
        c->devmap_gen = gen;
        snprintf(what, whatlen, "the device map");
        return STEP_SEND;
    }
    for (size_t i = 0; i < c->n_holders; i++) {
        client_holder *h = &c->holders[i];
        if (h->coord_gen == gen || h->adding_gen == gen || h->refused_gen == gen)
            continue;
        if (comem_req_begin(c, r, PEND_HOLDER_ADD, h->id, 0, true) != COMEM_OK)
            return STEP_NONE;
        comem_frame_holder_add(m, h);
        h->adding_gen = gen;
        snprintf(what, whatlen, "holder '%s'", h->name);
        return STEP_HOLDER;
    }
    for (size_t i = 0; i < c->n_entries; i++) {
        client_entry *e = &c->entries[i];
        if (e->coord_gen == gen || e->adding_gen == gen || e->refused_gen == gen)
            continue;
        client_holder *h = comem_tab_holder(c, e->holder);
        if (!h || !comem_tab_holder_live(c, h))
            continue; /* its holder was refused: it cannot be registered on this connection */
        if (comem_req_begin(c, r, PEND_ENTRY_ADD, e->id, e->seq, true) != COMEM_OK)
            return STEP_NONE;
        comem_frame_entry_add(m, e, h->coord_id);
        e->adding_gen = gen;
        snprintf(what, whatlen, "entry '%s'", e->name);
        return STEP_ENTRY;
    }
    for (size_t i = 0; i < c->n_holders; i++) {
        client_holder *h = &c->holders[i];
        if (!comem_tab_holder_live(c, h))
            continue;
        if (residency_changed(c, h)) {
            /* Newer residency of this holder's entries, in one census. */
            comem_frame_census(m, h);
            for (size_t j = 0; j < c->n_entries; j++) {
                client_entry *e = &c->entries[j];
                if (e->holder != h->id || !comem_tab_entry_live(c, e) || e->seq == e->synced_seq)
                    continue;
                if (!comem_frame_census_item(m, e))
                    break; /* full: the rest go in the next step's census */
                e->synced_seq = e->seq;
            }
            snprintf(what, whatlen, "residency of holder '%s'", h->name);
            return STEP_SEND;
        }
        if (h->report_seq != h->synced_report_seq) {
            h->synced_report_seq = h->report_seq;
            if (h->has) {
                comem_frame_report(m, h);
                snprintf(what, whatlen, "report of holder '%s'", h->name);
                return STEP_SEND;
            }
        }
        if (h->busy != h->synced_busy) {
            h->synced_busy = h->busy;
            comem_frame_activity(m, h->coord_id, h->busy, h->prompt);
            snprintf(what, whatlen, "busy mark of holder '%s'", h->name);
            return STEP_SEND;
        }
        if (h->pins != h->synced_pins) {
            snprintf(what, whatlen, "pinned RAM of holder '%s'", h->name);
            return pins_step(c, m, r, h->coord_id, &h->pins, &h->synced_pins);
        }
    }
    if (c->sess_busy != c->synced_sess_busy) {
        c->synced_sess_busy = c->sess_busy;
        comem_frame_activity(m, 0, c->sess_busy, c->sess_prompt);
        snprintf(what, whatlen, "busy mark of this process");
        return STEP_SEND;
    }
    if (c->sess_pins != c->synced_sess_pins) {
        snprintf(what, whatlen, "pinned RAM of this process");
        return pins_step(c, m, r, 0, &c->sess_pins, &c->synced_sess_pins);
    }
    snprintf(what, whatlen, "a grant of the previous coordinator");
    return grant_step(c, m, r, grant);
}

/*
 * The answer to a RECLAIM: the grant goes on under its new id, or is lost (grant_done says so). A
 * grant finished meanwhile (its load reported as residency) is given back at once under its new id.
 */
static void reclaimed(comem_client *c, uint64_t grant, uint64_t gen, const client_reply *rep)
{
    pthread_mutex_lock(&c->lock);
    client_grant *g = NULL;
    for (size_t i = 0; i < c->n_grants && !g; i++)
        if (c->grants[i].id == grant)
            g = &c->grants[i];
    bool ok = rep->type == COMEM_MSG_ID_REPLY;
    char b[32];
    comem_format_bytes(g ? g->bytes : 0, b, sizeof b);
    if (g && ok) {
        g->coord_id = rep->u.id.id;
        g->gen = gen;
        g->fast = false; /* booked in the ledger now, whatever it was before */
        g->wake = false;
    } else if (g) {
        g->lost = true;
    }
    pthread_mutex_unlock(&c->lock);
    if (ok && !g) {
        comem_msg back;
        comem_frame_grant_done(&back, rep->u.id.id, 0, 0)->request_id = comem_client_next_req(c);
        (void)comem_conn_send(c, gen, &back);
    } else if (ok) {
        comem_info("claimed a grant of %s again from the new coordinator", b);
    } else if (g) {
        comem_warn("a grant of %s made by the previous coordinator could not be booked again (%s: %s); its load "
                   "has no bytes kept for it",
                   b, comem_status_str(rep->type == COMEM_MSG_REPLY ? rep->u.reply.status : COMEM_EPROTO),
                   rep->type == COMEM_MSG_REPLY ? rep->u.reply.message : "unexpected reply");
    }
}

/* Counts what the coordinator knows now, for the one line that says so. */
static void count_live(comem_client *c, size_t *holders, size_t *entries)
{
    *holders = *entries = 0;
    for (size_t i = 0; i < c->n_holders; i++)
        *holders += comem_tab_holder_live(c, &c->holders[i]);
    for (size_t i = 0; i < c->n_entries; i++)
        *entries += comem_tab_entry_live(c, &c->entries[i]);
}

int comem_resync(comem_client *c)
{
    for (;;) {
        if (atomic_load(&c->stopping))
            return COMEM_ECLOSED;
        client_req r = {0};
        char what[COMEM_WIRE_NAME_MAX + 40];
        uint64_t grant = 0;
        pthread_mutex_lock(&c->lock);
        c->need_sync = false;
        uint64_t gen = c->gen;
        step_kind step = next_step(c, c->out, &r, what, sizeof what, &grant);
        if (step == STEP_NONE) {
            bool first = c->link == LINK_SYNC;
            bool again = c->ever_connected;
            size_t nh, ne;
            count_live(c, &nh, &ne);
            c->link = LINK_UP;
            c->ever_connected = true;
            pthread_mutex_unlock(&c->lock);
            if (first && again)
                comem_info("reconnected to the coordinator at %s: re-registered %zu holders and %zu entries", c->path,
                           nh, ne);
            else if (first)
                comem_info("connected to the coordinator at %s (registered %zu holders and %zu entries); "
                           "decisions are the coordinator's from now on",
                           c->path, nh, ne);
            return COMEM_OK;
        }
        if (step == STEP_SEND) {
            /* Sent under the lock, like the calls' own ACTIVITY frames, so a state change made
               by another thread meanwhile can never reach the coordinator before this one. */
            (void)comem_req_begin(c, &r, PEND_PLAIN, 0, 0, false); /* no record: never fails */
            int rc = comem_req_send(c, &r, c->out);
            pthread_mutex_unlock(&c->lock);
            if (rc != COMEM_OK) {
                comem_warn("re-registering %s with the coordinator failed: %s", what, comem_status_str(rc));
                return rc;
            }
            continue;
        }
        pthread_mutex_unlock(&c->lock);

        client_reply rep;
        int rc = comem_req_finish(c, &r, c->out, comem_client_timeout(c, -1), &rep, NULL);
        if (rc != COMEM_OK) {
            comem_warn("re-registering %s with the coordinator failed: %s", what, comem_status_str(rc));
            return rc;
        }
        if (step == STEP_GRANT)
            reclaimed(c, grant, gen, &rep);
        else if (rep.type == COMEM_MSG_REPLY && rep.u.reply.status != COMEM_OK)
            comem_warn("the coordinator refused %s: %s (%s)", what, comem_status_str(rep.u.reply.status),
                       rep.u.reply.message);
        else if (step == STEP_PINS && rep.type == COMEM_MSG_PIN_REPLY && !rep.u.pin_reply.granted) {
            char s[32];
            comem_warn("the coordinator refused to book the %s again: short by %s", what,
                       comem_format_bytes(rep.u.pin_reply.shortfall, s, sizeof s));
        }
    }
}
