/*
 * probe/sim.c - the simulated card: a shared file, a robust lock, per-process slots.
 *
 * WHO A SLOT BELONGS TO. A process is recorded by its pid as the /proc it reads
 * numbers it (readlink /proc/self), that /proc's device, and its start time. In a
 * pid namespace of its own (unshare --pid) getpid() numbers a process in that
 * namespace, a number other processes cannot look up (pid 2 there is kthreadd
 * here), while a /proc mounted by an outer namespace numbers it as that
 * namespace does, as the coordinator's SO_PEERCRED does. A slot recorded through
 * the reader's /proc is judged by /proc/<pid>/stat (gone, a zombie, or another
 * start time: reaped) and listed under its pid. A slot recorded through another
 * /proc (a namespace that mounted its own) is judged the same way when its pid
 * and start time are found here too; otherwise its numbers mean nothing here:
 * it is left alone (only readers of its own /proc reap it) and its bytes count
 * as used without being listed under a pid.
 *
 * WATCHING THEM CHEAPLY. Every lock looks for dead slots, and a /proc read per
 * slot per lock cost 8-12 us hot (80 us from idle) on the admission's path. A
 * handle therefore keeps a watch (os/proc.h: a pidfd; on Windows a process
 * handle) per slot it judged alive once (up to SIM_WATCH_MAX), opened and then
 * checked against the slot's start time (a watch opened after a pid was reused
 * names the new process, whose start time differs), and later locks ask all of
 * them at once (one poll() on Linux): a pidfd is readable once its process
 * exited, zombie or not. Slots beyond that, and every slot where getpid() is
 * not the /proc's numbering (a pidfd is opened in the caller's namespace), are
 * read from /proc as before.
 */
#include "probe/sim.h"
#include "probe/sim_store.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/log.h"
#include "os/proc.h"
#include "os/xlock.h"
#include "base/rundir.h"
#include "comem/common.h"

#define SIM_MAGIC 0x4d49534d454d4f43ULL /* "COMEMSIM" */
#define SIM_VERSION 4u /* 2: host bytes per slot (uma); 3: the /proc a slot's pid is numbered in; 4: os/xlock */

typedef struct sim_card {
    int64_t capacity;
    int64_t reserved;
    int64_t context_cost;
    int32_t semantics;
    int32_t pad;
} sim_card;

/* One process (WHO A SLOT BELONGS TO, above). pid 0 marks a free slot. */
typedef struct sim_slot {
    int32_t pid;          /* as the /proc of proc_dev numbers it */
    uint32_t has_context; /* bit c: a context exists on card c */
    uint64_t start_time;  /* to tell a reused pid from the original */
    uint64_t proc_dev;    /* the device of the /proc the process read its pid from */
    int64_t context[COMEM_SIM_MAX_CARDS];
    int64_t allocated[COMEM_SIM_MAX_CARDS];
    int64_t host[COMEM_SIM_MAX_CARDS]; /* host RAM against card c: its pool under uma, else only counted */
} sim_slot;

typedef struct sim_shared {
    uint64_t magic;
    uint32_t version;
    uint32_t size;
    _Alignas(8) unsigned char lock[COMEM_XLOCK_STORAGE]; /* os/xlock.h: survives a dead holder; guards what follows */
    uint64_t recoveries;  /* locks recovered from dead owners */
    int32_t n_cards;
    int32_t owner; /* the pid holding the lock, 0 when free (written by its holder; read racily by waiters) */
    sim_card cards[COMEM_SIM_MAX_CARDS];
    sim_slot slots[COMEM_SIM_MAX_PROCS];
} sim_shared;

typedef struct sim_view {
    comem_device_source base;
    char spec[PATH_MAX + 160]; /* base.spec: the canonical settings and the resolved file */
    comem_sim *sim;
    bool local; /* cuMemGetInfo-style view */
    bool owns;  /* closing the source closes the sim */
} sim_view;

#define SIM_WATCH_MAX 32 /* watches one handle keeps (WATCHING THEM CHEAPLY) */

