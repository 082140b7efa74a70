/*
 * ledger/order.h - each device's resident entries, kept in eviction order.
 *
 * ComfyUI's free_memory sorts its candidates on every call; across a whole
 * machine (64 processes x 1000 entries) that sort alone would cost
 * milliseconds per admission. The ledger instead keeps, per device, a treap
 * (a binary search tree balanced by random priorities) of the entries that
 * hold resident bytes, keyed as ComfyUI's order across processes, after the
 * entry's tier (host RAM: RAM-cache entries, then copies a file can give back,
 * then the rest; every card entry is of the last tier, so cards keep
 * ComfyUI's order alone):
 *
 *   most offloaded first (size - resident, descending), then fewest
 *   references (the refcount each holder reports in its census), then
 *   smallest size, then most recently used (ComfyUI's index 0), then id.
 *
 * Every change to a key field goes through the ledger, which takes the entry
 * out before the change and puts it back after (O(log n) each). A planner
 * walks the tree in order and stops as soon as the shortfall is covered.
 *
 * Nodes live in arrays parallel to the entry slab, indexed by slot + 1
 * (0 is "none"), grown as the slab grows.
 */
#ifndef COMEM_LEDGER_ORDER_H
#define COMEM_LEDGER_ORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct comem_ledger;
struct ledger_entry;

typedef struct comem_order_nodes {
    uint32_t *left, *right, *prio;
    size_t cap;
    uint32_t seed;
} comem_order_nodes;

/*
 * ComfyUI's key (-offloaded, refs, size, -last use) on two entries: < 0 when
 * x goes before y, 0 when the key ties (the order then falls back on slots).
 */
int comem_order_key_cmp(const struct ledger_entry *x, const struct ledger_entry *y);
/* Puts the entry in its device's order if it holds resident bytes. */
void comem_order_insert(struct comem_ledger *l, uint64_t entry_id);
/* Takes the entry out of its device's order (call before changing its key fields). */
void comem_order_remove(struct comem_ledger *l, uint64_t entry_id);
void comem_order_fini(comem_order_nodes *n);

/* In-order iteration over one device's resident entries. */
typedef struct comem_order_iter {
    const struct comem_ledger *l;
    uint32_t stack[128];
    int top;
} comem_order_iter;

void comem_order_begin(const struct comem_ledger *l, int device, comem_order_iter *it);
/* The next entry in eviction order, or false when there is none. */
bool comem_order_next(comem_order_iter *it, uint64_t *id, const struct ledger_entry **entry);

#endif
