/*
 * tools/simulate/agent.c - one scenario process: its bytes on the card, its timeline, its policy.
 *
 * An agent is forked by the orchestrator before any thread exists, waits for
 * the start signal, opens the simulated card itself and walks its timeline on
 * the shared clock. The bytes it holds are real allocations on the card, so
 * the card (and the coordinator reading it) sees exactly what the process
 * holds, and a SIGKILL returns them the way a driver does.
 *
 * How it decides depends on the policy:
 *   comem      libcomem: admission before every load, a holder whose release
 *              callback frees bytes, node boundaries, a pin holder, the pager
 *              attached so it answers asks while busy.
 *   comfy-env, uncoordinated
 *              the model engine decides (engine.c): the agent sends
 *              each load, census and node boundary over its request channel,
 *              and a service thread carries out the engine's commands (free
 *              these bytes of this model) unless the process is computing.
 *
 * Threads: the main thread walks the timeline; libcomem's own threads run
 * the release callbacks (comem) or the service thread runs commands (the
 * others). `lock` guards the model table and the counters below it.
 */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arith/reserve.h"
#include "base/bytes.h"
#include "base/clock.h"
#include "comem/comem.h"
#include "comem/pager.h"
#include "pager/pager_test.h"
#include "pager/vmm_sim.h"
#include "probe/sim.h"
#include "simulate/agent.h"
#include "simulate/clock.h"
#include "simulate/engine.h"
#include "simulate/scenario.h"

#define CHUNK (256 * COMEM_MIB) /* a load copies and allocates this much at a time */
#define FAULT_SPAN (256 * COMEM_MIB) /* one layer's weights, faulted at a time in a pass */

typedef struct amodel {
    int64_t resident;        /* bytes on the card (whole models) */
    bool listed;             /* loaded: in its manager's list */
    bool wanted;             /* the workflow loaded it and has not unloaded it: a run uses it */
    int64_t evicted_pending; /* taken by someone's eviction and not loaded again yet */
    uint64_t entry;          /* comem entry (whole models) */
    comem_vbar *vbar;        /* paged models */
    int64_t high;            /* most of it ever resident at once (paged) */
    double last_use;         /* scenario time it was last loaded or run */
    int64_t after_pass;      /* resident at the end of the last pass (paged) */
} amodel;

typedef struct agent {
    const scenario *s;
    const sc_proc *pr;
    sc_policy pol;
    int idx, card;
    sh_run *sh;
    comem_sim *sim;
    const char *sock, *spec;
    pthread_mutex_t lock;
    amodel m[SC_MAX_MODELS];
    _Atomic bool busy; /* computing: the service thread answers busy */
    int64_t custom;
    int runs;
    int inject; /* transient commit failures to inject at the next pass */
    /* comem */
    comem_client *c;
    uint64_t h_models, h_pins, h_custom, e_custom;
    comem_pager *pager;
    int64_t retries_seen;
    uint64_t h_ram;             /* host RAM (`ram ... ledger`): one entry per growth, oldest first */
    int n_ram;
    struct {
        uint64_t entry;
        int64_t bytes;
    } ram_held[SC_MAX_STEPS];
    int64_t ram_nominal; /* what the timeline's `ram` steps said; less what was dropped is what it holds */
    /* the other policies */
    int req_fd, cmd_fd;
    pthread_t svc;
    bool svc_on;
} agent;

static bool sim_card_uma(const agent *a) { return a->s->card.semantics == SC_UMA; }

static void ev(agent *a, sh_kind k, int model, int64_t x, int64_t y)
{
    sh_event_add(a->sh, a->idx, k, model, a->card, x, y);
}

static double now(agent *a) { return sh_now(a->sh); }

/* ---- requests to the model engine ---- */

static bool rq(agent *a, int kind, int model, int64_t x, int64_t y, eng_msg *reply)
{
    eng_msg m = {.kind = kind, .proc = a->idx, .model = model, .card = a->card, .a = x, .b = y};
    if (write(a->req_fd, &m, sizeof m) != (ssize_t)sizeof m)
        return false;
    struct pollfd p = {.fd = a->req_fd, .events = POLLIN};
    if (poll(&p, 1, 60000) <= 0)
        return false;
    eng_msg r;
    if (read(a->req_fd, &r, sizeof r) != (ssize_t)sizeof r)
        return false;
    if (reply)
        *reply = r;
    return true;
}

/* ---- bytes on the card ---- */

/* Frees up to bytes of whole model i (all of it for < 0). Caller holds the lock. */
static int64_t free_whole(agent *a, int i, int64_t bytes, bool eviction)
{
    amodel *m = &a->m[i];
    int64_t give = bytes < 0 ? m->resident : comem_min(bytes, m->resident);
    if (give <= 0)
        return 0;
    if (comem_sim_free(a->sim, a->card, give) != COMEM_OK)
        return 0;
    m->resident -= give;
    if (eviction)
        m->evicted_pending = comem_add(m->evicted_pending, give);
    return give;
}

/* Frees up to bytes of paged model i through its pager (all unpinned for < 0). */
static int64_t free_paged(agent *a, int i, int64_t bytes)
{
    amodel *m = &a->m[i];
    if (!m->vbar)
        return 0;
    int64_t freed = 0;
    comem_vbar_free_memory(m->vbar, bytes < 0 ? comem_vbar_size(m->vbar) : bytes, &freed);
    return freed;
}

static int64_t model_resident(agent *a, int i)
{
    return a->pr->models[i].paged ? (a->m[i].vbar ? comem_vbar_loaded_size(a->m[i].vbar) : 0) : a->m[i].resident;
}

/*
 * Loads bytes more of whole model i, CHUNK at a time at the scenario's load
 * rate, as a copy from host memory would. Stops at an allocation that fails
 * (an OOM, recorded) or, when cancel > 0, once that fraction is in. Returns
 * the bytes allocated; *oom says whether an allocation failed.
 */