/* A slot's process as this handle watches it: w NULL when not watched (os/proc.h). */
typedef struct sim_watch {
    int32_t pid;
    uint64_t start_time;
    comem_proc_watch *w;
} sim_watch;

struct comem_sim {
    sim_shared *sh;  /* the store's memory */
    sim_store *store;
    comem_xlock *xl; /* this handle's way to sh->lock */
    comem_sim_spec spec; /* spec.path is the resolved file */
    int32_t self;        /* getpid() of the process this handle belongs to (a forked child is another) */
    int32_t pid;         /* that process as its slot records it: pid in /proc's numbering, */
    uint64_t proc_dev;   /* /proc's device, */
    uint64_t start_time; /* and start time */
    int slot; /* this process's slot, or -1 before its first allocation */
    char uuid_base[40];
    sim_view device_view, local_view;
    sim_watch watch[COMEM_SIM_MAX_PROCS]; /* per slot; guarded by the card lock */
    int n_watched;                        /* watches open in watch[] */
};

/* ---- processes ---- */

/* This process as its slot records it (WHO A SLOT BELONGS TO); getpid() and 0s where /proc cannot say. */
static void self_identity(int32_t *pid, uint64_t *proc_dev, uint64_t *start)
{
    int64_t v = 0;
    bool known = comem_proc_self(&v, proc_dev) == COMEM_OK;
    *pid = (int32_t)v;
    comem_proc_info in;
    *start = known && comem_proc_look(v, &in) == COMEM_OK ? in.start : 0; /* v: this /proc's number for us */
}

/* Whether the slot's pid is numbered by the /proc of device proc_dev. */
static bool same_proc(const sim_slot *s, uint64_t proc_dev) { return s->proc_dev == proc_dev; }

/* A zombie has exited: the driver has already released its memory. */
static bool proc_alive(int32_t pid, uint64_t start_time) { return comem_proc_alive(pid, start_time); }

/* Whether the slot is this process's. */
static bool is_self(const comem_sim *sim, const sim_slot *s)
{
    return s->pid == sim->pid && s->start_time == sim->start_time && same_proc(s, sim->proc_dev);
}

/*
 * Whether the slot's pid means its process to this process: recorded through this
 * /proc, or found alive here under the same pid and start time.
 */
static bool numbered_here(const comem_sim *sim, const sim_slot *s)
{
    return same_proc(s, sim->proc_dev) || proc_alive(s->pid, s->start_time);
}

/*
 * The pid a slot records for the process a caller names: its own getpid() is its
 * own slot's (numbered otherwise in a pid namespace of its own); any other pid is
 * taken in this /proc's numbering.
 */
static int32_t card_pid(const comem_sim *sim, int32_t pid) { return pid == sim->self ? sim->pid : pid; }

static void unwatch(comem_sim *sim, int i)
{
    if (sim->watch[i].w) {
        comem_proc_watch_close(sim->watch[i].w);
        sim->n_watched--;
    }
    sim->watch[i] = (sim_watch){0};
}

static void reap_slot(comem_sim *sim, sim_slot *s, int i)
{
    comem_debug("sim: process %d is gone; released its context and allocations", (int)s->pid);
    memset(s, 0, sizeof *s);
    unwatch(sim, i);
}

/*
 * Whether slot i's process is alive, watching it from now on where a watch can be
 * had; false when it is gone (the watch is then not kept).
 */
static bool judge_and_watch(comem_sim *sim, const sim_slot *s, int i)
{
    sim_watch *w = &sim->watch[i];
    if (w->w && (w->pid != s->pid || w->start_time != s->start_time))
        unwatch(sim, i); /* the slot was freed and taken again since */
    comem_proc_watch *pw = NULL;
    if (!w->w && sim->pid == sim->self && sim->n_watched < SIM_WATCH_MAX &&
        comem_proc_watch_open(s->pid, &pw) != COMEM_OK)
        pw = NULL;
    if (!proc_alive(s->pid, s->start_time)) { /* after the open: the watch is then known to name this process */
        comem_proc_watch_close(pw);
        return false;
    }
    if (pw) {
        *w = (sim_watch){.pid = s->pid, .start_time = s->start_time, .w = pw};
        sim->n_watched++;
    }
    return true;
}

