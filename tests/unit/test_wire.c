/*
 * tests/unit/test_wire.c - the wire codec: round trips of every message,
 * golden bytes, and every malformation refused on both sides.
 *
 * Frames built by hand here use this file's own little-endian builder, not the
 * codec's, so a layout change in the codec cannot hide behind a shared helper.
 * Decoding is always given a heap block of exactly the frame's size, so ASan
 * reports any read past the payload.
 */
#include "unit/cmocka_all.h"

#include <stdlib.h>
#include <string.h>

#include "comem/common.h"
#include "wire/wire.h"

static const uint16_t all_types[] = {
    COMEM_MSG_HELLO,          COMEM_MSG_DEVICES,       COMEM_MSG_HOLDER_ADD,
    COMEM_MSG_HOLDER_REMOVE,  COMEM_MSG_ENTRY_ADD,     COMEM_MSG_ENTRY_REMOVE,
    COMEM_MSG_CENSUS,         COMEM_MSG_ADMIT,         COMEM_MSG_GRANT_DONE,
    COMEM_MSG_ACTIVITY,       COMEM_MSG_PRESSURE,      COMEM_MSG_PIN_ACQUIRE,
    COMEM_MSG_PIN_RELEASE,    COMEM_MSG_RESERVE,       COMEM_MSG_STATUS,
    COMEM_MSG_RECEIPT,        COMEM_MSG_REPLY,         COMEM_MSG_HELLO_REPLY,
    COMEM_MSG_DEVICES_REPLY,  COMEM_MSG_ID_REPLY,      COMEM_MSG_ADMIT_REPLY,
    COMEM_MSG_PRESSURE_REPLY, COMEM_MSG_PIN_REPLY,     COMEM_MSG_RESERVE_REPLY,
    COMEM_MSG_STATUS_REPLY,   COMEM_MSG_ASK,           COMEM_MSG_RELEASE,
    COMEM_MSG_RELEASE_REPLY,  COMEM_MSG_DEVICE_MAP,    COMEM_MSG_GOODBYE,
    COMEM_MSG_BOOKED,         COMEM_MSG_TOUCH,         COMEM_MSG_ADMIT_QUEUED,
    COMEM_MSG_WDDM,           COMEM_MSG_RECLAIM,
};
#define N_TYPES (sizeof all_types / sizeof all_types[0])

/* How full a sample message is. */
typedef enum { FULL, SMALL, EMPTY } shape;

static uint8_t g_chunk[COMEM_WIRE_CHUNK_MAX]; /* STATUS_REPLY text for samples */

/* Writes a text of the length the shape asks for into a char[size] (FULL: size - 1). */
static void text(char *dst, size_t size, shape s, char first)
{
    size_t n = s == FULL ? size - 1 : s == SMALL ? 5 : 0;
    for (size_t i = 0; i < n; i++)
        dst[i] = (char)(first + (char)(i % 26)); /* varied, never NUL */
    dst[n] = '\0';
}

static size_t items(shape s, size_t max) { return s == FULL ? max : s == SMALL ? 3 : 0; }

/* A message of the given type with values that exercise every byte of every field. */
static void sample(comem_msg *m, uint16_t type, shape s)
{
    memset(m, 0, sizeof *m);
    m->type = type;
    m->request_id = 0x80000000u + type;
    switch (type) {
    case COMEM_MSG_HELLO: {
        comem_msg_hello *b = &m->u.hello;
        b->proto_version = COMEM_WIRE_VERSION;
        b->role = COMEM_ROLE_WORKER;
        b->scope = 1;
        b->pid = 0xfedcba98u;
        b->caps = COMEM_CAP_MASK;
        b->reserve_base = INT64_MIN;
        text(b->name, sizeof b->name, s, 'a');
        text(b->token, sizeof b->token, s, 'A');
        break;
    }
    case COMEM_MSG_DEVICES:
    case COMEM_MSG_GOODBYE:
    case COMEM_MSG_BOOKED:
    case COMEM_MSG_ADMIT_QUEUED: break;
    case COMEM_MSG_HOLDER_ADD:
        m->u.holder_add.device = 0xffff;
        m->u.holder_add.kind = COMEM_HOLDER_RAW;
        m->u.holder_add.flags = COMEM_CAP_RELEASE | COMEM_CAP_WHILE_BUSY;
        m->u.holder_add.pid = 0x7fffffffu;
        text(m->u.holder_add.name, sizeof m->u.holder_add.name, s, 'h');
        break;
    case COMEM_MSG_HOLDER_REMOVE:
    case COMEM_MSG_ENTRY_REMOVE:
    case COMEM_MSG_ID_REPLY:
    case COMEM_MSG_TOUCH: m->u.id.id = 0x0102030405060708ull + type; break;
    case COMEM_MSG_ENTRY_ADD:
        m->u.entry_add.holder_id = UINT64_MAX - 1;
        m->u.entry_add.size = INT64_MAX;
        m->u.entry_add.resident = -1;
        m->u.entry_add.refs = INT64_MAX;
        m->u.entry_add.flags = COMEM_ENTRY_DYNAMIC;
        text(m->u.entry_add.name, sizeof m->u.entry_add.name, s, 'e');
        break;
    case COMEM_MSG_CENSUS:
    case COMEM_MSG_RECEIPT: {
        comem_wire_residency *it;
        uint16_t n = (uint16_t)items(s, COMEM_WIRE_MAX_ITEMS);
        if (type == COMEM_MSG_CENSUS) {
            m->u.census.holder_id = 0xa1a2a3a4a5a6a7a8ull;
            m->u.census.seq = UINT64_MAX;
            m->u.census.has = COMEM_CENSUS_PINNED | COMEM_CENSUS_OVERHEAD;
            m->u.census.pinned = INT64_MIN;
            m->u.census.overhead = -123456789;
            m->u.census.n = n;
            it = m->u.census.items;
        } else {
            m->u.receipt.ask_id = 0x7766554433221100ull;
            m->u.receipt.outcome = COMEM_RECEIPT_ERROR;
            m->u.receipt.freed = -4096;
            m->u.receipt.n = n;
            it = m->u.receipt.items;
        }
        for (uint16_t i = 0; i < n; i++) {
            it[i].entry_id = (uint64_t)i + 1;
            it[i].seq = ((uint64_t)i << 40) | i;
            it[i].resident = (i & 1) ? -(int64_t)i * 4096 : INT64_MAX - i;
            it[i].refs = (i & 1) ? (int64_t)i : INT64_MAX;
        }
        break;
    }
    case COMEM_MSG_ADMIT: {
        comem_msg_admit *b = &m->u.admit;
        b->device = 3;
        b->holder_id = 42;
        b->weights = INT64_MAX;
        b->inference = -1;
        b->cast_forward = INT64_MIN;
        b->timeout_ms = UINT32_MAX;
        b->n_keep = (uint16_t)items(s, COMEM_WIRE_MAX_ITEMS);
        for (uint16_t i = 0; i < b->n_keep; i++)
            b->keep[i] = UINT64_MAX - i;
        break;
    }
    case COMEM_MSG_GRANT_DONE:
        m->u.grant_done.grant_id = 0x1000000000000001ull;
        m->u.grant_done.entry_id = 0;
        m->u.grant_done.used = -2;
        break;
    case COMEM_MSG_RECLAIM:
        m->u.reclaim.device = s == FULL ? 0xffff : 0;
        m->u.reclaim.holder_id = s == EMPTY ? 0 : 0x2000000000000003ull;
        m->u.reclaim.bytes = s == FULL ? INT64_MAX : 1;
        break;
    case COMEM_MSG_ACTIVITY:
        m->u.activity.holder_id = 0;
        m->u.activity.busy = 1;
        text(m->u.activity.prompt, sizeof m->u.activity.prompt, s, 'p');
        break;
    case COMEM_MSG_PRESSURE:
        m->u.pressure.device = 1;
        m->u.pressure.bytes = INT64_MIN + 1;
        m->u.pressure.timeout_ms = 30000;
        break;
    case COMEM_MSG_PIN_ACQUIRE:
    case COMEM_MSG_PIN_RELEASE:
        m->u.pin.holder_id = UINT64_MAX;
        m->u.pin.bytes = type == COMEM_MSG_PIN_ACQUIRE ? INT64_MAX : -7;
        break;
    case COMEM_MSG_RESERVE: m->u.reserve.device = 0x1234; break;
    case COMEM_MSG_DEVICE_MAP:
        m->u.device_map.n = (uint16_t)items(s, COMEM_MAX_DEVICES);
        for (uint16_t i = 0; i < m->u.device_map.n; i++) {
            m->u.device_map.items[i].ordinal = (uint16_t)(COMEM_MAX_DEVICES - 1 - i);
            text(m->u.device_map.items[i].uuid, sizeof m->u.device_map.items[i].uuid, s == EMPTY ? SMALL : s, 'G');
        }
        break;
    case COMEM_MSG_WDDM:
        m->u.wddm.n = (uint16_t)items(s, COMEM_MAX_DEVICES);
        for (uint16_t i = 0; i < m->u.wddm.n; i++) {
            m->u.wddm.items[i].luid = 0x8000000000000001ull + i;
            m->u.wddm.items[i].budget = s == FULL ? INT64_MAX - i : 0;
            m->u.wddm.items[i].usage = (int64_t)i << 30;
            text(m->u.wddm.items[i].uuid, sizeof m->u.wddm.items[i].uuid, s, 'W'); /* empty: a LUID alone */
        }
        break;
    case COMEM_MSG_STATUS: m->u.status.flags = 0; break;
    case COMEM_MSG_REPLY:
        m->u.reply.status = COMEM_EPROTO;
        text(m->u.reply.message, sizeof m->u.reply.message, s, 'm');
        break;
    case COMEM_MSG_HELLO_REPLY:
        m->u.hello_reply.session_id = UINT64_MAX;
        m->u.hello_reply.coord_pid = 4242;
        m->u.hello_reply.proto_version = 0xffff;
        m->u.hello_reply.n_devices = COMEM_MAX_DEVICES;
        m->u.hello_reply.view_share = s == EMPTY ? 0 : UINT64_MAX;
        m->u.hello_reply.area_share = s == EMPTY ? 0 : 0x0102030405060708ULL;
        break;
    case COMEM_MSG_DEVICES_REPLY: {
        comem_msg_devices_reply *b = &m->u.devices_reply;
        b->n = (uint16_t)items(s, COMEM_MAX_DEVICES);
        for (uint16_t i = 0; i < b->n; i++) {
            comem_wire_device *d = &b->devices[i];
            d->index = (uint16_t)(i * 1000 + 7);
            d->scope = (uint8_t)(i & 1);
            d->total = INT64_MAX - i;
            d->free = -(int64_t)i - 1;
            d->reserved = INT64_MIN + i;
            text(d->uuid, sizeof d->uuid, s, (char)('A' + i));
            text(d->name, sizeof d->name, s, (char)('a' + i));
        }
        break;
    }
    case COMEM_MSG_ADMIT_REPLY: {
        comem_msg_admit_reply *b = &m->u.admit_reply;
        b->granted = 1;
        b->grant_id = 0xdeadbeefcafef00dull;
        b->bytes = INT64_MAX;
        b->need = INT64_MIN;
        b->free_before = -1;
        b->free_after = 0x0123456789abcdefll;
        b->short_by = -0x0123456789abcdefll;
        b->freed = 1;
        b->reserve = 419430400;
        b->pager_headroom = -268435456;
        b->n_asked = 0xffff;
        b->n_busy = 1234;
        b->n_ids = (uint16_t)items(s, COMEM_WIRE_MAX_ASKED);
        for (uint16_t i = 0; i < b->n_ids; i++)
            b->asked[i] = 0x8000000000000001ull + i;
        break;
    }
    case COMEM_MSG_RELEASE:
        m->u.release.entry_id = 0xfeedfacecafebeefull;
        m->u.release.bytes = INT64_MIN;
        m->u.release.timeout_ms = 0xfffffffeu;
        break;
    case COMEM_MSG_RELEASE_REPLY:
        m->u.release_reply.outcome = COMEM_RECEIPT_GONE;
        m->u.release_reply.freed = INT64_MAX;
        m->u.release_reply.resident = -7;
        break;
    case COMEM_MSG_PRESSURE_REPLY:
        m->u.pressure_reply.freed = INT64_MIN;
        m->u.pressure_reply.free_after = INT64_MAX;
        m->u.pressure_reply.n_asked = 7;
        m->u.pressure_reply.n_busy = 0xfffe;
        break;
    case COMEM_MSG_PIN_REPLY:
        m->u.pin_reply.granted = 0;
        m->u.pin_reply.total_pinned = INT64_MAX;
        m->u.pin_reply.max_pinned = -1;
        m->u.pin_reply.shortfall = INT64_MIN;
        break;
    case COMEM_MSG_RESERVE_REPLY:
        m->u.reserve_reply.published = INT64_MAX;
        m->u.reserve_reply.base = INT64_MIN;
        m->u.reserve_reply.for_requester = -1;
        m->u.reserve_reply.pager_headroom = 268435456;
        break;
    case COMEM_MSG_STATUS_REPLY: {
        uint32_t len = s == FULL ? COMEM_WIRE_CHUNK_MAX : s == SMALL ? 5 : 0;
        m->u.status_reply.offset = 1000;
        m->u.status_reply.total = 1000 + len + 5;
        m->u.status_reply.len = len;
        m->u.status_reply.text = g_chunk;
        break;
    }
    case COMEM_MSG_ASK: {
        comem_msg_ask *b = &m->u.ask;
        b->ask_id = 0x0f0e0d0c0b0a0908ull;
        b->holder_id = 77;
        b->kind = COMEM_ASK_PINS;
        b->device = 0xfffe;
        b->bytes = INT64_MIN;
        b->deadline_ms = 0x80000001u;
        b->n = (uint16_t)items(s, COMEM_WIRE_MAX_ITEMS);
        for (uint16_t i = 0; i < b->n; i++) {
            b->items[i].entry_id = UINT64_MAX - i;
            b->items[i].bytes = (i & 1) ? INT64_MIN + i : -(int64_t)i;
        }
        break;
    }
    default: fail_msg("no sample for type %u", type);
    }
}

