/*
 * fuzz/make_corpus.c - writes the wire fuzzer's seed corpus: one valid frame
 * per message type, plus one stream of several frames, each a file in DIR.
 *
 * Usage: fuzz_wire_corpus DIR (DIR must exist). The seeds are generated at
 * fuzz time by the codec itself, so no binary blobs live in the repository
 * and the seeds follow the layout whenever it changes.
 *
 * Beside one sample per type, the classes of input that once got past the
 * coordinator (issue 9): residency lists naming one entry many times (and
 * the pattern whose deltas cancel out), full lists, extreme counts, sizes
 * and sequences, the longest token, and a stream of pipelined admissions
 * with keep lists; names that break the name rule (escape sequences, a line
 * break, invalid and overlong UTF-8, a C1 control) in each frame that carries
 * one. Their entry ids are those of the fuzz target's ledger
 * (generation 1, slots 0..3), so they reach its checks.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comem/common.h"
#include "wire/wire.h"

static const uint16_t types[] = {
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

static comem_msg g_msg; /* large: kept off the stack */
static uint8_t g_buf[COMEM_WIRE_MAX_FRAME];

static void residencies(comem_wire_residency *it, uint16_t n)
{
    for (uint16_t i = 0; i < n; i++) {
        it[i].entry_id = 100u + i;
        it[i].seq = 7u + i;
        it[i].resident = (int64_t)(i + 1) << 30;
        it[i].refs = 2 + i % 3;
    }
}