static int64_t load_bytes(agent *a, int i, int64_t bytes, double cancel, bool *oom)
{
    int64_t done = 0, reloaded = 0;
    int64_t stop = cancel > 0 ? (int64_t)((double)bytes * cancel) : bytes;
    *oom = false;
    while (done < stop && !atomic_load(&a->sh->end)) {
        int64_t chunk = comem_min(CHUNK, stop - done);
        sh_sleep(a->sh, (double)chunk / a->s->load_rate);
        pthread_mutex_lock(&a->lock);
        int rc = comem_sim_alloc(a->sim, a->card, chunk);
        if (rc == COMEM_OK) {
            amodel *m = &a->m[i];
            m->resident += chunk;
            int64_t r = comem_min(chunk, m->evicted_pending);
            m->evicted_pending -= r;
            reloaded += r;
        }
        pthread_mutex_unlock(&a->lock);
        if (rc != COMEM_OK) {
            ev(a, EV_OOM, i, chunk, done);
            *oom = true;
            break;
        }
        done += chunk;
    }
    if (reloaded)
        ev(a, EV_RELOAD, i, reloaded, 0);
    return done;
}

/* ---- the RAM model: Σ pinned + plain RAM of every process against the machine ---- */

static void publish_rss(agent *a);

static int64_t ram_limit(const scenario *s) { return s->cgroup > 0 ? comem_min(s->ram, s->cgroup) : s->ram; }

/* Books bytes of host RAM (pinned or plain) on the machine; false when it is not there. */
static bool ram_take(agent *a, int64_t bytes)
{
    if (sim_card_uma(a)) /* one pool: the card holds the RAM too */
        return comem_sim_host_alloc(a->sim, a->card, bytes) == COMEM_OK;
    int64_t after = atomic_fetch_add(&a->sh->ram_total, bytes) + bytes;
    if (after > ram_limit(a->s)) {
        atomic_fetch_sub(&a->sh->ram_total, bytes); /* book, check, undo */
        return false;
    }
    return true;
}

static void ram_give(agent *a, int64_t bytes)
{
    if (bytes <= 0)
        return;
    if (sim_card_uma(a))
        comem_sim_host_free(a->sim, a->card, bytes);
    else
        atomic_fetch_sub(&a->sh->ram_total, bytes);
}

/* The kernel's OOM killer: the process using the most host RAM dies. */
static void oom_kill(agent *a)
{
    int victim = -1;
    int64_t most = -1;
    for (int i = 0; i < a->s->n_procs; i++) {
        sh_proc *p = &a->sh->p[i];
        if (atomic_load(&p->state) != 1 && atomic_load(&p->state) != 2)
            continue;
        int64_t use = atomic_load(&p->pinned) + atomic_load(&p->ram) + atomic_load(&p->staging);
        if (use > most) {
            most = use;
            victim = i;
        }
    }
    if (victim < 0)
        return;
    sh_event_add(a->sh, victim, EV_OOM_KILL, -1, a->s->procs[victim].card, most, 0);
    atomic_store(&a->sh->p[victim].killed, 1);
    kill(atomic_load(&a->sh->p[victim].pid), SIGKILL);
}

/* ---- comem: callbacks ---- */

static int model_of_entry(agent *a, uint64_t entry)
{
    for (int i = 0; i < a->pr->n_models; i++)
        if (a->m[i].entry && a->m[i].entry == entry)
            return i;
    return -1;
}

static int on_release_models(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                             const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder;
    agent *a = user;
    int64_t total = 0, changed[SC_MAX_MODELS] = {0};
    pthread_mutex_lock(&a->lock);
    if (kind == COMEM_RELEASE_IDLE) {
        for (int i = 0; i < a->pr->n_models; i++)
            if (!a->pr->models[i].paged)
                changed[i] = free_whole(a, i, -1, true);
    } else {
        for (size_t k = 0; k < n; k++) {
            int i = model_of_entry(a, entries[k]);
            if (i >= 0)
                changed[i] += free_whole(a, i, amounts[k], true);
        }
        for (int i = 0; i < a->pr->n_models && n == 0; i++) /* no plan: largest first is as good as any */
            if (!a->pr->models[i].paged)
                changed[i] += free_whole(a, i, comem_clamp0(bytes - total), true);
    }
    uint64_t ents[SC_MAX_MODELS];
    int64_t res[SC_MAX_MODELS];
    int nr = 0;
    for (int i = 0; i < a->pr->n_models; i++) {
        total += changed[i];
        if (changed[i] && a->m[i].entry) {
            ents[nr] = a->m[i].entry;
            res[nr++] = a->m[i].resident;
        }
    }
    pthread_mutex_unlock(&a->lock);
    for (int k = 0; k < nr; k++)
        comem_entry_set_resident(a->c, ents[k], res[k]);
    if (kind == COMEM_RELEASE_IDLE)
        ev(a, EV_IDLE_REL, -1, bytes, total);
    else
        ev(a, EV_ASKED, -1, bytes, total);
    *freed = total;
    return COMEM_OK;
}

static int on_release_pins(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                           const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder;
    (void)entries;
    (void)amounts;
    (void)n;
    agent *a = user;
    *freed = 0;
    if (kind != COMEM_RELEASE_PINS)
        return COMEM_OK;
    int64_t give = comem_min(comem_clamp0(bytes), atomic_load(&a->sh->p[a->idx].pinned));
    if (give > 0) {
        comem_pin_release(a->c, a->h_pins, give);
        ram_give(a, give);
        atomic_fetch_sub(&a->sh->p[a->idx].pinned, give);
        ev(a, EV_UNPIN, -1, give, 1);
    }
    *freed = give;
    return COMEM_OK;
}

static int on_release_custom(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                             const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder;
    (void)entries;
    (void)amounts;
    (void)n;
    agent *a = user;
    pthread_mutex_lock(&a->lock);
    int64_t give = kind == COMEM_RELEASE_IDLE || bytes < 0 ? a->custom : comem_min(bytes, a->custom);
    if (give > 0 && comem_sim_free(a->sim, a->card, give) == COMEM_OK)
        a->custom -= give;
    else
        give = 0;
    int64_t left = a->custom;
    pthread_mutex_unlock(&a->lock);
    if (give > 0) {
        comem_entry_set_resident(a->c, a->e_custom, left);
        ev(a, EV_ASKED, -1, bytes, give);
        ev(a, EV_CUSTOM, -1, left, 0);
    }
    *freed = give;
    return COMEM_OK;
}

/* ---- the other policies: the engine's commands ---- */

