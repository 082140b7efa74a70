/*
 * client/register.c - the registration calls: holders, entries, residency
 * censuses, holder reports, busy marks and touches (a sign of life between
 * busy marks, which the mirror does not keep: a touch is sent or dropped).
 *
 * Each call updates the mirror first, under the lock, and then tells the
 * coordinator when the record is registered on the live connection. With no
 * coordinator (or a record not registered yet) the mirror alone changes and
 * the resync tells the next coordinator, so a lost connection is not an
 * error here: the call succeeds locally. Sequence numbers are the mirror's
 * and only grow, so a census that arrives late never undoes a newer one.
 */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/name.h"
#include "client/client_internal.h"

#define ANSWER_FLAGS (COMEM_ANSWERS_RELEASE | COMEM_ANSWERS_IDLE | COMEM_ANSWERS_PINS)
#define HOLDER_FLAGS (ANSWER_FLAGS | COMEM_RELEASES_WHILE_BUSY)

/* NULL (no name) or a name the coordinator takes: short enough, and base/name.h's rule. */
static bool name_ok(const char *s) { return !s || (strlen(s) < COMEM_WIRE_NAME_MAX && comem_name_check(s, NULL, 0) == 0); }

static void put_name(char *dst, const char *src) { snprintf(dst, COMEM_WIRE_NAME_MAX, "%s", src ? src : ""); }

/* The API's holder flags as the protocol's capability bits. */
static uint32_t caps_of(unsigned flags)
{
    uint32_t caps = 0;
    if (flags & COMEM_ANSWERS_RELEASE)
        caps |= COMEM_CAP_RELEASE;
    if (flags & COMEM_ANSWERS_IDLE)
        caps |= COMEM_CAP_IDLE_RELEASE;
    if (flags & COMEM_ANSWERS_PINS)
        caps |= COMEM_CAP_PIN_RELEASE;
    if (flags & COMEM_RELEASES_WHILE_BUSY)
        caps |= COMEM_CAP_WHILE_BUSY;
    return caps;
}

/* Lock held: the resync should look again (a record is not registered yet). */
static void want_sync(comem_client *c)
{
    c->need_sync = true;
    comem_client_wake(c);
}

/*
 * Sends a begun update of the mirror and gives the call's status. A lost
 * connection is success (the mirror changed; the resync replays it); an
 * error reply is the coordinator's word; ENOENT on a removal means already gone.
 */
static int finish_update(comem_client *c, client_req *r, comem_msg *m /* NULL: sent */, bool removal,
                         const char *what)
{
    client_reply rep;
    int rc = comem_req_finish(c, r, m, comem_client_timeout(c, -1), &rep, NULL);
    if (rc == COMEM_ECLOSED)
        return COMEM_OK;
    if (rc != COMEM_OK)
        return rc;
    if (rep.type == COMEM_MSG_REPLY && rep.u.reply.status != COMEM_OK) {
        if (removal && rep.u.reply.status == COMEM_ENOENT)
            return COMEM_OK;
        comem_warn("the coordinator refused %s: %s (%s)", what, comem_status_str(rep.u.reply.status),
                   rep.u.reply.message);
        comem_client_set_reason(rep.u.reply.message);
        return rep.u.reply.status;
    }
    return COMEM_OK;
}

/*
 * Sends a begun add and waits for its id (the service thread maps it). A lost
 * connection leaves the record for the resync; a refusal or a timeout takes it
 * out of the mirror (a timed-out one was already, by the pending table).
 */
