/*
 * client/view.c - the coordinator's view as this session received it.
 *
 * With each HELLO_REPLY the coordinator shares a copy of its view frozen
 * against any write but its own mapping (shm/view.h, os/shm.h): unlike the view
 * file beside the socket, which any process of the user can write, nothing but
 * the coordinator changes it. It is mapped read-only and kept as the current
 * one; a reconnect maps the new coordinator's beside it, and a reader made by
 * comem_client_view follows whichever is current. Mappings are unmapped only
 * at close (a reader may be inside one).
 */
#include <stdlib.h>

#include "base/log.h"
#include "client/shared.h"

void comem_client_view_attach(comem_client *c)
{
    client_share share = c->view_share;
    c->view_share = (client_share){0};
    if (!share.named)
        return; /* a coordinator that could not make a sealed copy */
    comem_shm *m = comem_view_open_sealed(share.t);
    if (!m)
        return;
    pthread_mutex_lock(&c->lock);
    comem_shm **all = realloc(c->views_all, (c->n_views + 1) * sizeof *all);
    if (all) {
        c->views_all = all;
        all[c->n_views++] = m;
        atomic_store_explicit(&c->view, (const comem_view_shared *)comem_shm_addr(m), memory_order_release);
    }
    pthread_mutex_unlock(&c->lock);
    if (!all)
        comem_shm_close(m);
}

void comem_client_view_free(comem_client *c)
{
    atomic_store(&c->view, NULL);
    for (size_t i = 0; i < c->n_views; i++)
        comem_shm_close(c->views_all[i]);
    free(c->views_all);
    c->views_all = NULL;
    c->n_views = 0;
}

int comem_client_view(comem_client *c, comem_view **out)
{
    int owned = comem_client_owned(c);
    if (owned != COMEM_OK)
        return owned;
    if (!out)
        return COMEM_EINVAL;
    *out = comem_view_bound(&c->view);
    return *out ? COMEM_OK : COMEM_ENOMEM;
}
