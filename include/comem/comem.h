/*
 * comem/comem.h - the client library: join the machine-wide ledger, register
 * what you hold, ask before you load, answer release asks.
 *
 * A process opens one client. The client connects to the coordinator on the
 * per-user Unix socket (or starts one inside this process when asked to), and
 * runs two threads of its own: a service thread that reads frames and
 * matches replies (a caller waiting alone reads its own reply, with no thread
 * wake-up), and a callback thread that runs the holders' release callbacks,
 * never on the caller's threads. An admission that fits the room the
 * coordinator published is booked in shared memory without a round trip
 * (docs/booking.md; COMEM_NO_FAST=1 turns that off). Every call that waits takes a timeout. If no coordinator
 * can be reached the client works locally (decisions from this process's own
 * device reading) and says so once in the log; it keeps trying to connect in
 * the background and re-registers everything when it gets through, and again
 * after a coordinator restart, so nothing is booked twice.
 *
 * The API is what a ctypes binding calls as it is: opaque handles, plain C
 * types, callbacks that take a user pointer, no structs passed by value (one
 * flat record, comem_admission, is filled through a pointer).
 * Identifiers returned here (holders, entries, grants) are this client's own
 * and stay valid across reconnects. All functions are thread-safe.
 *
 * A client serves the process that opened it. A child forked after
 * comem_client_open has a copy but none of its threads, and the coordinator
 * knows the connection as the parent's session: every call the child makes on
 * it returns COMEM_EFORKED (comem_take_reason: "this client was opened by pid
 * P; a forked child (pid Q) must open its own"; comem_client_connected and
 * comem_client_session answer 0), nothing reaches the coordinator, and
 * comem_client_close in the child only lets go of the child's copy. The child
 * opens its own client. The parent's session, entries and grants are untouched.
 */
#ifndef COMEM_COMEM_H
#define COMEM_COMEM_H

#include <stddef.h>
#include <stdint.h>

#include "comem/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct comem_client comem_client;

/* Roles (what this process is to the ledger). */
#define COMEM_CLIENT_HOST 1   /* owns the main model list; publishes the reserve */
#define COMEM_CLIENT_WORKER 2 /* an isolated process holding its own models */
#define COMEM_CLIENT_TOOL 3   /* only looks (status) */

/* comem_client_open flags. */
#define COMEM_OPEN_EMBED 1u      /* start a coordinator thread in this process if none answers */
#define COMEM_OPEN_NO_LOCAL 2u   /* fail with COMEM_ECLOSED instead of working locally */

/*
 * Opens a client. socket_path NULL means COMEM_SOCKET, else the per-user
 * socket ($XDG_RUNTIME_DIR/comem/comem.sock or /tmp/comem-<uid>/comem.sock).
 * name identifies this process in logs and status ("host", "sam3").
 * reserve_base is the operator reserve the host reads once (ComfyUI's
 * EXTRA_RESERVED_VRAM before anyone adds to it); pass -1 when unknown or not
 * a host. The token, when the coordinator requires one, comes from COMEM_TOKEN.
 * An embedded coordinator uses COMEM_DEVICE (default: a GPU via NVML, else a
 * simulated 24 GiB card).
 */
COMEM_API int comem_client_open(const char *socket_path, int role, const char *name, int64_t reserve_base,
                                unsigned flags, comem_client **out);

/*
 * Does a coordinator answer at socket_path (NULL: COMEM_SOCKET, else the
 * default)? One attempt as a tool, waiting at most timeout_ms (< 0: 10 s);
 * one line for a person goes to why (whylen bytes; may be NULL): who answered,
 * or why nobody did. Returns COMEM_OK, or the reason: COMEM_ENOENT (nothing at
 * the path), COMEM_EINVAL (not a socket, or COMEM_TOKEN unusable),
 * COMEM_ECLOSED (a socket nobody listens on, or closed without a word),
 * COMEM_EPERM (refused: another user's coordinator, or a bad token),
 * COMEM_EBUSY (full, or not accepting connections), COMEM_ETIMEDOUT (accepted
 * the connection but did not answer: frozen, e.g. stopped, or overloaded),
 * COMEM_EVERSION (a coordinator of another comem install: it answered in
 * another protocol version, or refused this one's).
 */