/* The payload size wire.c's layout gives m: a second, independent statement of that layout. */
static size_t expected_payload(const comem_msg *m)
{
#define TXT(s) (1 + strlen(s))
    switch (m->type) {
    case COMEM_MSG_HELLO:
        return 2 + 1 + 1 + 4 + 4 + 8 + TXT(m->u.hello.name) + TXT(m->u.hello.token);
    case COMEM_MSG_DEVICES:
    case COMEM_MSG_GOODBYE:
    case COMEM_MSG_BOOKED:
    case COMEM_MSG_ADMIT_QUEUED: return 0;
    case COMEM_MSG_HOLDER_ADD: return 2 + 1 + 4 + 4 + TXT(m->u.holder_add.name);
    case COMEM_MSG_HOLDER_REMOVE:
    case COMEM_MSG_ENTRY_REMOVE:
    case COMEM_MSG_ID_REPLY:
    case COMEM_MSG_TOUCH: return 8;
    case COMEM_MSG_ENTRY_ADD: return 8 + 8 + 8 + 8 + 4 + TXT(m->u.entry_add.name);
    case COMEM_MSG_CENSUS: return 8 + 8 + 1 + 8 + 8 + 2 + 32 * (size_t)m->u.census.n;
    case COMEM_MSG_ADMIT: return 2 + 8 + 8 + 8 + 8 + 4 + 2 + 8 * (size_t)m->u.admit.n_keep;
    case COMEM_MSG_GRANT_DONE: return 24;
    case COMEM_MSG_RECLAIM: return 2 + 8 + 8;
    case COMEM_MSG_ACTIVITY: return 8 + 1 + TXT(m->u.activity.prompt);
    case COMEM_MSG_PRESSURE: return 2 + 8 + 4;
    case COMEM_MSG_PIN_ACQUIRE:
    case COMEM_MSG_PIN_RELEASE: return 16;
    case COMEM_MSG_RESERVE: return 2;
    case COMEM_MSG_DEVICE_MAP: {
        size_t n = 2;
        for (size_t i = 0; i < m->u.device_map.n; i++)
            n += 2 + TXT(m->u.device_map.items[i].uuid);
        return n;
    }
    case COMEM_MSG_WDDM: {
        size_t n = 2;
        for (size_t i = 0; i < m->u.wddm.n; i++)
            n += 24 + TXT(m->u.wddm.items[i].uuid);
        return n;
    }
    case COMEM_MSG_STATUS: return 1;
    case COMEM_MSG_RECEIPT: return 8 + 1 + 8 + 2 + 32 * (size_t)m->u.receipt.n;
    case COMEM_MSG_REPLY: return 4 + TXT(m->u.reply.message);
    case COMEM_MSG_HELLO_REPLY: return 8 + 4 + 2 + 2 + 8 + 8;
    case COMEM_MSG_DEVICES_REPLY: {
        size_t n = 2;
        for (size_t i = 0; i < m->u.devices_reply.n; i++)
            n += 2 + 1 + 24 + TXT(m->u.devices_reply.devices[i].uuid) +
                 TXT(m->u.devices_reply.devices[i].name);
        return n;
    }
    case COMEM_MSG_ADMIT_REPLY: return 1 + 8 + 8 * 8 + 2 + 2 + 2 + 8 * (size_t)m->u.admit_reply.n_ids;
    case COMEM_MSG_RELEASE: return 8 + 8 + 4;
    case COMEM_MSG_RELEASE_REPLY: return 1 + 8 + 8;
    case COMEM_MSG_PRESSURE_REPLY: return 8 + 8 + 2 + 2;
    case COMEM_MSG_PIN_REPLY: return 1 + 24;
    case COMEM_MSG_RESERVE_REPLY: return 32;
    case COMEM_MSG_STATUS_REPLY: return 12 + m->u.status_reply.len;
    case COMEM_MSG_ASK: return 8 + 8 + 1 + 2 + 8 + 4 + 2 + 16 * (size_t)m->u.ask.n;
    }
#undef TXT
    fail_msg("no layout for type %u", m->type);
    return 0;
}

static void assert_residency_equal(const comem_wire_residency *a, const comem_wire_residency *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(a[i].entry_id, b[i].entry_id);
        assert_int_equal(a[i].seq, b[i].seq);
        assert_true(a[i].resident == b[i].resident);
        assert_true(a[i].refs == b[i].refs);
    }
}

