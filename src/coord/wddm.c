/*
 * coord/wddm.c - what each process reads of WDDM for itself, added up per adapter (Windows).
 *
 * Under WDDM the operating system gives each process a budget of a card's memory, and CUDA's free
 * reading in a process is about that budget, not the card (probe/wddm.h). Only DXGI, inside each
 * process, says how much of an adapter that process uses. So every client on Windows reports its
 * own budget and usage per adapter (WDDM, not replied to: a node's end sends it) and the
 * coordinator keeps each session's last report and sums them per adapter, named by LUID: what the
 * joined processes use of each card, which no one process can read. A session's report goes with
 * its connection. Which of the coordinator's devices an adapter is (its LUID against the CUDA
 * device's) is not matched yet: the status lists adapters by LUID (docs/windows.md).
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/bytes.h"
#include "coord/coord_internal.h"

void coord_wddm(comem_coord_srv *s, conn *c, const comem_msg_wddm *m)
{
    if (!c->session)
        return; /* before HELLO the frame is refused elsewhere; nothing to keep */
    c->n_wddm = 0;
    for (uint16_t i = 0; i < m->n; i++) {
        uint16_t k = 0; /* an adapter named twice keeps its last figures */
        while (k < c->n_wddm && c->wddm[k].luid != m->items[i].luid)
            k++;
        c->wddm[k] = m->items[i];
        if (k == c->n_wddm)
            c->n_wddm++;
    }
    c->wddm_at_s = coord_now_s(s);
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
static json_object *process_json(comem_coord_srv *s, const conn *c, const comem_wire_wddm *w, double now)
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
        size_t end = j;
        for (; end < n && r[end].luid == r[j].luid; end++) {
            const conn *c = s->conns[r[end].conn];
            json_object_array_add(procs, process_json(s, c, &c->wddm[r[end].k], now));
            usage = comem_add(usage, c->wddm[r[end].k].usage);
        }
        json_object_object_add(a, "usage", json_object_new_int64(usage));
        json_object_object_add(a, "processes", procs);
        json_object_array_add(out, a);
        j = end;
    }
    free(r);
    return out;
}