static int finish_add(comem_client *c, client_req *r, comem_msg *m, bool holder, uint64_t id, const char *name)
{
    client_reply rep;
    int rc = comem_req_finish(c, r, m, comem_client_timeout(c, -1), &rep, NULL);
    if (rc == COMEM_ECLOSED || (rc == COMEM_OK && (rep.type == 0 || rep.type == COMEM_MSG_ID_REPLY)))
        return COMEM_OK;
    if (rc == COMEM_ETIMEDOUT)
        return rc;
    if (rc == COMEM_OK) {
        rc = rep.type == COMEM_MSG_REPLY && rep.u.reply.status != COMEM_OK ? rep.u.reply.status : COMEM_EPROTO;
        comem_warn("the coordinator refused %s '%s': %s (%s)", holder ? "holder" : "entry", name,
                   comem_status_str(rc), rep.type == COMEM_MSG_REPLY ? rep.u.reply.message : "unexpected reply");
        comem_client_set_reason(rep.type == COMEM_MSG_REPLY ? rep.u.reply.message : "unexpected reply");
    }
    pthread_mutex_lock(&c->lock);
    if (holder)
        comem_tab_remove_holder(c, id);
    else
        comem_tab_remove_entry(c, id);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int comem_holder_add(comem_client *c, const char *name, int device, int kind, unsigned flags, comem_release_fn fn,
                     void *user, uint64_t *holder)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (!holder || !name_ok(name) || device < 0 || device >= COMEM_MAX_DEVICES ||
        kind < COMEM_KIND_MODELS || kind > COMEM_KIND_RAW || (flags & ~HOLDER_FLAGS) ||
        ((flags & ANSWER_FLAGS) && !fn))
        return COMEM_EINVAL;
    comem_msg m;
    memset(&m, 0, sizeof m);
    client_req r = {0};
    bool send = false;
    int rc = COMEM_OK;

    pthread_mutex_lock(&c->lock);
    client_holder *h = comem_tab_add_holder(c);
    if (!h) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_ENOMEM;
    }
    uint64_t id = h->id;
    put_name(h->name, name);
    h->device = device;
    h->kind = kind;
    h->flags = caps_of(flags);
    h->fn = fn;
    h->user = user;
    if (c->link == LINK_UP) {
        m.type = COMEM_MSG_HOLDER_ADD;
        m.u.holder_add.device = (uint16_t)device;
        m.u.holder_add.kind = (uint8_t)kind;
        m.u.holder_add.flags = h->flags;
        put_name(m.u.holder_add.name, name);
        rc = comem_req_begin(c, &r, PEND_HOLDER_ADD, id, 0, !comem_on_service_thread(c));
        if (rc == COMEM_OK) {
            h->adding_gen = r.gen;
            send = true;
        } else {
            comem_tab_remove_holder(c, id);
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (rc != COMEM_OK)
        return rc;
    if (send && (rc = finish_add(c, &r, &m, true, id, m.u.holder_add.name)) != COMEM_OK)
        return rc;
    *holder = id;
    return COMEM_OK;
}

int comem_holder_remove(comem_client *c, uint64_t holder)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    comem_msg m;
    memset(&m, 0, sizeof m);
    client_req r = {0};
    bool send = false;
    pthread_mutex_lock(&c->lock);
    client_holder *h = comem_tab_holder(c, holder);
    if (!h) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_ENOENT;
    }
    /* Removed even while only half registered: an add still in flight is given back when its id comes. */
    if (comem_tab_holder_live(c, h)) {
        m.type = COMEM_MSG_HOLDER_REMOVE;
        m.u.id.id = h->coord_id;
        send = comem_req_begin(c, &r, PEND_PLAIN, 0, 0, !comem_on_service_thread(c)) == COMEM_OK;
    }
    comem_tab_remove_holder(c, holder);
    pthread_mutex_unlock(&c->lock);
    return send ? finish_update(c, &r, &m, true, "a holder's removal") : COMEM_OK;
}

