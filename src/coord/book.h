/*
 * coord/book.h - the booking area: admissions that fit, booked in shared memory
 * without a round trip (the layout and its rules are in docs/booking.md).
 *
 * The coordinator creates the area as a sealed memfd (it cannot be shrunk or
 * grown, so no client can make the coordinator's mapping fault) and links
 * <socket>.book to /proc/<pid>/fd/<n>, so a process of the same user opens it
 * by path. Per device it publishes `limit`, the room an admission may take
 * (true free less outstanding grants, as the coordinator computes it; < 0:
 * closed, ask the coordinator), and clients share `charged`, the bytes booked
 * here that the ledger does not hold yet. A client books page_counter-style:
 *
 *   claim one of its session's records (FREE -> CLAIMED), check the limit is open,
 *   old = fetch_add(charged, weights); if old + need > limit: fetch_sub, give up;
 *   record -> BOOKED.
 *
 * Every check and every change of `charged` is one atomic operation on one
 * word, so two clients can never both take the same bytes. The coordinator
 * reconciles: a BOOKED record becomes a ledger grant (GRANTED), a DONE record
 * a finished grant; it publishes the lower limit first and then takes the
 * bytes out of `charged`, so the room shown is never more than there is. A
 * session's records are its own: when it ends, what it booked is handed back.
 * A record left CLAIMED or CANCELLING by a process that died (it may or may not
 * have charged) makes the coordinator close every limit, wait until no live
 * record is in a transition, and count `charged` again from the records.
 *
 * Everything in the area is hostile input to the coordinator: it copies each
 * field once, checks it, never trusts the limits it reads back, and turns the
 * fast path off for good after repeated nonsense (every admission then goes
 * through the socket, as before).
 */
#ifndef COMEM_COORD_BOOK_H
#define COMEM_COORD_BOOK_H

#include <stdatomic.h>
#include <stdint.h>

#include "probe/device.h"

#define BOOK_MAGIC 0x4b4f4f424d454d43ULL /* "CMEMBOOK" */
#define BOOK_VERSION 2u
#define BOOK_SLOTS 1024  /* one per coordinator connection slot (COORD_MAX_CONNS) */
#define BOOK_RECORDS 64  /* bookings one session may have outstanding in the area */
#define BOOK_CLOSED (-1) /* a limit below 0: the fast path is closed on that device */

/* A record's state. Who moves it: c = the client that owns the slot, k = the coordinator. */
typedef enum book_state {
    BOOK_FREE = 0,       /* k (after GRANTED/DONE) or c (a rollback, a cancel) -> c claims it */
    BOOK_CLAIMED = 1,    /* c: filling it in and charging; -> BOOKED or FREE */
    BOOK_BOOKED = 2,     /* c: charged and counted; -> k GRANTED, c DONE or CANCELLING */
    BOOK_GRANTED = 3,    /* k: a ledger grant now holds the bytes (grant set); -> c DONE */
    BOOK_DONE = 4,       /* c: grant_done (entry, used set); k finishes it -> FREE */
    BOOK_CANCELLING = 5, /* c: cancelling a BOOKED record: un-charging; -> FREE */
} book_state;

typedef struct book_record {
    _Atomic uint32_t state;
    _Atomic uint32_t seq;       /* c: bumped at every claim; a grant reference names it */
    _Atomic int32_t device;
    _Atomic int32_t pad_;
    _Atomic uint64_t holder;    /* c: the coordinator's holder id, 0 none */
    _Atomic int64_t bytes;      /* c: the weights booked */
    _Atomic int64_t booked_ns;  /* c: CLOCK_MONOTONIC when booked (the grant's expiry counts from it) */
    _Atomic uint64_t grant;     /* k: the ledger grant, once GRANTED */
    _Atomic uint64_t entry;     /* c: DONE: the coordinator's entry id now holding the bytes, 0 cancel */
    _Atomic int64_t used;       /* c: DONE: bytes actually loaded */
} book_record;

typedef struct book_slot {
    _Atomic uint64_t session;   /* k: the session using this slot, 0 free */
    _Atomic int32_t pid;        /* k */
    _Atomic uint32_t posted;    /* c: bumped after every change a client makes, so k knows to look */
    _Atomic uint32_t booked;    /* c: bookings made, ever (k counts them as admissions) */
    _Atomic uint32_t pad_;
    _Atomic int64_t reserve[COMEM_MAX_DEVICES];  /* k: the reserve this session's admission target keeps; < 0 closed */
    _Atomic int64_t floor_add[COMEM_MAX_DEVICES]; /* k: added to the target (no context on the device yet) */
    book_record rec[BOOK_RECORDS];
} book_slot;

typedef struct book_device {
    _Atomic int64_t charged;      /* c adds and rolls back, k takes reconciled bytes out */
    _Atomic int64_t limit;        /* k: the room admissions may take; < 0 closed */
    _Atomic int64_t confirmed_ns; /* k: CLOCK_MONOTONIC when the limit was last confirmed (every turn, >= 50 Hz) */
    char pad_[40];                /* one cache line each: devices do not share a line */
} book_device;

/* A client nudges from this long before looking_until_ns: the coordinator may be deciding to
   sleep just as it books. */
#define BOOK_NUDGE_EARLY_NS (1000000LL)

/* A limit not confirmed for this long is not used: the coordinator is stopped or stuck. */
#define BOOK_STALE_NS (200 * 1000000LL)

typedef struct book_area {
    uint64_t magic;
    uint32_t version;
    uint32_t n_devices;
    uint32_t n_slots;
    int32_t coord_pid;
    /* k: until then (CLOCK_MONOTONIC) the coordinator looks at the area every 250 us; a client
       booking or cancelling after it sends BOOKED, so the change is in the ledger within 1 ms */
    _Atomic int64_t looking_until_ns;
    char pad_[32];
    book_device dev[COMEM_MAX_DEVICES];
    book_slot slot[BOOK_SLOTS];
} book_area;



/*
 * How GRANT_DONE names a booking that became residency (loads go through the socket,
 * in order with the censuses that follow them): bit 63, the record, its seq. Ledger
 * grant ids never have bit 63 set.
 */
#define BOOK_REF_BIT (1ULL << 63)
#define BOOK_REF(idx, seq) (BOOK_REF_BIT | ((uint64_t)(uint32_t)(idx) << 32) | (uint64_t)(uint32_t)(seq))

/* The link to the area that belongs to a socket path. */
void comem_book_path(const char *socket_path, char *buf, size_t len);

#endif
