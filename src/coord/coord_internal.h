/*
 * coord/coord_internal.h - the coordinator's state, shared by the files of src/coord/.
 *
 *   srv
 *   ├── ledger          the machine-wide books (ledger/ledger.h)
 *   ├── src             the device source, read at admissions and every tick
 *   ├── ram_src         host RAM (probe/hostram.h), the ledger's last device when on
 *   ├── meas[dev]       the last reading per device and what the ledger changed since
 *   ├── conns[]         one per socket; a conn has a session once HELLO passed
 *   ├── asks (slab)     release asks sent to holders, each owned by an admission,
 *   │                   a pressure request, the idle sweep or the pin sweep
 *   ├── jobs (slab)     admissions and pressure requests in progress
 *   │   └── per device a FIFO: one job plans at a time, so two never count the same bytes
 *   └── view            the shared-memory snapshot clients read without a round trip
 *
 * All of it is touched only by the loop thread.
 */
#ifndef COMEM_COORD_INTERNAL_H
#define COMEM_COORD_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/clock.h"
#include "shm/book.h"
#include "coord/coord.h"
#include "coord/plan.h"
#include "shm/view.h"
#include "ledger/ledger.h"
#include "os/loop.h"
#include "os/proc.h"
#include "os/shm.h"
#include "os/stream.h"
#include "ledger/slab.h"
#include "probe/device.h"
#include "wire/wire.h"

/*
 * Bounds. Every queue the coordinator keeps has one, so no client can grow it
 * without end: what is refused at a bound is refused with a reply that says so
 * (COMEM_EBUSY: too many in flight, try again when some are answered), and
 * what a session holds is freed when it ends.
 */
#define COORD_MAX_SESSIONS COMEM_LEDGER_MAX_SESSIONS /* 1024; the last is a newcomer's while room is made (input.c) */
#define COORD_TOOL_SESSIONS 4        /* of them, kept for tools (comem status): hosts and workers hold 1020 */
#define COORD_PEER_SURE 4            /* sessions every process is sure of, the table full or not (input.c) */
#define COORD_PEER_CONNS 64          /* connections one process may hold */
#define COORD_PEER_UNAUTH 8          /* ... of them without HELLO; its oldest is closed for a new one */
#define COORD_MAX_UNAUTH 64          /* connections without HELLO in all; the oldest makes room */
#define COORD_MAX_CONNS (COORD_MAX_SESSIONS + COORD_MAX_UNAUTH) /* the table: a full one of sessions still
                                                                   takes a newcomer's HELLO */
#define COORD_OUT_LIMIT (8 << 20)    /* a client that stops reading this much is dropped */
#define COORD_OUT_TOTAL (64 << 20)   /* all connections' unsent output; the worst reader is dropped above it */
#define COORD_MAX_ROUNDS 3           /* plan, ask, re-measure; at most this many times per admission */
#define COORD_SESSION_JOBS 64        /* admissions and pressure requests in flight per session */
#define COORD_MAX_JOBS 4096          /* ... and in all */
#define COORD_SESSION_RELEASES 64    /* RELEASE requests in flight per session */
#define COORD_MAX_ASKS 8192          /* asks waiting for receipts, in all */
#define COORD_READ_RETRY_MS 1000     /* a device that could not be read is not read again for this long */

#define COORD_STR_(x) #x
#define COORD_STR(x) COORD_STR_(x) /* a bound's value, in a reply's text */

/* What a loop event is about (its tag, os/loop.h); a wake-up comes with no tag. */
typedef enum ep_kind { EP_LISTEN, EP_CONN, EP_PIDFD } ep_kind;

typedef struct ep_tag {
    ep_kind kind;
    struct conn *conn;
} ep_tag;

/* One adapter of a session's last WDDM report (wddm.c). */
typedef struct coord_wddm_item {
    uint64_t luid;
    int64_t budget, usage; /* the process's own, as DXGI gave them */
    int device;            /* the coordinator's device with the CUDA UUID the report named; -1: none */
    int64_t held;          /* what the ledger saw its process hold on that device when it came, plus
                              what it registered since without a grant (coord_wddm_registered) */
} coord_wddm_item;

