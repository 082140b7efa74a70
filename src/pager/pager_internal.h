/*
 * pager/pager_internal.h - the pager's structures, who guards them, and the
 * functions its files share.
 *
 *   comem_pager                              one per device per process; owns its
 *   │                                        VBARs (comem_pager_close frees them)
 *   ├── lock            the pager lock: guards every field marked [L] below,
 *   │                   in the pager and in each of its VBARs and pages
 *   ├── attach_mu       the attachment lock: serialises attach, detach, and
 *   │                   registering and removing VBARs' entries; a VBAR is
 *   │                   freed only under it (see "Lock order")
 *   ├── vmm             the backend (vmm.h); called only under the lock
 *   ├── usage [L]       Σ over VBARs of resident_count × page_size (derived,
 *   │                   kept incrementally; the seam's comem_pager_check
 *   │                   verifies it, pager_seam.h)
 *   ├── kept pool [L]   evicted pages' memory, unmapped, not released, at most
 *   │                   keep_limit bytes (keep.c); held = usage + kept_bytes
 *   ├── headrooms, poll state, clock, stats [L]   (clock: CLOCK_MONOTONIC, or
 *   │                   one a test set through the seam, pager_seam.h)
 *   ├── top ⇄ ... ⇄ bottom [L]   the priority list, doubly linked through
 *   │                   comem_vbar.higher/lower; top is the highest priority
 *   │                   (newest or last prioritized), eviction starts at bottom
 *   ├── client, holder [L, written under A too], reporters, callbacks [L]
 *   └── activity [L]    faulted, last_fault_ms (the clock at the latest fault),
 *                       touched, touch_ms (when the coordinator was last told
 *                       the pager is in use); see "Activity" in pager_client.c
 *
 *   comem_vbar                               one per model
 *   ├── base, size, page_size, nr_pages      fixed at creation
 *   ├── watermark [L]        pages [0, watermark) may be faulted in
 *   ├── limit [L]            eviction never lowers watermark below it
 *   ├── resident_count [L]   pages with resident set (derived)
 *   ├── id                   creation number (names the entry "vbar-<id>")
 *   ├── entry, reported [L]  the client's entry id (0: none) and the loaded
 *   │                        bytes last confirmed sent (-1: send again)
 *   └── pages[nr_pages] [L]  { handle (the backend's), pins (a refcount),
 *                              serial (+1 per commit, never 0 once committed),
 *                              resident }
 *
 * Invariants (comem_pager_check, pager_seam.h): usage = Σ resident pages × page size; every
 * resident page at or above its VBAR's watermark is pinned (an eviction that
 * passes an unpinned page frees it; unpin frees what eviction passed); a page
 * that is not resident has no pins; kept_bytes = Σ the pool's pages and at
 * most keep_limit; the backend's charge equals usage + kept_bytes.
 *
 * Lock order: attach_mu → lock → (backend: the sim card's lock, the driver).
 * The pager lock is a leaf with respect to the client library: no client call
 * is ever made with it held, because the client's callback thread calls into
 * the pager (the release callback takes the lock): a round trip made under
 * the lock would hold every release ask, and every fault, behind it.
 * attach_mu is taken by attach, detach, vbar create (registration) and vbar
 * destroy, and may be held across client calls that wait for replies; the
 * release callback never takes it. A VBAR is freed only under attach_mu, so a
 * VBAR pointer read under attach_mu stays valid while it is held.
 */
#ifndef COMEM_PAGER_INTERNAL_H
#define COMEM_PAGER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "comem/pager.h"
#include "pager/vmm.h"

/* The device term's "no reading" sentinel: the simple term alone decides (aimdo's -2^60). */
#define PAGER_SIMPLE_ONLY (-((int64_t)1 << 60))

/* Bounded retries of a commit that failed with a transient error (F13). */
#define PAGER_TRANSIENT_RETRIES 8

typedef int64_t (*comem_pager_clock_fn)(void *user); /* milliseconds, monotonic */

typedef struct pager_page {
    uint64_t handle; /* the backend's, while resident */
    uint32_t pins;   /* reference count: weights sharing a page each hold one */
    uint32_t serial; /* bumped at every commit; what a fault's signature reports */
    bool resident;
} pager_page;

