/*
 * coord/measure.c - the devices: opened, read, and the true free figure decisions use.
 *
 * At start the device source is opened, each device read once into the
 * ledger's device table (capacity, scopes, the largest entry the card, RAM and
 * swap could hold), and the machine-wide pinned ceiling computed from host RAM.
 * With a RAM spec (comemd --ram, COMEM_RAM) host RAM is one more device after
 * the cards (probe/hostram.h; docs/hostram.md); with no card at all (auto on a
 * machine without a GPU) it is the only device, "machine" unless a spec says
 * otherwise, and with RAM switched off as well the coordinator refuses to
 * start (there would be nothing to serve). Its readings track the RSS of
 * every process in the ledger, its floors are what a process has resident
 * beyond its RAM entries, and its reserve is fixed here (coord_ram_reserve).
 *
 * A decision needs true free memory. Reading the card costs tens of
 * microseconds (NVML, measured on an H200) and the simulated card must lock
 * and reap, so an admission may reuse the last reading, but only while the
 * ledger has learned nothing since except grants: outstanding grants are
 * subtracted, and so are grants that turned into residency after the reading
 * (it has not seen those allocations). Anything else the ledger hears about a
 * device (a process joining or leaving, which creates or frees a context; a
 * registration, a census that moved residency, pins) moves the device's ledger
 * generation (ledger_device.changes), and a reading taken at another
 * generation is not reused: the next decision reads the card again. The two
 * changes the ledger cannot show are said here: a receipt (what the holder
 * freed shows on the card, listed or not) and a grant filled after the reading
 * was taken. Age beyond reading_max_age_ms also forces a reading, which bounds
 * how long an allocation nobody reported can go unseen.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arith/cross_reserve.h"
#include "arith/pinned.h"
#include "arith/planners.h"
#include "arith/ram_cache.h"
#include "base/bytes.h"
#include "base/hops.h"
#include "base/log.h"
#include "base/size.h"
#include "comem/common.h"
#include "coord/coord_internal.h"
#include "probe/hostmem.h"
#include "probe/hostram.h"
#include "probe/select.h"

int coord_devices_open(comem_coord_srv *s)
{
    char note[512];
    int rc = comem_devices_open(s->cfg.device_spec[0] ? s->cfg.device_spec : NULL, &s->src, note, sizeof note);
    if (rc != COMEM_OK) {
        comem_error("coordinator: cannot open devices: %s", note);
        return rc;
    }
    if (note[0])
        comem_info("coordinator: %s", note);
    int n = 0;
    comem_device_count(s->src, &n);
    if (n == 0 && !s->cfg.ram_spec[0]) {
        /* No card (auto on a machine without a GPU): host RAM is all there is to manage, so it is on unless
           switched off; with it off too nothing would be served, and a coordinator that answers every
           request with "no such device" looks healthy where it should not: it refuses to start, and
           clients decide locally and say so. */
        if (s->cfg.ram_off) {
            comem_error("coordinator: no card to coordinate%s and host RAM is off (COMEM_RAM=off or --ram off): "
                        "nothing to serve; --ram machine manages host RAM alone, --device sim:SIZE serves a "
                        "simulated card",
                        comem_devices_none(s->src) ? " (no GPU found)" : "");
            return COMEM_ENODEV;
        }
        snprintf(s->cfg.ram_spec, sizeof s->cfg.ram_spec, "machine");
        comem_info("coordinator: no GPU: managing host RAM only (--ram machine; --device sim:SIZE for a "
                   "simulated card)");
    }
    int max_cards = s->cfg.ram_spec[0] ? COMEM_MAX_DEVICES - 1 : COMEM_MAX_DEVICES; /* host RAM takes a slot */
    if (n > max_cards) {
        comem_warn("coordinator: %d devices; serving the first %d", n, max_cards);
        n = max_cards;
    }
    if (s->cfg.ram_spec[0]) {
        rc = comem_hostram_open(s->cfg.ram_spec, &s->ram_src, note, sizeof note);
        if (rc != COMEM_OK) {
            comem_error("coordinator: cannot open host RAM: %s", note);
            return rc;
        }
        s->ram_index = n;
    }
    int n_all = n + (s->ram_src ? 1 : 0);
    ledger_device devs[COMEM_MAX_DEVICES];
    /* The machine's RAM and swap: where a model's bytes live when not on the card. */
    comem_hostmem host;
    bool have_host = comem_hostmem_read(NULL, &host) == COMEM_OK;
    int64_t off_card = have_host ? comem_add(comem_max(host.mem_total, host.total), comem_clamp0(host.swap_total)) : -1;
    for (int i = 0; i < n_all; i++) {
        comem_device_reading *r = &s->meas[i].r;
        memset(&devs[i], 0, sizeof devs[i]);
        if (coord_read_device(s, i, r) != COMEM_OK)
            return COMEM_ENODEV;
        devs[i].index = i;
        snprintf(devs[i].uuid, sizeof devs[i].uuid, "%s", r->uuid);
        snprintf(devs[i].name, sizeof devs[i].name, "%s", r->name);
        devs[i].capacity = r->total;
        /* An entry larger than the card, RAM and swap together is not a model anyone holds. */
        devs[i].entry_max = off_card >= 0 ? comem_add(r->total, off_card) : comem_mul(r->total, 16);
        if (i == s->ram_index)
            devs[i].entry_max = r->total; /* a RAM entry larger than the RAM budget is not one */
        devs[i].scope = r->scope;
        devs[i].proc_scope = r->local_scope;
        devs[i].unified = r->unified;
        if (r->unified)
            comem_info("coordinator: device %d (%s) is integrated: its memory is host RAM, one pool for VRAM and "
                       "pinned RAM", i, r->name);
        devs[i].reserve_base = -1;
        devs[i].last_free = r->free;
    }
    /* The machine-wide pinned ceiling, from cgroup-clamped RAM (ComfyUI's rule). Its Windows form
       (40 % of RAM) applies once a process says its free reading is process-local (session.c). */
    double max_pinned = COMEM_PINNING_DISABLED;
    s->max_pinned_windows = (int64_t)COMEM_PINNING_DISABLED;
    if (have_host) {
        comem_pin_ceiling_in pin = {.ram = (double)host.total, .disk_swap = host.disk_swap,
                                    .cgroup_limited = host.cgroup_limited, .enabled = true};
        max_pinned = comem_max_pinned(&pin);
        pin.windows = true;
        s->max_pinned_windows = (int64_t)comem_max_pinned(&pin);
    }
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (devs[a].uuid[0] && !strcmp(devs[a].uuid, devs[b].uuid))
                comem_warn("coordinator: devices %d and %d are one card (%s): its memory is counted twice", a, b,
                           devs[a].uuid);
    if (s->ram_src) {
        s->ram_reserve = comem_ram_reserve(comem_hostram_budget(s->ram_src), devs[s->ram_index].capacity);
        char a[32], b[32];
        comem_info("coordinator: device %d is host RAM (%s): %s, %s kept free", s->ram_index, s->cfg.ram_spec,
                   comem_format_bytes(devs[s->ram_index].capacity, a, sizeof a),
                   comem_format_bytes(s->ram_reserve, b, sizeof b));
    }
    rc = comem_ledger_init(&s->ledger, devs, n_all, (int64_t)max_pinned);
    comem_ledger_set_checking(&s->ledger, s->cfg.check);
    return rc;
}

