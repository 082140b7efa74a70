/*
 * wire/wire.c - the frame codec: headers, and every message body in both
 * directions.
 *
 * Each body is described once, as a walk over its fields in struct order
 * (wire.h); the same walk encodes (reading the struct) and decodes (filling
 * it), so the two directions cannot drift apart, and the range checks run on
 * both sides: what the encoder writes the decoder accepts, and decoding then
 * re-encoding a frame gives back the same bytes.
 *
 * Notation: u8/u16/u32/u64 are unsigned and i32/i64 two's complement, all
 * little-endian; text<N> is a u8 length L (L < N) and L bytes without a NUL;
 * list<X, M> is a u16 count (<= M) and that many X. Payloads, in order:
 *
 *   HELLO           u16 proto_version, u8 role (1..3), u8 scope (0..1),
 *                   u32 pid, u32 caps (COMEM_CAP_MASK), i64 reserve_base,
 *                   text<64> name, text<128> token
 *   DEVICES         (empty)
 *   HOLDER_ADD      u16 device, u8 kind (1..4), u32 flags (COMEM_CAP_MASK),
 *                   u32 pid (0: the sender's process), text<64> name
 *   HOLDER_REMOVE, ENTRY_REMOVE, ID_REPLY, TOUCH
 *                   u64 id
 *   ENTRY_ADD       u64 holder_id, i64 size, i64 resident, i64 refs (>= 0),
 *                   u32 flags (COMEM_ENTRY_MASK: dynamic, cache, file), text<64> name
 *   CENSUS          u64 holder_id, u64 seq, u8 has (COMEM_CENSUS_MASK),
 *                   i64 pinned, i64 overhead, list<residency, 512> items
 *   ADMIT           u16 device, u64 holder_id, i64 weights, i64 inference,
 *                   i64 cast_forward, u32 timeout_ms, list<u64, 512> keep
 *   GRANT_DONE      u64 grant_id, u64 entry_id, i64 used
 *   ACTIVITY        u64 holder_id, u8 busy (0..1), text<64> prompt
 *   PRESSURE        u16 device, i64 bytes, u32 timeout_ms
 *   PIN_ACQUIRE, PIN_RELEASE
 *                   u64 holder_id, i64 bytes
 *   RESERVE         u16 device
 *   STATUS          u8 flags (0)
 *   RECEIPT         u64 ask_id, u8 outcome (0..2), i64 freed,
 *                   list<residency, 512> items
 *   RELEASE         u64 entry_id, i64 bytes, u32 timeout_ms
 *   DEVICE_MAP      list<devmap, 16> items
 *   WDDM            list<wddm, 16> items
 *   GOODBYE, BOOKED, ADMIT_QUEUED (empty)
 *   REPLY           i32 status, text<128> message
 *   HELLO_REPLY     u64 session_id, u32 coord_pid, u16 proto_version,
 *                   u16 n_devices (<= 16), u64 view_share, u64 area_share
 *   DEVICES_REPLY   list<device, 16> devices
 *   ADMIT_REPLY     u8 granted (0..1), u64 grant_id, i64 bytes, i64 need,
 *                   i64 free_before, i64 free_after, i64 short_by, i64 freed,
 *                   i64 reserve, i64 pager_headroom, u16 n_asked, u16 n_busy,
 *                   list<u64, 64> asked
 *   PRESSURE_REPLY  i64 freed, i64 free_after, u16 n_asked, u16 n_busy
 *   PIN_REPLY       u8 granted (0..1), i64 total_pinned, i64 max_pinned,
 *                   i64 shortfall
 *   RESERVE_REPLY   i64 published, i64 base, i64 for_requester,
 *                   i64 pager_headroom
 *   STATUS_REPLY    u32 offset, u32 total, u32 len (<= COMEM_WIRE_CHUNK_MAX,
 *                   offset + len <= total), len bytes
 *   ASK             u64 ask_id, u64 holder_id, u8 kind (1..3), u16 device,
 *                   i64 bytes, u32 deadline_ms, list<release, 512> items
 *   RELEASE_REPLY   u8 outcome (0..3), i64 freed, i64 resident
 *
 *   residency = u64 entry_id, u64 seq, i64 resident, i64 refs (>= 0)   (32 bytes)
 *   release   = u64 entry_id, i64 bytes                        (16 bytes)
 *   devmap    = u16 ordinal (< 16), text<128> uuid (not empty)
 *   wddm      = u64 luid (not 0), i64 budget (>= 0), i64 usage (>= 0), text<128> uuid (may be empty)
 *   device    = u16 index, u8 scope (0..1), i64 total, i64 free,
 *               i64 reserved, text<128> uuid, text<128> name
 *
 * docs/protocol.md has the same layouts as offset tables.
 */