/* A small, valid message of each type: short lists and texts keep the fuzzer fast. */
static void sample(comem_msg *m, uint16_t type)
{
    memset(m, 0, sizeof *m);
    m->type = type;
    m->request_id = type == COMEM_MSG_ASK ? 0 : 1000u + type;
    comem_msg_hello *he = &m->u.hello;
    switch (type) {
    case COMEM_MSG_HELLO:
        he->proto_version = COMEM_WIRE_VERSION;
        he->role = COMEM_ROLE_WORKER;
        he->scope = 1;
        he->pid = 4321;
        he->caps = COMEM_CAP_RELEASE | COMEM_CAP_IDLE_RELEASE;
        he->reserve_base = -1;
        strcpy(he->name, "sam3-worker");
        strcpy(he->token, "0123456789abcdef");
        break;
    case COMEM_MSG_HOLDER_ADD:
        m->u.holder_add.device = 0;
        m->u.holder_add.kind = COMEM_HOLDER_PAGER;
        m->u.holder_add.flags = COMEM_CAP_RELEASE | COMEM_CAP_WHILE_BUSY;
        strcpy(m->u.holder_add.name, "pager");
        break;
    case COMEM_MSG_HOLDER_REMOVE:
    case COMEM_MSG_ENTRY_REMOVE:
    case COMEM_MSG_ID_REPLY:
    case COMEM_MSG_TOUCH: m->u.id.id = 17; break;
    case COMEM_MSG_ENTRY_ADD:
        m->u.entry_add.holder_id = 3;
        m->u.entry_add.size = 6442450944;
        m->u.entry_add.resident = 1 << 30;
        m->u.entry_add.refs = 2;
        m->u.entry_add.flags = COMEM_ENTRY_DYNAMIC;
        strcpy(m->u.entry_add.name, "flux-dev");
        break;
    case COMEM_MSG_CENSUS:
        m->u.census.holder_id = 3;
        m->u.census.seq = 9;
        m->u.census.has = COMEM_CENSUS_PINNED;
        m->u.census.pinned = 1 << 20;
        m->u.census.overhead = -1;
        m->u.census.n = 3;
        residencies(m->u.census.items, 3);
        break;
    case COMEM_MSG_ADMIT:
        m->u.admit.device = 0;
        m->u.admit.holder_id = 3;
        m->u.admit.weights = 6442450944;
        m->u.admit.inference = 1073741824;
        m->u.admit.cast_forward = 268435456;
        m->u.admit.timeout_ms = 5000;
        m->u.admit.n_keep = 2;
        m->u.admit.keep[0] = 11;
        m->u.admit.keep[1] = 12;
        break;
    case COMEM_MSG_GRANT_DONE:
        m->u.grant_done.grant_id = 5;
        m->u.grant_done.entry_id = 11;
        m->u.grant_done.used = 6442450944;
        break;
    case COMEM_MSG_RECLAIM: /* a 5 GiB grant of the previous coordinator, for holder 2 */
        m->u.reclaim.device = 0;
        m->u.reclaim.holder_id = 2;
        m->u.reclaim.bytes = 5368709120;
        break;
    case COMEM_MSG_ACTIVITY:
        m->u.activity.holder_id = 3;
        m->u.activity.busy = 1;
        strcpy(m->u.activity.prompt, "prompt-42");
        break;
    case COMEM_MSG_PRESSURE:
        m->u.pressure.device = 1;
        m->u.pressure.bytes = 2147483648;
        m->u.pressure.timeout_ms = 1000;
        break;
    case COMEM_MSG_PIN_ACQUIRE:
    case COMEM_MSG_PIN_RELEASE:
        m->u.pin.holder_id = 4;
        m->u.pin.bytes = 1 << 28;
        break;
    case COMEM_MSG_RESERVE: m->u.reserve.device = 0; break;
    case COMEM_MSG_DEVICE_MAP: /* two ordinals of one card: the coordinator warns */
        m->u.device_map.n = 2;
        m->u.device_map.items[0].ordinal = 0;
        strcpy(m->u.device_map.items[0].uuid, "GPU-2b744a59-1ae9-b842-9e25-484f12e0fcd9");
        m->u.device_map.items[1].ordinal = 1;
        strcpy(m->u.device_map.items[1].uuid, "GPU-2b744a59-1ae9-b842-9e25-484f12e0fcd9");
        break;
    case COMEM_MSG_WDDM: /* one adapter: 24 GiB of budget, 6 GiB used */
        m->u.wddm.n = 1;
        m->u.wddm.items[0].luid = 0x0000000100001b2cull;
        m->u.wddm.items[0].budget = 24ll << 30;
        m->u.wddm.items[0].usage = 6ll << 30;
        snprintf(m->u.wddm.items[0].uuid, sizeof m->u.wddm.items[0].uuid, "GPU-00112233-4455-6677-8899-aabbccddeeff");
        break;
    case COMEM_MSG_RECEIPT:
        m->u.receipt.ask_id = 8;
        m->u.receipt.outcome = COMEM_RECEIPT_DONE;
        m->u.receipt.freed = 1 << 30;
        m->u.receipt.n = 2;
        residencies(m->u.receipt.items, 2);
        break;
    case COMEM_MSG_REPLY:
        m->u.reply.status = COMEM_ENOENT;
        strcpy(m->u.reply.message, "no such holder");
        break;
    case COMEM_MSG_HELLO_REPLY:
        m->u.hello_reply.session_id = 77;
        m->u.hello_reply.coord_pid = 1234;
        m->u.hello_reply.proto_version = COMEM_WIRE_VERSION;
        m->u.hello_reply.n_devices = 2;
        m->u.hello_reply.view_share = 1;
        m->u.hello_reply.area_share = 2;
        break;
    case COMEM_MSG_DEVICES_REPLY:
        m->u.devices_reply.n = 2;
        for (uint16_t i = 0; i < 2; i++) {
            comem_wire_device *d = &m->u.devices_reply.devices[i];
            d->index = i;
            d->scope = (uint8_t)i;
            d->total = (int64_t)24 << 30;
            d->free = (int64_t)20 << 30;
            d->reserved = 300 << 20;
            snprintf(d->uuid, sizeof d->uuid, "GPU-0000000%u", (unsigned)i);
            strcpy(d->name, "SIM card");
        }
        break;
    case COMEM_MSG_ADMIT_REPLY:
        m->u.admit_reply.granted = 1;
        m->u.admit_reply.grant_id = 5;
        m->u.admit_reply.bytes = 6442450944;
        m->u.admit_reply.need = 8579868262;
        m->u.admit_reply.free_before = 4294967296;
        m->u.admit_reply.free_after = 9663676416;
        m->u.admit_reply.freed = 5368709120;
        m->u.admit_reply.reserve = 419430400;
        m->u.admit_reply.pager_headroom = 268435456;
        m->u.admit_reply.n_asked = 1;
        m->u.admit_reply.n_ids = 1;
        m->u.admit_reply.asked[0] = 0x100000003ull;
        break;
    case COMEM_MSG_RELEASE:
        m->u.release.entry_id = 0x100000007ull;
        m->u.release.bytes = -1;
        m->u.release.timeout_ms = 10000;
        break;
    case COMEM_MSG_RELEASE_REPLY:
        m->u.release_reply.outcome = COMEM_RECEIPT_DONE;
        m->u.release_reply.freed = 1 << 30;
        m->u.release_reply.resident = 0;
        break;
    case COMEM_MSG_PRESSURE_REPLY:
        m->u.pressure_reply.freed = 1 << 30;
        m->u.pressure_reply.free_after = 3221225472;
        m->u.pressure_reply.n_asked = 2;
        m->u.pressure_reply.n_busy = 1;
        break;
    case COMEM_MSG_PIN_REPLY:
        m->u.pin_reply.granted = 0;
        m->u.pin_reply.total_pinned = 1 << 30;
        m->u.pin_reply.max_pinned = -1;
        m->u.pin_reply.shortfall = 1 << 20;
        break;
    case COMEM_MSG_RESERVE_REPLY:
        m->u.reserve_reply.published = 734003200;
        m->u.reserve_reply.base = 419430400;
        m->u.reserve_reply.for_requester = 419430400;
        m->u.reserve_reply.pager_headroom = 268435456;
        break;
    case COMEM_MSG_STATUS_REPLY:
        m->u.status_reply.offset = 0;
        m->u.status_reply.total = 40;
        m->u.status_reply.len = 17;
        m->u.status_reply.text = (const uint8_t *)"{\"devices\":[{}]}\n";
        break;
    case COMEM_MSG_ASK:
        m->u.ask.ask_id = 8;
        m->u.ask.holder_id = 3;
        m->u.ask.kind = COMEM_ASK_RELEASE;
        m->u.ask.device = 0;
        m->u.ask.bytes = 2147483648;
        m->u.ask.deadline_ms = 2000;
        m->u.ask.n = 2;
        m->u.ask.items[0].entry_id = 11;
        m->u.ask.items[0].bytes = 1 << 30;
        m->u.ask.items[1].entry_id = 12;
        m->u.ask.items[1].bytes = 1 << 30;
        break;
    default: break; /* DEVICES and STATUS have nothing to fill */
    }
}

