/* coord/handlers.c - one function per request: check, apply to the ledger, reply. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/log.h"
#include "base/name.h"
#include "base/size.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

/* A name in a request that breaks base/name.h's rule: refused, saying which rule and where. */
static bool name_refused(comem_coord_srv *s, conn *c, uint32_t rid, const char *what, const char *name)
{
    char why[64], text[COMEM_WIRE_TEXT_MAX];
    if (comem_name_check(name, why, sizeof why) == COMEM_OK)
        return false;
    snprintf(text, sizeof text, "%s: %s", what, why);
    coord_reply(s, c, rid, COMEM_EINVAL, text);
    return true;
}

static void reply_id(comem_coord_srv *s, conn *c, uint32_t rid, uint64_t id)
{
    comem_msg m = {.type = COMEM_MSG_ID_REPLY, .request_id = rid};
    m.u.id.id = id;
    coord_send(s, c, &m);
}

static void on_devices(comem_coord_srv *s, conn *c, uint32_t rid)
{
    comem_msg m = {.type = COMEM_MSG_DEVICES_REPLY, .request_id = rid};
    comem_msg_devices_reply *d = &m.u.devices_reply;
    d->n = (uint16_t)s->ledger.n_devices;
    for (int i = 0; i < s->ledger.n_devices; i++) {
        const ledger_device *ld = &s->ledger.devices[i];
        comem_wire_device *w = &d->devices[i];
        w->index = (uint16_t)i;
        w->scope = (uint8_t)ld->scope;
        w->total = ld->capacity;
        w->free = s->meas[i].valid ? s->meas[i].r.free : -1;
        w->reserved = s->meas[i].valid ? s->meas[i].r.reserved : -1;
        snprintf(w->uuid, sizeof w->uuid, "%s", ld->uuid);
        snprintf(w->name, sizeof w->name, "%s", ld->name);
    }
    coord_send(s, c, &m);
}

static void on_holder_add(comem_coord_srv *s, conn *c, uint32_t rid, const comem_msg_holder_add *h)
{
    uint64_t id;
    if (name_refused(s, c, rid, "holder name", h->name))
        return;
    int32_t app_pid;
    char why_app[COMEM_WIRE_TEXT_MAX];
    int rc = coord_app_claim(s, c, h->pid, &app_pid, why_app, sizeof why_app);
    if (rc != COMEM_OK) {
        comem_warn("holder '%s' of pid %d refused: %s", h->name, (int)c->pid, why_app);
        coord_reply(s, c, rid, rc, why_app);
        return;
    }
    rc = comem_ledger_holder_add(&s->ledger, c->session, h->device, h->kind, h->flags, h->name, coord_now_s(s), &id);
    if (rc != COMEM_OK) {
        char why[COMEM_WIRE_TEXT_MAX];
        if (rc != COMEM_ERANGE || !comem_ledger_bound_why(&s->ledger, c->session, LEDGER_HOLDERS, why, sizeof why))
            snprintf(why, sizeof why, "%s", rc == COMEM_ENODEV ? "no such device" : "cannot add the holder");
        coord_reply(s, c, rid, rc, why);
        return;
    }
    ledger_session *ss = comem_ledger_session(&s->ledger, c->session);
    if (ss)
        ss->caps |= h->flags;
    if (app_pid) {
        comem_ledger_holder(&s->ledger, id)->app_pid = app_pid;
        comem_info("holder '%s' of pid %d speaks for the app pid %d", h->name, (int)c->pid, (int)app_pid);
    }
    reply_id(s, c, rid, id);
}

