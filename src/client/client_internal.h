/*
 * client/client_internal.h - the client's state: one struct, its threads, its
 * locks and its tables, shared by the files of src/client/.
 *
 *   comem_client
 *   ├── fixed at open   socket path, role, name, reserve base, token, flags,
 *   │                   the embedded coordinator (if this client started it)
 *   ├── lock            guards everything under it:
 *   │   ├── link, gen   the connection's state and generation (gen bumps at
 *   │   │               every accepted HELLO; a coordinator id is valid only
 *   │   │               with the generation it was learnt on)
 *   │   ├── holders[]   the local mirror: client id -> coordinator id, what was
 *   │   ├── entries[]   registered, and what the coordinator already knows
 *   │   ├── grants[]    (synced_*), so a new connection can be told the rest
 *   │   └── pending     requests waiting for their reply (client/pending.c)
 *   ├── write_lock      guards wfd/wgen and every frame write, so two frames
 *   │                   never interleave; taken after lock, never before it
 *   ├── read_lock       THE READER ROLE: whoever holds it may read the socket
 *   │                   and owns rbuf and in. Normally the service thread; a
 *   │                   caller that finds it free while it waits for a reply
 *   │                   takes it (the leader), takes the socket out of the
 *   │                   service thread's epoll set, and reads and dispatches
 *   │                   every frame itself until its own reply comes (asks
 *   │                   still go to the callback thread, other replies to
 *   │                   their waiters), so the reply costs no thread wake-up.
 *   │                   Taken before lock and write_lock, never after them.
 *   ├── service thread  owns fd (changed under read_lock) and out: reads every
 *   │                   frame while no caller leads, matches replies, hands
 *   │                   release asks to the callback thread, reconnects and
 *   │                   runs the resync (client/service.c)
 *   ├── callback thread owns receipt, ask_ids, ask_amounts and answering: runs
 *   │                   the holders' release callbacks one at a time, with no
 *   │                   lock held, and sends their receipts (callbacks.c, ask.c)
 *   └── dev_lock        the device source for local-only decisions
 *
 * The mirror is the truth: every call updates it first and then, when the
 * link is up, tells the coordinator. When the link is down the mirror alone
 * changes, and the service thread's resync (client/resync.c) replays the
 * difference after the next HELLO. The API's ids are the client's own and
 * never change; coordinator ids are translated at the edge.
 *
 * THE LINK (c->link, under the lock): every state, every transition and the
 * function that makes it.
 *
 *   LINK_DOWN  no coordinator. Decisions are local (local.c), or COMEM_ECLOSED
 *              under COMEM_OPEN_NO_LOCAL; registrations change the mirror only.
 *   LINK_SYNC  a HELLO was accepted on a new generation and the service thread
 *              is replaying the mirror. Decisions are still local; a record the
 *              replay registered already is updated at once (residency, reports,
 *              busy marks), new records wait for the replay.
 *   LINK_UP    every record is registered: calls go to the coordinator.
 *
 *   from       to     when                                          by (file)
 *   DOWN       UP     open's first HELLO is accepted: nothing to     comem_client_open (client.c)
 *                     replay yet; gen = 1
 *   DOWN       SYNC   the service thread's HELLO is accepted; gen++  try_connect (service.c)
 *   SYNC       UP     the replay finds no difference left            comem_resync (resync.c)
 *   UP         UP     a call left a difference it could not send     comem_resync (resync.c), woken
 *                     (need_sync): replayed, the link stays up       by comem_client_wake
 *   SYNC, UP   DOWN   EOF, a read or write error, a malformed frame  lost (service.c)
 *                     or one only a client sends, a failed replay;
 *                     waiting calls fail with COMEM_ECLOSED
 *
 * WHAT THE COORDINATOR KNOWS. A record is registered on the connection of
 * generation gen when its coord_gen is gen and the link is not down
 * (comem_tab_*_live), so one gen++ makes every coordinator id stale at once.
 * Beside each mirrored value that the coordinator books, a synced_ twin holds
 * what it was last told; the replay sends every record whose twin differs.
 *
 *   field                       told (set)                                 forgotten (reset)
 *   coord_id, coord_gen         apply_add (pending.c): the add's ID_REPLY   try_connect: gen++
 *   adding_gen                  comem_holder_add, comem_entry_add           apply_add, when its reply comes;
 *                               (register.c), next_step (resync.c)          clear_adding (pending.c), unsent
 *   refused_gen                 apply_add, on a refusal: not retried        gen++: tried on the next one
 *   holder synced_busy          comem_holder_busy (register.c), next_step   apply_add zeroes all three
 *   holder synced_report_seq    comem_holder_report (register.c),           when the id is mapped: a new
 *                               next_step                                   registration knows only what
 *   holder synced_pins          comem_pin_acquire/_release (calls.c),       its add carried
 *                               next_step
 *   entry synced_seq            comem_entry_set_resident (register.c; from  apply_add: the sequence the
 *                               a release callback, ridden on its receipt), add carried
 *                               comem_grant_done's census (calls.c),
 *                               next_step
 *   synced_sess_busy            comem_holder_busy(0) (register.c), next_step  try_connect: false
 *   synced_sess_pins            comem_pin_acquire/_release(0) (calls.c),      try_connect: 0
 *                               next_step
 *   need_sync                   a call that left a difference: want_sync    comem_resync, at every step
 *                               (register.c), calls.c, apply_add
 *
 * Tables are arrays searched linearly: a process holds tens to a few hundred
 * entries, and every search runs under the lock for microseconds.
 */
