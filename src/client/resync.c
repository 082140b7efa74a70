/*
 * client/resync.c - telling a coordinator what the mirror holds that it does
 * not know: after every HELLO (a new coordinator knows nothing of this
 * process) and whenever a call found something it could not send.
 *
 * One step at a time, under the lock: pick the first difference, build its
 * frame, mark it as known, unlock, send. Holders go first (entries need
 * their ids), then entries with their residency now, then newer residency,
 * holder reports, busy marks and pin bookings. Adds wait for their id reply
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
#include "client/client_internal.h"

typedef enum step_kind { STEP_NONE, STEP_HOLDER, STEP_ENTRY, STEP_PINS, STEP_SEND } step_kind;

static void put_name(char *dst, const char *src) { snprintf(dst, COMEM_WIRE_NAME_MAX, "%s", src); }

/* Fills m with the next difference; lock held. */
static step_kind next_step(comem_client *c, comem_msg *m, client_req *r, char *what, size_t whatlen)
{
    uint64_t gen = c->gen;
    memset(m, 0, sizeof *m);
    if (c->devmap_gen != gen && comem_devmap_build(c, &m->u.device_map)) {
        /* First: the holders that follow name devices by this process's ordinals. */
        c->devmap_gen = gen;
        m->type = COMEM_MSG_DEVICE_MAP;
        snprintf(what, whatlen, "the device map");
        return STEP_SEND;
    }
    for (size_t i = 0; i < c->n_holders; i++) {
        client_holder *h = &c->holders[i];
        if (h->coord_gen == gen || h->adding_gen == gen || h->refused_gen == gen)
            continue;
        m->type = COMEM_MSG_HOLDER_ADD;
        m->u.holder_add.device = (uint16_t)h->device;
        m->u.holder_add.kind = (uint8_t)h->kind;
        m->u.holder_add.flags = h->flags;
        put_name(m->u.holder_add.name, h->name);
        if (comem_req_begin(c, r, PEND_HOLDER_ADD, h->id, 0, true) != COMEM_OK)
            return STEP_NONE;
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
        m->type = COMEM_MSG_ENTRY_ADD;
        m->u.entry_add.holder_id = h->coord_id;
        m->u.entry_add.size = e->size;
        m->u.entry_add.resident = e->resident;
        m->u.entry_add.refs = e->refs;
        m->u.entry_add.flags = comem_entry_wire_flags(e->flags);
        put_name(m->u.entry_add.name, e->name);
        if (comem_req_begin(c, r, PEND_ENTRY_ADD, e->id, e->seq, true) != COMEM_OK)
            return STEP_NONE;
        e->adding_gen = gen;
        snprintf(what, whatlen, "entry '%s'", e->name);
        return STEP_ENTRY;
    }
    for (size_t i = 0; i < c->n_holders; i++) {
        client_holder *h = &c->holders[i];
        if (!comem_tab_holder_live(c, h))
            continue;
        /* Newer residency of this holder's entries, in one census. */
        comem_msg_census *cs = &m->u.census;
        for (size_t j = 0; j < c->n_entries && cs->n < COMEM_WIRE_MAX_ITEMS; j++) {
            client_entry *e = &c->entries[j];
            if (e->holder != h->id || !comem_tab_entry_live(c, e) || e->seq == e->synced_seq)
                continue;
            cs->items[cs->n++] = (comem_wire_residency){e->coord_id, e->seq, e->resident, e->refs};
            e->synced_seq = e->seq;
        }
        if (cs->n) {
            m->type = COMEM_MSG_CENSUS;
            cs->holder_id = h->coord_id;
            cs->seq = h->report_seq;
            snprintf(what, whatlen, "residency of holder '%s'", h->name);
            return STEP_SEND;
        }
        if (h->report_seq != h->synced_report_seq) {
            h->synced_report_seq = h->report_seq;
            if (h->has) {
                m->type = COMEM_MSG_CENSUS;
                cs->holder_id = h->coord_id;
                cs->seq = h->report_seq;
                cs->has = h->has;
                cs->pinned = h->pinned;
                cs->overhead = h->overhead;
                snprintf(what, whatlen, "report of holder '%s'", h->name);
                return STEP_SEND;
            }
        }
        if (h->busy != h->synced_busy) {
            h->synced_busy = h->busy;
            m->type = COMEM_MSG_ACTIVITY;
            m->u.activity.holder_id = h->coord_id;
            m->u.activity.busy = h->busy;
            put_name(m->u.activity.prompt, h->prompt);
            snprintf(what, whatlen, "busy mark of holder '%s'", h->name);
            return STEP_SEND;
        }
        if (h->pins != h->synced_pins) {
            int64_t d = comem_sub(h->pins, h->synced_pins);
            h->synced_pins = h->pins;
            m->type = d > 0 ? COMEM_MSG_PIN_ACQUIRE : COMEM_MSG_PIN_RELEASE;
            m->u.pin.holder_id = h->coord_id;
            m->u.pin.bytes = d > 0 ? d : -d;
            if (comem_req_begin(c, r, PEND_PLAIN, 0, 0, true) != COMEM_OK)
                return STEP_NONE;
            snprintf(what, whatlen, "pinned RAM of holder '%s'", h->name);
            return STEP_PINS;
        }
    }
    if (c->sess_busy != c->synced_sess_busy) {
        c->synced_sess_busy = c->sess_busy;
        m->type = COMEM_MSG_ACTIVITY;
        m->u.activity.holder_id = 0;
        m->u.activity.busy = c->sess_busy;
        put_name(m->u.activity.prompt, c->sess_prompt);
        snprintf(what, whatlen, "busy mark of this process");
        return STEP_SEND;
    }
    if (c->sess_pins != c->synced_sess_pins) {
        int64_t d = comem_sub(c->sess_pins, c->synced_sess_pins);
        c->synced_sess_pins = c->sess_pins;
        m->type = d > 0 ? COMEM_MSG_PIN_ACQUIRE : COMEM_MSG_PIN_RELEASE;
        m->u.pin.holder_id = 0;
        m->u.pin.bytes = d > 0 ? d : -d;
        if (comem_req_begin(c, r, PEND_PLAIN, 0, 0, true) != COMEM_OK)
            return STEP_NONE;
        snprintf(what, whatlen, "pinned RAM of this process");
        return STEP_PINS;
    }
    return STEP_NONE;
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
        pthread_mutex_lock(&c->lock);
        c->need_sync = false;
        step_kind step = next_step(c, c->out, &r, what, sizeof what);
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
        if (rep.type == COMEM_MSG_REPLY && rep.u.reply.status != COMEM_OK)
            comem_warn("the coordinator refused %s: %s (%s)", what, comem_status_str(rep.u.reply.status),
                       rep.u.reply.message);
        else if (step == STEP_PINS && rep.type == COMEM_MSG_PIN_REPLY && !rep.u.pin_reply.granted) {
            char s[32];
            comem_warn("the coordinator refused to book the %s again: short by %s", what,
                       comem_format_bytes(rep.u.pin_reply.shortfall, s, sizeof s));
        }
    }
}
