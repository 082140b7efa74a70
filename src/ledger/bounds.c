/* ledger/bounds.c - what one process may register: its own bound, and a fair share of the ledger's. */
#include "ledger/bounds.h"

#include <stdio.h>
#include <string.h>

#include "base/bytes.h"
#include "comem/common.h"

static const uint32_t process_bound[LEDGER_KINDS] = {COMEM_LEDGER_PROCESS_HOLDERS, COMEM_LEDGER_PROCESS_ENTRIES,
                                                     COMEM_LEDGER_PROCESS_GRANTS};
static const uint32_t sure[LEDGER_KINDS] = {COMEM_LEDGER_SURE_HOLDERS, COMEM_LEDGER_SURE_ENTRIES,
                                            COMEM_LEDGER_SURE_GRANTS};
static const uint32_t global_bound[LEDGER_KINDS] = {COMEM_LEDGER_MAX_HOLDERS, COMEM_LEDGER_MAX_ENTRIES,
                                                    COMEM_LEDGER_MAX_GRANTS};
static const char *const kind_names[LEDGER_KINDS] = {"holders", "entries", "grants"};

/* Every session may be a process of its own: the sure shares must fit in the global bounds. */
_Static_assert(COMEM_LEDGER_SURE_HOLDERS * COMEM_LEDGER_MAX_SESSIONS < COMEM_LEDGER_MAX_HOLDERS, "holders");
_Static_assert(COMEM_LEDGER_SURE_ENTRIES * COMEM_LEDGER_MAX_SESSIONS < COMEM_LEDGER_MAX_ENTRIES, "entries");
_Static_assert(COMEM_LEDGER_SURE_GRANTS * COMEM_LEDGER_MAX_SESSIONS < COMEM_LEDGER_MAX_GRANTS, "grants");

/*
 * What is shared first come: the global bound less a sure share for every
 * session there may be. Σ held = Σ min(held, sure) + shared_used <=
 * sure * MAX_SESSIONS + shared(kind) = the global bound, so the global bound
 * itself can never be what refuses.
 */
static uint32_t shared(ledger_kind k) { return global_bound[k] - sure[k] * COMEM_LEDGER_MAX_SESSIONS; }

static uint32_t beyond_sure(uint32_t held, ledger_kind k) { return held > sure[k] ? held - sure[k] : 0; }

int ledger_process_join(comem_ledger *l, int32_t pid, const char *name, uint64_t *id)
{
    for (size_t i = 0; pid > 0 && i < comem_slab_slots(&l->processes); i++) {
        ledger_process *p = comem_slab_at(&l->processes, i, id);
        if (p && p->pid == pid) {
            p->sessions++;
            return COMEM_OK;
        }
    }
    ledger_process *p = comem_slab_alloc(&l->processes, id);
    if (!p)
        return COMEM_ENOMEM;
    p->pid = pid;
    p->sessions = 1;
    snprintf(p->name, sizeof p->name, "%s", name ? name : "");
    return COMEM_OK;
}

void ledger_process_leave(comem_ledger *l, uint64_t id)
{
    ledger_process *p = comem_slab_get(&l->processes, id);
    if (p && --p->sessions == 0)
        comem_slab_free(&l->processes, id); /* its sessions gave back all they held first */
}

int ledger_bound_check(const comem_ledger *l, uint64_t id, ledger_kind k)
{
    const ledger_process *p = comem_slab_get(&l->processes, id);
    if (!p || p->held[k] >= process_bound[k])
        return COMEM_ERANGE;
    if (p->held[k] >= sure[k] && l->shared_used[k] >= shared(k))
        return COMEM_ERANGE;
    return COMEM_OK;
}

void ledger_bound_take(comem_ledger *l, uint64_t id, ledger_kind k)
{
    ledger_process *p = comem_slab_get(&l->processes, id);
    if (!p)
        return;
    if (p->held[k] >= sure[k])
        l->shared_used[k]++;
    p->held[k]++;
}

void ledger_bound_give(comem_ledger *l, uint64_t id, ledger_kind k, uint32_t n)
{
    ledger_process *p = comem_slab_get(&l->processes, id);
    if (!p)
        return;
    n = n < p->held[k] ? n : p->held[k];
    l->shared_used[k] -= beyond_sure(p->held[k], k) - beyond_sure(p->held[k] - n, k);
    p->held[k] -= n;
}

