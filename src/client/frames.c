/*
 * client/frames.c - one builder per record (client/frames.h): the calls
 * (register.c, admit.c, calls.c), the resync (resync.c) and the give-backs
 * (reader.c) build every frame they send here, so a record goes on the wire
 * the same way whoever tells it.
 */
#include <stdio.h>
#include <string.h>

#include "base/bytes.h"
#include "client/frames.h"

/* Zeroes m and sets its type: every field a builder leaves is 0. */
static comem_msg *start(comem_msg *m, uint16_t type)
{
    memset(m, 0, sizeof *m);
    m->type = type;
    return m;
}

static void put_name(char *dst, const char *src) { snprintf(dst, COMEM_WIRE_NAME_MAX, "%s", src ? src : ""); }

uint32_t comem_frame_caps(unsigned flags)
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

/* The API's entry flags (COMEM_ENTRY_PAGED, COMEM_ENTRY_RAM_*) as the protocol's. */
static uint32_t entry_flags(unsigned flags)
{
    return ((flags & COMEM_ENTRY_PAGED) ? COMEM_ENTRY_DYNAMIC : 0u) |
           ((flags & COMEM_ENTRY_RAM_CACHE) ? COMEM_ENTRY_CACHE : 0u) |
           ((flags & COMEM_ENTRY_RAM_FILE) ? COMEM_ENTRY_FILE : 0u);
}

comem_msg *comem_frame_holder_add(comem_msg *m, const client_holder *h)
{
    comem_msg_holder_add *a = &start(m, COMEM_MSG_HOLDER_ADD)->u.holder_add;
    a->device = (uint16_t)h->device;
    a->kind = (uint8_t)h->kind;
    a->flags = h->flags;
    a->pid = h->app_pid;
    put_name(a->name, h->name);
    return m;
}

comem_msg *comem_frame_entry_add(comem_msg *m, const client_entry *e, uint64_t holder_coord)
{
    comem_msg_entry_add *a = &start(m, COMEM_MSG_ENTRY_ADD)->u.entry_add;
    a->holder_id = holder_coord;
    a->size = e->size;
    a->resident = e->resident;
    a->refs = e->refs;
    a->flags = entry_flags(e->flags);
    put_name(a->name, e->name);
    return m;
}

comem_msg *comem_frame_id(comem_msg *m, uint16_t type, uint64_t coord_id)
{
    start(m, type)->u.id.id = coord_id;
    return m;
}

comem_msg *comem_frame_census(comem_msg *m, const client_holder *h)
{
    comem_msg_census *cs = &start(m, COMEM_MSG_CENSUS)->u.census;
    cs->holder_id = h->coord_id;
    cs->seq = h->report_seq;
    return m;
}

comem_wire_residency comem_frame_residency(const client_entry *e)
{
    return (comem_wire_residency){e->coord_id, e->seq, e->resident, e->refs};
}

bool comem_frame_census_item(comem_msg *m, const client_entry *e)
{
    comem_msg_census *cs = &m->u.census;
    if (cs->n >= COMEM_WIRE_MAX_ITEMS)
        return false;
    cs->items[cs->n++] = comem_frame_residency(e);
    return true;
}

comem_msg *comem_frame_report(comem_msg *m, const client_holder *h)
{
    comem_msg_census *cs = &comem_frame_census(m, h)->u.census;
    cs->has = h->has;
    cs->pinned = h->pinned;
    cs->overhead = h->overhead;
    return m;
}

comem_msg *comem_frame_activity(comem_msg *m, uint64_t holder_coord, bool busy, const char *prompt)
{
    comem_msg_activity *a = &start(m, COMEM_MSG_ACTIVITY)->u.activity;
    a->holder_id = holder_coord;
    a->busy = busy;
    put_name(a->prompt, prompt);
    return m;
}

comem_msg *comem_frame_pin(comem_msg *m, uint16_t type, uint64_t holder_coord, int64_t bytes)
{
    comem_msg_pin *p = &start(m, type)->u.pin;
    p->holder_id = holder_coord;
    p->bytes = bytes;
    return m;
}