COMEM_API int comem_probe(const char *socket_path, int timeout_ms, char *why, size_t whylen);

/*
 * comem_probe, and who answered, for a program that decides what to do about
 * it (python/comem/autostart.py: start a coordinator, or name the other one).
 * *pid (may be NULL): the process that took the connection, as the system
 * names it (SO_PEERCRED; on Windows the pipe's server), 0 when it does not
 * name it (another pid namespace), -1 when no connection was made or kept
 * (nothing listens there: COMEM_ENOENT, COMEM_ECLOSED; or COMEM_EBUSY,
 * COMEM_EPERM before a byte was sent). *version (may be NULL): with
 * COMEM_EVERSION the protocol version that coordinator speaks, 0 when it
 * refused this one's without naming its own; otherwise the version of the
 * frame it answered with (this library's), 0 when none came. Returns what
 * comem_probe returns.
 */
COMEM_API int comem_probe_peer(const char *socket_path, int timeout_ms, int64_t *pid, int *version, char *why,
                               size_t whylen);

/*
 * Unregisters everything, stops its threads (and an embedded coordinator), frees.
 * In a forked child: closes the child's copies of the client's descriptors and
 * nothing else (no word to the coordinator, no thread joined).
 */
COMEM_API void comem_client_close(comem_client *c);

/* 1 when talking to a coordinator now, 0 in local-only mode. */
COMEM_API int comem_client_connected(comem_client *c);

/*
 * The coordinator's id for this process's session (as comem_status_json lists
 * it under "session"), 0 in local-only mode. It changes when the client
 * reconnects to a new coordinator.
 */
COMEM_API uint64_t comem_client_session(comem_client *c);

/*
 * Says which card this process's device `ordinal` is (its CUDA ordinal, as
 * CUDA_VISIBLE_DEVICES numbers them), by the card's UUID ("GPU-...", as
 * NVML and cuDeviceGetUuid give it; a simulated card's "SIM-..."). From then
 * on the device this client names in every call is its own ordinal, and two
 * processes that see one card under different ordinals are charged on that
 * card. Call it before registering holders on the device; it is replayed on
 * every reconnect. COMEM_ENODEV when the coordinator reads no card with that
 * UUID (the ordinal then stays the coordinator's index), COMEM_EINVAL for an
 * ordinal outside [0, 16) or an empty or overlong UUID.
 */
COMEM_API int comem_client_map_device(comem_client *c, int ordinal, const char *uuid);

/*
 * The device ordinal every process names host RAM by, when the coordinator
 * serves it (comemd --ram, COMEM_RAM; docs/hostram.md): holders, entries,
 * admissions, pressure and reserves on it are host RAM's, budgeted across
 * processes as a card is. It is the last ordinal, so it never collides with
 * a CUDA ordinal below 15. Calls on it fail COMEM_ENODEV where RAM is off.
 * comem_device_host_ram returns the same number, for bindings.
 */
#define COMEM_DEVICE_HOST_RAM (COMEM_MAX_DEVICES - 1)
COMEM_API int comem_device_host_ram(void);

/*
 * The value of one of the public constants of this build, by its name without
 * the COMEM_ prefix ("EBUSY", "KIND_PINS", "MAX_DEVICES", comem/calc.h's
 * "CALC_KEEP", "COMFYUI_V039", ..., "COMEMD_EXIT_TAKEN"), plus "MAX_KEEP"
 * (entries one admission may keep), "NAME_MAX" (bytes of a name), the
 * layout of comem_admission ("ADMISSION_SIZE", "ADMISSION_OFFSET_GRANT", ...),
 * "RESERVE_DEFAULT" (ComfyUI's 400 MiB reserve where none is said) and the
 * protocol's "WIRE_MAGIC" and "WIRE_VERSION": for bindings, which must not
 * copy them. *found (may be NULL) is 0 and 0 is returned for a name not in
 * the table.
 */