/* Frees the slots of processes that are gone, of those this process can judge. Caller holds the lock. */
static void reap(comem_sim *sim, sim_shared *sh)
{
    comem_proc_watch *watched[SIM_WATCH_MAX];
    int slot_of[SIM_WATCH_MAX], n = 0;
    for (int i = 0; i < COMEM_SIM_MAX_PROCS; i++) {
        sim_slot *s = &sh->slots[i];
        sim_watch *w = &sim->watch[i];
        if (s->pid == 0 || is_self(sim, s) || !same_proc(s, sim->proc_dev)) {
            if (w->w)
                unwatch(sim, i);
            continue; /* free, this process, or numbered by another /proc: not this reader's to judge */
        }
        if (w->w && w->pid == s->pid && w->start_time == s->start_time && n < SIM_WATCH_MAX) {
            watched[n] = w->w;
            slot_of[n++] = i;
        } else if (!judge_and_watch(sim, s, i)) {
            reap_slot(sim, s, i);
        }
    }
    uint8_t seen[SIM_WATCH_MAX];
    if (n > 0 && comem_proc_watch_look(watched, n, seen) > 0) {
        for (int k = 0; k < n; k++) {
            if (seen[k] == COMEM_PROC_WATCH_QUIET)
                continue;
            int i = slot_of[k];
            sim_slot *s = &sh->slots[i];
            /* The process table confirms either way: a watch whose descriptor the program closed, or
               that now names another file, must never reap a live process; it is forgotten, not closed. */
            bool alive = proc_alive(s->pid, s->start_time);
            if (seen[k] == COMEM_PROC_WATCH_UNSURE || alive) {
                comem_proc_watch_forget(sim->watch[i].w);
                sim->watch[i] = (sim_watch){0};
                sim->n_watched--;
            }
            if (!alive)
                reap_slot(sim, s, i);
        }
    }
}

/*
 * Waits for the card lock in short timed slices, not one blocking wait. A process
 * SIGKILLed while it waits on the futex can swallow the single wake-up an unlock
 * sends; the other waiters would then sleep on a free lock forever (seen with eight
 * processes churning while one was killed). A timed-out wait tries the lock again.
 */
#define SIM_LOCK_SLICE_NS (20 * 1000 * 1000)

/*
 * A reading never waits without a bound. The lock is held for microseconds by
 * a running process (longer under churn: a slot reap reads /proc), but a
 * process stopped (SIGSTOP, a debugger) while it holds it holds it until it is
 * continued, and the coordinator's loop, which reads the card, must never wait
 * on another process without a bound. So a reading gives up with COMEM_EBUSY
 * at once (after one slice) when the holder is stopped, and after
 * SIM_READ_WAIT_NS in any case. Allocations and frees still wait: they are the
 * calling process's own, as a driver call would be.
 */
#define SIM_READ_WAIT_NS (2000 * 1000 * 1000LL)

/* True when pid is stopped or traced (it cannot let go of anything until it is continued). */
static bool proc_stopped(int32_t pid)
{
    comem_proc_info in;
    return pid > 0 && comem_proc_look(pid, &in) == COMEM_OK && in.stopped;
}

/* wait_ns < 0: until the lock is had; else COMEM_ETIMEDOUT after about wait_ns, or once its holder is stopped. */
static int lock_slices(comem_sim *sim, int64_t wait_ns, bool *recovered)
{
    int first = comem_xlock_take(sim->xl, 0, recovered); /* uncontended: no clock reading */
    if (first != COMEM_ETIMEDOUT || wait_ns == 0)
        return first;
    int64_t give_up = wait_ns < 0 ? INT64_MAX : comem_add(comem_now_ns(), wait_ns);
    for (int slice = 0;; slice++) {
        if (slice > 0 && wait_ns >= 0 &&
            (comem_now_ns() >= give_up || proc_stopped(__atomic_load_n(&sim->sh->owner, __ATOMIC_RELAXED))))
            return COMEM_ETIMEDOUT;
        int rc = comem_xlock_take(sim->xl, SIM_LOCK_SLICE_NS, recovered);
        if (rc != COMEM_ETIMEDOUT)
            return rc;
    }
}

