/*
 * coord/status.c - the coordinator's snapshot as JSON: what `comem status` shows.
 *
 * Per device: capacity, the last true free, the driver's reserved slice, the
 * reserve (base and published), and every byte attributed to a process and an
 * entry, a context floor or a grant; what the card says is used but the ledger
 * cannot name is "unattributed". What a joined process holds beyond its entries
 * and grants is split (coord_split_floor): its holders' reported bytes
 * ("overhead"), its context ("context_floor") and the rest ("unregistered").
 * Host RAM, when the coordinator serves it, is the last device, with its
 * budget and cgroup in "host_ram" (null for a card).
 * Ids are hex strings (they are 64-bit). Its cost is linear in what it
 * prints: one pass over each of the ledger's tables builds an index (each
 * session's holders, each holder's entries, each session's connection), and
 * the snapshot then walks only what it lists.
 * The shape is versioned ("schema") and docs/json.md lists every key: each is
 * always present, null where the coordinator does not know the value.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/size.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

static json_object *jid(uint64_t id)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%llx", (unsigned long long)id);
    return json_object_new_string(buf);
}

static void add_i(json_object *o, const char *k, int64_t v) { json_object_object_add(o, k, json_object_new_int64(v)); }
static void add_s(json_object *o, const char *k, const char *v) { json_object_object_add(o, k, json_object_new_string(v)); }
static void add_b(json_object *o, const char *k, bool v) { json_object_object_add(o, k, json_object_new_boolean(v)); }

static void add_null(json_object *o, const char *k) { json_object_object_add(o, k, NULL); }
/* A byte figure that a failed reading leaves unknown: null, not a number. */
static void add_known(json_object *o, const char *k, bool known, int64_t v)
{
    if (known)
        add_i(o, k, v);
    else
        add_null(o, k);
}

/* The JSON shape's version: bumped when a key changes meaning or goes away (docs/json.md). */
#define STATUS_SCHEMA 1

static const char *role_name(uint8_t r)
{
    return r == COMEM_ROLE_HOST ? "host" : r == COMEM_ROLE_WORKER ? "worker" : "tool";
}

static const char *kind_name(uint8_t k)
{
    static const char *names[] = {"?", "models", "pager", "pins", "raw"};
    return k <= 4 ? names[k] : "?";
}

/*
 * Who owns what, as chains of slots in slot order (the order the snapshot has
 * always listed them in): slot + 1, 0 ends a chain. Built once per snapshot.
 */
typedef struct status_index {
    uint32_t *first_holder, *next_holder; /* per session slot, per holder slot */
    uint32_t *first_entry, *next_entry;   /* per holder slot, per entry slot */
    const conn **conn_of;                 /* per session slot: its live connection, or NULL */
    int32_t *pids;                        /* every session's pid, sorted (other_processes) */
    size_t n_pids;
} status_index;

static void index_free(status_index *x)
{
    free(x->first_holder);
    free(x->next_holder);
    free(x->first_entry);
    free(x->next_entry);
    free(x->conn_of);
    free(x->pids);
}