typedef struct conn {
    comem_stream *stream;    /* the connection (os/stream.h), in the loop */
    comem_proc_watch *watch; /* the session's process (os/proc.h), in the loop */
    int32_t pid;
    uint32_t uid;
    uint64_t session; /* 0 before HELLO */
    bool closing;     /* flush what is queued, then close */
    bool goodbye;     /* the client said GOODBYE: its session's end is no death */
    bool want_out;    /* room is asked of the loop: output is waiting for it */
    uint8_t *in;      /* COMEM_WIRE_MAX_FRAME bytes */
    size_t in_len;
    uint8_t *out;
    size_t out_len, out_cap;
    ep_tag tag, pid_tag;
    int slot;
    comem_shm_token pass[2]; /* shares to send beside the first bytes (os/shm.h): the sealed view, the booking area */
    int n_pass;
    int64_t accepted_ns; /* a connection without HELLO is closed hello_timeout_ms after this */
    int jobs;     /* admissions and pressure requests of this connection's session in flight */
    int releases; /* RELEASE requests of this connection's session waiting for a receipt */
    bool unanswered; /* an ask passed its deadline: its holders are not asked until a receipt comes (asks.c) */
    uint8_t devmap[COMEM_MAX_DEVICES]; /* this process's ordinal -> the coordinator's index + 1 (0: unmapped) */
    /* The reserve this session was last told per device (RESERVE), bit d of told_known set once it
       asked: a host keeps it until it asks again, while the published one moves with every census
       and receipt; status shows both so the two are never read as one figure. */
    int64_t told[COMEM_MAX_DEVICES];
    uint32_t told_known;
    /* Its process's last WDDM report (Windows: its budget and usage per adapter, wddm.c), and when. */
    coord_wddm_item wddm[COMEM_MAX_DEVICES];
    uint16_t n_wddm;
    double wddm_at_s;
} conn;
_Static_assert(COMEM_MAX_DEVICES <= 32, "told_known has a bit per device");

/* The protocol and the ledger each define a holder's kinds and a census's items; the coordinator
   hands the one to the other, so they are held equal here. */
_Static_assert((int)COMEM_HOLDER_MODELS == (int)LEDGER_KIND_MODELS && (int)COMEM_HOLDER_PAGER == (int)LEDGER_KIND_PAGER &&
                   (int)COMEM_HOLDER_PINS == (int)LEDGER_KIND_PINS && (int)COMEM_HOLDER_RAW == (int)LEDGER_KIND_RAW,
               "holder kinds pass through unchanged");
_Static_assert(COMEM_WIRE_MAX_ITEMS <= COMEM_LEDGER_MAX_ITEMS, "a census the protocol carries fits the ledger");
_Static_assert(COMEM_WIRE_NAME_MAX == COMEM_LEDGER_NAME_MAX, "one name bound");

/* A census's or a receipt's items, as the ledger books them (out has room for n). */
static inline void coord_residency(const comem_wire_residency *in, size_t n, ledger_residency *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = (ledger_residency){in[i].entry_id, in[i].seq, in[i].resident, in[i].refs};
}

/* A census's pinned and overhead figures as the ledger takes them: -1 where the census has none. */
static inline void coord_census_figures(const comem_msg_census *m, int64_t *pinned, int64_t *overhead)
{
    *pinned = m->has & COMEM_CENSUS_PINNED ? (m->pinned > 0 ? m->pinned : 0) : -1;
    *overhead = m->has & COMEM_CENSUS_OVERHEAD ? (m->overhead > 0 ? m->overhead : 0) : -1;
}

typedef enum job_kind { JOB_ADMIT = 1, JOB_PRESSURE = 2 } job_kind;

/* Where a job stands; admit.c draws every state and transition. An answered job is freed at once. */
typedef enum job_state {
    JOB_QUEUED = 0, /* in its device's FIFO, behind the running job */
    JOB_PLANNING,   /* at the head: reading true free, planning (within one call of step) */
    JOB_ASKING,     /* at the head, asks_out > 0: waiting for receipts */
    JOB_WAITING     /* at the head, nobody to ask now: waiting for a computing holder's node boundary */
} job_state;

/* An admission or pressure request, one job in its device's FIFO. */
typedef struct job {
    job_kind kind;
    uint64_t session;
    uint32_t request_id;
    int device;
    uint64_t holder;
    int64_t weights, working, need; /* working: inference + cast buffers */
    int64_t free_before, freed;
    int round;
    int asks_out;          /* asks not yet answered */
    int n_asked, n_busy;
    uint64_t asked[COMEM_WIRE_MAX_ASKED]; /* the first holders asked, for the reply */
    int64_t deadline_ns;   /* the requester stops waiting then */
    uint64_t waiting_for;  /* JOB_WAITING: the computing holder whose node boundary it waits for */
    uint64_t excluded[64]; /* holders that said busy: not asked again by this job */
    int n_excluded;
    uint16_t n_keep;
    uint64_t *keep;        /* owned; NULL when empty */
    conn *requester;       /* its connection: jobs end with their session, before the conn */
    job_state state;
    uint64_t next;         /* next job in the device FIFO */
    int64_t created_ns;    /* when the request arrived: the admission latency's start */
    int64_t ack_due_ns;    /* an ADMIT not answered by then is acknowledged (ADMIT_QUEUED); 0: no ack due */
    int64_t held_since_ns; /* when its current asks went out, or it began to wait (coord/admit.c: keeps_room) */
} job;

/*
 * How long an admission may go unanswered before it is acknowledged. Most that ask one holder
 * are answered sooner, and then no ADMIT_QUEUED wakes the requester while the holder frees (on one
 * CPU that wake-up ran in series with the release); a client waits 200 ms or more for either.
 */
#define COORD_ACK_DEFER_NS (1000 * 1000LL)

struct ask;

