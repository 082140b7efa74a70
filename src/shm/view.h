/*
 * shm/view.h - the shared-memory snapshot any local client reads without a round trip.
 *
 * The coordinator publishes, per device, its capacity, true free, the reserve,
 * the bytes other processes could release now (idle holders' resident bytes
 * and pagers' evictable pages) and outstanding grants, into a small file next
 * to its socket (<socket>.view, mode 0600). A reader maps it read-only and
 * copies a device's figures under a sequence lock: the writer makes the
 * sequence odd, writes, makes it even; a reader retries until it sees the same
 * even sequence before and after its copy. Every field is an atomic, so the
 * protocol is also clean under ThreadSanitizer.
 *
 * Liveness: the coordinator holds an open-file-description write lock on the
 * view's first byte for as long as it runs (the kernel drops it when the
 * process exits, however it exits) and writes a heartbeat every 20 ms, so a
 * reader tells a view whose coordinator exited (no lock) from a live one and
 * from a frozen one (locked, heartbeat old).
 */
#ifndef COMEM_SHM_VIEW_H
#define COMEM_SHM_VIEW_H

#define COMEM_VIEW_FROZEN_MS 1000 /* a heartbeat older than this: the coordinator is not running (stopped?) */

#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>

#include "os/shm.h"
#include "probe/device.h"

typedef struct comem_view_values {
    int64_t capacity;
    int64_t free;        /* true free at the last reading */
    int64_t reserve;     /* the published reserve */
    int64_t reclaimable; /* what others could release now */
    int64_t granted;     /* outstanding grants */
    int64_t updated_ns;   /* CLOCK_MONOTONIC of the reading the free figure comes from */
    int64_t unregistered; /* bytes processes in the ledger hold beyond what they registered and their contexts */
    int64_t published_ns; /* CLOCK_MONOTONIC when the coordinator wrote these figures (set by publish) */
} comem_view_values;

typedef struct comem_view_device {
    _Atomic int64_t capacity, free, reserve, reclaimable, granted, updated_ns, unregistered, published_ns;
} comem_view_device;

typedef struct comem_view_shared {
    uint64_t magic;
    uint32_t version;
    _Atomic uint32_t n_devices;
    _Atomic int32_t coord_pid;
    _Atomic uint64_t seq;
    _Atomic int64_t heartbeat_ns; /* CLOCK_MONOTONIC, written every 20 ms by a running coordinator */
    comem_view_device dev[COMEM_MAX_DEVICES];
} comem_view_shared;

typedef struct comem_view_writer {
    comem_view_shared *sh;
    struct view_file *file; /* where sh lives (shm/view_file.h) */
    char path[PATH_MAX];
    /* The same view in shared memory frozen against writes by anyone but this mapping
       (os/shm.h), handed to each session with its HELLO_REPLY: the copy a process of the
       user cannot forge (the file above is the user's to write). */
    comem_shm *sealed_shm;
    comem_view_shared *sealed;
} comem_view_writer;

/*
 * Creates the view file for socket_path, or reuses the one there (readers that
 * mapped it keep working) when it is a view of this user; anything else at
 * that path is left untouched and refused with COMEM_EPERM.
 */
int comem_view_writer_open(comem_view_writer *w, const char *socket_path, int n_devices);
/* A read-only share of the sealed copy for the session of process pid (os/shm.h); COMEM_ENOENT: none. */
int comem_view_sealed_share(const comem_view_writer *w, int64_t pid, comem_shm_token *out);
void comem_view_publish(comem_view_writer *w, int device, const comem_view_values *v);
/* Writes the heartbeat (now_ns, CLOCK_MONOTONIC). */
void comem_view_heartbeat(comem_view_writer *w, int64_t now_ns);
void comem_view_writer_close(comem_view_writer *w);

/* The pid of the coordinator that last published the view (reader side; 0 when unknown). */
struct comem_view;
int32_t comem_view_coord_pid(const struct comem_view *v);

/*
 * The sealed copy a session received, mapped read-only: a client keeps the current one in *slot
 * (swapped at each new session, never unmapped while the client lives). comem_view_bound makes a
 * reader of whatever *slot holds at each read (NULL: none now, COMEM_ECLOSED); its close frees
 * only the reader. comem_view_open_sealed opens the share the HELLO_REPLY named, only if it is a
 * frozen region of the view's size carrying the view's magic and version; NULL when it is not that.
 */
comem_shm *comem_view_open_sealed(comem_shm_token t);
struct comem_view *comem_view_bound(const comem_view_shared *_Atomic *slot);

/* The view file that belongs to a socket path. */
void comem_view_path(const char *socket_path, char *buf, size_t len);

#endif
