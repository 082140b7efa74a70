/*
 * coord/pressure.c - the card's own pressure: bytes nobody asked for push a device below its reserve.
 *
 * Admissions keep the reserve free when they grant; what they cannot see
 * coming is memory that never asks: a foreign app growing (a browser, an LLM
 * server), an unregistered allocation inside a registered process, a
 * pager's standing residency under a blind (WDDM) budget. So after every
 * tick's measurement, a device whose true free is below the operator's
 * reserve gets one round of release asks for the difference, planned like an
 * admission's (coord/plan.c: ComfyUI's eviction order, busy holders skipped
 * unless they release while busy, as a pager does). Nobody is the requester;
 * holders that served the prompt the host runs now are left alone (cooling
 * them forces a reload), and nothing is planned while idle releases are out
 * (they are the gentler answer to a tight card, and may be enough).
 * A round's asks are settled (receipt, busy, deadline, or the holder's end)
 * before the next round is planned, so a foreign app that keeps growing is
 * answered once per tick at most, never by a flood.
 *
 * comem simulate's F4 (a browser grows while a pager runs, on a WDDM card
 * whose pager reads only its own budget) is the scenario that needed it.
 */
#include <string.h>

#include "base/bytes.h"
#include "base/log.h"
#include "base/size.h"
#include "comem/common.h"
#include "coord/coord_internal.h"
#include "coord/plan.h"

static void pressure_ask_done(comem_coord_srv *s, const ask *a, uint8_t outcome, int64_t freed);

void coord_pressure_tick(comem_coord_srv *s, int64_t now_ns)
{
    (void)now_ns;
    if (s->n_idle_asking > 0)
        return;
    const char *prompt = coord_current_prompt(&s->ledger);
    uint64_t spare[64]; /* the current prompt's holders */
    size_t n_spare = 0;
    for (size_t i = 0; prompt && i < comem_slab_slots(&s->ledger.holders) && n_spare < 64; i++) {
        uint64_t hid;
        const ledger_holder *h = comem_slab_at(&s->ledger.holders, i, &hid);
        if (h && !strcmp(h->last_prompt, prompt))
            spare[n_spare++] = hid;
    }
    for (int d = 0; d < s->ledger.n_devices; d++) {
        const measurement *m = &s->meas[d];
        if (!m->valid || s->pressure_out[d] > 0 || s->queue_head[d] != 0 || comem_ledger_granted(&s->ledger, d) > 0)
            continue; /* nothing read, a round still out, or an admission planning or loading on this device
                         (a grant being filled is counted both in the reading and as a grant) */
        int64_t keep = coord_base_reserve(s, d);
        int64_t avail = coord_available(s, d, false);
        if (avail >= keep)
            continue;
        coord_planned out[COMEM_WIRE_MAX_ITEMS];
        coord_plan_in in = {.device = d, .need = (double)keep, .avail = (double)avail, .excluded = spare,
                            .n_excluded = n_spare};
        size_t n = coord_plan_release(&s->ledger, &in, out, sizeof out / sizeof out[0]);
        int64_t asked = 0;
        size_t holders = coord_ask_plan(s, out, n, pressure_ask_done, (uint64_t)d, NULL, &asked);
        s->pressure_out[d] += (int)holders;
        if (holders) {
            char a[32], b[32], c[32];
            comem_info("pressure: device %d has %s free, below the reserve %s (something outside the ledger grew); "
                       "asked %zu holder(s) for %s",
                       d, comem_format_bytes(avail, a, 32), comem_format_bytes(keep, b, 32), holders,
                       comem_format_bytes(asked, c, 32));
        }
    }
}

/* One of a device's pressure asks settled; the next round waits for the last. */
static void pressure_ask_done(comem_coord_srv *s, const ask *a, uint8_t outcome, int64_t freed)
{
    (void)outcome;
    (void)freed;
    int device = (int)a->owner;
    if (device >= 0 && device < COMEM_MAX_DEVICES && s->pressure_out[device] > 0)
        s->pressure_out[device]--;
}
