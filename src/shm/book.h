/*
 * shm/book.h - the booking area: admissions that fit, booked in shared memory
 * without a round trip (the layout, its rules and the threat model are in
 * docs/booking.md).
 *
 * Every session that may admit gets an area of its own: a sealed memfd the
 * coordinator creates at HELLO and hands to that process alone, with the
 * HELLO_REPLY, over the socket (SCM_RIGHTS). Nothing names it in the file
 * system, and comemd is not dumpable, so no other process of the user can open
 * it through /proc. The ledger holds a *stock* for the session on each device
 * where it admits (Linux memcg's per-CPU charge stock, for a process): bytes
 * kept out of everyone else's room for it. The client spends its stock
 * locally, page_counter-style:
 *
 *   claim one of its records (FREE -> CLAIMED), check the limit is open,
 *   old = fetch_add(charged, weights); if old + need > limit: fetch_sub, give up;
 *   record -> BOOKED.
 *
 * The coordinator reconciles a BOOKED record into a ledger grant, never for
 * more than the stock it holds for that session: whatever a process writes in
 * its area, it can spend its own stock and nothing else. The coordinator
 * refills a stock from the room at the end of its turns and takes back what is
 * unspent whenever it decides an admission itself or the session goes quiet:
 * it lowers the limit and reads `charged` (both seq_cst), so a booking racing
 * the take-back is either seen or sees the lower limit; taking back needs no
 * word from the client, so a stopped or dead client stalls nobody.
 */
#ifndef COMEM_SHM_BOOK_H
#define COMEM_SHM_BOOK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "probe/device.h"

#define BOOK_MAGIC 0x4b434f54534d4d43ULL /* "CMMSTOCK" */
#define BOOK_VERSION 3u                  /* 3: one area per session, handed over the socket */
#define BOOK_RECORDS 64                  /* bookings one session may have outstanding */
#define BOOK_CLOSED (-1)                 /* a limit below 0: the fast path is closed on that device */

/* A record's state. Who moves it: c = the client whose area it is, k = the coordinator. */
typedef enum book_state {
    BOOK_FREE = 0,       /* k (after GRANTED/DONE) or c (a rollback, a cancel) -> c claims it */
    BOOK_CLAIMED = 1,    /* c: filling it in and charging; -> BOOKED or FREE */
    BOOK_BOOKED = 2,     /* c: charged and counted; -> k GRANTED, c DONE or CANCELLING */
    BOOK_GRANTED = 3,    /* k: a ledger grant now holds the bytes (grant set); -> c DONE */
    BOOK_DONE = 4,       /* c: a cancel of a GRANTED record; k finishes it -> FREE */
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
    _Atomic uint64_t pad2_[2];
} book_record;

/* One device of a session's area: one cache line. */
typedef struct book_stock {
    _Atomic int64_t charged;   /* c adds and rolls back; k takes reconciled bytes out */
    _Atomic int64_t limit;     /* k: this session's stock: charged + need may reach it; < 0 closed */
    _Atomic int64_t reserve;   /* k: the reserve and context floor its target keeps beyond the stock */
    char pad_[40];             /*    (the stock is sized to leave them free: shown in figures only) */
} book_stock;

typedef struct book_area {
    uint64_t magic;            /* k, once: everything before `looking_until_ns` */
    uint32_t version;
    uint32_t n_devices;
    uint64_t session;
    int32_t coord_pid;
    int32_t pid;
    /* k: until then (CLOCK_MONOTONIC) the coordinator looks at the area every 250 us; a client
       booking or cancelling after it sends BOOKED, so the change is in the ledger within 1 ms */
    _Atomic int64_t looking_until_ns;
    _Atomic int64_t confirmed_ns; /* k: when the limits were last confirmed (every turn, >= 50 Hz) */
    _Atomic uint32_t posted;   /* c: bumped after every change, so k knows to look */
    _Atomic uint32_t booked;   /* c: bookings made, ever: this process's own word, shown as such */
    char pad_[8];              /* the devices start on a cache line */
    book_stock dev[COMEM_MAX_DEVICES]; /* by the coordinator's device index */
    book_record rec[BOOK_RECORDS];
    /* k: the coordinator's device index each of this process's ordinals names (its DEVICE_MAP;
       < 0 none): a booking on ordinal o books dev[map[o]], its record names that index */
    _Atomic int8_t map[COMEM_MAX_DEVICES];
    char pad2_[48];
} book_area;

/* A client nudges from this long before looking_until_ns: the coordinator may be deciding to
   sleep just as it books. */
#define BOOK_NUDGE_EARLY_NS (1000000LL)

/* A limit not confirmed for this long is not used: the coordinator is stopped or stuck. */
#define BOOK_STALE_NS (200 * 1000000LL)

/*
 * How GRANT_DONE names a booking that became residency (loads go through the socket,
 * in order with the censuses that follow them): bit 63, the record, its seq. Ledger
 * grant ids never have bit 63 set.
 */
#define BOOK_REF_BIT (1ULL << 63)
#define BOOK_REF(idx, seq) (BOOK_REF_BIT | ((uint64_t)(uint32_t)(idx) << 32) | (uint64_t)(uint32_t)(seq))

_Static_assert(sizeof(book_record) == 64 && sizeof(book_stock) == 64, "one cache line each");
_Static_assert(offsetof(book_area, dev) == 64, "the header is one cache line");
_Static_assert(sizeof(book_area) % 64 == 0, "whole cache lines");

#endif