#ifndef COMEM_CLIENT_CLIENT_INTERNAL_H
#define COMEM_CLIENT_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include "comem/comem.h"
#include "shm/book.h"
#include "shm/view.h"
#include "probe/device.h"
#include "wire/wire.h"

/*
 * The public API and the protocol. Roles and holder kinds go on the wire as
 * the caller gave them, so the API's values are the protocol's (asserted
 * here). Holder flags (COMEM_ANSWERS_*), entry flags (COMEM_ENTRY_PAGED, _RAM_*) and
 * release kinds (COMEM_RELEASE_*) have the API's own values and are translated
 * where they cross: register.c's caps_of and entry flags, resync.c's entry
 * flags, ask.c's release_kind. comem_scope and comem_status are one enum for
 * both (comem/common.h).
 */
_Static_assert(COMEM_CLIENT_HOST == COMEM_ROLE_HOST && COMEM_CLIENT_WORKER == COMEM_ROLE_WORKER &&
                   COMEM_CLIENT_TOOL == COMEM_ROLE_TOOL,
               "roles go on the wire unchanged");

/* The API's entry flags (COMEM_ENTRY_PAGED, COMEM_ENTRY_RAM_*) as the protocol's (register.c, resync.c). */
#define CLIENT_ENTRY_FLAGS (COMEM_ENTRY_PAGED | COMEM_ENTRY_RAM_CACHE | COMEM_ENTRY_RAM_FILE)
static inline uint32_t comem_entry_wire_flags(unsigned flags)
{
    return ((flags & COMEM_ENTRY_PAGED) ? COMEM_ENTRY_DYNAMIC : 0u) |
           ((flags & COMEM_ENTRY_RAM_CACHE) ? COMEM_ENTRY_CACHE : 0u) |
           ((flags & COMEM_ENTRY_RAM_FILE) ? COMEM_ENTRY_FILE : 0u);
}

_Static_assert(COMEM_KIND_MODELS == COMEM_HOLDER_MODELS && COMEM_KIND_PAGER == COMEM_HOLDER_PAGER &&
                   COMEM_KIND_PINS == COMEM_HOLDER_PINS && COMEM_KIND_RAW == COMEM_HOLDER_RAW,
               "holder kinds go on the wire unchanged");

#define COMEM_CLIENT_DEFAULT_TIMEOUT_MS 10000
#define COMEM_CLIENT_PATH_MAX sizeof(((struct sockaddr_un *)0)->sun_path)

/* The connection's state: THE LINK, above. */
typedef enum client_link {
    LINK_DOWN = 0, /* no coordinator: decisions are local */
    LINK_SYNC = 1, /* HELLO accepted; the service thread is replaying the mirror */
    LINK_UP = 2    /* every record is registered: calls go to the coordinator */
} client_link;

