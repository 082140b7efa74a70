/*
 * ledger/ledger.h - the machine-wide state: who holds what, on which device.
 *
 *   ledger
 *   ├── devices[]   capacity, free-reading scope, reserve (base read once, published value)
 *   ├── processes   one per pid (a peer in another pid namespace: one per session): its
 *   │               sessions, what they hold against the bounds, resident + granted per device
 *   ├── sessions    one per connection: pid, role, name, busy mark, prompt, pins,
 *   │   │           context floor per device, resident and granted per device (derived)
 *   │   └── holders one per thing that holds memory and can be asked (a model list,
 *   │       │       a pager, a pin set): device, kind, flags, census sequence, its
 *   │       │       entries' count and resident (derived)
 *   │       └── entries one per model/VBAR/buffer: size, resident, peak, references,
 *   │                   sequence, dynamic, last use
 *   └── grants      admission grants: bytes booked on a device for a session until
 *                   they become residency or expire
 *
 * Ownership is strict: an entry belongs to one holder, a holder to one session,
 * a grant to one session; ending a session releases all of it at once. Ids are
 * generational (ledger/slab.h): a stale id never resolves to a newer record.
 *
 * The ledger is touched only from the coordinator's loop thread, so it has no
 * lock. Every mutation keeps the invariants that comem_ledger_check() verifies:
 * nothing negative, resident <= size, every record's owner alive, and per
 * device the attributed bytes (resident + context floors + outstanding grants)
 * never above capacity. With checking on (tests, debug builds) every mutation
 * ends with a check, and a violation is counted and logged.
 */
#ifndef COMEM_LEDGER_LEDGER_H
#define COMEM_LEDGER_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/name.h"    /* COMEM_NAME_MAX */
#include "comem/common.h" /* comem_scope, COMEM_MAX_DEVICES */
#include "ledger/order.h"
#include "ledger/slab.h"

#define COMEM_LEDGER_NAME_MAX COMEM_NAME_MAX
#define COMEM_LEDGER_MAX_ITEMS 512 /* entries one census may name */

/* What a holder is (the coordinator passes the protocol's kinds through, asserted equal there). */
typedef enum ledger_holder_kind {
    LEDGER_KIND_MODELS = 1, /* a model list */
    LEDGER_KIND_PAGER = 2,  /* a weight pager */
    LEDGER_KIND_PINS = 3,   /* pinned host RAM */
    LEDGER_KIND_RAW = 4     /* anything else that frees memory on request */
} ledger_holder_kind;

/* One entry's residency as a census or a receipt reports it. */
typedef struct ledger_residency {
    uint64_t entry_id;
    uint64_t seq;     /* the entry's sequence: a strictly older one is dropped */
    int64_t resident;
    int64_t refs;     /* references the holder counts on it now: the eviction order's second key */
} ledger_residency;

/*
 * Bounds on what one process (all its sessions together: a process may hold
 * up to 64 connections) and the whole ledger may register: a process holds
 * tens to a few hundred models, so these are far above real use and keep a
 * runaway or hostile client from growing the coordinator without end.
 *
 * Fair share (ledger/bounds.c): every process is sure of COMEM_LEDGER_SURE_*
 * records, set aside for as many processes as there may be sessions; the rest
 * of each global bound is shared first come, up to a process's own bound. So
 * no process, however many sessions it opens, can take what another needs to
 * start: a ComfyUI host registers two or three holders and a worker one, with
 * an entry per loaded model. SURE * MAX_SESSIONS is half of each global bound,
 * so the shared half still holds 32 processes at their holder and grant bound
 * and 8 at their entry bound.
 *
 * An add beyond a bound is refused with COMEM_ERANGE and changes nothing;
 * comem_ledger_bound_why() says which bound and whose.
 */
#define COMEM_LEDGER_PROCESS_HOLDERS 256
#define COMEM_LEDGER_PROCESS_ENTRIES 4096
#define COMEM_LEDGER_PROCESS_GRANTS 256
#define COMEM_LEDGER_MAX_HOLDERS 16384
#define COMEM_LEDGER_MAX_ENTRIES 65536
#define COMEM_LEDGER_MAX_GRANTS 16384
#define COMEM_LEDGER_MAX_SESSIONS 1024 /* the coordinator's sessions (coord_internal.h: COORD_MAX_SESSIONS) */
#define COMEM_LEDGER_SURE_HOLDERS 8
#define COMEM_LEDGER_SURE_ENTRIES 32
#define COMEM_LEDGER_SURE_GRANTS 8
#define COMEM_LEDGER_SESSION_GRANTS COMEM_LEDGER_PROCESS_GRANTS /* the name coord/admit.c's refusal uses */

