/* ledger/ledger.c - sessions, holders, entries, grants and pins, with their invariants. */
#include "ledger/ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/log.h"
#include "ledger/bounds.h"
#include "comem/common.h"

static void copy_name(char *dst, const char *src)
{
    snprintf(dst, COMEM_LEDGER_NAME_MAX, "%s", src ? src : "");
}

static bool valid_device(const comem_ledger *l, int device) { return device >= 0 && device < l->n_devices; }

/*
 * The card may show something new (device < 0: every device): a context made
 * or freed, memory registered, reported or released. Grants do not move it:
 * a reading is corrected for them instead (coord/measure.c).
 */
static void changed(comem_ledger *l, int device)
{
    for (int d = 0; d < l->n_devices; d++)
        if (device < 0 || d == device)
            l->devices[d].changes++;
}

/*
 * An entry's resident moved by delta: its holder's, session's, process's and
 * device's sums follow, so none of them is a scan of every entry.
 */
static void resident_moved(comem_ledger *l, const ledger_entry *e, int64_t delta)
{
    ledger_holder *h = comem_slab_get(&l->holders, e->holder);
    ledger_session *s = comem_slab_get(&l->sessions, e->session);
    ledger_process *p = s ? comem_slab_get(&l->processes, s->process) : NULL;
    if (h)
        h->resident = comem_add(h->resident, delta);
    if (s)
        s->resident[e->device] = comem_add(s->resident[e->device], delta);
    if (p)
        p->resident[e->device] = comem_add(p->resident[e->device], delta);
    l->devices[e->device].resident = comem_add(l->devices[e->device].resident, delta);
}

/* A grant of bytes on device was booked (bytes > 0) or removed (bytes < 0) for session. */
static void granted_moved(comem_ledger *l, uint64_t session, int device, int64_t bytes)
{
    ledger_session *s = comem_slab_get(&l->sessions, session);
    ledger_process *p = s ? comem_slab_get(&l->processes, s->process) : NULL;
    if (s)
        s->granted[device] = comem_add(s->granted[device], bytes);
    if (p)
        p->granted[device] = comem_add(p->granted[device], bytes);
    l->devices[device].granted = comem_add(l->devices[device].granted, bytes);
}

/* After a mutation: verify when checking is on, count and report a violation. */
static void after_mutation(comem_ledger *l, const char *what)
{
    if (!l->checking)
        return;
    char why[256];
    l->checks++;
    if (comem_ledger_check(l, why, sizeof why) != COMEM_OK) {
        l->violations++;
        comem_error("ledger invariant broken after %s: %s", what, why);
    }
}

int comem_ledger_init(comem_ledger *l, const ledger_device *devices, int n, int64_t max_pinned)
{
    if (n < 0 || n > COMEM_MAX_DEVICES)
        return COMEM_EINVAL;
    memset(l, 0, sizeof *l);
    l->n_devices = n;
    for (int i = 0; i < n; i++) {
        l->devices[i] = devices[i];
        l->devices[i].resident = l->devices[i].granted = 0; /* derived */
        if (l->devices[i].entry_max <= 0)
            l->devices[i].entry_max = l->devices[i].capacity; /* unsaid: the card alone */
    }
    comem_slab_init(&l->processes, sizeof(ledger_process));
    comem_slab_init(&l->sessions, sizeof(ledger_session));
    comem_slab_init(&l->holders, sizeof(ledger_holder));
    comem_slab_init(&l->entries, sizeof(ledger_entry));
    comem_slab_init(&l->grants, sizeof(ledger_grant));
    l->max_pinned = max_pinned;
    return COMEM_OK;
}

void comem_ledger_fini(comem_ledger *l)
{
    comem_order_fini(&l->order_nodes);
    comem_slab_fini(&l->processes);
    comem_slab_fini(&l->sessions);
    comem_slab_fini(&l->holders);
    comem_slab_fini(&l->entries);
    comem_slab_fini(&l->grants);
}

void comem_ledger_set_checking(comem_ledger *l, bool on) { l->checking = on; }

/* ---- sums ---- */

int64_t comem_ledger_resident(const comem_ledger *l, int device) { return l->devices[device].resident; }

int64_t comem_ledger_granted(const comem_ledger *l, int device) { return l->devices[device].granted; }

int64_t comem_ledger_floors(const comem_ledger *l, int device)
{
    int64_t sum = 0;
    for (size_t i = 0; i < comem_slab_slots(&l->sessions); i++) {
        const ledger_session *s = comem_slab_at(&l->sessions, i, NULL);
        if (s)
            sum = comem_add(sum, s->floor[device]);
    }
    return sum;
}

