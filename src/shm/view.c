/* shm/view.c - the seqlock snapshot: the coordinator writes it, clients read it. */
#include "shm/view.h"
#include "base/bytes.h"
#include "shm/view_file.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "comem/comem.h"
#include "comem/common.h"
#include "os/env.h"

#define VIEW_MAGIC 0x5745495645454d43ULL /* "CMEEVIEW" */
#define VIEW_VERSION 3u /* 2: unregistered bytes; 3: heartbeat, publication time, a lock held for life */
#define VIEW_WAIT_NS (200 * 1000 * 1000LL) /* how long a reader waits out an unfinished write */

void comem_view_path(const char *socket_path, char *buf, size_t len) { snprintf(buf, len, "%s.view", socket_path); }

/* What a view that is there is to its writer: this layout's, an older comem's (replaced), or someone else's. */
static view_file_kind judge_view(const void *head, size_t head_len, int64_t file_size)
{
    uint64_t magic;
    uint32_t version;
    if (head_len < sizeof magic + sizeof version)
        return VIEW_FILE_FOREIGN;
    memcpy(&magic, head, sizeof magic);
    memcpy(&version, (const char *)head + sizeof magic, sizeof version);
    if (magic != VIEW_MAGIC)
        return VIEW_FILE_FOREIGN;
    return file_size == (int64_t)sizeof(comem_view_shared) && version == VIEW_VERSION ? VIEW_FILE_OURS
                                                                                       : VIEW_FILE_OLDER;
}

static int init_view(void *mem, const void *ctx)
{
    comem_view_shared *sh = mem;
    sh->magic = VIEW_MAGIC;
    sh->version = VIEW_VERSION;
    atomic_store(&sh->n_devices, *(const uint32_t *)ctx);
    return COMEM_OK;
}

static const view_file_layout k_layout = {
    .size = sizeof(comem_view_shared), .version = VIEW_VERSION, .judge = judge_view, .init = init_view};

/* The sealed twin: shared memory the coordinator maps writable and then freezes, so no other mapping
   can change it (os/shm.h); shared read-only with each session. */
static void open_sealed(comem_view_writer *w, int n_devices)
{
    comem_shm *m = NULL;
    int rc = comem_shm_create("comem-view", sizeof(comem_view_shared), &m);
    if (rc == COMEM_OK && (rc = comem_shm_freeze(m)) != COMEM_OK)
        comem_shm_close(m);
    if (rc != COMEM_OK) {
        comem_warn("cannot make a sealed copy of the status view (%s); sessions read the file only",
                   comem_status_str(rc));
        return;
    }
    comem_view_shared *sh = comem_shm_addr(m);
    sh->magic = VIEW_MAGIC;
    sh->version = VIEW_VERSION;
    atomic_store(&sh->n_devices, (uint32_t)n_devices);
    atomic_store(&sh->coord_pid, (int32_t)getpid());
    atomic_store(&sh->heartbeat_ns, comem_now_ns());
    w->sealed = sh;
    w->sealed_shm = m;
}

int comem_view_writer_open(comem_view_writer *w, const char *socket_path, int n_devices)
{
    memset(w, 0, sizeof *w);
    comem_view_path(socket_path, w->path, sizeof w->path);
    uint32_t n = (uint32_t)n_devices;
    view_file_layout layout = k_layout;
    layout.ctx = &n;
    void *mem = NULL;
    int rc = comem_view_file_create(w->path, &layout, &w->file, &mem);
    if (rc != COMEM_OK)
        return rc;
    comem_view_shared *sh = mem;
    /* Reused in place, so a reader that mapped it under a previous coordinator keeps working. */
    uint64_t s = atomic_load(&sh->seq);
    atomic_store(&sh->seq, (s | 1u) + 0); /* odd while we reset */
    atomic_store(&sh->n_devices, (uint32_t)n_devices);
    atomic_store(&sh->coord_pid, (int32_t)getpid());
    atomic_store(&sh->heartbeat_ns, comem_now_ns());
    atomic_store_explicit(&sh->seq, (s | 1u) + 1, memory_order_release);
    w->sh = sh;
    open_sealed(w, n_devices);
    return COMEM_OK;
}

int comem_view_sealed_share(const comem_view_writer *w, int64_t pid, comem_shm_token *out)
{
    return w->sealed_shm ? comem_shm_share(w->sealed_shm, pid, false, out) : COMEM_ENOENT;
}

static void publish_one(comem_view_shared *sh, int device, const comem_view_values *v);

void comem_view_publish(comem_view_writer *w, int device, const comem_view_values *v)
{
    if (!w->sh || device < 0 || device >= COMEM_MAX_DEVICES)
        return;
    publish_one(w->sh, device, v);
    if (w->sealed)
        publish_one(w->sealed, device, v);
}

