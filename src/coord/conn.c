/*
 * coord/conn.c - what goes out: each connection's buffered frames, flushed, and their bounds.
 *
 * Frames are encoded into the connection's buffer and flushed as the connection
 * takes them; what a peer may leave unread is bounded.
 *
 * Every handler answers through coord_send and coord_reply; nothing here
 * calls back into the handlers or the loop. A frame is sent at once when the
 * connection has room (comem_loop_send, never waiting); what does not fit
 * waits in the connection's buffer with room asked of the loop, which flushes
 * it when the connection takes bytes again (os/loop.h). A peer
 * that leaves COORD_OUT_LIMIT unread is dropped; above COORD_OUT_TOTAL over
 * all connections, the worst reader is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

#define OUT_KEEP (64 << 10) /* an output buffer larger than this is freed once it drains */

conn *coord_conn_of(comem_coord_srv *s, uint64_t session)
{
    for (int i = 0; i < COORD_MAX_CONNS; i++)
        if (s->conns[i] && s->conns[i]->session == session && !s->conns[i]->closing)
            return s->conns[i];
    return NULL;
}

/* Asks the loop for room, or stops asking (os/loop.h: a call saved when nothing changes). */
static void want_out(comem_coord_srv *s, conn *c, bool on)
{
    if (c->want_out == on)
        return;
    comem_loop_want_write(s->loop, c->stream, on);
    c->want_out = on;
}

bool coord_flush(comem_coord_srv *s, conn *c)
{
    while (c->out_len > 0) {
        /* The session's shares ride on the first bytes sent (the HELLO_REPLY's), in their places. */
        int n = comem_loop_send(s->loop, c->stream, c->out, c->out_len, c->pass, c->n_pass);
        if (n == COMEM_ETIMEDOUT) {
            want_out(s, c, true);
            return true;
        }
        if (n < 0)
            return false;
        if (c->n_pass > 0) { /* they went with those bytes: the client holds the only other copies now */
            for (int i = 0; i < c->n_pass; i++)
                comem_shm_token_drop(c->pass[i]);
            c->n_pass = 0;
        }
        memmove(c->out, c->out + n, c->out_len - (size_t)n);
        c->out_len -= (size_t)n;
        s->out_total -= (size_t)n;
    }
    if (c->out_cap > OUT_KEEP) { /* a burst (a large status) is over: give its buffer back */
        free(c->out);
        c->out = NULL;
        c->out_cap = 0;
    }
    want_out(s, c, false);
    return true;
}

void coord_drop_output(comem_coord_srv *s, conn *c)
{
    s->out_total -= c->out_len;
    c->out_len = 0;
    c->closing = true;
}

/* Above COORD_OUT_TOTAL: the connection with the most unread output is dropped. True when that is c. */
static bool over_total(comem_coord_srv *s, conn *c, size_t n)
{
    while (s->out_total + n > COORD_OUT_TOTAL) {
        conn *worst = NULL;
        for (int i = 0; i < COORD_MAX_CONNS; i++)
            if (s->conns[i] && s->conns[i]->out_len > 0 && (!worst || s->conns[i]->out_len > worst->out_len))
                worst = s->conns[i];
        if (!worst)
            return false;
        comem_warn("pid %d has %zu bytes of replies unread, the most of any; closing its connection", (int)worst->pid,
                   worst->out_len);
        coord_drop_output(s, worst);
        if (worst == c)
            return true;
    }
    return false;
}

void coord_send(comem_coord_srv *s, conn *c, comem_msg *m)
{
    if (!c || !c->stream)
        return;
    int n = comem_wire_encode(m, s->frame, COMEM_WIRE_MAX_FRAME);
    if (n < 0) {
        comem_error("cannot encode %s for pid %d: %s", comem_wire_type_name(m->type), (int)c->pid,
                    comem_status_str(n));
        return;
    }
    if (c->out_len + (size_t)n > COORD_OUT_LIMIT) {
        comem_warn("pid %d does not read its replies; closing its connection", (int)c->pid);
        coord_drop_output(s, c);
        return;
    }
    if (over_total(s, c, (size_t)n))
        return;
    if (c->out_len + (size_t)n > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + (size_t)n)
            cap *= 2;
        uint8_t *p = realloc(c->out, cap);
        if (!p) {
            c->closing = true;
            return;
        }
        c->out = p;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, s->frame, (size_t)n);
    c->out_len += (size_t)n;
    s->out_total += (size_t)n;
    if (!coord_flush(s, c))
        c->closing = true;
}

void coord_reply(comem_coord_srv *s, conn *c, uint32_t request_id, int status, const char *message)
{
    comem_msg m = {.type = COMEM_MSG_REPLY, .request_id = request_id};
    m.u.reply.status = status;
    snprintf(m.u.reply.message, sizeof m.u.reply.message, "%s", message ? message : comem_status_str(status));
    coord_send(s, c, &m);
}
