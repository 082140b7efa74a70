/*
 * wire/wire.h - comem's protocol: frames and messages, with bounded decoding.
 *
 * A frame is a 16-byte header followed by `length` payload bytes:
 *
 *   offset  size  field
 *   0       4     magic       0x4d454d43 ("CMEM" read as little-endian bytes C M E M)
 *   4       2     version     COMEM_WIRE_VERSION
 *   6       2     type        comem_msg_type
 *   8       4     request_id  chosen by the requester; replies echo it; 0 for unsolicited frames
 *   12      4     length      payload bytes, at most COMEM_WIRE_MAX_PAYLOAD
 *
 * All integers are little-endian and fixed-width. A text field is a u8 length
 * and that many bytes, with no terminator and no NUL byte inside; the length
 * is at most the field's maximum minus one, because the decoded struct keeps
 * the text NUL-terminated in an array of the maximum's size. A list is a u16
 * count then its items, never more than the list's maximum. Enumerations,
 * booleans (0 or 1) and flag words (no bit outside the field's *_MASK) are
 * range-checked. The payload must be consumed exactly: trailing bytes are an
 * error. Decoding never allocates: it fills a caller-owned comem_msg whose
 * arrays have fixed maximum sizes, and a malformed frame is rejected with
 * COMEM_EPROTO (the coordinator then answers with an error and closes). The
 * encoder enforces the same rules, so every frame it writes decodes, and
 * decoding then re-encoding reproduces the frame byte for byte.
 *
 * This layer knows messages, not sessions: no ledger, no sockets.
 * docs/protocol.md describes each message and the conversation rules.
 */
#ifndef COMEM_WIRE_WIRE_H
#define COMEM_WIRE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/name.h"    /* COMEM_NAME_MAX */
#include "comem/common.h" /* COMEM_MAX_DEVICES; comem_status and comem_scope travel as integers */

#define COMEM_WIRE_MAGIC 0x4d454d43u
#define COMEM_WIRE_VERSION 7 /* 2: entries carry their reference count (ENTRY_ADD, residency); 3: HELLO_REPLY names its shares;
                                4: WDDM; 5: a WDDM reading names its adapter's CUDA device; 6: RECLAIM;
                                7: HOLDER_ADD names the process whose memory the holder is (an app holder) */
#define COMEM_WIRE_HEADER_SIZE 16
#define COMEM_WIRE_MAX_PAYLOAD (64 * 1024)
#define COMEM_WIRE_MAX_FRAME (COMEM_WIRE_HEADER_SIZE + COMEM_WIRE_MAX_PAYLOAD)

#define COMEM_WIRE_NAME_MAX COMEM_NAME_MAX /* holder, entry and session names, prompt ids (bytes) */
#define COMEM_WIRE_TEXT_MAX 128  /* uuids, device names, messages, tokens (bytes) */
#define COMEM_WIRE_MAX_ITEMS 512 /* entries in a census, an ask or a receipt; keep-list ids */
#define COMEM_WIRE_MAX_ASKED 64  /* holder ids an admission reply names */
#define COMEM_WIRE_CHUNK_MAX (COMEM_WIRE_MAX_PAYLOAD - 64) /* status text per frame */