static int lock_within(comem_sim *sim, int64_t wait_ns)
{
    bool recovered = false;
    int rc = lock_slices(sim, wait_ns, &recovered);
    if (rc == COMEM_ETIMEDOUT && wait_ns >= 0)
        return COMEM_EBUSY; /* its holder is alive but does not let go: stopped, or far behind */
    if (rc != COMEM_OK) {
        comem_error("sim: cannot lock the card: %s", comem_status_str(rc));
        return COMEM_EIO;
    }
    if (recovered) {
        /* The owner died mid-operation; its slot is dead and reap() clears it. */
        sim->sh->recoveries++;
        comem_warn("sim: recovered the card lock from a process that died holding it");
    }
    __atomic_store_n(&sim->sh->owner, sim->pid, __ATOMIC_RELAXED);
    reap(sim, sim->sh);
    return COMEM_OK;
}

static int lock(comem_sim *sim) { return lock_within(sim, -1); }

static void unlock(comem_sim *sim)
{
    __atomic_store_n(&sim->sh->owner, 0, __ATOMIC_RELAXED);
    comem_xlock_give(sim->xl);
}

/* A forked child inherits the parent's handle; it must not act as the parent. */
static int check_owner(comem_sim *sim)
{
    if (getpid() != sim->self) {
        comem_error("sim: this handle belongs to process %d; open the card again after fork", (int)sim->self);
        return COMEM_EINVAL;
    }
    return COMEM_OK;
}

/* This process's slot, claimed if needed. Caller holds the lock. */
static sim_slot *own_slot(comem_sim *sim, bool claim)
{
    sim_shared *sh = sim->sh;
    if (sim->slot >= 0 && is_self(sim, &sh->slots[sim->slot]))
        return &sh->slots[sim->slot];
    int free_slot = -1;
    for (int i = 0; i < COMEM_SIM_MAX_PROCS; i++) {
        if (is_self(sim, &sh->slots[i])) {
            sim->slot = i;
            return &sh->slots[i];
        }
        if (sh->slots[i].pid == 0 && free_slot < 0)
            free_slot = i;
    }
    if (!claim || free_slot < 0)
        return NULL;
    sim_slot *s = &sh->slots[free_slot];
    memset(s, 0, sizeof *s);
    s->start_time = sim->start_time;
    s->proc_dev = sim->proc_dev;
    s->pid = sim->pid; /* last: a slot with a pid is a claimed slot */
    sim->slot = free_slot;
    return s;
}

/* Σ context + allocated on card over every process. Caller holds the lock. */
static int64_t card_used(const sim_shared *sh, int card)
{
    int64_t sum = 0;
    for (int i = 0; i < COMEM_SIM_MAX_PROCS; i++)
        if (sh->slots[i].pid != 0)
            sum = comem_add(sum, comem_add(sh->slots[i].context[card], sh->slots[i].allocated[card]));
    return sum;
}

static int64_t slot_used(const sim_slot *s, int card) { return s ? comem_add(s->context[card], s->allocated[card]) : 0; }

/* Σ host bytes against card over every process (its pool's RAM share under uma). Caller holds the lock. */
static int64_t card_host(const sim_shared *sh, int card)
{
    int64_t sum = 0;
    for (int i = 0; i < COMEM_SIM_MAX_PROCS; i++)
        if (sh->slots[i].pid != 0)
            sum = comem_add(sum, sh->slots[i].host[card]);
    return sum;
}

/* What physical memory of card is taken: device use, plus host RAM when the card is uma (one pool). */
static int64_t pool_used(const sim_shared *sh, int card)
{
    int64_t used = card_used(sh, card);
    return sh->cards[card].semantics == COMEM_SIM_UMA ? comem_add(used, card_host(sh, card)) : used;
}

/* ---- opening ---- */

static uint64_t fnv1a(const char *s, uint64_t h)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