/* The records a bound counts. */
typedef enum ledger_kind { LEDGER_HOLDERS, LEDGER_ENTRIES, LEDGER_GRANTS, LEDGER_KINDS } ledger_kind;

typedef struct ledger_device {
    int index;
    char uuid[80];
    char name[96];
    int64_t capacity;
    int64_t entry_max;     /* the largest entry size accepted (card + host RAM + swap); <= 0 at init: capacity */
    comem_scope scope;     /* of the coordinator's own reading of this device */
    comem_scope proc_scope; /* of each process's own free reading there (process-local on a WDDM card) */
    bool unified;          /* its memory is host RAM (an integrated GPU, UMA): pinned RAM is booked against it too */
    int64_t reserve_base;  /* the operator's reserve, read once */
    int64_t published;     /* the total reserve published to the host */
    int64_t last_free;     /* true free at the last reading (-1 before any) */
    int64_t last_read_ns;
    int64_t resident;      /* derived: Σ resident of its entries */
    int64_t granted;       /* derived: Σ bytes of its grants */
    uint64_t changes;      /* generation: moves with every mutation that changes what the card shows or
                              who holds it (sessions, holders, entries, residency, pins), never with a
                              grant; a reading taken at another generation may be stale (coord/measure.c) */
} ledger_device;

typedef struct ledger_session {
    int32_t pid;
    uint32_t uid;
    uint8_t role;  /* comem_role */
    uint8_t scope; /* comem_scope of the process's own free reading */
    uint32_t caps;
    char name[COMEM_LEDGER_NAME_MAX];
    bool busy;
    char prompt[COMEM_LEDGER_NAME_MAX]; /* the prompt it serves while busy */
    int64_t pinned;                     /* pinned host RAM booked */
    int64_t floor[COMEM_MAX_DEVICES];   /* context floor per device, 0 when no context */
    int64_t started_ns;
    uint64_t process;                   /* its ledger_process */
    uint32_t n_holders, n_entries, n_grants; /* derived: what it owns */
    int64_t resident[COMEM_MAX_DEVICES]; /* derived: Σ resident of its entries per device */
    int64_t granted[COMEM_MAX_DEVICES];  /* derived: Σ bytes of its grants per device */
} ledger_session;

/* A process: what its sessions hold together, against the bounds above (ledger/bounds.c). */
typedef struct ledger_process {
    int32_t pid;
    char name[COMEM_LEDGER_NAME_MAX]; /* its first session's */
    uint32_t sessions;
    uint32_t held[LEDGER_KINDS];      /* derived: Σ of its sessions' holders, entries, grants */
    int64_t resident[COMEM_MAX_DEVICES]; /* derived: Σ of its sessions' */
    int64_t granted[COMEM_MAX_DEVICES];
} ledger_process;

typedef struct ledger_holder {
    uint64_t session;
    int32_t app_pid; /* 0: its memory is its session's process's; else that app process's (coord/apps.c) */
    int device;
    uint8_t kind; /* comem_holder_kind */
    uint32_t flags;
    char name[COMEM_LEDGER_NAME_MAX];
    bool census_seen;
    uint64_t census_seq; /* for pinned/overhead: an equal sequence is dropped */
    int64_t pinned;
    int64_t overhead;
    bool busy;
    bool idle_known;
    double idle_since; /* seconds on the coordinator's clock */
    char last_prompt[COMEM_LEDGER_NAME_MAX];
    int64_t unanswered_until_ns; /* it let an ask pass its deadline: not asked again before this */
    uint32_t receipts_over; /* receipts that claimed more than came off it (counted as what came off) */
    uint32_t receipts_contradicted; /* receipts whose bytes the card did not see leave (coord/receipt_check.c) */
    uint32_t n_entries;     /* derived: its entries */
    int64_t resident;       /* derived: Σ resident of its entries */
} ledger_holder;

