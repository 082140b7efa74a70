/*
 * coord/room.c - one definition of room: what a decision may give, the same
 * for an admission the coordinator decides (admit.c, pressure.c, handlers.c)
 * and for the stocks the booking areas spend without it (stock.c).
 *
 *   ledger room  = last true free - outstanding grants - grants filled since
 *   available    = ledger room - what the areas hold (their stocks), after
 *                  reconciling bookings and reading the card again when the
 *                  reading cannot be reused (measure.c says when)
 *   stock room   = min(ledger room, capacity - what the ledger attributes):
 *                  never more than the ledger itself would book
 *   need         = the ask target of an admission: arith's rule for the card
 *                  (or host RAM's) with the terms below
 *   target terms = the reserve it keeps (the operator's base) and a context
 *                  floor when the session has none on that card yet
 */
#include "arith/cross_reserve.h"
#include "arith/ram_cache.h"
#include "base/bytes.h"
#include "base/clock.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

void coord_target_terms(comem_coord_srv *s, uint64_t session, int dev, int64_t *reserve, int64_t *floor_add)
{
    /* The reserve kept here is the operator's base: the free figure this target is compared with is
       device-wide and already counts every worker. The published reserve is what a host whose own
       reading is process-local (WDDM) must add for what it cannot see; adding it here as well would
       book every worker twice (comfy-env's double-booking, on WDDM; found by comem simulate, F12). */
    const ledger_device *ld = &s->ledger.devices[dev];
    *reserve = ld->reserve_base >= 0 ? ld->reserve_base : coord_reserve_for(s, session, dev, NULL);
    const ledger_session *ss = comem_ledger_session(&s->ledger, session);
    *floor_add = ss && ss->floor[dev] == 0 ? COMEM_CONTEXT_FLOOR : 0; /* no context there yet: the load creates one */
    if (dev == s->ram_index)
        *floor_add = 0; /* a process's RAM is its RSS, already in the reading: no context to create */
}

int64_t coord_need(comem_coord_srv *s, uint64_t session, int dev, int64_t weights, int64_t working)
{
    int64_t reserve, floor_add;
    coord_target_terms(s, session, dev, &reserve, &floor_add);
    if (dev == s->ram_index)
        return comem_ram_admit_target(weights, working, reserve); /* host RAM: no card's slack (arith/ram_cache.h) */
    return comem_add(comem_admit_target(weights, working, reserve), floor_add);
}

int64_t coord_available(comem_coord_srv *s, int device, bool fresh)
{
    measurement *m = &s->meas[device];
    coord_book_reconcile(s); /* a grant cancelled in shared memory is room now, not at the turn's end */
    int64_t age = comem_now_ns() - m->taken_ns;
    bool changed = m->stale || m->changes != s->ledger.devices[device].changes;
    if (fresh || !m->valid || changed || age > (int64_t)s->cfg.reading_max_age_ms * 1000000)
        coord_measure(s, device);
    if (!m->valid)
        return 0; /* cannot read the card: admit nothing rather than guess */
    /* Bookings the area holds and the ledger does not yet are taken, too. */
    return comem_sub(coord_ledger_room(s, device), coord_fast_inflight(s, device));
}

int64_t coord_ledger_room(const comem_coord_srv *s, int device)
{
    const measurement *m = &s->meas[device];
    if (!m->valid)
        return 0;
    /* Grants the previous coordinator made are outstanding as much as this one's (reclaim.c). */
    return comem_sub(comem_sub(comem_sub(m->r.free, comem_ledger_granted(&s->ledger, device)), m->done_since),
                     coord_inherited(s, device));
}

int64_t coord_stock_room(const comem_coord_srv *s, int device)
{
    return comem_min(coord_ledger_room(s, device),
                     comem_sub(s->ledger.devices[device].capacity, comem_ledger_attributed(&s->ledger, device)));
}