typedef struct client_holder {
    uint64_t id;          /* the client's id */
    uint64_t coord_id;    /* the coordinator's id, valid when coord_gen == c->gen */
    uint64_t coord_gen;
    uint64_t adding_gen;  /* a HOLDER_ADD for it is in flight on this generation */
    uint64_t refused_gen; /* the coordinator refused it on this generation: don't retry */
    char name[COMEM_WIRE_NAME_MAX];
    int device;
    int kind;
    unsigned flags;
    comem_release_fn fn;
    void *user;
    bool busy, synced_busy;
    char prompt[COMEM_WIRE_NAME_MAX];
    uint64_t report_seq, synced_report_seq; /* holder_report's census sequence */
    uint8_t has;                            /* COMEM_CENSUS_* of the last report */
    int64_t pinned, overhead;
    int64_t pins, synced_pins; /* pinned RAM booked with pin_acquire */
} client_holder;

typedef struct client_entry {
    uint64_t id;
    uint64_t holder; /* the client's holder id */
    uint64_t coord_id, coord_gen, adding_gen, refused_gen;
    char name[COMEM_WIRE_NAME_MAX];
    int64_t size, resident;
    int64_t refs; /* references its holder counts on it, as last reported (0 until then) */
    unsigned flags;
    uint64_t seq, synced_seq; /* census sequence: bumped by each set_resident / entry_census */
    bool in_receipt;          /* its census rides on the receipt being built (ask.c), not a frame of its own */
} client_entry;

typedef struct client_grant {
    uint64_t id;
    uint64_t coord_id;
    uint64_t gen;  /* 0: decided locally */
    int64_t bytes; /* what the grant booked: the most grant_done turns into residency */
    bool fast;     /* booked in the booking area (client/fast.c): record fast_idx, its seq */
    int fast_idx, fast_dev;
    bool wake;     /* booked while the coordinator dozed: send it BOOKED */
    uint32_t fast_seq;
} client_grant;

typedef struct client_fast client_fast; /* one coordinator's booking area, mapped (client/fast.c) */

/* The few reply bodies a caller waits for (the full comem_msg is 16 KiB: 16,440 bytes). */
typedef struct client_reply {
    uint16_t type; /* 0: the request was sent and its reply will not be awaited */
    union {
        comem_msg_reply reply;
        comem_msg_id id;
        comem_msg_admit_reply admit_reply;
        comem_msg_pressure_reply pressure_reply;
        comem_msg_pin_reply pin_reply;
        comem_msg_reserve_reply reserve_reply;
        comem_msg_release_reply release_reply;
    } u;
} client_reply;

typedef enum pend_kind {
    PEND_PLAIN = 0,
    PEND_HOLDER_ADD = 1, /* the service thread maps the id itself, waiter or not */
    PEND_ENTRY_ADD = 2,
    PEND_STATUS = 3, /* STATUS_REPLY chunks are reassembled into text */
    PEND_PIN = 4     /* a pin acquire: granted after its caller gave up, its bytes are given back */
} pend_kind;

/*
 * One request waiting for its reply. A record with `waiting` set belongs to
 * the thread that waits (it unlinks and frees it); a detached one (an add sent
 * from the service thread, or one whose caller timed out) is unlinked and
 * freed by the service thread when the reply comes or the connection ends.
 */
typedef struct client_pending {
    struct client_pending *next;
    uint32_t req;
    uint64_t gen;
    pend_kind kind;
    uint64_t obj;  /* the client id an add is for */
    uint64_t snap; /* ENTRY_ADD: the entry's seq when the frame was built */
    bool waiting;
    bool done;
    bool acked; /* an ADMIT_QUEUED named it: the coordinator has it and will answer */
    int status; /* when done: COMEM_OK (reply holds the frame) or a failure */
    client_reply reply;
    char *text; /* PEND_STATUS */
    uint32_t text_total, text_got;
    bool text_started;
    pthread_cond_t cond;
} client_pending;

/*
 * What one admission decided besides the grant, handed up by the call that
 * made the decision (the coordinator's reply, or comem_local_admit): the
 * figures comem_admit_figures writes out and comem_admit_details reports.
 */
typedef struct client_admission {
    bool decided; /* false: the call failed before any decision (nothing below is set) */
    int64_t need, free_before, free_after, freed;
    int asked, busy;
    uint64_t ids[COMEM_WIRE_MAX_ASKED]; /* the coordinator's ids of the first holders asked */
    size_t n_ids;
} client_admission;

