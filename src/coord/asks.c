/*
 * coord/asks.c - release asks: sending them, believing their receipts, and deadlines.
 *
 * An ask goes to the connection of the holder's session and waits for a
 * RECEIPT naming its id. The receipt's residency list is applied like a census
 * and its outcome and freed bytes go to whoever owns the ask, through the
 * callback the owner gave (an admission or pressure job, the idle sweep, the
 * card's own pressure, a RELEASE request; pin asks have none: the holder
 * reports its unpinning itself). This file knows no owner.
 *
 * What a receipt frees is what came off, never more than its holder says (issue
 * 40 item 10: a holder that freed nothing and answered 1 TiB was counted as all
 * it held, at every ask): at most the drop in the holder's registered bytes
 * between the ask and the receipt, as the ledger holds them once the receipt's
 * residency (and whatever the process reported before it) is applied; where the
 * card reads each process's use, at most the drop in that process's use, read
 * when the receipt comes; for a RELEASE, at most what came off the entry named.
 * The counters, the owners (an admission's freed figure, a RELEASE's reply) and
 * everything built on them see only that figure; the claim is kept in the log
 * and in receipts_over. A drop is net: bytes the holder registered meanwhile
 * count against it, so a receipt is believed for less, never more.
 *
 * A holder that has not answered by the deadline is treated as busy: its owner
 * moves on without it. Its process answers asks on one callback thread, so every holder
 * of that process is then left out of plans (unanswered_until_ns at its most)
 * until the process sends a receipt again, late ones included: however long it
 * stays stopped or stuck, no later request waits on it.
 */
#include <stdint.h>

#include "base/bytes.h"
#include "base/hops.h"
#include "base/log.h"
#include "base/size.h"
#include "base/spin.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

/* The most an ask may wait for its receipt, however much it asks to move. */
#define COORD_ASK_DEADLINE_MAX_MS 30000

/*
 * What the ledger says holder h (id holder) holds that an ask of kind can free: its resident bytes on
 * its device plus what it reports outside its entries, or for a pin ask what it reported pinned or,
 * where it books its pins with comem_pin_acquire and reports none, what its process booked (a holder
 * that drops a pin it booked gave those bytes back). Read when asked and again at the receipt: the
 * drop between the two is what came off. 0 for a holder that is gone.
 */
static int64_t holder_held(comem_coord_srv *s, const ledger_holder *h, uint64_t holder, uint8_t kind)
{
    if (!h)
        return 0;
    if (kind == COMEM_ASK_PINS) {
        const ledger_session *ss = comem_ledger_session(&s->ledger, h->session);
        return comem_max(h->pinned, ss ? ss->pinned : 0);
    }
    return comem_add(comem_ledger_session_resident(&s->ledger, h->session, holder, h->device),
                     comem_clamp0(h->overhead));
}

/* A holder asked to move bytes is given the time to move them: the base deadline
 * plus a millisecond per MiB (about 1 GiB/s: ComfyUI offloading a model to fresh,
 * unpinned host memory first touches every page, then copies), capped. */
static int ask_deadline_ms(comem_coord_srv *s, const ledger_holder *h, uint64_t holder, int64_t bytes)
{
    int64_t movable = comem_ledger_session_resident(&s->ledger, h->session, holder, h->device);
    int64_t moving = comem_clamp0(bytes < movable ? bytes : movable);
    int64_t ms = comem_add(s->cfg.ask_deadline_ms, moving / COMEM_MIB);
    return (int)(ms < COORD_ASK_DEADLINE_MAX_MS ? ms : COORD_ASK_DEADLINE_MAX_MS);
}