static void *service(void *arg)
{
    agent *a = arg;
    eng_msg m;
    while (read(a->cmd_fd, &m, sizeof m) == (ssize_t)sizeof m) {
        eng_msg r = m;
        if (m.kind == CM_HEADROOM) {
            if (a->pager)
                comem_pager_set_simple_headroom(a->pager, comem_clamp0(m.a));
            r.a = 0;
        } else if (m.kind == CM_FREE) {
            if (a->busy) {
                r.a = -1; /* computing: a release would pull weights from under a running node */
            } else {
                int64_t freed;
                pthread_mutex_lock(&a->lock);
                freed = a->pr->models[m.model].paged ? free_paged(a, m.model, m.a)
                                                      : free_whole(a, m.model, m.a, true);
                if (m.b == 2) /* the model leaves its manager's list (detach) */
                    a->m[m.model].listed = model_resident(a, m.model) > 0;
                pthread_mutex_unlock(&a->lock);
                r.a = freed;
                if (m.b == 1)
                    ev(a, EV_IDLE_REL, m.model, m.a, freed);
                else
                    ev(a, EV_EVICT, m.model, m.a, freed);
            }
        }
        if (write(a->cmd_fd, &r, sizeof r) != (ssize_t)sizeof r)
            break;
    }
    return NULL;
}

/* ---- paged models: passes over the weights ---- */

static void ensure_pager(agent *a)
{
    if (a->pager)
        return;
    if (comem_pager_open(COMEM_PAGER_SIM, a->card, a->spec, &a->pager) != COMEM_OK) {
        a->pager = NULL;
        return;
    }
    /* aimdo's 2 s device poll, on the scenario's clock */
    comem_pager_set_device_poll(a->pager, COMEM_PAGER_DEFAULT_DEVICE_HEADROOM,
                                (int64_t)(COMEM_PAGER_DEFAULT_POLL_MS / a->s->speed));
    /* Windows: ComfyUI starts aimdo with nvml_pressure=True, so every policy's pager sees the whole card */
    if (a->s->card.semantics == SC_WDDM)
        comem_pager_set_device_wide(a->pager, 1);
    if (a->pol == POL_COMEM && a->c && comem_client_connected(a->c))
        comem_pager_attach(a->pager, a->c, "weights");
}

/*
 * One pass over paged model i: fault every layer in turn and unpin it, as a
 * forward pass does. Layers the pager refuses are streamed from host memory
 * (counted as staging). Pages taken by pressure since the last pass and
 * pages committed again are recorded.
 */
static void pass(agent *a, int i)
{
    amodel *m = &a->m[i];
    if (!m->vbar)
        return;
    int64_t before = comem_vbar_loaded_size(m->vbar);
    int64_t commits0 = comem_pager_stat(a->pager, COMEM_PAGER_STAT_COMMITS);
    if (a->inject > 0) {
        if (a->pol == POL_COMEM) {
            comem_vmm_sim_inject(comem_pager_vmm(a->pager), 0, a->inject, 0);
        } else {
            /* aimdo has no retry in its fault path (comfy-aimdo#100, open): "Fault failed: 2" */
            ev(a, EV_FAULT_FAIL, i, a->inject, 0);
        }
        a->inject = 0;
    }
    if (m->after_pass > before) /* taken by pressure since the last pass */
        ev(a, EV_PAGED_EVICT, i, m->after_pass - before, 0);
    int64_t size = comem_vbar_size(m->vbar), streamed = 0, staging = atomic_load(&a->sh->p[a->idx].staging);
    uint32_t sig[16];
    for (int64_t off = 0; off < size; off += FAULT_SPAN) {
        int64_t len = comem_min(FAULT_SPAN, size - off);
        int rc = comem_vbar_fault(m->vbar, off, len, sig, 16);
        if (rc == COMEM_VBAR_RESIDENT) {
            comem_vbar_unpin(m->vbar, off, len);
        } else if (rc == COMEM_VBAR_OFFLOADED) {
            streamed += len;
        } else {
            ev(a, EV_FAULT_FAIL, i, 1, rc);
            break;
        }
    }
    int64_t after = comem_vbar_loaded_size(m->vbar);
    m->after_pass = after;
    int64_t commits = (comem_pager_stat(a->pager, COMEM_PAGER_STAT_COMMITS) - commits0) * comem_vbar_page_size(m->vbar);
    int64_t first = comem_clamp0(after - m->high); /* pages resident for the first time are not a reload */
    if (after > m->high)
        m->high = after;
    if (commits - first > 0)
        ev(a, EV_RELOAD, i, commits - first, 0);
    int64_t retries = comem_pager_stat(a->pager, COMEM_PAGER_STAT_TRANSIENT_RETRIES);
    if (retries > a->retries_seen) {
        ev(a, EV_RETRIED, i, retries - a->retries_seen, 0);
        a->retries_seen = retries;
    }
    if (streamed > 0)
        ev(a, EV_STREAMED, i, streamed, 0);
    /* The streamed part goes through host staging. comem: a fixed ring booked against the machine's pin
       budget; aimdo: its HostBuffer grows to what one prompt streams (ComfyUI#15575). */
    if (streamed > 0) {
        int64_t want = a->pol == POL_COMEM ? comem_min(streamed, 3 * 64 * COMEM_MIB) : comem_add(staging, streamed);
        if (want > staging) {
            bool ok = true;
            if (a->pol == POL_COMEM && a->c) {
                if (!a->h_pins)
                    comem_holder_add(a->c, "pins", a->card, COMEM_KIND_PINS, COMEM_ANSWERS_PINS, on_release_pins, a,
                                     &a->h_pins);
                ok = comem_pin_acquire(a->c, a->h_pins, want - staging, NULL) == COMEM_OK;
            }
            ok = ok && ram_take(a, want - staging);
            if (ok)
                atomic_store(&a->sh->p[a->idx].staging, want);
            ev(a, EV_STAGING, i, ok ? want : staging, ok ? 0 : 1);
        }
    }
}

/* ---- steps ---- */

static double wait_s(double t0, agent *a) { return now(a) - t0; }

/*
 * comem: the coordinator never asks the requester itself, so when it is short
 * the process's own manager (ComfyUI's free_memory, in the real adapter) makes
 * room among its own other models, least recently loaded first. Returns the
 * bytes freed.
 */