int comem_holder_busy(comem_client *c, uint64_t holder, int busy, const char *prompt)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (!name_ok(prompt))
        return COMEM_EINVAL;
    comem_msg m;
    memset(&m, 0, sizeof m);
    client_req r = {0};
    bool send = false;
    bool b = busy != 0;
    pthread_mutex_lock(&c->lock);
    m.type = COMEM_MSG_ACTIVITY;
    m.u.activity.busy = b;
    put_name(m.u.activity.prompt, prompt);
    if (holder == 0) {
        c->sess_busy = b;
        put_name(c->sess_prompt, prompt);
        if (c->link != LINK_DOWN) {
            c->synced_sess_busy = b;
            send = true;
        }
    } else {
        client_holder *h = comem_tab_holder(c, holder);
        if (!h) {
            pthread_mutex_unlock(&c->lock);
            return COMEM_ENOENT;
        }
        h->busy = b;
        put_name(h->prompt, prompt);
        if (comem_tab_holder_live(c, h)) {
            h->synced_busy = b;
            m.u.activity.holder_id = h->coord_id;
            send = true;
        } else if (c->link == LINK_UP) {
            want_sync(c);
        }
    }
    /* ACTIVITY has no sequence number: sent under the lock, so the coordinator hears
       busy marks in the order they were set, whichever thread (or the resync) sends them. */
    if (send && comem_req_begin(c, &r, PEND_PLAIN, 0, 0, !comem_on_service_thread(c)) == COMEM_OK) {
        if (comem_req_send(c, &r, &m) != COMEM_OK) {
            comem_req_abort(c, &r); /* the connection is gone: the next one is told by the resync */
            send = false;
        }
    } else {
        send = false;
    }
    pthread_mutex_unlock(&c->lock);
    return send ? finish_update(c, &r, NULL, false, "a busy mark") : COMEM_OK;
}

int comem_holder_touch(comem_client *c, uint64_t holder)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    comem_msg m;
    memset(&m, 0, sizeof m);
    m.type = COMEM_MSG_TOUCH;
    pthread_mutex_lock(&c->lock);
    client_holder *h = comem_tab_holder(c, holder);
    if (!h) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_ENOENT;
    }
    /* Not registered on this connection yet: its (re)registration starts its idle clock anyway. */
    bool send = comem_tab_holder_live(c, h);
    m.u.id.id = h->coord_id;
    uint64_t gen = c->gen;
    pthread_mutex_unlock(&c->lock);
    /* Never waited on: a fault must not wait for the coordinator's turn. A lost connection loses
       nothing the resync does not restore. */
    if (send)
        (void)comem_conn_send(c, gen, &m);
    return COMEM_OK;
}

int comem_entry_add(comem_client *c, uint64_t holder, const char *name, int64_t size, int64_t resident,
                    unsigned flags, uint64_t *entry)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (!entry || !name_ok(name) || size < 0 || resident < 0 || resident > size ||
        (flags & ~CLIENT_ENTRY_FLAGS) || ((flags & COMEM_ENTRY_RAM_CACHE) && (flags & COMEM_ENTRY_RAM_FILE)))
        return COMEM_EINVAL; /* at most one tier */
    comem_msg m;
    memset(&m, 0, sizeof m);
    client_req r = {0};
    bool send = false;
    int rc = COMEM_OK;

    pthread_mutex_lock(&c->lock);
    client_holder *h = comem_tab_holder(c, holder);
    if (!h) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_ENOENT;
    }
    bool holder_live = comem_tab_holder_live(c, h);
    uint64_t holder_coord = h->coord_id;
    client_entry *e = comem_tab_add_entry(c); /* h is stale from here */
    if (!e) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_ENOMEM;
    }
    uint64_t id = e->id;
    e->holder = holder;
    put_name(e->name, name);
    e->size = size;
    e->resident = resident;
    e->flags = flags;
    if (c->link == LINK_UP && holder_live) {
        m.type = COMEM_MSG_ENTRY_ADD;
        m.u.entry_add.holder_id = holder_coord;
        m.u.entry_add.size = size;
        m.u.entry_add.resident = resident;
        m.u.entry_add.flags = comem_entry_wire_flags(flags);
        put_name(m.u.entry_add.name, name);
        rc = comem_req_begin(c, &r, PEND_ENTRY_ADD, id, e->seq, !comem_on_service_thread(c));
        if (rc == COMEM_OK) {
            e->adding_gen = r.gen;
            send = true;
        } else {
            comem_tab_remove_entry(c, id);
        }
    } else if (c->link == LINK_UP) {
        want_sync(c); /* its holder's id is still on its way */
    }
    pthread_mutex_unlock(&c->lock);
    if (rc != COMEM_OK)
        return rc;
    if (send && (rc = finish_add(c, &r, &m, false, id, m.u.entry_add.name)) != COMEM_OK)
        return rc;
    *entry = id;
    return COMEM_OK;
}