/*
 * Who waits for an ask's receipt (an admission or pressure job, the idle
 * sweep, the card's own pressure, another session's RELEASE request) is told
 * through this, once, when the ask settles: a receipt's outcome and the bytes
 * it freed, COMEM_RECEIPT_BUSY when the deadline passed or the holder's
 * session ended (COMEM_RECEIPT_GONE and the entry's bytes, for a RELEASE).
 * The ask is already forgotten; a is a copy.
 */
typedef void (*coord_ask_done)(comem_coord_srv *s, const struct ask *a, uint8_t outcome, int64_t freed);

typedef struct ask {
    uint64_t session; /* the asked holder's session */
    uint64_t holder;
    uint8_t kind; /* comem_ask_kind */
    int device;
    int64_t bytes;
    int64_t deadline_ns;
    coord_ask_done done; /* its owner's (NULL: nobody waits, as for pin asks) */
    uint64_t owner;      /* the owner's own id: a job id, a device */
    /* a RELEASE being answered */
    uint64_t req_session;
    uint32_t req_id;
    uint64_t entry;
    int64_t entry_before; /* the entry's residency when asked: what comes back if its process ends */
    uint64_t report_seq;  /* the holder's census sequence when asked: a newer report supersedes the receipt */
    int64_t held;         /* what the ledger says the holder held when asked: a receipt can free no more */
    int64_t card_before;  /* the card's reading of the holder's process when asked (-1: it does not say) */
    int32_t pid;          /* that process: the holder's session's, or its app's (coord/apps.c) */
} ask;

/* Receipts waiting for the next reading of their device (coord/receipt_check.c). */
#define COORD_RECEIPT_CHECKS 32
typedef struct coord_receipt_pending {
    uint64_t holder; /* 0: a free slot */
    int32_t pid;
    int device;
    int64_t before, freed;
} coord_receipt_pending;
typedef struct coord_receipt_checks {
    coord_receipt_pending item[COORD_RECEIPT_CHECKS];
    uint32_t next;
} coord_receipt_checks;

/* Overcommit on a WDDM card (coord/spill.c): the current excess and its last start. */
typedef struct coord_spill {
    int64_t current;   /* bytes beyond the card's memory at the last reading (0: none) */
    int64_t peak;      /* the most, during the current or last overcommit */
    uint64_t events;   /* overcommits started on this device */
    int32_t pid;       /* the process that pushed the card past its memory, last time */
    char name[COMEM_WIRE_NAME_MAX]; /* its session's name ("" when it is not in the ledger) */
    int64_t pushed_by; /* how much its use grew since the reading before */
    int64_t since_ns, last_ns; /* the last start and end (CLOCK_MONOTONIC) */
} coord_spill;

/* The last reading of a device, and what changed since. */
typedef struct measurement {
    comem_device_reading r;
    bool valid;
    uint64_t changes;   /* the device's ledger generation (ledger_device.changes) when it was taken */
    bool stale;         /* the card changed where the ledger shows nothing: a receipt's freed bytes, a
                           grant filled after the reading was taken */
    int64_t taken_ns;
    int64_t done_since; /* bytes of grants turned into residency after the reading */
    bool failing;       /* the last reading failed (logged once per episode) */
    int64_t retry_ns;   /* after a failure, the device is not read again before this */
} measurement;

/* What the coordinator knows of one booking record, beside what the area says (never trusted). */
typedef struct book_priv {
    uint32_t seq;      /* the record's seq when it was reconciled */
    bool live;         /* reconciled by this coordinator (GRANTED by it) */
    int dev;
    int64_t bytes;
    uint64_t holder;   /* the session's own holder it named, else 0 */
    int64_t booked_ns; /* the grant's expiry counts from it */
    uint64_t gid;      /* its ledger grant; 0: the ledger refused it, its bytes are still charged */
} book_priv;

/* What the view showed a device from: any of it moving republishes the view at the turn's end. */
typedef struct view_mark {
    uint64_t changes;
    int64_t granted, published, taken_ns, done_since;
    uint64_t turns;
} view_mark;

/* One session's booking area, as the coordinator holds it (coord/book.c); the area's words are its word. */
typedef struct book_sess {
    comem_shm *m;                              /* the area's region (os/shm.h) */
    book_area *a;                              /* m's memory; NULL: none (a tool, or none could be made) */
    bool off;                                  /* it wrote nonsense: its fast path is closed for its life */
    uint32_t seen;                             /* its `posted` when last looked at */
    int64_t stock[COMEM_MAX_DEVICES];          /* held out of everyone's room for its bookings: the truth */
    int64_t limit[COMEM_MAX_DEVICES];          /* what was published (BOOK_CLOSED, or the stock) */
    int64_t margin[COMEM_MAX_DEVICES];         /* the reserve and context floor its target keeps */
    int64_t sub[COMEM_MAX_DEVICES];            /* reconciled bytes to take out of `charged` after publishing */
    int64_t wants_until_ns[COMEM_MAX_DEVICES]; /* it admitted on the device lately: it keeps a stock there */
    int8_t map[COMEM_MAX_DEVICES];             /* the ordinal -> device map published in its area */
    int64_t over_since_ns[COMEM_MAX_DEVICES];  /* `charged` above its stock since then (0: not above) */
    /* `charged` beyond what the coordinator knows is behind it, without a break since then (0: none;
       book.c, check_still), the least of it seen since, and the bytes of bookings reconciled since */
    int64_t still_since_ns[COMEM_MAX_DEVICES];
    int64_t still_least[COMEM_MAX_DEVICES];
    int64_t still_done[COMEM_MAX_DEVICES];
    book_priv priv[BOOK_RECORDS];
} book_sess;

