/* coord/plan.c - ComfyUI's eviction ladder over the machine's entries, and whom it may ask. */
#include "coord/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arith/evict.h"
#include "arith/planners.h"
#include "wire/wire.h"

typedef struct walk {
    const comem_ledger *l;
    const coord_plan_in *in;
    comem_order_iter it;
    coord_planned *out;
    size_t n_out, cap;
    double planned;
    /* the candidate handed to the ladder last, by index (the ladder refers to it by that) */
    uint64_t cur_entry, cur_holder;
    int64_t cur_resident;
} walk;

static bool listed(const uint64_t *ids, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

bool coord_may_ask(const ledger_holder *h, int64_t now_ns)
{
    bool answers = (h->flags & COMEM_CAP_RELEASE) != 0, while_busy = (h->flags & COMEM_CAP_WHILE_BUSY) != 0;
    return comem_may_release_now(answers, h->busy, while_busy) && now_ns >= h->unanswered_until_ns;
}

static bool eligible(const walk *w, uint64_t eid, const ledger_entry *e)
{
    if (e->session == w->in->requester || listed(w->in->keep, w->in->n_keep, eid))
        return false;
    const ledger_holder *h = comem_slab_get(&w->l->holders, e->holder);
    if (!h || !coord_may_ask(h, w->in->now_ns))
        return false;
    return !listed(w->in->excluded, w->in->n_excluded, e->holder);
}

static bool next(void *u, size_t *index, comem_evict_entry *out)
{
    walk *w = u;
    uint64_t eid;
    const ledger_entry *e;
    while (comem_order_next(&w->it, &eid, &e)) {
        if (!eligible(w, eid, e))
            continue;
        w->cur_entry = eid;
        w->cur_holder = e->holder;
        w->cur_resident = e->resident;
        *index = 0; /* the ladder acts on a candidate before asking for the next */
        *out = (comem_evict_entry){.size = e->size, .loaded = e->resident, .refs = e->refs, .device = w->in->device};
        return true;
    }
    return false;
}

static double free_now(void *u)
{
    walk *w = u;
    return w->in->avail + w->planned;
}

static void record(walk *w, int64_t bytes)
{
    if (w->n_out < w->cap)
        w->out[w->n_out++] = (coord_planned){w->cur_entry, w->cur_holder, bytes};
    w->planned += (double)bytes;
}

static double partial(void *u, size_t i, double to_free)
{
    (void)i;
    int64_t bytes = (int64_t)ceil(to_free); /* whole bytes: at least what the ladder asked */
    record(u, bytes);
    return (double)bytes;
}

static void detach(void *u, size_t i)
{
    (void)i;
    walk *w = u;
    record(w, w->cur_resident);
}

size_t coord_plan_release(const comem_ledger *l, const coord_plan_in *in, coord_planned *out, size_t cap)
{
    walk w = {.l = l, .in = in, .out = out, .cap = cap};
    comem_order_begin(l, in->device, &w.it);
    comem_evict_request req = {.required = in->need, .device = in->device, .smart_memory = true,
                               .stop_when_covered = true};
    comem_evict_walk_ops ops = {next, free_now, partial, detach, &w};
    comem_evict_action actions[64]; /* the ladder's record; the plan itself is in out[] */
    comem_evict_result res;
    size_t total = 0;
    do { /* more victims than one batch of actions: keep walking where it stopped */
        req.required = in->need;
        if (comem_evict_walk(&req, &ops, actions, sizeof actions / sizeof actions[0], &res) != 0)
            break;
        total += res.n_actions;
    } while (res.n_actions == sizeof actions / sizeof actions[0] && w.n_out < cap);
    (void)total;
    return w.n_out;
}

/* ---- the holders as the arith planners see them ---- */

bool coord_roster_init(coord_roster *r, const comem_ledger *l, size_t row_size)
{
    size_t cap = l->holders.used + 1;
    size_t out_size = sizeof(comem_release_ask) > sizeof(size_t) ? sizeof(comem_release_ask) : sizeof(size_t);
    *r = (coord_roster){.cap = cap, .row_size = row_size};
    r->ids = malloc(cap * sizeof *r->ids);
    r->keys = malloc(cap * sizeof *r->keys);
    r->rows = malloc(cap * row_size);
    r->out = malloc(cap * out_size);
    if (r->ids && r->keys && r->rows && r->out)
        return true;
    coord_roster_free(r);
    return false;
}

void *coord_roster_add(coord_roster *r, uint64_t id, const char **key)
{
    if (r->n == r->cap)
        return NULL;
    size_t i = r->n++;
    snprintf(r->keys[i], sizeof r->keys[i], "%016llx", (unsigned long long)id);
    r->ids[i] = id;
    *key = r->keys[i];
    void *row = (char *)r->rows + i * r->row_size;
    memset(row, 0, r->row_size);
    return row;
}

void coord_roster_free(coord_roster *r)
{
    free(r->ids);
    free(r->keys);
    free(r->rows);
    free(r->out);
    *r = (coord_roster){0};
}

const char *coord_current_prompt(const comem_ledger *l)
{
    for (size_t i = 0; i < comem_slab_slots(&l->sessions); i++) {
        const ledger_session *ss = comem_slab_at(&l->sessions, i, NULL);
        if (ss && ss->role == COMEM_ROLE_HOST && ss->prompt[0])
            return ss->prompt;
    }
    return NULL;
}