uint64_t coord_ask(comem_coord_srv *s, uint64_t holder, uint8_t kind, int64_t bytes, const comem_wire_release *items,
                   uint16_t n, coord_ask_done done, uint64_t owner)
{
    const ledger_holder *h = comem_ledger_holder(&s->ledger, holder);
    conn *c = h ? coord_conn_of(s, h->session) : NULL;
    if (!c)
        return 0;
    if (s->asks.used >= COORD_MAX_ASKS) {
        comem_warn("%d asks are waiting for receipts; holder '%s' is not asked", COORD_MAX_ASKS, h->name);
        return 0;
    }
    int32_t pid = coord_holder_process(h, c);
    int64_t card_before = kind == COMEM_ASK_PINS ? -1 : coord_card_use_at_ask(s, h->device, pid);
    uint64_t id;
    ask *a = comem_slab_alloc(&s->asks, &id);
    if (!a)
        return 0;
    int deadline_ms = ask_deadline_ms(s, h, holder, bytes);
    *a = (ask){.session = h->session, .holder = holder, .kind = kind, .device = h->device, .bytes = bytes,
               .deadline_ns = comem_now_ns() + (int64_t)deadline_ms * 1000000, .done = done,
               .owner = owner, .report_seq = h->census_seq, .card_before = card_before, .pid = pid,
               .held = holder_held(s, h, holder, kind)};
    comem_msg m = {.type = COMEM_MSG_ASK, .request_id = 0};
    comem_msg_ask *w = &m.u.ask;
    w->ask_id = id;
    w->holder_id = holder;
    w->kind = kind;
    w->device = coord_device_out(c, h->device); /* as the holder's process names it */
    w->bytes = bytes;
    w->deadline_ms = (uint32_t)deadline_ms;
    w->n = n;
    for (uint16_t i = 0; i < n; i++)
        w->items[i] = items[i];
    comem_hop(COMEM_HOP_ASK_SENT);
    coord_send(s, c, &m);
    /* A holder that answers at once does so within microseconds: look for its receipt before sleeping. */
    s->spin_until_ns = comem_add(comem_now_ns(), comem_spin_ns());
    s->counters.asks++;
    s->counters.bytes_asked = comem_add(s->counters.bytes_asked, comem_clamp0(bytes));
    if (h->device >= 0 && h->device < COMEM_MAX_DEVICES) {
        s->counters.dev_asks[h->device]++;
        s->counters.dev_bytes_asked[h->device] = comem_add(s->counters.dev_bytes_asked[h->device], comem_clamp0(bytes));
    }
    if (kind == COMEM_ASK_IDLE)
        s->counters.idle_releases++;
    comem_debug("asked holder '%s' for %lld bytes (ask %llx)", h->name, (long long)bytes, (unsigned long long)id);
    return id;
}

size_t coord_ask_plan(comem_coord_srv *s, coord_planned *plan, size_t n, coord_ask_done done, uint64_t owner,
                      uint64_t *asked, int64_t *bytes)
{
    size_t sent = 0;
    int64_t sum = 0;
    for (size_t a = 0; a < n; a++) {
        if (!plan[a].holder)
            continue; /* listed already, in the ask of an earlier row's holder */
        uint64_t holder = plan[a].holder;
        comem_wire_release items[COMEM_WIRE_MAX_ITEMS];
        uint16_t k = 0;
        int64_t total = 0;
        for (size_t b = a; b < n; b++) {
            if (plan[b].holder != holder)
                continue;
            if (plan[b].entry) /* a generic holder's row names no entry: the ask is for bytes */
                items[k++] = (comem_wire_release){plan[b].entry, plan[b].bytes};
            total = comem_add(total, plan[b].bytes);
            plan[b].holder = 0;
        }
        if (coord_ask(s, holder, COMEM_ASK_RELEASE, total, items, k, done, owner)) {
            if (asked)
                asked[sent] = holder;
            sent++;
            sum = comem_add(sum, total);
        }
    }
    if (bytes)
        *bytes = sum;
    return sent;
}

/*
 * A RELEASE's ask settled: answers the request, if its requester is still connected, with what came
 * off the entry it named (a holder that freed other entries too freed them for nobody's request), or
 * for gone, what the entry held: it came back with the process.
 */