/* An entry's tier (host RAM: docs/hostram.md), cheapest to get back first in the eviction order. */
enum {
    LEDGER_TIER_OTHER = 0, /* every card's entry, and a RAM entry that says nothing: last */
    LEDGER_TIER_CACHE = 1, /* a RAM-cache entry: first */
    LEDGER_TIER_FILE = 2   /* a copy a file can give back: second */
};

typedef struct ledger_entry {
    uint64_t holder;
    uint64_t session;
    int device;
    char name[COMEM_LEDGER_NAME_MAX];
    int64_t size;
    int64_t resident;
    int64_t peak;
    int64_t refs; /* references its holder counts on it (0 until reported): the order's second key */
    int64_t seq; /* -1 until the first census; an equal sequence applies */
    bool dynamic;
    uint8_t tier; /* LEDGER_TIER_*: what getting its bytes back costs (host RAM entries); the order's first key */
    bool ordered; /* in its device's eviction order (ledger/order.h): resident > 0 */
    int64_t last_use_ns;
} ledger_entry;

typedef struct ledger_grant {
    uint64_t session;
    uint64_t holder;
    int device;
    int64_t bytes;
    int64_t expires_ns;
} ledger_grant;

typedef struct comem_ledger {
    int n_devices;
    ledger_device devices[COMEM_MAX_DEVICES];
    comem_slab processes, sessions, holders, entries, grants;
    uint32_t shared_used[LEDGER_KINDS]; /* derived: Σ over processes of what each holds beyond its sure share */
    int64_t total_pinned;
    int64_t max_pinned; /* machine ceiling; <= 0: pinning refused */
    comem_order_nodes order_nodes;           /* derived: eviction order per device */
    uint32_t order_root[COMEM_MAX_DEVICES];
    bool order_broken;                       /* the order could not be kept: scan instead */
    bool checking;
    uint64_t checks, violations;
} comem_ledger;

/* What ending a session released, for its one log line. */
typedef struct ledger_release_summary {
    int grants, entries, holders;
    int64_t grant_bytes, resident_bytes, pinned_bytes;
} ledger_release_summary;

/*
 * Every call below is made from one thread, the coordinator's loop (or a
 * test's): the ledger has no lock, and a check followed by a booking cannot be
 * overtaken. Unless said otherwise a call returns COMEM_OK or a negative
 * status, and a refused call changes nothing. Ids are the slabs' generational
 * ids; a record pointer is valid until the next add of its kind.
 */

/*
 * Sets l up with n devices (copied; an entry_max <= 0 becomes the capacity) and
 * the machine-wide pinned ceiling max_pinned (<= 0: pinning refused).
 * COMEM_EINVAL when n is outside [0, COMEM_MAX_DEVICES].
 */
int comem_ledger_init(comem_ledger *l, const ledger_device *devices, int n, int64_t max_pinned);
/* Frees every record. */
void comem_ledger_fini(comem_ledger *l);
/* on: every mutation ends with comem_ledger_check; a violation is counted (l->violations) and logged. */
void comem_ledger_set_checking(comem_ledger *l, bool on);

/* Verifies every invariant; 0, or COMEM_ERANGE with the first violation described in why. */
int comem_ledger_check(const comem_ledger *l, char *why, size_t len);

/* ---- sessions ---- */
/*
 * Adds a session for a connected process: pid and uid as the kernel gave them,
 * role (comem_role), scope of its own free reading (comem_scope), caps
 * (COMEM_CAP_*), name (cut to COMEM_LEDGER_NAME_MAX - 1 bytes). It joins the
 * process of its pid (pid <= 0: a process of its own). Writes its id to *id.
 * COMEM_ERANGE beyond COMEM_LEDGER_MAX_SESSIONS, COMEM_ENOMEM. Every device's
 * generation moves (it may hold a context).
 */
int comem_ledger_session_add(comem_ledger *l, int32_t pid, uint32_t uid, uint8_t role, uint8_t scope, uint32_t caps,
                             const char *name, int64_t now_ns, uint64_t *id);
/*
 * Releases everything session id owns (grants, entries, holders, pins) and
 * removes it; what was released goes to *out (may be NULL) for its log line.
 * COMEM_ENOENT for an unknown id.
 */