typedef enum comem_msg_type {
    /* requests: client -> coordinator; each is answered with the reply named */
    COMEM_MSG_HELLO = 1,         /* -> HELLO_REPLY; must be the first frame */
    COMEM_MSG_DEVICES = 2,       /* -> DEVICES_REPLY */
    COMEM_MSG_HOLDER_ADD = 3,    /* -> ID_REPLY (holder id) */
    COMEM_MSG_HOLDER_REMOVE = 4, /* -> REPLY */
    COMEM_MSG_ENTRY_ADD = 5,     /* -> ID_REPLY (entry id) */
    COMEM_MSG_ENTRY_REMOVE = 6,  /* -> REPLY */
    COMEM_MSG_CENSUS = 7,        /* -> REPLY */
    COMEM_MSG_ADMIT = 8,         /* -> ADMIT_REPLY */
    COMEM_MSG_GRANT_DONE = 9,    /* -> REPLY */
    COMEM_MSG_ACTIVITY = 10,     /* -> REPLY */
    COMEM_MSG_PRESSURE = 11,     /* -> PRESSURE_REPLY */
    COMEM_MSG_PIN_ACQUIRE = 12,  /* -> PIN_REPLY */
    COMEM_MSG_PIN_RELEASE = 13,  /* -> PIN_REPLY */
    COMEM_MSG_RESERVE = 14,      /* -> RESERVE_REPLY */
    COMEM_MSG_STATUS = 15,       /* -> one or more STATUS_REPLY chunks */
    COMEM_MSG_RECEIPT = 16,      /* the answer to an ASK; not replied to */
    COMEM_MSG_RELEASE = 17,      /* -> RELEASE_REPLY: ask the holder of another process's entry */
    COMEM_MSG_DEVICE_MAP = 31,   /* -> REPLY: this process's device ordinals, by the UUID of each */
    COMEM_MSG_GOODBYE = 32,      /* not replied to: the client ends its session on purpose */
    COMEM_MSG_BOOKED = 33,       /* not replied to: look at the booking area now (docs/booking.md) */
    COMEM_MSG_TOUCH = 34,        /* not replied to: this holder was in use just now (a pager faulted) */
    COMEM_MSG_WDDM = 35,         /* not replied to: this process's WDDM budget and usage per adapter (Windows) */
    COMEM_MSG_RECLAIM = 36,      /* -> ID_REPLY (the grant's new id): a grant of a previous coordinator, again */

    /* coordinator -> client */
    COMEM_MSG_REPLY = 64,
    COMEM_MSG_HELLO_REPLY = 65,
    COMEM_MSG_DEVICES_REPLY = 66,
    COMEM_MSG_ID_REPLY = 67,
    COMEM_MSG_ADMIT_REPLY = 68,
    COMEM_MSG_PRESSURE_REPLY = 69,
    COMEM_MSG_PIN_REPLY = 70,
    COMEM_MSG_RESERVE_REPLY = 71,
    COMEM_MSG_STATUS_REPLY = 72,
    COMEM_MSG_ASK = 73, /* unsolicited: request_id 0 */
    COMEM_MSG_RELEASE_REPLY = 74,
    COMEM_MSG_ADMIT_QUEUED = 75 /* no body: the ADMIT with this request_id waits for asks (or behind a job
                                   that does); its ADMIT_REPLY follows */
} comem_msg_type;

typedef enum comem_role {
    COMEM_ROLE_HOST = 1,   /* owns the main model list (ComfyUI) and publishes the reserve */
    COMEM_ROLE_WORKER = 2, /* an isolated process holding its own models */
    COMEM_ROLE_TOOL = 3    /* looks, never holds (comem status) */
} comem_role;

/* Capability and holder flag bits. */
enum {
    COMEM_CAP_RELEASE = 1u << 0,      /* answers sized release asks */
    COMEM_CAP_IDLE_RELEASE = 1u << 1, /* answers full (idle) release asks */
    COMEM_CAP_PIN_RELEASE = 1u << 2,  /* answers pinned-RAM release asks */
    COMEM_CAP_WHILE_BUSY = 1u << 3,   /* can release even while computing (a pager) */
    COMEM_CAP_MASK = (1u << 4) - 1u   /* every defined bit; others are refused */
};

typedef enum comem_holder_kind {
    COMEM_HOLDER_MODELS = 1, /* a model list (ComfyUI's, or a worker's) */
    COMEM_HOLDER_PAGER = 2,  /* a weight pager: entries are its VBARs */
    COMEM_HOLDER_PINS = 3,   /* pinned host RAM */
    COMEM_HOLDER_RAW = 4     /* anything else that can free memory on request */
} comem_holder_kind;

