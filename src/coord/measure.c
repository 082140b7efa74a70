/*
 * coord/measure.c - reading the devices, and the free figure decisions use.
 *
 * A decision needs true free memory. Reading the card costs tens of
 * microseconds (NVML, measured on an H200) and the simulated card must lock
 * and reap, so an admission may reuse the last reading, but only while the
 * ledger has learned nothing since except grants: outstanding grants are
 * subtracted, and so are grants that turned into residency after the reading
 * (it has not seen those allocations). Anything else the ledger hears about a
 * device (a process joining or leaving, which creates or frees a context; a
 * registration, census or receipt) marks the reading stale, and the next
 * decision reads the card again; so does age beyond reading_max_age_ms, which
 * bounds how long an allocation nobody reported can go unseen.
 */
#include <string.h>

#include "base/bytes.h"
#include "base/log.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

/* Bytes other processes could release now: idle holders' resident, and any pager's. */
static int64_t reclaimable(comem_coord_srv *s, int device)
{
    int64_t sum = 0;
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.entries); i++) {
        const ledger_entry *e = comem_slab_at(&s->ledger.entries, i, NULL);
        if (!e || e->device != device || e->resident <= 0)
            continue;
        const ledger_holder *h = comem_slab_get(&s->ledger.holders, e->holder);
        if (!h || !(h->flags & (COMEM_CAP_RELEASE | COMEM_CAP_IDLE_RELEASE)))
            continue;
        if (!h->busy || (h->flags & COMEM_CAP_WHILE_BUSY))
            sum = comem_add(sum, e->resident);
    }
    return sum;
}

/* Context floors from per-process usage: what a process holds beyond its entries and grants. */
static void update_floors(comem_coord_srv *s, int device, const comem_device_reading *r)
{
    if (!r->procs_known)
        return;
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.sessions); i++) {
        uint64_t id;
        ledger_session *ss = comem_slab_at(&s->ledger.sessions, i, &id);
        if (!ss)
            continue;
        int64_t usage = -1;
        for (size_t p = 0; p < r->n_procs; p++)
            if (r->procs[p].pid == ss->pid)
                usage = r->procs[p].bytes;
        int64_t floor = 0;
        if (usage > 0) {
            int64_t granted = 0;
            for (size_t g = 0; g < comem_slab_slots(&s->ledger.grants); g++) {
                const ledger_grant *gr = comem_slab_at(&s->ledger.grants, g, NULL);
                if (gr && gr->session == id && gr->device == device)
                    granted = comem_add(granted, gr->bytes);
            }
            floor = comem_clamp0(comem_sub(comem_sub(usage, comem_ledger_session_resident(&s->ledger, id, 0, device)),
                                           granted));
        }
        if (floor != ss->floor[device])
            comem_ledger_set_floor(&s->ledger, id, device, floor); /* refused if it would not fit: keep the old */
    }
}

static void publish_view(comem_coord_srv *s, int device)
{
    const measurement *m = &s->meas[device];
    comem_view_values v = {
        .capacity = s->ledger.devices[device].capacity,
        .free = m->valid ? m->r.free : -1,
        .reserve = s->ledger.devices[device].published,
        .reclaimable = reclaimable(s, device),
        .granted = comem_ledger_granted(&s->ledger, device),
        .updated_ns = m->taken_ns,
    };
    comem_view_publish(&s->view, device, &v);
}

int coord_measure(comem_coord_srv *s, int device)
{
    measurement *m = &s->meas[device];
    int64_t now = comem_now_ns();
    if (now < m->retry_ns)
        return COMEM_EBUSY; /* it could not be read a moment ago: do not wait on it again yet */
    int rc = comem_device_read(s->src, device, &m->r);
    if (rc != COMEM_OK) {
        if (!m->failing)
            comem_warn("cannot read device %d: %s%s; decisions on it are refused until it reads again", device,
                       comem_status_str(rc),
                       rc == COMEM_EBUSY ? " (its lock is held by a process that does not let go: stopped?)" : "");
        m->failing = true;
        m->valid = false;
        /* Each failed reading may have waited its bound; try again only after a pause, so the
           loop spends at most a tenth of its time on a device it cannot read. */
        m->retry_ns = comem_add(now, COORD_READ_RETRY_MS * 1000000LL);
        return rc;
    }
    if (m->failing)
        comem_info("device %d reads again", device);
    m->failing = false;
    m->retry_ns = 0;
    m->valid = true;
    m->stale = false;
    m->taken_ns = comem_now_ns();
    m->done_since = 0;
    s->ledger.devices[device].last_free = m->r.free;
    s->ledger.devices[device].last_read_ns = m->taken_ns;
    update_floors(s, device, &m->r);
    publish_view(s, device);
    return COMEM_OK;
}

int64_t coord_available(comem_coord_srv *s, int device, bool fresh)
{
    measurement *m = &s->meas[device];
    int64_t age = comem_now_ns() - m->taken_ns;
    if (fresh || !m->valid || m->stale || age > (int64_t)s->cfg.reading_max_age_ms * 1000000)
        coord_measure(s, device);
    if (!m->valid)
        return 0; /* cannot read the card: admit nothing rather than guess */
    int64_t avail = comem_sub(comem_sub(m->r.free, comem_ledger_granted(&s->ledger, device)), m->done_since);
    return avail;
}

void coord_note_done(comem_coord_srv *s, int device, int64_t bytes)
{
    s->meas[device].done_since = comem_add(s->meas[device].done_since, comem_clamp0(bytes));
    publish_view(s, device);
}

void coord_touched(comem_coord_srv *s, int device)
{
    for (int d = 0; d < s->ledger.n_devices; d++)
        if (device < 0 || d == device)
            s->meas[d].stale = true;
}
