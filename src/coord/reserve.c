/*
 * coord/reserve.c - the reserve a host should publish, per device.
 *
 * comfy-env's rule: the host keeps ComfyUI's own formulas and is told the card
 * is smaller by what it cannot see. Where the host's own free reading is
 * device-wide (Linux), it already sees every worker, so each worker's charge is
 * 0 and the published reserve is the operator's base. Where it is
 * process-local (WDDM: the host says so in its HELLO, or the card the
 * coordinator serves is a WDDM one, which decides even when the host's own
 * environment did not say), each worker is charged its context floor plus its
 * residency. The total is capped at 3/4 of the card; it grows at once and
 * shrinks only on evidence (a receipt, or a session's end). Host RAM's reserve
 * is not a host's: it is fixed when the device opens (coord_ram_reserve).
 */
#include "arith/cross_reserve.h"
#include "arith/reserve.h"
#include "base/bytes.h"
#include "base/log.h"
#include "base/size.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

static const ledger_session *host_session(comem_coord_srv *s)
{
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.sessions); i++) {
        const ledger_session *ss = comem_slab_at(&s->ledger.sessions, i, NULL);
        if (ss && ss->role == COMEM_ROLE_HOST)
            return ss;
    }
    return NULL;
}

static int64_t base_of(comem_coord_srv *s)
{
    return s->host_base >= 0 ? s->host_base : COMEM_RESERVE_DEFAULT;
}

/* Does the session hold anything on device (a holder there, or a context)? */
static bool present_on(comem_coord_srv *s, uint64_t session, int device)
{
    const ledger_session *ss = comem_slab_get(&s->ledger.sessions, session);
    if (ss && ss->floor[device] > 0)
        return true;
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.holders); i++) {
        const ledger_holder *h = comem_slab_at(&s->ledger.holders, i, NULL);
        if (h && h->session == session && h->device == device)
            return true;
    }
    return false;
}

int64_t coord_charge_of(comem_coord_srv *s, uint64_t session, int device)
{
    const ledger_session *ss = comem_slab_get(&s->ledger.sessions, session);
    if (!ss || ss->role != COMEM_ROLE_WORKER || device == s->ram_index || !present_on(s, session, device))
        return 0; /* host RAM: every reading of it is machine-wide, nobody is charged */
    /* The host's own free reading is process-local when it says so, or when the card is one
       (WDDM) whatever its environment told it: the card the coordinator serves decides. */
    const ledger_session *host = host_session(s);
    bool process_local = host && (host->scope == COMEM_SCOPE_PROCESS_LOCAL ||
                                  s->ledger.devices[device].proc_scope == COMEM_SCOPE_PROCESS_LOCAL);
    int64_t floor = ss->floor[device] > 0 ? ss->floor[device] : COMEM_CONTEXT_FLOOR;
    return comem_charge(comem_ledger_session_resident(&s->ledger, session, 0, device), process_local, floor);
}

void coord_publish_reserve(comem_coord_srv *s, int device, bool shrink_allowed)
{
    ledger_device *d = &s->ledger.devices[device];
    if (device == s->ram_index) {
        /* Host RAM: no worker is charged (every RAM reading is machine-wide); its reserve is fixed at start. */
        d->reserve_base = d->published = s->ram_reserve;
        return;
    }
    int64_t base = base_of(s);
    int64_t charges[256];
    size_t n = 0;
    int64_t extra = 0; /* beyond 256 workers the charges are summed into the last slot */
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.sessions); i++) {
        uint64_t id;
        if (!comem_slab_at(&s->ledger.sessions, i, &id))
            continue;
        int64_t ch = coord_charge_of(s, id, device);
        if (ch <= 0)
            continue;
        if (n < 256)
            charges[n++] = ch;
        else
            extra = comem_add(extra, ch);
    }
    if (extra && n)
        charges[n - 1] = comem_add(charges[n - 1], extra);
    int64_t proposed = comem_total_reserve(base, charges, n, d->capacity);
    int64_t before = d->published;
    if (d->reserve_base != base) {
        d->reserve_base = base; /* a new base replaces the old one outright */
        before = 0;
        shrink_allowed = true;
    }
    d->published = comem_next_reserve(before, proposed, shrink_allowed);
    if (d->published != before) {
        char a[32], b[32];
        comem_debug("device %d: reserve %s (base %s, %zu charge(s))", device, comem_format_bytes(d->published, a, 32),
                    comem_format_bytes(base, b, 32), n);
    }
}

int64_t coord_reserve_for(comem_coord_srv *s, uint64_t session, int device, int64_t *pager_headroom)
{
    const ledger_device *d = &s->ledger.devices[device];
    int64_t own = coord_charge_of(s, session, device);
    if (pager_headroom)
        *pager_headroom = comem_pager_headroom_forward(false, 0, d->published, d->reserve_base);
    return comem_reserve_for_requester(d->published, own);
}

int64_t coord_base_reserve(const comem_coord_srv *s, int device)
{
    const ledger_device *d = &s->ledger.devices[device];
    return d->reserve_base >= 0 ? d->reserve_base : d->published;
}