enum {
    COMEM_ENTRY_DYNAMIC = 1u << 0, /* paged: resident bytes are reclaimable on demand */
    COMEM_ENTRY_CACHE = 1u << 1,   /* host RAM: a cache entry, the cheapest to get back */
    COMEM_ENTRY_FILE = 1u << 2,    /* host RAM: a copy a file can give back */
    COMEM_ENTRY_MASK = COMEM_ENTRY_DYNAMIC | COMEM_ENTRY_CACHE | COMEM_ENTRY_FILE
};

typedef enum comem_ask_kind {
    COMEM_ASK_RELEASE = 1, /* free `bytes` (per-entry amounts given) */
    COMEM_ASK_IDLE = 2,    /* idle: release everything you can */
    COMEM_ASK_PINS = 3     /* free `bytes` of pinned host RAM */
} comem_ask_kind;

typedef enum comem_receipt_outcome {
    COMEM_RECEIPT_DONE = 0, /* freed is what came back */
    COMEM_RECEIPT_BUSY = 1, /* computing; ask again later */
    COMEM_RECEIPT_ERROR = 2,
    COMEM_RECEIPT_GONE = 3 /* RELEASE_REPLY only: the entry or its process is gone (its bytes with it) */
} comem_receipt_outcome;

typedef struct comem_wire_header {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t request_id;
    uint32_t length;
} comem_wire_header;

/* ---- message bodies ---- */

typedef struct comem_msg_hello {
    uint16_t proto_version;
    uint8_t role;  /* comem_role */
    uint8_t scope; /* comem_scope of this process's own free reading
                      (comem/common.h: 0 device-wide, 1 process-local) */
    uint32_t pid;
    uint32_t caps;
    int64_t reserve_base; /* the host's operator reserve (EXTRA_RESERVED_VRAM as read once); -1 unknown */
    char name[COMEM_WIRE_NAME_MAX];
    char token[COMEM_WIRE_TEXT_MAX]; /* "" when none */
} comem_msg_hello;

typedef struct comem_msg_hello_reply {
    uint64_t session_id;
    uint32_t coord_pid;
    uint16_t proto_version;
    uint16_t n_devices; /* at most COMEM_MAX_DEVICES */
    /* The shared memory that came with the reply, each named by a number (os/shm.h: on Linux its
       place among the descriptors beside the frame, from 1; on Windows a handle value); 0: none. */
    uint64_t view_share; /* the sealed view (shm/view.h) */
    uint64_t area_share; /* this session's booking area (shm/book.h) */
} comem_msg_hello_reply;

typedef struct comem_wire_device {
    uint16_t index;
    uint8_t scope; /* comem_scope */
    int64_t total;
    int64_t free;
    int64_t reserved;
    char uuid[COMEM_WIRE_TEXT_MAX];
    char name[COMEM_WIRE_TEXT_MAX];
} comem_wire_device;

typedef struct comem_msg_devices_reply {
    uint16_t n;
    comem_wire_device devices[COMEM_MAX_DEVICES];
} comem_msg_devices_reply;

typedef struct comem_msg_holder_add {
    uint16_t device;
    uint8_t kind; /* comem_holder_kind */
    uint32_t flags; /* COMEM_CAP_* this holder honours */
    uint32_t pid;   /* 0: its memory is the sender's process's; else that process's (an app holder: docs/apps.md) */
    char name[COMEM_WIRE_NAME_MAX];
} comem_msg_holder_add;

typedef struct comem_msg_id { /* HOLDER_REMOVE, ENTRY_REMOVE, ID_REPLY, TOUCH (the holder's id) */
    uint64_t id;
} comem_msg_id;

typedef struct comem_msg_entry_add {
    uint64_t holder_id;
    int64_t size;
    int64_t resident;
    int64_t refs;   /* references the holder counts on it (ComfyUI's refcount), >= 0 */
    uint32_t flags; /* COMEM_ENTRY_* */
    char name[COMEM_WIRE_NAME_MAX];
} comem_msg_entry_add;