COMEM_API int64_t comem_constant(const char *name, int *found);

/* The default timeout (ms) for calls that take timeout_ms < 0. Default 10000. */
COMEM_API void comem_client_set_timeout(comem_client *c, int timeout_ms);

/*
 * The reason the coordinator gave for the last call this thread made that it
 * refused ("the device cannot hold that much"), the text the library also
 * logs: copied into buf (NUL-terminated, cut to len) and forgotten, so one
 * refusal is told once. Returns its length, 0 when there is none. Like errno,
 * read it right after the call that failed.
 */
COMEM_API size_t comem_take_reason(char *buf, size_t len);

/* ---- holders and entries ---- */

/* Holder kinds. */
#define COMEM_KIND_MODELS 1
#define COMEM_KIND_PAGER 2
#define COMEM_KIND_PINS 3
#define COMEM_KIND_RAW 4

/* Holder flags: what asks this holder answers. */
#define COMEM_ANSWERS_RELEASE 1u      /* sized releases of device memory */
#define COMEM_ANSWERS_IDLE 2u         /* full release when idle */
#define COMEM_ANSWERS_PINS 4u         /* pinned host RAM releases */
#define COMEM_RELEASES_WHILE_BUSY 8u  /* may release while computing (a pager) */

/* Ask kinds passed to a release callback. */
#define COMEM_RELEASE_BYTES 1 /* free `bytes` of device memory */
#define COMEM_RELEASE_IDLE 2  /* idle: free all you can */
#define COMEM_RELEASE_PINS 3  /* free `bytes` of pinned host RAM */

/*
 * A release callback, run on the client's callback thread (one ask at a time;
 * calls made from it may wait like any other, since the service thread keeps
 * delivering replies). entries/amounts
 * (n of them, possibly 0) say how the coordinator planned the bytes over this
 * holder's entries; the holder may free differently. Write the bytes actually
 * freed to *freed and return COMEM_OK, or return COMEM_EBUSY when it cannot
 * release now (it must not block waiting for its compute to finish). After a
 * release, report the new residency with comem_entry_set_resident (the
 * callback may do so itself: a report from the callback that shrinks an entry
 * of the asked holder is sent with the receipt, not on its own).
 */
typedef int (*comem_release_fn)(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                                const int64_t *amounts, size_t n, int64_t *freed);

/* Registers a holder of memory on device; fn may be NULL if flags is 0. */
COMEM_API int comem_holder_add(comem_client *c, const char *name, int device, int kind, unsigned flags,
                               comem_release_fn fn, void *user, uint64_t *holder);

/*
 * Registers an app holder: a holder of memory that process pid holds on device, a process that never
 * joins the ledger itself (an LLM server: docs/apps.md), with this client speaking for it. The
 * coordinator reads that process's use of the card (its RSS on COMEM_DEVICE_HOST_RAM) for the
 * holder's asks and receipts. Refused with COMEM_EPERM when pid runs as another user than the
 * coordinator, COMEM_ENOENT when there is no such process, COMEM_EEXIST when it has a session of its
 * own or another holder speaks for it already; pid 0 or this process's own is comem_holder_add.
 */
COMEM_API int comem_holder_add_app(comem_client *c, const char *name, int device, int pid, unsigned flags,
                                   comem_release_fn fn, void *user, uint64_t *holder);
COMEM_API int comem_holder_remove(comem_client *c, uint64_t holder);

/*
 * Marks a node boundary: busy=1 when a holder (0: the whole process) starts
 * computing, busy=0 when it stops. prompt names the prompt served (may be NULL).
 * A busy holder is not asked, unless it releases while busy.
 */