struct comem_vbar {
    comem_pager *pager;
    comem_vbar *higher, *lower; /* [L] priority list links */
    uint64_t base;
    int64_t size;
    int64_t page_size;
    int64_t nr_pages;
    int64_t watermark;      /* [L] */
    int64_t limit;          /* [L] */
    int64_t resident_count; /* [L] */
    uint64_t id;            /* creation number, names the entry */
    uint64_t entry;         /* [L] the client's entry id; 0 when not registered */
    int64_t reported;       /* [L] loaded bytes last sent for entry */
    pager_page *pages;      /* [L] */
};

typedef struct pager_kept {
    int64_t size;
    uint64_t handle; /* the backend's */
} pager_kept;

struct comem_pager {
    pthread_mutex_t lock;
    pthread_cond_t idle_cv; /* signalled when reporters or callbacks drop to 0 */
    pthread_mutex_t attach_mu;
    comem_vmm *vmm;
    int device;

    /* [L] accounting */
    int64_t usage;
    /* [L] the kept pool (keep.c): evicted pages' memory, unmapped, not released; counted with usage
       wherever the pager's own bytes are (held) */
    pager_kept *kept;
    int64_t n_kept, cap_kept;
    int64_t kept_bytes; /* Σ kept[].size */
    int64_t keep_limit; /* the pool's bound; 0: nothing is kept */
    uint64_t kept_entry;    /* the ledger's entry for the pool while attached with a bound; 0: none */
    int64_t kept_reported;  /* the pool's bytes last sent for it (-1: send again) */
    int64_t capacity; /* from the backend at open, refreshed at each reading */

    /* [L] headrooms and the device term */
    int64_t simple_headroom;
    int64_t extra_headroom;
    int64_t device_headroom;
    int64_t cache_ms;
    bool device_wide; /* the device term reads the device-wide figure (aimdo's nvml_pressure) */
    bool polled;
    int64_t poll_ms;
    int64_t deficit_sync;
    int64_t usage_at_poll;
    comem_pager_clock_fn clock;
    void *clock_user;
    int64_t clock_ms; /* the clock as poll_device last read it (at every deficit: every fault) */

    /* [L] the priority list */
    comem_vbar *top, *bottom;
    int64_t n_vbars;
    uint64_t next_id;

    /* [L] counters (COMEM_PAGER_STAT_*) */
    int64_t stats[COMEM_PAGER_STAT_COUNT];

    /* [L] the attachment (written under attach_mu too) */
    comem_client *client;
    uint64_t holder;
    int reporters; /* threads sending residency or a touch now (see pager_client.c) */
    int callbacks; /* release callbacks running */

    /* [L] activity: what keeps idle release off a pager that is in use (pager_client.c) */
    bool faulted;          /* a fault happened since open */
    int64_t last_fault_ms; /* the clock at the latest fault */
    bool touched;          /* a touch went out on this attachment */
    int64_t touch_ms;      /* the clock when it went out */
};

/* One eviction batch: one backend sync before its first unmap and one after its last. */
typedef struct pager_batch {
    bool synced;
    bool give_back; /* the memory goes back to the device: nothing is kept (keep.c) */
    int64_t freed;  /* bytes */
} pager_batch;

/* What the pager holds on its device: its pages and its kept pool. Caller holds the lock. */
static inline int64_t comem_pager_held(const comem_pager *p) { return p->usage + p->kept_bytes; }

/* How free_lowest evicts. */
#define PAGER_IGNORE_LIMITS 1 /* down to watermark 0, not to each VBAR's limit */
#define PAGER_GIVE_BACK 2     /* the pool first, then pages, all of it released */

/* ---- pager.c ---- */

/* The pressure formula (comem_pager_budget_deficit). Caller holds the lock. */
int64_t comem_pager_deficit_locked(comem_pager *p, int64_t size);

/* The pager's clock unless the seam replaced it (pager_seam.h): CLOCK_MONOTONIC in milliseconds. */
int64_t comem_pager_monotonic_ms(void *user);

/* ---- vbar.c ---- */

/* Links v at the top or the bottom of the priority list. Caller holds the lock. */
void comem_pager_link_top(comem_pager *p, comem_vbar *v);
void comem_pager_link_bottom(comem_pager *p, comem_vbar *v);
void comem_pager_unlink(comem_pager *p, comem_vbar *v);