/* Field by field: a (what was encoded) against b (what came back). */
static void assert_msg_equal(const comem_msg *a, const comem_msg *b)
{
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->request_id, b->request_id);
    switch (a->type) {
    case COMEM_MSG_HELLO:
        assert_int_equal(a->u.hello.proto_version, b->u.hello.proto_version);
        assert_int_equal(a->u.hello.role, b->u.hello.role);
        assert_int_equal(a->u.hello.scope, b->u.hello.scope);
        assert_int_equal(a->u.hello.pid, b->u.hello.pid);
        assert_int_equal(a->u.hello.caps, b->u.hello.caps);
        assert_true(a->u.hello.reserve_base == b->u.hello.reserve_base);
        assert_string_equal(a->u.hello.name, b->u.hello.name);
        assert_string_equal(a->u.hello.token, b->u.hello.token);
        break;
    case COMEM_MSG_DEVICES:
    case COMEM_MSG_GOODBYE:
    case COMEM_MSG_BOOKED:
    case COMEM_MSG_ADMIT_QUEUED: break;
    case COMEM_MSG_HOLDER_ADD:
        assert_int_equal(a->u.holder_add.device, b->u.holder_add.device);
        assert_int_equal(a->u.holder_add.kind, b->u.holder_add.kind);
        assert_int_equal(a->u.holder_add.flags, b->u.holder_add.flags);
        assert_int_equal(a->u.holder_add.pid, b->u.holder_add.pid);
        assert_string_equal(a->u.holder_add.name, b->u.holder_add.name);
        break;
    case COMEM_MSG_HOLDER_REMOVE:
    case COMEM_MSG_ENTRY_REMOVE:
    case COMEM_MSG_ID_REPLY:
    case COMEM_MSG_TOUCH: assert_int_equal(a->u.id.id, b->u.id.id); break;
    case COMEM_MSG_ENTRY_ADD:
        assert_int_equal(a->u.entry_add.holder_id, b->u.entry_add.holder_id);
        assert_true(a->u.entry_add.size == b->u.entry_add.size);
        assert_true(a->u.entry_add.resident == b->u.entry_add.resident);
        assert_true(a->u.entry_add.refs == b->u.entry_add.refs);
        assert_int_equal(a->u.entry_add.flags, b->u.entry_add.flags);
        assert_string_equal(a->u.entry_add.name, b->u.entry_add.name);
        break;
    case COMEM_MSG_CENSUS:
        assert_int_equal(a->u.census.holder_id, b->u.census.holder_id);
        assert_int_equal(a->u.census.seq, b->u.census.seq);
        assert_int_equal(a->u.census.has, b->u.census.has);
        assert_true(a->u.census.pinned == b->u.census.pinned);
        assert_true(a->u.census.overhead == b->u.census.overhead);
        assert_int_equal(a->u.census.n, b->u.census.n);
        assert_residency_equal(a->u.census.items, b->u.census.items, a->u.census.n);
        break;
    case COMEM_MSG_ADMIT:
        assert_int_equal(a->u.admit.device, b->u.admit.device);
        assert_int_equal(a->u.admit.holder_id, b->u.admit.holder_id);
        assert_true(a->u.admit.weights == b->u.admit.weights);
        assert_true(a->u.admit.inference == b->u.admit.inference);
        assert_true(a->u.admit.cast_forward == b->u.admit.cast_forward);
        assert_int_equal(a->u.admit.timeout_ms, b->u.admit.timeout_ms);
        assert_int_equal(a->u.admit.n_keep, b->u.admit.n_keep);
        for (size_t i = 0; i < a->u.admit.n_keep; i++)
            assert_int_equal(a->u.admit.keep[i], b->u.admit.keep[i]);
        break;
    case COMEM_MSG_GRANT_DONE:
        assert_int_equal(a->u.grant_done.grant_id, b->u.grant_done.grant_id);
        assert_int_equal(a->u.grant_done.entry_id, b->u.grant_done.entry_id);
        assert_true(a->u.grant_done.used == b->u.grant_done.used);
        break;
    case COMEM_MSG_RECLAIM:
        assert_int_equal(a->u.reclaim.device, b->u.reclaim.device);
        assert_int_equal(a->u.reclaim.holder_id, b->u.reclaim.holder_id);
        assert_true(a->u.reclaim.bytes == b->u.reclaim.bytes);
        break;
    case COMEM_MSG_ACTIVITY:
        assert_int_equal(a->u.activity.holder_id, b->u.activity.holder_id);
        assert_int_equal(a->u.activity.busy, b->u.activity.busy);
        assert_string_equal(a->u.activity.prompt, b->u.activity.prompt);
        break;
    case COMEM_MSG_PRESSURE:
        assert_int_equal(a->u.pressure.device, b->u.pressure.device);
        assert_true(a->u.pressure.bytes == b->u.pressure.bytes);
        assert_int_equal(a->u.pressure.timeout_ms, b->u.pressure.timeout_ms);
        break;
    case COMEM_MSG_PIN_ACQUIRE:
    case COMEM_MSG_PIN_RELEASE:
        assert_int_equal(a->u.pin.holder_id, b->u.pin.holder_id);
        assert_true(a->u.pin.bytes == b->u.pin.bytes);
        break;
    case COMEM_MSG_RESERVE: assert_int_equal(a->u.reserve.device, b->u.reserve.device); break;
    case COMEM_MSG_DEVICE_MAP:
        assert_int_equal(a->u.device_map.n, b->u.device_map.n);
        for (size_t i = 0; i < a->u.device_map.n; i++) {
            assert_int_equal(a->u.device_map.items[i].ordinal, b->u.device_map.items[i].ordinal);
            assert_string_equal(a->u.device_map.items[i].uuid, b->u.device_map.items[i].uuid);
        }
        break;
    case COMEM_MSG_WDDM:
        assert_int_equal(a->u.wddm.n, b->u.wddm.n);
        for (size_t i = 0; i < a->u.wddm.n; i++) {
            assert_int_equal(a->u.wddm.items[i].luid, b->u.wddm.items[i].luid);
            assert_true(a->u.wddm.items[i].budget == b->u.wddm.items[i].budget);
            assert_true(a->u.wddm.items[i].usage == b->u.wddm.items[i].usage);
            assert_string_equal(a->u.wddm.items[i].uuid, b->u.wddm.items[i].uuid);
        }
        break;
    case COMEM_MSG_STATUS: assert_int_equal(a->u.status.flags, b->u.status.flags); break;
    case COMEM_MSG_RECEIPT:
        assert_int_equal(a->u.receipt.ask_id, b->u.receipt.ask_id);
        assert_int_equal(a->u.receipt.outcome, b->u.receipt.outcome);
        assert_true(a->u.receipt.freed == b->u.receipt.freed);
        assert_int_equal(a->u.receipt.n, b->u.receipt.n);
        assert_residency_equal(a->u.receipt.items, b->u.receipt.items, a->u.receipt.n);
        break;
    case COMEM_MSG_REPLY:
        assert_true(a->u.reply.status == b->u.reply.status);
        assert_string_equal(a->u.reply.message, b->u.reply.message);
        break;
    case COMEM_MSG_HELLO_REPLY:
        assert_int_equal(a->u.hello_reply.session_id, b->u.hello_reply.session_id);
        assert_int_equal(a->u.hello_reply.coord_pid, b->u.hello_reply.coord_pid);
        assert_int_equal(a->u.hello_reply.proto_version, b->u.hello_reply.proto_version);
        assert_int_equal(a->u.hello_reply.n_devices, b->u.hello_reply.n_devices);
        assert_int_equal(a->u.hello_reply.view_share, b->u.hello_reply.view_share);
        assert_int_equal(a->u.hello_reply.area_share, b->u.hello_reply.area_share);
        break;
    case COMEM_MSG_DEVICES_REPLY:
        assert_int_equal(a->u.devices_reply.n, b->u.devices_reply.n);
        for (size_t i = 0; i < a->u.devices_reply.n; i++) {
            const comem_wire_device *x = &a->u.devices_reply.devices[i];
            const comem_wire_device *y = &b->u.devices_reply.devices[i];
            assert_int_equal(x->index, y->index);
            assert_int_equal(x->scope, y->scope);
            assert_true(x->total == y->total);
            assert_true(x->free == y->free);
            assert_true(x->reserved == y->reserved);
            assert_string_equal(x->uuid, y->uuid);
            assert_string_equal(x->name, y->name);
        }
        break;
    case COMEM_MSG_ADMIT_REPLY: {
        const comem_msg_admit_reply *x = &a->u.admit_reply, *y = &b->u.admit_reply;
        assert_int_equal(x->granted, y->granted);
        assert_int_equal(x->grant_id, y->grant_id);
        assert_true(x->bytes == y->bytes);
        assert_true(x->need == y->need);
        assert_true(x->free_before == y->free_before);
        assert_true(x->free_after == y->free_after);
        assert_true(x->short_by == y->short_by);
        assert_true(x->freed == y->freed);
        assert_true(x->reserve == y->reserve);
        assert_true(x->pager_headroom == y->pager_headroom);
        assert_int_equal(x->n_asked, y->n_asked);
        assert_int_equal(x->n_busy, y->n_busy);
        assert_int_equal(x->n_ids, y->n_ids);
        for (size_t i = 0; i < x->n_ids; i++)
            assert_int_equal(x->asked[i], y->asked[i]);
        break;
    }
    case COMEM_MSG_RELEASE:
        assert_int_equal(a->u.release.entry_id, b->u.release.entry_id);
        assert_true(a->u.release.bytes == b->u.release.bytes);
        assert_int_equal(a->u.release.timeout_ms, b->u.release.timeout_ms);
        break;
    case COMEM_MSG_RELEASE_REPLY:
        assert_int_equal(a->u.release_reply.outcome, b->u.release_reply.outcome);
        assert_true(a->u.release_reply.freed == b->u.release_reply.freed);
        assert_true(a->u.release_reply.resident == b->u.release_reply.resident);
        break;
    case COMEM_MSG_PRESSURE_REPLY:
        assert_true(a->u.pressure_reply.freed == b->u.pressure_reply.freed);
        assert_true(a->u.pressure_reply.free_after == b->u.pressure_reply.free_after);
        assert_int_equal(a->u.pressure_reply.n_asked, b->u.pressure_reply.n_asked);
        assert_int_equal(a->u.pressure_reply.n_busy, b->u.pressure_reply.n_busy);
        break;
    case COMEM_MSG_PIN_REPLY:
        assert_int_equal(a->u.pin_reply.granted, b->u.pin_reply.granted);
        assert_true(a->u.pin_reply.total_pinned == b->u.pin_reply.total_pinned);
        assert_true(a->u.pin_reply.max_pinned == b->u.pin_reply.max_pinned);
        assert_true(a->u.pin_reply.shortfall == b->u.pin_reply.shortfall);
        break;
    case COMEM_MSG_RESERVE_REPLY:
        assert_true(a->u.reserve_reply.published == b->u.reserve_reply.published);
        assert_true(a->u.reserve_reply.base == b->u.reserve_reply.base);
        assert_true(a->u.reserve_reply.for_requester == b->u.reserve_reply.for_requester);
        assert_true(a->u.reserve_reply.pager_headroom == b->u.reserve_reply.pager_headroom);
        break;
    case COMEM_MSG_STATUS_REPLY:
        assert_int_equal(a->u.status_reply.offset, b->u.status_reply.offset);
        assert_int_equal(a->u.status_reply.total, b->u.status_reply.total);
        assert_int_equal(a->u.status_reply.len, b->u.status_reply.len);
        assert_non_null(b->u.status_reply.text);
        if (a->u.status_reply.len > 0)
            assert_memory_equal(a->u.status_reply.text, b->u.status_reply.text, a->u.status_reply.len);
        break;
    case COMEM_MSG_ASK:
        assert_int_equal(a->u.ask.ask_id, b->u.ask.ask_id);
        assert_int_equal(a->u.ask.holder_id, b->u.ask.holder_id);
        assert_int_equal(a->u.ask.kind, b->u.ask.kind);
        assert_int_equal(a->u.ask.device, b->u.ask.device);
        assert_true(a->u.ask.bytes == b->u.ask.bytes);
        assert_int_equal(a->u.ask.deadline_ms, b->u.ask.deadline_ms);
        assert_int_equal(a->u.ask.n, b->u.ask.n);
        for (size_t i = 0; i < a->u.ask.n; i++) {
            assert_int_equal(a->u.ask.items[i].entry_id, b->u.ask.items[i].entry_id);
            assert_true(a->u.ask.items[i].bytes == b->u.ask.items[i].bytes);
        }
        break;
    default: fail_msg("no comparison for type %u", a->type);
    }
}