static int cmp_pid(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static bool index_build(comem_coord_srv *s, status_index *x)
{
    const comem_ledger *l = &s->ledger;
    size_t ns = comem_slab_slots(&l->sessions), nh = comem_slab_slots(&l->holders), ne = comem_slab_slots(&l->entries);
    *x = (status_index){
        .first_holder = calloc(ns + 1, sizeof(uint32_t)), .next_holder = calloc(nh + 1, sizeof(uint32_t)),
        .first_entry = calloc(nh + 1, sizeof(uint32_t)), .next_entry = calloc(ne + 1, sizeof(uint32_t)),
        .conn_of = calloc(ns + 1, sizeof(conn *)), .pids = calloc(ns + nh + 1, sizeof(int32_t)),
    };
    if (!x->first_holder || !x->next_holder || !x->first_entry || !x->next_entry || !x->conn_of || !x->pids) {
        index_free(x);
        return false;
    }
    for (size_t i = nh; i-- > 0;) { /* backwards, pushing on the front: each chain in slot order */
        const ledger_holder *h = comem_slab_at(&l->holders, i, NULL);
        if (!h || !comem_slab_get(&l->sessions, h->session))
            continue;
        size_t owner = comem_slab_slot(h->session);
        x->next_holder[i] = x->first_holder[owner];
        x->first_holder[owner] = (uint32_t)i + 1;
    }
    for (size_t i = ne; i-- > 0;) {
        const ledger_entry *e = comem_slab_at(&l->entries, i, NULL);
        if (!e || !comem_slab_get(&l->holders, e->holder))
            continue;
        size_t owner = comem_slab_slot(e->holder);
        x->next_entry[i] = x->first_entry[owner];
        x->first_entry[owner] = (uint32_t)i + 1;
    }
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        const conn *c = s->conns[i];
        if (c && c->session && !c->closing && comem_slab_get(&l->sessions, c->session))
            x->conn_of[comem_slab_slot(c->session)] = c;
    }
    for (size_t i = 0; i < ns; i++) {
        const ledger_session *ss = comem_slab_at(&l->sessions, i, NULL);
        if (ss)
            x->pids[x->n_pids++] = ss->pid;
    }
    x->n_pids += coord_app_pids(s, -1, x->pids + x->n_pids, nh); /* an app spoken for is no other process */
    qsort(x->pids, x->n_pids, sizeof *x->pids, cmp_pid);
    return true;
}

static json_object *holder_json(comem_coord_srv *s, const status_index *ix, uint64_t hid, const ledger_holder *h,
                                int device)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "id", jid(hid));
    add_s(o, "name", h->name);
    add_s(o, "kind", kind_name(h->kind));
    add_known(o, "app_pid", h->app_pid > 0, h->app_pid); /* an app holder's: the process it speaks for */
    /* that process's use of the device in the last reading (its RSS on host RAM); 0 when it is not listed */
    const measurement *m = &s->meas[device];
    bool read = h->app_pid > 0 && m->valid && m->r.procs_known;
    int64_t app_use = 0;
    for (size_t p = 0; read && p < m->r.n_procs; p++)
        if (m->r.procs[p].pid == h->app_pid)
            app_use = m->r.procs[p].bytes;
    add_known(o, "app_use", read, app_use);
    json_object *fl = json_object_new_array();
    if (h->flags & COMEM_CAP_RELEASE)
        json_object_array_add(fl, json_object_new_string("release"));
    if (h->flags & COMEM_CAP_IDLE_RELEASE)
        json_object_array_add(fl, json_object_new_string("idle"));
    if (h->flags & COMEM_CAP_PIN_RELEASE)
        json_object_array_add(fl, json_object_new_string("pins"));
    if (h->flags & COMEM_CAP_WHILE_BUSY)
        json_object_array_add(fl, json_object_new_string("while-busy"));
    json_object_object_add(o, "answers", fl);
    add_b(o, "busy", h->busy);
    if (!h->busy && h->idle_known)
        json_object_object_add(o, "idle_s", json_object_new_double(coord_now_s(s) - h->idle_since));
    else
        add_null(o, "idle_s");
    add_known(o, "pinned", h->census_seen, h->pinned);
    add_known(o, "overhead", h->census_seen, h->overhead);
    add_i(o, "receipts_over", (int64_t)h->receipts_over); /* receipts that claimed more than came off (asks.c) */
    add_i(o, "receipts_contradicted", (int64_t)h->receipts_contradicted); /* ... whose bytes the card kept */
    add_b(o, "unanswered", h->unanswered_until_ns > comem_now_ns()); /* let an ask pass: not asked until it answers */
    json_object *es = json_object_new_array();
    int64_t resident = 0;
    for (uint32_t i = ix->first_entry[comem_slab_slot(hid)]; i; i = ix->next_entry[i - 1]) {
        uint64_t eid;
        const ledger_entry *e = comem_slab_at(&s->ledger.entries, i - 1, &eid);
        if (e->device != device)
            continue;
        json_object *x = json_object_new_object();
        json_object_object_add(x, "id", jid(eid));
        add_s(x, "name", e->name);
        add_i(x, "size", e->size);
        add_i(x, "resident", e->resident);
        add_b(x, "paged", e->dynamic);
        add_i(x, "refs", e->refs);
        json_object_array_add(es, x);
        resident = comem_add(resident, e->resident);
    }
    add_i(o, "resident", resident);
    json_object_object_add(o, "entries", es);
    return o;
}