static int64_t evict_own(agent *a, int keep, int64_t bytes)
{
    int64_t total = 0;
    uint64_t ents[SC_MAX_MODELS];
    int64_t res[SC_MAX_MODELS];
    int nr = 0;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        int i = -1;
        for (int k = 0; k < a->pr->n_models; k++)
            if (k != keep && !a->pr->models[k].paged && a->m[k].resident > 0 &&
                (i < 0 || a->m[k].last_use < a->m[i].last_use))
                i = k;
        if (i < 0 || total >= bytes)
            break;
        int64_t got = free_whole(a, i, bytes - total, true);
        total += got;
        if (got > 0 && a->m[i].entry) {
            ents[nr] = a->m[i].entry;
            res[nr++] = a->m[i].resident;
        }
    }
    pthread_mutex_unlock(&a->lock);
    for (int k = 0; k < nr; k++)
        comem_entry_set_resident(a->c, ents[k], res[k]);
    if (total > 0)
        ev(a, EV_EVICT, -1, bytes, total);
    return total;
}

/*
 * comem: ask before loading bytes of model i; retries while refused, for the
 * admission wait. A paged model asks once: refused, it pages in what is free
 * and streams the rest (F15: "admission refuses or pages during load").
 */
static int comem_admit_for(agent *a, int i, int64_t bytes, uint64_t *grant)
{
    const sc_model *sm = &a->pr->models[i];
    double t0 = now(a);
    uint64_t keep[1] = {a->m[i].entry};
    uint64_t holder = sm->paged ? comem_pager_holder(a->pager) : a->h_models;
    for (;;) {
        int64_t short_by = 0;
        int rc = comem_admit(a->c, a->card, holder, bytes, sm->inference, 0, keep, keep[0] ? 1 : 0, 20000, grant,
                             &short_by);
        if (rc == COMEM_OK) {
            int64_t freed = 0;
            comem_admit_details(a->c, NULL, NULL, NULL, &freed, NULL, NULL);
            ev(a, EV_GRANT, i, (int64_t)(wait_s(t0, a) * 1e6), freed);
            return COMEM_OK;
        }
        if (rc == COMEM_ENOSPC && short_by > 0 && evict_own(a, i, short_by) > 0)
            continue; /* this process's own manager made room among its own models: ask again */
        if (sm->paged)
            return rc; /* the pager takes what is free: no refusal, no wait */
        if (rc != COMEM_ENOSPC || wait_s(t0, a) >= a->s->admit_wait || atomic_load(&a->sh->end)) {
            ev(a, EV_REFUSE, i, bytes, short_by);
            return rc;
        }
        sh_sleep(a->sh, 1.0); /* queued: try again when someone may have let go */
    }
}

/* The other policies: the engine runs this process's ComfyUI for the load. */
static int64_t engine_admit_for(agent *a, int i, bool *paged_ok)
{
    double t0 = now(a);
    eng_msg r;
    if (!rq(a, RQ_LOAD, i, a->pr->models[i].inference, 0, &r))
        return 0;
    ev(a, EV_GRANT, i, (int64_t)(wait_s(t0, a) * 1e6), 0);
    *paged_ok = r.b == 1;
    return r.a;
}

static void census(agent *a, int i)
{
    if (a->pol != POL_COMEM)
        rq(a, RQ_CENSUS, i, model_resident(a, i), a->m[i].listed, NULL);
}

/* Brings model i fully in (a load, or the reload a run needs); cancel as for load_bytes. */
static void bring_in(agent *a, int i, double cancel)
{
    const sc_model *sm = &a->pr->models[i];
    amodel *m = &a->m[i];
    m->last_use = now(a);
    m->wanted = true;
    if (sm->paged) {
        ensure_pager(a);
        if (!a->pager)
            return;
        uint64_t grant = 0;
        if (!m->vbar) {
            bool paged_ok;
            if (a->pol == POL_COMEM && a->c)
                comem_admit_for(a, i, sm->size, &grant); /* granted or not, the pager decides residency */
            else if (a->pol != POL_COMEM)
                engine_admit_for(a, i, &paged_ok); /* the manager makes room; the pager decides residency */
            ev(a, EV_LOAD, i, sm->size, 0);
            if (comem_vbar_create(a->pager, sm->size, 0, &m->vbar) != COMEM_OK) {
                m->vbar = NULL;
                return;
            }
            sh_sleep(a->sh, (double)sm->size / a->s->load_rate);
            m->listed = true;
            pass(a, i);
            if (grant) {
                comem_grant_done(a->c, grant, 0, 0); /* the pager reports what it holds itself: */
                comem_vbar_unpin(m->vbar, 0, 0);     /* a boundary, so it sends what the ledger refused while
                                                        the grant still counted the same bytes */
            }
            ev(a, EV_LOADED, i, comem_vbar_loaded_size(m->vbar), comem_vbar_loaded_size(m->vbar));
            census(a, i);
        }
        return;
    }
    int64_t need = sm->size - m->resident;
    if (a->pol != POL_COMEM) {
        /* ComfyUI calls load_models_gpu before every node, loaded or not */
        bool dummy;
        need = engine_admit_for(a, i, &dummy);
        if (need < 0) { /* a negative lowvram budget: shed that much of the same model */
            pthread_mutex_lock(&a->lock);
            free_whole(a, i, -need, false);
            pthread_mutex_unlock(&a->lock);
            census(a, i);
            return;
        }
        m->listed = true;
        if (need == 0) {
            census(a, i);
            return;
        }
    }
    if (need <= 0)
        return;
    uint64_t grant = 0;
    if (a->pol == POL_COMEM && comem_admit_for(a, i, need, &grant) != COMEM_OK)
        return;
    ev(a, EV_LOAD, i, need, 0);
    bool oom;
    int64_t got = load_bytes(a, i, need, cancel, &oom);
    m->listed = true;
    if (a->pol == POL_COMEM) {
        if (!m->entry)
            comem_entry_add(a->c, a->h_models, sm->name, sm->size, 0, 0, &m->entry);
        comem_grant_done(a->c, grant, m->entry, got); /* cancelled or short: what did load is re-attributed */
        comem_entry_set_resident(a->c, m->entry, m->resident);
    }
    census(a, i);
    if (cancel > 0)
        ev(a, EV_CANCEL, i, got, m->resident);
    else
        ev(a, EV_LOADED, i, m->resident, got);
}