COMEM_API int comem_holder_busy(comem_client *c, uint64_t holder, int busy, const char *prompt);

/*
 * Says a holder was in use just now, between node boundaries (a pager that
 * faulted): if it is idle, its idle clock in the coordinator starts again, so
 * idle release does not empty a holder that is working. One frame, no reply
 * waited for; nothing is sent while the coordinator is unreachable (a
 * reconnect registers the holder again, with a fresh clock). Cheap, but not
 * free (one write to the socket): callers send it at most a few times a
 * second. Returns COMEM_OK, or COMEM_ENOENT for a holder this client does not have.
 */
COMEM_API int comem_holder_touch(comem_client *c, uint64_t holder);

/*
 * Windows: reads this process's own WDDM budget and usage of each adapter (DXGI; under WDDM only a
 * process can read what it uses of a card) and tells the coordinator, which adds up every
 * process's per adapter (`comem status --json`'s "wddm"). Also sent by itself at every node's end
 * (comem_holder_busy with busy 0). Not waited on. COMEM_OK when told; COMEM_ENOTSUP where there is
 * no WDDM (Linux; Windows before 10); COMEM_ENOENT when DXGI describes no hardware adapter;
 * COMEM_ECLOSED when no coordinator is connected.
 */
COMEM_API int comem_wddm_report(comem_client *c);

#define COMEM_ENTRY_PAGED 1u /* resident bytes are paged on demand (dynamic) */
/*
 * What getting a host RAM entry's bytes back costs (docs/hostram.md), at most
 * one of them: release asks take RAM-cache entries first, then copies a file
 * can give back, then every other entry. Without either an entry is "other".
 */
#define COMEM_ENTRY_RAM_CACHE 2u /* a RAM-cache entry (outputs a node can compute again) */
#define COMEM_ENTRY_RAM_FILE 4u  /* a copy that can be read again from a file (an mmap'd checkpoint) */

/* Registers one model (or buffer) of a holder: its full size and resident bytes now. */
COMEM_API int comem_entry_add(comem_client *c, uint64_t holder, const char *name, int64_t size, int64_t resident,
                              unsigned flags, uint64_t *entry);
COMEM_API int comem_entry_remove(comem_client *c, uint64_t entry);

/* Reports an entry's resident bytes now (sent as a census with a new sequence number). */
COMEM_API int comem_entry_set_resident(comem_client *c, uint64_t entry, int64_t resident);

/*
 * Reports an entry's resident bytes and the references its holder counts on
 * it (ComfyUI's sys.getrefcount of the model), in one census; either may be
 * -1: unchanged. Across processes, among equally offloaded entries the one
 * with fewer references is evicted first; an entry never reported counts 0.
 */
COMEM_API int comem_entry_census(comem_client *c, uint64_t entry, int64_t resident, int64_t refs);

/* Reports a holder's pinned host RAM and allocator overhead (either may be -1: unknown). */
COMEM_API int comem_holder_report(comem_client *c, uint64_t holder, int64_t pinned, int64_t overhead);

/* ---- admission ---- */

/*
 * Asks to load `weights` bytes onto device for holder (0: none), with
 * `inference` bytes of working memory and `cast_forward` bytes of cast
 * buffers. keep lists entries (this client's ids) that must not be asked to
 * release. An admission that fits the room the coordinator published is
 * booked in shared memory, with no round trip (its figures: need, and the room
 * it saw as free before and after; nobody asked); the others go to the
 * coordinator. On COMEM_OK the bytes are booked as grant *grant until
 * comem_grant_done; COMEM_ENOSPC means refused, with *short_by the missing
 * bytes. grant and short_by may be NULL. timeout_ms < 0: the default.
 * comem_admit_record gives the whole decision.
 */