int64_t comem_ledger_attributed(const comem_ledger *l, int device)
{
    int64_t a = comem_add(comem_add(comem_ledger_resident(l, device), comem_ledger_floors(l, device)),
                          comem_ledger_granted(l, device));
    return l->devices[device].unified ? comem_add(a, l->total_pinned) : a; /* one pool: RAM and VRAM */
}

int64_t comem_ledger_session_resident(const comem_ledger *l, uint64_t session, uint64_t holder, int device)
{
    if (holder) {
        const ledger_holder *h = comem_slab_get(&l->holders, holder);
        return h && h->session == session && (device < 0 || h->device == device) ? h->resident : 0;
    }
    const ledger_session *s = comem_slab_get(&l->sessions, session);
    if (!s)
        return 0;
    if (device >= 0)
        return s->resident[device];
    int64_t sum = 0;
    for (int d = 0; d < l->n_devices; d++)
        sum = comem_add(sum, s->resident[d]);
    return sum;
}

/* ---- the invariants ---- */

/* The derived sums (resident, granted, entry counts) against the records they sum, in one pass each. */
static int check_derived(const comem_ledger *l, char *why, size_t len)
{
    size_t nh = comem_slab_slots(&l->holders), ns = comem_slab_slots(&l->sessions);
    int64_t *h_res = calloc(nh + 1, sizeof *h_res), *s_res = calloc(ns * COMEM_MAX_DEVICES + 1, sizeof *s_res);
    int64_t *s_gr = calloc(ns * COMEM_MAX_DEVICES + 1, sizeof *s_gr);
    uint32_t *h_n = calloc(nh + 1, sizeof *h_n);
    int64_t d_res[COMEM_MAX_DEVICES] = {0}, d_gr[COMEM_MAX_DEVICES] = {0};
    int rc = COMEM_OK;
    if (!h_res || !s_res || !s_gr || !h_n)
        goto out; /* no memory to check with: not a violation */
    for (size_t i = 0; i < comem_slab_slots(&l->entries); i++) {
        const ledger_entry *e = comem_slab_at(&l->entries, i, NULL);
        if (!e || !comem_slab_get(&l->holders, e->holder) || !comem_slab_get(&l->sessions, e->session))
            continue; /* an orphan: the ownership check reports it */
        h_res[comem_slab_slot(e->holder)] += e->resident;
        h_n[comem_slab_slot(e->holder)]++;
        s_res[comem_slab_slot(e->session) * COMEM_MAX_DEVICES + (size_t)e->device] += e->resident;
        d_res[e->device] += e->resident;
    }
    for (size_t i = 0; i < comem_slab_slots(&l->grants); i++) {
        const ledger_grant *g = comem_slab_at(&l->grants, i, NULL);
        if (!g || !comem_slab_get(&l->sessions, g->session) || !valid_device(l, g->device))
            continue;
        s_gr[comem_slab_slot(g->session) * COMEM_MAX_DEVICES + (size_t)g->device] += g->bytes;
        d_gr[g->device] += g->bytes;
    }
    for (size_t i = 0; i < nh && rc == COMEM_OK; i++) {
        uint64_t id;
        const ledger_holder *h = comem_slab_at(&l->holders, i, &id);
        if (h && (h->resident != h_res[i] || h->n_entries != h_n[i])) {
            snprintf(why, len, "holder %llx: resident %lld and %u entries, its entries say %lld and %u",
                     (unsigned long long)id, (long long)h->resident, h->n_entries, (long long)h_res[i], h_n[i]);
            rc = COMEM_ERANGE;
        }
    }
    for (size_t i = 0; i < ns && rc == COMEM_OK; i++) {
        uint64_t id;
        const ledger_session *x = comem_slab_at(&l->sessions, i, &id);
        for (int d = 0; x && d < l->n_devices && rc == COMEM_OK; d++) {
            if (x->resident[d] != s_res[i * COMEM_MAX_DEVICES + (size_t)d] ||
                x->granted[d] != s_gr[i * COMEM_MAX_DEVICES + (size_t)d]) {
                snprintf(why, len, "session %llx, device %d: its resident or granted sum disagrees with its records",
                         (unsigned long long)id, d);
                rc = COMEM_ERANGE;
            }
        }
    }
    for (int d = 0; d < l->n_devices && rc == COMEM_OK; d++) {
        if (l->devices[d].resident != d_res[d] || l->devices[d].granted != d_gr[d]) {
            snprintf(why, len, "device %d: resident %lld, granted %lld; its records say %lld, %lld", d,
                     (long long)l->devices[d].resident, (long long)l->devices[d].granted, (long long)d_res[d],
                     (long long)d_gr[d]);
            rc = COMEM_ERANGE;
        }
    }
out:
    free(h_res);
    free(s_res);
    free(s_gr);
    free(h_n);
    return rc;
}