static void do_run(agent *a, const sc_step *st)
{
    uint32_t use = st->models;
    for (int i = 0; i < a->pr->n_models && !st->models; i++)
        if (a->m[i].wanted)
            use |= 1u << i;
    char prompt[64];
    snprintf(prompt, sizeof prompt, "%s-run-%d", a->pr->name, ++a->runs);
    /* The node starts: from here its models are in use, the loads it does first included. */
    if (a->pol == POL_COMEM && a->c)
        comem_holder_busy(a->c, 0, 1, prompt);
    for (int i = 0; i < a->pr->n_models; i++)
        if (use & (1u << i))
            bring_in(a, i, 0);
    a->busy = true;
    if (a->pol != POL_COMEM)
        rq(a, RQ_BUSY, -1, 1, 0, NULL);
    atomic_store(&a->sh->p[a->idx].busy, 1);
    int64_t streamed = 0; /* weights the node computes from host RAM (lowvram) instead of the card */
    for (int i = 0; i < a->pr->n_models; i++)
        if ((use & (1u << i)) && !a->pr->models[i].paged)
            streamed += comem_clamp0(a->pr->models[i].size - a->m[i].resident);
    ev(a, EV_RUN, -1, (int64_t)(st->secs * 1000), streamed);
    double t0 = now(a);
    bool paged = false;
    for (int i = 0; i < a->pr->n_models; i++)
        paged |= (use & (1u << i)) && a->pr->models[i].paged;
    int passes = paged ? (int)comem_max(1, comem_min(60, (int64_t)st->secs)) : 1;
    for (int i = 0; i < a->pr->n_models; i++) /* ComfyUI prioritizes a dynamic model it is about to run */
        if ((use & (1u << i)) && a->pr->models[i].paged && a->m[i].vbar)
            comem_vbar_prioritize(a->m[i].vbar);
    for (int k = 0; k < passes && !atomic_load(&a->sh->end); k++) {
        for (int i = 0; i < a->pr->n_models && paged; i++)
            if ((use & (1u << i)) && a->pr->models[i].paged)
                pass(a, i);
        sh_sleep_until(a->sh, t0 + st->secs * (k + 1) / passes);
    }
    atomic_store(&a->sh->p[a->idx].busy, 0);
    a->busy = false;
    ev(a, EV_RUN_END, -1, 0, 0);
    if (a->pol == POL_COMEM && a->c)
        comem_holder_busy(a->c, 0, 0, prompt);
    else if (a->pol != POL_COMEM) {
        for (int i = 0; i < a->pr->n_models; i++)
            if (a->pr->models[i].paged)
                census(a, i);
        rq(a, RQ_BUSY, -1, 0, 0, NULL);
    }
}

static void do_unload(agent *a, int i)
{
    amodel *m = &a->m[i];
    int64_t freed;
    if (a->pr->models[i].paged) {
        freed = m->vbar ? comem_vbar_loaded_size(m->vbar) : 0;
        if (m->vbar)
            comem_vbar_destroy(m->vbar);
        m->vbar = NULL;
        m->high = 0;
    } else {
        pthread_mutex_lock(&a->lock);
        freed = free_whole(a, i, -1, false);
        m->evicted_pending = 0;
        pthread_mutex_unlock(&a->lock);
        if (a->pol == POL_COMEM && m->entry) {
            comem_entry_remove(a->c, m->entry);
            m->entry = 0;
        }
    }
    m->listed = false;
    m->wanted = false;
    census(a, i);
    ev(a, EV_UNLOAD, i, freed, 0);
}

/* Moves this process's outside bytes on its card to target, in CHUNK steps spread over secs. */
static void do_foreign(agent *a, int64_t target, double secs)
{
    _Atomic int64_t *f = &a->sh->p[a->idx].foreign[a->card];
    int64_t cur = atomic_load(f);
    int64_t delta = target - cur;
    int steps = (int)((llabs(delta) + CHUNK - 1) / CHUNK);
    double t0 = now(a);
    for (int k = 0; k < steps && !atomic_load(&a->sh->end); k++) {
        int64_t d = delta > 0 ? comem_min(CHUNK, target - cur) : -comem_min(CHUNK, cur - target);
        int rc = d > 0 ? comem_sim_alloc(a->sim, a->card, d) : comem_sim_free(a->sim, a->card, -d);
        if (rc != COMEM_OK) {
            ev(a, EV_FOREIGN_OOM, -1, d, cur);
            break;
        }
        cur += d;
        atomic_store(f, cur);
        if (secs > 0)
            sh_sleep_until(a->sh, t0 + secs * (k + 1) / steps);
    }
    ev(a, EV_FOREIGN, -1, cur, 0);
}

static void do_custom(agent *a, int64_t target)
{
    pthread_mutex_lock(&a->lock);
    int64_t cur = a->custom;
    int rc = target > cur ? comem_sim_alloc(a->sim, a->card, target - cur)
                          : comem_sim_free(a->sim, a->card, cur - target);
    if (rc == COMEM_OK)
        a->custom = target;
    pthread_mutex_unlock(&a->lock);
    if (rc != COMEM_OK) {
        ev(a, EV_OOM, -1, target - cur, cur);
        return;
    }
    if (a->pol == POL_COMEM && a->c) {
        if (!a->h_custom) {
            comem_holder_add(a->c, "custom-node", a->card, COMEM_KIND_RAW, COMEM_ANSWERS_RELEASE, on_release_custom,
                             a, &a->h_custom);
            comem_entry_add(a->c, a->h_custom, "raw-vram", target, target, 0, &a->e_custom);
        } else {
            comem_entry_set_resident(a->c, a->e_custom, target);
        }
    }
    ev(a, EV_CUSTOM, -1, target, 0);
}