COMEM_API int comem_admit(comem_client *c, int device, uint64_t holder, int64_t weights, int64_t inference,
                          int64_t cast_forward, const uint64_t *keep, size_t n_keep, int timeout_ms, uint64_t *grant,
                          int64_t *short_by);

/* The holder ids one admission record names at most (the first ones asked). */
#define COMEM_ADMISSION_ASKED_MAX 64

/*
 * One admission's decision, as comem_admit_record writes it: one flat record,
 * the caller's, filled by the call that decided and read by field name. A
 * binding checks its copy of the layout against the library's at load time
 * (comem_constant: "ADMISSION_SIZE", "ADMISSION_OFFSET_<FIELD>", and
 * "ADMISSION_ASKED_MAX"). All zero when the call failed before a decision (a
 * bad argument, no coordinator under COMEM_OPEN_NO_LOCAL, a timeout).
 */
typedef struct comem_admission {
    uint64_t grant;      /* the grant, for comem_grant_done (0: refused, or no decision) */
    int64_t short_by;    /* refused: the bytes missing (0 otherwise) */
    int64_t fits;        /* the weights that fit: all of them when granted; when refused, the part that
                            would fit once short_by were free (comem_admit_fits), 0 when none would */
    int64_t need;        /* the ask target the decision used */
    int64_t free_before; /* true free before asking anyone */
    int64_t free_after;  /* true free after the receipts */
    int64_t freed;       /* bytes other holders reported freed for it */
    int32_t decided;     /* 1: a decision was made, and these are its figures; 0: none was */
    int32_t n_asked;     /* asks sent (a holder asked in two rounds counts twice) */
    int32_t n_busy;      /* holders that answered busy */
    int32_t n_ids;       /* how many of asked[] are set */
    uint64_t asked[COMEM_ADMISSION_ASKED_MAX]; /* the holders asked, in order: the coordinator's ids, as
                                                  comem_status_json lists them (0 when local or nobody) */
} comem_admission;

/*
 * comem_admit, with the whole decision written to *out (may be NULL): the
 * grant or how short it was, what fits, the figures the decision used, and
 * whom it asked. One call, one record, no state kept between calls. Returns
 * what comem_admit returns.
 */
COMEM_API int comem_admit_record(comem_client *c, int device, uint64_t holder, int64_t weights, int64_t inference,
                                 int64_t cast_forward, const uint64_t *keep, size_t n_keep, int timeout_ms,
                                 comem_admission *out);

/*
 * For callers written before comem_admit_record: the figures of the last
 * decision a comem_admit made on c, from any thread (the ask target, true
 * free before and after, bytes freed by others, holders asked and answering
 * busy). Any pointer may be NULL. All zero before the first. A caller that
 * admits from several threads, or wants whom it asked, uses comem_admit_record.
 */
COMEM_API void comem_admit_details(comem_client *c, int64_t *need, int64_t *free_before, int64_t *free_after,
                                   int64_t *freed, int *asked, int *busy);

/*
 * The weights of a refused admission of `weights` that would fit once it was
 * short by short_by (the rule's own inverse: weights count at 1.1x in the ask
 * target); 0 when nothing would. For a caller that loads part of a model
 * (comem_admit_record's `fits` is this figure).
 */
COMEM_API int64_t comem_admit_fits(int64_t weights, int64_t short_by);

/*
 * The grant's bytes are now resident in entry (0: cancelled); used is what was loaded.
 * COMEM_ENOSPC when the grant was lost with its coordinator: a restarted one keeps a
 * dead coordinator's grants for their clients to claim again, and this one could not
 * be booked again (the card had no room for it then); the residency still counts.
 */
COMEM_API int comem_grant_done(comem_client *c, uint64_t grant, uint64_t entry, int64_t used);

/*
 * At an out-of-memory retry site: asks idle siblings for `bytes` on device
 * before this process shrinks its work. *freed receives what came back.
 */