static void reply_release(comem_coord_srv *s, const ask *a, uint8_t outcome, int64_t freed)
{
    conn *rc = coord_conn_of(s, a->req_session);
    if (!rc)
        return; /* the requester left: nobody waits */
    rc->releases--;
    const ledger_entry *e = comem_ledger_entry(&s->ledger, a->entry);
    int64_t resident = e && outcome != COMEM_RECEIPT_GONE ? e->resident : 0;
    if (outcome != COMEM_RECEIPT_GONE)
        freed = comem_min(freed, comem_sub(a->entry_before, resident));
    comem_msg m = {.type = COMEM_MSG_RELEASE_REPLY, .request_id = a->req_id};
    m.u.release_reply.outcome = outcome;
    m.u.release_reply.freed = comem_clamp0(freed);
    m.u.release_reply.resident = resident;
    coord_send(s, rc, &m);
}

/* Hands an ask's outcome to its owner and forgets the ask. */
static void settle(comem_coord_srv *s, uint64_t id, ask *a, uint8_t outcome, int64_t freed)
{
    ask copy = *a;
    comem_slab_free(&s->asks, id);
    if (outcome == COMEM_RECEIPT_DONE) {
        s->counters.bytes_freed = comem_add(s->counters.bytes_freed, comem_clamp0(freed));
        if (copy.device >= 0 && copy.device < COMEM_MAX_DEVICES)
            s->counters.dev_bytes_freed[copy.device] =
                comem_add(s->counters.dev_bytes_freed[copy.device], comem_clamp0(freed));
    }
    else if (outcome != COMEM_RECEIPT_GONE) /* gone: the bytes came back with the process, not a receipt */
        s->counters.asks_busy++;
    if (copy.done)
        copy.done(s, &copy, outcome, freed);
    if (freed > 0 && copy.kind != COMEM_ASK_PINS)
        coord_publish_reserve(s, copy.device, true); /* a receipt is the evidence a shrink needs */
}

/* A holder of c's process let an ask pass its deadline: none of its holders is asked until it answers. */
static void mark_unanswered(comem_coord_srv *s, conn *c)
{
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.holders); i++) {
        ledger_holder *h = comem_slab_at(&s->ledger.holders, i, NULL);
        if (h && h->session == c->session)
            h->unanswered_until_ns = INT64_MAX;
    }
    c->unanswered = true;
}

/* c's process sent a receipt: it answers again, and its holders may be asked. */
static void mark_answering(comem_coord_srv *s, conn *c)
{
    if (!c->unanswered)
        return;
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.holders); i++) {
        ledger_holder *h = comem_slab_at(&s->ledger.holders, i, NULL);
        if (h && h->session == c->session)
            h->unanswered_until_ns = 0;
    }
    c->unanswered = false;
    const ledger_session *ss = comem_ledger_session(&s->ledger, c->session);
    comem_info("'%s' (pid %d) answers release asks again; its holders may be asked", ss ? ss->name : "?", (int)c->pid);
}

/*
 * At most what the card shows leave process pid for ask a's receipt that the ledger lets count freed
 * bytes: the drop in the process's use from the reading the ask was planned on to one taken now.
 * freed itself where the card does not read each process (NVML under WDDM, host RAM's RSS is no
 * card's figure), cannot be read now, or never showed the process holding those bytes (registered
 * for memory another process holds).
 */
static int64_t card_bound(comem_coord_srv *s, const ask *a, int32_t pid, int64_t freed)
{
    if (freed <= 0 || a->kind == COMEM_ASK_PINS || a->device == s->ram_index || a->card_before < freed)
        return freed;
    int64_t after = coord_card_use_at_ask(s, a->device, pid); /* the receipt made the last reading stale */
    return after < 0 ? freed : comem_min(freed, comem_clamp0(comem_sub(a->card_before, after)));
}