/* A request being made: begun under the lock, finished without it. */
typedef struct client_req {
    uint64_t gen;
    uint32_t id;
    client_pending *p; /* NULL: fire and forget */
} client_req;

struct comem_client {
    /* fixed at open */
    char path[COMEM_CLIENT_PATH_MAX];
    int role;
    char name[COMEM_WIRE_NAME_MAX];
    char token[COMEM_WIRE_TEXT_MAX];
    int64_t reserve_base;
    unsigned flags;
    comem_coord *coord; /* the embedded coordinator this client started, or NULL */
    int32_t opener;     /* the process that opened it: the only one it serves (client/fork.c) */
    atomic_bool fork_told; /* a forked child's first call logged why it was refused */

    pthread_mutex_t lock;
    client_link link;
    uint64_t gen;
    uint64_t session_id;
    bool need_sync;
    bool ever_connected;
    bool refused_logged;
    uint64_t next_id;
    client_holder *holders;
    size_t n_holders, cap_holders;
    client_entry *entries;
    size_t n_entries, cap_entries;
    client_grant *grants;
    size_t n_grants, cap_grants;
    client_pending *pending;
    bool sess_busy, synced_sess_busy; /* holder 0: the whole process */
    char sess_prompt[COMEM_WIRE_NAME_MAX];
    int64_t sess_pins, synced_sess_pins;
    char devmap[COMEM_MAX_DEVICES][COMEM_WIRE_TEXT_MAX]; /* this process's ordinal -> its card's UUID ("": unmapped) */
    uint64_t devmap_gen; /* the connection generation the map was last sent on (0: never) */

    pthread_mutex_t read_lock; /* the reader role: fd reads, rbuf, in (above) */
    int epfd;                  /* the service thread waits here: wake_fd, and the socket while nobody leads */
    uint64_t fd_gen;           /* the generation fd belongs to (under read_lock) */

    pthread_mutex_t write_lock;
    int wfd;       /* the socket writers use; -1 when down */
    uint64_t wgen; /* the generation wfd belongs to */

    atomic_int timeout_ms;
    atomic_uint next_req;
    atomic_bool stopping;

    /* owned by the service thread (and by open, before the thread starts) */
    pthread_t thread;
    bool thread_started;
    int wake_fd; /* eventfd: close and need_sync wake the service thread */
    int area_fd; /* the booking area that rode on the last HELLO_REPLY, until mapped (-1: none) */
    int view_fd; /* the sealed view that rode on it, until mapped (-1: none) */
    const comem_view_shared *_Atomic view; /* the current session's sealed view, mapped read-only (NULL: none) */
    const comem_view_shared **views_all;  /* every one mapped, unmapped at close (under lock) */
    size_t n_views;
    int fd;
    uint8_t *rbuf;
    size_t rlen, rpos;
    comem_msg *in;  /* the frame being dispatched */
    comem_msg *out; /* frames the resync builds */
    int retry_ms;
    /* owned by the callback thread (client/callbacks.c) */
    comem_msg *receipt; /* the receipt being built (the service thread answers a full queue on its stack) */
    uint64_t ask_ids[COMEM_WIRE_MAX_ITEMS];
    int64_t ask_amounts[COMEM_WIRE_MAX_ITEMS];
    uint64_t answering;     /* the holder whose release callback runs now (0: none), and the link's */
    uint64_t answering_gen; /* generation its receipt goes out on */
    size_t n_in_receipt;    /* entries whose census rides on that receipt */
    pthread_mutex_t cb_lock; /* guards the queue below; never held while a callback runs */
    pthread_cond_t cb_cond;
    struct ask_node *cb_head, *cb_tail;
    int cb_len;
    bool cb_stop, cb_started, cb_ready;
    pthread_t cb_thread;

    /* the booking area of the current connection (NULL: none); every mapping made, freed at close */
    _Atomic(client_fast *) fast;
    client_fast *fast_all; /* under lock */

    pthread_mutex_t dev_lock;
    comem_device_source *dev;
    bool dev_tried;
    int dev_rc;
};

/* ---- fork.c ---- */

/*
 * COMEM_OK when the calling process opened c; COMEM_EINVAL for NULL; else
 * COMEM_EFORKED (a forked child), with the reason set and logged once. Public
 * calls check it first, before any lock: a lock a parent's thread held at the
 * fork stays held in the child, and none of the parent's threads are there.
 */
