/*
 * coord/wddm.c - what each process reads of WDDM for itself, added up per adapter (Windows).
 *
 * Under WDDM the operating system gives each process a budget of a card's memory, and CUDA's free
 * reading in a process is about that budget, not the card (probe/wddm.h). Only DXGI, inside each
 * process, says how much of an adapter that process uses. So every client on Windows reports its
 * own budget and usage per adapter (WDDM, not replied to: a node's end sends it) and the
 * coordinator keeps each session's last report and sums them per adapter, named by LUID: what the
 * joined processes use of each card, which no one process can read. A session's report goes with
 * its connection.
 *
 * A process that runs CUDA names each adapter's CUDA device too (its UUID: probe/cuda_luid.h), and
 * that is the coordinator's device with the same UUID. There the report gives what the card does
 * not: NVML under WDDM lists no process's usage, so a process's context floor (what it holds beyond
 * its entries and grants, measure.c) is what it used beyond what the ledger saw it hold when it
 * reported. Later registrations of bytes it had allocated without a grant come off that, down to a
 * context, until it reports again (coord_wddm_registered).
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arith/cross_reserve.h" /* COMEM_CONTEXT_FLOOR */
#include "base/bytes.h"
#include "coord/coord_internal.h"

/* The card with this UUID among ours, host RAM aside; -1: none (or no UUID). */
static int device_named(const comem_coord_srv *s, const char *uuid)
{
    for (int d = 0; uuid[0] && d < s->ledger.n_devices; d++)
        if (d != s->ram_index && !strcmp(s->ledger.devices[d].uuid, uuid))
            return d;
    return -1;
}

/* The devices a report names are read again: the floors there follow it. */
static void devices_changed(comem_coord_srv *s, const conn *c)
{
    for (uint16_t k = 0; k < c->n_wddm; k++)
        if (c->wddm[k].device >= 0)
            coord_card_changed(s, c->wddm[k].device);
}

static bool names_a_device(const conn *c)
{
    for (uint16_t k = 0; k < c->n_wddm; k++)
        if (c->wddm[k].device >= 0)
            return true;
    return false;
}

void coord_wddm_forget(comem_coord_srv *s, conn *c)
{
    devices_changed(s, c);
    if (names_a_device(c))
        s->wddm_reports--;
    c->n_wddm = 0;
}

void coord_wddm(comem_coord_srv *s, conn *c, const comem_msg_wddm *m)
{
    if (!c->session)
        return; /* before HELLO the frame is refused elsewhere; nothing to keep */
    coord_wddm_forget(s, c);
    for (uint16_t i = 0; i < m->n; i++) {
        const comem_wire_wddm *w = &m->items[i];
        uint16_t k = 0; /* an adapter named twice keeps its last figures */
        while (k < c->n_wddm && c->wddm[k].luid != w->luid)
            k++;
        int n = 1, device = device_named(s, w->uuid);
        int64_t held = device >= 0 ? comem_ledger_process_held(&s->ledger, c->session, device, &n) : 0;
        c->wddm[k] = (coord_wddm_item){.luid = w->luid, .budget = w->budget, .usage = w->usage, .device = device,
                                       .held = held};
        if (k == c->n_wddm)
            c->n_wddm++;
    }
    if (names_a_device(c))
        s->wddm_reports++;
    devices_changed(s, c);
    c->wddm_at_s = coord_now_s(s);
}

/* The newest report on device of pid's process among its sessions (an embedding process has several,
   and DXGI reads the same process's figures in each); NULL when none names device. */
static coord_wddm_item *newest_of(comem_coord_srv *s, int32_t pid, int device)
{
    coord_wddm_item *best = NULL;
    double at = 0;
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        conn *c = s->conns[i];
        if (!c || !c->session || c->pid != pid || (best && c->wddm_at_s < at))
            continue;
        for (uint16_t k = 0; k < c->n_wddm; k++)
            if (c->wddm[k].device == device) {
                best = &c->wddm[k];
                at = c->wddm_at_s;
            }
    }
    return best;
}

int64_t coord_wddm_overhead(comem_coord_srv *s, uint64_t session, int device)
{
    const ledger_session *ss = comem_ledger_session(&s->ledger, session);
    const coord_wddm_item *w = ss ? newest_of(s, ss->pid, device) : NULL;
    return w ? comem_clamp0(comem_sub(w->usage, w->held)) : -1;
}