void coord_receipt(comem_coord_srv *s, conn *c, const comem_msg_receipt *r)
{
    comem_hop(COMEM_HOP_RECEIPT_READ);
    mark_answering(s, c); /* a late receipt too: the process runs its callbacks again */
    ask *a = comem_slab_get(&s->asks, r->ask_id);
    if (!a || a->session != c->session) {
        comem_debug("receipt for an unknown or settled ask %llx from pid %d", (unsigned long long)r->ask_id,
                    (int)c->pid);
        return; /* late (past its deadline) or not this session's: nothing to settle */
    }
    coord_card_changed(s, a->device); /* whatever it freed, the card shows it now */
    ledger_holder *h = comem_ledger_holder(&s->ledger, a->holder);
    int64_t claimed = r->outcome == COMEM_RECEIPT_DONE ? comem_clamp0(r->freed) : 0;
    int64_t freed = comem_min(claimed, a->held); /* a holder cannot give back more than it held */
    if (r->n > 0) {
        ledger_residency items[COMEM_WIRE_MAX_ITEMS];
        coord_residency(r->items, r->n, items);
        int rc = comem_ledger_census(&s->ledger, c->session, a->holder, 0, -1, -1, items, r->n, comem_now_ns(), NULL);
        if (rc != COMEM_OK)
            comem_warn("receipt residency from pid %d refused: %s", (int)c->pid, comem_status_str(rc));
        else if (h && !(freed > 0 && a->kind != COMEM_ASK_PINS))
            coord_publish_reserve(s, h->device, false); /* as its census would have (settle publishes the rest) */
    }
    /* A holder with no entries that has not reported since the ask says what it holds by this receipt
       alone: what it says came off comes off its figure (below, as counted). Any other holder's
       figures are the ledger's now, its residency and reports applied: their drop is what came off. */
    int64_t generic_bytes;
    bool generic = h && freed > 0 && a->kind == COMEM_ASK_RELEASE && h->census_seq == a->report_seq &&
                   coord_generic_holder(&s->ledger, a->holder, h, &generic_bytes);
    if (!generic)
        freed = comem_min(freed, comem_clamp0(comem_sub(a->held, holder_held(s, h, a->holder, a->kind))));
    if (claimed > freed && h && h->receipts_over++ == 0)
        comem_warn("holder '%s' (pid %d) said it freed %lld bytes, more than the %lld that came off it in the "
                   "ledger (it held %lld); counted as what came off (its later receipts are bounded the same way)",
                   h->name, (int)c->pid, (long long)claimed, (long long)freed, (long long)a->held);
    int64_t ledger_freed = freed;
    freed = card_bound(s, a, a->pid, freed);
    if (freed < ledger_freed)
        comem_info("holder '%s' (pid %d) freed %lld bytes in the ledger; the card shows its process's use drop by "
                   "%lld: counted as that",
                   h ? h->name : "?", (int)a->pid, (long long)ledger_freed, (long long)freed);
    if (generic)
        h->overhead = comem_clamp0(comem_sub(generic_bytes, freed)); /* no report since the ask: the receipt */
    if (a->kind != COMEM_ASK_PINS) /* the claim, held against the next reading: receipts_contradicted */
        coord_receipt_check(s, a, h, a->pid, comem_min(claimed, a->held));
    settle(s, r->ask_id, a, r->outcome, freed);
}

void coord_asks_tick(comem_coord_srv *s, int64_t now_ns)
{
    for (size_t i = 0; i < comem_slab_slots(&s->asks); i++) {
        uint64_t id;
        ask *a = comem_slab_at(&s->asks, i, &id);
        if (a && now_ns >= a->deadline_ns) {
            const ledger_holder *h = comem_ledger_holder(&s->ledger, a->holder);
            conn *c = coord_conn_of(s, a->session);
            comem_info("holder '%s' (pid %d) did not answer its ask in time; counted as busy, and its process is "
                       "not asked again until it answers",
                       h ? h->name : "?", c ? (int)c->pid : 0);
            if (c)
                mark_unanswered(s, c);
            settle(s, id, a, COMEM_RECEIPT_BUSY, 0);
        }
    }
}