/* Bytes other processes could release now: idle holders' resident, and any pager's. */
static int64_t reclaimable(comem_coord_srv *s, int device)
{
    int64_t sum = 0;
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.entries); i++) {
        const ledger_entry *e = comem_slab_at(&s->ledger.entries, i, NULL);
        if (!e || e->device != device || e->resident <= 0)
            continue;
        const ledger_holder *h = comem_slab_get(&s->ledger.holders, e->holder);
        if (h && comem_may_release_now((h->flags & (COMEM_CAP_RELEASE | COMEM_CAP_IDLE_RELEASE)) != 0, h->busy,
                                       (h->flags & COMEM_CAP_WHILE_BUSY) != 0))
            sum = comem_add(sum, e->resident);
    }
    /* Holders with no entries that answer asks: what they report is theirs to give back. */
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.holders); i++) {
        uint64_t hid;
        const ledger_holder *h = comem_slab_at(&s->ledger.holders, i, &hid);
        int64_t bytes;
        if (h && h->device == device && !h->busy && coord_generic_holder(&s->ledger, hid, h, &bytes))
            sum = comem_add(sum, bytes);
    }
    return sum;
}

/*
 * Context floors from per-process usage: what a process holds beyond its entries and grants,
 * shared evenly by its sessions (a process that embeds the coordinator may hold several), so
 * the floors add up to what the process really holds beyond the ledger. Where the card gives no
 * figure for a process (NVML under WDDM lists none), its own last WDDM report does (wddm.c).
 */