int comem_ledger_check(const comem_ledger *l, char *why, size_t len)
{
    uint64_t id;
    int64_t pinned = 0;
    for (size_t i = 0; i < comem_slab_slots(&l->sessions); i++) {
        const ledger_session *s = comem_slab_at(&l->sessions, i, &id);
        if (!s)
            continue;
        if (s->pinned < 0) {
            snprintf(why, len, "session %llx has negative pins", (unsigned long long)id);
            return COMEM_ERANGE;
        }
        pinned = comem_add(pinned, s->pinned);
        for (int d = 0; d < l->n_devices; d++) {
            if (s->floor[d] < 0) {
                snprintf(why, len, "session %llx has a negative floor on device %d", (unsigned long long)id, d);
                return COMEM_ERANGE;
            }
        }
    }
    size_t n_holders = 0, n_entries = 0, n_grants = 0;
    for (size_t i = 0; i < comem_slab_slots(&l->sessions); i++) {
        const ledger_session *s = comem_slab_at(&l->sessions, i, NULL);
        if (s) {
            n_holders += s->n_holders;
            n_entries += s->n_entries;
            n_grants += s->n_grants;
        }
    }
    if (n_holders != l->holders.used || n_entries != l->entries.used || n_grants != l->grants.used) {
        snprintf(why, len, "per-session counts (%zu holders, %zu entries, %zu grants) disagree with the records", n_holders,
                 n_entries, n_grants);
        return COMEM_ERANGE;
    }
    if (l->sessions.used > COMEM_LEDGER_MAX_SESSIONS || l->holders.used > COMEM_LEDGER_MAX_HOLDERS ||
        l->entries.used > COMEM_LEDGER_MAX_ENTRIES || l->grants.used > COMEM_LEDGER_MAX_GRANTS) {
        snprintf(why, len, "a global bound is passed: %zu sessions, %zu holders, %zu entries, %zu grants",
                 l->sessions.used, l->holders.used, l->entries.used, l->grants.used);
        return COMEM_ERANGE;
    }
    if (ledger_bound_verify(l, why, len) != COMEM_OK)
        return COMEM_ERANGE;
    if (pinned != l->total_pinned || l->total_pinned < 0 ||
        (l->total_pinned > 0 && l->max_pinned > 0 && l->total_pinned > l->max_pinned)) {
        snprintf(why, len, "pins: total %lld, sessions %lld, ceiling %lld", (long long)l->total_pinned,
                 (long long)pinned, (long long)l->max_pinned);
        return COMEM_ERANGE;
    }
    for (size_t i = 0; i < comem_slab_slots(&l->holders); i++) {
        const ledger_holder *h = comem_slab_at(&l->holders, i, &id);
        if (!h)
            continue;
        if (!comem_slab_get(&l->sessions, h->session) || !valid_device(l, h->device)) {
            snprintf(why, len, "holder %llx belongs to no live session or device", (unsigned long long)id);
            return COMEM_ERANGE;
        }
    }
    for (size_t i = 0; i < comem_slab_slots(&l->entries); i++) {
        const ledger_entry *e = comem_slab_at(&l->entries, i, &id);
        if (!e)
            continue;
        const ledger_holder *h = comem_slab_get(&l->holders, e->holder);
        if (!h || h->session != e->session || h->device != e->device) {
            snprintf(why, len, "entry %llx belongs to no live holder of its session", (unsigned long long)id);
            return COMEM_ERANGE;
        }
        if (e->size < 0 || e->resident < 0 || e->resident > e->size || e->peak < 0) {
            snprintf(why, len, "entry %llx: size %lld, resident %lld", (unsigned long long)id, (long long)e->size,
                     (long long)e->resident);
            return COMEM_ERANGE;
        }
    }
    for (size_t i = 0; i < comem_slab_slots(&l->grants); i++) {
        const ledger_grant *g = comem_slab_at(&l->grants, i, &id);
        if (!g)
            continue;
        if (!comem_slab_get(&l->sessions, g->session) || !valid_device(l, g->device) || g->bytes <= 0) {
            snprintf(why, len, "grant %llx: no live session, or %lld bytes", (unsigned long long)id,
                     (long long)g->bytes);
            return COMEM_ERANGE;
        }
    }
    if (!l->order_broken) {
        for (int d = 0; d < l->n_devices; d++) {
            comem_order_iter it;
            comem_order_begin(l, d, &it);
            const ledger_entry *e, *prev = NULL;
            size_t walked = 0, resident = 0;
            for (uint64_t eid; comem_order_next(&it, &eid, &e); prev = e, walked++) {
                if (e->device != d || e->resident <= 0 || (prev && comem_order_key_cmp(prev, e) > 0)) {
                    snprintf(why, len, "device %d: entry %llx out of eviction order", d, (unsigned long long)eid);
                    return COMEM_ERANGE;
                }
            }
            for (size_t i = 0; i < comem_slab_slots(&l->entries); i++) {
                const ledger_entry *x = comem_slab_at(&l->entries, i, NULL);
                resident += x && x->device == d && x->resident > 0;
            }
            if (walked != resident) {
                snprintf(why, len, "device %d: eviction order has %zu entries, %zu hold bytes", d, walked, resident);
                return COMEM_ERANGE;
            }
        }
    }
    int64_t records[COMEM_MAX_DEVICES] = {0}; /* attributed from the records, not the derived sums */
    for (size_t i = 0; i < comem_slab_slots(&l->entries); i++) {
        const ledger_entry *e = comem_slab_at(&l->entries, i, NULL);
        if (e)
            records[e->device] = comem_add(records[e->device], e->resident);
    }
    for (size_t i = 0; i < comem_slab_slots(&l->grants); i++) {
        const ledger_grant *g = comem_slab_at(&l->grants, i, NULL);
        if (g)
            records[g->device] = comem_add(records[g->device], g->bytes);
    }
    for (int d = 0; d < l->n_devices; d++) {
        int64_t a = comem_add(records[d], comem_ledger_floors(l, d));
        if (l->devices[d].unified)
            a = comem_add(a, l->total_pinned);
        if (a > l->devices[d].capacity) {
            snprintf(why, len, "device %d: attributed %lld above capacity %lld", d, (long long)a,
                     (long long)l->devices[d].capacity);
            return COMEM_ERANGE;
        }
    }
    return check_derived(l, why, len);
}