#define ENTRY(i) ((1ull << 32) | (uint64_t)((i) + 1)) /* the fuzz target's entries, i in 0..3 */

/* The hostile and extreme seeds, by number; false past the last. */
static const char *g_patch; /* bytes the encoder would refuse, put in place of a run of '@' after encoding */

/* A name field filled with as many '@' as the patch has bytes. */
static void placeholder(char *field, const char *patch)
{
    g_patch = patch;
    memset(field, '@', strlen(patch));
    field[strlen(patch)] = '\0';
}

static bool extreme(comem_msg *m, int k, const char **name)
{
    g_patch = NULL;
    memset(m, 0, sizeof *m);
    m->request_id = 7;
    comem_msg_census *cs = &m->u.census;
    switch (k) {
    case 0: /* one census naming two entries 512 times */
        *name = "census-duplicates";
        m->type = COMEM_MSG_CENSUS;
        cs->holder_id = ENTRY(0);
        cs->seq = 1;
        cs->n = COMEM_WIRE_MAX_ITEMS;
        for (int i = 0; i < COMEM_WIRE_MAX_ITEMS; i++)
            cs->items[i] = (comem_wire_residency){ENTRY(i % 2), 1, (int64_t)20 << 30, 0};
        return true;
    case 1: /* deltas that cancel out item by item (each 0 counts -1 GiB), applied last-wins: 37 GiB on 24 */
        *name = "census-cancelling-duplicates";
        m->type = COMEM_MSG_CENSUS;
        cs->holder_id = ENTRY(0);
        cs->n = 42;
        for (int i = 0; i < 40; i++)
            cs->items[i] = (comem_wire_residency){ENTRY(1), 2, 0, 0};
        cs->items[40] = (comem_wire_residency){ENTRY(2), 2, (int64_t)20 << 30, 0};
        cs->items[41] = (comem_wire_residency){ENTRY(1), 2, (int64_t)20 << 30, 0};
        return true;
    case 2: /* extreme values everywhere */
        *name = "census-extremes";
        m->type = COMEM_MSG_CENSUS;
        cs->holder_id = UINT64_MAX;
        cs->seq = UINT64_MAX;
        cs->has = COMEM_CENSUS_PINNED | COMEM_CENSUS_OVERHEAD;
        cs->pinned = INT64_MAX;
        cs->overhead = INT64_MIN;
        cs->n = COMEM_WIRE_MAX_ITEMS;
        for (int i = 0; i < COMEM_WIRE_MAX_ITEMS; i++)
            cs->items[i] = (comem_wire_residency){i < 4 ? ENTRY(i) : UINT64_MAX - (uint64_t)i,
                                                  i % 3 ? UINT64_MAX : 0, i % 2 ? INT64_MAX : INT64_MIN,
                                                  i % 2 ? INT64_MAX : 0};
        return true;
    case 3: /* a receipt naming one entry 512 times */
        *name = "receipt-duplicates";
        m->type = COMEM_MSG_RECEIPT;
        m->request_id = 0;
        m->u.receipt.ask_id = 1;
        m->u.receipt.outcome = COMEM_RECEIPT_DONE;
        m->u.receipt.freed = INT64_MAX;
        m->u.receipt.n = COMEM_WIRE_MAX_ITEMS;
        for (int i = 0; i < COMEM_WIRE_MAX_ITEMS; i++)
            m->u.receipt.items[i] = (comem_wire_residency){ENTRY(3), (uint64_t)i, (int64_t)i << 30, 0};
        return true;
    case 4: /* an admission with a full keep list and the largest sizes */
        *name = "admit-extremes";
        m->type = COMEM_MSG_ADMIT;
        m->u.admit.device = UINT16_MAX;
        m->u.admit.holder_id = UINT64_MAX;
        m->u.admit.weights = INT64_MAX;
        m->u.admit.inference = INT64_MAX;
        m->u.admit.cast_forward = INT64_MIN;
        m->u.admit.timeout_ms = UINT32_MAX;
        m->u.admit.n_keep = COMEM_WIRE_MAX_ITEMS;
        for (int i = 0; i < COMEM_WIRE_MAX_ITEMS; i++)
            m->u.admit.keep[i] = ENTRY(i % 4);
        return true;
    case 5: /* an entry larger than any machine */
        *name = "entry-add-extremes";
        m->type = COMEM_MSG_ENTRY_ADD;
        m->u.entry_add.holder_id = ENTRY(0);
        m->u.entry_add.size = INT64_MAX;
        m->u.entry_add.resident = INT64_MIN;
        m->u.entry_add.refs = INT64_MAX;
        m->u.entry_add.flags = COMEM_ENTRY_DYNAMIC;
        memset(m->u.entry_add.name, 'n', COMEM_WIRE_NAME_MAX - 1);
        return true;
    case 6: /* the longest token and name the protocol carries */
        *name = "hello-longest";
        m->type = COMEM_MSG_HELLO;
        m->u.hello.proto_version = COMEM_WIRE_VERSION;
        m->u.hello.role = COMEM_ROLE_HOST;
        m->u.hello.reserve_base = 0;
        m->u.hello.caps = COMEM_CAP_MASK;
        memset(m->u.hello.name, 'h', COMEM_WIRE_NAME_MAX - 1);
        memset(m->u.hello.token, 't', COMEM_WIRE_TEXT_MAX - 1);
        return true;
    case 7: /* a full ask */
        *name = "ask-full";
        m->type = COMEM_MSG_ASK;
        m->request_id = 0;
        m->u.ask.ask_id = UINT64_MAX;
        m->u.ask.kind = COMEM_ASK_PINS;
        m->u.ask.bytes = INT64_MAX;
        m->u.ask.deadline_ms = UINT32_MAX;
        m->u.ask.n = COMEM_WIRE_MAX_ITEMS;
        for (int i = 0; i < COMEM_WIRE_MAX_ITEMS; i++)
            m->u.ask.items[i] = (comem_wire_release){ENTRY(0), i % 2 ? INT64_MAX : -1};
        return true;
    case 8:
        *name = "pin-extremes";
        m->type = COMEM_MSG_PIN_ACQUIRE;
        m->u.pin.holder_id = UINT64_MAX;
        m->u.pin.bytes = INT64_MAX;
        return true;
    case 9:
        *name = "pressure-extremes";
        m->type = COMEM_MSG_PRESSURE;
        m->u.pressure.device = UINT16_MAX;
        m->u.pressure.bytes = INT64_MIN;
        m->u.pressure.timeout_ms = UINT32_MAX;
        return true;
    case 10:
        *name = "release-extremes";
        m->type = COMEM_MSG_RELEASE;
        m->u.release.entry_id = ENTRY(0);
        m->u.release.bytes = INT64_MIN;
        m->u.release.timeout_ms = UINT32_MAX;
        return true;
    case 11: /* a screen cleared and a pane title set from a process name (issue 20 item 14) */
        *name = "hello-name-escapes";
        m->type = COMEM_MSG_HELLO;
        m->u.hello.proto_version = COMEM_WIRE_VERSION;
        m->u.hello.role = COMEM_ROLE_WORKER;
        placeholder(m->u.hello.name, "w\x1b[2J\x1b]2;pwned\x07\r\nfake log line");
        return true;
    case 12: /* invalid UTF-8 in a holder's name (issue 20 item 13) */
        *name = "holder-name-not-utf8";
        m->type = COMEM_MSG_HOLDER_ADD;
        m->u.holder_add.kind = COMEM_HOLDER_MODELS;
        placeholder(m->u.holder_add.name, "models\xc3\x28\xff");
        return true;
    case 13: /* an overlong slash and a C1 CSI in an entry's name */
        *name = "entry-name-overlong-c1";
        m->type = COMEM_MSG_ENTRY_ADD;
        m->u.entry_add.holder_id = ENTRY(0);
        m->u.entry_add.size = 1 << 30;
        placeholder(m->u.entry_add.name, "\xc0\xaf..\xc2\x9b" "2J");
        return true;
    case 14: /* a surrogate and a code point past U+10FFFF in a prompt id */
        *name = "activity-prompt-surrogate";
        m->type = COMEM_MSG_ACTIVITY;
        m->u.activity.busy = 1;
        placeholder(m->u.activity.prompt, "p\xed\xa0\x80\xf4\x90\x80\x80");
        return true;
    default: return false;
    }
}