static void do_pin(agent *a, int64_t bytes)
{
    _Atomic int64_t *pinned = &a->sh->p[a->idx].pinned;
    if (a->pol == POL_COMEM && a->c) {
        if (!a->h_pins)
            comem_holder_add(a->c, "pins", a->card, COMEM_KIND_PINS, COMEM_ANSWERS_PINS, on_release_pins, a,
                             &a->h_pins);
        double t0 = now(a);
        for (;;) {
            int64_t short_by = 0;
            int rc = comem_pin_acquire(a->c, a->h_pins, bytes, &short_by);
            if (rc == COMEM_OK)
                break;
            if (rc != COMEM_ENOSPC || wait_s(t0, a) >= a->s->admit_wait || atomic_load(&a->sh->end)) {
                ev(a, EV_PIN_REFUSED, -1, bytes, short_by);
                return;
            }
            sh_sleep(a->sh, 1.0); /* queued; the coordinator asks other pin holders meanwhile */
        }
    } else if (a->pol != POL_COMEM) {
        eng_msg r;
        if (!rq(a, RQ_PIN, -1, bytes, 0, &r) || r.a != 1) {
            ev(a, EV_PIN_REFUSED, -1, bytes, 0);
            return;
        }
    }
    if (!ram_take(a, bytes)) {
        /* cudaHostRegister fails: the pages are not there ("CUDA OOM" from pinning) */
        if (a->pol == POL_COMEM && a->c)
            comem_pin_release(a->c, a->h_pins, bytes);
        else if (a->pol != POL_COMEM)
            rq(a, RQ_UNPIN, -1, bytes, 0, NULL);
        ev(a, EV_PIN_FAILED, -1, bytes, 0);
        return;
    }
    int64_t total = atomic_fetch_add(pinned, bytes) + bytes;
    pthread_mutex_lock(&a->lock);
    publish_rss(a);
    pthread_mutex_unlock(&a->lock);
    ev(a, EV_PIN, -1, bytes, total);
}

static void do_unpin(agent *a, int64_t bytes)
{
    int64_t give = comem_min(bytes, atomic_load(&a->sh->p[a->idx].pinned));
    if (give <= 0)
        return;
    if (a->pol == POL_COMEM && a->c)
        comem_pin_release(a->c, a->h_pins, give);
    else if (a->pol != POL_COMEM)
        rq(a, RQ_UNPIN, -1, give, 0, NULL);
    ram_give(a, give);
    atomic_fetch_sub(&a->sh->p[a->idx].pinned, give);
    pthread_mutex_lock(&a->lock);
    publish_rss(a);
    pthread_mutex_unlock(&a->lock);
    ev(a, EV_UNPIN, -1, give, 0);
}

/* ---- host RAM on the ledger (`ram ... ledger`, comem): growth admitted, copies dropped on ask ---- */

static bool ram_on_ledger(const agent *a)
{
    return a->pol == POL_COMEM && a->c && a->s->ram_ledger && !sim_card_uma(a) && a->h_ram;
}

/*
 * Under a->lock. The coordinator reads this process's host RAM as its RSS; the
 * simulated bytes are not resident, so the run's stand-in /proc
 * (COMEM_HOSTMEM_ROOT) carries them: <root>/proc/PID/status, replaced whole.
 */
static void publish_rss(agent *a)
{
    const char *root = getenv("COMEM_HOSTMEM_ROOT");
    if (a->pol != POL_COMEM || !a->s->ram_ledger || !root)
        return;
    const sh_proc *p = &a->sh->p[a->idx];
    int64_t rss = atomic_load(&p->ram) + atomic_load(&p->pinned) + atomic_load(&p->staging);
    char dir[4096], path[4200], tmp[4200];
    snprintf(dir, sizeof dir, "%s/proc/%d", root, (int)getpid());
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return;
    snprintf(path, sizeof path, "%s/status", dir);
    snprintf(tmp, sizeof tmp, "%s/status.new", dir);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fprintf(f, "Name:\t%s\nVmRSS:\t%lld kB\n", a->pr->name, (long long)(rss >> 10));
    if (fclose(f) == 0)
        rename(tmp, path);
}

/* Under a->lock: drops the i-th RAM copy (its bytes back to the machine, its entry out of the ledger). */
static int64_t ram_drop(agent *a, int i)
{
    int64_t bytes = a->ram_held[i].bytes;
    comem_entry_remove(a->c, a->ram_held[i].entry);
    memmove(&a->ram_held[i], &a->ram_held[i + 1], (size_t)(a->n_ram - i - 1) * sizeof a->ram_held[0]);
    a->n_ram--;
    ram_give(a, bytes);
    atomic_fetch_sub(&a->sh->p[a->idx].ram, bytes);
    return bytes;
}

/* Under a->lock: drops the oldest RAM copies until `want` bytes are gone (or none is left); what went. */
static int64_t ram_drop_oldest(agent *a, int64_t want)
{
    int64_t total = 0;
    while (a->n_ram > 0 && total < want)
        total += ram_drop(a, 0);
    return total;
}

/* Another process's admission asked for this process's RAM copies: the planned ones, then the oldest. */
static int on_release_ram(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                          const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder;
    (void)amounts;
    agent *a = user;
    int64_t want = kind == COMEM_RELEASE_IDLE ? INT64_MAX : bytes, total = 0;
    pthread_mutex_lock(&a->lock);
    for (size_t k = 0; k < n && total < want; k++)
        for (int i = 0; i < a->n_ram; i++)
            if (a->ram_held[i].entry == entries[k]) {
                total += ram_drop(a, i);
                break;
            }
    total += ram_drop_oldest(a, want - total);
    publish_rss(a);
    pthread_mutex_unlock(&a->lock);
    if (total > 0)
        ev(a, EV_RAM_DROP, -1, total, 1);
    *freed = total;
    return COMEM_OK;
}

/*
 * A `ram` step with host RAM on the ledger: growth is admitted before it is
 * held (a copy of weights kept in RAM, re-readable from its file); refused,
 * the process drops its own oldest copies for the shortfall, as ComfyUI's own
 * RAM release would, and asks again (every half second, up to the scenario's
 * admit wait, until the coordinator reads its RSS without them). Still
 * refused, it does not grow.
 */
