/*
 * tests/unit/rawwire.h - a client that speaks the wire protocol itself over os/stream.h, for the
 * platform layer's tests of the coordinator, on Linux and Windows: a frame sent, a frame read with
 * what rode on it, HELLO and ADMIT. Header-only (inline), with cmocka's assertions.
 */
#ifndef COMEM_TEST_RAWWIRE_H
#define COMEM_TEST_RAWWIRE_H

#include <stdio.h>
#include <string.h>

#include "os/stream.h"
#include "unit/child.h"
#include "wire/wire.h"

static inline void raw_send(comem_stream *st, comem_msg *m)
{
    static uint8_t buf[COMEM_WIRE_MAX_FRAME];
    int n = comem_wire_encode(m, buf, sizeof buf);
    assert_true(n > 0);
    assert_int_equal(comem_stream_write(st, buf, (size_t)n, 10000), COMEM_OK);
}

/* Reads one frame into *m, keeping what rode on its bytes in beside[] (*n_beside; may be NULL, 0). */
static inline void raw_read(comem_stream *st, comem_msg *m, comem_shm_token *beside, int *n_beside)
{
    static uint8_t buf[COMEM_WIRE_MAX_FRAME];
    comem_shm_token none[COMEM_STREAM_SHARES_MAX];
    int n_none = 0;
    if (!beside) {
        beside = none;
        n_beside = &n_none;
    }
    size_t have = 0, need = COMEM_WIRE_HEADER_SIZE;
    comem_wire_header h;
    *n_beside = 0;
    while (have < need) {
        int got = 0;
        int n = have == 0 ? comem_stream_read_shares(st, buf, need, beside, COMEM_STREAM_SHARES_MAX, &got, 10000)
                          : comem_stream_read(st, buf + have, need - have, 10000);
        assert_true(n > 0);
        *n_beside += got;
        have += (size_t)n;
        if (have == COMEM_WIRE_HEADER_SIZE) {
            assert_int_equal(comem_wire_decode_header(buf, have, &h), COMEM_OK);
            need += h.length;
        }
    }
    assert_int_equal(comem_wire_decode(&h, buf + COMEM_WIRE_HEADER_SIZE, m), COMEM_OK);
    for (int i = 0; beside == none && i < n_none; i++)
        comem_shm_token_discard(none[i]); /* not asked for */
}

/* Says HELLO as a worker named name; *m is the reply (what rode on it in beside[], *n_beside). */
static inline void raw_hello(comem_stream *st, const char *name, comem_msg *m, comem_shm_token *beside, int *n_beside)
{
    memset(m, 0, sizeof *m);
    m->type = COMEM_MSG_HELLO;
    m->request_id = 1;
    m->u.hello.proto_version = COMEM_WIRE_VERSION;
    m->u.hello.role = COMEM_ROLE_WORKER;
    m->u.hello.pid = (uint32_t)own_pid();
    m->u.hello.reserve_base = -1;
    snprintf(m->u.hello.name, sizeof m->u.hello.name, "%s", name);
    raw_send(st, m);
    raw_read(st, m, beside, n_beside);
    assert_int_equal(m->type, COMEM_MSG_HELLO_REPLY);
}

/* Asks to load bytes on device 0, waiting at most timeout_ms: the ADMIT_REPLY in *m (an ADMIT_QUEUED before it is passed over). */
static inline void raw_admit(comem_stream *st, uint32_t request_id, int64_t bytes, uint32_t timeout_ms, comem_msg *m)
{
    memset(m, 0, sizeof *m);
    m->type = COMEM_MSG_ADMIT;
    m->request_id = request_id;
    m->u.admit.weights = bytes;
    m->u.admit.timeout_ms = timeout_ms;
    raw_send(st, m);
    do
        raw_read(st, m, NULL, NULL);
    while (m->type == COMEM_MSG_ADMIT_QUEUED);
    assert_int_equal(m->type, COMEM_MSG_ADMIT_REPLY);
    assert_int_equal(m->request_id, request_id);
}

#endif