/* The booking areas (coord/book.c). */
typedef struct coord_book {
    bool off;                  /* COMEM_NO_FAST: no areas, every admission through the socket */
    bool warned;               /* an area could not be made (said once) */
    uint64_t reconciled;       /* bookings turned into ledger grants or finished (status) */
    uint64_t strikes;          /* sessions whose area was turned off for nonsense */
    int64_t active_until_ns;   /* bookings seen lately: the loop looks every 250 us */
    int n_live;
    int live[COORD_MAX_CONNS]; /* the slots that have an area */
    book_sess sess[COORD_MAX_CONNS];
} coord_book;
/*
 * What happened since the coordinator started, counted where it happens (admit.c,
 * asks.c, session.c) and listed by status.c under "counters": the Prometheus
 * counters and the admission latency histogram `comem metrics` prints. They only grow.
 */
#define COORD_LATENCY_BUCKETS 14
extern const double coord_latency_bounds_s[COORD_LATENCY_BUCKETS]; /* upper bounds, seconds (counters.c) */
typedef struct coord_counters {
    uint64_t admissions, refusals;  /* admission replies: granted, refused */
    uint64_t asks, asks_busy;       /* release asks sent; ... settled busy, unanswered or with their holder's end */
    int64_t bytes_asked;            /* what those asks asked for */
    int64_t bytes_freed;            /* what receipts reported freed */
    uint64_t idle_releases;         /* idle release asks sent */
    uint64_t sessions_ended;        /* sessions ended, for any reason */
    uint64_t sessions_died;         /* ... of them, with the process exiting or gone (session.c) */
    uint64_t latency_counts[COORD_LATENCY_BUCKETS + 1]; /* admissions decided within each bound; last: above all */
    double latency_sum_s;
    uint64_t spill_events; /* overcommits started on WDDM cards (spill.c) */
    uint64_t dev_asks[COMEM_MAX_DEVICES];        /* release asks sent, per device (status: host RAM's) */
    int64_t dev_bytes_asked[COMEM_MAX_DEVICES];  /* ... what they asked for */
    int64_t dev_bytes_freed[COMEM_MAX_DEVICES];  /* ... what their receipts reported freed */
} coord_counters;

/* Counts one admission's answer and how long it took since created_ns (counters.c: admit.c and book.c). */
void coord_count_admission(comem_coord_srv *s, bool granted, int64_t created_ns);

/* A process seen holding unregistered host RAM beyond COORD_RAM_WARN_BYTES: since when, and whether said. */
#define COORD_RAM_OVER 64
typedef struct coord_ram_over {
    int32_t pid;      /* 0: a free slot */
    int64_t since_ns; /* first reading beyond the bound */
    bool warned;
} coord_ram_over;

typedef struct comem_coord_srv {
    comem_coord_config cfg;
    int64_t inherited[COMEM_MAX_DEVICES]; /* grants a previous coordinator published, kept for its clients to
                                              reclaim until inherited_until_ns (reclaim.c) */
    int64_t inherited_until_ns;           /* 0: nothing inherited, or the window has closed */
    comem_loop *loop;            /* os/loop.h: the listener, every connection, every session's process */
    comem_listener *listener;    /* os/stream.h; closing it removes only the socket it bound */
    int64_t next_timer_ns;       /* the 20 ms timer's next turn */
    struct comem_lockfile *lock; /* <socket>.lock, held for the coordinator's life (os/lock.h) */
    ep_tag listen_tag;
    comem_device_source *src;
    comem_device_source *ram_src; /* host RAM; NULL when cfg.ram_spec is "" */
    int ram_index;                /* host RAM's ledger index (after the cards); -1 when off */
    int64_t ram_reserve;          /* what host RAM keeps free (hostram.c) */
    coord_ram_over ram_over[COORD_RAM_OVER]; /* processes beyond the unregistered-RAM bound (hostram.c) */
    comem_ledger ledger;
    measurement meas[COMEM_MAX_DEVICES];
    coord_spill spill[COMEM_MAX_DEVICES];
    conn *conns[COORD_MAX_CONNS];
    int wddm_reports; /* connections whose last WDDM report names a device of ours (wddm.c) */
    comem_slab asks, jobs;
    uint64_t queue_head[COMEM_MAX_DEVICES], queue_tail[COMEM_MAX_DEVICES];
    int64_t started_ns, last_tick_ns, last_pin_sweep_ns;
    int64_t alone_since_ns; /* when the coordinator was last left with no connection (0: one is open) */
    uint64_t idle_asking[64]; /* holders with an idle ask out */
    int n_idle_asking;
    int acks_due; /* jobs with an ack_due_ns set: the loop wakes for them within a millisecond */
    int64_t spin_until_ns; /* while asks are out, the loop polls until then before it sleeps (base/spin.h) */
    comem_view_writer view;
    coord_book book;
    view_mark view_mark[COMEM_MAX_DEVICES]; /* what each device's view was last published from */
    coord_receipt_checks receipt_checks;
    uint64_t view_turns; /* bumped by anything the view may show that moves no ledger figure (busy marks) */
    comem_msg msg; /* decode buffer: one message at a time */
    uint8_t *frame; /* encode buffer: COMEM_WIRE_MAX_FRAME */
    volatile int stop;
    int64_t host_base; /* the reserve base: comemd --reserve, else the first host's (-1 until one says) */
    uint64_t host_base_session; /* the session that set host_base (0: none, or --reserve) */
    size_t out_total;  /* Σ out_len over connections, against COORD_OUT_TOTAL */
    bool trim_due;     /* a session ended: give freed heap back to the system */
    int64_t max_pinned_windows; /* the pin ceiling by ComfyUI's Windows rule (a WDDM process joined) */
    int pressure_out[COMEM_MAX_DEVICES]; /* pressure asks not yet settled, per device (pressure.c) */
    coord_counters counters;             /* what happened since start (status.c lists them) */
} comem_coord_srv;