static void ledger_ram(agent *a, int64_t target)
{
    _Atomic int64_t *ram = &a->sh->p[a->idx].ram;
    int64_t grow = target - a->ram_nominal;
    a->ram_nominal = target;
    if (grow <= 0) { /* the process lets go of copies: the newest first */
        int64_t give = -grow;
        pthread_mutex_lock(&a->lock);
        while (give > 0 && a->n_ram > 0) {
            int last = a->n_ram - 1;
            int64_t part = comem_min(give, a->ram_held[last].bytes);
            if (part == a->ram_held[last].bytes) {
                ram_drop(a, last);
            } else {
                a->ram_held[last].bytes -= part;
                comem_entry_set_resident(a->c, a->ram_held[last].entry, a->ram_held[last].bytes);
                ram_give(a, part);
                atomic_fetch_sub(ram, part);
            }
            give -= part;
        }
        publish_rss(a);
        pthread_mutex_unlock(&a->lock);
        ev(a, EV_RAM, -1, atomic_load(ram), 0);
        return;
    }
    uint64_t grant = 0;
    int64_t short_by = 0;
    int rc = comem_admit(a->c, COMEM_DEVICE_HOST_RAM, a->h_ram, grow, 0, 0, NULL, 0, 20000, &grant, &short_by);
    if (rc == COMEM_ENOSPC && short_by > 0) {
        pthread_mutex_lock(&a->lock);
        int64_t dropped = ram_drop_oldest(a, short_by);
        publish_rss(a);
        pthread_mutex_unlock(&a->lock);
        if (dropped > 0)
            ev(a, EV_RAM_DROP, -1, dropped, 0);
        /* asked again until the coordinator's reading of this process shows the copies gone */
        double t0 = now(a);
        do {
            sh_sleep(a->sh, 0.5);
            rc = comem_admit(a->c, COMEM_DEVICE_HOST_RAM, a->h_ram, grow, 0, 0, NULL, 0, 20000, &grant, &short_by);
        } while (rc == COMEM_ENOSPC && dropped > 0 && wait_s(t0, a) < a->s->admit_wait && !atomic_load(&a->sh->end));
    }
    if (rc != COMEM_OK || a->n_ram >= SC_MAX_STEPS) {
        if (rc == COMEM_OK)
            comem_grant_done(a->c, grant, 0, 0);
        ev(a, EV_RAM_REFUSED, -1, grow, 0);
        return;
    }
    if (!ram_take(a, grow)) { /* something the ledger does not see (an app) holds it: the kernel's turn */
        comem_grant_done(a->c, grant, 0, 0);
        atomic_fetch_add(&a->sh->ram_total, grow);
        atomic_fetch_add(ram, grow);
        ev(a, EV_RAM, -1, atomic_load(ram), 1);
        oom_kill(a);
        return;
    }
    char name[32];
    snprintf(name, sizeof name, "ram-copy-%d", a->n_ram);
    uint64_t entry = 0;
    pthread_mutex_lock(&a->lock);
    atomic_fetch_add(ram, grow);
    /* the grant becomes the entry's residency (an entry added resident would count the bytes twice until then) */
    if (comem_entry_add(a->c, a->h_ram, name, grow, 0, COMEM_ENTRY_RAM_FILE, &entry) == COMEM_OK) {
        a->ram_held[a->n_ram].entry = entry;
        a->ram_held[a->n_ram].bytes = grow;
        a->n_ram++;
    }
    comem_grant_done(a->c, grant, entry, grow);
    publish_rss(a);
    pthread_mutex_unlock(&a->lock);
    ev(a, EV_RAM, -1, atomic_load(ram), 0);
}

static void do_ram(agent *a, int64_t target)
{
    if (ram_on_ledger(a)) {
        ledger_ram(a, target);
        return;
    }
    _Atomic int64_t *ram = &a->sh->p[a->idx].ram;
    int64_t cur = atomic_load(ram);
    if (target > cur && !ram_take(a, target - cur)) {
        /* more than the machine (or the cgroup) has: the kernel kills the biggest process */
        int64_t over = target - cur;
        if (!sim_card_uma(a)) {
            atomic_fetch_add(&a->sh->ram_total, over);
            atomic_store(ram, target);
        }
        ev(a, EV_RAM, -1, target, 1);
        oom_kill(a);
        return;
    }
    if (target < cur)
        ram_give(a, cur - target);
    atomic_store(ram, target);
    ev(a, EV_RAM, -1, target, 0);
}