/* ---- helpers ---- */

static uint8_t g_buf[COMEM_WIRE_MAX_FRAME + 64];
static comem_msg g_a, g_b; /* large: kept off the stack */

/* Decodes a whole frame held in a heap block of exactly len bytes (ASan sees any overread). */
static int decode_exact(const uint8_t *frame, size_t len, comem_msg *out)
{
    uint8_t *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    if (len)
        memcpy(copy, frame, len);
    comem_wire_header h;
    int rc = comem_wire_decode_header(copy, len, &h);
    if (rc == 0) {
        if ((size_t)h.length + COMEM_WIRE_HEADER_SIZE != len)
            rc = 1; /* the caller built an inconsistent frame: a test bug */
        else
            rc = comem_wire_decode(&h, copy + COMEM_WIRE_HEADER_SIZE, out);
    }
    free(copy);
    return rc;
}

static void put_le(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A hand-built frame: the test's own byte layout, independent of the codec. */
typedef struct frame {
    uint8_t b[COMEM_WIRE_MAX_FRAME + 64];
    size_t n;
} frame;

static frame g_f;

static void fb_start(frame *f, uint16_t type)
{
    memset(f->b, 0, COMEM_WIRE_HEADER_SIZE);
    put_le(f->b, COMEM_WIRE_MAGIC, 4);
    put_le(f->b + 4, COMEM_WIRE_VERSION, 2);
    put_le(f->b + 6, type, 2);
    put_le(f->b + 8, 99, 4);
    f->n = COMEM_WIRE_HEADER_SIZE;
}
static void fb_int(frame *f, uint64_t v, size_t n)
{
    put_le(f->b + f->n, v, n);
    f->n += n;
}
static void fb_text(frame *f, const char *s, size_t n) /* n bytes of s, which may hold NULs */
{
    fb_int(f, n, 1);
    memcpy(f->b + f->n, s, n);
    f->n += n;
}
static void fb_fill(frame *f, uint8_t byte, size_t n)
{
    memset(f->b + f->n, byte, n);
    f->n += n;
}
/* Patches the length and decodes. */
static int fb_decode(frame *f, comem_msg *out)
{
    put_le(f->b + 12, f->n - COMEM_WIRE_HEADER_SIZE, 4);
    return decode_exact(f->b, f->n, out);
}

/* ---- round trips ---- */

static void round_trip(shape s)
{
    for (size_t t = 0; t < N_TYPES; t++) {
        sample(&g_a, all_types[t], s);
        int n = comem_wire_encode(&g_a, g_buf, sizeof g_buf);
        assert_true(n > 0);
        assert_int_equal(n, COMEM_WIRE_HEADER_SIZE + expected_payload(&g_a));
        assert_true(n <= COMEM_WIRE_MAX_FRAME);

        comem_wire_header h;
        assert_int_equal(comem_wire_decode_header(g_buf, (size_t)n, &h), 0);
        assert_int_equal(h.magic, COMEM_WIRE_MAGIC);
        assert_int_equal(h.version, COMEM_WIRE_VERSION);
        assert_int_equal(h.type, all_types[t]);
        assert_int_equal(h.request_id, 0x80000000u + all_types[t]);
        assert_int_equal(h.length, (uint32_t)n - COMEM_WIRE_HEADER_SIZE);

        memset(&g_b, 0xee, sizeof g_b);
        assert_int_equal(comem_wire_decode(&h, g_buf + COMEM_WIRE_HEADER_SIZE, &g_b), 0);
        assert_msg_equal(&g_a, &g_b);
        if (all_types[t] == COMEM_MSG_STATUS_REPLY) /* the text points into the payload */
            assert_ptr_equal(g_b.u.status_reply.text, g_buf + COMEM_WIRE_HEADER_SIZE + 12);

        /* Re-encoding what was decoded gives the same bytes: the encoding is canonical. */
        static uint8_t again[COMEM_WIRE_MAX_FRAME];
        assert_int_equal(comem_wire_encode(&g_b, again, sizeof again), n);
        assert_memory_equal(again, g_buf, (size_t)n);
        assert_int_equal(decode_exact(g_buf, (size_t)n, &g_b), 0);
    }
}

static void test_round_trip_full(void **st)
{
    (void)st;
    round_trip(FULL);
}

static void test_round_trip_small(void **st)
{
    (void)st;
    round_trip(SMALL);
}

static void test_round_trip_empty(void **st)
{
    (void)st;
    round_trip(EMPTY);
}

static void test_full_frames_fit(void **st)
{
    (void)st;
    /* The biggest message of each list type still fits one frame, with room to spare. */
    sample(&g_a, COMEM_MSG_CENSUS, FULL);
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), 16 + 35 + 32 * 512);
    sample(&g_a, COMEM_MSG_STATUS_REPLY, FULL);
    assert_int_equal(comem_wire_encode(&g_a, g_buf, COMEM_WIRE_MAX_FRAME), 16 + 12 + COMEM_WIRE_CHUNK_MAX);
    sample(&g_a, COMEM_MSG_DEVICES_REPLY, FULL);
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), 16 + 2 + 16 * (27 + 128 + 128));
}

static void test_decode_clears_stale_fields(void **st)
{
    (void)st;
    sample(&g_a, COMEM_MSG_CENSUS, FULL);
    int n = comem_wire_encode(&g_a, g_buf, sizeof g_buf);
    assert_int_equal(decode_exact(g_buf, (size_t)n, &g_b), 0);
    sample(&g_a, COMEM_MSG_CENSUS, SMALL);
    n = comem_wire_encode(&g_a, g_buf, sizeof g_buf);
    assert_int_equal(decode_exact(g_buf, (size_t)n, &g_b), 0);
    assert_int_equal(g_b.u.census.n, 3);
    assert_int_equal(g_b.u.census.items[3].entry_id, 0);
    assert_int_equal(g_b.u.census.items[511].seq, 0);
}

/* ---- golden bytes: a change in layout breaks these ---- */

static void check_golden(const comem_msg *m, const uint8_t *golden, size_t len)
{
    uint8_t out[256];
    assert_int_equal(comem_wire_encode(m, out, sizeof out), (int)len);
    assert_memory_equal(out, golden, len);
    assert_int_equal(decode_exact(golden, len, &g_b), 0);
    assert_msg_equal(m, &g_b);
}

static void test_golden_reserve(void **st)
{
    (void)st;
    static const uint8_t golden[] = {
        0x43, 0x4d, 0x45, 0x4d, /* magic: "CMEM" */
        0x07, 0x00,             /* version 7 */
        0x0e, 0x00,             /* type 14: RESERVE */
        0x07, 0x00, 0x00, 0x00, /* request_id 7 */
        0x02, 0x00, 0x00, 0x00, /* length 2 */
        0x34, 0x12,             /* device 0x1234 */
    };
    comem_msg m = {.type = COMEM_MSG_RESERVE, .request_id = 7};
    m.u.reserve.device = 0x1234;
    check_golden(&m, golden, sizeof golden);
}

static void test_golden_reply(void **st)
{
    (void)st;
    static const uint8_t golden[] = {
        0x43, 0x4d, 0x45, 0x4d, 0x07, 0x00,
        0x40, 0x00,             /* type 64: REPLY */
        0x04, 0x03, 0x02, 0x01, /* request_id 0x01020304 */
        0x07, 0x00, 0x00, 0x00, /* length 7 */
        0xfa, 0xff, 0xff, 0xff, /* status -6 (COMEM_EPROTO) */
        0x02, 'n',  'o',        /* message "no" */
    };
    comem_msg m = {.type = COMEM_MSG_REPLY, .request_id = 0x01020304};
    m.u.reply.status = COMEM_EPROTO;
    strcpy(m.u.reply.message, "no");
    check_golden(&m, golden, sizeof golden);
}