static int init_shared(sim_shared *sh, const comem_sim_spec *spec)
{
    memset(sh, 0, sizeof *sh);
    int rc = comem_xlock_init(sh->lock);
    if (rc != COMEM_OK)
        return rc;
    sh->n_cards = spec->n_cards;
    for (int c = 0; c < spec->n_cards; c++)
        sh->cards[c] = (sim_card){spec->capacity, spec->reserved, spec->context_cost, (int32_t)spec->semantics, 0};
    sh->version = SIM_VERSION;
    sh->size = (uint32_t)sizeof *sh;
    __atomic_store_n(&sh->magic, SIM_MAGIC, __ATOMIC_RELEASE);
    return COMEM_OK;
}

static bool same_settings(const sim_shared *sh, const comem_sim_spec *spec)
{
    if (sh->n_cards != spec->n_cards)
        return false;
    for (int c = 0; c < spec->n_cards; c++) {
        const sim_card *k = &sh->cards[c];
        if (k->capacity != spec->capacity || k->reserved != spec->reserved || k->context_cost != spec->context_cost ||
            k->semantics != (int32_t)spec->semantics)
            return false;
    }
    return true;
}

/* How the store makes a new card and tells a card of this layout (probe/sim_store.h). */
static int init_card(void *mem, const void *spec) { return init_shared(mem, spec); }

static bool is_this_layout(const void *mem)
{
    const sim_shared *sh = mem;
    return __atomic_load_n(&sh->magic, __ATOMIC_ACQUIRE) == SIM_MAGIC && sh->version == SIM_VERSION &&
           sh->size == sizeof *sh;
}

int comem_sim_open(const comem_sim_spec *spec, comem_sim **out)
{
    comem_sim_spec s = *spec;
    if (s.n_cards < 1 || s.n_cards > COMEM_SIM_MAX_CARDS || s.capacity <= 0)
        return COMEM_EINVAL;
    bool auto_path = s.path[0] == '\0';
    if (auto_path) {
        char dir[PATH_MAX - 128], canon[128];
        int rc = comem_runtime_dir(dir, sizeof dir);
        if (rc != COMEM_OK)
            return rc;
        comem_sim_spec_format(&s, canon, sizeof canon);
        for (char *c = canon; *c; c++)
            if (*c == ':')
                *c = '-';
        snprintf(s.path, sizeof s.path, "%s/%s", dir, canon);
    }
    const sim_store_layout layout = {.size = sizeof(sim_shared), .version = SIM_VERSION, .init = init_card,
                                     .is_ours = is_this_layout, .ctx = &s};
    sim_store *store = NULL;
    void *mem = NULL;
    int rc = comem_sim_store_open(s.path, auto_path, &layout, &store, &mem);
    if (rc != COMEM_OK)
        return rc;
    sim_shared *sh = mem;
    if (!same_settings(sh, &s)) {
        char want[128];
        comem_sim_spec_format(&s, want, sizeof want);
        comem_error("sim: %s holds a card with other settings than %s; remove it or choose another path=", s.path,
                    want);
        comem_sim_store_close(store);
        return COMEM_EEXIST;
    }
    comem_sim *sim = calloc(1, sizeof *sim);
    rc = sim ? comem_xlock_attach(sh->lock, s.path, &sim->xl) : COMEM_ENOMEM;
    if (rc != COMEM_OK) {
        free(sim);
        comem_sim_store_close(store);
        return rc;
    }
    sim->sh = sh;
    sim->store = store;
    sim->spec = s;
    sim->self = (int32_t)getpid();
    self_identity(&sim->pid, &sim->proc_dev, &sim->start_time);
    sim->slot = -1;
    uint64_t h1 = fnv1a(s.path, 0xcbf29ce484222325ULL), h2 = fnv1a(s.path, 0x84222325cbf29ce4ULL);
    snprintf(sim->uuid_base, sizeof sim->uuid_base, "SIM-%08x-%04x-%04x-%04x-%08x", (unsigned)(h1 >> 32),
             (unsigned)(h1 >> 16) & 0xffff, (unsigned)h1 & 0xffff, (unsigned)(h2 >> 48), (unsigned)(h2 >> 16));
    *out = sim;
    return COMEM_OK;
}