int comem_ledger_session_end(comem_ledger *l, uint64_t id, ledger_release_summary *out);
/* The live session with this id, or NULL. */
ledger_session *comem_ledger_session(comem_ledger *l, uint64_t id);
/* The process of a live session, or NULL. */
const ledger_process *comem_ledger_process_of(const comem_ledger *l, uint64_t session);
/*
 * Σ resident and granted on device of every session of session's process (a process that embeds
 * the coordinator holds several), and how many sessions that is into *n_sessions: 0 and 1 for an
 * unknown session.
 */
int64_t comem_ledger_process_held(const comem_ledger *l, uint64_t session, int device, int *n_sessions);
/*
 * Whether a bound refuses session one more record of kind now: 0 when none
 * does, else the length of a one-line reason written to why (cut to len):
 * the process's own bound ("this process holds 256 over its 2 sessions"), or
 * the shared part of the global one, naming the process that holds the most.
 */
size_t comem_ledger_bound_why(const comem_ledger *l, uint64_t session, ledger_kind kind, char *why, size_t len);
/*
 * Marks a busy/idle boundary for a session (holder 0: it and all its holders)
 * or one of its holders. A holder going idle starts its idle clock at now_s and
 * keeps prompt (or the session's) as its last. COMEM_ENOENT for an unknown
 * session, or a holder that is not the session's.
 */
int comem_ledger_activity(comem_ledger *l, uint64_t session, uint64_t holder, bool busy, const char *prompt,
                          double now_s);
/*
 * Records the context floor of a session on device (clamped at 0; 0: no
 * context there). COMEM_ENOENT for an unknown session or device; COMEM_ERANGE
 * when it would put the device's attributed bytes above capacity. Floors come
 * from a reading, so the device's generation does not move.
 */
int comem_ledger_set_floor(comem_ledger *l, uint64_t session, int device, int64_t floor);

/* ---- holders and entries ---- */
/*
 * Adds a holder of session on device: kind (comem_holder_kind), flags
 * (COMEM_CAP_* it answers), name; its idle clock starts at now_s. Writes its id
 * to *id. COMEM_ENOENT (session), COMEM_ENODEV (device), COMEM_EINVAL (kind),
 * COMEM_ERANGE (a holder bound: comem_ledger_bound_why), COMEM_ENOMEM.
 */
int comem_ledger_holder_add(comem_ledger *l, uint64_t session, int device, uint8_t kind, uint32_t flags,
                            const char *name, double now_s, uint64_t *id);
/* Removes a holder of session, and every entry it holds. COMEM_ENOENT when it is not the session's. */
int comem_ledger_holder_remove(comem_ledger *l, uint64_t session, uint64_t holder);
/* The live holder with this id, or NULL. */
ledger_holder *comem_ledger_holder(comem_ledger *l, uint64_t id);

/*
 * Adds an entry of size bytes to a holder of session, resident bytes of it on
 * the card now (clamped to [0, size]), dynamic when paged; it counts as used at
 * now_ns. Writes its id to *id. Until its first census its peak is its size.
 * COMEM_ENOENT when the holder is not the session's; COMEM_EINVAL for a
 * negative size; COMEM_ERANGE when size is above the device's entry_max, a
 * bound is reached, or resident would put the device above capacity;
 * COMEM_ENOMEM.
 */
int comem_ledger_entry_add(comem_ledger *l, uint64_t session, uint64_t holder, const char *name, int64_t size,
                           int64_t resident, bool dynamic, int64_t now_ns, uint64_t *id);
/*
 * Sets the references an entry's holder counts on it (clamped at 0), moving it
 * in its device's eviction order. COMEM_ENOENT when it is not the session's.
 */
int comem_ledger_entry_set_refs(comem_ledger *l, uint64_t session, uint64_t entry, int64_t refs);
/* Sets an entry's tier (LEDGER_TIER_*), moving it in its device's order. COMEM_EINVAL for another value. */
int comem_ledger_entry_set_tier(comem_ledger *l, uint64_t session, uint64_t entry, uint8_t tier);
/* Removes an entry of session. COMEM_ENOENT when it is not the session's. */
int comem_ledger_entry_remove(comem_ledger *l, uint64_t session, uint64_t entry);
/* The live entry with this id, or NULL. */
ledger_entry *comem_ledger_entry(comem_ledger *l, uint64_t id);