#include "wire/wire.h"

#include <string.h>

#include "comem/common.h"
#include "wire/wire_buf.h"

/* ---- field walkers: write *v when encoding, fill *v when decoding ---- */

/* A value out of its range: the caller's mistake when encoding, the peer's when decoding. */
static void check(comem_wire_cur *c, bool ok)
{
    if (!ok)
        comem_wire_fail(c, comem_wire_writing(c) ? COMEM_ERANGE : COMEM_EPROTO);
}

static void io_u8(comem_wire_cur *c, uint8_t *v)
{
    if (comem_wire_writing(c))
        comem_wire_put_le(c, *v, 1);
    else
        *v = (uint8_t)comem_wire_get_le(c, 1);
}

static void io_u16(comem_wire_cur *c, uint16_t *v)
{
    if (comem_wire_writing(c))
        comem_wire_put_le(c, *v, 2);
    else
        *v = (uint16_t)comem_wire_get_le(c, 2);
}

static void io_u32(comem_wire_cur *c, uint32_t *v)
{
    if (comem_wire_writing(c))
        comem_wire_put_le(c, *v, 4);
    else
        *v = (uint32_t)comem_wire_get_le(c, 4);
}

static void io_u64(comem_wire_cur *c, uint64_t *v)
{
    if (comem_wire_writing(c))
        comem_wire_put_le(c, *v, 8);
    else
        *v = comem_wire_get_le(c, 8);
}

/*
 * Signed values travel as their two's complement bit pattern. Converting a
 * negative value to unsigned is defined by C; the way back is spelled out,
 * because converting an out-of-range unsigned value to signed is not.
 */
static void io_i64(comem_wire_cur *c, int64_t *v)
{
    if (comem_wire_writing(c)) {
        comem_wire_put_le(c, (uint64_t)*v, 8);
        return;
    }
    uint64_t u = comem_wire_get_le(c, 8);
    *v = u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)(UINT64_MAX - u) - 1;
}

static void io_i32(comem_wire_cur *c, int32_t *v)
{
    if (comem_wire_writing(c)) {
        comem_wire_put_le(c, (uint32_t)*v, 4);
        return;
    }
    uint32_t u = (uint32_t)comem_wire_get_le(c, 4);
    *v = u <= (uint32_t)INT32_MAX ? (int32_t)u : -(int32_t)(UINT32_MAX - u) - 1;
}

/* An enumeration or boolean byte that must lie in [lo, hi]. */
static void io_enum8(comem_wire_cur *c, uint8_t *v, unsigned lo, unsigned hi)
{
    io_u8(c, v);
    check(c, *v >= lo && *v <= hi);
}

static void io_bool(comem_wire_cur *c, uint8_t *v) { io_enum8(c, v, 0, 1); }

/* A flag word with no bit outside mask. */
static void io_flags32(comem_wire_cur *c, uint32_t *v, uint32_t mask)
{
    io_u32(c, v);
    check(c, (*v & ~mask) == 0);
}

/* A list count; returns how many items to walk (0 once anything has failed). */
static size_t io_count(comem_wire_cur *c, uint16_t *n, size_t max)
{
    io_u16(c, n);
    check(c, *n <= max);
    return c->err ? 0 : *n;
}