/*
 * What the host was last told to keep on device d (its RESERVE), or null: it
 * keeps that figure until its next load asks again, while "published" moves at
 * once with every census and receipt, so between the two they may differ.
 */
static void host_told_json(comem_coord_srv *s, const status_index *ix, int d, json_object *rv)
{
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.sessions); i++) {
        const ledger_session *ss = comem_slab_at(&s->ledger.sessions, i, NULL);
        const conn *c = ss && ss->role == COMEM_ROLE_HOST ? ix->conn_of[i] : NULL;
        if (c && (c->told_known >> d & 1u)) {
            add_i(rv, "host_told", c->told[d]);
            return;
        }
    }
    json_object_object_add(rv, "host_told", NULL);
}

static json_object *device_json(comem_coord_srv *s, const status_index *ix, int d)
{
    const ledger_device *ld = &s->ledger.devices[d];
    const measurement *m = &s->meas[d];
    json_object *o = json_object_new_object();
    add_i(o, "index", d);
    add_s(o, "uuid", ld->uuid);
    add_s(o, "name", ld->name);
    add_s(o, "scope", comem_scope_name(ld->scope));
    add_s(o, "process_scope", comem_scope_name(ld->proc_scope)); /* of each process's own free reading */
    add_i(o, "capacity", ld->capacity);
    add_known(o, "free", m->valid, m->r.free);
    add_known(o, "used", m->valid, m->r.used);
    add_known(o, "driver_reserved", m->valid, m->r.reserved);
    add_known(o, "overcommit", m->valid, m->r.overcommit); /* spilled beyond physical memory (WDDM) */
    json_object *rv = json_object_new_object();
    add_i(rv, "base", ld->reserve_base);
    add_i(rv, "published", ld->published);
    host_told_json(s, ix, d, rv);
    json_object_object_add(o, "reserve", rv);
    int64_t resident = comem_ledger_resident(&s->ledger, d), floors = comem_ledger_floors(&s->ledger, d);
    coord_floor_split all = {0}; /* Σ of the processes' splits, summed as they are listed */
    add_i(o, "resident", resident);
    add_i(o, "context_floors", floors);
    add_i(o, "granted", comem_ledger_granted(&s->ledger, d));
    add_i(o, "attributed", comem_ledger_attributed(&s->ledger, d));
    if (m->valid) {
        int64_t in_use = comem_sub(m->r.used, comem_clamp0(m->r.reserved));
        int64_t named = comem_add(resident, floors);
        if (ld->unified)
            named = comem_add(named, s->ledger.total_pinned); /* the pool's pinned RAM shows as its use */
        add_i(o, "unattributed", comem_clamp0(comem_sub(in_use, named)));
    } else {
        add_null(o, "unattributed");
    }
    json_object *procs = json_object_new_array();
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.sessions); i++) {
        uint64_t sid;
        const ledger_session *ss = comem_slab_at(&s->ledger.sessions, i, &sid);
        if (!ss)
            continue;
        json_object *p = json_object_new_object();
        json_object_object_add(p, "session", jid(sid));
        add_i(p, "pid", ss->pid);
        add_s(p, "name", ss->name);
        add_s(p, "role", role_name(ss->role));
        /* One walk of its holders: this device's for the list and their overhead, and whether any of
           the process's (on any device) computes, which makes the process busy (a node computing with
           one model). */
        bool busy = ss->busy;
        int64_t overhead = 0;
        json_object *hs = json_object_new_array();
        for (uint32_t k = ix->first_holder[i]; k; k = ix->next_holder[k - 1]) {
            uint64_t hid;
            const ledger_holder *h = comem_slab_at(&s->ledger.holders, k - 1, &hid);
            busy |= h->busy;
            if (h->device != d)
                continue;
            json_object_array_add(hs, holder_json(s, ix, hid, h, d));
            if (h->census_seen)
                overhead = comem_add(overhead, h->overhead);
        }
        add_b(p, "busy", busy);
        if (ss->prompt[0])
            add_s(p, "prompt", ss->prompt);
        else
            add_null(p, "prompt");
        add_i(p, "context_floor", ss->floor[d]);
        add_i(p, "resident", comem_ledger_session_resident(&s->ledger, sid, 0, d));
        add_i(p, "pinned", ss->pinned);
        json_object_object_add(p, "holders", hs);
        const conn *pc = ix->conn_of[i];
        add_known(p, "ordinal", pc != NULL, pc ? coord_device_out(pc, d) : 0); /* as the process numbers it */
        coord_floor_split split = coord_split_floor_given(s, sid, d, overhead); /* context_floor, split */
        all.overhead = comem_add(all.overhead, split.overhead);
        all.context = comem_add(all.context, split.context);
        all.unregistered = comem_add(all.unregistered, split.unregistered);
        add_i(p, "context", split.context);
        add_i(p, "overhead", split.overhead);
        add_i(p, "unregistered", split.unregistered);
        json_object_array_add(procs, p);
    }
    json_object_object_add(o, "processes", procs);
    json_object *gs = json_object_new_array();
    int64_t now = comem_now_ns();
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.grants); i++) {
        uint64_t gid;
        const ledger_grant *g = comem_slab_at(&s->ledger.grants, i, &gid);
        if (!g || g->device != d)
            continue;
        json_object *x = json_object_new_object();
        json_object_object_add(x, "id", jid(gid));
        json_object_object_add(x, "session", jid(g->session));
        if (g->holder)
            json_object_object_add(x, "holder", jid(g->holder));
        else
            add_null(x, "holder");
        add_i(x, "bytes", g->bytes);
        json_object_object_add(x, "expires_in_s", json_object_new_double((double)(g->expires_ns - now) / 1e9));
        json_object_array_add(gs, x);
    }
    json_object_object_add(o, "grants", gs);
    /* Processes on the card that never joined the ledger (other apps, unregistered tools). */
    if (m->valid && m->r.procs_known) {
        json_object *others = json_object_new_array();
        for (size_t p = 0; p < m->r.n_procs; p++) {
            int32_t pid = m->r.procs[p].pid;
            if (!bsearch(&pid, ix->pids, ix->n_pids, sizeof pid, cmp_pid)) {
                json_object *x = json_object_new_object();
                add_i(x, "pid", m->r.procs[p].pid);
                add_i(x, "bytes", m->r.procs[p].bytes);
                json_object_array_add(others, x);
            }
        }
        json_object_object_add(o, "other_processes", others);
    } else {
        add_null(o, "other_processes"); /* the device source does not list processes */
    }
    /* Added by issue 14: UMA, what the floors hold, WDDM spill. */
    add_b(o, "unified", ld->unified);
    add_i(o, "contexts", all.context);
    add_i(o, "overhead", all.overhead);
    add_i(o, "unregistered", all.unregistered);
    const coord_spill *sp = &s->spill[d];
    json_object *spill = json_object_new_object(); /* WDDM: the driver paging memory to system RAM */
    add_i(spill, "overcommit", sp->current);
    add_i(spill, "events", (int64_t)sp->events);
    add_known(spill, "peak", sp->events > 0, sp->peak);
    add_known(spill, "pid", sp->events > 0, sp->pid);
    if (sp->events && sp->name[0])
        add_s(spill, "process", sp->name);
    else
        add_null(spill, "process");
    add_known(spill, "pushed_by", sp->events > 0, sp->pushed_by);
    json_object_object_add(o, "spill", spill);
    /* The booking areas: bytes booked there the ledger does not hold yet, the stocks held for them,
       and the most any one session may book now. */
    add_i(o, "booked", coord_fast_booked(s, d));
    add_i(o, "stock", coord_fast_inflight(s, d));
    add_i(o, "booking_limit", coord_fast_limit(s, d));
    json_object_object_add(o, "host_ram", coord_ram_json(s, d)); /* null for a card */
    return o;
}

