/* ledger/slab.c - generational id slab. */
#include "ledger/slab.h"

#include <stdlib.h>
#include <string.h>

void comem_slab_init(comem_slab *s, size_t rec_size)
{
    memset(s, 0, sizeof *s);
    s->rec_size = rec_size;
}

void comem_slab_fini(comem_slab *s)
{
    free(s->recs);
    free(s->gen);
    free(s->free_list);
    memset(s, 0, sizeof *s);
}

static bool grow(comem_slab *s)
{
    size_t cap = s->cap ? s->cap * 2 : 64;
    uint8_t *r = realloc(s->recs, cap * s->rec_size);
    if (!r)
        return false;
    s->recs = r;
    uint32_t *g = realloc(s->gen, cap * sizeof *g);
    if (!g)
        return false;
    s->gen = g;
    uint32_t *f = realloc(s->free_list, cap * sizeof *f);
    if (!f)
        return false;
    s->free_list = f;
    for (size_t i = cap; i-- > s->cap;) {
        s->gen[i] = 0;
        s->free_list[s->n_free++] = (uint32_t)i;
    }
    s->cap = cap;
    return true;
}

void *comem_slab_alloc(comem_slab *s, uint64_t *id)
{
    if (s->n_free == 0 && !grow(s))
        return NULL;
    uint32_t slot = s->free_list[--s->n_free];
    s->gen[slot]++; /* odd: live */
    s->used++;
    void *rec = s->recs + (size_t)slot * s->rec_size;
    memset(rec, 0, s->rec_size);
    *id = ((uint64_t)s->gen[slot] << 32) | ((uint64_t)slot + 1);
    return rec;
}

static bool resolve(const comem_slab *s, uint64_t id, size_t *slot)
{
    uint64_t low = id & 0xffffffffu;
    if (low == 0 || low > s->cap)
        return false;
    *slot = (size_t)low - 1;
    return (s->gen[*slot] & 1u) && s->gen[*slot] == (uint32_t)(id >> 32);
}

void comem_slab_free(comem_slab *s, uint64_t id)
{
    size_t slot;
    if (!resolve(s, id, &slot))
        return;
    s->gen[slot]++; /* even: free, and old ids stop resolving */
    s->used--;
    s->free_list[s->n_free++] = (uint32_t)slot;
}

void *comem_slab_get(const comem_slab *s, uint64_t id)
{
    size_t slot;
    return resolve(s, id, &slot) ? s->recs + slot * s->rec_size : NULL;
}

void *comem_slab_at(const comem_slab *s, size_t slot, uint64_t *id)
{
    if (slot >= s->cap || !(s->gen[slot] & 1u))
        return NULL;
    if (id)
        *id = ((uint64_t)s->gen[slot] << 32) | ((uint64_t)slot + 1);
    return s->recs + slot * s->rec_size;
}