/* A text into or out of a char array of `size` bytes that keeps a terminating NUL. */
static void io_text(comem_wire_cur *c, char *s, size_t size)
{
    if (comem_wire_writing(c)) {
        size_t n = strnlen(s, size); /* == size: no terminator inside the array */
        check(c, n < size);
        if (c->err)
            return;
        comem_wire_put_le(c, n, 1);
        comem_wire_put_bytes(c, s, n);
        return;
    }
    size_t n = (size_t)comem_wire_get_le(c, 1);
    check(c, n < size);
    const uint8_t *p = comem_wire_take(c, n);
    if (c->err)
        return;
    check(c, memchr(p, 0, n) == NULL);
    if (c->err)
        return;
    memcpy(s, p, n);
    s[n] = '\0';
}

/* ---- bodies, in wire.h's struct order ---- */

static void walk_hello(comem_wire_cur *c, comem_msg_hello *b)
{
    io_u16(c, &b->proto_version);
    io_enum8(c, &b->role, COMEM_ROLE_HOST, COMEM_ROLE_TOOL);
    io_enum8(c, &b->scope, COMEM_SCOPE_DEVICE_WIDE, COMEM_SCOPE_PROCESS_LOCAL);
    io_u32(c, &b->pid);
    io_flags32(c, &b->caps, COMEM_CAP_MASK);
    io_i64(c, &b->reserve_base);
    io_text(c, b->name, sizeof b->name);
    io_text(c, b->token, sizeof b->token);
}

static void walk_hello_reply(comem_wire_cur *c, comem_msg_hello_reply *b)
{
    io_u64(c, &b->session_id);
    io_u32(c, &b->coord_pid);
    io_u16(c, &b->proto_version);
    io_u16(c, &b->n_devices);
    check(c, b->n_devices <= COMEM_MAX_DEVICES);
    io_u64(c, &b->view_share);
    io_u64(c, &b->area_share);
}

static void walk_device(comem_wire_cur *c, comem_wire_device *d)
{
    io_u16(c, &d->index);
    io_enum8(c, &d->scope, COMEM_SCOPE_DEVICE_WIDE, COMEM_SCOPE_PROCESS_LOCAL);
    io_i64(c, &d->total);
    io_i64(c, &d->free);
    io_i64(c, &d->reserved);
    io_text(c, d->uuid, sizeof d->uuid);
    io_text(c, d->name, sizeof d->name);
}

static void walk_devices_reply(comem_wire_cur *c, comem_msg_devices_reply *b)
{
    size_t n = io_count(c, &b->n, COMEM_MAX_DEVICES);
    for (size_t i = 0; i < n && !c->err; i++)
        walk_device(c, &b->devices[i]);
}

static void walk_holder_add(comem_wire_cur *c, comem_msg_holder_add *b)
{
    io_u16(c, &b->device);
    io_enum8(c, &b->kind, COMEM_HOLDER_MODELS, COMEM_HOLDER_RAW);
    io_flags32(c, &b->flags, COMEM_CAP_MASK);
    io_u32(c, &b->pid);
    io_text(c, b->name, sizeof b->name);
}

static void walk_id(comem_wire_cur *c, comem_msg_id *b) { io_u64(c, &b->id); }

static void walk_entry_add(comem_wire_cur *c, comem_msg_entry_add *b)
{
    io_u64(c, &b->holder_id);
    io_i64(c, &b->size);
    io_i64(c, &b->resident);
    io_i64(c, &b->refs);
    check(c, b->refs >= 0);
    io_flags32(c, &b->flags, COMEM_ENTRY_MASK);
    io_text(c, b->name, sizeof b->name);
}

static void walk_residency(comem_wire_cur *c, comem_wire_residency *r)
{
    io_u64(c, &r->entry_id);
    io_u64(c, &r->seq);
    io_i64(c, &r->resident);
    io_i64(c, &r->refs);
    check(c, r->refs >= 0);
}

static void walk_census(comem_wire_cur *c, comem_msg_census *b)
{
    io_u64(c, &b->holder_id);
    io_u64(c, &b->seq);
    io_u8(c, &b->has);
    check(c, (b->has & ~(unsigned)COMEM_CENSUS_MASK) == 0);
    io_i64(c, &b->pinned);
    io_i64(c, &b->overhead);
    size_t n = io_count(c, &b->n, COMEM_WIRE_MAX_ITEMS);
    for (size_t i = 0; i < n && !c->err; i++)
        walk_residency(c, &b->items[i]);
}

