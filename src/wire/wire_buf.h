/*
 * wire/wire_buf.h - a bounded byte cursor with little-endian readers and
 * writers, private to the wire codec.
 *
 * A cursor either reads from `in` or writes to `out`, never both, and never
 * touches a byte at or past `cap`. Integers are assembled and split byte by
 * byte, so no buffer is ever cast to a wider type and alignment never
 * matters. Errors are sticky: the first failure is kept in `err`, and every
 * later call does nothing (a read yields 0), so a codec can run a whole
 * message and check once at the end. Running out of room is COMEM_EPROTO
 * when reading (the frame is short) and COMEM_ERANGE when writing (the
 * caller's buffer is).
 */
#ifndef COMEM_WIRE_WIRE_BUF_H
#define COMEM_WIRE_WIRE_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "comem/common.h"

typedef struct comem_wire_cur {
    const uint8_t *in; /* reading: the bytes, or NULL when writing */
    uint8_t *out;      /* writing: the destination, or NULL when reading */
    size_t cap;        /* bytes readable or writable from the start */
    size_t pos;        /* bytes consumed or produced so far */
    int err;           /* 0, or the first failure */
} comem_wire_cur;

static inline comem_wire_cur comem_wire_reader(const uint8_t *in, size_t len)
{
    comem_wire_cur c = {.in = in, .out = NULL, .cap = len, .pos = 0, .err = 0};
    return c;
}

static inline comem_wire_cur comem_wire_writer(uint8_t *out, size_t cap)
{
    comem_wire_cur c = {.in = NULL, .out = out, .cap = cap, .pos = 0, .err = 0};
    return c;
}

static inline bool comem_wire_writing(const comem_wire_cur *c) { return c->out != NULL; }

/* Records a failure unless one is already recorded (the first one explains the rest). */
static inline void comem_wire_fail(comem_wire_cur *c, int err)
{
    if (c->err == 0)
        c->err = err;
}

/* True when n more bytes fit; otherwise records the short-buffer error. */
static inline bool comem_wire_room(comem_wire_cur *c, size_t n)
{
    if (c->err != 0)
        return false;
    if (n > c->cap - c->pos) { /* pos <= cap always holds, so this cannot wrap */
        comem_wire_fail(c, comem_wire_writing(c) ? COMEM_ERANGE : COMEM_EPROTO);
        return false;
    }
    return true;
}

/* Reads n bytes as a little-endian unsigned integer (n <= 8). */
static inline uint64_t comem_wire_get_le(comem_wire_cur *c, size_t n)
{
    if (!comem_wire_room(c, n))
        return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)c->in[c->pos + i] << (8 * i);
    c->pos += n;
    return v;
}

/* Writes the low n bytes of v, least significant first (n <= 8). */
static inline void comem_wire_put_le(comem_wire_cur *c, uint64_t v, size_t n)
{
    if (!comem_wire_room(c, n))
        return;
    for (size_t i = 0; i < n; i++)
        c->out[c->pos + i] = (uint8_t)(v >> (8 * i));
    c->pos += n;
}

/*
 * Takes n bytes from a reader: returns where they start inside the input, or
 * NULL when they are not all there. Never forms a pointer past the input.
 */
static inline const uint8_t *comem_wire_take(comem_wire_cur *c, size_t n)
{
    if (!comem_wire_room(c, n))
        return NULL;
    const uint8_t *p = c->in + c->pos;
    c->pos += n;
    return p;
}

/* Writes n bytes from src (src may be NULL only when n is 0). */
static inline void comem_wire_put_bytes(comem_wire_cur *c, const void *src, size_t n)
{
    if (!comem_wire_room(c, n) || n == 0)
        return;
    memcpy(c->out + c->pos, src, n);
    c->pos += n;
}

#endif
