/*
 * client/pending.c - requests waiting for replies: a list keyed by request
 * id, one condition variable per waiter, and the rules for what happens to a
 * reply when nobody waits any more (client/request.h). The wait itself is the
 * reader's (client/reader.c).
 *
 * Lifetimes: a waiting record belongs to its waiter, which unlinks and frees
 * it after it wakes (reply, timeout, or the connection's end). A detached
 * record (an add sent from the service thread, or an add whose caller timed
 * out) stays so that its id reply can still be applied; so does a pin acquire
 * whose caller timed out, so that a late grant can be given back. The reader
 * (client/reader.c) unlinks and frees those when the reply comes, or the
 * service thread when the connection ends. Other late replies match nothing
 * and are dropped (the reader gives a late grant back). Everything here runs
 * under c->lock except the send (comem_req_send).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/hops.h"
#include "client/conn.h"
#include "client/request.h"

/* Status text above this is refused: the coordinator's snapshot is a few KiB. */
#define STATUS_TEXT_MAX ((uint32_t)64 << 20)

static void unlink_pending(comem_client *c, client_pending *p)
{
    for (client_pending **pp = &c->pending; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            return;
        }
    }
}

static void free_pending(client_pending *p)
{
    pthread_cond_destroy(&p->cond);
    free(p->text);
    free(p);
}

/* The add did not happen on this connection: let the resync try again. */
static void clear_adding(comem_client *c, const client_pending *p)
{
    if (p->kind == PEND_HOLDER_ADD) {
        client_holder *h = comem_tab_holder(c, p->obj);
        if (h && h->adding_gen == p->gen)
            h->adding_gen = 0;
    } else if (p->kind == PEND_ENTRY_ADD) {
        client_entry *e = comem_tab_entry(c, p->obj);
        if (e && e->adding_gen == p->gen)
            e->adding_gen = 0;
    }
}

int comem_req_begin(comem_client *c, client_req *r, pend_kind kind, uint64_t obj, uint64_t snap, bool await)
{
    r->gen = c->gen;
    r->id = comem_client_next_req(c);
    r->p = NULL;
    bool is_add = kind == PEND_HOLDER_ADD || kind == PEND_ENTRY_ADD;
    if (!await && !is_add)
        return COMEM_OK; /* fire and forget: a reply, if any, matches nothing */
    client_pending *p = calloc(1, sizeof *p);
    if (!p)
        return COMEM_ENOMEM;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&p->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        free(p);
        return COMEM_ENOMEM;
    }
    p->req = r->id;
    p->gen = r->gen;
    p->kind = kind;
    p->obj = obj;
    p->snap = snap;
    p->waiting = await;
    p->next = c->pending;
    c->pending = p;
    r->p = p;
    return COMEM_OK;
}

void comem_req_abort(comem_client *c, client_req *r)
{
    if (!r->p)
        return;
    clear_adding(c, r->p);
    unlink_pending(c, r->p);
    free_pending(r->p);
    r->p = NULL;
}

int comem_req_send(comem_client *c, client_req *r, comem_msg *m)
{
    m->request_id = r->id;
    if (m->type == COMEM_MSG_ADMIT)
        comem_hop(COMEM_HOP_ADMIT_SENT);
    return comem_conn_send(c, r->gen, m);
}

int comem_req_take(comem_client *c, client_req *r, client_reply *out, char **text)
{
    client_pending *p = r->p;
    unlink_pending(c, p);
    int rc = p->status;
    if (rc == COMEM_OK && out)
        *out = p->reply;
    if (rc == COMEM_OK && text) {
        *text = p->text;
        p->text = NULL;
    }
    free_pending(p);
    r->p = NULL;
    return rc;
}

void comem_req_give_up(comem_client *c, client_req *r)
{
    client_pending *p = r->p;
    if (!comem_on_service_thread(c) && (p->kind == PEND_HOLDER_ADD || p->kind == PEND_ENTRY_ADD)) {
        /* The coordinator may still book it. Forget the object now, in the same
           critical section as detaching, so a late id finds nothing and is given back. */
        if (p->kind == PEND_HOLDER_ADD)
            comem_tab_remove_holder(c, p->obj);
        else
            comem_tab_remove_entry(c, p->obj);
        p->waiting = false;
    } else if (!comem_on_service_thread(c) && p->kind == PEND_PIN) {
        p->waiting = false; /* a late grant is given back when its reply comes */
    } else {
        unlink_pending(c, p);
        free_pending(p);
    }
    r->p = NULL;
}

/* Copies the body a caller may read. */
static void copy_reply(client_reply *dst, const comem_msg *m)
{
    memset(dst, 0, sizeof *dst);
    dst->type = m->type;
    switch (m->type) {
    case COMEM_MSG_REPLY: dst->u.reply = m->u.reply; break;
    case COMEM_MSG_ID_REPLY: dst->u.id = m->u.id; break;
    case COMEM_MSG_ADMIT_REPLY: dst->u.admit_reply = m->u.admit_reply; break;
    case COMEM_MSG_PRESSURE_REPLY: dst->u.pressure_reply = m->u.pressure_reply; break;
    case COMEM_MSG_PIN_REPLY: dst->u.pin_reply = m->u.pin_reply; break;
    case COMEM_MSG_RESERVE_REPLY: dst->u.reserve_reply = m->u.reserve_reply; break;
    case COMEM_MSG_RELEASE_REPLY: dst->u.release_reply = m->u.release_reply; break;
    default: break;
    }
}