static void on_entry_add(comem_coord_srv *s, conn *c, uint32_t rid, const comem_msg_entry_add *e)
{
    uint64_t id;
    if (name_refused(s, c, rid, "entry name", e->name))
        return;
    if ((e->flags & COMEM_ENTRY_CACHE) && (e->flags & COMEM_ENTRY_FILE)) {
        coord_reply(s, c, rid, COMEM_EINVAL, "an entry is a cache entry or a file's copy, not both");
        return;
    }
    const ledger_holder *h = comem_ledger_holder(&s->ledger, e->holder_id);
    int64_t floor_was = coord_floor_claim(s, c->session, e->holder_id, e->resident); /* read as its floor already? */
    int rc = comem_ledger_entry_add(&s->ledger, c->session, e->holder_id, e->name, e->size, e->resident,
                                    (e->flags & COMEM_ENTRY_DYNAMIC) != 0, comem_now_ns(), &id);
    if (rc != COMEM_OK && floor_was >= 0)
        (void)comem_ledger_set_floor(&s->ledger, c->session, h->device, floor_was); /* as it was: it fitted */
    if (rc != COMEM_OK) {
        char why[COMEM_WIRE_TEXT_MAX];
        snprintf(why, sizeof why, "%s", rc == COMEM_ENOENT ? "no such holder" : "bad entry");
        if (rc == COMEM_ERANGE && h && e->size > s->ledger.devices[h->device].entry_max)
            snprintf(why, sizeof why, "entry larger than the card, host RAM and swap together");
        else if (rc == COMEM_ERANGE && !comem_ledger_bound_why(&s->ledger, c->session, LEDGER_ENTRIES, why, sizeof why))
            snprintf(why, sizeof why, "the device cannot hold that much");
        coord_reply(s, c, rid, rc, why);
        return;
    }
    if (e->refs)
        (void)comem_ledger_entry_set_refs(&s->ledger, c->session, id, e->refs); /* it was just added: cannot fail */
    if (e->flags & (COMEM_ENTRY_CACHE | COMEM_ENTRY_FILE)) /* its place in the order (docs/hostram.md) */
        (void)comem_ledger_entry_set_tier(&s->ledger, c->session, id,
                                          (e->flags & COMEM_ENTRY_CACHE) ? LEDGER_TIER_CACHE : LEDGER_TIER_FILE);
    reply_id(s, c, rid, id);
    if (h)
        coord_wddm_registered(s, c->session, h->device, e->resident);
    ledger_entry *en = comem_ledger_entry(&s->ledger, id);
    if (en && en->resident > 0)
        coord_publish_reserve(s, en->device, false);
}

static void on_census(comem_coord_srv *s, conn *c, uint32_t rid, const comem_msg_census *m)
{
    ledger_holder *h = comem_ledger_holder(&s->ledger, m->holder_id);
    int64_t growth = coord_census_growth(s, m);
    int64_t floor_was = coord_floor_claim(s, c->session, m->holder_id, growth);
    ledger_residency items[COMEM_WIRE_MAX_ITEMS];
    coord_residency(m->items, m->n, items);
    int64_t pinned, overhead;
    coord_census_figures(m, &pinned, &overhead);
    int rc = comem_ledger_census(&s->ledger, c->session, m->holder_id, m->seq, pinned, overhead, items, m->n,
                                 comem_now_ns(), NULL);
    if (rc != COMEM_OK && floor_was >= 0)
        (void)comem_ledger_set_floor(&s->ledger, c->session, h->device, floor_was); /* as it was: it fitted */
    coord_reply(s, c, rid, rc,
                rc == COMEM_ERANGE   ? "census claims more than the device holds"
                : rc == COMEM_EINVAL ? "census lists an entry more than once"
                                     : NULL);
    if (rc == COMEM_OK && h) {
        coord_wddm_registered(s, c->session, h->device, growth);
        coord_publish_reserve(s, h->device, false); /* grow at a boundary; shrink needs a receipt */
    }
}

static void on_grant_done(comem_coord_srv *s, conn *c, uint32_t rid, const comem_msg_grant_done *g)
{
    coord_filled f = {.device = -1};
    int rc;
    if (g->grant_id & BOOK_REF_BIT) { /* a booking made in shared memory (coord/book.c) */
        rc = coord_book_grant_done(s, c, g->grant_id, g->entry_id, g->used, &f);
    } else {
        ledger_grant *gr = comem_ledger_grant(&s->ledger, g->grant_id);
        if (gr)
            f = (coord_filled){gr->device, comem_min(comem_clamp0(g->used), gr->bytes),
                               comem_sub(gr->expires_ns, (int64_t)s->cfg.grant_ttl_ms * 1000000)};
        rc = comem_ledger_grant_done(&s->ledger, c->session, g->grant_id, g->entry_id, g->used);
        if (rc != COMEM_OK || !g->entry_id)
            f.device = -1;
    }
    if (f.device >= 0) { /* residency grew: the reading is corrected, and a worker's charge may grow too */
        coord_note_done(s, f.device, f.bytes, f.granted_ns);
        coord_publish_reserve(s, f.device, false);
    }
    coord_reply(s, c, rid, rc,
                rc != COMEM_ENOENT                ? NULL
                : (g->grant_id & BOOK_REF_BIT) ? "no such booking (expired?) or entry"
                                                : "no such grant (expired?) or entry");
}