static int write_file(const char *dir, const char *name, const uint8_t *p, size_t n)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        fprintf(stderr, "fuzz_wire_corpus: path too long: %s/%s\n", dir, name);
        return -1;
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        fprintf(stderr, "fuzz_wire_corpus: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t w = fwrite(p, 1, n, f);
    if (fclose(f) != 0 || w != n) {
        fprintf(stderr, "fuzz_wire_corpus: %s: write failed\n", path);
        return -1;
    }
    return 0;
}

/* Encodes the sample of type at out; returns its size or exits. */
static size_t encode_sample(uint16_t type, uint8_t *out, size_t cap)
{
    sample(&g_msg, type);
    int n = comem_wire_encode(&g_msg, out, cap);
    if (n < 0) {
        fprintf(stderr, "fuzz_wire_corpus: cannot encode %s: status %d\n", comem_wire_type_name(type), n);
        exit(1);
    }
    return (size_t)n;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_wire_corpus DIR\n");
        return 2;
    }
    size_t n_types = sizeof types / sizeof types[0];
    for (size_t t = 0; t < n_types; t++) {
        size_t n = encode_sample(types[t], g_buf, sizeof g_buf);
        char name[64];
        snprintf(name, sizeof name, "seed-%02u-%s", (unsigned)types[t], comem_wire_type_name(types[t]));
        if (write_file(argv[1], name, g_buf, n) != 0)
            return 1;
    }
    /* A conversation's opening as one stream: HELLO, DEVICES, HOLDER_ADD. */
    size_t len = 0;
    len += encode_sample(COMEM_MSG_HELLO, g_buf + len, sizeof g_buf - len);
    len += encode_sample(COMEM_MSG_DEVICES, g_buf + len, sizeof g_buf - len);
    len += encode_sample(COMEM_MSG_HOLDER_ADD, g_buf + len, sizeof g_buf - len);
    if (write_file(argv[1], "seed-stream-opening", g_buf, len) != 0)
        return 1;
    size_t n_seeds = n_types + 1;
    const char *what;
    for (int k = 0; extreme(&g_msg, k, &what); k++) {
        int n = comem_wire_encode(&g_msg, g_buf, sizeof g_buf);
        char name[64];
        snprintf(name, sizeof name, "seed-x%02d-%s", k, what);
        if (n < 0) {
            fprintf(stderr, "fuzz_wire_corpus: cannot encode %s: status %d\n", what, n);
            return 1;
        }
        if (g_patch) { /* the hostile name goes in where the encoder saw a harmless one */
            size_t plen = strlen(g_patch);
            char run[COMEM_WIRE_NAME_MAX];
            memset(run, '@', plen);
            for (size_t at = 0; at + plen <= (size_t)n; at++)
                if (!memcmp(g_buf + at, run, plen)) {
                    memcpy(g_buf + at, g_patch, plen);
                    break;
                }
        }
        if (write_file(argv[1], name, g_buf, (size_t)n) != 0)
            return 1;
        n_seeds++;
    }
    /* Pipelined admissions with keep lists, as one stream (the flood of issue 9, item 2, in small). */
    len = 0;
    for (int i = 0; i < 12; i++) {
        memset(&g_msg, 0, sizeof g_msg);
        g_msg.type = COMEM_MSG_ADMIT;
        g_msg.request_id = 100u + (uint32_t)i;
        g_msg.u.admit.weights = (int64_t)8 << 30;
        g_msg.u.admit.timeout_ms = 30000;
        g_msg.u.admit.n_keep = 64;
        for (int k = 0; k < 64; k++)
            g_msg.u.admit.keep[k] = 0x7fff000000000000ull + (uint64_t)k;
        int n = comem_wire_encode(&g_msg, g_buf + len, sizeof g_buf - len);
        if (n < 0)
            return 1;
        len += (size_t)n;
    }
    if (write_file(argv[1], "seed-stream-pipelined-admits", g_buf, len) != 0)
        return 1;
    n_seeds++;
    printf("fuzz_wire_corpus: wrote %zu seeds to %s\n", n_seeds, argv[1]);
    return 0;
}