int comem_client_owned(comem_client *c);

/* The calling process's pid, as fork.c keeps it (current in a forked child too). */
int32_t comem_client_this_process(void);

/* ---- client.c ---- */

/* The effective timeout: timeout_ms when >= 0, else the client's default. */
int comem_client_timeout(comem_client *c, int timeout_ms);

/* client/reason.c: what the coordinator said when it refused this thread's last call (comem_take_reason). */
#define COMEM_REASON_MAX COMEM_WIRE_TEXT_MAX
void comem_client_set_reason(const char *why);

/* Wakes the service thread (close, or work for the resync). */
void comem_client_wake(comem_client *c);

/* A fresh request id (never 0: that marks unsolicited frames). */
uint32_t comem_client_next_req(comem_client *c);

/* ---- tables.c (all under c->lock) ---- */

/* Finds a record by the client's id; NULL when unknown (0 is never an id). */
client_holder *comem_tab_holder(comem_client *c, uint64_t id);
client_entry *comem_tab_entry(comem_client *c, uint64_t id);

/* Finds a record by the coordinator's id on the current generation. */
client_holder *comem_tab_holder_by_coord(comem_client *c, uint64_t coord_id);
client_entry *comem_tab_entry_by_coord(comem_client *c, uint64_t coord_id);

/* True when the record's coordinator id is valid on the current generation. */
bool comem_tab_holder_live(const comem_client *c, const client_holder *h);
bool comem_tab_entry_live(const comem_client *c, const client_entry *e);

/* Appends a zeroed record with a fresh id; NULL when out of memory. Pointers die at the next add or remove. */
client_holder *comem_tab_add_holder(comem_client *c);
client_entry *comem_tab_add_entry(comem_client *c);
client_grant *comem_tab_add_grant(comem_client *c);

/* Removes a holder and every entry it owns. */
void comem_tab_remove_holder(comem_client *c, uint64_t id);
void comem_tab_remove_entry(comem_client *c, uint64_t id);

/* Removes a grant into *out. COMEM_ENOENT when unknown. */
int comem_tab_take_grant(comem_client *c, uint64_t id, client_grant *out);

/* Frees every table. */
void comem_tab_free(comem_client *c);

/* The union of the holders' flags, as HELLO caps. */
uint32_t comem_tab_caps(comem_client *c);

/* ---- conn.c ---- */

/*
 * Connects to path; returns the socket (non-blocking, close-on-exec) or a
 * negative status: COMEM_ENOENT (nothing there), COMEM_ECLOSED (nobody
 * listens), COMEM_EBUSY (its queue is full), COMEM_EPERM, COMEM_EIO.
 */
int comem_conn_connect(const char *path);

/*
 * Sends m as one frame on the connection of generation gen. COMEM_ECLOSED when
 * that connection is gone or the write fails (the socket is then shut down so
 * the service thread notices); COMEM_ERANGE/COMEM_EINVAL when m cannot be
 * encoded. Thread-safe: frames are never interleaved.
 */
int comem_conn_send(comem_client *c, uint64_t gen, const comem_msg *m);

/*
 * Reads what fd has into the service buffer, waiting up to timeout_ms (-1:
 * forever) and returning early when wake_fd fires. Returns 1 when bytes came,
 * 2 when woken, 0 on timeout, COMEM_ECLOSED on EOF, COMEM_EIO on an error.
 * Service thread (or open, before it starts) only.
 */
int comem_conn_read(comem_client *c, int fd, int timeout_ms);

/* Decodes the next whole frame of the buffer into c->in: 1, 0 (need more) or COMEM_EPROTO. */
int comem_conn_next(comem_client *c);

/*
 * Reader role held: reads what c->fd has now into the buffer without waiting.
 * 1 bytes came, 0 none, COMEM_ECLOSED on EOF, COMEM_EIO.
 */
int comem_conn_fill(comem_client *c);

/* The socket fd joins (events EPOLLIN) or leaves (0) the service thread's epoll set. */
void comem_conn_watch(comem_client *c, int fd, bool on);

/*
 * Says HELLO on a fresh socket and reads the reply. COMEM_OK with *session; a
 * refusal's status with *refused set and its message in why; COMEM_ETIMEDOUT,
 * COMEM_ECLOSED or COMEM_EPROTO when the exchange failed.
 */