static void walk_admit(comem_wire_cur *c, comem_msg_admit *b)
{
    io_u16(c, &b->device);
    io_u64(c, &b->holder_id);
    io_i64(c, &b->weights);
    io_i64(c, &b->inference);
    io_i64(c, &b->cast_forward);
    io_u32(c, &b->timeout_ms);
    size_t n = io_count(c, &b->n_keep, COMEM_WIRE_MAX_ITEMS);
    for (size_t i = 0; i < n && !c->err; i++)
        io_u64(c, &b->keep[i]);
}

static void walk_admit_reply(comem_wire_cur *c, comem_msg_admit_reply *b)
{
    io_bool(c, &b->granted);
    io_u64(c, &b->grant_id);
    io_i64(c, &b->bytes);
    io_i64(c, &b->need);
    io_i64(c, &b->free_before);
    io_i64(c, &b->free_after);
    io_i64(c, &b->short_by);
    io_i64(c, &b->freed);
    io_i64(c, &b->reserve);
    io_i64(c, &b->pager_headroom);
    io_u16(c, &b->n_asked);
    io_u16(c, &b->n_busy);
    size_t n = io_count(c, &b->n_ids, COMEM_WIRE_MAX_ASKED);
    for (size_t i = 0; i < n && !c->err; i++)
        io_u64(c, &b->asked[i]);
}

static void walk_grant_done(comem_wire_cur *c, comem_msg_grant_done *b)
{
    io_u64(c, &b->grant_id);
    io_u64(c, &b->entry_id);
    io_i64(c, &b->used);
}

static void walk_reclaim(comem_wire_cur *c, comem_msg_reclaim *b)
{
    io_u16(c, &b->device);
    io_u64(c, &b->holder_id);
    io_i64(c, &b->bytes);
    check(c, b->bytes > 0);
}

static void walk_activity(comem_wire_cur *c, comem_msg_activity *b)
{
    io_u64(c, &b->holder_id);
    io_bool(c, &b->busy);
    io_text(c, b->prompt, sizeof b->prompt);
}

static void walk_pressure(comem_wire_cur *c, comem_msg_pressure *b)
{
    io_u16(c, &b->device);
    io_i64(c, &b->bytes);
    io_u32(c, &b->timeout_ms);
}

static void walk_pressure_reply(comem_wire_cur *c, comem_msg_pressure_reply *b)
{
    io_i64(c, &b->freed);
    io_i64(c, &b->free_after);
    io_u16(c, &b->n_asked);
    io_u16(c, &b->n_busy);
}

static void walk_pin(comem_wire_cur *c, comem_msg_pin *b)
{
    io_u64(c, &b->holder_id);
    io_i64(c, &b->bytes);
}

static void walk_pin_reply(comem_wire_cur *c, comem_msg_pin_reply *b)
{
    io_bool(c, &b->granted);
    io_i64(c, &b->total_pinned);
    io_i64(c, &b->max_pinned);
    io_i64(c, &b->shortfall);
}

static void walk_reserve(comem_wire_cur *c, comem_msg_reserve *b) { io_u16(c, &b->device); }

static void walk_reserve_reply(comem_wire_cur *c, comem_msg_reserve_reply *b)
{
    io_i64(c, &b->published);
    io_i64(c, &b->base);
    io_i64(c, &b->for_requester);
    io_i64(c, &b->pager_headroom);
}

static void walk_status(comem_wire_cur *c, comem_msg_status *b)
{
    io_u8(c, &b->flags);
    check(c, b->flags == 0); /* reserved: a later version bumps COMEM_WIRE_VERSION */
}

/* The chunk's bytes are copied out when encoding and pointed at when decoding. */
static void walk_status_reply(comem_wire_cur *c, comem_msg_status_reply *b)
{
    io_u32(c, &b->offset);
    io_u32(c, &b->total);
    io_u32(c, &b->len);
    check(c, b->len <= COMEM_WIRE_CHUNK_MAX);
    check(c, (uint64_t)b->offset + b->len <= b->total); /* in 64 bits: no wrap */
    if (comem_wire_writing(c)) {
        if (b->len > 0 && b->text == NULL)
            comem_wire_fail(c, COMEM_EINVAL);
        comem_wire_put_bytes(c, b->text, b->len);
    } else {
        b->text = c->err ? NULL : comem_wire_take(c, b->len);
    }
}

