/*
 * coord/asks.c - release asks: sending them, believing their receipts, and deadlines.
 *
 * An ask goes to the connection of the holder's session and waits for a
 * RECEIPT naming its id. The receipt's residency list is applied like a census
 * and its freed bytes go to whoever owns the ask (an admission or pressure
 * job, the idle sweep, the pin sweep). A holder that has not answered by the
 * deadline is treated as busy: its owner moves on without it.
 */
#include "base/bytes.h"
#include "base/log.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

uint64_t coord_ask(comem_coord_srv *s, uint64_t holder, uint8_t kind, int64_t bytes, const comem_wire_release *items,
                   uint16_t n, ask_owner owner, uint64_t job_id)
{
    const ledger_holder *h = comem_ledger_holder(&s->ledger, holder);
    conn *c = h ? coord_conn_of(s, h->session) : NULL;
    if (!c)
        return 0;
    uint64_t id;
    ask *a = comem_slab_alloc(&s->asks, &id);
    if (!a)
        return 0;
    *a = (ask){.session = h->session, .holder = holder, .kind = kind, .device = h->device, .bytes = bytes,
               .deadline_ns = comem_now_ns() + (int64_t)s->cfg.ask_deadline_ms * 1000000, .owner = owner,
               .job = job_id};
    comem_msg m = {.type = COMEM_MSG_ASK, .request_id = 0};
    comem_msg_ask *w = &m.u.ask;
    w->ask_id = id;
    w->holder_id = holder;
    w->kind = kind;
    w->device = (uint16_t)h->device;
    w->bytes = bytes;
    w->deadline_ms = (uint32_t)s->cfg.ask_deadline_ms;
    w->n = n;
    for (uint16_t i = 0; i < n; i++)
        w->items[i] = items[i];
    coord_send(s, c, &m);
    comem_debug("asked holder '%s' for %lld bytes (ask %llx)", h->name, (long long)bytes, (unsigned long long)id);
    return id;
}

/* Hands an ask's outcome to its owner and forgets the ask. */
static void settle(comem_coord_srv *s, uint64_t id, ask *a, bool busy, int64_t freed)
{
    ask copy = *a;
    comem_slab_free(&s->asks, id);
    switch (copy.owner) {
    case OWNER_JOB:
        coord_job_ask_done(s, copy.job, copy.holder, busy, freed);
        break;
    case OWNER_IDLE:
        coord_idle_ask_done(s, copy.holder);
        break;
    case OWNER_PINS:
        break; /* the holder reports its unpinning itself (PIN_RELEASE) */
    }
    if (freed > 0 && copy.kind != COMEM_ASK_PINS)
        coord_publish_reserve(s, copy.device, true); /* a receipt is the evidence a shrink needs */
}

void coord_receipt(comem_coord_srv *s, conn *c, const comem_msg_receipt *r)
{
    ask *a = comem_slab_get(&s->asks, r->ask_id);
    if (!a || a->session != c->session) {
        comem_debug("receipt for an unknown or settled ask %llx from pid %d", (unsigned long long)r->ask_id,
                    (int)c->pid);
        return; /* late (past its deadline) or not this session's: nothing to settle */
    }
    coord_touched(s, a->device); /* whatever it freed, the card shows it now */
    if (r->n > 0) {
        int rc = comem_ledger_census(&s->ledger, c->session, a->holder, 0, 0, 0, 0, r->items, r->n, comem_now_ns(), NULL);
        if (rc != COMEM_OK)
            comem_warn("receipt residency from pid %d refused: %s", (int)c->pid, comem_status_str(rc));
    }
    settle(s, r->ask_id, a, r->outcome == COMEM_RECEIPT_BUSY, r->outcome == COMEM_RECEIPT_DONE ? r->freed : 0);
}

void coord_asks_tick(comem_coord_srv *s, int64_t now_ns)
{
    for (size_t i = 0; i < comem_slab_slots(&s->asks); i++) {
        uint64_t id;
        ask *a = comem_slab_at(&s->asks, i, &id);
        if (a && now_ns >= a->deadline_ns) {
            const ledger_holder *h = comem_ledger_holder(&s->ledger, a->holder);
            comem_info("holder '%s' did not answer its ask in time; counted as busy", h ? h->name : "?");
            settle(s, id, a, true, 0);
        }
    }
}

void coord_asks_session_ended(comem_coord_srv *s, uint64_t session)
{
    for (size_t i = 0; i < comem_slab_slots(&s->asks); i++) {
        uint64_t id;
        ask *a = comem_slab_at(&s->asks, i, &id);
        if (a && a->session == session)
            settle(s, id, a, true, 0); /* its memory comes back with the process; re-measuring sees it */
    }
}