int comem_conn_hello(comem_client *c, int fd, uint64_t *session, bool *refused, char *why, size_t whylen);

/* ---- pending.c ---- */

/*
 * Under c->lock, with the link not down: starts a request on the current
 * connection. With await, the reply will be waited for; without it, only adds
 * keep a (detached) record so their ids still get mapped. COMEM_ENOMEM.
 */
int comem_req_begin(comem_client *c, client_req *r, pend_kind kind, uint64_t obj, uint64_t snap, bool await);

/*
 * Sends a begun request's frame (its request_id is set here). May be called
 * with c->lock held, for frames whose order against the state they carry
 * matters and that have no sequence number of their own (ACTIVITY). Returns
 * what comem_conn_send returns.
 */
int comem_req_send(comem_client *c, client_req *r, comem_msg *m);

/*
 * Without the lock: sends m (NULL: comem_req_send already did) and, for an
 * awaited request, waits up to timeout_ms (the service thread pumps frames instead of
 * sleeping). COMEM_OK with *out filled (out->type 0 when not awaited; *text
 * receives status text), COMEM_ECLOSED when the connection ended first,
 * COMEM_ETIMEDOUT (an add's record is detached and its object removed from
 * the mirror in the same critical section, so a late id is given back).
 */
int comem_req_finish(comem_client *c, client_req *r, comem_msg *m, int timeout_ms, client_reply *out, char **text);
/*
 * comem_req_finish for an ADMIT whose coordinator must show it is there: when
 * neither the reply nor its acknowledgement (ADMIT_QUEUED) has come within
 * ack_ms, COMEM_ETIMEDOUT with *unanswered true; once acknowledged, the wait
 * is the whole timeout_ms. ack_ms <= 0: no such bound.
 */
int comem_req_finish_acked(comem_client *c, client_req *r, comem_msg *m, int ack_ms, int timeout_ms, client_reply *out,
                           bool *unanswered);

/* Abandons a begun request that will not be sent (under c->lock). */
void comem_req_abort(comem_client *c, client_req *r);

/*
 * Service thread, lock held: a reply frame arrived; completes its request.
 * *orphan_kind (PEND_PLAIN when there is nothing to undo) and *orphan receive an
 * add whose object is gone (remove it at the coordinator), or a pin granted after
 * its caller gave up (*orphan the holder, *orphan_bytes the bytes to release).
 * Returns false when no request waits for it.
 */
bool comem_pending_complete(comem_client *c, const comem_msg *m, pend_kind *orphan_kind, uint64_t *orphan,
                            int64_t *orphan_bytes);

/* Lock held: every request fails with COMEM_ECLOSED (the connection ended). */
void comem_pending_fail_all(comem_client *c);

/* ---- service.c ---- */

/* True on c's service thread (API calls there must not wait). */
bool comem_on_service_thread(const comem_client *c);

/*
 * Reader role held: dispatches every whole frame in the buffer (replies to
 * their waiters, asks to the callback thread). COMEM_OK, or COMEM_EPROTO for a
 * frame a coordinator must not send (the service thread then drops the link).
 */
int comem_service_dispatch_all(comem_client *c);

/* Starts the service thread. */
int comem_service_start(comem_client *c);

/* Stops it (close). */
void comem_service_stop(comem_client *c);

/*
 * Service thread: reads and dispatches frames until *done turns true or the
 * deadline (CLOCK_MONOTONIC ns) passes. COMEM_OK, COMEM_ETIMEDOUT, or the
 * connection's failure (the caller then treats the connection as lost).
 */
int comem_service_pump_until(comem_client *c, const bool *done, int64_t deadline_ns);

/* ---- ask.c ---- */

/*
 * Answers one ask: the busy rule, the holder's callback, the RECEIPT. Runs on
 * the callback thread; with busy_now it skips the callback and answers busy
 * (the queue was full), which is safe from the service thread.
 */
void comem_ask_handle(comem_client *c, const comem_msg_ask *ask, bool busy_now);

/* ---- callbacks.c: the thread that runs release callbacks ---- */
int comem_callbacks_start(comem_client *c);
/* Stops it after it has answered every queued ask. Not from the callback thread. */
void comem_callbacks_stop(comem_client *c);
/* Queues a copy of an ask for the callback thread (from the service thread). */
void comem_callbacks_queue(comem_client *c, const comem_msg_ask *ask);
bool comem_on_callback_thread(const comem_client *c);