static void test_golden_hello_reply(void **st)
{
    (void)st;
    static const uint8_t golden[] = {
        0x43, 0x4d, 0x45, 0x4d, 0x07, 0x00,
        0x41, 0x00,             /* type 65: HELLO_REPLY */
        0x01, 0x00, 0x00, 0x00, /* request_id 1 */
        0x20, 0x00, 0x00, 0x00, /* length 32 */
        0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* session_id 11 */
        0x39, 0x30, 0x00, 0x00, /* coord_pid 12345 */
        0x03, 0x00,             /* proto_version 3 */
        0x02, 0x00,             /* n_devices 2 */
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* view_share 1: the first descriptor beside */
        0x2c, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* area_share 0x12c: a handle's value */
    };
    comem_msg m = {.type = COMEM_MSG_HELLO_REPLY, .request_id = 1};
    m.u.hello_reply.session_id = 11;
    m.u.hello_reply.coord_pid = 12345;
    m.u.hello_reply.proto_version = 3;
    m.u.hello_reply.n_devices = 2;
    m.u.hello_reply.view_share = 1;
    m.u.hello_reply.area_share = 0x12c;
    check_golden(&m, golden, sizeof golden);
}

static void test_golden_hello(void **st)
{
    (void)st;
    static const uint8_t golden[] = {
        0x43, 0x4d, 0x45, 0x4d, 0x07, 0x00,
        0x01, 0x00,             /* type 1: HELLO */
        0x01, 0x00, 0x00, 0x00, /* request_id 1 */
        0x18, 0x00, 0x00, 0x00, /* length 24 */
        0x02, 0x00,             /* proto_version 2 */
        0x02,                   /* role: worker */
        0x01,                   /* scope: process-local */
        0x45, 0x23, 0x01, 0x00, /* pid 0x12345 */
        0x03, 0x00, 0x00, 0x00, /* caps: release | idle release */
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* reserve_base -1 */
        0x02, 'w',  '1',        /* name "w1" */
        0x00,                   /* token "" */
    };
    comem_msg m = {.type = COMEM_MSG_HELLO, .request_id = 1};
    m.u.hello.proto_version = 2;
    m.u.hello.role = COMEM_ROLE_WORKER;
    m.u.hello.scope = 1;
    m.u.hello.pid = 0x12345;
    m.u.hello.caps = COMEM_CAP_RELEASE | COMEM_CAP_IDLE_RELEASE;
    m.u.hello.reserve_base = -1;
    strcpy(m.u.hello.name, "w1");
    check_golden(&m, golden, sizeof golden);
}

static void test_golden_ask(void **st)
{
    (void)st;
    static const uint8_t golden[] = {
        0x43, 0x4d, 0x45, 0x4d, 0x07, 0x00,
        0x49, 0x00,             /* type 73: ASK */
        0x00, 0x00, 0x00, 0x00, /* request_id 0: unsolicited */
        0x31, 0x00, 0x00, 0x00, /* length 49 */
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* ask_id */
        0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* holder_id 5 */
        0x01,                                           /* kind: release */
        0x02, 0x00,                                     /* device 2 */
        0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, /* bytes 1 GiB */
        0xfa, 0x00, 0x00, 0x00,                         /* deadline_ms 250 */
        0x01, 0x00,                                     /* one item */
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* entry_id 9 */
        0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* bytes -2 */
    };
    comem_msg m = {.type = COMEM_MSG_ASK, .request_id = 0};
    m.u.ask.ask_id = 0x1122334455667788ull;
    m.u.ask.holder_id = 5;
    m.u.ask.kind = COMEM_ASK_RELEASE;
    m.u.ask.device = 2;
    m.u.ask.bytes = 1 << 30;
    m.u.ask.deadline_ms = 250;
    m.u.ask.n = 1;
    m.u.ask.items[0].entry_id = 9;
    m.u.ask.items[0].bytes = -2;
    check_golden(&m, golden, sizeof golden);
}

static void test_golden_census_refs(void **st)
{
    (void)st;
    static const uint8_t golden[] = {
        0x43, 0x4d, 0x45, 0x4d, 0x07, 0x00,
        0x07, 0x00,             /* type 7: CENSUS */
        0x03, 0x00, 0x00, 0x00, /* request_id 3 */
        0x43, 0x00, 0x00, 0x00, /* length 67 */
        0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* holder_id 4 */
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* seq 1 */
        0x00,                                           /* has: nothing */
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* pinned */
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* overhead */
        0x01, 0x00,                                     /* one item */
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* entry_id 9 */
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* seq 2 */
        0x00, 0x00, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, /* resident 2 GiB */
        0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* refs 3 */
    };
    comem_msg m = {.type = COMEM_MSG_CENSUS, .request_id = 3};
    m.u.census.holder_id = 4;
    m.u.census.seq = 1;
    m.u.census.n = 1;
    m.u.census.items[0] = (comem_wire_residency){9, 2, (int64_t)2 << 30, 3};
    check_golden(&m, golden, sizeof golden);
    /* A negative reference count is refused both ways. */
    uint8_t bad[sizeof golden];
    memcpy(bad, golden, sizeof bad);
    bad[sizeof bad - 1] = 0x80;
    assert_int_equal(decode_exact(bad, sizeof bad, &g_b), COMEM_EPROTO);
    m.u.census.items[0].refs = -1;
    assert_int_equal(comem_wire_encode(&m, g_buf, sizeof g_buf), COMEM_ERANGE);
}

static void test_golden_status_reply(void **st)
{
    (void)st;
    static const uint8_t golden[] = {
        0x43, 0x4d, 0x45, 0x4d, 0x07, 0x00,
        0x48, 0x00,             /* type 72: STATUS_REPLY */
        0x09, 0x00, 0x00, 0x00, /* request_id 9 */
        0x0f, 0x00, 0x00, 0x00, /* length 15 */
        0x02, 0x00, 0x00, 0x00, /* offset 2 */
        0x05, 0x00, 0x00, 0x00, /* total 5 */
        0x03, 0x00, 0x00, 0x00, /* len 3 */
        'a',  'b',  'c',
    };
    comem_msg m = {.type = COMEM_MSG_STATUS_REPLY, .request_id = 9};
    m.u.status_reply.offset = 2;
    m.u.status_reply.total = 5;
    m.u.status_reply.len = 3;
    m.u.status_reply.text = (const uint8_t *)"abc";
    check_golden(&m, golden, sizeof golden);
}

/* ---- malformed frames ---- */

static void test_every_truncation_refused(void **st)
{
    (void)st;
    for (size_t t = 0; t < N_TYPES; t++) {
        sample(&g_a, all_types[t], SMALL);
        int n = comem_wire_encode(&g_a, g_buf, sizeof g_buf);
        assert_true(n >= COMEM_WIRE_HEADER_SIZE);
        for (size_t p = 0; p < (size_t)n; p++) {
            uint8_t *cut = malloc(p ? p : 1);
            assert_non_null(cut);
            memcpy(cut, g_buf, p);
            comem_wire_header h;
            if (p < COMEM_WIRE_HEADER_SIZE) {
                assert_int_equal(comem_wire_decode_header(cut, p, &h), COMEM_EPROTO);
            } else {
                /* A header that claims only the bytes that are there. */
                put_le(cut + 12, p - COMEM_WIRE_HEADER_SIZE, 4);
                assert_int_equal(comem_wire_decode_header(cut, p, &h), 0);
                assert_int_equal(comem_wire_decode(&h, cut + COMEM_WIRE_HEADER_SIZE, &g_b), COMEM_EPROTO);
            }
            free(cut);
        }
    }
    /* A FULL census too, whose truncations fall inside a long list. */
    sample(&g_a, COMEM_MSG_CENSUS, FULL);
    int n = comem_wire_encode(&g_a, g_buf, sizeof g_buf);
    for (size_t p = COMEM_WIRE_HEADER_SIZE; p < (size_t)n; p += 7) {
        comem_wire_header h;
        put_le(g_buf + 12, p - COMEM_WIRE_HEADER_SIZE, 4);
        assert_int_equal(comem_wire_decode_header(g_buf, p, &h), 0);
        uint8_t *cut = malloc(p - COMEM_WIRE_HEADER_SIZE + 1);
        assert_non_null(cut);
        memcpy(cut, g_buf + COMEM_WIRE_HEADER_SIZE, p - COMEM_WIRE_HEADER_SIZE);
        assert_int_equal(comem_wire_decode(&h, cut, &g_b), COMEM_EPROTO);
        free(cut);
    }
}

static void test_trailing_bytes_refused(void **st)
{
    (void)st;
    for (size_t t = 0; t < N_TYPES; t++) {
        for (shape s = FULL; s <= EMPTY; s++) {
            sample(&g_a, all_types[t], s);
            int n = comem_wire_encode(&g_a, g_buf, sizeof g_buf);
            assert_true(n > 0);
            assert_true((size_t)n <= COMEM_WIRE_MAX_FRAME);
            if ((size_t)n >= COMEM_WIRE_MAX_FRAME)
                continue; /* no room for one more byte (>=: also tells the optimiser g_buf[n] is in bounds) */
            g_buf[n] = 0x00;
            put_le(g_buf + 12, (uint64_t)n + 1 - COMEM_WIRE_HEADER_SIZE, 4);
            assert_int_equal(decode_exact(g_buf, (size_t)n + 1, &g_b), COMEM_EPROTO);
            g_buf[n] = 0xaa;
            assert_int_equal(decode_exact(g_buf, (size_t)n + 1, &g_b), COMEM_EPROTO);
        }
    }
}