/* Seconds since the coordinator started: the clock of idle times (ledger_holder.idle_since). */
static inline double coord_now_s(const comem_coord_srv *s) { return (double)(comem_now_ns() - s->started_ns) / 1e9; }

/* ---- conn.c: what goes out ---- */
/* Queues one message to a connection (encoded into its output buffer) and writes what the socket takes. */
void coord_send(comem_coord_srv *s, conn *c, comem_msg *m);
/* Sends REPLY {status, message} for a request id (message NULL: the status's own text). */
void coord_reply(comem_coord_srv *s, conn *c, uint32_t request_id, int status, const char *message);
/* Writes what is queued; asks the loop for room while the connection takes no more. False: the peer is gone. */
bool coord_flush(comem_coord_srv *s, conn *c);
/* Drops what c has queued and marks it closing (it does not read, or it is gone). */
void coord_drop_output(comem_coord_srv *s, conn *c);
/* The connection of a session, or NULL. */
conn *coord_conn_of(comem_coord_srv *s, uint64_t session);

/* ---- input.c: what comes in ---- */
/* Accepts every waiting connection that may hold a slot; refuses the others, saying why. */
void coord_accept(comem_coord_srv *s);
/* Reads what c sent and handles every whole frame (coord_handle). */
void coord_conn_readable(comem_coord_srv *s, conn *c);
/* Closes connections that did not say HELLO within the deadline. */
void coord_hello_deadlines(comem_coord_srv *s, int64_t now_ns);
/* Ends c's session (if any), closes its descriptors and frees it. */
void coord_conn_close(comem_coord_srv *s, conn *c);

/* ---- socket.c: the socket path ---- */
/* Checks what is at the path (nothing, or a stale socket of this user) and locks PATH.lock. */
int coord_socket_claim(comem_coord_srv *s);
/* Under the lock: replaces a stale socket and listens. COMEM_EEXIST when a coordinator answers there. */
int coord_socket_bind(comem_coord_srv *s);
/* Closes the socket, removing the path only if it is still the socket bound here, and drops the lock. */
void coord_socket_release(comem_coord_srv *s);

/* ---- session.c ---- */
int coord_hello(comem_coord_srv *s, conn *c, const comem_msg_hello *h, uint32_t request_id);
void coord_session_end(comem_coord_srv *s, conn *c, const char *why);

/* ---- spill.c ---- */
/* A new reading of device: an overcommit that starts or ends is an event (counted, logged, kept). */
void coord_spill_note(comem_coord_srv *s, int device, const comem_device_reading *before,
                      const comem_device_reading *now);

/* ---- devmap.c: each process's device ordinals, by UUID ---- */
/* DEVICE_MAP: maps the ordinals it names, warns when two are one card, replies. */
void coord_device_map(comem_coord_srv *s, conn *c, uint32_t rid, const comem_msg_device_map *m);
/*
 * A new connection's ordinals: COMEM_DEVICE_HOST_RAM names host RAM when it is on, and the RAM
 * device's own index, unless a DEVICE_MAP names a card for it, names nothing (COORD_DEVMAP_NONE).
 */
#define COORD_DEVMAP_NONE 0xFF
void coord_devmap_init(const comem_coord_srv *s, conn *c);
/* The coordinator's index for a device a message of c names (its ordinal when it mapped it). */
uint16_t coord_device_in(const conn *c, uint16_t device);
/* The device as c names it: its ordinal for a mapped index, else the index. */
uint16_t coord_device_out(const conn *c, int index);
/* Warnings for status: ordinals of one process that are one card, devices that share a UUID. */
#define COORD_WARNING_MAX 192
size_t coord_device_warnings(comem_coord_srv *s, char (*out)[COORD_WARNING_MAX], size_t cap);