/* ---- sessions ---- */

int comem_ledger_session_add(comem_ledger *l, int32_t pid, uint32_t uid, uint8_t role, uint8_t scope, uint32_t caps,
                             const char *name, int64_t now_ns, uint64_t *id)
{
    if (l->sessions.used >= COMEM_LEDGER_MAX_SESSIONS)
        return COMEM_ERANGE; /* the sure shares are set aside for this many */
    uint64_t process;
    if (ledger_process_join(l, pid, name, &process) != COMEM_OK)
        return COMEM_ENOMEM;
    ledger_session *s = comem_slab_alloc(&l->sessions, id);
    if (!s) {
        ledger_process_leave(l, process);
        return COMEM_ENOMEM;
    }
    s->process = process;
    s->pid = pid;
    s->uid = uid;
    s->role = role;
    s->scope = scope;
    s->caps = caps;
    s->started_ns = now_ns;
    copy_name(s->name, name);
    changed(l, -1); /* a new process may already hold a context */
    after_mutation(l, "session add");
    return COMEM_OK;
}

ledger_session *comem_ledger_session(comem_ledger *l, uint64_t id) { return comem_slab_get(&l->sessions, id); }

int comem_ledger_session_end(comem_ledger *l, uint64_t id, ledger_release_summary *out)
{
    ledger_session *s = comem_slab_get(&l->sessions, id);
    ledger_release_summary sum = {0};
    if (!s)
        return COMEM_ENOENT;
    uint64_t rid;
    for (size_t i = 0; i < comem_slab_slots(&l->grants); i++) {
        ledger_grant *g = comem_slab_at(&l->grants, i, &rid);
        if (g && g->session == id) {
            sum.grants++;
            sum.grant_bytes = comem_add(sum.grant_bytes, g->bytes);
            granted_moved(l, id, g->device, -g->bytes);
            comem_slab_free(&l->grants, rid);
        }
    }
    for (size_t i = 0; i < comem_slab_slots(&l->entries); i++) {
        ledger_entry *e = comem_slab_at(&l->entries, i, &rid);
        if (e && e->session == id) {
            sum.entries++;
            sum.resident_bytes = comem_add(sum.resident_bytes, e->resident);
            resident_moved(l, e, -e->resident);
            comem_order_remove(l, rid);
            comem_slab_free(&l->entries, rid);
        }
    }
    for (size_t i = 0; i < comem_slab_slots(&l->holders); i++) {
        ledger_holder *h = comem_slab_at(&l->holders, i, &rid);
        if (h && h->session == id) {
            sum.holders++;
            comem_slab_free(&l->holders, rid);
        }
    }
    sum.pinned_bytes = s->pinned;
    l->total_pinned = comem_sub(l->total_pinned, s->pinned);
    ledger_bound_give(l, s->process, LEDGER_HOLDERS, s->n_holders);
    ledger_bound_give(l, s->process, LEDGER_ENTRIES, s->n_entries);
    ledger_bound_give(l, s->process, LEDGER_GRANTS, s->n_grants);
    ledger_process_leave(l, s->process);
    comem_slab_free(&l->sessions, id);
    if (out)
        *out = sum;
    changed(l, -1);
    after_mutation(l, "session end");
    return COMEM_OK;
}