/* An add's reply: map the coordinator's id, or say what to give back. */
static void apply_add(comem_client *c, const client_pending *p, const comem_msg *m, pend_kind *orphan_kind,
                      uint64_t *orphan)
{
    bool ok = m->type == COMEM_MSG_ID_REPLY;
    bool current = p->gen == c->gen && c->link != LINK_DOWN;
    if (p->kind == PEND_HOLDER_ADD) {
        client_holder *h = comem_tab_holder(c, p->obj);
        if (!h) {
            if (ok) {
                *orphan_kind = PEND_HOLDER_ADD;
                *orphan = m->u.id.id;
            }
            return;
        }
        h->adding_gen = 0;
        if (!ok) {
            h->refused_gen = p->gen;
            return;
        }
        if (!current)
            return;
        h->coord_id = m->u.id.id;
        h->coord_gen = p->gen;
        /* A new registration knows nothing beyond the add itself. */
        h->synced_busy = false;
        h->synced_report_seq = 0;
        h->synced_pins = 0;
        bool more = h->busy || (h->report_seq && h->has) || h->pins;
        for (size_t i = 0; i < c->n_entries; i++)
            if (c->entries[i].holder == h->id && c->entries[i].coord_gen != c->gen)
                more = true; /* added while the holder's id was on its way */
        if (more)
            comem_client_want_sync(c);
    } else {
        client_entry *e = comem_tab_entry(c, p->obj);
        if (!e) {
            if (ok) {
                *orphan_kind = PEND_ENTRY_ADD;
                *orphan = m->u.id.id;
            }
            return;
        }
        e->adding_gen = 0;
        if (!ok) {
            e->refused_gen = p->gen;
            return;
        }
        if (!current)
            return;
        e->coord_id = m->u.id.id;
        e->coord_gen = p->gen;
        e->synced_seq = p->snap; /* the add carried the residency of that sequence */
        if (e->seq != e->synced_seq)
            comem_client_want_sync(c);
    }
}

/* Adds one STATUS_REPLY chunk. Returns 1 when the text is whole, 0 when more is due, or COMEM_EPROTO. */
static int add_chunk(client_pending *p, const comem_msg_status_reply *s)
{
    if (!p->text_started) {
        if (s->total > STATUS_TEXT_MAX)
            return COMEM_EPROTO;
        p->text = malloc((size_t)s->total + 1);
        if (!p->text)
            return COMEM_ENOMEM;
        p->text_total = s->total;
        p->text_got = 0;
        p->text_started = true;
    }
    /* Chunks come in order on a stream; anything else is a broken coordinator. */
    if (s->total != p->text_total || s->offset != p->text_got || s->len > p->text_total - p->text_got)
        return COMEM_EPROTO;
    if (s->len)
        memcpy(p->text + s->offset, s->text, s->len);
    p->text_got += s->len;
    if (p->text_got < p->text_total)
        return 0;
    p->text[p->text_total] = '\0';
    return 1;
}

static void complete(comem_client *c, client_pending *p, int status)
{
    p->status = status;
    p->done = true;
    if (p->waiting) {
        pthread_cond_signal(&p->cond);
    } else {
        unlink_pending(c, p);
        free_pending(p);
    }
}

bool comem_pending_complete(comem_client *c, const comem_msg *m, pend_kind *orphan_kind, uint64_t *orphan,
                            int64_t *orphan_bytes)
{
    *orphan = 0;
    *orphan_bytes = 0;
    client_pending *p = c->pending;
    while (p && p->req != m->request_id)
        p = p->next;
    if (!p || p->done)
        return false;
    if (m->type == COMEM_MSG_ADMIT_QUEUED) { /* not the answer: it says the answer will come */
        p->acked = true;
        if (p->waiting)
            pthread_cond_signal(&p->cond);
        return true;
    }
    if (p->kind == PEND_STATUS && m->type == COMEM_MSG_STATUS_REPLY) {
        int rc = add_chunk(p, &m->u.status_reply);
        if (rc == 0)
            return true;
        copy_reply(&p->reply, m);
        complete(c, p, rc < 0 ? rc : COMEM_OK);
        return true;
    }
    copy_reply(&p->reply, m);
    if (m->type == COMEM_MSG_ADMIT_REPLY)
        comem_hop(COMEM_HOP_REPLY_READ);
    if (p->kind == PEND_HOLDER_ADD || p->kind == PEND_ENTRY_ADD)
        apply_add(c, p, m, orphan_kind, orphan);
    if (p->kind == PEND_PIN && !p->waiting && m->type == COMEM_MSG_PIN_REPLY && m->u.pin_reply.granted) {
        *orphan_kind = PEND_PIN; /* its caller gave up: nobody counts these bytes as pinned */
        *orphan = p->obj;
        *orphan_bytes = (int64_t)p->snap;
    }
    complete(c, p, COMEM_OK);
    return true;
}

void comem_pending_fail_all(comem_client *c)
{
    client_pending *p = c->pending;
    while (p) {
        client_pending *next = p->next;
        if (!p->done)
            complete(c, p, COMEM_ECLOSED);
        p = next;
    }
}

void comem_pending_free_all(comem_client *c)
{
    client_pending *p = c->pending;
    while (p) {
        client_pending *next = p->next;
        free_pending(p);
        p = next;
    }
    c->pending = NULL;
}
