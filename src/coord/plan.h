/*
 * coord/plan.h - whom to ask for memory back (pure: reads the ledger, sends nothing).
 *
 * The eviction ladder over the machine's entries, the one test of who may be
 * asked now, and the holders as the arith planners see them.
 *
 * coord_plan_release walks the device's resident entries in ComfyUI's order
 * (ledger/order.h) through the eviction ladder (arith/evict.h), skipping
 * entries the requester must not be asked for: its own, those in its keep
 * list, those of holders that already said busy to this request, and those
 * of holders coord_may_ask refuses (they do not answer release asks, are busy
 * computing and do not release while busy, or recently let an ask pass its
 * deadline unanswered). It stops as soon as the shortfall is covered, so its
 * cost is the victims it walks, not the size of the machine's ledger.
 */
#ifndef COMEM_COORD_PLAN_H
#define COMEM_COORD_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/ledger.h"

typedef struct coord_plan_in {
    int device;
    uint64_t requester; /* its session: never asked */
    double need;        /* what must be free */
    double avail;       /* what is free now */
    const uint64_t *keep;
    size_t n_keep;
    const uint64_t *excluded; /* holders not to ask again */
    size_t n_excluded;
    int64_t now_ns; /* holders whose unanswered_until_ns is later are skipped */
} coord_plan_in;

typedef struct coord_planned {
    uint64_t entry, holder;
    int64_t bytes;
} coord_planned;

/*
 * May holder h be asked for a sized release now? It answers sized asks, is
 * not computing unless it releases while busy (comem_may_release_now, the rule
 * its own client answers by), and its process has not let an ask pass its
 * deadline without answering since (h->unanswered_until_ns, coord/asks.c):
 * waiting on it again would stall whoever asks. Admissions, pressure rounds and RELEASE requests all ask
 * by this one test.
 */
bool coord_may_ask(const ledger_holder *h, int64_t now_ns);

/*
 * A generic holder: one that answers release asks, has no entries, and
 * reports bytes it holds (its census overhead), which go to *bytes. It is
 * asked for those bytes as if it were one fully loaded entry (a planned row
 * with entry 0), in the order's place for its size.
 */
bool coord_generic_holder(const comem_ledger *l, uint64_t hid, const ledger_holder *h, int64_t *bytes);

/* Writes up to cap planned releases to out; returns how many (entry 0: a generic holder's bytes). */
size_t coord_plan_release(const comem_ledger *l, const coord_plan_in *in, coord_planned *out, size_t cap);

/*
 * The holders as arith/planners.h sees them (the idle, pressure and pin
 * planners): one row per holder in the planner's own struct, beside the
 * holder's id and its key (the id in hex: the planners break ties by key).
 * The planner's answer (asks, or indices) goes to out, which has room for
 * one per row. Built once per plan, with room for every holder the ledger has.
 */
typedef struct coord_roster {
    size_t n, cap;
    uint64_t *ids;    /* row -> the holder's id */
    char (*keys)[24]; /* row -> its key */
    void *rows;       /* cap rows of row_size bytes: comem_idle_holder, comem_release_holder, ... */
    size_t row_size;
    void *out;        /* room for cap comem_release_ask (or size_t) answers */
} coord_roster;

/* Makes room for every holder of l. False (and nothing to free) when out of memory. */
bool coord_roster_init(coord_roster *r, const comem_ledger *l, size_t row_size);
/* Appends holder id: returns its row, zeroed, with its key in *key; NULL when the roster is full. */
void *coord_roster_add(coord_roster *r, uint64_t id, const char **key);
void coord_roster_free(coord_roster *r);

/* The prompt the host is serving now, or NULL. Its holders are spared by idle release and pressure. */
const char *coord_current_prompt(const comem_ledger *l);

#endif
