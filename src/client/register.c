/*
 * client/register.c - the registration calls: holders, entries, residency
 * censuses, holder reports, busy marks (a node's end also sends the WDDM
 * reading, client/wddm.c), touches (a sign of life between busy marks, which
 * the mirror does not keep: a touch is sent or dropped) and the device map.
 *
 * Each call updates the mirror first, under the lock, and then tells the
 * coordinator when the record is registered on the live connection: one
 * builder (client/frames.h) and the call helper's update (client/call.h).
 * With no coordinator (or a record not registered yet) the mirror alone
 * changes and the resync tells the next coordinator, so a lost connection is
 * not an error here: the call succeeds locally. Sequence numbers are the
 * mirror's and only grow, so a census that arrives late never undoes a newer one.
 */
#include <stdio.h>
#include <string.h>

#include "base/name.h"
#include "client/call.h"
#include "client/conn.h"
#include "client/frames.h"
#include "client/wddm.h"

#define ANSWER_FLAGS (COMEM_ANSWERS_RELEASE | COMEM_ANSWERS_IDLE | COMEM_ANSWERS_PINS)
#define HOLDER_FLAGS (ANSWER_FLAGS | COMEM_RELEASES_WHILE_BUSY)
#define ENTRY_FLAGS (COMEM_ENTRY_PAGED | COMEM_ENTRY_RAM_CACHE | COMEM_ENTRY_RAM_FILE)

/* NULL (no name) or a name the coordinator takes: short enough, and base/name.h's rule. */
static bool name_ok(const char *s) { return !s || (strlen(s) < COMEM_WIRE_NAME_MAX && comem_name_check(s, NULL, 0) == 0); }

static void put_name(char *dst, const char *src) { snprintf(dst, COMEM_WIRE_NAME_MAX, "%s", src ? src : ""); }

/* Lock held, link up: a record the coordinator does not know yet changed; the resync tells it. */
static void want_sync_if_up(comem_client *c)
{
    if (c->link == LINK_UP)
        comem_client_want_sync(c);
}

static int holder_add(comem_client *c, const char *name, int device, int kind, int app_pid, unsigned flags,
                      comem_release_fn fn, void *user, uint64_t *holder)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (!holder || !name_ok(name) || device < 0 || device >= COMEM_MAX_DEVICES || app_pid < 0 ||
        kind < COMEM_KIND_MODELS || kind > COMEM_KIND_RAW || (flags & ~HOLDER_FLAGS) ||
        ((flags & ANSWER_FLAGS) && !fn))
        return COMEM_EINVAL;
    comem_msg m;
    int rc = COMEM_OK;
    pthread_mutex_lock(&c->lock);
    client_holder *h = comem_tab_add_holder(c);
    if (!h) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_ENOMEM;
    }
    uint64_t id = h->id;
    client_call call = {.kind = PEND_HOLDER_ADD, .obj = id, .what = name ? name : ""};
    put_name(h->name, name);
    h->device = device;
    h->kind = kind;
    h->app_pid = (uint32_t)app_pid;
    h->flags = comem_frame_caps(flags);
    h->fn = fn;
    h->user = user;
    if (c->link == LINK_UP) {
        rc = comem_call_begin(c, &call, comem_frame_holder_add(&m, h));
        if (rc == COMEM_OK)
            h->adding_gen = call.r.gen;
        else
            comem_tab_remove_holder(c, id);
    }
    pthread_mutex_unlock(&c->lock);
    if (rc == COMEM_OK)
        rc = comem_call_add(c, &call);
    if (rc == COMEM_OK)
        *holder = id;
    return rc;
}

int comem_holder_add(comem_client *c, const char *name, int device, int kind, unsigned flags, comem_release_fn fn,
                     void *user, uint64_t *holder)
{
    return holder_add(c, name, device, kind, 0, flags, fn, user, holder);
}

int comem_holder_add_app(comem_client *c, const char *name, int device, int pid, unsigned flags,
                         comem_release_fn fn, void *user, uint64_t *holder)
{
    return holder_add(c, name, device, COMEM_KIND_MODELS, pid, flags, fn, user, holder);
}

int comem_holder_remove(comem_client *c, uint64_t holder)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    comem_msg m;
    client_call call = {.what = "a holder's removal", .removal = true};
    pthread_mutex_lock(&c->lock);
    client_holder *h = comem_tab_holder(c, holder);
    if (!h) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_ENOENT;
    }
    /* Removed even while only half registered: an add still in flight is given back when its id comes. */
    if (comem_tab_holder_live(c, h))
        (void)comem_call_begin(c, &call, comem_frame_id(&m, COMEM_MSG_HOLDER_REMOVE, h->coord_id));
    comem_tab_remove_holder(c, holder);
    pthread_mutex_unlock(&c->lock);
    return comem_call_update(c, &call);
}

int comem_holder_busy(comem_client *c, uint64_t holder, int busy, const char *prompt)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (!name_ok(prompt))
        return COMEM_EINVAL;
    comem_msg m;
    client_call call = {.what = "a busy mark"};
    bool b = busy != 0;
    pthread_mutex_lock(&c->lock);
    if (holder == 0) {
        c->sess_busy = b;
        put_name(c->sess_prompt, prompt);
        if (c->link != LINK_DOWN) {
            c->synced_sess_busy = b;
            (void)comem_call_begin(c, &call, comem_frame_activity(&m, 0, b, prompt));
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
            (void)comem_call_begin(c, &call, comem_frame_activity(&m, h->coord_id, b, prompt));
        } else {
            want_sync_if_up(c);
        }
    }
    /* ACTIVITY has no sequence number: sent under the lock, so the coordinator hears
       busy marks in the order they were set, whichever thread (or the resync) sends them. */
    comem_call_send_now(c, &call);
    pthread_mutex_unlock(&c->lock);
    int rc = comem_call_update(c, &call);
    if (!b)
        (void)comem_wddm_send(c); /* a node's end: what it leaves on the card (Windows; nothing elsewhere) */
    return rc;
}