/* ---- hostram.c: host RAM as the ledger's last device ---- */
/* Reads device d from its source (a card, or host RAM with the ledger's processes tracked). */
int coord_read_device(comem_coord_srv *s, int d, comem_device_reading *r);
/* After a reading of host RAM: says once in the log each process whose unregistered RAM stayed beyond the bound. */
void coord_ram_warn(comem_coord_srv *s);
/* Status warnings: every process whose unregistered RAM is beyond the bound now. */
size_t coord_ram_warnings(comem_coord_srv *s, char (*out)[COORD_WARNING_MAX], size_t cap);
/* Status: host RAM's own figures (budget, machine, cgroup) for device d; NULL for a card. */
struct json_object;
struct json_object *coord_ram_json(const comem_coord_srv *s, int d);
#define COORD_RAM_WARN_BYTES ((int64_t)256 << 20) /* unregistered RAM beyond this is warned about */
#define COORD_RAM_WARN_MS 1000                    /* once it has stayed beyond it this long */

/* ---- handlers.c ---- */
void coord_handle(comem_coord_srv *s, conn *c, comem_msg *m);

/* ---- measure.c ---- */
/* Opens the device source, fills the ledger's device table and the pin ceilings, and inits the ledger. */
int coord_devices_open(comem_coord_srv *s);
/* Reads device now; updates floors and the view. */
int coord_measure(comem_coord_srv *s, int device);
/*
 * A grant booked at granted_ns became bytes of residency on device. A reading taken before the
 * grant cannot show them: it is corrected. One taken since may already count them: it is read
 * again instead, rather than count them twice.
 */
void coord_note_done(comem_coord_srv *s, int device, int64_t bytes, int64_t granted_ns);
/* The card changed where the ledger shows nothing (a receipt: what was freed shows on the card): the
   next decision reads it again. */
static inline void coord_card_changed(comem_coord_srv *s, int device) { s->meas[device].stale = true; }

/*
 * What a process holds on device beyond its entries and grants (its ledger floor), split for
 * status and the view: the bytes its holders report (census overhead: a raw holder's
 * allocations, an allocator's cache), its context (at most COMEM_CONTEXT_FLOOR, what a CUDA
 * context costs and what the coordinator books for a process's first one), and the rest, which
 * nothing registered: its unregistered bytes.
 */
typedef struct coord_floor_split {
    int64_t overhead, context, unregistered;
} coord_floor_split;
coord_floor_split coord_split_floor(const comem_coord_srv *s, uint64_t session, int device);
/* The same split, given Σ overhead of the session's holders on device (a caller that has it: no scan). */
coord_floor_split coord_split_floor_given(const comem_coord_srv *s, uint64_t session, int device, int64_t overhead);
/*
 * Before an entry of holder is added with `resident` bytes (or a census raises its entries'
 * residency by that much): those bytes may already be in the process's floor, as what it held
 * beyond its entries when the device was last read (host RAM: its RSS; a card: its unregistered
 * bytes, never its context or overhead). The floor gives them up, or the same bytes would be
 * counted twice until the next reading, and an entry registered after its bytes were read
 * refused for a device that "cannot hold that much". Returns the floor before (to put back if the
 * entry is refused), or -1 when the holder is not the session's.
 */
int64_t coord_floor_claim(comem_coord_srv *s, uint64_t session, uint64_t holder, int64_t resident);
/* The residency a census adds (Σ of its entries' growth), for coord_floor_claim. */
int64_t coord_census_growth(comem_coord_srv *s, const comem_msg_census *m);

/* Republishes the shared-memory view of device (figures that changed in the ledger). */
void coord_publish_view(comem_coord_srv *s, int device);

/* ---- room.c: one definition of room, for the socket path and the booking areas ---- */
/* The room decisions start from, without reading the card: the last reading less grants (and
   grants filled since). coord_available is this less what the booking areas hold. */
int64_t coord_ledger_room(const comem_coord_srv *s, int device);
/*
 * True free usable for a decision on device: the last reading minus outstanding grants and the
 * grants filled since, when it is recent and nothing has changed since (the ledger's generation
 * is the reading's, and the card was not said to have moved); otherwise (or with fresh) the card
 * is read first. 0 when the device cannot be read: nothing is admitted on a guess.
 */
int64_t coord_available(comem_coord_srv *s, int device, bool fresh);
/* What the stocks on device may share: the ledger room, never beyond what the ledger would book. */
int64_t coord_stock_room(const comem_coord_srv *s, int device);
/* The two terms a session's admission target adds on device dev beyond the weights and working
   memory: the reserve it keeps, and the context floor when it has none there yet. Admissions and
   the booking areas' stocks both use it. */
void coord_target_terms(comem_coord_srv *s, uint64_t session, int dev, int64_t *reserve, int64_t *floor_add);
/* An admission's ask target on dev: the card's rule (or host RAM's) with those terms. */
int64_t coord_need(comem_coord_srv *s, uint64_t session, int dev, int64_t weights, int64_t working);