static void mark(ledger_holder *h, bool busy, const char *prompt, double now_s)
{
    if (busy) {
        h->busy = true;
        return;
    }
    if (h->busy || !h->idle_known) {
        h->idle_known = true;
        h->idle_since = now_s;
    }
    h->busy = false;
    if (prompt && *prompt)
        copy_name(h->last_prompt, prompt);
}

int comem_ledger_activity(comem_ledger *l, uint64_t session, uint64_t holder, bool busy, const char *prompt,
                          double now_s)
{
    ledger_session *s = comem_slab_get(&l->sessions, session);
    if (!s)
        return COMEM_ENOENT;
    if (holder) {
        ledger_holder *h = comem_slab_get(&l->holders, holder);
        if (!h || h->session != session)
            return COMEM_ENOENT;
        mark(h, busy, prompt, now_s);
        return COMEM_OK;
    }
    s->busy = busy;
    if (busy && prompt)
        copy_name(s->prompt, prompt);
    for (size_t i = 0; i < comem_slab_slots(&l->holders); i++) {
        ledger_holder *h = comem_slab_at(&l->holders, i, NULL);
        if (h && h->session == session)
            mark(h, busy, busy ? NULL : (prompt && *prompt ? prompt : s->prompt), now_s);
    }
    return COMEM_OK;
}

int comem_ledger_set_floor(comem_ledger *l, uint64_t session, int device, int64_t floor)
{
    ledger_session *s = comem_slab_get(&l->sessions, session);
    if (!s || !valid_device(l, device))
        return COMEM_ENOENT;
    floor = comem_clamp0(floor);
    int64_t after = comem_add(comem_sub(comem_ledger_attributed(l, device), s->floor[device]), floor);
    if (after > l->devices[device].capacity)
        return COMEM_ERANGE;
    s->floor[device] = floor;
    after_mutation(l, "floor");
    return COMEM_OK;
}

/* ---- holders ---- */

int comem_ledger_holder_add(comem_ledger *l, uint64_t session, int device, uint8_t kind, uint32_t flags,
                            const char *name, double now_s, uint64_t *id)
{
    if (!comem_slab_get(&l->sessions, session))
        return COMEM_ENOENT;
    if (!valid_device(l, device))
        return COMEM_ENODEV;
    if (kind < LEDGER_KIND_MODELS || kind > LEDGER_KIND_RAW)
        return COMEM_EINVAL;
    ledger_session *ss = comem_slab_get(&l->sessions, session);
    if (ledger_bound_check(l, ss->process, LEDGER_HOLDERS) != COMEM_OK)
        return COMEM_ERANGE;
    ledger_holder *h = comem_slab_alloc(&l->holders, id);
    if (!h)
        return COMEM_ENOMEM;
    ss->n_holders++;
    ledger_bound_take(l, ss->process, LEDGER_HOLDERS);
    h->session = session;
    h->device = device;
    h->kind = kind;
    h->flags = flags;
    h->idle_known = true;
    h->idle_since = now_s;
    copy_name(h->name, name);
    changed(l, device); /* where its process has (or makes) a context */
    after_mutation(l, "holder add");
    return COMEM_OK;
}

ledger_holder *comem_ledger_holder(comem_ledger *l, uint64_t id) { return comem_slab_get(&l->holders, id); }