int comem_holder_touch(comem_client *c, uint64_t holder)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    comem_msg m;
    pthread_mutex_lock(&c->lock);
    client_holder *h = comem_tab_holder(c, holder);
    if (!h) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_ENOENT;
    }
    /* Not registered on this connection yet: its (re)registration starts its idle clock anyway. */
    bool send = comem_tab_holder_live(c, h);
    uint64_t coord = h->coord_id;
    uint64_t gen = c->gen;
    pthread_mutex_unlock(&c->lock);
    /* Never waited on: a fault must not wait for the coordinator's turn. A lost connection loses
       nothing the resync does not restore. */
    if (send)
        (void)comem_conn_send(c, gen, comem_frame_id(&m, COMEM_MSG_TOUCH, coord));
    return COMEM_OK;
}

int comem_entry_add(comem_client *c, uint64_t holder, const char *name, int64_t size, int64_t resident,
                    unsigned flags, uint64_t *entry)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (!entry || !name_ok(name) || size < 0 || resident < 0 || resident > size || (flags & ~ENTRY_FLAGS) ||
        ((flags & COMEM_ENTRY_RAM_CACHE) && (flags & COMEM_ENTRY_RAM_FILE)))
        return COMEM_EINVAL; /* at most one tier */
    comem_msg m;
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
    client_call call = {.kind = PEND_ENTRY_ADD, .obj = id, .snap = e->seq, .what = name ? name : ""};
    e->holder = holder;
    put_name(e->name, name);
    e->size = size;
    e->resident = resident;
    e->flags = flags;
    if (c->link == LINK_UP && holder_live) {
        rc = comem_call_begin(c, &call, comem_frame_entry_add(&m, e, holder_coord));
        if (rc == COMEM_OK)
            e->adding_gen = call.r.gen;
        else
            comem_tab_remove_entry(c, id);
    } else {
        want_sync_if_up(c); /* its holder's id is still on its way */
    }
    pthread_mutex_unlock(&c->lock);
    if (rc == COMEM_OK)
        rc = comem_call_add(c, &call);
    if (rc == COMEM_OK)
        *entry = id;
    return rc;
}

int comem_entry_remove(comem_client *c, uint64_t entry)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    comem_msg m;
    client_call call = {.what = "an entry's removal", .removal = true};
    pthread_mutex_lock(&c->lock);
    client_entry *e = comem_tab_entry(c, entry);
    if (!e) {
        pthread_mutex_unlock(&c->lock);
        return COMEM_ENOENT;
    }
    if (comem_tab_entry_live(c, e))
        (void)comem_call_begin(c, &call, comem_frame_id(&m, COMEM_MSG_ENTRY_REMOVE, e->coord_id));
    comem_tab_remove_entry(c, entry);
    pthread_mutex_unlock(&c->lock);
    return comem_call_update(c, &call);
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
    client_call call = {.what = "a residency census"};
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
        comem_frame_census_item(comem_frame_census(&m, h), e);
        e->synced_seq = e->seq;
        (void)comem_call_begin(c, &call, &m);
    } else {
        want_sync_if_up(c);
    }
    pthread_mutex_unlock(&c->lock);
    return comem_call_update(c, &call);
}

int comem_holder_report(comem_client *c, uint64_t holder, int64_t pinned, int64_t overhead)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (pinned < -1 || overhead < -1)
        return COMEM_EINVAL;
    comem_msg m;
    client_call call = {.what = "a holder report"};
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
        h->synced_report_seq = h->report_seq;
        (void)comem_call_begin(c, &call, comem_frame_report(&m, h));
    } else {
        want_sync_if_up(c);
    }
    pthread_mutex_unlock(&c->lock);
    return comem_call_update(c, &call);
}

int comem_client_map_device(comem_client *c, int ordinal, const char *uuid)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (ordinal < 0 || ordinal >= COMEM_MAX_DEVICES || !uuid || !uuid[0] || strlen(uuid) >= COMEM_WIRE_TEXT_MAX)
        return COMEM_EINVAL;
    comem_msg m;
    client_call call = {.what = "the device map"};
    pthread_mutex_lock(&c->lock);
    snprintf(c->devmap[ordinal], sizeof c->devmap[ordinal], "%s", uuid);
    c->devmap_gen = 0;
    if (c->link == LINK_UP) {
        c->devmap_gen = c->gen;
        (void)comem_call_begin(c, &call, comem_frame_device_map(&m, c));
    } else if (c->link != LINK_DOWN) {
        comem_client_want_sync(c);
    }
    pthread_mutex_unlock(&c->lock);
    int rc = comem_call_update(c, &call);
    if (rc == COMEM_ENODEV) { /* not a card of this coordinator: not replayed on every reconnect either */
        pthread_mutex_lock(&c->lock);
        if (!strcmp(c->devmap[ordinal], uuid))
            c->devmap[ordinal][0] = 0;
        pthread_mutex_unlock(&c->lock);
    }
    return rc;
}