/*
 * Applies a census (or a receipt's residency list) from session for holder:
 * per entry, a strictly older sequence is dropped and an equal one applies;
 * resident is clamped to [0, size]; references replace the last; the peak
 * follows the census; an entry not
 * listed keeps its value (missing means unknown, not zero). Pinned/overhead
 * (each < 0: not reported) apply only with a holder sequence seq
 * newer than the last (equal is dropped). The message is judged as a whole: a
 * list naming an entry twice is refused (COMEM_EINVAL), and so is one whose
 * items together would put the device above capacity (COMEM_ERANGE); either
 * way nothing is applied. COMEM_ENOENT when the holder is not the session's.
 * *n_moved (may be NULL) counts entries whose resident moved; when any did,
 * the device's generation moves.
 */
int comem_ledger_census(comem_ledger *l, uint64_t session, uint64_t holder, uint64_t seq, int64_t pinned,
                        int64_t overhead, const ledger_residency *items, size_t n, int64_t now_ns, int *n_moved);

/* ---- grants ---- */
/*
 * Books bytes on device for session (and holder, 0: none) until expires_ns,
 * writing the grant's id to *id. The caller has already decided that the
 * device has room; the ledger refuses (COMEM_ENOSPC) only if booking would put
 * attributed bytes above capacity. COMEM_ENOENT (session), COMEM_ENODEV,
 * COMEM_EINVAL (bytes <= 0), COMEM_ERANGE (a grant bound), COMEM_ENOMEM.
 */
int comem_ledger_grant_add(comem_ledger *l, uint64_t session, uint64_t holder, int device, int64_t bytes,
                           int64_t expires_ns, uint64_t *id);
/*
 * The grant became residency in entry (0: cancelled) and is removed: the
 * entry's resident grows toward used by at most the grant's bytes, never past
 * its size. COMEM_ENOENT when the grant, or the entry on the grant's device,
 * is not the session's. The generation does not move (a reading is corrected
 * for grants).
 */
int comem_ledger_grant_done(comem_ledger *l, uint64_t session, uint64_t grant, uint64_t entry, int64_t used);
/* Removes grants whose expiry is at or before now_ns; returns how many. */
int comem_ledger_grants_expire(comem_ledger *l, int64_t now_ns);
/* The live grant with this id, or NULL. */
ledger_grant *comem_ledger_grant(comem_ledger *l, uint64_t id);

/* ---- pins ---- */
/*
 * Books bytes of pinned RAM for session within the machine ceiling. COMEM_ENOSPC
 * with *shortfall (may be NULL) the bytes above the ceiling (all of them when
 * pinning is refused), else *shortfall 0; also COMEM_ENOSPC when the pin would
 * put a unified device's attributed bytes above its capacity (VRAM and pinned
 * RAM draw on one pool). COMEM_ENOENT (session), COMEM_EINVAL (bytes < 0).
 * Every device's generation moves (a unified device's memory).
 */
int comem_ledger_pin_acquire(comem_ledger *l, uint64_t session, int64_t bytes, int64_t *shortfall);
/* Gives back bytes of session's pinned RAM (more than it holds: warned, clamped). COMEM_ENOENT, COMEM_EINVAL. */
int comem_ledger_pin_release(comem_ledger *l, uint64_t session, int64_t bytes);

/* ---- sums (saturating; derived, kept as records change: O(1) but for the floors) ---- */
/* Σ resident of every entry on device. */
int64_t comem_ledger_resident(const comem_ledger *l, int device);
/* Σ bytes of the outstanding grants on device. */
int64_t comem_ledger_granted(const comem_ledger *l, int device);
/* Σ context floors on device (a pass over the sessions). */
int64_t comem_ledger_floors(const comem_ledger *l, int device);
/*
 * resident + floors + grants on device (+ the machine's pinned RAM on a unified
 * device: one pool): what the ledger can name, never above capacity.
 */
int64_t comem_ledger_attributed(const comem_ledger *l, int device);
/* Σ resident of one session (or one holder when holder != 0) on device (-1: any device). */
int64_t comem_ledger_session_resident(const comem_ledger *l, uint64_t session, uint64_t holder, int device);

#endif
