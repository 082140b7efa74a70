/*
 * client/state.h - the ground floor of the client wing: the client's state
 * (one struct, its records, its locks and threads, the link's states), the
 * mirror's tables, and the few things every floor asks of it: ids, timeouts,
 * the service thread's wake-up, which thread am I, whose client this is, and
 * the reason of a refusal (the wing's one thread-local state: the public
 * API's per-thread reason, reason.c; probe.c's frame buffer is scratch).
 * Every file of src/client/ includes it; nothing outside src/client/ does
 * (tools/preload reaches the wing through client/client_internal.h).
 *
 * THE FLOORS. A file calls only into files of its own floor or below and
 * includes only their headers; nothing calls back up, and no two files call
 * each other.
 *
 *   8  client.c                         open and close: the threads, the socket, an embedded coordinator
 *   7  register.c admit.c calls.c       the public calls: one builder and the call helper each
 *      wddm.c      (wddm.h)             this process's WDDM reading told (comem_wddm_report, a node's end)
 *      service.c   (service.h)          the service thread: reconnects, has the resync replay the mirror
 *   6  call.c      (call.h)             THE CALL HELPER: route, begin, send, wait, the reply's status
 *      resync.c    (resync.h)           the replay after a HELLO, with the calls' own builders
 *      answer.c    (answer.h)           the callback thread: answers asks; idle, the socket rests with it
 *   5  reader.c    (request.h)          THE READER ROLE: reading and dispatching frames, where the socket
 *                                       rests, a request's wait
 *   4  callbacks.c (callbacks.h)        the queue of asks the callback thread answers
 *   3  pending.c   (request.h)          requests waiting for replies
 *      ask.c       (ask.h)              one ask's answer: the busy rule, the callback, the RECEIPT
 *      fast.c view.c (shared.h)         what a session maps: the booking area, the sealed view
 *      probe.c                          comem_probe: a tool's one attempt, no client
 *   2  frames.c    (frames.h)           ONE BUILDER PER RECORD: every frame a call or the resync sends
 *      conn.c      (conn.h)             the socket: connect, whole frames, HELLO
 *      local.c     (local.h)            decisions without a coordinator
 *   1  state.c fork.c reason.c tables.c (this header) the ground: the state and what every floor asks of it
 *      port_posix.c port_win.c (port.h)  the system's side: the connection, each thread's wait set
 *      constants.c                      comem_constant, apart: no client
 *
 * admit.h declares the preload's acked admission (admit.c); client_internal.h,
 * which only files outside the wing include, forwards to it.
 *
 * THE STATE:
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
 *   │   ├── pending     requests waiting for their reply (client/pending.c)
 *   │   └── last_admit  the last decision comem_admit or the preload's comem_admit_acked
 *   │                   made, for comem_admit_details (admit.c)
 *   ├── write_lock      guards wsock/wgen and every frame write, so two frames
 *   │                   never interleave; taken after lock, never before it
 *   ├── read_lock       THE READER ROLE: whoever holds it may read the socket
 *   │                   and owns rbuf and in. At rest the socket waits in one
 *   │                   thread's wait set (client/port.h): the callback
 *   │                   thread's while it has nothing to answer, else the
 *   │                   service thread's, and that thread reads what comes. A
 *   │                   caller that finds the role free while it waits for a
 *   │                   reply takes it (the leader), takes the socket out of
 *   │                   the set, and reads and dispatches every frame itself
 *   │                   until its own reply comes (asks still go to the
 *   │                   callback thread's queue, other replies to their
 *   │                   waiters), so the reply costs no thread wake-up
 *   │                   (client/reader.c). Where the socket cannot move
 *   │                   (Windows: comem_port_socket_moves) it rests with the
 *   │                   service thread for good and nobody leads. Taken
 *   │                   before lock and write_lock, never after them.
 *   ├── service thread  owns sock (changed under read_lock) and out: reads while
 *   │                   the socket rests with it, matches replies, queues
 *   │                   release asks, reconnects and runs the resync
 *   │                   (client/service.c)
 *   ├── callback thread owns receipt, ask_ids, ask_amounts and answering: runs
 *   │                   the holders' release callbacks one at a time, with no
 *   │                   lock held, and sends their receipts (answer.c, ask.c);
 *   │                   idle, reads the socket resting with it, so an ask is
 *   │                   answered on the thread that read it
 *   ├── dev_lock        the device source for local-only decisions
 *   └── svc_self,       which threads are the client's own (state.c): each of
 *       cb_self         the two writes its id as it starts, before it counts
 *                       itself running, and publishes it with its flag; the
 *                       flag drops when the thread is joined. Written once,
 *                       read by any thread without a lock
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
 *              under COMEM_OPEN_NO_LOCAL (call.c); registrations change the mirror only.
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
 *                     (need_sync): replayed, the link stays up       by comem_client_want_sync
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
 *   entry synced_seq            comem_entry_census (register.c; from        apply_add: the sequence the
 *                               a release callback, ridden on its receipt), add carried
 *                               comem_grant_done's census (calls.c),
 *                               next_step
 *   synced_sess_busy            comem_holder_busy(0) (register.c), next_step  try_connect: false
 *   synced_sess_pins            comem_pin_acquire/_release(0) (calls.c),      try_connect: 0
 *                               next_step
 *   need_sync                   a call that left a difference:              comem_resync, at every step
 *                               comem_client_want_sync, apply_add
 *
 * Tables are arrays searched linearly: a process holds tens to a few hundred
 * entries, and every search runs under the lock for microseconds.
 */