void comem_sim_close(comem_sim *sim)
{
    if (!sim)
        return;
    for (int i = 0; i < COMEM_SIM_MAX_PROCS; i++)
        comem_proc_watch_close(sim->watch[i].w);
    comem_xlock_detach(sim->xl);
    comem_sim_store_close(sim->store);
    free(sim);
}

const char *comem_sim_path(const comem_sim *sim) { return sim->spec.path; }
int comem_sim_cards(const comem_sim *sim) { return sim->spec.n_cards; }
const comem_sim_spec *comem_sim_settings(const comem_sim *sim) { return &sim->spec; }

/* ---- allocation ---- */

static int check_card(const comem_sim *sim, int card)
{
    return (card >= 0 && card < sim->spec.n_cards) ? COMEM_OK : COMEM_ENODEV;
}

/* Creates this process's context on card if it has none. Caller holds the lock. */
static int ensure_context(comem_sim *sim, sim_slot *s, int card)
{
    if (s->has_context & (1u << card))
        return COMEM_OK;
    const sim_card *k = &sim->sh->cards[card];
    int64_t visible = k->capacity - k->reserved;
    if (k->semantics != COMEM_SIM_WDDM && comem_add(pool_used(sim->sh, card), k->context_cost) > visible)
        return COMEM_ENOSPC;
    s->context[card] = k->context_cost;
    s->has_context |= 1u << card;
    return COMEM_OK;
}

/* The checks every charge takes before it locks the card: this process's handle, the card, the size. */
static int lock_for(comem_sim *sim, int card, int64_t bytes)
{
    int rc = check_owner(sim);
    if (rc == COMEM_OK)
        rc = check_card(sim, card);
    if (rc == COMEM_OK && bytes < 0)
        rc = COMEM_EINVAL;
    return rc == COMEM_OK ? lock(sim) : rc;
}

int comem_sim_alloc(comem_sim *sim, int card, int64_t bytes)
{
    int rc = lock_for(sim, card, bytes);
    if (rc != COMEM_OK)
        return rc;
    sim_slot *s = own_slot(sim, true);
    if (!s) {
        rc = COMEM_ERANGE; /* every slot is taken by a live process */
    } else if ((rc = ensure_context(sim, s, card)) == COMEM_OK) {
        const sim_card *k = &sim->sh->cards[card];
        int64_t visible = k->capacity - k->reserved;
        /* Linux: physical memory bounds everyone (uma: RAM included). WDDM: only the caller's own budget does. */
        int64_t counted = k->semantics == COMEM_SIM_WDDM ? slot_used(s, card) : pool_used(sim->sh, card);
        if (comem_add(counted, bytes) > visible)
            rc = COMEM_ENOSPC;
        else
            s->allocated[card] = comem_add(s->allocated[card], bytes);
    }
    unlock(sim);
    return rc;
}

int comem_sim_free(comem_sim *sim, int card, int64_t bytes)
{
    int rc = lock_for(sim, card, bytes);
    if (rc != COMEM_OK)
        return rc;
    sim_slot *s = own_slot(sim, false);
    if (!s || s->allocated[card] < bytes) {
        comem_error("sim: process %d frees %lld bytes on card %d but holds %lld", (int)sim->pid, (long long)bytes,
                    card, (long long)(s ? s->allocated[card] : 0));
        rc = COMEM_EINVAL;
    } else {
        s->allocated[card] -= bytes;
    }
    unlock(sim);
    return rc;
}

int comem_sim_touch(comem_sim *sim, int card)
{
    int rc = lock_for(sim, card, 0);
    if (rc != COMEM_OK)
        return rc;
    sim_slot *s = own_slot(sim, true);
    rc = s ? ensure_context(sim, s, card) : COMEM_ERANGE;
    unlock(sim);
    return rc;
}