int comem_entry_remove(comem_client *c, uint64_t entry)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    comem_msg m;
    memset(&m, 0, sizeof m);
    client_req r = {0};
    bool send = false;
    pthread_mutex_lock(&c->lock);
    client_entry *e = comem_tab_entry(c, entry);
    if (!e) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_ENOENT;
    }
    if (comem_tab_entry_live(c, e)) {
        m.type = COMEM_MSG_ENTRY_REMOVE;
        m.u.id.id = e->coord_id;
        send = comem_req_begin(c, &r, PEND_PLAIN, 0, 0, !comem_on_service_thread(c)) == COMEM_OK;
    }
    comem_tab_remove_entry(c, entry);
    pthread_mutex_unlock(&c->lock);
    return send ? finish_update(c, &r, &m, true, "an entry's removal") : COMEM_OK;
}

int comem_entry_set_resident(comem_client *c, uint64_t entry, int64_t resident)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (resident < 0)
        return COMEM_EINVAL;
    return comem_entry_census(c, entry, resident, -1);
}

/*
 * Whether a census of e can ride on the receipt the callback thread is building (ask.c) instead of
 * going as a frame and a round trip of its own: it is made from a release callback of e's holder,
 * on the link that receipt goes out on, and it does not grow e (a shrink cannot be refused for
 * room, so nothing the caller would be told is lost). The receipt lists e's residency and sequence
 * and the coordinator applies it before it settles the ask, as it would have applied the census.
 * Under c->lock.
 */
static bool rides_on_receipt(comem_client *c, client_entry *e, int64_t resident)
{
    if (!comem_on_callback_thread(c) || c->answering != e->holder || c->answering_gen != c->gen ||
        (resident >= 0 && resident > e->resident))
        return false;
    if (!e->in_receipt) {
        if (c->n_in_receipt >= COMEM_WIRE_MAX_ITEMS)
            return false; /* the receipt is full of them: this one goes on its own */
        e->in_receipt = true;
        c->n_in_receipt++;
    }
    return true;
}

int comem_entry_census(comem_client *c, uint64_t entry, int64_t resident, int64_t refs)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (resident < -1 || refs < -1)
        return COMEM_EINVAL;
    comem_msg m;
    memset(&m, 0, sizeof m);
    client_req r = {0};
    bool send = false;
    pthread_mutex_lock(&c->lock);
    client_entry *e = comem_tab_entry(c, entry);
    if (!e) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_ENOENT;
    }
    if (resident > e->size) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_EINVAL;
    }
    client_holder *h = comem_tab_holder(c, e->holder);
    bool live = h && comem_tab_entry_live(c, e) && comem_tab_holder_live(c, h);
    bool ride = live && rides_on_receipt(c, e, resident);
    if (resident >= 0)
        e->resident = resident;
    if (refs >= 0)
        e->refs = refs;
    e->seq++;
    if (ride) {
        e->synced_seq = e->seq; /* the receipt carries this sequence */
    } else if (live) {
        m.type = COMEM_MSG_CENSUS;
        m.u.census.holder_id = h->coord_id;
        m.u.census.seq = h->report_seq; /* has = 0: the holder-level figures are not part of this census */
        m.u.census.n = 1;
        m.u.census.items[0] = (comem_wire_residency){e->coord_id, e->seq, e->resident, e->refs};
        e->synced_seq = e->seq;
        send = comem_req_begin(c, &r, PEND_PLAIN, 0, 0, !comem_on_service_thread(c)) == COMEM_OK;
    } else if (c->link == LINK_UP) {
        want_sync(c);
    }
    pthread_mutex_unlock(&c->lock);
    return send ? finish_update(c, &r, &m, false, "a residency census") : COMEM_OK;
}