void coord_wddm_registered(comem_coord_srv *s, uint64_t session, int device, int64_t bytes)
{
    const ledger_session *ss = s->wddm_reports && bytes > 0 ? comem_ledger_session(&s->ledger, session) : NULL;
    coord_wddm_item *w = ss ? newest_of(s, ss->pid, device) : NULL;
    if (!w)
        return;
    int64_t beyond_context = comem_clamp0(comem_sub(comem_sub(w->usage, w->held), COMEM_CONTEXT_FLOOR));
    int64_t gone = comem_min(bytes, beyond_context);
    if (gone <= 0)
        return;
    w->held = comem_add(w->held, gone);
    coord_card_changed(s, device); /* the floors follow at the next reading */
}

/* One session's figures for one adapter: where they are kept. */
typedef struct report {
    uint64_t luid;
    int conn;
    uint16_t k;
} report;

static int by_luid(const void *a, const void *b)
{
    const report *x = a, *y = b;
    if (x->luid != y->luid)
        return x->luid < y->luid ? -1 : 1;
    return (x->conn > y->conn) - (x->conn < y->conn);
}

/* One process's report on one adapter. */
static json_object *process_json(comem_coord_srv *s, const conn *c, const coord_wddm_item *w, double now)
{
    const ledger_session *ss = comem_ledger_session(&s->ledger, c->session);
    char id[24];
    snprintf(id, sizeof id, "%llx", (unsigned long long)c->session);
    json_object *p = json_object_new_object();
    json_object_object_add(p, "session", json_object_new_string(id));
    json_object_object_add(p, "pid", json_object_new_int64(c->pid));
    json_object_object_add(p, "name", json_object_new_string(ss ? ss->name : ""));
    json_object_object_add(p, "budget", json_object_new_int64(w->budget));
    json_object_object_add(p, "usage", json_object_new_int64(w->usage));
    json_object_object_add(p, "device", w->device >= 0 ? json_object_new_int(w->device) : NULL);
    int64_t beyond = comem_clamp0(comem_sub(w->usage, w->held)); /* its context floor's source (measure.c) */
    json_object_object_add(p, "beyond_ledger", w->device >= 0 ? json_object_new_int64(beyond) : NULL);
    json_object_object_add(p, "age_s", json_object_new_double(now - c->wddm_at_s));
    return p;
}

json_object *coord_wddm_json(comem_coord_srv *s)
{
    json_object *out = json_object_new_array();
    size_t n = 0;
    for (int i = 0; i < COORD_MAX_CONNS; i++)
        n += s->conns[i] && s->conns[i]->session ? s->conns[i]->n_wddm : 0;
    report *r = n ? malloc(n * sizeof *r) : NULL;
    if (!r)
        return out; /* nothing reported, or no memory for the list: none listed */
    n = 0;
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        const conn *c = s->conns[i];
        for (uint16_t k = 0; c && c->session && k < c->n_wddm; k++)
            r[n++] = (report){c->wddm[k].luid, i, k};
    }
    qsort(r, n, sizeof *r, by_luid); /* adapters in LUID order, each one's processes together */
    double now = coord_now_s(s);
    for (size_t j = 0; j < n;) {
        json_object *a = json_object_new_object(), *procs = json_object_new_array();
        char luid[24];
        snprintf(luid, sizeof luid, "0x%016llx", (unsigned long long)r[j].luid);
        json_object_object_add(a, "luid", json_object_new_string(luid));
        int64_t usage = 0;
        int device = -1; /* the card its reports name (the first that names one) */
        size_t end = j;
        for (; end < n && r[end].luid == r[j].luid; end++) {
            const conn *c = s->conns[r[end].conn];
            const coord_wddm_item *w = &c->wddm[r[end].k];
            json_object_array_add(procs, process_json(s, c, w, now));
            usage = comem_add(usage, w->usage);
            if (device < 0)
                device = w->device;
        }
        json_object_object_add(a, "device", device >= 0 ? json_object_new_int(device) : NULL);
        json_object_object_add(a, "usage", json_object_new_int64(usage));
        json_object_object_add(a, "processes", procs);
        json_object_array_add(out, a);
        j = end;
    }
    free(r);
    return out;
}