static void walk_release(comem_wire_cur *c, comem_wire_release *r)
{
    io_u64(c, &r->entry_id);
    io_i64(c, &r->bytes);
}

static void walk_ask(comem_wire_cur *c, comem_msg_ask *b)
{
    io_u64(c, &b->ask_id);
    io_u64(c, &b->holder_id);
    io_enum8(c, &b->kind, COMEM_ASK_RELEASE, COMEM_ASK_PINS);
    io_u16(c, &b->device);
    io_i64(c, &b->bytes);
    io_u32(c, &b->deadline_ms);
    size_t n = io_count(c, &b->n, COMEM_WIRE_MAX_ITEMS);
    for (size_t i = 0; i < n && !c->err; i++)
        walk_release(c, &b->items[i]);
}

static void walk_device_map(comem_wire_cur *c, comem_msg_device_map *b)
{
    size_t n = io_count(c, &b->n, COMEM_MAX_DEVICES);
    for (size_t i = 0; i < n && !c->err; i++) {
        io_u16(c, &b->items[i].ordinal);
        check(c, b->items[i].ordinal < COMEM_MAX_DEVICES);
        io_text(c, b->items[i].uuid, sizeof b->items[i].uuid);
        check(c, b->items[i].uuid[0] != 0);
    }
}

static void walk_wddm(comem_wire_cur *c, comem_msg_wddm *b)
{
    size_t n = io_count(c, &b->n, COMEM_MAX_DEVICES);
    for (size_t i = 0; i < n && !c->err; i++) {
        io_u64(c, &b->items[i].luid);
        check(c, b->items[i].luid != 0);
        io_i64(c, &b->items[i].budget);
        check(c, b->items[i].budget >= 0);
        io_i64(c, &b->items[i].usage);
        check(c, b->items[i].usage >= 0);
        io_text(c, b->items[i].uuid, sizeof b->items[i].uuid);
    }
}

static void walk_receipt(comem_wire_cur *c, comem_msg_receipt *b)
{
    io_u64(c, &b->ask_id);
    io_enum8(c, &b->outcome, COMEM_RECEIPT_DONE, COMEM_RECEIPT_ERROR);
    io_i64(c, &b->freed);
    size_t n = io_count(c, &b->n, COMEM_WIRE_MAX_ITEMS);
    for (size_t i = 0; i < n && !c->err; i++)
        walk_residency(c, &b->items[i]);
}

static void walk_release_req(comem_wire_cur *c, comem_msg_release *b)
{
    io_u64(c, &b->entry_id);
    io_i64(c, &b->bytes);
    io_u32(c, &b->timeout_ms);
}

static void walk_release_reply(comem_wire_cur *c, comem_msg_release_reply *b)
{
    io_enum8(c, &b->outcome, COMEM_RECEIPT_DONE, COMEM_RECEIPT_GONE);
    io_i64(c, &b->freed);
    io_i64(c, &b->resident);
}

static void walk_reply(comem_wire_cur *c, comem_msg_reply *b)
{
    io_i32(c, &b->status);
    io_text(c, b->message, sizeof b->message);
}

