/*
 * client/tables.c - the local mirror's tables: holders, entries and grants,
 * each keyed by the client's own id and, once registered, by the
 * coordinator's id of the current connection. Every function runs under
 * c->lock. Arrays grow by doubling and shrink by moving the last record into
 * the hole, so a record pointer is valid only until the next add or remove.
 */
#include <stdlib.h>
#include <string.h>

#include "client/state.h"

/* Makes room for one more record of size `size` in *arr. */
static bool grow(void **arr, size_t n, size_t *cap, size_t size)
{
    if (n < *cap)
        return true;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *p = realloc(*arr, ncap * size);
    if (!p)
        return false;
    *arr = p;
    *cap = ncap;
    return true;
}

client_holder *comem_tab_holder(comem_client *c, uint64_t id)
{
    for (size_t i = 0; id && i < c->n_holders; i++)
        if (c->holders[i].id == id)
            return &c->holders[i];
    return NULL;
}

client_entry *comem_tab_entry(comem_client *c, uint64_t id)
{
    for (size_t i = 0; id && i < c->n_entries; i++)
        if (c->entries[i].id == id)
            return &c->entries[i];
    return NULL;
}

bool comem_tab_holder_live(const comem_client *c, const client_holder *h)
{
    return c->link != LINK_DOWN && h->coord_gen == c->gen;
}

bool comem_tab_entry_live(const comem_client *c, const client_entry *e)
{
    return c->link != LINK_DOWN && e->coord_gen == c->gen;
}

client_holder *comem_tab_holder_by_coord(comem_client *c, uint64_t coord_id)
{
    for (size_t i = 0; i < c->n_holders; i++)
        if (c->holders[i].coord_id == coord_id && comem_tab_holder_live(c, &c->holders[i]))
            return &c->holders[i];
    return NULL;
}

client_entry *comem_tab_entry_by_coord(comem_client *c, uint64_t coord_id)
{
    for (size_t i = 0; i < c->n_entries; i++)
        if (c->entries[i].coord_id == coord_id && comem_tab_entry_live(c, &c->entries[i]))
            return &c->entries[i];
    return NULL;
}

client_holder *comem_tab_add_holder(comem_client *c)
{
    if (!grow((void **)&c->holders, c->n_holders, &c->cap_holders, sizeof *c->holders))
        return NULL;
    client_holder *h = &c->holders[c->n_holders++];
    memset(h, 0, sizeof *h);
    h->id = ++c->next_id;
    return h;
}

client_entry *comem_tab_add_entry(comem_client *c)
{
    if (!grow((void **)&c->entries, c->n_entries, &c->cap_entries, sizeof *c->entries))
        return NULL;
    client_entry *e = &c->entries[c->n_entries++];
    memset(e, 0, sizeof *e);
    e->id = ++c->next_id;
    return e;
}

client_grant *comem_tab_add_grant(comem_client *c)
{
    if (!grow((void **)&c->grants, c->n_grants, &c->cap_grants, sizeof *c->grants))
        return NULL;
    client_grant *g = &c->grants[c->n_grants++];
    memset(g, 0, sizeof *g);
    g->id = ++c->next_id;
    return g;
}

void comem_tab_remove_entry(comem_client *c, uint64_t id)
{
    for (size_t i = 0; i < c->n_entries; i++) {
        if (c->entries[i].id == id) {
            c->entries[i] = c->entries[--c->n_entries];
            return;
        }
    }
}

void comem_tab_remove_holder(comem_client *c, uint64_t id)
{
    /* The coordinator drops a removed holder's entries with it; so does the mirror. */
    for (size_t i = 0; i < c->n_entries;) {
        if (c->entries[i].holder == id)
            c->entries[i] = c->entries[--c->n_entries];
        else
            i++;
    }
    for (size_t i = 0; i < c->n_holders; i++) {
        if (c->holders[i].id == id) {
            c->holders[i] = c->holders[--c->n_holders];
            return;
        }
    }
}

int comem_tab_take_grant(comem_client *c, uint64_t id, client_grant *out)
{
    for (size_t i = 0; id && i < c->n_grants; i++) {
        if (c->grants[i].id == id) {
            *out = c->grants[i];
            c->grants[i] = c->grants[--c->n_grants];
            return COMEM_OK;
        }
    }
    return COMEM_ENOENT;
}

void comem_tab_free(comem_client *c)
{
    free(c->holders);
    free(c->entries);
    free(c->grants);
    c->holders = NULL;
    c->entries = NULL;
    c->grants = NULL;
    c->n_holders = c->n_entries = c->n_grants = 0;
    c->cap_holders = c->cap_entries = c->cap_grants = 0;
}

uint32_t comem_tab_caps(comem_client *c)
{
    uint32_t caps = 0;
    for (size_t i = 0; i < c->n_holders; i++)
        caps |= c->holders[i].flags;
    return caps & COMEM_CAP_MASK;
}
