/*
 * coord/receipt_check.c - a receipt held up against the card.
 *
 * A holder's receipt says how many bytes it freed; the coordinator counts at
 * most what came off it (asks.c: in the ledger, and on the card where it reads
 * each process). This file checks the claim itself: where the card reports each process's use
 * (NVML and the simulated card on a device-wide reading), the coordinator
 * also looks: the process's use in the reading the ask was planned on, and in
 * the first reading after the receipt came (the asking admission takes one). A receipt whose bytes the card never showed leaving (less
 * than half of them, with the process's use at the ask at least that large)
 * is contradicted: counted on the holder (`receipts_contradicted` in status)
 * and said once in the log. It is a flag, not a correction: the process may
 * have allocated something else meanwhile, and the ledger's figures stay as
 * the receipt and the next census make them.
 */
#include "base/bytes.h"
#include "base/clock.h"
#include "base/log.h"
#include "coord/coord_internal.h"

#define CHECK_MIN_BYTES (64LL << 20) /* smaller receipts are within the card's own noise */

/* Process pid's use of device in the last reading; -1 when the card does not say. */
static int64_t card_use(const comem_coord_srv *s, int device, int32_t pid)
{
    const measurement *m = &s->meas[device];
    if (!m->valid || !m->r.procs_known || m->r.scope != COMEM_SCOPE_DEVICE_WIDE)
        return -1;
    for (size_t i = 0; i < m->r.n_procs; i++)
        if (m->r.procs[i].pid == pid)
            return m->r.procs[i].bytes;
    return 0;
}

int64_t coord_card_use_at_ask(comem_coord_srv *s, int device, int32_t pid)
{
    const measurement *m = &s->meas[device];
    bool current = m->valid && !m->stale && m->changes == s->ledger.devices[device].changes &&
                   comem_now_ns() - m->taken_ns <= (int64_t)s->cfg.reading_max_age_ms * 1000000;
    if (!current && coord_measure(s, device) != COMEM_OK) /* the plan read it just now, as a rule */
        return -1;
    return card_use(s, device, pid);
}

void coord_receipt_check(comem_coord_srv *s, const ask *a, const ledger_holder *h, int32_t pid, int64_t freed)
{
    if (!h || freed < CHECK_MIN_BYTES || a->card_before < freed)
        return; /* small, or bytes the card never showed as this process's (registered elsewhere) */
    /* Looked at with the next reading of the card (the admission that asked reads it again before it
       decides): no reading of its own on the release path. The oldest waiting check gives way. */
    coord_receipt_checks *q = &s->receipt_checks;
    q->item[q->next % COORD_RECEIPT_CHECKS] = (coord_receipt_pending){
        .holder = a->holder, .pid = pid, .device = a->device, .before = a->card_before, .freed = freed};
    q->next++;
}

void coord_receipt_checks_run(comem_coord_srv *s, int device)
{
    coord_receipt_checks *q = &s->receipt_checks;
    for (int i = 0; i < COORD_RECEIPT_CHECKS; i++) {
        coord_receipt_pending *p = &q->item[i];
        if (!p->holder || p->device != device)
            continue;
        coord_receipt_pending c = *p;
        *p = (coord_receipt_pending){0};
        ledger_holder *h = comem_ledger_holder(&s->ledger, c.holder);
        int64_t after = card_use(s, device, c.pid);
        if (!h || after < 0 || comem_sub(c.before, after) >= c.freed / 2)
            continue;
        if (h->receipts_contradicted++ == 0)
            comem_warn("holder '%s' (pid %d) said it freed %lld bytes; the card shows its process's use go from "
                       "%lld to %lld bytes (its later receipts are checked the same way: receipts_contradicted)",
                       h->name, (int)c.pid, (long long)c.freed, (long long)c.before, (long long)after);
    }
}
