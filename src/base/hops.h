/*
 * base/hops.h - a test hook: when each step of an admission's release path happened.
 *
 * With COMEM_HOPS=PATH in its environment, a process stamps CLOCK_MONOTONIC
 * (comparable across processes on one machine) into slot k of the file at
 * PATH, an array of COMEM_HOPS int64 slots made by whoever reads them
 * (bench_coord). Each slot keeps the last time its step happened. Without the
 * variable a stamp is one relaxed load and a branch; the environment is read
 * once, on the first stamp.
 */
#ifndef COMEM_BASE_HOPS_H
#define COMEM_BASE_HOPS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/clock.h"

enum {
    COMEM_HOP_ADMIT_SENT,     /* client: an ADMIT about to be written to the socket */
    COMEM_HOP_ADMIT_READ,     /* coordinator: the ADMIT decoded, its job begins */
    COMEM_HOP_ASK_SENT,       /* coordinator: an ASK about to be written */
    COMEM_HOP_ASK_READ,       /* holder's reader: the ASK decoded, handed to the callback thread */
    COMEM_HOP_CALLBACK_START, /* holder's callback thread: the holder's callback is called */
    COMEM_HOP_CALLBACK_END,   /* it returned */
    COMEM_HOP_RECEIPT_SENT,   /* the RECEIPT about to be written */
    COMEM_HOP_RECEIPT_READ,   /* coordinator: the RECEIPT decoded */
    COMEM_HOP_CARD_READ_START, /* coordinator: a reading of the card begins */
    COMEM_HOP_CARD_READ,      /* coordinator: it was taken */
    COMEM_HOP_REPLY_SENT,     /* coordinator: an ADMIT_REPLY about to be written */
    COMEM_HOP_REPLY_READ,     /* client: an ADMIT_REPLY matched to its waiting call */
    COMEM_HOP_CARD_READS,     /* a count, not a time: readings of the card taken */
    COMEM_HOPS = 16
};

extern _Atomic(int64_t *) comem_hops_slots; /* NULL: off (or not looked at yet) */
extern atomic_int comem_hops_state;         /* 0 not looked at, 1 off, 2 on, 3 being looked at */

void comem_hops_init(void);

/* The slots when COMEM_HOPS is set (looked at on the first call), else NULL. */
static inline int64_t *comem_hops_on(void)
{
    int st = atomic_load_explicit(&comem_hops_state, memory_order_relaxed);
    if (st == 1)
        return NULL;
    if (st == 0)
        comem_hops_init();
    return atomic_load_explicit(&comem_hops_slots, memory_order_acquire);
}

/* Stamps step k now, when COMEM_HOPS is set. */
static inline void comem_hop(int k)
{
    int64_t *slots = comem_hops_on();
    if (slots)
        __atomic_store_n(&slots[k], comem_now_ns(), __ATOMIC_RELAXED);
}

/* Adds one to slot k (a count), when COMEM_HOPS is set. */
static inline void comem_hop_count(int k)
{
    int64_t *slots = comem_hops_on();
    if (slots)
        __atomic_fetch_add(&slots[k], 1, __ATOMIC_RELAXED);
}

#endif