COMEM_API int comem_pressure(comem_client *c, int device, int64_t bytes, int timeout_ms, int64_t *freed);

/*
 * Asks the holder of another process's entry to release bytes of it, and
 * waits for its receipt: what a host's stand-in does when ComfyUI's own
 * eviction loop picks a worker's model. entry is the coordinator's id, as
 * comem_status_json lists it; bytes < 0 (or more than is resident) asks for
 * all of it. *freed receives the bytes the holder reported freed and
 * *resident the entry's resident bytes after (either may be NULL).
 * Returns COMEM_OK; COMEM_EBUSY when the holder is computing (nothing freed);
 * COMEM_ENOENT when the entry or its process is gone (*freed is then what the
 * entry held, if its process ended during the ask: those bytes came back with
 * it); COMEM_EINVAL for this process's own entry; COMEM_ENOTSUP for a holder
 * that does not answer release asks; COMEM_ECLOSED without a coordinator.
 */
COMEM_API int comem_ask_release(comem_client *c, uint64_t entry, int64_t bytes, int timeout_ms, int64_t *freed,
                                int64_t *resident);

/* ---- pinned host RAM, machine-wide ---- */

/* Books `bytes` of pinned RAM against the machine ceiling; COMEM_ENOSPC with *shortfall when over. */
COMEM_API int comem_pin_acquire(comem_client *c, uint64_t holder, int64_t bytes, int64_t *shortfall);
/* Gives back pinned RAM; COMEM_ERANGE (nothing changed) for more than the holder (0: the session) pinned. */
COMEM_API int comem_pin_release(comem_client *c, uint64_t holder, int64_t bytes);

/* ---- reserve and status ---- */

/*
 * The reserve this process should keep on device (EXTRA_RESERVED_VRAM for a
 * host: the published total; for a worker, minus its own charge) and the
 * headroom its pager should use. Any pointer may be NULL.
 */
COMEM_API int comem_reserve(comem_client *c, int device, int64_t *reserve, int64_t *pager_headroom);

/* The coordinator's status snapshot as JSON text; free it with comem_free. */
COMEM_API int comem_status_json(comem_client *c, char **json);

/* Frees memory comem handed out (status text). */
COMEM_API void comem_free(void *p);

/* ---- the shared-memory view: no round trip ---- */

/*
 * What a batch sizer should read instead of a process-local free figure: per
 * device, the coordinator's true free, the reserve, and the bytes other
 * processes could release now. Reading it is a few atomic loads on a file the
 * coordinator publishes next to its socket (socket_path NULL: the default).
 */
typedef struct comem_view comem_view;
COMEM_API int comem_view_open(const char *socket_path, comem_view **out);
/* Any out-pointer may be NULL. COMEM_ENODEV for a device the coordinator does not have;
   COMEM_EBUSY if a write stayed unfinished for 200 ms (the coordinator died mid-write). */
COMEM_API int comem_view_read(comem_view *v, int device, int64_t *capacity, int64_t *free_bytes, int64_t *reserve,
                              int64_t *reclaimable);
/*
 * Is the coordinator that publishes this view running? COMEM_OK: it holds the
 * view's lock and its heartbeat (every 20 ms) is recent; COMEM_ECLOSED: it
 * exited (the kernel dropped its lock, however it ended), so every figure is
 * what it was when it stopped; COMEM_ETIMEDOUT: it holds the lock but its
 * heartbeat is over 1 s old (stopped, or stuck). *heartbeat_age_ns (may be
 * NULL) receives the heartbeat's age, -1 when none. One system call; a
 * batch sizer reads figures with comem_view_read and asks this now and then.
 */
COMEM_API int comem_view_state(comem_view *v, int64_t *heartbeat_age_ns);

/*
 * The bytes processes in the ledger hold on device beyond what they registered
 * (entries, grants, holders' reported bytes) and their contexts: memory a
 * joined process allocated outside any holder. Errors as comem_view_read.
 */
