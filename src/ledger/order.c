/* ledger/order.c - the per-device eviction-order treap over the entry slab. */
#include "ledger/order.h"

#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "ledger/ledger.h"

static ledger_entry *at(const comem_ledger *l, uint32_t node)
{
    return comem_slab_at(&l->entries, node - 1, NULL);
}

/* A tier's place: RAM-cache entries first, file-backed copies next, everything else last. */
static int tier_rank(uint8_t tier) { return tier == LEDGER_TIER_CACHE ? 0 : tier == LEDGER_TIER_FILE ? 1 : 2; }

int comem_order_key_cmp(const ledger_entry *x, const ledger_entry *y)
{
    if (x->tier != y->tier)
        return tier_rank(x->tier) < tier_rank(y->tier) ? -1 : 1; /* cheapest to get back first (host RAM) */
    int64_t ox = comem_sub(x->size, x->resident), oy = comem_sub(y->size, y->resident);
    if (ox != oy)
        return ox > oy ? -1 : 1; /* most offloaded first */
    if (x->refs != y->refs)
        return x->refs < y->refs ? -1 : 1; /* then fewest references */
    if (x->size != y->size)
        return x->size < y->size ? -1 : 1; /* then smallest */
    if (x->last_use_ns != y->last_use_ns)
        return x->last_use_ns > y->last_use_ns ? -1 : 1; /* then most recently loaded */
    return 0;
}

/* The order's total key: ComfyUI's, then the node (slot) for keys that tie exactly. */
static int key_cmp(const comem_ledger *l, uint32_t a, uint32_t b)
{
    int k = comem_order_key_cmp(at(l, a), at(l, b));
    return k ? k : a < b ? -1 : (a > b);
}

static bool reserve_nodes(comem_order_nodes *n, size_t want)
{
    if (want <= n->cap)
        return true;
    size_t cap = n->cap ? n->cap : 64;
    while (cap < want)
        cap *= 2;
    uint32_t *l = realloc(n->left, cap * sizeof *l), *r = NULL, *p = NULL;
    if (l)
        n->left = l;
    r = l ? realloc(n->right, cap * sizeof *r) : NULL;
    if (r)
        n->right = r;
    p = r ? realloc(n->prio, cap * sizeof *p) : NULL;
    if (!p)
        return false;
    n->prio = p;
    memset(n->left + n->cap, 0, (cap - n->cap) * sizeof *l);
    memset(n->right + n->cap, 0, (cap - n->cap) * sizeof *r);
    n->cap = cap;
    return true;
}

static uint32_t next_prio(comem_order_nodes *n)
{
    uint32_t x = n->seed ? n->seed : 0x9e3779b9u; /* xorshift32: cheap, and balance needs nothing better */
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return n->seed = x;
}

/* Node indices are slot + 1; arrays are indexed by node - 1. */
#define L(n, x) ((n)->left[(x) - 1])
#define R(n, x) ((n)->right[(x) - 1])
#define P(n, x) ((n)->prio[(x) - 1])

static uint32_t insert(comem_ledger *l, uint32_t root, uint32_t node)
{
    comem_order_nodes *n = &l->order_nodes;
    if (!root)
        return node;
    if (key_cmp(l, node, root) < 0) {
        L(n, root) = insert(l, L(n, root), node);
        if (P(n, L(n, root)) > P(n, root)) { /* rotate right */
            uint32_t c = L(n, root);
            L(n, root) = R(n, c);
            R(n, c) = root;
            return c;
        }
    } else {
        R(n, root) = insert(l, R(n, root), node);
        if (P(n, R(n, root)) > P(n, root)) { /* rotate left */
            uint32_t c = R(n, root);
            R(n, root) = L(n, c);
            L(n, c) = root;
            return c;
        }
    }
    return root;
}

/* Joins two treaps whose keys are all ordered (every key of a before every key of b). */
static uint32_t join(comem_order_nodes *n, uint32_t a, uint32_t b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (P(n, a) > P(n, b)) {
        R(n, a) = join(n, R(n, a), b);
        return a;
    }
    L(n, b) = join(n, a, L(n, b));
    return b;
}

static uint32_t erase(comem_ledger *l, uint32_t root, uint32_t node, bool *found)
{
    comem_order_nodes *n = &l->order_nodes;
    if (!root)
        return 0;
    if (root == node) {
        *found = true;
        return join(n, L(n, root), R(n, root));
    }
    if (key_cmp(l, node, root) < 0)
        L(n, root) = erase(l, L(n, root), node, found);
    else
        R(n, root) = erase(l, R(n, root), node, found);
    return root;
}

void comem_order_insert(comem_ledger *l, uint64_t entry_id)
{
    ledger_entry *e = comem_slab_get(&l->entries, entry_id);
    if (!e || e->resident <= 0 || e->ordered)
        return;
    uint32_t node = (uint32_t)(entry_id & 0xffffffffu); /* slot + 1 */
    comem_order_nodes *n = &l->order_nodes;
    if (!reserve_nodes(n, node)) {
        l->order_broken = true; /* out of memory: planners fall back to a full scan */
        return;
    }
    L(n, node) = R(n, node) = 0;
    P(n, node) = next_prio(n);
    l->order_root[e->device] = insert(l, l->order_root[e->device], node);
    e->ordered = true;
}

void comem_order_remove(comem_ledger *l, uint64_t entry_id)
{
    ledger_entry *e = comem_slab_get(&l->entries, entry_id);
    if (!e || !e->ordered)
        return;
    bool found = false;
    uint32_t node = (uint32_t)(entry_id & 0xffffffffu);
    l->order_root[e->device] = erase(l, l->order_root[e->device], node, &found);
    if (!found)
        l->order_broken = true; /* a key changed behind the ledger's back */
    e->ordered = false;
}

void comem_order_fini(comem_order_nodes *n)
{
    free(n->left);
    free(n->right);
    free(n->prio);
    memset(n, 0, sizeof *n);
}

static void push_left(comem_order_iter *it, uint32_t node)
{
    const comem_order_nodes *n = &it->l->order_nodes;
    while (node && it->top < (int)(sizeof it->stack / sizeof it->stack[0])) {
        it->stack[it->top++] = node;
        node = L(n, node);
    }
}

void comem_order_begin(const comem_ledger *l, int device, comem_order_iter *it)
{
    it->l = l;
    it->top = 0;
    push_left(it, l->order_root[device]);
}

bool comem_order_next(comem_order_iter *it, uint64_t *id, const ledger_entry **entry)
{
    if (it->top == 0)
        return false;
    uint32_t node = it->stack[--it->top];
    push_left(it, R(&it->l->order_nodes, node));
    *entry = comem_slab_at(&it->l->entries, node - 1, id);
    return *entry != NULL;
}