/* ---- book.c: the booking areas (shm/book.h) ---- */
/* Reads COMEM_NO_FAST; areas are made per session. */
void coord_book_open(comem_coord_srv *s);
/* At HELLO, before the reply: a host's or worker's area, shared with its process (*share); false: none. */
bool coord_book_session_start(comem_coord_srv *s, conn *c, int role, comem_shm_token *share);
/* A session ends: its area and its stock go (before the ledger drops its grants). */
void coord_book_session_end(comem_coord_srv *s, conn *c);
/* The coordinator decides on device itself: every stock there is taken back (to what may be charged). */
void coord_book_close_device(comem_coord_srv *s, int device);
/* A session was granted an admission on device: it keeps a stock there for a while. */
void coord_book_wants(comem_coord_srv *s, uint64_t session, int device);
/* Bytes held out of the room as stocks (decisions subtract them). */
int64_t coord_fast_inflight(const comem_coord_srv *s, int device);
/* Bytes booked in areas and not yet in the ledger (what sessions say, bounded by their stocks). */
int64_t coord_fast_booked(comem_coord_srv *s, int device);
/* The largest limit published on device (BOOK_CLOSED: none open). */
int64_t coord_fast_limit(const comem_coord_srv *s, int device);
/* Turns what clients booked since last looked into ledger grants (before a reading: floors subtract grants). */
void coord_book_reconcile(comem_coord_srv *s);
/* Publishes a session's limit on d (seq_cst: a take-back reads `charged` after it). */
void coord_book_limit(book_sess *bs, int d, int64_t lim);
/* Takes a session's unspent stock on d back down to `to` (0: the limit closes). */
void coord_book_take_back(book_sess *bs, int d, int64_t to);
/* Every live area's words checked (limits and map are the coordinator's; charged never below 0). */
void coord_book_police(comem_coord_srv *s);
/* Every live area's ordinal -> device map, as the sessions' DEVICE_MAPs say now. */
void coord_book_publish_maps(comem_coord_srv *s);
/* The turn's end: reconciled bytes taken out of `charged` (after the new limits), and confirmed. */
void coord_book_confirm(comem_coord_srv *s, int64_t now);

/* ---- stock.c ---- */
/* End of a loop turn: reconciles new bookings, refills and takes back stocks, publishes the limits. */
void coord_book_sync(comem_coord_srv *s);
/* What a finished grant or booking filled: bytes of residency on device since granted_ns (-1: none). */
typedef struct coord_filled {
    int device;
    int64_t bytes, granted_ns;
} coord_filled;
/*
 * GRANT_DONE naming a booking (grant id BOOK_REF_BIT | record << 32 | seq): the booking turns into
 * residency in entry like a grant, *filled saying what it filled (the caller notes it in the reading
 * and the reserve, as for a grant). Returns the reply's status (COMEM_ENOENT: no such booking now).
 */
int coord_book_grant_done(comem_coord_srv *s, conn *c, uint64_t ref, uint64_t entry, int64_t used,
                          coord_filled *filled);
/* Bookings flow: the loop should look often. */
bool coord_book_active(const comem_coord_srv *s);

/* ---- reserve.c ---- */
/* Recomputes the published reserve of device; shrink only with evidence. */
void coord_publish_reserve(comem_coord_srv *s, int device, bool shrink_allowed);
/* What one session's process should keep free on device, and its pager headroom. */
int64_t coord_reserve_for(comem_coord_srv *s, uint64_t session, int device, int64_t *pager_headroom);
/* The charge one session adds to device's reserve. */
int64_t coord_charge_of(comem_coord_srv *s, uint64_t session, int device);
/*
 * What the device-wide true free must keep on device: the operator's base (the published reserve
 * until a base is set). The tight-card test, the card's own pressure and pins on a unified device
 * compare with it: the published reserve adds what a host with a process-local reading cannot see,
 * which a device-wide figure already counts, so adding it here would count every worker twice.
 */
int64_t coord_base_reserve(const comem_coord_srv *s, int device);

/* ---- admit.c ---- */
void coord_admit(comem_coord_srv *s, conn *c, uint32_t request_id, const comem_msg_admit *a);
void coord_pressure(comem_coord_srv *s, conn *c, uint32_t request_id, const comem_msg_pressure *p);
/* A session ended: its jobs are dropped, and jobs waiting on its holders move on. */
void coord_jobs_session_ended(comem_coord_srv *s, uint64_t session);
/* The turn's end: admissions unanswered past their ack_due_ns are acknowledged (ADMIT_QUEUED). */
void coord_jobs_ack(comem_coord_srv *s, int64_t now_ns);
void coord_jobs_tick(comem_coord_srv *s, int64_t now_ns);

/* ---- grants that outlive their coordinator (reclaim.c) ---- */