#ifndef COMEM_CLIENT_STATE_H
#define COMEM_CLIENT_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client/port.h"
#include "comem/comem.h"
#include "os/shm.h"
#include "shm/view.h"
#include "probe/device.h"
#include "wire/wire.h"

/*
 * The public API and the protocol. Roles and holder kinds go on the wire as
 * the caller gave them, so the API's values are the protocol's (asserted
 * here). Holder flags (COMEM_ANSWERS_*), entry flags (COMEM_ENTRY_PAGED, _RAM_*) and
 * release kinds (COMEM_RELEASE_*) have the API's own values and are translated
 * where they cross: frames.c (the holder's caps, the entry's flags) and ask.c's
 * release_kind. comem_scope and comem_status are one enum for both (comem/common.h).
 */
_Static_assert(COMEM_CLIENT_HOST == COMEM_ROLE_HOST && COMEM_CLIENT_WORKER == COMEM_ROLE_WORKER &&
                   COMEM_CLIENT_TOOL == COMEM_ROLE_TOOL,
               "roles go on the wire unchanged");
_Static_assert(COMEM_KIND_MODELS == COMEM_HOLDER_MODELS && COMEM_KIND_PAGER == COMEM_HOLDER_PAGER &&
                   COMEM_KIND_PINS == COMEM_HOLDER_PINS && COMEM_KIND_RAW == COMEM_HOLDER_RAW,
               "holder kinds go on the wire unchanged");
_Static_assert(COMEM_ADMISSION_ASKED_MAX == COMEM_WIRE_MAX_ASKED, "an admission record names every id a reply names");

#define COMEM_CLIENT_DEFAULT_TIMEOUT_MS 10000
#define COMEM_CLIENT_PATH_MAX COMEM_PORT_NAME_MAX

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
    uint32_t app_pid; /* comem_holder_add_app's process; 0: this one's */
    unsigned flags; /* the protocol's capability bits (COMEM_CAP_*), translated at add (frames.c) */
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
    unsigned flags; /* the API's COMEM_ENTRY_* (translated where it goes on the wire: frames.c) */
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
    uint64_t holder;      /* the client's holder id (0: none) and the API's device: what a RECLAIM names */
    int device;
    uint64_t reclaim_gen; /* the connection a RECLAIM of it went out on (resync.c) */
    bool lost;            /* a new coordinator could not book it again: grant_done says so */
} client_grant;

typedef struct client_fast client_fast;         /* one coordinator's booking area, mapped (client/fast.c) */

/* The most shares that may ride on a HELLO_REPLY's bytes (os/stream.h's COMEM_STREAM_SHARES_MAX). */
#define CLIENT_BESIDE_MAX 4

/* A share a HELLO_REPLY named (os/shm.h), not yet opened. */
typedef struct client_share {
    comem_shm_token t;
    bool named;
} client_share;
typedef struct client_pending client_pending;   /* one request waiting for its reply (client/request.h) */

/* One of the client's own threads, as it marked itself (state.c): id is set before marked, and read after it. */
typedef struct client_self {
    pthread_t id;
    atomic_bool marked;
} client_self;