comem_msg *comem_frame_device_map(comem_msg *m, const comem_client *c)
{
    comem_msg_device_map *d = &start(m, COMEM_MSG_DEVICE_MAP)->u.device_map;
    for (int o = 0; o < COMEM_MAX_DEVICES; o++) {
        if (!c->devmap[o][0])
            continue;
        d->items[d->n].ordinal = (uint16_t)o;
        snprintf(d->items[d->n].uuid, sizeof d->items[d->n].uuid, "%s", c->devmap[o]);
        d->n++;
    }
    return d->n ? m : NULL;
}

comem_msg *comem_frame_wddm(comem_msg *m, const comem_wddm_adapter *a, int n, const comem_cuda_luid *cuda,
                            int n_cuda)
{
    comem_msg_wddm *w = &start(m, COMEM_MSG_WDDM)->u.wddm;
    for (int i = 0; i < n && w->n < COMEM_MAX_DEVICES; i++) {
        if (!a[i].luid)
            continue; /* no adapter has LUID 0: the coordinator would refuse the frame */
        comem_wire_wddm *item = &w->items[w->n++];
        item->luid = a[i].luid;
        item->budget = comem_clamp0(a[i].budget);
        item->usage = comem_clamp0(a[i].usage);
        for (int k = 0; k < n_cuda; k++)
            if (cuda[k].luid == a[i].luid)
                snprintf(item->uuid, sizeof item->uuid, "%s", cuda[k].uuid);
    }
    return m;
}

comem_msg *comem_frame_grant_done(comem_msg *m, uint64_t grant_coord, uint64_t entry_coord, int64_t used)
{
    comem_msg_grant_done *g = &start(m, COMEM_MSG_GRANT_DONE)->u.grant_done;
    g->grant_id = grant_coord;
    g->entry_id = entry_coord;
    g->used = used;
    return m;
}

comem_msg *comem_frame_reclaim(comem_msg *m, int device, uint64_t holder_coord, int64_t bytes)
{
    comem_msg_reclaim *r = &start(m, COMEM_MSG_RECLAIM)->u.reclaim;
    r->device = (uint16_t)device;
    r->holder_id = holder_coord;
    r->bytes = bytes;
    return m;
}

int comem_frame_admit(comem_msg *m, comem_client *c, const client_admit_ask *q, uint32_t budget_ms)
{
    comem_msg_admit *a = &start(m, COMEM_MSG_ADMIT)->u.admit;
    client_holder *h = q->holder ? comem_tab_holder(c, q->holder) : NULL;
    if (q->holder && !h)
        return COMEM_ENOENT;
    for (size_t i = 0; i < q->n_keep; i++) {
        client_entry *e = comem_tab_entry(c, q->keep[i]);
        if (!e)
            return COMEM_ENOENT;
        if (comem_tab_entry_live(c, e))
            a->keep[a->n_keep++] = e->coord_id; /* one the coordinator does not know yet cannot be asked anyway */
    }
    a->device = (uint16_t)q->device;
    a->holder_id = h && comem_tab_holder_live(c, h) ? h->coord_id : 0;
    a->weights = q->weights;
    a->inference = q->inference;
    a->cast_forward = q->cast_forward;
    a->timeout_ms = budget_ms;
    return COMEM_OK;
}

comem_msg *comem_frame_pressure(comem_msg *m, int device, int64_t bytes, uint32_t budget_ms)
{
    comem_msg_pressure *p = &start(m, COMEM_MSG_PRESSURE)->u.pressure;
    p->device = (uint16_t)device;
    p->bytes = bytes;
    p->timeout_ms = budget_ms;
    return m;
}

comem_msg *comem_frame_release(comem_msg *m, uint64_t entry_coord, int64_t bytes, uint32_t budget_ms)
{
    comem_msg_release *r = &start(m, COMEM_MSG_RELEASE)->u.release;
    r->entry_id = entry_coord;
    r->bytes = bytes < 0 ? -1 : bytes;
    r->timeout_ms = budget_ms;
    return m;
}

comem_msg *comem_frame_reserve(comem_msg *m, int device)
{
    start(m, COMEM_MSG_RESERVE)->u.reserve.device = (uint16_t)device;
    return m;
}

comem_msg *comem_frame_bare(comem_msg *m, uint16_t type) { return start(m, type); }
