/*
 * fuzz/fuzz_wire.c - libFuzzer target: the wire decoder against arbitrary bytes.
 *
 * The input is read as a stream of frames, the way a connection delivers
 * them. For every frame the decoder accepts, the target checks what the
 * decoder promises, and abort()s when a promise is broken:
 *   - success means the whole payload was consumed: the same header with a
 *     length one shorter, or one longer (an extra byte present), is refused;
 *   - what was decoded encodes again, into exactly the bytes that came in
 *     (the encoding is canonical), and decoding those and encoding once more
 *     gives the same bytes (the two decoded messages are the same);
 *   - every failure is COMEM_EPROTO, never another status.
 * The payload is handed to the decoder in a heap block of exactly its length,
 * so ASan reports a read past payload[h->length - 1].
 *
 * Every CENSUS and RECEIPT the decoder accepts is then applied to a small
 * ledger, as the coordinator applies them (a 24 GiB card, one holder, four
 * entries whose ids the seeds name): whatever the items say (an entry listed
 * many times, extreme counts, sizes and sequences) the ledger must keep its
 * invariants, attributing no more than the card holds; a break abort()s.
 *
 * Every name a decoded HELLO, HOLDER_ADD, ENTRY_ADD or ACTIVITY carries goes
 * through the name rule (base/name.h) as the coordinator applies it: a name
 * it passes holds no control character and no byte that is not UTF-8's, and
 * the reason it gives for a refusal is printable ASCII that never echoes the
 * name.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/name.h"
#include "comem/common.h"
#include "coord/coord_internal.h" /* the census handed to the ledger as the coordinator hands it */
#include "ledger/ledger.h"
#include "wire/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    comem_log_set_level(COMEM_LOG_ERROR); /* refusals are expected here, by the million */
    return 0;
}

/* Applies a decoded residency list to a fresh ledger; its invariants must hold after. */
static void check_ledger(const comem_msg *m)
{
    const comem_wire_residency *items;
    size_t n;
    uint64_t seq = 0;
    int64_t pinned = -1, overhead = -1;
    if (m->type == COMEM_MSG_CENSUS) {
        items = m->u.census.items;
        n = m->u.census.n;
        seq = m->u.census.seq;
        coord_census_figures(&m->u.census, &pinned, &overhead); /* as the coordinator hands them over */
    } else if (m->type == COMEM_MSG_RECEIPT) {
        items = m->u.receipt.items;
        n = m->u.receipt.n;
    } else {
        return;
    }
    static comem_ledger l;
    ledger_device d = {.index = 0, .capacity = (int64_t)24 << 30, .entry_max = (int64_t)64 << 30};
    uint64_t session, holder, entry;
    if (comem_ledger_init(&l, &d, 1, (int64_t)16 << 30) != COMEM_OK ||
        comem_ledger_session_add(&l, 1, 0, COMEM_ROLE_WORKER, 0, 0, "w", 0, &session) != COMEM_OK ||
        comem_ledger_holder_add(&l, session, 0, COMEM_HOLDER_MODELS, 0, "h", 0, &holder) != COMEM_OK)
        abort();
    /* Ids of a fresh ledger: generation 1, slots 0..3, as make_corpus names them. */
    for (int i = 0; i < 4; i++)
        if (comem_ledger_entry_add(&l, session, holder, "e", (int64_t)(10 + 5 * i) << 30, (int64_t)1 << 30, i & 1, 0,
                                   &entry) != COMEM_OK)
            abort();
    static ledger_residency booked[COMEM_WIRE_MAX_ITEMS];
    coord_residency(items, n, booked);
    (void)comem_ledger_census(&l, session, holder, seq, pinned, overhead, booked, n, 1, NULL);
    char why[256];
    if (comem_ledger_check(&l, why, sizeof why) != COMEM_OK || comem_ledger_attributed(&l, 0) > d.capacity)
        abort();
    comem_ledger_fini(&l);
}