static void publish_one(comem_view_shared *sh, int device, const comem_view_values *v)
{
    uint64_t s = atomic_load_explicit(&sh->seq, memory_order_relaxed);
    atomic_store_explicit(&sh->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    comem_view_device *d = &sh->dev[device];
    atomic_store_explicit(&d->capacity, v->capacity, memory_order_relaxed);
    atomic_store_explicit(&d->free, v->free, memory_order_relaxed);
    atomic_store_explicit(&d->reserve, v->reserve, memory_order_relaxed);
    atomic_store_explicit(&d->reclaimable, v->reclaimable, memory_order_relaxed);
    atomic_store_explicit(&d->granted, v->granted, memory_order_relaxed);
    atomic_store_explicit(&d->updated_ns, v->updated_ns, memory_order_relaxed);
    atomic_store_explicit(&d->unregistered, v->unregistered, memory_order_relaxed);
    atomic_store_explicit(&d->published_ns, comem_now_ns(), memory_order_relaxed);
    atomic_store_explicit(&sh->seq, s + 2, memory_order_release);
}

void comem_view_heartbeat(comem_view_writer *w, int64_t now_ns)
{
    if (w->sh)
        atomic_store_explicit(&w->sh->heartbeat_ns, now_ns, memory_order_relaxed);
    if (w->sealed)
        atomic_store_explicit(&w->sealed->heartbeat_ns, now_ns, memory_order_relaxed);
}

void comem_view_writer_close(comem_view_writer *w)
{
    if (w->sh)
        atomic_store(&w->sh->heartbeat_ns, 0); /* an orderly exit says so; a crash drops the lock */
    comem_view_file_close(w->file);
    if (w->sealed) {
        atomic_store(&w->sealed->heartbeat_ns, 0);
        comem_shm_close(w->sealed_shm);
    }
    w->sh = w->sealed = NULL;
    w->sealed_shm = NULL;
    w->file = NULL;
}

/* ---- the reader side (public API in comem/comem.h) ---- */

struct comem_view {
    const comem_view_shared *sh;
    view_file *file;                       /* says whether the coordinator runs (shm/view_file.h); NULL bound */
    const comem_view_shared *_Atomic *slot; /* a reader bound to a client's sealed copy (comem_view_bound) */
};

/* The snapshot a reader reads now: its own mapping, or what its client holds (NULL: none). */
static const comem_view_shared *shared_of(const comem_view *v)
{
    return v->slot ? atomic_load_explicit(v->slot, memory_order_acquire) : v->sh;
}

comem_shm *comem_view_open_sealed(comem_shm_token t)
{
    comem_shm *m = NULL;
    if (comem_shm_open(t, sizeof(comem_view_shared), COMEM_SHM_FROZEN, &m) != COMEM_OK)
        return NULL; /* not a copy nobody else can write */
    const comem_view_shared *sh = comem_shm_addr(m);
    if (sh->magic != VIEW_MAGIC || sh->version != VIEW_VERSION) {
        comem_shm_close(m);
        return NULL;
    }
    return m;
}

comem_view *comem_view_bound(const comem_view_shared *_Atomic *slot)
{
    comem_view *v = calloc(1, sizeof *v);
    if (v)
        v->slot = slot;
    return v;
}

int comem_view_open(const char *socket_path, comem_view **out)
{
    char sock[PATH_MAX], path[PATH_MAX + 8];
    if (!out)
        return COMEM_EINVAL;
    if (!socket_path) {
        const char *env = comem_env("COMEM_SOCKET");
        if (env && *env) {
            snprintf(sock, sizeof sock, "%s", env);
        } else {
            int rc = comem_default_socket(sock, sizeof sock);
            if (rc != COMEM_OK)
                return rc;
        }
        socket_path = sock;
    }
    comem_view_path(socket_path, path, sizeof path);
    view_file *f = NULL;
    const void *mem = NULL;
    int rc = comem_view_file_open(path, &k_layout, &f, &mem);
    if (rc != COMEM_OK)
        return rc;
    const comem_view_shared *sh = mem;
    if (sh->magic != VIEW_MAGIC || sh->version != VIEW_VERSION) {
        comem_view_file_close(f);
        return COMEM_EPROTO;
    }
    comem_view *v = malloc(sizeof *v);
    if (!v) {
        comem_view_file_close(f);
        return COMEM_ENOMEM;
    }
    v->sh = sh;
    v->file = f;
    v->slot = NULL;
    *out = v;
    return COMEM_OK;
}

/* One device's figures, copied under the sequence lock. */
static int snapshot(comem_view *v, int device, comem_view_values *out)
{
    if (!v || device < 0 || device >= COMEM_MAX_DEVICES)
        return COMEM_EINVAL;
    const comem_view_shared *sh = shared_of(v);
    if (!sh)
        return COMEM_ECLOSED; /* a client's reader with no session now */
    if (device >= (int)atomic_load_explicit(&sh->n_devices, memory_order_relaxed))
        return COMEM_ENODEV;
    comem_view_shared *w = (comem_view_shared *)sh; /* atomics need a non-const object; we only load */
    comem_view_values x = {0};
    int64_t give_up_ns = 0;
    for (unsigned tries = 0;; tries++) {
        uint64_t s1 = atomic_load_explicit(&w->seq, memory_order_acquire);
        if (s1 & 1u) {
            /* A write takes nanoseconds unless the writer was preempted inside it; then
               spinning only steals its CPU. Yield after a short spin and give up only after
               VIEW_WAIT_NS of wall time (a coordinator that died mid-write leaves it odd). */
            if (tries < 64)
                continue;
            if (give_up_ns == 0)
                give_up_ns = comem_now_ns() + VIEW_WAIT_NS;
            else if (comem_now_ns() > give_up_ns)
                return COMEM_EBUSY;
            sched_yield();
            continue;
        }
        comem_view_device *d = &w->dev[device];
        x.capacity = atomic_load_explicit(&d->capacity, memory_order_relaxed);
        x.free = atomic_load_explicit(&d->free, memory_order_relaxed);
        x.reserve = atomic_load_explicit(&d->reserve, memory_order_relaxed);
        x.reclaimable = atomic_load_explicit(&d->reclaimable, memory_order_relaxed);
        x.unregistered = atomic_load_explicit(&d->unregistered, memory_order_relaxed);
        x.granted = atomic_load_explicit(&d->granted, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&w->seq, memory_order_relaxed) == s1)
            break;
    }
    *out = x;
    return COMEM_OK;
}