struct ask_node;                                /* one queued ask (client/callbacks.c) */

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
    comem_admission last_admit; /* the last decision comem_admit or comem_admit_acked made on c, whole
                                   (all 0: none yet); comem_admit_details reads six of its figures */

    pthread_mutex_t read_lock; /* the reader role: sock reads, rbuf, in (above) */
    client_waits *svc;         /* the service thread waits here: its wake-up, and the socket while it rests here */
    client_waits *cb;          /* the callback thread waits here: its wake-up (asks queued), and the socket while it rests here */
    _Atomic(client_waits *) rest; /* the set the socket rests in now (changed under read_lock; NULL: none, a leader has it) */
    atomic_bool cb_idle;       /* the callback thread has nothing to answer: the socket may rest with it */
    atomic_bool service_reads; /* the service thread reads for its own requests: the socket rests with it */
    atomic_int read_failed;    /* how the callback thread's read failed (0: it did not); the service thread drops the link */
    uint64_t fd_gen;           /* the generation sock belongs to (under read_lock) */
    bool fd_blocks;            /* sock waits in recv (comem_port_adopt); false: a leader waits in poll (read_lock) */

    pthread_mutex_t write_lock;
    client_sock *wsock; /* the socket writers use; NULL when down */
    uint64_t wgen;      /* the generation wsock belongs to */

    atomic_int timeout_ms;
    atomic_uint next_req;
    atomic_bool stopping;
    atomic_int threads_running; /* the service and callback threads that have begun their work (open waits for both) */
    client_self svc_self, cb_self; /* the service and callback threads, as they marked themselves (state.c) */

    /* owned by the service thread (and by open, before the thread starts) */
    pthread_t thread;
    bool thread_started;
    /* What rode on the bytes of this connection's HELLO_REPLY, until the reply names them (os/shm.h). */
    comem_shm_token beside[CLIENT_BESIDE_MAX];
    int n_beside;
    client_share area; /* the booking area the last HELLO_REPLY named, until mapped */
    client_share view_share; /* the sealed view it named, until mapped */
    const comem_view_shared *_Atomic view; /* the current session's sealed view, mapped read-only (NULL: none) */
    comem_shm **views_all; /* every one mapped, closed at close (under lock) */
    size_t n_views;
    client_sock *sock; /* the connection (NULL: none) */
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

/* ---- state.c: ids, timeouts, the wake-up, which thread am I ---- */

/* The effective timeout: timeout_ms when >= 0, else the client's default. */
int comem_client_timeout(comem_client *c, int timeout_ms);

/* Wakes the service thread (close, or work for the resync). */
void comem_client_wake(comem_client *c);

/* Lock held: the mirror has a difference the coordinator was not told; the resync looks again. */
void comem_client_want_sync(comem_client *c);

/* A fresh request id (never 0: that marks unsolicited frames). */
uint32_t comem_client_next_req(comem_client *c);

/*
 * The client's own two threads. Each marks itself once, as it starts and
 * before it counts itself running; its stop unmarks it once it is joined, so
 * an id the system hands to a later thread is never taken for it. The marks
 * live on the client (state.c), so "which thread am I" is asked of a client.
 */
typedef enum client_thread { CLIENT_THREAD_SERVICE = 1, CLIENT_THREAD_CALLBACKS = 2 } client_thread;
void comem_client_thread_mark(comem_client *c, client_thread which);
void comem_client_thread_unmark(comem_client *c, client_thread which);
/* True on c's service thread: it reads the replies, so a call there must not wait for one. */
bool comem_on_service_thread(const comem_client *c);
/* True on c's callback thread: a release callback runs there (its censuses may ride on the receipt). */
bool comem_on_callback_thread(const comem_client *c);

/* ---- fork.c: whose client this is ---- */

/*
 * COMEM_OK when the calling process opened c; COMEM_EINVAL for NULL; else
 * COMEM_EFORKED (a forked child), with the reason set and logged once. Public
 * calls check it first, before any lock: a lock a parent's thread held at the
 * fork stays held in the child, and none of the parent's threads are there.
 */
int comem_client_owned(comem_client *c);

/* The calling process's pid, as fork.c keeps it (current in a forked child too). */
int32_t comem_client_this_process(void);

/*
 * ---- reason.c: what the coordinator said when it refused this thread's last call (comem_take_reason) ----
 * Per thread because the public comem_take_reason names no client (reason.c says why); set only where a
 * status is returned to the calling thread, and never read inside the library.
 */
#define COMEM_REASON_MAX COMEM_WIRE_TEXT_MAX
void comem_client_set_reason(const char *why);

/* ---- tables.c: the mirror (all under c->lock) ---- */

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

#endif