int comem_sim_host_alloc(comem_sim *sim, int card, int64_t bytes)
{
    int rc = lock_for(sim, card, bytes);
    if (rc != COMEM_OK)
        return rc;
    sim_slot *s = own_slot(sim, true);
    const sim_card *k = &sim->sh->cards[card];
    if (!s)
        rc = COMEM_ERANGE;
    else if (k->semantics == COMEM_SIM_UMA && comem_add(pool_used(sim->sh, card), bytes) > k->capacity - k->reserved)
        rc = COMEM_ENOSPC; /* one pool: the RAM is not there */
    else
        s->host[card] = comem_add(s->host[card], bytes);
    unlock(sim);
    return rc;
}

int comem_sim_host_free(comem_sim *sim, int card, int64_t bytes)
{
    int rc = lock_for(sim, card, bytes);
    if (rc != COMEM_OK)
        return rc;
    sim_slot *s = own_slot(sim, false);
    if (!s || s->host[card] < bytes) {
        comem_error("sim: process %d frees %lld host bytes on card %d but holds %lld", (int)sim->pid,
                    (long long)bytes, card, (long long)(s ? s->host[card] : 0));
        rc = COMEM_EINVAL;
    } else {
        s->host[card] -= bytes;
    }
    unlock(sim);
    return rc;
}

int comem_sim_host_usage(comem_sim *sim, int card, int32_t pid, int64_t *host)
{
    int rc = check_card(sim, card);
    if (rc != COMEM_OK || (rc = lock(sim)) != COMEM_OK)
        return rc;
    *host = 0;
    pid = card_pid(sim, pid);
    for (int i = 0; i < COMEM_SIM_MAX_PROCS; i++)
        if (sim->sh->slots[i].pid == pid && numbered_here(sim, &sim->sh->slots[i]))
            *host = sim->sh->slots[i].host[card];
    unlock(sim);
    return COMEM_OK;
}

int comem_sim_release_self(comem_sim *sim)
{
    int rc = check_owner(sim);
    if (rc != COMEM_OK || (rc = lock(sim)) != COMEM_OK)
        return rc;
    sim_slot *s = own_slot(sim, false);
    if (s)
        memset(s, 0, sizeof *s);
    sim->slot = -1;
    unlock(sim);
    return COMEM_OK;
}

/* ---- readings ---- */

static void fill_identity(const comem_sim *sim, int card, comem_device_reading *out)
{
    comem_device_reading_clear(out);
    out->index = card;
    out->source = "sim";
    snprintf(out->uuid, sizeof out->uuid, "%s%04x", sim->uuid_base, (unsigned)card);
    out->unified = sim->spec.semantics == COMEM_SIM_UMA;
    snprintf(out->name, sizeof out->name, "comem simulated card (%s)",
             sim->spec.semantics == COMEM_SIM_WDDM ? "wddm" : sim->spec.semantics == COMEM_SIM_UMA ? "uma" : "linux");
    out->local_scope = sim->spec.semantics == COMEM_SIM_WDDM ? COMEM_SCOPE_PROCESS_LOCAL : COMEM_SCOPE_DEVICE_WIDE;
}

int comem_sim_read(comem_sim *sim, int card, comem_device_reading *out)
{
    int rc = check_card(sim, card);
    if (rc != COMEM_OK || (rc = lock_within(sim, SIM_READ_WAIT_NS)) != COMEM_OK)
        return rc;
    const sim_card *k = &sim->sh->cards[card];
    fill_identity(sim, card, out);
    out->scope = COMEM_SCOPE_DEVICE_WIDE;
    out->total = k->capacity;
    out->reserved = k->reserved;
    out->used = comem_add(k->reserved, pool_used(sim->sh, card)); /* uma: the RAM share of the pool too */
    out->free = comem_clamp0(out->total - out->used);
    out->overcommit = comem_clamp0(out->used - out->total);
    out->procs_known = true;
    out->n_procs = 0;
    for (int i = 0; i < COMEM_SIM_MAX_PROCS && out->n_procs < COMEM_MAX_DEVICE_PROCS; i++) {
        const sim_slot *s = &sim->sh->slots[i];
        if (s->pid != 0 && (s->has_context & (1u << card)) && numbered_here(sim, s))
            out->procs[out->n_procs++] = (comem_proc_use){s->pid, slot_used(s, card)};
    }
    unlock(sim);
    out->timestamp_ns = comem_now_ns();
    return COMEM_OK;
}