/* The name rule against a name off the wire: its promises, checked independently. */
static void check_name(const char *name)
{
    char why[128];
    memset(why, 0x55, sizeof why);
    int rc = comem_name_check(name, why, sizeof why);
    if (rc == COMEM_OK) {
        for (const unsigned char *p = (const unsigned char *)name; *p; p++)
            if (*p < 0x20 || *p == 0x7f || *p == 0xc0 || *p == 0xc1 || *p >= 0xf5 || (*p == 0xc2 && p[1] < 0xa0))
                abort(); /* a control character (C0, DEL, C1) or a byte UTF-8 never uses got through */
        return;
    }
    if (rc != COMEM_EINVAL || !memchr(why, 0, sizeof why))
        abort();
    for (const char *p = why; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            abort(); /* the reason is plain text: nothing of the name rides in it */
}

static void check_names(const comem_msg *m)
{
    switch (m->type) {
    case COMEM_MSG_HELLO: check_name(m->u.hello.name); break;
    case COMEM_MSG_HOLDER_ADD: check_name(m->u.holder_add.name); break;
    case COMEM_MSG_ENTRY_ADD: check_name(m->u.entry_add.name); break;
    case COMEM_MSG_ACTIVITY: check_name(m->u.activity.prompt); break;
    default: break;
    }
}

/* Large: kept off the stack. */
static comem_msg g_first, g_second, g_scratch;
static uint8_t g_enc1[COMEM_WIRE_MAX_FRAME], g_enc2[COMEM_WIRE_MAX_FRAME];

static void *copy_exact(const uint8_t *src, size_t n, size_t extra)
{
    uint8_t *p = malloc(n + extra ? n + extra : 1);
    if (p == NULL)
        abort();
    memcpy(p, src, n);
    memset(p + n, 0x5a, extra);
    return p;
}

/* The decoded message must re-encode to `frame` exactly, and survive a second trip. */
static void check_round_trip(const uint8_t *frame, size_t len)
{
    int n1 = comem_wire_encode(&g_first, g_enc1, sizeof g_enc1);
    if (n1 < 0 || (size_t)n1 != len || memcmp(g_enc1, frame, len) != 0)
        abort();
    comem_wire_header h2;
    if (comem_wire_decode_header(g_enc1, (size_t)n1, &h2) != 0)
        abort();
    if (comem_wire_decode(&h2, g_enc1 + COMEM_WIRE_HEADER_SIZE, &g_second) != 0)
        abort();
    int n2 = comem_wire_encode(&g_second, g_enc2, sizeof g_enc2);
    if (n2 != n1 || memcmp(g_enc1, g_enc2, (size_t)n1) != 0)
        abort();
}

/* A successful decode claimed exactly h->length bytes: one fewer or one more must fail. */
static void check_exact_length(const comem_wire_header *h, const uint8_t *payload)
{
    comem_wire_header other = *h;
    if (h->length > 0) {
        other.length = h->length - 1;
        if (comem_wire_decode(&other, payload, &g_scratch) != COMEM_EPROTO)
            abort();
    }
    if (h->length < COMEM_WIRE_MAX_PAYLOAD) {
        uint8_t *longer = copy_exact(payload, h->length, 1);
        other.length = h->length + 1;
        if (comem_wire_decode(&other, longer, &g_scratch) != COMEM_EPROTO)
            abort();
        free(longer);
    }
}

/* Checks the frame at data; returns its size, or 0 when no frame can be taken from data. */
static size_t one_frame(const uint8_t *data, size_t size)
{
    comem_wire_header h;
    int rc = comem_wire_decode_header(data, size, &h);
    if (rc != 0) {
        if (rc != COMEM_EPROTO)
            abort();
        return 0;
    }
    if (size < COMEM_WIRE_HEADER_SIZE || h.length > COMEM_WIRE_MAX_PAYLOAD)
        abort(); /* accepted a header it could not have read, or an oversize one */
    size_t frame = COMEM_WIRE_HEADER_SIZE + (size_t)h.length;
    if (frame > size)
        return 0; /* incomplete: a reader would wait for more */

    uint8_t *payload = copy_exact(data + COMEM_WIRE_HEADER_SIZE, h.length, 0);
    rc = comem_wire_decode(&h, payload, &g_first);
    if (rc == 0) {
        if (g_first.type != h.type || g_first.request_id != h.request_id)
            abort();
        check_round_trip(data, frame); /* before free: status text points into payload */
        check_exact_length(&h, payload);
        check_ledger(&g_first);
        check_names(&g_first);
    } else if (rc != COMEM_EPROTO) {
        abort();
    }
    free(payload);
    return frame;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    while (size > 0) {
        size_t n = one_frame(data, size);
        if (n == 0)
            break;
        data += n;
        size -= n;
    }
    return 0;
}
