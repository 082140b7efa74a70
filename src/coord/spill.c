/*
 * coord/spill.c - overcommit on a WDDM card, as an event.
 *
 * Under WDDM a card does not refuse an allocation when it is full: VidMm pages
 * someone's memory out to system RAM, and everyone slows down (user-needs F4).
 * A reading whose used bytes exceed the card's memory says so (its
 * overcommit). The start of an overcommit is an event: counted, logged with
 * the process that pushed the card past its memory (the one whose use grew
 * most since the reading before, else the largest), kept for status; its end
 * is logged with how long it lasted and how far it went.
 */
#include <stdio.h>
#include <string.h>

#include "base/bytes.h"
#include "base/log.h"
#include "base/size.h"
#include "coord/coord_internal.h"

/* The process that pushed the card over: the largest growth since `before`, else the largest use. */
static const comem_proc_use *culprit(const comem_device_reading *before, const comem_device_reading *now,
                                     int64_t *grew)
{
    const comem_proc_use *best = NULL;
    int64_t best_growth = 0;
    *grew = 0;
    for (size_t i = 0; now->procs_known && i < now->n_procs; i++) {
        int64_t was = 0;
        for (size_t j = 0; before && before->procs_known && j < before->n_procs; j++)
            if (before->procs[j].pid == now->procs[i].pid)
                was = before->procs[j].bytes;
        int64_t g = comem_sub(now->procs[i].bytes, was);
        if (!best || g > best_growth || (g == best_growth && now->procs[i].bytes > best->bytes)) {
            best = &now->procs[i];
            best_growth = g;
        }
    }
    *grew = comem_clamp0(best_growth);
    return best;
}

void coord_spill_note(comem_coord_srv *s, int device, const comem_device_reading *before,
                      const comem_device_reading *now)
{
    coord_spill *sp = &s->spill[device];
    int64_t over = comem_clamp0(now->overcommit);
    char b[32], c[32];
    if (over > 0 && sp->current == 0) {
        int64_t grew;
        const comem_proc_use *p = culprit(before, now, &grew);
        sp->events++;
        s->counters.spill_events++;
        sp->pid = p ? p->pid : 0;
        sp->name[0] = 0;
        for (size_t i = 0; p && i < comem_slab_slots(&s->ledger.sessions); i++) {
            const ledger_session *ss = comem_slab_at(&s->ledger.sessions, i, NULL);
            if (ss && ss->pid == p->pid)
                snprintf(sp->name, sizeof sp->name, "%s", ss->name);
        }
        sp->pushed_by = grew;
        sp->peak = over;
        sp->since_ns = now->timestamp_ns;
        comem_warn("device %d is overcommitted by %s: the driver pages memory out to system RAM; pushed past its "
                   "memory by %s%s%s (pid %d, +%s since the last reading)",
                   device, comem_format_bytes(over, b, sizeof b), sp->name[0] ? "'" : "",
                   sp->name[0] ? sp->name : "a process not in the ledger", sp->name[0] ? "'" : "", (int)sp->pid,
                   comem_format_bytes(grew, c, sizeof c));
    } else if (over == 0 && sp->current > 0) {
        comem_info("device %d is no longer overcommitted (it went %s past its memory for %.1f s)", device,
                   comem_format_bytes(sp->peak, b, sizeof b), (double)(now->timestamp_ns - sp->since_ns) / 1e9);
        sp->last_ns = now->timestamp_ns;
    } else if (over > sp->peak) {
        sp->peak = over;
    }
    sp->current = over;
}