/* A peer of another version is told by its header's version, which decode_header refuses. */
static void test_header_version_of_any_version(void **st)
{
    (void)st;
    sample(&g_a, COMEM_MSG_RESERVE, SMALL);
    int n = comem_wire_encode(&g_a, g_buf, sizeof g_buf);
    assert_true(n > 0);
    uint16_t v = 0;
    assert_int_equal(comem_wire_header_version(g_buf, (size_t)n, &v), 0);
    assert_int_equal(v, COMEM_WIRE_VERSION);
    static const uint16_t versions[] = {0, 1, COMEM_WIRE_VERSION + 1, 0xffff};
    comem_wire_header h;
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        put_le(g_buf + 4, versions[i], 2);
        assert_int_equal(comem_wire_decode_header(g_buf, (size_t)n, &h), COMEM_EPROTO);
        assert_int_equal(comem_wire_header_version(g_buf, 6, &v), 0); /* the magic and the version are enough */
        assert_int_equal(v, versions[i]);
    }
    assert_int_equal(comem_wire_header_version(g_buf, 5, &v), COMEM_EPROTO); /* cut inside the version */
    g_buf[0] ^= 0x20;
    assert_int_equal(comem_wire_header_version(g_buf, (size_t)n, &v), COMEM_EPROTO); /* not comem's magic */
    assert_int_equal(comem_wire_header_version(NULL, 16, &v), COMEM_EINVAL);
    assert_int_equal(comem_wire_header_version(g_buf, 16, NULL), COMEM_EINVAL);
}

static void test_bad_headers_refused(void **st)
{
    (void)st;
    comem_wire_header h;
    sample(&g_a, COMEM_MSG_RESERVE, SMALL);
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), 18);
    uint8_t good[18];
    memcpy(good, g_buf, sizeof good);
    assert_int_equal(decode_exact(good, sizeof good, &g_b), 0);

    for (size_t i = 0; i < 4; i++) { /* each magic byte */
        memcpy(g_buf, good, sizeof good);
        g_buf[i] ^= 0x20;
        assert_int_equal(comem_wire_decode_header(g_buf, sizeof good, &h), COMEM_EPROTO);
    }
    static const uint16_t versions[] = {0, 1, 2, 3, 4, 5, 6, 0x0700, 0xffff}; /* every one but COMEM_WIRE_VERSION (7) */
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        memcpy(g_buf, good, sizeof good);
        put_le(g_buf + 4, versions[i], 2);
        assert_int_equal(comem_wire_decode_header(g_buf, sizeof good, &h), COMEM_EPROTO);
    }
    static const uint16_t types[] = {0, 18, 63, 76, 0x0101, 0xffff};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        memcpy(g_buf, good, sizeof good);
        put_le(g_buf + 6, types[i], 2);
        assert_int_equal(comem_wire_decode_header(g_buf, sizeof good, &h), COMEM_EPROTO);
        assert_string_equal(comem_wire_type_name(types[i]), "UNKNOWN");
    }
    static const uint32_t lengths[] = {COMEM_WIRE_MAX_PAYLOAD + 1, 0x80000000u, UINT32_MAX};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        memcpy(g_buf, good, sizeof good);
        put_le(g_buf + 12, lengths[i], 4);
        assert_int_equal(comem_wire_decode_header(g_buf, sizeof good, &h), COMEM_EPROTO);
    }
    /* The largest legal length is a header-level yes (the body decides the rest). */
    memcpy(g_buf, good, sizeof good);
    put_le(g_buf + 12, COMEM_WIRE_MAX_PAYLOAD, 4);
    assert_int_equal(comem_wire_decode_header(g_buf, sizeof good, &h), 0);
    assert_int_equal(h.length, COMEM_WIRE_MAX_PAYLOAD);

    /* decode() re-checks a header it is handed, whoever built it. */
    comem_wire_header bad = {COMEM_WIRE_MAGIC, COMEM_WIRE_VERSION, COMEM_MSG_RESERVE, 1, 2};
    uint8_t body[2] = {1, 0};
    assert_int_equal(comem_wire_decode(&bad, body, &g_b), 0);
    bad.type = 17;
    assert_int_equal(comem_wire_decode(&bad, body, &g_b), COMEM_EPROTO);
    bad.type = COMEM_MSG_RESERVE;
    bad.magic ^= 1;
    assert_int_equal(comem_wire_decode(&bad, body, &g_b), COMEM_EPROTO);
    bad.magic ^= 1;
    bad.version = 1; /* the version before references travelled */
    assert_int_equal(comem_wire_decode(&bad, body, &g_b), COMEM_EPROTO);
    bad.version = COMEM_WIRE_VERSION;
    bad.length = COMEM_WIRE_MAX_PAYLOAD + 1;
    assert_int_equal(comem_wire_decode(&bad, body, &g_b), COMEM_EPROTO);

    /* Bad arguments. */
    assert_int_equal(comem_wire_decode_header(NULL, 16, &h), COMEM_EINVAL);
    assert_int_equal(comem_wire_decode_header(good, sizeof good, NULL), COMEM_EINVAL);
    assert_int_equal(comem_wire_decode(NULL, body, &g_b), COMEM_EINVAL);
    bad.length = 2;
    assert_int_equal(comem_wire_decode(&bad, body, NULL), COMEM_EINVAL);
    assert_int_equal(comem_wire_decode(&bad, NULL, &g_b), COMEM_EINVAL);
    comem_wire_header empty = {COMEM_WIRE_MAGIC, COMEM_WIRE_VERSION, COMEM_MSG_DEVICES, 3, 0};
    assert_int_equal(comem_wire_decode(&empty, NULL, &g_b), 0); /* no payload, none needed */
    assert_int_equal(g_b.type, COMEM_MSG_DEVICES);
    assert_int_equal(g_b.request_id, 3);
    empty.type = COMEM_MSG_RESERVE;
    assert_int_equal(comem_wire_decode(&empty, NULL, &g_b), COMEM_EPROTO); /* body missing */
}

static void test_text_limits(void **st)
{
    (void)st;
    char big[256];
    memset(big, 'x', sizeof big);

    /* HOLDER_ADD name: 63 bytes fit a char[64], 64 do not. */
    static const struct {
        size_t len;
        int rc;
    } names[] = {{0, 0}, {63, 0}, {64, COMEM_EPROTO}, {65, COMEM_EPROTO}, {255, COMEM_EPROTO}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        fb_start(&g_f, COMEM_MSG_HOLDER_ADD);
        fb_int(&g_f, 0, 2);
        fb_int(&g_f, COMEM_HOLDER_MODELS, 1);
        fb_int(&g_f, 0, 4); /* flags */
        fb_int(&g_f, 0, 4); /* pid */
        fb_text(&g_f, big, names[i].len);
        assert_int_equal(fb_decode(&g_f, &g_b), names[i].rc);
        if (names[i].rc == 0)
            assert_int_equal(strlen(g_b.u.holder_add.name), names[i].len);
    }

    /* REPLY message: 127 bytes fit a char[128], 128 do not. */
    fb_start(&g_f, COMEM_MSG_REPLY);
    fb_int(&g_f, (uint32_t)COMEM_ENOENT, 4);
    fb_text(&g_f, big, 127);
    assert_int_equal(fb_decode(&g_f, &g_b), 0);
    assert_int_equal(g_b.u.reply.status, COMEM_ENOENT);
    assert_int_equal(strlen(g_b.u.reply.message), 127);
    fb_start(&g_f, COMEM_MSG_REPLY);
    fb_int(&g_f, 0, 4);
    fb_text(&g_f, big, 128);
    assert_int_equal(fb_decode(&g_f, &g_b), COMEM_EPROTO);

    /* A NUL anywhere inside a text: start, middle, last byte; in each text-bearing message. */
    static const char *nuls[] = {"\0abc", "ab\0c", "abc\0"};
    for (size_t i = 0; i < 3; i++) {
        fb_start(&g_f, COMEM_MSG_HOLDER_ADD);
        fb_int(&g_f, 0, 2);
        fb_int(&g_f, COMEM_HOLDER_PAGER, 1);
        fb_int(&g_f, 0, 4); /* flags */
        fb_int(&g_f, 0, 4); /* pid */
        fb_text(&g_f, nuls[i], 4);
        assert_int_equal(fb_decode(&g_f, &g_b), COMEM_EPROTO);

        fb_start(&g_f, COMEM_MSG_HELLO); /* in the second text of a message */
        fb_int(&g_f, 1, 2);
        fb_int(&g_f, COMEM_ROLE_HOST, 1);
        fb_int(&g_f, 0, 1);
        fb_int(&g_f, 1, 4);
        fb_int(&g_f, 0, 4);
        fb_int(&g_f, 0, 8);
        fb_text(&g_f, "host", 4);
        fb_text(&g_f, nuls[i], 4);
        assert_int_equal(fb_decode(&g_f, &g_b), COMEM_EPROTO);

        fb_start(&g_f, COMEM_MSG_ACTIVITY);
        fb_int(&g_f, 1, 8);
        fb_int(&g_f, 1, 1);
        fb_text(&g_f, nuls[i], 4);
        assert_int_equal(fb_decode(&g_f, &g_b), COMEM_EPROTO);

        fb_start(&g_f, COMEM_MSG_DEVICES_REPLY);
        fb_int(&g_f, 1, 2);
        fb_int(&g_f, 0, 2);
        fb_int(&g_f, 0, 1);
        fb_fill(&g_f, 0, 24);
        fb_text(&g_f, "GPU-1", 5);
        fb_text(&g_f, nuls[i], 4);
        assert_int_equal(fb_decode(&g_f, &g_b), COMEM_EPROTO);
    }
    /* The same HELLO with a clean token decodes: the refusals above were the NUL. */
    fb_start(&g_f, COMEM_MSG_HELLO);
    fb_int(&g_f, 1, 2);
    fb_int(&g_f, COMEM_ROLE_HOST, 1);
    fb_int(&g_f, 0, 1);
    fb_int(&g_f, 1, 4);
    fb_int(&g_f, 0, 4);
    fb_int(&g_f, 0, 8);
    fb_text(&g_f, "host", 4);
    fb_text(&g_f, "s3cr", 4);
    assert_int_equal(fb_decode(&g_f, &g_b), 0);
    assert_string_equal(g_b.u.hello.name, "host");
    assert_string_equal(g_b.u.hello.token, "s3cr");
}