/* Pages a byte count covers, rounded up and capped at nr_pages (bytes >= 0). */
int64_t comem_vbar_pages_ceil(const comem_vbar *v, int64_t bytes);

/* ---- evict.c (every function: caller holds the lock) ---- */

/* Commits page idx of v: retries transient failures; on success marks it resident and bumps its serial. */
int comem_pager_commit_page(comem_pager *p, comem_vbar *v, int64_t idx);

/* Evicts page idx of v (resident; pins are the caller's concern), syncing first if the batch has not. */
void comem_pager_evict_page(comem_pager *p, comem_vbar *v, int64_t idx, pager_batch *b);

/* Ends a batch: the sync after the last unmap, if it unmapped anything. */
void comem_pager_batch_end(comem_pager *p, pager_batch *b);

/*
 * Lowers v's watermark page by page down to `floor`, evicting the unpinned
 * resident pages it passes, until b->freed reaches `want` or, when stop is
 * given, stop's watermark falls below stop_page. Returns true when stopped
 * by stop.
 */
bool comem_pager_lower(comem_pager *p, comem_vbar *v, int64_t floor, int64_t want, pager_batch *b,
                       const comem_vbar *stop, int64_t stop_page);

/*
 * aimdo's vbars_free: evicts at least `bytes` lowest priority first, within
 * watermark limits (or down to 0 with PAGER_IGNORE_LIMITS), stopping early when
 * stop's watermark falls below stop_page. With PAGER_GIVE_BACK the kept pool
 * is released first and counts in what is freed. Opens and ends its own batch.
 * Returns the bytes freed.
 */
int64_t comem_pager_free_lowest(comem_pager *p, int64_t bytes, int how, const comem_vbar *stop,
                                int64_t stop_page);

/* Evicts every resident page of v, pinned or not (destroy, close). */
void comem_pager_evict_all(comem_pager *p, comem_vbar *v);

/* ---- keep.c (every function: caller holds the lock) ---- */

/* Unmaps a committed page into the pool if the bound allows (true: the page is gone from va, kept or,
   when the backend failed to unmap it, released); false: not kept, the caller evicts it. */
bool comem_pager_keep_page(comem_pager *p, uint64_t va, int64_t size, uint64_t handle);

/* Bytes of pages of this size in the pool. */
int64_t comem_pager_kept_of(const comem_pager *p, int64_t size);

/* Takes one kept page of this size out of the pool (false: none). */
bool comem_pager_take_kept(comem_pager *p, int64_t size, uint64_t *handle);

/* Releases a page taken out of the pool that could not be mapped again. */
void comem_pager_drop_kept(comem_pager *p, int64_t size, uint64_t handle);

/* Releases kept pages, the newest first, until at least `bytes` went back (or the pool is empty). */
int64_t comem_pager_drain_kept(comem_pager *p, int64_t bytes);

/* ---- pager_client.c ---- */

/*
 * Sends the loaded bytes of every registered VBAR whose figure changed since
 * it was last sent. Call without the lock; does nothing when detached.
 */
void comem_pager_report(comem_pager *p);

/*
 * What a release ask frees (the callback's work, without the client): a
 * sized ask (COMEM_RELEASE_BYTES) lowest priority first within watermark
 * limits; an idle one (COMEM_RELEASE_IDLE) every unpinned page, limits
 * included; anything else nothing. Returns the bytes freed. Caller holds the lock.
 */
int64_t comem_pager_release_locked(comem_pager *p, int kind, int64_t bytes);

/*
 * A fault's activity, recorded under the lock at every fault, at the time its
 * deficit read (clock_ms: no second clock read).
 * Returns true when the coordinator is due to hear of it (attached, and the
 * last touch is COMEM_PAGER_TOUCH_MS old): *c and *holder are then what to
 * send it through, and the caller must call comem_pager_touch_send after
 * dropping the lock (detach waits for it, as for a report).
 */
bool comem_pager_activity_locked(comem_pager *p, comem_client **c, uint64_t *holder);

/* Sends the touch that comem_pager_activity_locked found due. Call without the lock. */
void comem_pager_touch_send(comem_pager *p, comem_client *c, uint64_t holder);

/* Registers / removes v's entry when attached. Caller holds attach_mu, not the lock. */
void comem_pager_register_vbar(comem_pager *p, comem_vbar *v);
void comem_pager_unregister_vbar(comem_pager *p, comem_vbar *v);

#endif