/* ---- resync.c ---- */

/*
 * Service thread, link up or syncing: tells the coordinator everything in the
 * mirror it does not know yet (holders, entries, residency, reports, busy
 * marks, pins), then marks the link up. COMEM_OK or the connection's failure.
 */
int comem_resync(comem_client *c);

/* Closes a booking area or view received and not mapped (a failed HELLO, a new one coming). */
void comem_conn_drop_area(comem_client *c);

/* ---- view.c: the session's sealed view ---- */

/* After HELLO: maps the sealed view that came with the reply (c->view_fd), if any, as the current one. */
void comem_client_view_attach(comem_client *c);
/* Unmaps every view mapped (close, no thread running). */
void comem_client_view_free(comem_client *c);

/* ---- fast.c: the booking area ---- */

/* After HELLO on connection gen: maps the session's booking area that came with the reply (c->area_fd), if any. */
void comem_fast_attach(comem_client *c, uint64_t gen, uint64_t session);
/*
 * A seam inside a booking, between its charge and its record (where 1) and
 * between its record and telling the coordinator (2). The library's own does
 * nothing; tests/integration/test_fastpath.c defines it to stop there, so a
 * test can SIGKILL a process at exactly that point.
 */
void comem_fast_stall_point(int where);
/* The connection ended: no more bookings in its area (the mapping stays until close). */
void comem_fast_detach(comem_client *c);
/* Unmaps every area (close, no thread running). */
void comem_fast_free(comem_client *c);
/* The area of connection gen, or NULL. */
client_fast *comem_fast_for(comem_client *c, uint64_t gen);
/* Whether the coordinator may be sleeping past a change made in the area now (then send BOOKED). */
bool comem_fast_coordinator_dozing(const client_fast *f, int64_t now_ns);
/*
 * Books weights on device without a round trip when the admission fits the
 * published room; fills g's fast fields and *fig. False: ask the coordinator.
 * holder is the coordinator's id (0 none); working is inference + cast buffers.
 */
bool comem_fast_book(client_fast *f, int device, uint64_t holder, int64_t weights, int64_t working,
                     client_grant *g, client_admission *fig);
/* Cancels a booked grant without a round trip (a load goes to the coordinator as GRANT_DONE of BOOK_REF). */
void comem_fast_cancel(client_fast *f, const client_grant *g);

/* ---- calls.c ---- */

/*
 * comem_admit of `weights` for holder (no working memory, no keep list) for a caller that must not wait
 * on a coordinator that does not answer (the preload, tools/preload/): when it neither answers nor
 * acknowledges the ADMIT (ADMIT_QUEUED: it is asking other processes) within ack_ms, COMEM_ETIMEDOUT
 * with *unanswered true; acknowledged, it waits up to timeout_ms (< 0: the client's default).
 */
int comem_admit_acked(comem_client *c, int device, uint64_t holder, int64_t weights, int ack_ms, int timeout_ms,
                      uint64_t *grant, int64_t *short_by, bool *unanswered);

/* ---- local.c ---- */

/* The reserve local decisions use: reserve_base when >= 0, else ComfyUI's default (COMEM_RESERVE_DEFAULT). */
int64_t comem_local_reserve_bytes(const comem_client *c);

/*
 * Local admission from this process's device reading: COMEM_OK with *grant,
 * COMEM_ENOSPC with *short_by, or the reading's failure. *fig receives the
 * figures of the decision (decided stays false when the device could not be read).
 */
int comem_local_admit(comem_client *c, int device, int64_t weights, int64_t inference, int64_t cast_forward,
                      uint64_t *grant, int64_t *short_by, client_admission *fig);

/* Local reserve and pager headroom. */
void comem_local_reserve(comem_client *c, int64_t *reserve, int64_t *pager_headroom);

/* A small JSON object saying the client decides locally (malloc'd). */
int comem_local_status(comem_client *c, char **json);

/* Closes the device source. */
void comem_local_close(comem_client *c);

/* Fills m with this process's device map; false when nothing is mapped (lock held). register.c */
bool comem_devmap_build(const comem_client *c, comem_msg_device_map *m);

#endif