void coord_asks_session_ended(comem_coord_srv *s, uint64_t session)
{
    for (size_t i = 0; i < comem_slab_slots(&s->asks); i++) {
        uint64_t id;
        ask *a = comem_slab_at(&s->asks, i, &id);
        if (!a || a->session != session)
            continue;
        /* Its memory comes back with the process; re-measuring sees it. A RELEASE is told
           the entry's bytes came back (ComfyUI's stand-in then counts them as freed). */
        if (a->done == reply_release)
            settle(s, id, a, COMEM_RECEIPT_GONE, a->entry_before);
        else
            settle(s, id, a, COMEM_RECEIPT_BUSY, 0);
    }
}

/* Answers a RELEASE at once, without asking anyone. */
static void release_now(comem_coord_srv *s, conn *c, uint32_t rid, uint8_t outcome, int64_t freed, int64_t resident)
{
    comem_msg m = {.type = COMEM_MSG_RELEASE_REPLY, .request_id = rid};
    m.u.release_reply.outcome = outcome;
    m.u.release_reply.freed = freed;
    m.u.release_reply.resident = resident;
    coord_send(s, c, &m);
}

void coord_release(comem_coord_srv *s, conn *c, uint32_t rid, const comem_msg_release *r)
{
    const ledger_entry *e = comem_ledger_entry(&s->ledger, r->entry_id);
    if (!e) {
        release_now(s, c, rid, COMEM_RECEIPT_GONE, 0, 0); /* removed, or its process ended */
        return;
    }
    if (e->session == c->session) {
        coord_reply(s, c, rid, COMEM_EINVAL, "that entry is this process's own: release it directly");
        return;
    }
    const ledger_holder *h = comem_ledger_holder(&s->ledger, e->holder);
    if (!h || !(h->flags & COMEM_CAP_RELEASE)) {
        coord_reply(s, c, rid, COMEM_ENOTSUP, "the entry's holder does not answer release asks");
        return;
    }
    if (!coord_may_ask(h, comem_now_ns())) {
        /* never interrupt a compute thread; nor wait again on a holder that let its last ask pass */
        release_now(s, c, rid, COMEM_RECEIPT_BUSY, 0, e->resident);
        return;
    }
    int64_t bytes = r->bytes < 0 || r->bytes > e->resident ? e->resident : r->bytes;
    if (bytes == 0) {
        release_now(s, c, rid, COMEM_RECEIPT_DONE, 0, e->resident);
        return;
    }
    if (c->releases >= COORD_SESSION_RELEASES) {
        coord_reply(s, c, rid, COMEM_EBUSY,
                    "too many releases in flight (" COORD_STR(COORD_SESSION_RELEASES) " a process); wait for answers");
        return;
    }
    comem_wire_release item = {r->entry_id, bytes};
    uint64_t id = coord_ask(s, e->holder, COMEM_ASK_RELEASE, bytes, &item, 1, reply_release, 0);
    ask *a = id ? comem_slab_get(&s->asks, id) : NULL;
    if (!a) {
        release_now(s, c, rid, COMEM_RECEIPT_BUSY, 0, e->resident); /* no connection to ask on right now */
        return;
    }
    a->req_session = c->session;
    a->req_id = rid;
    c->releases++;
    a->entry = r->entry_id;
    a->entry_before = e->resident;
    /* Answer within the requester's wait as well as the holder's deadline. */
    if (r->timeout_ms > 0) {
        int64_t by = comem_now_ns() + (int64_t)r->timeout_ms * 900000;
        if (by < a->deadline_ns)
            a->deadline_ns = by;
    }
    char b[32];
    comem_info("release: '%s' asks '%s' for %s of '%s'", comem_ledger_session(&s->ledger, c->session)->name,
               h->name, comem_format_bytes(bytes, b, sizeof b), e->name);
}
