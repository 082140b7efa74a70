/* coord/plan.c - ComfyUI's eviction ladder over the machine's entries, and whom it may ask. */
#include "coord/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arith/evict.h"
#include "arith/planners.h"
#include "wire/wire.h"

/* A holder with no entries that reports bytes (overhead): a candidate of its own. */
typedef struct generic {
    uint64_t holder;
    int64_t bytes;
} generic;

typedef struct walk {
    const comem_ledger *l;
    const coord_plan_in *in;
    comem_order_iter it;
    bool have_entry; /* the order's next entry, looked ahead to merge with the generic holders */
    uint64_t next_eid;
    const ledger_entry *next_e;
    generic *gen; /* sorted as the order sorts: smallest first */
    size_t n_gen, gen_pos;
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

/* The next eligible entry of the order, looked ahead into w. */
static void peek_entry(walk *w)
{
    while (!w->have_entry && comem_order_next(&w->it, &w->next_eid, &w->next_e))
        w->have_entry = eligible(w, w->next_eid, w->next_e);
}

/*
 * A generic holder stands in the order as a fully loaded entry of its bytes
 * with no references reported and the oldest load: it goes before the
 * entries it ties with only on size (ComfyUI's order ranks offloaded bytes
 * first, and such a holder has none to offer).
 */
static bool generic_first(const walk *w)
{
    if (w->gen_pos >= w->n_gen)
        return false;
    if (!w->have_entry)
        return true;
    const generic *g = &w->gen[w->gen_pos];
    const ledger_entry stand_in = {.size = g->bytes, .resident = g->bytes, .refs = 0, .last_use_ns = INT64_MIN};
    return comem_order_key_cmp(&stand_in, w->next_e) < 0; /* the order's own key (ledger/order.c) */
}

static bool next(void *u, size_t *index, comem_evict_entry *out)
{
    walk *w = u;
    peek_entry(w);
    *index = 0; /* the ladder acts on a candidate before asking for the next */
    if (generic_first(w)) {
        const generic *g = &w->gen[w->gen_pos++];
        w->cur_entry = 0;
        w->cur_holder = g->holder;
        w->cur_resident = g->bytes;
        *out = (comem_evict_entry){.size = g->bytes, .loaded = g->bytes, .device = w->in->device};
        return true;
    }
    if (!w->have_entry)
        return false;
    const ledger_entry *e = w->next_e;
    w->have_entry = false;
    w->cur_entry = w->next_eid;
    w->cur_holder = e->holder;
    w->cur_resident = e->resident;
    *out = (comem_evict_entry){.size = e->size, .loaded = e->resident, .refs = e->refs, .device = w->in->device};
    return true;
}

static int generic_cmp(const void *a, const void *b)
{
    const generic *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? -1 : 1;
    return x->holder < y->holder ? -1 : (x->holder > y->holder);
}

bool coord_generic_holder(const comem_ledger *l, uint64_t hid, const ledger_holder *h, int64_t *bytes)
{
    (void)l;
    (void)hid;
    if (!h->census_seen || h->overhead <= 0 || !(h->flags & COMEM_CAP_RELEASE) || h->n_entries > 0)
        return false;
    *bytes = h->overhead;
    return true;
}

/* The device's generic holders the requester may ask, sorted; NULL (none) when there are none. */
static generic *generics(const comem_ledger *l, const coord_plan_in *in, size_t *n)
{
    *n = 0;
    generic *g = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < comem_slab_slots(&l->holders); i++) {
        uint64_t hid;
        const ledger_holder *h = comem_slab_at(&l->holders, i, &hid);
        int64_t bytes;
        if (!h || h->device != in->device || h->session == in->requester || h->overhead <= 0 ||
            !coord_may_ask(h, in->now_ns) || listed(in->excluded, in->n_excluded, hid) ||
            !coord_generic_holder(l, hid, h, &bytes))
            continue;
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            generic *ng = realloc(g, nc * sizeof *ng);
            if (!ng)
                break; /* out of memory: plan with those found so far */
            g = ng;
            cap = nc;
        }
        g[(*n)++] = (generic){hid, bytes};
    }
    if (*n > 1)
        qsort(g, *n, sizeof *g, generic_cmp);
    return g;
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
    w.gen = generics(l, in, &w.n_gen);
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
    free(w.gen);
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