/* A residency list message (CENSUS or RECEIPT) claiming n items, with n items present. */
static int residency_list(uint16_t type, size_t n)
{
    fb_start(&g_f, type);
    if (type == COMEM_MSG_CENSUS)
        fb_fill(&g_f, 0, 8 + 8 + 1 + 8 + 8);
    else
        fb_fill(&g_f, 0, 8 + 1 + 8);
    fb_int(&g_f, n, 2);
    fb_fill(&g_f, 0x11, 32 * n);
    return fb_decode(&g_f, &g_b);
}

static void test_list_limits(void **st)
{
    (void)st;
    assert_int_equal(residency_list(COMEM_MSG_CENSUS, 512), 0);
    assert_int_equal(g_b.u.census.n, 512);
    assert_int_equal(g_b.u.census.items[511].resident, 0x1111111111111111ll);
    assert_int_equal(residency_list(COMEM_MSG_CENSUS, 513), COMEM_EPROTO);
    assert_int_equal(residency_list(COMEM_MSG_RECEIPT, 512), 0);
    assert_int_equal(residency_list(COMEM_MSG_RECEIPT, 513), COMEM_EPROTO);

    fb_start(&g_f, COMEM_MSG_ADMIT);
    fb_fill(&g_f, 0, 2 + 8 + 8 + 8 + 8 + 4);
    fb_int(&g_f, 513, 2);
    fb_fill(&g_f, 0x22, 8 * 513);
    assert_int_equal(fb_decode(&g_f, &g_b), COMEM_EPROTO);

    fb_start(&g_f, COMEM_MSG_ASK);
    fb_fill(&g_f, 0, 8 + 8);
    fb_int(&g_f, COMEM_ASK_IDLE, 1);
    fb_fill(&g_f, 0, 2 + 8 + 4);
    fb_int(&g_f, 513, 2);
    fb_fill(&g_f, 0x33, 16 * 513);
    assert_int_equal(fb_decode(&g_f, &g_b), COMEM_EPROTO);

    for (size_t n = 16; n <= 17; n++) {
        fb_start(&g_f, COMEM_MSG_DEVICES_REPLY);
        fb_int(&g_f, n, 2);
        for (size_t i = 0; i < n; i++) {
            fb_fill(&g_f, 0, 2 + 1 + 24);
            fb_text(&g_f, "", 0);
            fb_text(&g_f, "", 0);
        }
        assert_int_equal(fb_decode(&g_f, &g_b), n == 16 ? 0 : COMEM_EPROTO);
    }

    for (size_t n = 16; n <= 17; n++) {
        fb_start(&g_f, COMEM_MSG_HELLO_REPLY);
        fb_fill(&g_f, 0, 8 + 4 + 2);
        fb_int(&g_f, n, 2);
        fb_fill(&g_f, 0, 8 + 8);
        assert_int_equal(fb_decode(&g_f, &g_b), n == 16 ? 0 : COMEM_EPROTO);
    }

    /* A huge count over a short body is refused for the count, before any item is read. */
    fb_start(&g_f, COMEM_MSG_CENSUS);
    fb_fill(&g_f, 0, 33);
    fb_int(&g_f, 0xffff, 2);
    assert_int_equal(fb_decode(&g_f, &g_b), COMEM_EPROTO);
}

/* A WDDM frame of one adapter: accepted as it is, refused without a LUID, with a negative figure, or
   with a CUDA UUID that is no text (a NUL inside, longer than a UUID field holds). */
static void test_wddm_items_checked(void **st)
{
    (void)st;
    static const char gpu[] = "GPU-00112233-4455-6677-8899-aabbccddeeff";
    static const struct {
        uint64_t luid;
        int64_t budget, usage;
        const char *uuid;
        size_t uuid_len;
        int want;
    } cases[] = {
        {0x0000000100000abcull, 8ll << 30, 1ll << 30, gpu, sizeof gpu - 1, 0},
        {0x0000000100000abcull, 8ll << 30, 1ll << 30, "", 0, 0}, /* a process that runs no CUDA */
        {0, 8ll << 30, 1ll << 30, gpu, sizeof gpu - 1, COMEM_EPROTO},
        {7, -1, 0, "", 0, COMEM_EPROTO},
        {7, 0, -1, "", 0, COMEM_EPROTO},
        {7, 0, 0, "GPU\0-1", 6, COMEM_EPROTO},
        {7, 0, 0, NULL, COMEM_WIRE_TEXT_MAX, COMEM_EPROTO},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fb_start(&g_f, COMEM_MSG_WDDM);
        fb_int(&g_f, 1, 2);
        fb_int(&g_f, cases[i].luid, 8);
        fb_int(&g_f, (uint64_t)cases[i].budget, 8);
        fb_int(&g_f, (uint64_t)cases[i].usage, 8);
        if (cases[i].uuid) {
            fb_text(&g_f, cases[i].uuid, cases[i].uuid_len);
        } else {
            fb_int(&g_f, cases[i].uuid_len, 1);
            fb_fill(&g_f, 'G', cases[i].uuid_len);
        }
        assert_int_equal(fb_decode(&g_f, &g_b), cases[i].want);
        if (cases[i].want == 0) {
            assert_true(g_b.u.wddm.n == 1 && g_b.u.wddm.items[0].luid == cases[i].luid &&
                        g_b.u.wddm.items[0].budget == cases[i].budget && g_b.u.wddm.items[0].usage == cases[i].usage);
            assert_string_equal(g_b.u.wddm.items[0].uuid, cases[i].uuid);
        }
    }
    fb_start(&g_f, COMEM_MSG_WDDM); /* more adapters than a machine has devices */
    fb_int(&g_f, COMEM_MAX_DEVICES + 1, 2);
    for (int i = 0; i <= COMEM_MAX_DEVICES; i++) {
        fb_int(&g_f, (uint64_t)i + 1, 8);
        fb_fill(&g_f, 0, 17);
    }
    assert_int_equal(fb_decode(&g_f, &g_b), COMEM_EPROTO);
}

/* Encodes a FULL sample of type, sets the payload byte at off to v, decodes. */
static int patched(uint16_t type, size_t off, uint8_t v)
{
    sample(&g_a, type, FULL);
    int n = comem_wire_encode(&g_a, g_buf, sizeof g_buf);
    assert_true(n > 0);
    g_buf[COMEM_WIRE_HEADER_SIZE + off] = v;
    return decode_exact(g_buf, (size_t)n, &g_b);
}

static void test_enum_ranges(void **st)
{
    (void)st;
    static const struct {
        uint16_t type;
        size_t off; /* in the payload */
        uint8_t lo, hi; /* the legal range */
    } fields[] = {
        {COMEM_MSG_HELLO, 2, 1, 3},          /* role */
        {COMEM_MSG_HELLO, 3, 0, 1},          /* scope */
        {COMEM_MSG_HOLDER_ADD, 2, 1, 4},     /* kind */
        {COMEM_MSG_ACTIVITY, 8, 0, 1},       /* busy */
        {COMEM_MSG_ADMIT_REPLY, 0, 0, 1},    /* granted */
        {COMEM_MSG_PIN_REPLY, 0, 0, 1},      /* granted */
        {COMEM_MSG_ASK, 16, 1, 3},           /* kind */
        {COMEM_MSG_RECEIPT, 8, 0, 2},        /* outcome */
        {COMEM_MSG_RELEASE_REPLY, 0, 0, 3},  /* outcome: gone is for releases only */
        {COMEM_MSG_DEVICES_REPLY, 4, 0, 1},  /* devices[0].scope */
        {COMEM_MSG_DEVICES_REPLY, 2 + 283 * 15 + 2, 0, 1}, /* devices[15].scope */
        {COMEM_MSG_STATUS, 0, 0, 0},         /* reserved flags */
        {COMEM_MSG_CENSUS, 16, 0, 3},        /* has: two defined bits */
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        for (unsigned v = 0; v <= 255; v++) {
            int want = v >= fields[i].lo && v <= fields[i].hi ? 0 : COMEM_EPROTO;
            int got = patched(fields[i].type, fields[i].off, (uint8_t)v);
            if (got != want)
                fail_msg("%s payload byte %zu = %u: got %d, want %d",
                         comem_wire_type_name(fields[i].type), fields[i].off, v, got, want);
        }
    }
    /* Flag words: every bit outside the mask is refused on its own. */
    static const struct {
        uint16_t type;
        size_t off;
        uint32_t mask;
    } flags[] = {
        {COMEM_MSG_HELLO, 8, COMEM_CAP_MASK},
        {COMEM_MSG_HOLDER_ADD, 3, COMEM_CAP_MASK},
        {COMEM_MSG_ENTRY_ADD, 32, COMEM_ENTRY_MASK},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        for (unsigned bit = 0; bit < 32; bit++) {
            sample(&g_a, flags[i].type, SMALL);
            int n = comem_wire_encode(&g_a, g_buf, sizeof g_buf);
            put_le(g_buf + COMEM_WIRE_HEADER_SIZE + flags[i].off, 1u << bit, 4);
            int want = (flags[i].mask >> bit) & 1 ? 0 : COMEM_EPROTO;
            assert_int_equal(decode_exact(g_buf, (size_t)n, &g_b), want);
        }
    }
}

/* A STATUS_REPLY with these numbers and len bytes actually present. */
static int status_chunk(uint32_t offset, uint32_t total, uint32_t len)
{
    fb_start(&g_f, COMEM_MSG_STATUS_REPLY);
    fb_int(&g_f, offset, 4);
    fb_int(&g_f, total, 4);
    fb_int(&g_f, len, 4);
    fb_fill(&g_f, 'z', len);
    return fb_decode(&g_f, &g_b);
}