COMEM_API int comem_view_unregistered(comem_view *v, int device, int64_t *bytes);
/*
 * The bytes granted on device and not yet reported resident (every process's
 * admissions in flight): free on the card's reading, and promised. A pager that
 * sizes itself by the reading (comfy-aimdo) must leave them. Errors as comem_view_read.
 */
COMEM_API int comem_view_granted(comem_view *v, int device, int64_t *bytes);
/*
 * The bytes nobody is promised on device: max(0, free - granted - reserve), from one
 * snapshot (so free and granted are of the same publication: a grant turning resident
 * moves both at once). -1 while the coordinator has no reading of the card. What a pager
 * that sizes itself by the card (comfy-aimdo) may still grow into. Errors as comem_view_read.
 */
COMEM_API int comem_view_room(comem_view *v, int device, int64_t *bytes);
COMEM_API void comem_view_close(comem_view *v);
/*
 * The view as this client's session received it: a copy the coordinator sealed so that no other
 * process can write it (the view file beside the socket, which comem_view_open reads, is the
 * user's to write: a process that decides by the view, as aimdo's steering does, reads this one).
 * It follows the client's current session across reconnects; the read calls above take it, and
 * comem_view_state says ECLOSED after the coordinator's orderly exit. Close it before the client.
 * COMEM_ECLOSED from a read while the client has no session with a sealed view (never connected,
 * or a coordinator that sends none).
 */
COMEM_API int comem_client_view(comem_client *c, comem_view **out);

/* ---- an embedded or standalone coordinator ---- */

typedef struct comem_coord comem_coord;

/*
 * Starts a coordinator on a thread of this process, listening on socket_path
 * (NULL: the default socket) and reading devices from device_spec (NULL:
 * COMEM_DEVICE, else auto). COMEM_EEXIST when another coordinator answers there
 * or holds the path's lock (socket_path.lock); COMEM_EPERM when something other
 * than a stale socket of this user is at the path (it is left untouched);
 * COMEM_EINVAL for a COMEM_TOKEN over 127 bytes or a COMEM_IDLE_SECONDS that is
 * not a positive number.
 */
COMEM_API int comem_coord_start(const char *socket_path, const char *device_spec, comem_coord **out);
COMEM_API void comem_coord_stop(comem_coord *coord);

/*
 * comemd's exit status when another coordinator already runs on its socket or
 * holds the socket's lock (comem_coord_start's COMEM_EEXIST): not a failure to
 * retry (the systemd unit's RestartPreventExitStatus), and how a program that
 * started comemd tells that its daemon lost the socket to another (comemd(8)
 * lists every status).
 */
#define COMEM_COMEMD_EXIT_TAKEN 3

/*
 * The rule every name follows (process, holder and entry names, prompt ids):
 * well-formed UTF-8 without control characters. COMEM_OK, or COMEM_EINVAL with
 * the rule it broke and the byte where in why (whylen 0: not written).
 */
COMEM_API int comem_name_check(const char *name, char *why, size_t whylen);

/* The default socket path for this user (creates the private directory). */
COMEM_API int comem_default_socket(char *buf, size_t len);
/*
 * The same, and on failure why (whylen 0: not written): what is wrong with the
 * runtime directory (COMEM_RUNTIME_DIR, $XDG_RUNTIME_DIR/comem or /tmp/comem-UID)
 * and how to put it right; the line the log has.
 */
COMEM_API int comem_default_socket_why(char *buf, size_t len, char *why, size_t whylen);
/*
 * This user's private runtime folder (created if needed, checked as the default socket's is):
 * where the default socket lives on Linux, and where the coordinator keeps its lock file and an
 * autostarted comemd its log on every system. COMEM_OK, or a status with why as above.
 */
COMEM_API int comem_runtime_dir_why(char *buf, size_t len, char *why, size_t whylen);

#ifdef __cplusplus
}
#endif
#endif