int comem_holder_report(comem_client *c, uint64_t holder, int64_t pinned, int64_t overhead)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (pinned < -1 || overhead < -1)
        return COMEM_EINVAL;
    comem_msg m;
    memset(&m, 0, sizeof m);
    client_req r = {0};
    bool send = false;
    pthread_mutex_lock(&c->lock);
    client_holder *h = comem_tab_holder(c, holder);
    if (!h) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_ENOENT;
    }
    h->report_seq++;
    h->has = (uint8_t)((pinned >= 0 ? COMEM_CENSUS_PINNED : 0) | (overhead >= 0 ? COMEM_CENSUS_OVERHEAD : 0));
    h->pinned = pinned >= 0 ? pinned : 0;
    h->overhead = overhead >= 0 ? overhead : 0;
    if (comem_tab_holder_live(c, h)) {
        m.type = COMEM_MSG_CENSUS;
        m.u.census.holder_id = h->coord_id;
        m.u.census.seq = h->report_seq;
        m.u.census.has = h->has;
        m.u.census.pinned = h->pinned;
        m.u.census.overhead = h->overhead;
        h->synced_report_seq = h->report_seq;
        send = comem_req_begin(c, &r, PEND_PLAIN, 0, 0, !comem_on_service_thread(c)) == COMEM_OK;
    } else if (c->link == LINK_UP) {
        want_sync(c);
    }
    pthread_mutex_unlock(&c->lock);
    return send ? finish_update(c, &r, &m, false, "a holder report") : COMEM_OK;
}

/* ---- the device map ---- */

bool comem_devmap_build(const comem_client *c, comem_msg_device_map *m)
{
    m->n = 0;
    for (int o = 0; o < COMEM_MAX_DEVICES; o++) {
        if (!c->devmap[o][0])
            continue;
        m->items[m->n].ordinal = (uint16_t)o;
        snprintf(m->items[m->n].uuid, sizeof m->items[m->n].uuid, "%s", c->devmap[o]);
        m->n++;
    }
    return m->n > 0;
}

int comem_client_map_device(comem_client *c, int ordinal, const char *uuid)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (ordinal < 0 || ordinal >= COMEM_MAX_DEVICES || !uuid || !uuid[0] || strlen(uuid) >= COMEM_WIRE_TEXT_MAX)
        return COMEM_EINVAL;
    comem_msg m;
    memset(&m, 0, sizeof m);
    client_req r = {0};
    bool send = false;
    pthread_mutex_lock(&c->lock);
    snprintf(c->devmap[ordinal], sizeof c->devmap[ordinal], "%s", uuid);
    c->devmap_gen = 0;
    if (c->link == LINK_UP) {
        m.type = COMEM_MSG_DEVICE_MAP;
        comem_devmap_build(c, &m.u.device_map);
        c->devmap_gen = c->gen;
        send = comem_req_begin(c, &r, PEND_PLAIN, 0, 0, !comem_on_service_thread(c)) == COMEM_OK;
    } else if (c->link != LINK_DOWN) {
        want_sync(c);
    }
    pthread_mutex_unlock(&c->lock);
    int rc = send ? finish_update(c, &r, &m, false, "the device map") : COMEM_OK;
    if (rc == COMEM_ENODEV) { /* not a card of this coordinator: not replayed on every reconnect either */
        pthread_mutex_lock(&c->lock);
        if (!strcmp(c->devmap[ordinal], uuid))
            c->devmap[ordinal][0] = 0;
        pthread_mutex_unlock(&c->lock);
    }
    return rc;
}