/* Walks the body of m->type; returns false for a type this version does not know. */
static bool walk_body(comem_wire_cur *c, comem_msg *m)
{
    switch ((comem_msg_type)m->type) {
    case COMEM_MSG_HELLO: walk_hello(c, &m->u.hello); break;
    case COMEM_MSG_DEVICES:
    case COMEM_MSG_GOODBYE:
    case COMEM_MSG_BOOKED:
    case COMEM_MSG_ADMIT_QUEUED: break; /* no body */
    case COMEM_MSG_HOLDER_ADD: walk_holder_add(c, &m->u.holder_add); break;
    case COMEM_MSG_HOLDER_REMOVE:
    case COMEM_MSG_ENTRY_REMOVE:
    case COMEM_MSG_ID_REPLY:
    case COMEM_MSG_TOUCH: walk_id(c, &m->u.id); break;
    case COMEM_MSG_ENTRY_ADD: walk_entry_add(c, &m->u.entry_add); break;
    case COMEM_MSG_CENSUS: walk_census(c, &m->u.census); break;
    case COMEM_MSG_ADMIT: walk_admit(c, &m->u.admit); break;
    case COMEM_MSG_GRANT_DONE: walk_grant_done(c, &m->u.grant_done); break;
    case COMEM_MSG_ACTIVITY: walk_activity(c, &m->u.activity); break;
    case COMEM_MSG_PRESSURE: walk_pressure(c, &m->u.pressure); break;
    case COMEM_MSG_PIN_ACQUIRE:
    case COMEM_MSG_PIN_RELEASE: walk_pin(c, &m->u.pin); break;
    case COMEM_MSG_RESERVE: walk_reserve(c, &m->u.reserve); break;
    case COMEM_MSG_DEVICE_MAP: walk_device_map(c, &m->u.device_map); break;
    case COMEM_MSG_WDDM: walk_wddm(c, &m->u.wddm); break;
    case COMEM_MSG_RECLAIM: walk_reclaim(c, &m->u.reclaim); break;
    case COMEM_MSG_STATUS: walk_status(c, &m->u.status); break;
    case COMEM_MSG_RECEIPT: walk_receipt(c, &m->u.receipt); break;
    case COMEM_MSG_RELEASE: walk_release_req(c, &m->u.release); break;
    case COMEM_MSG_REPLY: walk_reply(c, &m->u.reply); break;
    case COMEM_MSG_HELLO_REPLY: walk_hello_reply(c, &m->u.hello_reply); break;
    case COMEM_MSG_DEVICES_REPLY: walk_devices_reply(c, &m->u.devices_reply); break;
    case COMEM_MSG_ADMIT_REPLY: walk_admit_reply(c, &m->u.admit_reply); break;
    case COMEM_MSG_PRESSURE_REPLY: walk_pressure_reply(c, &m->u.pressure_reply); break;
    case COMEM_MSG_PIN_REPLY: walk_pin_reply(c, &m->u.pin_reply); break;
    case COMEM_MSG_RESERVE_REPLY: walk_reserve_reply(c, &m->u.reserve_reply); break;
    case COMEM_MSG_STATUS_REPLY: walk_status_reply(c, &m->u.status_reply); break;
    case COMEM_MSG_ASK: walk_ask(c, &m->u.ask); break;
    case COMEM_MSG_RELEASE_REPLY: walk_release_reply(c, &m->u.release_reply); break;
    default: return false;
    }
    return true;
}

/* ---- names ---- */

static const char *type_name_or_null(uint16_t type)
{
    switch ((comem_msg_type)type) {
    case COMEM_MSG_HELLO: return "HELLO";
    case COMEM_MSG_DEVICES: return "DEVICES";
    case COMEM_MSG_HOLDER_ADD: return "HOLDER_ADD";
    case COMEM_MSG_HOLDER_REMOVE: return "HOLDER_REMOVE";
    case COMEM_MSG_ENTRY_ADD: return "ENTRY_ADD";
    case COMEM_MSG_ENTRY_REMOVE: return "ENTRY_REMOVE";
    case COMEM_MSG_CENSUS: return "CENSUS";
    case COMEM_MSG_ADMIT: return "ADMIT";
    case COMEM_MSG_GRANT_DONE: return "GRANT_DONE";
    case COMEM_MSG_ACTIVITY: return "ACTIVITY";
    case COMEM_MSG_PRESSURE: return "PRESSURE";
    case COMEM_MSG_PIN_ACQUIRE: return "PIN_ACQUIRE";
    case COMEM_MSG_PIN_RELEASE: return "PIN_RELEASE";
    case COMEM_MSG_RESERVE: return "RESERVE";
    case COMEM_MSG_STATUS: return "STATUS";
    case COMEM_MSG_RECEIPT: return "RECEIPT";
    case COMEM_MSG_RELEASE: return "RELEASE";
    case COMEM_MSG_DEVICE_MAP: return "DEVICE_MAP";
    case COMEM_MSG_GOODBYE: return "GOODBYE";
    case COMEM_MSG_BOOKED: return "BOOKED";
    case COMEM_MSG_TOUCH: return "TOUCH";
    case COMEM_MSG_WDDM: return "WDDM";
    case COMEM_MSG_RECLAIM: return "RECLAIM";
    case COMEM_MSG_REPLY: return "REPLY";
    case COMEM_MSG_HELLO_REPLY: return "HELLO_REPLY";
    case COMEM_MSG_DEVICES_REPLY: return "DEVICES_REPLY";
    case COMEM_MSG_ID_REPLY: return "ID_REPLY";
    case COMEM_MSG_ADMIT_REPLY: return "ADMIT_REPLY";
    case COMEM_MSG_PRESSURE_REPLY: return "PRESSURE_REPLY";
    case COMEM_MSG_PIN_REPLY: return "PIN_REPLY";
    case COMEM_MSG_RESERVE_REPLY: return "RESERVE_REPLY";
    case COMEM_MSG_STATUS_REPLY: return "STATUS_REPLY";
    case COMEM_MSG_ASK: return "ASK";
    case COMEM_MSG_RELEASE_REPLY: return "RELEASE_REPLY";
    case COMEM_MSG_ADMIT_QUEUED: return "ADMIT_QUEUED";
    }
    return NULL;
}