const ledger_process *comem_ledger_process_of(const comem_ledger *l, uint64_t session)
{
    const ledger_session *s = comem_slab_get(&l->sessions, session);
    return s ? comem_slab_get(&l->processes, s->process) : NULL;
}

int64_t comem_ledger_process_held(const comem_ledger *l, uint64_t session, int device, int *n_sessions)
{
    const ledger_process *p = comem_ledger_process_of(l, session);
    *n_sessions = p ? (int)p->sessions : 1;
    if (!p || device < 0 || device >= l->n_devices)
        return 0;
    return comem_add(p->resident[device], p->granted[device]);
}

size_t comem_ledger_bound_why(const comem_ledger *l, uint64_t session, ledger_kind k, char *why, size_t len)
{
    const ledger_session *s = comem_slab_get(&l->sessions, session);
    const ledger_process *p = s ? comem_slab_get(&l->processes, s->process) : NULL;
    if (!p || ledger_bound_check(l, s->process, k) == COMEM_OK)
        return 0;
    int n;
    if (p->held[k] >= process_bound[k]) {
        n = snprintf(why, len, "too many %s: this process holds %u over its %u session%s (at most %u a process)",
                     kind_names[k], p->held[k], p->sessions, p->sessions == 1 ? "" : "s", process_bound[k]);
    } else {
        const ledger_process *most = p; /* whose: the process holding the most (a pass over the processes) */
        for (size_t i = 0; i < comem_slab_slots(&l->processes); i++) {
            const ledger_process *x = comem_slab_at(&l->processes, i, NULL);
            if (x && x->held[k] > most->held[k])
                most = x;
        }
        n = snprintf(why, len, "the shared %s are taken (%u; most: '%s' pid %d, %u); every process is sure of %u, this one has %u",
                     kind_names[k], shared(k), most->name, (int)most->pid, most->held[k], sure[k], p->held[k]);
    }
    return n > 0 ? (size_t)n : 0;
}

int ledger_bound_verify(const comem_ledger *l, char *why, size_t len)
{
    uint32_t shared_used[LEDGER_KINDS] = {0};
    for (size_t i = 0; i < comem_slab_slots(&l->processes); i++) {
        uint64_t pid;
        const ledger_process *p = comem_slab_at(&l->processes, i, &pid);
        if (!p)
            continue;
        uint32_t held[LEDGER_KINDS] = {0}, sessions = 0;
        int64_t resident[COMEM_MAX_DEVICES] = {0}, granted[COMEM_MAX_DEVICES] = {0};
        for (size_t j = 0; j < comem_slab_slots(&l->sessions); j++) {
            const ledger_session *s = comem_slab_at(&l->sessions, j, NULL);
            if (!s || s->process != pid)
                continue;
            sessions++;
            held[LEDGER_HOLDERS] += s->n_holders;
            held[LEDGER_ENTRIES] += s->n_entries;
            held[LEDGER_GRANTS] += s->n_grants;
            for (int d = 0; d < l->n_devices; d++) {
                resident[d] += s->resident[d];
                granted[d] += s->granted[d];
            }
        }
        bool ok = sessions == p->sessions;
        for (int k = 0; k < LEDGER_KINDS; k++) {
            ok = ok && held[k] == p->held[k] && held[k] <= process_bound[k];
            shared_used[k] += beyond_sure(held[k], (ledger_kind)k);
        }
        for (int d = 0; d < l->n_devices; d++)
            ok = ok && resident[d] == p->resident[d] && granted[d] == p->granted[d];
        if (!ok) {
            snprintf(why, len, "process %d ('%s'): its counts or sums disagree with its %u session(s)", (int)p->pid,
                     p->name, sessions);
            return COMEM_ERANGE;
        }
    }
    for (int k = 0; k < LEDGER_KINDS; k++) {
        if (shared_used[k] != l->shared_used[k] || shared_used[k] > shared((ledger_kind)k)) {
            snprintf(why, len, "shared %s: %u used, %u counted, %u in all", kind_names[k], shared_used[k],
                     l->shared_used[k], shared((ledger_kind)k));
            return COMEM_ERANGE;
        }
    }
    return COMEM_OK;
}