static void update_floors(comem_coord_srv *s, int device, const comem_device_reading *r)
{
    if (!r->procs_known && !s->wddm_reports)
        return;
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.sessions); i++) {
        uint64_t id;
        ledger_session *ss = comem_slab_at(&s->ledger.sessions, i, &id);
        if (!ss)
            continue;
        int64_t usage = -1;
        for (size_t p = 0; r->procs_known && p < r->n_procs; p++)
            if (r->procs[p].pid == ss->pid)
                usage = r->procs[p].bytes;
        int n = 1;
        int64_t held = comem_ledger_process_held(&s->ledger, id, device, &n), beyond = -1, floor = 0;
        if (usage > 0)
            beyond = comem_sub(usage, held);
        else if (usage < 0 && s->wddm_reports) /* the card has no figure for it: what it said under WDDM */
            beyond = coord_wddm_overhead(s, id, device);
        if (beyond > 0)
            floor = beyond / (n > 0 ? n : 1);
        if (floor != ss->floor[device])
            comem_ledger_set_floor(&s->ledger, id, device, floor); /* refused if it would not fit: keep the old */
    }
}

int64_t coord_floor_claim(comem_coord_srv *s, uint64_t session, uint64_t holder, int64_t resident)
{
    const ledger_holder *h = comem_ledger_holder(&s->ledger, holder);
    const ledger_session *ss = comem_ledger_session(&s->ledger, session);
    if (!h || !ss || h->session != session)
        return -1;
    int d = h->device;
    int64_t was = ss->floor[d];
    if (resident <= 0 || was <= 0)
        return was;
    /* Host RAM's floor is all RSS beyond what was registered; a card's also holds the context and
       the holders' overhead, which no entry's bytes ever were. */
    int64_t claimable = d == s->ram_index ? was : coord_split_floor(s, session, d).unregistered;
    if (claimable > 0)
        (void)comem_ledger_set_floor(&s->ledger, session, d, comem_sub(was, comem_min(claimable, resident)));
    return was;
}

int64_t coord_census_growth(comem_coord_srv *s, const comem_msg_census *m)
{
    const ledger_holder *h = comem_ledger_holder(&s->ledger, m->holder_id);
    if (!h)
        return 0;
    int64_t grow = 0;
    for (uint16_t i = 0; i < m->n && i < COMEM_WIRE_MAX_ITEMS; i++) {
        const ledger_entry *e = comem_ledger_entry(&s->ledger, m->items[i].entry_id);
        if (e && e->holder == m->holder_id)
            grow = comem_add(grow, comem_clamp0(comem_sub(m->items[i].resident, e->resident)));
    }
    return grow; /* an item the ledger drops as stale makes this an overestimate until the next reading */
}

coord_floor_split coord_split_floor(const comem_coord_srv *s, uint64_t session, int device)
{
    int64_t overhead = 0;
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.holders); i++) {
        const ledger_holder *h = comem_slab_at(&s->ledger.holders, i, NULL);
        if (h && h->session == session && h->device == device && h->census_seen)
            overhead = comem_add(overhead, h->overhead);
    }
    return coord_split_floor_given(s, session, device, overhead);
}

