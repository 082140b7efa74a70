/*
 * client/conn.c - the client's end of the socket: writing whole frames under
 * the write lock, reading into the reader's buffer, and the HELLO exchange that
 * opens every connection. The system's side of each is client/port.h's.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "client/conn.h"
#include "os/env.h"
#include "shm/book.h"
#include "probe/sim.h"
#include "probe/device.h"

/* Most frames are small; receipts and keep lists can reach a few KiB. */
#define SMALL_FRAME 2048

/* Encodes m into buf (small) or a heap buffer (*heap, freed by the caller). */
static int encode(const comem_msg *m, uint8_t *buf, size_t cap, uint8_t **heap, const uint8_t **frame)
{
    *heap = NULL;
    int n = comem_wire_encode(m, buf, cap);
    *frame = buf;
    if (n == COMEM_ERANGE) {
        *heap = malloc(COMEM_WIRE_MAX_FRAME);
        if (!*heap)
            return COMEM_ENOMEM;
        n = comem_wire_encode(m, *heap, COMEM_WIRE_MAX_FRAME);
        *frame = *heap;
    }
    if (n < 0)
        comem_error("cannot encode a %s frame: %s", comem_wire_type_name(m->type), comem_status_str(n));
    return n;
}

int comem_conn_send(comem_client *c, uint64_t gen, const comem_msg *m)
{
    uint8_t small[SMALL_FRAME];
    uint8_t *heap;
    const uint8_t *frame;
    int n = encode(m, small, sizeof small, &heap, &frame);
    if (n < 0) {
        free(heap);
        return n;
    }
    int timeout = comem_client_timeout(c, -1);
    int rc;
    pthread_mutex_lock(&c->write_lock);
    if (!c->wsock || c->wgen != gen) {
        rc = COMEM_ECLOSED;
    } else {
        rc = comem_port_send(c->wsock, frame, (size_t)n, timeout);
        if (rc != COMEM_OK) {
            /* A frame may be half written: the stream is unusable. Shutting it down makes
               the service thread see the end and reconnect; only it closes the socket. */
            comem_debug("writing to the coordinator failed (%s); reconnecting", comem_status_str(rc));
            comem_port_shut(c->wsock);
            rc = COMEM_ECLOSED;
        }
    }
    pthread_mutex_unlock(&c->write_lock);
    free(heap);
    return rc;
}

/* Moves the unread bytes to the buffer's start, so a whole frame fits behind them. */
static void compact(comem_client *c)
{
    if (c->rpos > 0) {
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
    }
}

/* A read's result: the bytes it brought join the buffer. */
static int took(comem_client *c, int rc, size_t got)
{
    if (rc == 1)
        c->rlen += got;
    return rc;
}

/* The shares the HELLO_REPLY r names, taken from what rode on it; the rest let go. */
static void take_shares(comem_client *c, const comem_msg_hello_reply *r)
{
    comem_shm_token t;
    if (comem_shm_token_named(r->view_share, c->beside, c->n_beside, &t) == COMEM_OK)
        c->view_share = (client_share){.t = t, .named = true};
    if (comem_shm_token_named(r->area_share, c->beside, c->n_beside, &t) == COMEM_OK)
        c->area = (client_share){.t = t, .named = true};
    for (int i = 0; i < c->n_beside; i++)
        if (c->beside[i] >= 0)
            comem_shm_token_discard(c->beside[i]);
    c->n_beside = 0;
}

int comem_conn_read(comem_client *c, client_sock *s, int timeout_ms)
{
    compact(c);
    size_t got = 0;
    int n = c->n_beside;
    /* A frame is at most COMEM_WIRE_MAX_FRAME and the buffer holds one, so there is room. */
    int rc = comem_port_read_wait(c->svc, s, c->rbuf + c->rlen, COMEM_WIRE_MAX_FRAME - c->rlen, &got, c->beside,
                                  CLIENT_BESIDE_MAX, &n, timeout_ms);
    c->n_beside = n;
    return took(c, rc, got);
}

int comem_conn_fill(comem_client *c)
{
    compact(c);
    if (!c->sock)
        return COMEM_ECLOSED;
    size_t got = 0;
    int rc = comem_port_fill(c->svc, c->sock, c->rbuf + c->rlen, COMEM_WIRE_MAX_FRAME - c->rlen, &got);
    return took(c, rc, got);
}

int comem_conn_fill_wait(comem_client *c, int timeout_ms)
{
    compact(c);
    if (!c->sock)
        return COMEM_ECLOSED;
    size_t got = 0;
    int rc = comem_port_fill_wait(c->sock, c->rbuf + c->rlen, COMEM_WIRE_MAX_FRAME - c->rlen, &got, timeout_ms);
    return took(c, rc, got);
}