/* The counters (coord_counters) and the admission latency histogram, cumulative as Prometheus reads it. */
static json_object *counters_json(const coord_counters *k)
{
    json_object *o = json_object_new_object();
    add_i(o, "admissions", (int64_t)k->admissions);
    add_i(o, "refusals", (int64_t)k->refusals);
    add_i(o, "asks", (int64_t)k->asks);
    add_i(o, "asks_busy", (int64_t)k->asks_busy);
    add_i(o, "bytes_asked", k->bytes_asked);
    add_i(o, "bytes_freed", k->bytes_freed);
    add_i(o, "idle_releases", (int64_t)k->idle_releases);
    add_i(o, "sessions_ended", (int64_t)k->sessions_ended);
    add_i(o, "sessions_died", (int64_t)k->sessions_died);
    json_object *h = json_object_new_object(), *bounds = json_object_new_array(), *counts = json_object_new_array();
    uint64_t cum = 0;
    for (int b = 0; b < COORD_LATENCY_BUCKETS; b++) {
        cum += k->latency_counts[b];
        json_object_array_add(bounds, json_object_new_double(coord_latency_bounds_s[b]));
        json_object_array_add(counts, json_object_new_int64((int64_t)cum));
    }
    cum += k->latency_counts[COORD_LATENCY_BUCKETS];
    json_object_object_add(h, "bounds_s", bounds);
    json_object_object_add(h, "counts", counts);
    add_i(h, "count", (int64_t)cum);
    json_object_object_add(h, "sum_s", json_object_new_double(k->latency_sum_s));
    json_object_object_add(o, "admission_latency", h);
    add_i(o, "spill_events", (int64_t)k->spill_events); /* overcommits started on WDDM cards (spill.c) */
    return o;
}