#define COORD_RECLAIM_MS 5000 /* how long inherited grants are kept for their clients to reclaim */
/* Reads the outstanding grants the previous coordinator published in the view: before this one publishes. */
void coord_reclaim_inherit(comem_coord_srv *s);
/* What is still kept of them on device (room subtracts it). */
int64_t coord_inherited(const comem_coord_srv *s, int device);
/* Closes the window when its time has come: what nobody reclaimed is room again. */
void coord_reclaim_tick(comem_coord_srv *s, int64_t now_ns);
/* RECLAIM: books a grant a client still holds from the previous coordinator; ID_REPLY with its new id. */
void coord_reclaim(comem_coord_srv *s, conn *c, uint32_t rid, const comem_msg_reclaim *m);
/* ---- receipt_check.c: a receipt against the card ---- */
/* Process pid's use of device as an ask goes out (a reading under 1 ms old serves); -1 when the card
   does not say (WDDM, no per-process figures). */
/* apps.c: app holders (a holder whose memory is another process's). The process whose memory holder h
   of connection c is. */
int32_t coord_holder_process(const ledger_holder *h, const conn *c);
/* Whether c may add a holder for process pid (HOLDER_ADD's pid): COMEM_OK with *app_pid set (0: c's
   own process), else a status and why. */
int coord_app_claim(comem_coord_srv *s, const conn *c, uint32_t pid, int32_t *app_pid, char *why, size_t len);
/* The app pids of holders on device (every device when device < 0), at most max of them. */
size_t coord_app_pids(const comem_coord_srv *s, int device, int32_t *pids, size_t max);
int64_t coord_card_use_at_ask(comem_coord_srv *s, int device, int32_t pid);
/* Queues a receipt's check against the next reading of its device. */
void coord_receipt_check(comem_coord_srv *s, const ask *a, const ledger_holder *h, int32_t pid, int64_t freed);
/* After a reading of device: flags holders (receipts_contradicted, one warning) whose receipts'
   bytes the card did not see leave. */
void coord_receipt_checks_run(comem_coord_srv *s, int device);

/* A holder reached a node boundary (or a process ended): admissions waiting for one plan again. */
void coord_jobs_boundary(comem_coord_srv *s);

/* ---- asks.c ---- */
/*
 * Sends an ask for bytes (with per-entry amounts, n of them, possibly 0) to holder, owned by
 * done/owner. Returns its id; 0 when the holder's session has no connection or COORD_MAX_ASKS wait.
 */
uint64_t coord_ask(comem_coord_srv *s, uint64_t holder, uint8_t kind, int64_t bytes, const comem_wire_release *items,
                   uint16_t n, coord_ask_done done, uint64_t owner);
/*
 * Sends a release plan (coord/plan.c) as COMEM_ASK_RELEASE asks, one per holder listing its
 * entries' amounts, owned by done/owner. Writes the holders asked, in plan order, to asked (room
 * for n; may be NULL) and their total to *bytes (may be NULL). Returns how many asks went out.
 */
size_t coord_ask_plan(comem_coord_srv *s, coord_planned *plan, size_t n, coord_ask_done done, uint64_t owner,
                      uint64_t *asked, int64_t *bytes);
void coord_receipt(comem_coord_srv *s, conn *c, const comem_msg_receipt *r);
/* A RELEASE request: ask the holder of another session's entry and relay its receipt. */
void coord_release(comem_coord_srv *s, conn *c, uint32_t request_id, const comem_msg_release *r);
void coord_asks_tick(comem_coord_srv *s, int64_t now_ns);
void coord_asks_session_ended(comem_coord_srv *s, uint64_t session);

/* ---- idle.c ---- */
void coord_idle_tick(comem_coord_srv *s, int64_t now_ns);
/* A pin request fell short: ask other sessions' pin holders for their share (rate-limited). */
void coord_pin_pressure(comem_coord_srv *s, uint64_t requester, int64_t shortfall);

/* ---- pressure.c ---- */
/* Asks holders for what a device is short of its reserve, when nobody's request explains it. */
void coord_pressure_tick(comem_coord_srv *s, int64_t now_ns);

/* ---- wddm.c ---- */
/* WDDM: the session's report replaces its last. */
void coord_wddm(comem_coord_srv *s, conn *c, const comem_msg_wddm *m);
/* Every adapter reported, its usage summed over the sessions that reported it (a json_object array). */
struct json_object *coord_wddm_json(comem_coord_srv *s);
/*
 * What session's process used of device beyond what the ledger saw it hold, by its newest WDDM report
 * naming that device (from any of its sessions): its context and allocations nobody registered, the
 * context floor where the card gives no per-process figure (NVML under WDDM). -1: no such report.
 */
int64_t coord_wddm_overhead(comem_coord_srv *s, uint64_t session, int device);
/*
 * session registered `bytes` resident on device that no grant had booked (an entry, a census's growth):
 * allocated before, they may be in its process's last report already. Its overhead gives them up, down
 * to a context (as coord_floor_claim does for a card's own figure), until the next report says.
 */
void coord_wddm_registered(comem_coord_srv *s, uint64_t session, int device, int64_t bytes);
/* A session's report goes with it: the devices its report named are read again. */
void coord_wddm_forget(comem_coord_srv *s, conn *c);

/* ---- status.c ---- */
/* The status snapshot as JSON text (malloc'd). */
char *coord_status_json(comem_coord_srv *s);

#endif