int comem_sim_read_local(comem_sim *sim, int card, comem_device_reading *out)
{
    int rc = check_card(sim, card);
    if (rc != COMEM_OK || (rc = lock_within(sim, SIM_READ_WAIT_NS)) != COMEM_OK)
        return rc;
    const sim_card *k = &sim->sh->cards[card];
    fill_identity(sim, card, out);
    /* cuMemGetInfo's total leaves the driver's reserved slice out. */
    out->total = k->capacity - k->reserved;
    if (k->semantics == COMEM_SIM_WDDM) {
        out->scope = COMEM_SCOPE_PROCESS_LOCAL; /* the budget sees only this process */
        out->free = comem_clamp0(out->total - slot_used(own_slot(sim, false), card));
    } else {
        out->scope = COMEM_SCOPE_DEVICE_WIDE;
        out->free = comem_clamp0(out->total - pool_used(sim->sh, card));
    }
    out->used = out->total - out->free;
    unlock(sim);
    out->timestamp_ns = comem_now_ns();
    return COMEM_OK;
}

int comem_sim_usage(comem_sim *sim, int card, int32_t pid, int64_t *context, int64_t *allocated)
{
    int rc = check_card(sim, card);
    if (rc != COMEM_OK || (rc = lock_within(sim, SIM_READ_WAIT_NS)) != COMEM_OK)
        return rc;
    *context = *allocated = 0;
    pid = card_pid(sim, pid);
    for (int i = 0; i < COMEM_SIM_MAX_PROCS; i++) {
        const sim_slot *s = &sim->sh->slots[i];
        if (s->pid == pid && numbered_here(sim, s)) {
            *context = s->context[card];
            *allocated = s->allocated[card];
        }
    }
    unlock(sim);
    return COMEM_OK;
}

uint64_t comem_sim_recoveries(comem_sim *sim)
{
    if (lock(sim) != COMEM_OK)
        return 0;
    uint64_t r = sim->sh->recoveries;
    unlock(sim);
    return r;
}

int comem_sim_debug_hold_lock(comem_sim *sim) { return lock(sim); }

/* ---- as a device source ---- */

static int view_count(comem_device_source *src, int *n)
{
    *n = ((sim_view *)src)->sim->spec.n_cards;
    return COMEM_OK;
}

static int view_read(comem_device_source *src, int index, comem_device_reading *out)
{
    sim_view *v = (sim_view *)src;
    return v->local ? comem_sim_read_local(v->sim, index, out) : comem_sim_read(v->sim, index, out);
}

static void view_close(comem_device_source *src)
{
    sim_view *v = (sim_view *)src;
    if (v->owns)
        comem_sim_close(v->sim);
}

static const comem_device_source_ops k_view_ops = {view_count, view_read, view_close};

static comem_device_source *view(comem_sim *sim, sim_view *v, bool local)
{
    char canon[128];
    comem_sim_spec_format(&sim->spec, canon, sizeof canon);
    snprintf(v->spec, sizeof v->spec, "%s:path=%s", canon, sim->spec.path);
    v->base = (comem_device_source){&k_view_ops, "sim", v->spec};
    v->sim = sim;
    v->local = local;
    return &v->base;
}

comem_device_source *comem_sim_source(comem_sim *sim) { return view(sim, &sim->device_view, false); }
comem_device_source *comem_sim_local_source(comem_sim *sim) { return view(sim, &sim->local_view, true); }

int comem_sim_open_source(const char *spec_text, comem_device_source **out, char *err, size_t errlen)
{
    comem_sim_spec spec;
    int rc = comem_sim_spec_parse(spec_text, &spec, err, errlen);
    if (rc != COMEM_OK)
        return rc;
    comem_sim *sim;
    if ((rc = comem_sim_open(&spec, &sim)) != COMEM_OK) {
        snprintf(err, errlen, "cannot open the simulated card: %s", comem_status_str(rc));
        return rc;
    }
    comem_device_source *src = comem_sim_source(sim);
    sim->device_view.owns = true;
    *out = src;
    return COMEM_OK;
}