const char *comem_wire_type_name(uint16_t type)
{
    const char *name = type_name_or_null(type);
    return name ? name : "UNKNOWN";
}

/* ---- frames ---- */

static bool header_ok(const comem_wire_header *h)
{
    return h->magic == COMEM_WIRE_MAGIC && h->version == COMEM_WIRE_VERSION &&
           type_name_or_null(h->type) != NULL && h->length <= COMEM_WIRE_MAX_PAYLOAD;
}

int comem_wire_decode_header(const uint8_t *buf, size_t len, comem_wire_header *out)
{
    if (buf == NULL || out == NULL)
        return COMEM_EINVAL;
    comem_wire_cur c = comem_wire_reader(buf, len < COMEM_WIRE_HEADER_SIZE ? len : COMEM_WIRE_HEADER_SIZE);
    comem_wire_header h;
    io_u32(&c, &h.magic);
    io_u16(&c, &h.version);
    io_u16(&c, &h.type);
    io_u32(&c, &h.request_id);
    io_u32(&c, &h.length);
    if (c.err != 0 || !header_ok(&h))
        return COMEM_EPROTO;
    *out = h;
    return COMEM_OK;
}

int comem_wire_header_version(const uint8_t *buf, size_t len, uint16_t *version)
{
    if (buf == NULL || version == NULL)
        return COMEM_EINVAL;
    comem_wire_cur c = comem_wire_reader(buf, len < 6 ? len : 6); /* u32 magic, u16 version */
    uint32_t magic = 0;
    uint16_t v = 0;
    io_u32(&c, &magic);
    io_u16(&c, &v);
    if (c.err != 0 || magic != COMEM_WIRE_MAGIC)
        return COMEM_EPROTO;
    *version = v;
    return COMEM_OK;
}