int comem_conn_next(comem_client *c)
{
    size_t avail = c->rlen - c->rpos;
    if (avail < COMEM_WIRE_HEADER_SIZE)
        return 0;
    comem_wire_header h;
    const uint8_t *p = c->rbuf + c->rpos;
    int rc = comem_wire_decode_header(p, avail, &h);
    if (rc != COMEM_OK)
        return COMEM_EPROTO;
    if (avail < COMEM_WIRE_HEADER_SIZE + (size_t)h.length)
        return 0;
    rc = comem_wire_decode(&h, p + COMEM_WIRE_HEADER_SIZE, c->in);
    if (rc != COMEM_OK) {
        comem_error("malformed %s frame from the coordinator", comem_wire_type_name(h.type));
        return COMEM_EPROTO;
    }
    c->rpos += COMEM_WIRE_HEADER_SIZE + (size_t)h.length;
    return 1;
}

/*
 * The scope of this process's own free reading. On Linux the driver's free is
 * device-wide; a process on a simulated wddm card reads a process-local budget,
 * as under Windows WDDM, and says so, so the coordinator's Windows arithmetic
 * (charges on the host's reserve) runs, and is tested, on Linux too.
 */
static comem_scope own_scope(void)
{
    const char *dev = comem_env("COMEM_DEVICE");
    comem_sim_spec spec;
    if (dev && !strncmp(dev, "sim", 3) && comem_sim_spec_parse(dev, &spec, NULL, 0) == COMEM_OK &&
        spec.semantics == COMEM_SIM_WDDM)
        return COMEM_SCOPE_PROCESS_LOCAL;
    return COMEM_SCOPE_DEVICE_WIDE;
}

int comem_conn_hello(comem_client *c, client_sock *s, uint64_t *session, bool *refused, char *why, size_t whylen)
{
    *refused = false;
    why[0] = '\0';
    c->rlen = c->rpos = 0;
    comem_conn_drop_area(c); /* only what rides on this HELLO_REPLY is this session's */
    comem_msg m;
    memset(&m, 0, sizeof m);
    m.type = COMEM_MSG_HELLO;
    uint32_t req = comem_client_next_req(c);
    m.request_id = req;
    m.u.hello.proto_version = COMEM_WIRE_VERSION;
    m.u.hello.role = (uint8_t)c->role;
    m.u.hello.scope = (uint8_t)own_scope();
    m.u.hello.pid = (uint32_t)comem_client_this_process();
    pthread_mutex_lock(&c->lock);
    m.u.hello.caps = comem_tab_caps(c);
    pthread_mutex_unlock(&c->lock);
    m.u.hello.reserve_base = c->reserve_base;
    snprintf(m.u.hello.name, sizeof m.u.hello.name, "%s", c->name);
    snprintf(m.u.hello.token, sizeof m.u.hello.token, "%s", c->token);

    uint8_t buf[SMALL_FRAME];
    int n = comem_wire_encode(&m, buf, sizeof buf);
    if (n < 0)
        return n;
    int timeout = comem_client_timeout(c, -1);
    int rc = comem_port_send(s, buf, (size_t)n, timeout);
    if (rc == COMEM_ETIMEDOUT)
        return rc;
    /* Even when the send failed, read on: a coordinator that refused at accept (another uid,
       full) wrote why before closing, and that line is worth more than "connection closed". */

    int64_t deadline = comem_now_ns() + (int64_t)timeout * 1000000;
    for (;;) {
        rc = comem_conn_next(c);
        if (rc < 0)
            return rc;
        if (rc == 1)
            break;
        if (atomic_load(&c->stopping))
            return COMEM_ECLOSED;
        int left = comem_ms_until(deadline);
        if (left == 0)
            return COMEM_ETIMEDOUT;
        rc = comem_conn_read(c, s, left);
        if (rc < 0)
            return rc;
    }
    const comem_msg *r = c->in;
    if (r->type == COMEM_MSG_REPLY && r->request_id == 0 && r->u.reply.status != COMEM_OK) {
        /* Refused before HELLO was read (another uid, a full coordinator): said with id 0. */
        *refused = true;
        snprintf(why, whylen, "%s", r->u.reply.message);
        return r->u.reply.status;
    }
    if (r->request_id != req)
        return COMEM_EPROTO;
    if (r->type == COMEM_MSG_REPLY) {
        if (r->u.reply.status == COMEM_OK)
            return COMEM_EPROTO;
        *refused = true;
        snprintf(why, whylen, "%s", r->u.reply.message);
        return r->u.reply.status;
    }
    if (r->type != COMEM_MSG_HELLO_REPLY)
        return COMEM_EPROTO;
    if (r->u.hello_reply.proto_version != COMEM_WIRE_VERSION) {
        *refused = true;
        snprintf(why, whylen, "it speaks protocol version %u, this client %u", r->u.hello_reply.proto_version,
                 COMEM_WIRE_VERSION);
        return COMEM_EPROTO;
    }
    *session = r->u.hello_reply.session_id;
    take_shares(c, &r->u.hello_reply);
    return COMEM_OK;
}

void comem_conn_drop_area(comem_client *c)
{
    for (int i = 0; i < c->n_beside; i++)
        comem_shm_token_discard(c->beside[i]);
    c->n_beside = 0;
    if (c->area.named)
        comem_shm_token_discard(c->area.t);
    if (c->view_share.named)
        comem_shm_token_discard(c->view_share.t);
    c->area = c->view_share = (client_share){0};
}