typedef struct comem_wire_residency {
    uint64_t entry_id;
    uint64_t seq;
    int64_t resident;
    int64_t refs; /* references the holder counts on it now, >= 0: the eviction order's second key */
} comem_wire_residency;

typedef struct comem_msg_census {
    uint64_t holder_id;
    uint64_t seq;            /* holder-level sequence for pinned/overhead (equal is dropped) */
    uint8_t has;             /* bit 0: pinned present, bit 1: overhead present */
    int64_t pinned;
    int64_t overhead;
    uint16_t n;              /* entries listed; an entry not listed is unknown, not zero */
    comem_wire_residency items[COMEM_WIRE_MAX_ITEMS];
} comem_msg_census;

enum {
    COMEM_CENSUS_PINNED = 1u << 0,
    COMEM_CENSUS_OVERHEAD = 1u << 1,
    COMEM_CENSUS_MASK = COMEM_CENSUS_PINNED | COMEM_CENSUS_OVERHEAD
};

typedef struct comem_msg_admit {
    uint16_t device;
    uint64_t holder_id;   /* the holder the load is for (0: none) */
    int64_t weights;      /* bytes about to be loaded */
    int64_t inference;    /* memory_required (inference estimate) */
    int64_t cast_forward; /* streams x largest tensor */
    uint32_t timeout_ms;  /* how long the requester will wait */
    uint16_t n_keep;      /* entries (of any process) that must not be asked */
    uint64_t keep[COMEM_WIRE_MAX_ITEMS];
} comem_msg_admit;

typedef struct comem_msg_admit_reply {
    uint8_t granted;
    uint64_t grant_id;
    int64_t bytes;       /* granted bytes (the weights) */
    int64_t need;        /* the ask target the decision used */
    int64_t free_before; /* true free before asking anyone */
    int64_t free_after;  /* true free after receipts */
    int64_t short_by;    /* when refused: how many bytes were missing */
    int64_t freed;       /* bytes other holders reported freed for this admission */
    int64_t reserve;     /* the reserve this requester should keep (EXTRA_RESERVED_VRAM) */
    int64_t pager_headroom;
    uint16_t n_asked;    /* holders asked */
    uint16_t n_busy;     /* holders that answered busy */
    uint16_t n_ids;      /* the first holders asked, by id (at most COMEM_WIRE_MAX_ASKED) */
    uint64_t asked[COMEM_WIRE_MAX_ASKED];
} comem_msg_admit_reply;

typedef struct comem_msg_grant_done {
    uint64_t grant_id;
    uint64_t entry_id; /* the entry that now holds the bytes; 0 cancels the grant */
    int64_t used;      /* bytes actually loaded */
} comem_msg_grant_done;

typedef struct comem_msg_reclaim {
    uint16_t device;
    uint64_t holder_id; /* the holder the grant was for (0: none), as this coordinator knows it */
    int64_t bytes;      /* what the grant booked and is not yet loaded */
} comem_msg_reclaim;

typedef struct comem_msg_activity {
    uint64_t holder_id; /* 0: the whole session */
    uint8_t busy;       /* 1 at a node's start, 0 at its end */
    char prompt[COMEM_WIRE_NAME_MAX]; /* the prompt being served ("" unknown) */
} comem_msg_activity;

typedef struct comem_msg_pressure {
    uint16_t device;
    int64_t bytes;
    uint32_t timeout_ms;
} comem_msg_pressure;

typedef struct comem_msg_pressure_reply {
    int64_t freed;
    int64_t free_after;
    uint16_t n_asked;
    uint16_t n_busy;
} comem_msg_pressure_reply;

typedef struct comem_msg_pin {
    uint64_t holder_id;
    int64_t bytes;
} comem_msg_pin;

typedef struct comem_msg_pin_reply {
    uint8_t granted;
    int64_t total_pinned; /* machine-wide, after this request */
    int64_t max_pinned;   /* the machine-wide ceiling (-1: pinning disabled) */
    int64_t shortfall;    /* when refused */
} comem_msg_pin_reply;