/* The size of the union member a type decodes into (0 for a type without a body). */
static size_t body_size(uint16_t type)
{
    const comem_msg *m = NULL;
    switch (type) {
    case COMEM_MSG_HELLO: return sizeof m->u.hello;
    case COMEM_MSG_HOLDER_ADD: return sizeof m->u.holder_add;
    case COMEM_MSG_HOLDER_REMOVE:
    case COMEM_MSG_ENTRY_REMOVE:
    case COMEM_MSG_ID_REPLY:
    case COMEM_MSG_TOUCH: return sizeof m->u.id;
    case COMEM_MSG_ENTRY_ADD: return sizeof m->u.entry_add;
    case COMEM_MSG_CENSUS: return sizeof m->u.census;
    case COMEM_MSG_ADMIT: return sizeof m->u.admit;
    case COMEM_MSG_GRANT_DONE: return sizeof m->u.grant_done;
    case COMEM_MSG_ACTIVITY: return sizeof m->u.activity;
    case COMEM_MSG_PRESSURE: return sizeof m->u.pressure;
    case COMEM_MSG_PIN_ACQUIRE:
    case COMEM_MSG_PIN_RELEASE: return sizeof m->u.pin;
    case COMEM_MSG_RESERVE: return sizeof m->u.reserve;
    case COMEM_MSG_DEVICE_MAP: return sizeof m->u.device_map;
    case COMEM_MSG_WDDM: return sizeof m->u.wddm;
    case COMEM_MSG_RECLAIM: return sizeof m->u.reclaim;
    case COMEM_MSG_STATUS: return sizeof m->u.status;
    case COMEM_MSG_RECEIPT: return sizeof m->u.receipt;
    case COMEM_MSG_RELEASE: return sizeof m->u.release;
    case COMEM_MSG_REPLY: return sizeof m->u.reply;
    case COMEM_MSG_HELLO_REPLY: return sizeof m->u.hello_reply;
    case COMEM_MSG_DEVICES_REPLY: return sizeof m->u.devices_reply;
    case COMEM_MSG_ADMIT_REPLY: return sizeof m->u.admit_reply;
    case COMEM_MSG_PRESSURE_REPLY: return sizeof m->u.pressure_reply;
    case COMEM_MSG_PIN_REPLY: return sizeof m->u.pin_reply;
    case COMEM_MSG_RESERVE_REPLY: return sizeof m->u.reserve_reply;
    case COMEM_MSG_STATUS_REPLY: return sizeof m->u.status_reply;
    case COMEM_MSG_ASK: return sizeof m->u.ask;
    case COMEM_MSG_RELEASE_REPLY: return sizeof m->u.release_reply;
    default: return 0;
    }
}

int comem_wire_decode(const comem_wire_header *h, const uint8_t *payload, comem_msg *out)
{
    static const uint8_t empty[1]; /* stands in for a NULL payload of length 0 */
    if (h == NULL || out == NULL)
        return COMEM_EINVAL;
    if (!header_ok(h))
        return COMEM_EPROTO;
    if (payload == NULL) {
        if (h->length != 0)
            return COMEM_EINVAL;
        payload = empty;
    }
    /* The decoded member is zeroed so that unused list slots and text tails never carry a
       previous frame; only that member, since the whole union is about 16 KiB per frame. */
    memset(&out->u, 0, body_size(h->type));
    out->type = h->type;
    out->request_id = h->request_id;
    comem_wire_cur c = comem_wire_reader(payload, h->length);
    walk_body(&c, out); /* the type is known: header_ok checked it */
    if (c.err == 0 && c.pos != h->length)
        return COMEM_EPROTO; /* trailing bytes */
    return c.err;
}

int comem_wire_encode(const comem_msg *m, uint8_t *buf, size_t cap)
{
    if (m == NULL || type_name_or_null(m->type) == NULL)
        return COMEM_EINVAL;
    if (cap < COMEM_WIRE_HEADER_SIZE)
        return COMEM_ERANGE;
    if (buf == NULL)
        return COMEM_EINVAL;
    /* The body first, so the header can carry its length. The walk only reads
     * *m when encoding; the cast lets one walk serve both directions. */
    comem_wire_cur body = comem_wire_writer(buf + COMEM_WIRE_HEADER_SIZE, cap - COMEM_WIRE_HEADER_SIZE);
    walk_body(&body, (comem_msg *)m);
    if (body.err != 0)
        return body.err;
    if (body.pos > COMEM_WIRE_MAX_PAYLOAD) /* unreachable with wire.h's maxima; kept as a guard */
        return COMEM_ERANGE;

    comem_wire_header h = {
        .magic = COMEM_WIRE_MAGIC,
        .version = COMEM_WIRE_VERSION,
        .type = m->type,
        .request_id = m->request_id,
        .length = (uint32_t)body.pos,
    };
    comem_wire_cur head = comem_wire_writer(buf, COMEM_WIRE_HEADER_SIZE);
    io_u32(&head, &h.magic);
    io_u16(&head, &h.version);
    io_u16(&head, &h.type);
    io_u32(&head, &h.request_id);
    io_u32(&head, &h.length);
    return (int)(COMEM_WIRE_HEADER_SIZE + body.pos);
}