static void on_activity(comem_coord_srv *s, conn *c, uint32_t rid, const comem_msg_activity *a)
{
    if (name_refused(s, c, rid, "prompt", a->prompt))
        return;
    int rc = comem_ledger_activity(&s->ledger, c->session, a->holder_id, a->busy != 0, a->prompt, coord_now_s(s));
    ledger_session *ss = comem_ledger_session(&s->ledger, c->session);
    if (rc == COMEM_OK && ss && a->holder_id == 0 && !a->busy && !a->prompt[0])
        ss->prompt[0] = '\0'; /* idle with no prompt: the prompt is over */
    coord_reply(s, c, rid, rc, NULL);
    if (rc == COMEM_OK && !a->busy)
        coord_jobs_boundary(s); /* an admission may wait for this boundary */
}

/*
 * TOUCH: one of this session's holders was in use just now without a node
 * boundary (a pager faulted). Between node boundaries that is the only sign
 * of life such a holder gives, so an idle one's idle clock starts again here,
 * as at the end of a node; a busy one is not idle anyway, and its clock
 * starts when it says so. Not replied to, so nothing is refused: another
 * session's holder, or one already gone, is ignored (a client may only keep
 * its own holders from idle release, never someone else's).
 */
static void on_touch(comem_coord_srv *s, conn *c, const comem_msg_id *t)
{
    ledger_holder *h = comem_ledger_holder(&s->ledger, t->id);
    if (!h || h->session != c->session || !c->session) {
        comem_debug("TOUCH names holder %llx, not this session's: ignored", (unsigned long long)t->id);
        return;
    }
    if (!h->busy) {
        h->idle_known = true;
        h->idle_since = coord_now_s(s);
    }
}

static void on_pin(comem_coord_srv *s, conn *c, uint32_t rid, const comem_msg_pin *p, bool acquire)
{
    comem_msg m = {.type = COMEM_MSG_PIN_REPLY, .request_id = rid};
    int64_t shortfall = 0;
    int rc = COMEM_OK;
    for (int d = 0; acquire && d < s->ledger.n_devices && rc == COMEM_OK; d++) {
        /* UMA: pinned RAM is the device's memory too, so it must fit what the device has free beyond
           its reserve, or VRAM and RAM would both be promised the same bytes (user-needs F21). Host
           RAM as a device (comemd --ram): a pin is RAM, so it must fit there too. */
        if (!s->meas[d].valid || (!s->meas[d].r.unified && d != s->ram_index))
            continue;
        int64_t room = comem_sub(coord_available(s, d, true), coord_base_reserve(s, d));
        if (p->bytes > room) {
            rc = COMEM_ENOSPC;
            shortfall = comem_sub(p->bytes, comem_clamp0(room));
        }
    }
    if (rc == COMEM_OK)
        rc = acquire ? comem_ledger_pin_acquire(&s->ledger, c->session, p->bytes, &shortfall)
                     : comem_ledger_pin_release(&s->ledger, c->session, p->bytes);
    if (rc != COMEM_OK && rc != COMEM_ENOSPC) {
        coord_reply(s, c, rid, rc, NULL);
        return;
    }
    m.u.pin_reply.granted = rc == COMEM_OK;
    m.u.pin_reply.total_pinned = s->ledger.total_pinned;
    m.u.pin_reply.max_pinned = s->ledger.max_pinned;
    m.u.pin_reply.shortfall = shortfall;
    coord_send(s, c, &m);
    if (rc == COMEM_ENOSPC) {
        char a[32], b[32];
        comem_info("pins: '%s' asked %s, %s short of the machine ceiling; asking pin holders",
                   comem_ledger_session(&s->ledger, c->session)->name, comem_format_bytes(p->bytes, a, 32),
                   comem_format_bytes(shortfall, b, 32));
        coord_pin_pressure(s, c->session, shortfall);
    }
}

static void on_reserve(comem_coord_srv *s, conn *c, uint32_t rid, const comem_msg_reserve *r)
{
    if (r->device >= s->ledger.n_devices) {
        coord_reply(s, c, rid, COMEM_ENODEV, "no such device");
        return;
    }
    comem_msg m = {.type = COMEM_MSG_RESERVE_REPLY, .request_id = rid};
    m.u.reserve_reply.published = s->ledger.devices[r->device].published;
    m.u.reserve_reply.base = s->ledger.devices[r->device].reserve_base;
    m.u.reserve_reply.for_requester = coord_reserve_for(s, c->session, r->device, &m.u.reserve_reply.pager_headroom);
    c->told[r->device] = m.u.reserve_reply.for_requester;
    c->told_known |= 1u << r->device;
    coord_send(s, c, &m);
}