typedef struct comem_msg_reserve {
    uint16_t device;
} comem_msg_reserve;

/*
 * DEVICE_MAP: "my device k is the card with this UUID". From then on, the
 * device a message of this session names (HOLDER_ADD, ADMIT, PRESSURE,
 * RESERVE, and ASK back to it) is its own ordinal, mapped by UUID; an
 * ordinal it has not mapped is the coordinator's index, as before.
 */
typedef struct comem_wire_devmap {
    uint16_t ordinal; /* < COMEM_MAX_DEVICES */
    char uuid[COMEM_WIRE_TEXT_MAX];
} comem_wire_devmap;

typedef struct comem_msg_device_map {
    uint16_t n;
    comem_wire_devmap items[COMEM_MAX_DEVICES];
} comem_msg_device_map;

/*
 * WDDM (Windows): this process's own budget and usage of each adapter's on-card memory, as DXGI
 * gives them (probe/wddm.h), the adapter named by its LUID and, where the process runs CUDA on it,
 * by that device's UUID (probe/cuda_luid.h). Each report replaces the session's last.
 */
typedef struct comem_wire_wddm {
    uint64_t luid;  /* != 0 */
    int64_t budget; /* >= 0 */
    int64_t usage;  /* >= 0 */
    char uuid[COMEM_WIRE_TEXT_MAX]; /* the CUDA device with this LUID ("GPU-..."); "" where unknown */
} comem_wire_wddm;

typedef struct comem_msg_wddm {
    uint16_t n;
    comem_wire_wddm items[COMEM_MAX_DEVICES];
} comem_msg_wddm;

typedef struct comem_msg_reserve_reply {
    int64_t published;      /* total reserve for the device */
    int64_t base;           /* the operator's base */
    int64_t for_requester;  /* published minus the requester's own charge */
    int64_t pager_headroom; /* what the requester's pager should use */
} comem_msg_reserve_reply;

typedef struct comem_msg_status {
    uint8_t flags; /* reserved: must be 0 in version 1 */
} comem_msg_status;

typedef struct comem_msg_status_reply {
    uint32_t offset; /* where this chunk starts in the whole text */
    uint32_t total;  /* the whole text's length */
    uint32_t len;    /* at most COMEM_WIRE_CHUNK_MAX; offset + len <= total */
    const uint8_t *text; /* len bytes, not NUL-terminated; decoding points it into the
                            payload (valid while the payload is) */
} comem_msg_status_reply;

typedef struct comem_wire_release {
    uint64_t entry_id;
    int64_t bytes;
} comem_wire_release;

typedef struct comem_msg_ask {
    uint64_t ask_id;
    uint64_t holder_id;
    uint8_t kind; /* comem_ask_kind */
    uint16_t device;
    int64_t bytes;        /* the total asked */
    uint32_t deadline_ms; /* answer within this, or be counted as busy */
    uint16_t n;           /* per-entry amounts (may be 0: the holder chooses) */
    comem_wire_release items[COMEM_WIRE_MAX_ITEMS];
} comem_msg_ask;

typedef struct comem_msg_receipt {
    uint64_t ask_id;
    uint8_t outcome; /* comem_receipt_outcome */
    int64_t freed;
    uint16_t n; /* residency after the release, applied like a census */
    comem_wire_residency items[COMEM_WIRE_MAX_ITEMS];
} comem_msg_receipt;

typedef struct comem_msg_release { /* RELEASE */
    uint64_t entry_id;   /* the coordinator's id of another session's entry */
    int64_t bytes;       /* < 0: all of it */
    uint32_t timeout_ms; /* how long the requester will wait */
} comem_msg_release;

typedef struct comem_msg_release_reply {
    uint8_t outcome;  /* comem_receipt_outcome, GONE included */
    int64_t freed;    /* what the holder reported freed; for GONE, what the entry held */
    int64_t resident; /* the entry's resident bytes now (0 when gone) */
} comem_msg_release_reply;