/* comem: `comem release --process NAME [--bytes N]`, the command line a user would type. */
static int64_t cli_release(agent *a, const sc_step *st)
{
    int out[2];
    if (pipe(out) != 0)
        return -1;
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%lld", (long long)st->bytes);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        if (st->bytes >= 0)
            execl("/proc/self/exe", "comem", "release", "--socket", a->sock, "--process",
                  a->s->procs[st->target].name, "--bytes", bytes, "--json", (char *)NULL);
        else
            execl("/proc/self/exe", "comem", "release", "--socket", a->sock, "--process",
                  a->s->procs[st->target].name, "--json", (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    char buf[4096];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(out[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    close(out[0]);
    waitpid(pid, NULL, 0);
    json_object *o = json_tokener_parse(buf), *v = NULL;
    int64_t freed = o && json_object_object_get_ex(o, "freed", &v) ? json_object_get_int64(v) : 0;
    if (o)
        json_object_put(o);
    return freed;
}

/* Idles at least secs, then, with until_released, on until none of its models is on the card. */
static void do_idle(agent *a, const sc_step *st)
{
    double t_end = now(a) + st->secs;
    sh_sleep_until(a->sh, t_end);
    for (double limit = t_end + st->secs; st->until_released && now(a) < limit && !atomic_load(&a->sh->end);) {
        bool held = false;
        pthread_mutex_lock(&a->lock);
        for (int i = 0; i < a->pr->n_models; i++)
            held |= model_resident(a, i) > 0;
        pthread_mutex_unlock(&a->lock);
        if (!held)
            break;
        sh_sleep(a->sh, 0.25);
    }
}

/* The readings an expectation takes as step k begins or ends (sc_mark), taken here, in order. */
static void take_marks(agent *a, int k, bool after)
{
    static comem_device_reading rd; /* one per process, as the agent is */
    for (int m = 0; m < a->s->n_marks; m++) {
        const sc_mark *mk = &a->s->marks[m];
        if (mk->proc != a->idx || mk->step != k || mk->after != after)
            continue;
        sh_read_cards(a->sh, a->s, a->sim, &rd, &a->sh->marks[m]);
        atomic_store(&a->sh->mark_taken[m], 1);
    }
}

static void do_step(agent *a, const sc_step *st)
{
    switch (st->kind) {
    case ST_AT:
        sh_sleep_until(a->sh, st->secs);
        break;
    case ST_IDLE:
        do_idle(a, st);
        break;
    case ST_LOAD: { /* a loader node: computing while it loads, so nobody asks for what it is loading */
        char prompt[64];
        snprintf(prompt, sizeof prompt, "%s-load-%d", a->pr->name, ++a->runs);
        if (a->pol == POL_COMEM && a->c)
            comem_holder_busy(a->c, 0, 1, prompt);
        else if (a->pol != POL_COMEM)
            rq(a, RQ_BUSY, -1, 1, 0, NULL);
        bring_in(a, st->model, st->cancel);
        if (a->pol == POL_COMEM && a->c)
            comem_holder_busy(a->c, 0, 0, prompt);
        else if (a->pol != POL_COMEM)
            rq(a, RQ_BUSY, -1, 0, 0, NULL);
        break;
    }
    case ST_RUN:
        do_run(a, st);
        break;
    case ST_UNLOAD:
        do_unload(a, st->model);
        break;
    case ST_FOREIGN:
        do_foreign(a, st->bytes, st->secs);
        break;
    case ST_CUSTOM:
        do_custom(a, st->bytes);
        break;
    case ST_PIN:
        do_pin(a, st->bytes);
        break;
    case ST_UNPIN:
        do_unpin(a, st->bytes);
        break;
    case ST_RAM:
        do_ram(a, st->bytes);
        break;
    case ST_KILL:
        ev(a, EV_KILL, -1, 0, 0);
        atomic_store(&a->sh->p[a->idx].killed, 1);
        raise(SIGKILL);
        break;
    case ST_RELEASE: {
        int64_t freed = 0;
        if (a->pol == POL_COMEM)
            freed = cli_release(a, st);
        else {
            eng_msg r;
            freed = rq(a, RQ_FREE_API, st->target, st->bytes, 0, &r) ? r.a : 0;
        }
        ev(a, EV_CLI, st->target, st->bytes, freed);
        break;
    }
    case ST_INJECT:
        a->inject += st->count;
        break;
    }
}

/* ---- the process ---- */

static void open_policy(agent *a)
{
    const sc_proc *pr = a->pr;
    if (pr->role == ROLE_APP)
        return;
    if (a->pol != POL_COMEM) {
        rq(a, RQ_HELLO, -1, getpid(), 0, NULL);
        comem_sim_touch(a->sim, a->card);
        if (pthread_create(&a->svc, NULL, service, a) == 0)
            a->svc_on = true;
        return;
    }
    int role = pr->role == ROLE_HOST ? COMEM_CLIENT_HOST : COMEM_CLIENT_WORKER;
    comem_reserve_opts ro = {.windows = a->s->card.semantics == SC_WDDM,
                             .total_vram_mib = (double)(a->s->card.size - a->s->card.reserved) / (double)COMEM_MIB,
                             .reserve_vram_set = a->s->reserve >= 0,
                             .reserve_vram_gb = (double)a->s->reserve / (double)COMEM_GIB};
    int64_t base = role == COMEM_CLIENT_HOST ? (int64_t)comem_extra_reserved_vram(&ro) : -1;
    unsigned flags = a->s->coordinator ? COMEM_OPEN_NO_LOCAL : 0;
    if (comem_client_open(a->sock, role, pr->name, base, flags, &a->c) != COMEM_OK) {
        a->c = NULL;
        ev(a, EV_LOCAL, -1, 0, 0);
        return;
    }
    comem_client_set_timeout(a->c, 20000);
    if (!comem_client_connected(a->c))
        ev(a, EV_LOCAL, -1, 0, 0);
    comem_sim_touch(a->sim, a->card); /* CUDA initialisation */
    unsigned hflags = COMEM_ANSWERS_RELEASE | (pr->role == ROLE_WORKER ? COMEM_ANSWERS_IDLE : 0);
    comem_holder_add(a->c, "models", a->card, COMEM_KIND_MODELS, hflags, on_release_models, a, &a->h_models);
    if (a->s->ram_ledger && !sim_card_uma(a)) {
        comem_holder_add(a->c, "ram-copies", COMEM_DEVICE_HOST_RAM, COMEM_KIND_MODELS,
                         COMEM_ANSWERS_RELEASE | COMEM_ANSWERS_IDLE, on_release_ram, a, &a->h_ram);
        pthread_mutex_lock(&a->lock);
        publish_rss(a);
        pthread_mutex_unlock(&a->lock);
    }
}

static void close_policy(agent *a)
{
    if (a->pol == POL_COMEM) {
        if (a->pager)
            comem_pager_close(a->pager); /* detaches first */
        if (a->c)
            comem_client_close(a->c);
        return;
    }
    if (a->pr->role != ROLE_APP)
        rq(a, RQ_BYE, -1, 0, 0, NULL);
    shutdown(a->cmd_fd, SHUT_RDWR);
    if (a->svc_on)
        pthread_join(a->svc, NULL);
    if (a->pager)
        comem_pager_close(a->pager);
}

_Noreturn void sim_agent_main(const scenario *s, sc_policy policy, int idx, sh_run *sh, const char *dir,
                              const char *sock, const char *spec, int go_fd, int req_fd, int cmd_fd)
{
    (void)dir;
    static agent a; /* one per process: it lives until _exit */
    memset(&a, 0, sizeof a);
    a.s = s;
    a.pr = &s->procs[idx];
    a.pol = policy;
    a.idx = idx;
    a.card = a.pr->card;
    a.sh = sh;
    a.sock = sock;
    a.spec = spec;
    a.req_fd = req_fd;
    a.cmd_fd = cmd_fd;
    pthread_mutex_init(&a.lock, NULL);
    alarm(600); /* never outlive a broken orchestrator */
    char go;
    if (read(go_fd, &go, 1) != 1)
        _exit(3);
    close(go_fd);
    comem_sim_spec sp;
    if (comem_sim_spec_parse(spec, &sp, NULL, 0) != COMEM_OK || comem_sim_open(&sp, &a.sim) != COMEM_OK)
        _exit(4);
    sh_sleep_until(sh, a.pr->start);
    atomic_store(&sh->p[idx].state, 1);
    ev(&a, EV_START, -1, getpid(), 0);
    open_policy(&a);
    atomic_store(&sh->p[idx].started, 1); /* others' steps after this start may go on (clock.c) */
    for (int k = 0; k < a.pr->n_steps && !atomic_load(&sh->end); k++) {
        take_marks(&a, k, false);
        do_step(&a, &a.pr->steps[k]);
        take_marks(&a, k, true);
    }
    atomic_store(&sh->p[idx].state, 2);
    while (!atomic_load(&sh->end))
        sh_sleep(sh, 0.5);
    close_policy(&a);
    comem_sim_close(a.sim);
    _exit(0);
}