static void on_status(comem_coord_srv *s, conn *c, uint32_t rid)
{
    for (int d = 0; d < s->ledger.n_devices; d++)
        coord_measure(s, d); /* a snapshot shows the card as it is now */
    char *text = coord_status_json(s);
    if (!text) {
        coord_reply(s, c, rid, COMEM_ENOMEM, "cannot build the status");
        return;
    }
    size_t total = strlen(text), off = 0;
    do { /* chunks, so a large machine never outgrows a frame */
        size_t len = total - off < COMEM_WIRE_CHUNK_MAX ? total - off : COMEM_WIRE_CHUNK_MAX;
        comem_msg m = {.type = COMEM_MSG_STATUS_REPLY, .request_id = rid};
        m.u.status_reply.offset = (uint32_t)off;
        m.u.status_reply.total = (uint32_t)total;
        m.u.status_reply.len = (uint32_t)len;
        m.u.status_reply.text = (const uint8_t *)text + off;
        coord_send(s, c, &m);
        off += len;
    } while (off < total);
    free(text);
}

void coord_handle(comem_coord_srv *s, conn *c, comem_msg *m)
{
    if (m->type == COMEM_MSG_TOUCH) {
        /* Several a second from each faulting pager, and nothing the view shows moves: no republish. */
        on_touch(s, c, &m->u.id);
        return;
    }
    if (m->type == COMEM_MSG_WDDM) {
        coord_wddm(s, c, &m->u.wddm); /* only the status shows it: no republish */
        return;
    }
    s->view_turns++; /* the turn's end republishes the view */
    uint32_t rid = m->request_id;
    switch (m->type) {
    case COMEM_MSG_HELLO:
        coord_hello(s, c, &m->u.hello, rid);
        break;
    case COMEM_MSG_DEVICES:
        on_devices(s, c, rid);
        break;
    case COMEM_MSG_DEVICE_MAP:
        coord_device_map(s, c, rid, &m->u.device_map);
        break;
    case COMEM_MSG_HOLDER_ADD:
        m->u.holder_add.device = coord_device_in(c, m->u.holder_add.device);
        on_holder_add(s, c, rid, &m->u.holder_add);
        break;
    case COMEM_MSG_HOLDER_REMOVE:
        coord_reply(s, c, rid, comem_ledger_holder_remove(&s->ledger, c->session, m->u.id.id), NULL);
        break;
    case COMEM_MSG_ENTRY_ADD:
        on_entry_add(s, c, rid, &m->u.entry_add);
        break;
    case COMEM_MSG_ENTRY_REMOVE:
        coord_reply(s, c, rid, comem_ledger_entry_remove(&s->ledger, c->session, m->u.id.id), NULL);
        break;
    case COMEM_MSG_CENSUS:
        on_census(s, c, rid, &m->u.census);
        break;
    case COMEM_MSG_ADMIT:
        m->u.admit.device = coord_device_in(c, m->u.admit.device);
        coord_admit(s, c, rid, &m->u.admit);
        break;
    case COMEM_MSG_GRANT_DONE:
        on_grant_done(s, c, rid, &m->u.grant_done);
        break;
    case COMEM_MSG_RECLAIM:
        m->u.reclaim.device = coord_device_in(c, m->u.reclaim.device);
        coord_reclaim(s, c, rid, &m->u.reclaim);
        break;
    case COMEM_MSG_ACTIVITY:
        on_activity(s, c, rid, &m->u.activity);
        break;
    case COMEM_MSG_PRESSURE:
        m->u.pressure.device = coord_device_in(c, m->u.pressure.device);
        coord_pressure(s, c, rid, &m->u.pressure);
        break;
    case COMEM_MSG_PIN_ACQUIRE:
    case COMEM_MSG_PIN_RELEASE:
        on_pin(s, c, rid, &m->u.pin, m->type == COMEM_MSG_PIN_ACQUIRE);
        break;
    case COMEM_MSG_RESERVE:
        m->u.reserve.device = coord_device_in(c, m->u.reserve.device);
        on_reserve(s, c, rid, &m->u.reserve);
        break;
    case COMEM_MSG_STATUS:
        on_status(s, c, rid);
        break;
    case COMEM_MSG_RECEIPT:
        coord_receipt(s, c, &m->u.receipt);
        break;
    case COMEM_MSG_RELEASE:
        coord_release(s, c, rid, &m->u.release);
        break;
    case COMEM_MSG_GOODBYE:
        c->goodbye = true; /* a clean end, not a death; EOF follows, and nothing more is served */
        coord_session_end(s, c, "goodbye");
        break;
    case COMEM_MSG_BOOKED:
        break; /* the wake-up is the point: this turn's end reconciles the area */
    default:
        /* A coordinator-to-client type sent the other way is a protocol error. */
        coord_reply(s, c, rid, COMEM_EPROTO, "not a request");
        c->closing = true;
        break;
    }
}
