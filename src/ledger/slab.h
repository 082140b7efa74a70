/*
 * ledger/slab.h - fixed-size records addressed by generational ids.
 *
 * An id is (generation << 32) | (slot + 1): 0 is never an id, and an id whose
 * record was freed and reused no longer resolves (its generation is stale).
 * Lookup is O(1); iteration walks the slots in order. Not thread-safe: the
 * ledger is touched only from the coordinator's loop.
 */
#ifndef COMEM_LEDGER_SLAB_H
#define COMEM_LEDGER_SLAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct comem_slab {
    size_t rec_size;
    size_t cap, used;  /* slots allocated, slots in use */
    uint8_t *recs;     /* cap * rec_size bytes */
    uint32_t *gen;     /* generation per slot; odd = in use */
    uint32_t *free_list;
    size_t n_free;
} comem_slab;

void comem_slab_init(comem_slab *s, size_t rec_size);
void comem_slab_fini(comem_slab *s);

/* A zeroed record and its id, or NULL when memory runs out. */
void *comem_slab_alloc(comem_slab *s, uint64_t *id);
void comem_slab_free(comem_slab *s, uint64_t id);
/* The live record with this id, or NULL. */
void *comem_slab_get(const comem_slab *s, uint64_t id);

/* Iteration: slots 0..cap; the record at slot i if live, else NULL; its id. */
static inline size_t comem_slab_slots(const comem_slab *s) { return s->cap; }
void *comem_slab_at(const comem_slab *s, size_t slot, uint64_t *id);
/* The slot an id names (live or not): an index for arrays kept beside the slab. */
static inline size_t comem_slab_slot(uint64_t id) { return (size_t)(uint32_t)id - 1; }

#endif