static void test_status_chunks(void **st)
{
    (void)st;
    assert_int_equal(status_chunk(0, 0, 0), 0);
    assert_int_equal(status_chunk(10, 13, 3), 0); /* the last chunk ends at total */
    assert_int_equal(g_b.u.status_reply.offset, 10);
    assert_int_equal(g_b.u.status_reply.total, 13);
    assert_memory_equal(g_b.u.status_reply.text, "zzz", 3);
    assert_int_equal(status_chunk(10, 12, 3), COMEM_EPROTO); /* offset + len > total */
    assert_int_equal(status_chunk(13, 13, 1), COMEM_EPROTO);
    assert_int_equal(status_chunk(UINT32_MAX, 5, 1), COMEM_EPROTO); /* would wrap in 32 bits */
    assert_int_equal(status_chunk(0xfffffff0u, 0x10, 0x20), COMEM_EPROTO);
    assert_int_equal(status_chunk(0, UINT32_MAX, COMEM_WIRE_CHUNK_MAX), 0);
    assert_int_equal(status_chunk(0, UINT32_MAX, COMEM_WIRE_CHUNK_MAX + 1), COMEM_EPROTO);
    /* A len larger than the bytes present is short, not an overread. */
    fb_start(&g_f, COMEM_MSG_STATUS_REPLY);
    fb_int(&g_f, 0, 4);
    fb_int(&g_f, 100, 4);
    fb_int(&g_f, 100, 4);
    fb_fill(&g_f, 'z', 99);
    assert_int_equal(fb_decode(&g_f, &g_b), COMEM_EPROTO);
}

/* ---- encoder refusals ---- */

static void test_encode_cap_too_small(void **st)
{
    (void)st;
    for (size_t t = 0; t < N_TYPES; t++) {
        for (shape s = FULL; s <= SMALL; s++) {
            sample(&g_a, all_types[t], s);
            int n = comem_wire_encode(&g_a, g_buf, sizeof g_buf);
            assert_true(n > 0);
            /* Every cap below the frame size; a heap block of exactly cap bytes
             * lets ASan catch a single byte written past it. FULL frames are
             * big, so they step through the caps with a stride. */
            size_t step = s == FULL && n > 4096 ? 61 : 1;
            for (size_t cap = 0; cap < (size_t)n; cap += step) {
                uint8_t *out = malloc(cap ? cap : 1);
                assert_non_null(out);
                assert_int_equal(comem_wire_encode(&g_a, out, cap), COMEM_ERANGE);
                free(out);
            }
            uint8_t *out = malloc((size_t)n);
            assert_non_null(out);
            assert_int_equal(comem_wire_encode(&g_a, out, (size_t)n - 1), COMEM_ERANGE);
            assert_int_equal(comem_wire_encode(&g_a, out, (size_t)n), n);
            assert_memory_equal(out, g_buf, (size_t)n);
            free(out);
        }
    }
}

static void test_encode_refuses_bad_fields(void **st)
{
    (void)st;
    /* Text arrays with no terminator: the text would be >= the field's maximum. */
    sample(&g_a, COMEM_MSG_HOLDER_ADD, SMALL);
    memset(g_a.u.holder_add.name, 'n', sizeof g_a.u.holder_add.name);
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_HELLO, FULL);
    memset(g_a.u.hello.token, 't', sizeof g_a.u.hello.token);
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_DEVICES_REPLY, FULL);
    memset(g_a.u.devices_reply.devices[15].name, 'd', sizeof g_a.u.devices_reply.devices[15].name);
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_REPLY, FULL);
    memset(g_a.u.reply.message, 'r', sizeof g_a.u.reply.message);
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);

    /* Lists one over. */
    sample(&g_a, COMEM_MSG_CENSUS, FULL);
    g_a.u.census.n = COMEM_WIRE_MAX_ITEMS + 1;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_RECEIPT, FULL);
    g_a.u.receipt.n = 0xffff;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_ADMIT, FULL);
    g_a.u.admit.n_keep = COMEM_WIRE_MAX_ITEMS + 1;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_ASK, FULL);
    g_a.u.ask.n = COMEM_WIRE_MAX_ITEMS + 1;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_DEVICES_REPLY, FULL);
    g_a.u.devices_reply.n = COMEM_MAX_DEVICES + 1;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_HELLO_REPLY, FULL);
    g_a.u.hello_reply.n_devices = COMEM_MAX_DEVICES + 1;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);

    /* Values the decoder would refuse are refused before they reach the wire. */
    sample(&g_a, COMEM_MSG_HELLO, SMALL);
    g_a.u.hello.role = 0;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_HELLO, SMALL);
    g_a.u.hello.caps = 1u << 31;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_HOLDER_ADD, SMALL);
    g_a.u.holder_add.kind = COMEM_HOLDER_RAW + 1;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_ASK, SMALL);
    g_a.u.ask.kind = 0;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_RECEIPT, SMALL);
    g_a.u.receipt.outcome = 3;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_ACTIVITY, SMALL);
    g_a.u.activity.busy = 2;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_STATUS, SMALL);
    g_a.u.status.flags = 1;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);

    /* Status chunks. */
    sample(&g_a, COMEM_MSG_STATUS_REPLY, SMALL);
    g_a.u.status_reply.total = g_a.u.status_reply.offset + g_a.u.status_reply.len - 1;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_STATUS_REPLY, SMALL);
    g_a.u.status_reply.offset = UINT32_MAX;
    g_a.u.status_reply.total = 4;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_STATUS_REPLY, FULL);
    g_a.u.status_reply.len = COMEM_WIRE_CHUNK_MAX + 1;
    g_a.u.status_reply.total = UINT32_MAX;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_ERANGE);
    sample(&g_a, COMEM_MSG_STATUS_REPLY, SMALL);
    g_a.u.status_reply.text = NULL;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_EINVAL);
    g_a.u.status_reply.len = 0;
    g_a.u.status_reply.total = g_a.u.status_reply.offset;
    assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), 16 + 12);

    /* Unknown types and bad arguments. */
    static const uint16_t unknown[] = {0, 18, 63, 76, 0xffff};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        sample(&g_a, COMEM_MSG_RESERVE, SMALL);
        g_a.type = unknown[i];
        assert_int_equal(comem_wire_encode(&g_a, g_buf, sizeof g_buf), COMEM_EINVAL);
    }
    assert_int_equal(comem_wire_encode(NULL, g_buf, sizeof g_buf), COMEM_EINVAL);
    sample(&g_a, COMEM_MSG_RESERVE, SMALL);
    assert_int_equal(comem_wire_encode(&g_a, NULL, 0), COMEM_ERANGE);
    assert_int_equal(comem_wire_encode(&g_a, NULL, 64), COMEM_EINVAL);
}

static void test_type_names(void **st)
{
    (void)st;
    static const char *names[] = {
        "HELLO",          "DEVICES",     "HOLDER_ADD",    "HOLDER_REMOVE", "ENTRY_ADD",
        "ENTRY_REMOVE",   "CENSUS",      "ADMIT",         "GRANT_DONE",    "ACTIVITY",
        "PRESSURE",       "PIN_ACQUIRE", "PIN_RELEASE",   "RESERVE",       "STATUS",
        "RECEIPT",        "REPLY",       "HELLO_REPLY",   "DEVICES_REPLY", "ID_REPLY",
        "ADMIT_REPLY",    "PRESSURE_REPLY", "PIN_REPLY",  "RESERVE_REPLY", "STATUS_REPLY",
        "ASK",            "RELEASE",     "RELEASE_REPLY", "DEVICE_MAP",    "GOODBYE",
        "BOOKED",         "TOUCH",       "ADMIT_QUEUED",  "WDDM",          "RECLAIM",
    };
    assert_int_equal(sizeof names / sizeof names[0], N_TYPES);
    for (size_t t = 0; t < N_TYPES; t++)
        assert_string_equal(comem_wire_type_name(all_types[t]), names[t]);
    /* Every other value is unknown, and refused by the header decoder. */
    size_t known = 0;
    for (unsigned v = 0; v <= 0xffff; v++)
        known += strcmp(comem_wire_type_name((uint16_t)v), "UNKNOWN") != 0;
    assert_int_equal(known, N_TYPES);
}

static int setup(void **st)
{
    (void)st;
    for (size_t i = 0; i < sizeof g_chunk; i++)
        g_chunk[i] = (uint8_t)(i * 7 + 1); /* any byte, NUL included: chunks are not text */
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_full),
        cmocka_unit_test(test_round_trip_small),
        cmocka_unit_test(test_round_trip_empty),
        cmocka_unit_test(test_full_frames_fit),
        cmocka_unit_test(test_decode_clears_stale_fields),
        cmocka_unit_test(test_golden_reserve),
        cmocka_unit_test(test_golden_reply),
        cmocka_unit_test(test_golden_hello),
        cmocka_unit_test(test_golden_hello_reply),
        cmocka_unit_test(test_golden_ask),
        cmocka_unit_test(test_golden_census_refs),
        cmocka_unit_test(test_golden_status_reply),
        cmocka_unit_test(test_every_truncation_refused),
        cmocka_unit_test(test_trailing_bytes_refused),
        cmocka_unit_test(test_bad_headers_refused),
        cmocka_unit_test(test_header_version_of_any_version),
        cmocka_unit_test(test_text_limits),
        cmocka_unit_test(test_wddm_items_checked),
        cmocka_unit_test(test_list_limits),
        cmocka_unit_test(test_enum_ranges),
        cmocka_unit_test(test_status_chunks),
        cmocka_unit_test(test_encode_cap_too_small),
        cmocka_unit_test(test_encode_refuses_bad_fields),
        cmocka_unit_test(test_type_names),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