int comem_view_read(comem_view *v, int device, int64_t *capacity, int64_t *free_bytes, int64_t *reserve,
                    int64_t *reclaimable)
{
    comem_view_values x;
    int rc = snapshot(v, device, &x);
    if (rc != COMEM_OK)
        return rc;
    if (capacity)
        *capacity = x.capacity;
    if (free_bytes)
        *free_bytes = x.free;
    if (reserve)
        *reserve = x.reserve;
    if (reclaimable)
        *reclaimable = x.reclaimable;
    return COMEM_OK;
}

int comem_view_state(comem_view *v, int64_t *heartbeat_age_ns)
{
    if (heartbeat_age_ns)
        *heartbeat_age_ns = -1;
    if (!v)
        return COMEM_EINVAL;
    const comem_view_shared *sh = shared_of(v);
    if (!sh)
        return COMEM_ECLOSED;
    int64_t hb = atomic_load_explicit(&((comem_view_shared *)sh)->heartbeat_ns, memory_order_relaxed);
    int64_t age = hb > 0 ? comem_now_ns() - hb : -1;
    if (heartbeat_age_ns)
        *heartbeat_age_ns = age;
    /* Is the coordinator's liveness mark there (shm/view_file.h)? A client's reader has no file: an
       orderly exit zeroes the heartbeat, anything else ages it. */
    int alive = v->file ? comem_view_file_alive(v->file) : -1;
    if (alive == 0)
        return COMEM_ECLOSED; /* nobody holds it: the coordinator exited */
    if (alive < 0 && hb == 0)
        return COMEM_ECLOSED; /* no mark to look at: an orderly exit zeroed the heartbeat */
    if (age < 0 || age > (int64_t)COMEM_VIEW_FROZEN_MS * 1000000)
        return COMEM_ETIMEDOUT;
    return COMEM_OK;
}

int comem_view_unregistered(comem_view *v, int device, int64_t *bytes)
{
    comem_view_values x;
    int rc = snapshot(v, device, &x);
    if (rc == COMEM_OK && bytes)
        *bytes = x.unregistered;
    return rc;
}

int comem_view_granted(comem_view *v, int device, int64_t *bytes)
{
    comem_view_values x;
    int rc = snapshot(v, device, &x);
    if (rc == COMEM_OK && bytes)
        *bytes = x.granted;
    return rc;
}

int comem_view_room(comem_view *v, int device, int64_t *bytes)
{
    comem_view_values x;
    int rc = snapshot(v, device, &x);
    if (rc == COMEM_OK && bytes)
        *bytes = x.free < 0 ? -1 : comem_max(0, comem_sub(comem_sub(x.free, x.granted), x.reserve));
    return rc;
}

int32_t comem_view_coord_pid(const comem_view *v)
{
    const comem_view_shared *sh = v ? shared_of(v) : NULL;
    return sh ? atomic_load_explicit(&((comem_view_shared *)sh)->coord_pid, memory_order_relaxed) : 0;
}

void comem_view_close(comem_view *v)
{
    if (!v)
        return;
    if (!v->slot) /* else a client's reader: the mappings are the client's */
        comem_view_file_close(v->file);
    free(v);
}