int comem_ledger_holder_remove(comem_ledger *l, uint64_t session, uint64_t holder)
{
    ledger_holder *h = comem_slab_get(&l->holders, holder);
    if (!h || h->session != session)
        return COMEM_ENOENT;
    ledger_session *ss = comem_slab_get(&l->sessions, session);
    uint64_t eid;
    for (size_t i = 0; i < comem_slab_slots(&l->entries); i++) {
        ledger_entry *e = comem_slab_at(&l->entries, i, &eid);
        if (e && e->holder == holder) {
            resident_moved(l, e, -e->resident);
            comem_order_remove(l, eid);
            comem_slab_free(&l->entries, eid);
            ss->n_entries--;
            ledger_bound_give(l, ss->process, LEDGER_ENTRIES, 1);
        }
    }
    int device = h->device;
    comem_slab_free(&l->holders, holder);
    ss->n_holders--;
    ledger_bound_give(l, ss->process, LEDGER_HOLDERS, 1);
    changed(l, device);
    after_mutation(l, "holder remove");
    return COMEM_OK;
}

/* ---- entries ---- */

int comem_ledger_entry_add(comem_ledger *l, uint64_t session, uint64_t holder, const char *name, int64_t size,
                           int64_t resident, bool dynamic, int64_t now_ns, uint64_t *id)
{
    ledger_holder *h = comem_slab_get(&l->holders, holder);
    if (!h || h->session != session)
        return COMEM_ENOENT;
    if (size < 0)
        return COMEM_EINVAL;
    if (size > l->devices[h->device].entry_max)
        return COMEM_ERANGE; /* more than the card, RAM and swap together could hold */
    ledger_session *ss = comem_slab_get(&l->sessions, session);
    if (ledger_bound_check(l, ss->process, LEDGER_ENTRIES) != COMEM_OK)
        return COMEM_ERANGE;
    resident = comem_min(comem_clamp0(resident), size);
    if (comem_add(comem_ledger_attributed(l, h->device), resident) > l->devices[h->device].capacity)
        return COMEM_ERANGE;
    ledger_entry *e = comem_slab_alloc(&l->entries, id);
    if (!e)
        return COMEM_ENOMEM;
    ss->n_entries++;
    ledger_bound_take(l, ss->process, LEDGER_ENTRIES);
    h->n_entries++;
    e->holder = holder;
    e->session = session;
    e->device = h->device;
    e->size = size;
    e->resident = resident;
    e->peak = size; /* registration counts as a full-size receipt until the first census */
    e->seq = -1;
    e->dynamic = dynamic;
    e->last_use_ns = now_ns;
    copy_name(e->name, name);
    resident_moved(l, e, resident);
    comem_order_insert(l, *id);
    changed(l, e->device);
    after_mutation(l, "entry add");
    return COMEM_OK;
}

ledger_entry *comem_ledger_entry(comem_ledger *l, uint64_t id) { return comem_slab_get(&l->entries, id); }

int comem_ledger_entry_set_refs(comem_ledger *l, uint64_t session, uint64_t entry, int64_t refs)
{
    ledger_entry *e = comem_slab_get(&l->entries, entry);
    if (!e || e->session != session)
        return COMEM_ENOENT;
    refs = comem_clamp0(refs);
    if (refs != e->refs) {
        comem_order_remove(l, entry); /* its order key changes */
        e->refs = refs;
        comem_order_insert(l, entry);
    }
    after_mutation(l, "entry refs");
    return COMEM_OK;
}

int comem_ledger_entry_set_tier(comem_ledger *l, uint64_t session, uint64_t entry, uint8_t tier)
{
    ledger_entry *e = comem_slab_get(&l->entries, entry);
    if (!e || e->session != session)
        return COMEM_ENOENT;
    if (tier > LEDGER_TIER_FILE)
        return COMEM_EINVAL;
    if (tier != e->tier) {
        comem_order_remove(l, entry); /* its order key changes */
        e->tier = tier;
        comem_order_insert(l, entry);
    }
    after_mutation(l, "entry tier");
    return COMEM_OK;
}

int comem_ledger_entry_remove(comem_ledger *l, uint64_t session, uint64_t entry)
{
    ledger_entry *e = comem_slab_get(&l->entries, entry);
    if (!e || e->session != session)
        return COMEM_ENOENT;
    int device = e->device;
    ledger_session *ss = comem_ledger_session(l, session);
    ledger_holder *h = comem_slab_get(&l->holders, e->holder);
    resident_moved(l, e, -e->resident);
    if (h)
        h->n_entries--;
    comem_order_remove(l, entry);
    comem_slab_free(&l->entries, entry);
    ss->n_entries--;
    ledger_bound_give(l, ss->process, LEDGER_ENTRIES, 1);
    changed(l, device);
    after_mutation(l, "entry remove");
    return COMEM_OK;
}