typedef struct comem_msg_reply {
    int32_t status; /* comem_status */
    char message[COMEM_WIRE_TEXT_MAX];
} comem_msg_reply;

/* One decoded message: type says which member is valid. */
typedef struct comem_msg {
    uint16_t type;
    uint32_t request_id;
    union {
        comem_msg_hello hello;
        comem_msg_hello_reply hello_reply;
        comem_msg_devices_reply devices_reply;
        comem_msg_holder_add holder_add;
        comem_msg_id id; /* HOLDER_REMOVE, ENTRY_REMOVE, ID_REPLY, TOUCH */
        comem_msg_entry_add entry_add;
        comem_msg_census census;
        comem_msg_admit admit;
        comem_msg_admit_reply admit_reply;
        comem_msg_grant_done grant_done;
        comem_msg_reclaim reclaim;
        comem_msg_activity activity;
        comem_msg_pressure pressure;
        comem_msg_pressure_reply pressure_reply;
        comem_msg_pin pin; /* PIN_ACQUIRE, PIN_RELEASE */
        comem_msg_pin_reply pin_reply;
        comem_msg_reserve reserve;
        comem_msg_device_map device_map;
        comem_msg_wddm wddm;
        comem_msg_reserve_reply reserve_reply;
        comem_msg_status status;
        comem_msg_status_reply status_reply;
        comem_msg_ask ask;
        comem_msg_receipt receipt;
        comem_msg_release release;
        comem_msg_release_reply release_reply;
        comem_msg_reply reply;
    } u;
} comem_msg;

/*
 * Decodes and checks a header from buf (at least COMEM_WIRE_HEADER_SIZE bytes):
 * magic, version, a known type, length <= COMEM_WIRE_MAX_PAYLOAD.
 * Returns 0, COMEM_EPROTO (also when len < COMEM_WIRE_HEADER_SIZE), or
 * COMEM_EINVAL when buf or out is NULL.
 */
int comem_wire_decode_header(const uint8_t *buf, size_t len, comem_wire_header *out);

/*
 * The protocol version a frame header names, whichever it is: what a peer of another comem
 * speaks, whose header comem_wire_decode_header refuses. Reads only the magic and the version
 * (the first 6 bytes), whose place every version keeps. Returns 0 and *version when they carry
 * comem's magic, COMEM_EPROTO when they do not (or len < 6), COMEM_EINVAL when buf or version
 * is NULL.
 */
int comem_wire_header_version(const uint8_t *buf, size_t len, uint16_t *version);

/*
 * Decodes a payload of the header's type into *out (no allocation; status
 * text points into payload). payload must hold h->length bytes (it may be
 * NULL when that is 0); nothing outside payload[0..h->length) is read, so
 * bytes of a following frame may sit after it. Returns 0 or COMEM_EPROTO on
 * any malformation: a header that decode_header would refuse, short or
 * trailing bytes, a text or list over its maximum, a NUL inside a text, an
 * enum, boolean or flag value out of range. Returns COMEM_EINVAL when h or
 * out is NULL, or payload is NULL with h->length > 0. On failure *out holds
 * no meaningful message.
 */
int comem_wire_decode(const comem_wire_header *h, const uint8_t *payload, comem_msg *out);

/*
 * Encodes m as a complete frame (header included) into buf. Returns the
 * frame's size, or COMEM_ERANGE when cap is too small or a field is over its
 * maximum or out of its range (the decoder's rules), COMEM_EINVAL for an
 * unknown type, a NULL m, or a status chunk with len > 0 and a NULL text.
 * Nothing is written at or past buf[cap]; on failure buf[0..cap) is undefined.
 * A buffer of COMEM_WIRE_MAX_FRAME bytes always suffices.
 */
int comem_wire_encode(const comem_msg *m, uint8_t *buf, size_t cap);

/* The name of a message type ("ADMIT"), or "UNKNOWN". */
const char *comem_wire_type_name(uint16_t type);

#endif