char *coord_status_json(comem_coord_srv *s)
{
    json_object *root = json_object_new_object();
    add_i(root, "schema", STATUS_SCHEMA);
    json_object *co = json_object_new_object();
    add_i(co, "pid", getpid());
    add_s(co, "socket", s->cfg.socket_path);
    add_s(co, "source", s->src ? s->src->name : "?");
    /* a client's SimCard() opens this to share the coordinator's simulated card (null on real cards) */
    json_object_object_add(co, "card_spec", s->src && s->src->spec ? json_object_new_string(s->src->spec) : NULL);
    json_object_object_add(co, "uptime_s", json_object_new_double(coord_now_s(s)));
    json_object_object_add(co, "started_by", s->cfg.started_by[0] ? json_object_new_string(s->cfg.started_by) : NULL);
    add_i(co, "sessions", (int64_t)s->ledger.sessions.used);
    add_b(co, "checking", s->ledger.checking);
    add_i(co, "checks", (int64_t)s->ledger.checks);
    add_i(co, "violations", (int64_t)s->ledger.violations);
    add_i(co, "asks_in_flight", (int64_t)s->asks.used);
    add_i(co, "requests_in_flight", (int64_t)s->jobs.used); /* admissions and pressure requests */
    add_s(co, "booking_area", s->book.off ? "off" : "on");
    add_i(co, "bookings_reconciled", (int64_t)s->book.reconciled);
    add_i(co, "booking_strikes", (int64_t)s->book.strikes);
    json_object_object_add(root, "coordinator", co);
    json_object_object_add(root, "counters", counters_json(&s->counters));
    json_object *pins = json_object_new_object();
    add_i(pins, "total", s->ledger.total_pinned);
    add_i(pins, "max", s->ledger.max_pinned);
    json_object_object_add(root, "pins", pins);
    status_index x;
    if (!index_build(s, &x)) {
        json_object_put(root);
        return NULL; /* no memory: the caller says it cannot build the status */
    }
    json_object *devs = json_object_new_array();
    for (int d = 0; d < s->ledger.n_devices; d++)
        json_object_array_add(devs, device_json(s, &x, d));
    index_free(&x);
    json_object_object_add(root, "devices", devs);
    json_object_object_add(root, "wddm", coord_wddm_json(s)); /* Windows: the processes' own WDDM readings */
    /* Added by issue 14: devices that are one card. */
    char warnings[16][COORD_WARNING_MAX];
    size_t nw = coord_device_warnings(s, warnings, 16);
    nw += coord_ram_warnings(s, warnings + nw, 16 - nw);
    json_object *ws = json_object_new_array();
    for (size_t i = 0; i < nw; i++)
        json_object_array_add(ws, json_object_new_string(warnings[i]));
    json_object_object_add(root, "warnings", ws);
    char *text = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return text;
}