static int cmp_id(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/*
 * True when items name some entry twice. Such a list cannot be judged item by
 * item (each would be compared with the same unchanged residency, and only the
 * last applied), so the message as a whole is refused.
 */
static bool has_duplicates(const ledger_residency *items, size_t n)
{
    uint64_t ids[COMEM_LEDGER_MAX_ITEMS];
    for (size_t i = 0; i < n; i++)
        ids[i] = items[i].entry_id;
    qsort(ids, n, sizeof ids[0], cmp_id);
    for (size_t i = 1; i < n; i++)
        if (ids[i] == ids[i - 1])
            return true;
    return false;
}

int comem_ledger_census(comem_ledger *l, uint64_t session, uint64_t holder, uint64_t seq, int64_t pinned,
                        int64_t overhead, const ledger_residency *items, size_t n, int64_t now_ns, int *n_moved)
{
    if (n_moved)
        *n_moved = 0;
    ledger_holder *h = comem_slab_get(&l->holders, holder);
    if (!h || h->session != session)
        return COMEM_ENOENT;
    if (n > COMEM_LEDGER_MAX_ITEMS || (n && !items))
        return COMEM_EINVAL;
    if (has_duplicates(items, n)) {
        comem_warn("census from holder '%s' lists an entry more than once; refused as a whole", h->name);
        return COMEM_EINVAL;
    }
    /* First pass: would the census as a whole fit on the card? Apply nothing if not. */
    int64_t delta = 0;
    for (size_t i = 0; i < n; i++) {
        const ledger_entry *e = comem_slab_get(&l->entries, items[i].entry_id);
        if (!e || e->holder != holder || (int64_t)items[i].seq < e->seq)
            continue;
        int64_t r = comem_min(comem_clamp0(items[i].resident), e->size);
        delta = comem_add(delta, comem_sub(r, e->resident));
    }
    if (delta > 0 && comem_add(comem_ledger_attributed(l, h->device), delta) > l->devices[h->device].capacity) {
        comem_warn("census from holder '%s' claims %lld more bytes than device %d can hold; refused", h->name,
                   (long long)delta, h->device);
        return COMEM_ERANGE;
    }
    int moved = 0;
    for (size_t i = 0; i < n; i++) {
        ledger_entry *e = comem_slab_get(&l->entries, items[i].entry_id);
        if (!e || e->holder != holder)
            continue; /* unknown ids are skipped, as a census from an older registration */
        if ((int64_t)items[i].seq < e->seq)
            continue; /* strictly older: dropped; an equal sequence applies */
        int64_t r = comem_min(comem_clamp0(items[i].resident), e->size);
        e->seq = (int64_t)items[i].seq;
        e->peak = r; /* the census is the authority that lets the peak decay */
        int64_t refs = comem_clamp0(items[i].refs);
        if (r != e->resident || refs != e->refs) {
            comem_order_remove(l, items[i].entry_id); /* its order key changes */
            if (r != e->resident) {
                resident_moved(l, e, comem_sub(r, e->resident));
                e->resident = r;
                e->last_use_ns = now_ns;
                moved++;
            }
            e->refs = refs;
            comem_order_insert(l, items[i].entry_id);
        }
    }
    if (!h->census_seen || seq > h->census_seq) {
        /* pins and overhead: an equal sequence is dropped */
        if (pinned >= 0)
            h->pinned = pinned;
        if (overhead >= 0)
            h->overhead = overhead;
        h->census_seq = seq;
        h->census_seen = true;
    }
    if (moved)
        changed(l, h->device);
    if (n_moved)
        *n_moved = moved;
    after_mutation(l, "census");
    return COMEM_OK;
}

/* ---- grants ---- */

int comem_ledger_grant_add(comem_ledger *l, uint64_t session, uint64_t holder, int device, int64_t bytes,
                           int64_t expires_ns, uint64_t *id)
{
    ledger_session *ss = comem_slab_get(&l->sessions, session);
    if (!ss)
        return COMEM_ENOENT;
    if (!valid_device(l, device))
        return COMEM_ENODEV;
    if (bytes <= 0)
        return COMEM_EINVAL;
    if (ledger_bound_check(l, ss->process, LEDGER_GRANTS) != COMEM_OK)
        return COMEM_ERANGE;
    if (comem_add(comem_ledger_attributed(l, device), bytes) > l->devices[device].capacity)
        return COMEM_ENOSPC;
    ledger_grant *g = comem_slab_alloc(&l->grants, id);
    if (!g)
        return COMEM_ENOMEM;
    ss->n_grants++;
    ledger_bound_take(l, ss->process, LEDGER_GRANTS);
    g->session = session;
    g->holder = holder;
    g->device = device;
    g->bytes = bytes;
    g->expires_ns = expires_ns;
    granted_moved(l, session, device, bytes);
    after_mutation(l, "grant add");
    return COMEM_OK;
}

ledger_grant *comem_ledger_grant(comem_ledger *l, uint64_t id) { return comem_slab_get(&l->grants, id); }

int comem_ledger_grant_done(comem_ledger *l, uint64_t session, uint64_t grant, uint64_t entry, int64_t used)
{
    ledger_grant *g = comem_slab_get(&l->grants, grant);
    if (!g || g->session != session)
        return COMEM_ENOENT;
    if (entry) {
        ledger_entry *e = comem_slab_get(&l->entries, entry);
        if (!e || e->session != session || e->device != g->device)
            return COMEM_ENOENT;
        /* The grant's bytes turn into residency; never more than the grant booked. */
        int64_t grow = comem_min(comem_clamp0(comem_sub(comem_clamp0(used), e->resident)), g->bytes);
        comem_order_remove(l, entry);
        int64_t resident = comem_min(comem_add(e->resident, grow), e->size);
        resident_moved(l, e, comem_sub(resident, e->resident));
        e->resident = resident;
        e->peak = comem_max(e->peak, e->resident);
        comem_order_insert(l, entry);
    }
    granted_moved(l, session, g->device, -g->bytes);
    comem_slab_free(&l->grants, grant);
    ledger_session *ss = comem_ledger_session(l, session);
    ss->n_grants--;
    ledger_bound_give(l, ss->process, LEDGER_GRANTS, 1);
    after_mutation(l, "grant done");
    return COMEM_OK;
}

int comem_ledger_grants_expire(comem_ledger *l, int64_t now_ns)
{
    int n = 0;
    uint64_t id;
    for (size_t i = 0; i < comem_slab_slots(&l->grants); i++) {
        ledger_grant *g = comem_slab_at(&l->grants, i, &id);
        if (g && g->expires_ns <= now_ns) {
            ledger_session *ss = comem_slab_get(&l->sessions, g->session);
            granted_moved(l, g->session, g->device, -g->bytes);
            if (ss) {
                ss->n_grants--;
                ledger_bound_give(l, ss->process, LEDGER_GRANTS, 1);
            }
            comem_slab_free(&l->grants, id);
            n++;
        }
    }
    if (n)
        after_mutation(l, "grant expiry");
    return n;
}

/* ---- pins ---- */

int comem_ledger_pin_acquire(comem_ledger *l, uint64_t session, int64_t bytes, int64_t *shortfall)
{
    ledger_session *s = comem_slab_get(&l->sessions, session);
    if (!s)
        return COMEM_ENOENT;
    if (bytes < 0)
        return COMEM_EINVAL;
    /* Compare, then book: safe because the ledger has one thread (the coordinator's loop), so
       nothing can book between the comparison and the booking and two pins never both pass the
       ceiling. A counter shared between threads would book first, compare and roll back. */
    int64_t after = comem_add(l->total_pinned, bytes);
    if (l->max_pinned <= 0 || after > l->max_pinned) {
        if (shortfall)
            *shortfall = l->max_pinned <= 0 ? bytes : comem_sub(after, l->max_pinned);
        return COMEM_ENOSPC;
    }
    for (int d = 0; d < l->n_devices; d++) {
        int64_t over = comem_sub(comem_add(comem_ledger_attributed(l, d), bytes), l->devices[d].capacity);
        if (l->devices[d].unified && over > 0) { /* the pool's RAM is booked as VRAM already */
            if (shortfall)
                *shortfall = over;
            return COMEM_ENOSPC;
        }
    }
    l->total_pinned = after;
    s->pinned = comem_add(s->pinned, bytes);
    if (shortfall)
        *shortfall = 0;
    changed(l, -1); /* on a unified device pinned pages come out of its free */
    after_mutation(l, "pin acquire");
    return COMEM_OK;
}

int comem_ledger_pin_release(comem_ledger *l, uint64_t session, int64_t bytes)
{
    ledger_session *s = comem_slab_get(&l->sessions, session);
    if (!s)
        return COMEM_ENOENT;
    if (bytes < 0)
        return COMEM_EINVAL;
    if (bytes > s->pinned) {
        comem_warn("session '%s' releases %lld pinned bytes but holds %lld; clamped", s->name, (long long)bytes,
                   (long long)s->pinned);
        bytes = s->pinned;
    }
    s->pinned = comem_sub(s->pinned, bytes);
    l->total_pinned = comem_sub(l->total_pinned, bytes);
    changed(l, -1);
    after_mutation(l, "pin release");
    return COMEM_OK;
}