coord_floor_split coord_split_floor_given(const comem_coord_srv *s, uint64_t session, int device, int64_t overhead)
{
    coord_floor_split out = {0};
    const ledger_session *ss = comem_slab_get(&s->ledger.sessions, session);
    if (!ss)
        return out;
    int64_t beyond = ss->floor[device];
    out.overhead = comem_min(overhead, beyond);
    out.context = comem_min(comem_sub(beyond, out.overhead), COMEM_CONTEXT_FLOOR);
    out.unregistered = comem_sub(comem_sub(beyond, out.overhead), out.context);
    return out;
}

/* Σ unregistered bytes of every process on device: one pass over the holders, one over the sessions. */
static int64_t unregistered_on(const comem_coord_srv *s, int device)
{
    size_t n = comem_slab_slots(&s->ledger.sessions);
    int64_t *overhead = calloc(n + 1, sizeof *overhead), sum = 0; /* per session slot */
    for (size_t i = 0; overhead && i < comem_slab_slots(&s->ledger.holders); i++) {
        const ledger_holder *h = comem_slab_at(&s->ledger.holders, i, NULL);
        if (h && h->device == device && h->census_seen && comem_slab_get(&s->ledger.sessions, h->session))
            overhead[comem_slab_slot(h->session)] = comem_add(overhead[comem_slab_slot(h->session)], h->overhead);
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t id;
        if (comem_slab_at(&s->ledger.sessions, i, &id))
            sum = comem_add(sum, (overhead ? coord_split_floor_given(s, id, device, overhead[i])
                                           : coord_split_floor(s, id, device)).unregistered); /* no memory: scan */
    }
    free(overhead);
    return sum;
}

void coord_publish_view(comem_coord_srv *s, int device)
{
    const measurement *m = &s->meas[device];
    comem_view_values v = {
        .capacity = s->ledger.devices[device].capacity,
        .free = m->valid ? m->r.free : -1,
        .reserve = s->ledger.devices[device].published,
        .reclaimable = reclaimable(s, device),
        .granted = comem_add(comem_ledger_granted(&s->ledger, device), coord_inherited(s, device)), /* what a
                      successor keeps for the clients (reclaim.c) */
        .updated_ns = m->taken_ns,
        .unregistered = unregistered_on(s, device),
    };
    comem_view_publish(&s->view, device, &v);
}

int coord_measure(comem_coord_srv *s, int device)
{
    measurement *m = &s->meas[device];
    int64_t now = comem_now_ns();
    if (now < m->retry_ns)
        return COMEM_EBUSY; /* it could not be read a moment ago: do not wait on it again yet */
    coord_book_reconcile(s); /* floors subtract each process's grants: bookings must be grants by then */
    comem_device_reading before = m->r; /* the reading this one replaces (4 KiB: on the loop's stack) */
    bool had = m->valid;
    comem_hop(COMEM_HOP_CARD_READ_START);
    int rc = coord_read_device(s, device, &m->r);
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
    m->changes = s->ledger.devices[device].changes;
    m->stale = false;
    m->taken_ns = comem_now_ns();
    comem_hop(COMEM_HOP_CARD_READ);
    comem_hop_count(COMEM_HOP_CARD_READS);
    m->done_since = 0;
    s->ledger.devices[device].last_free = m->r.free;
    s->ledger.devices[device].last_read_ns = m->taken_ns;
    update_floors(s, device, &m->r);
    if (device == s->ram_index)
        coord_ram_warn(s);
    coord_spill_note(s, device, had ? &before : NULL, &m->r);
    coord_receipt_checks_run(s, device);
    coord_publish_view(s, device);
    return COMEM_OK;
}

void coord_note_done(comem_coord_srv *s, int device, int64_t bytes, int64_t granted_ns)
{
    measurement *m = &s->meas[device];
    if (m->taken_ns > granted_ns) { /* comem simulate's F19 met the race on a loaded machine */
        m->stale = true;
        return;
    }
    m->done_since = comem_add(m->done_since, comem_clamp0(bytes));
    coord_publish_view(s, device);
}

