/*
 * tools/simulate/agent.c - one scenario process, whatever its policy: its
 * start, its timeline, its bytes on the card, the host RAM model.
 *
 * An agent is forked by the orchestrator before any thread exists, waits for
 * the start signal, opens the simulated card itself and walks its timeline on
 * the shared clock. The bytes it holds are real allocations on the card, so
 * the card (and the coordinator reading it) sees exactly what the process
 * holds, and a SIGKILL returns them the way a driver does. A paged model is a
 * real comem pager on the same card.
 *
 * How it decides is its policy's (agent_internal.h's table): libcomem
 * (agent_comem.c), or the model engine for comfy-env and uncoordinated
 * (agent_engine.c). This file calls the table and names neither.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "comem/pager.h"
#include "probe/sim.h"
#include "simulate/agent.h"
#include "simulate/agent_internal.h"
#include "simulate/clock.h"
#include "simulate/scenario.h"

#define CHUNK (256 * COMEM_MIB) /* a load copies and allocates this much at a time */
#define FAULT_SPAN (256 * COMEM_MIB) /* one layer's weights, faulted at a time in a pass */

/* ---- bytes on the card ---- */

int64_t agent_free_whole(agent *a, int i, int64_t bytes, bool eviction)
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

int64_t agent_free_paged(agent *a, int i, int64_t bytes)
{
    amodel *m = &a->m[i];
    if (!m->vbar)
        return 0;
    int64_t freed = 0;
    comem_vbar_free_memory(m->vbar, bytes < 0 ? comem_vbar_size(m->vbar) : bytes, &freed);
    return freed;
}

int64_t agent_model_resident(agent *a, int i)
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
            m->idle_taken = false; /* on the card again */
            reloaded += r;
        }
        pthread_mutex_unlock(&a->lock);
        if (rc != COMEM_OK) {
            agent_ev(a, EV_OOM, i, chunk, done);
            *oom = true;
            break;
        }
        done += chunk;
    }
    if (reloaded)
        agent_ev(a, EV_RELOAD, i, reloaded, 0);
    return done;
}

/* ---- the RAM model: Σ pinned + plain RAM of every process against the machine ---- */

static int64_t ram_limit(const scenario *s) { return s->cgroup > 0 ? comem_min(s->ram, s->cgroup) : s->ram; }

bool agent_ram_take(agent *a, int64_t bytes)
{
    if (agent_uma(a)) /* one pool: the card holds the RAM too */
        return comem_sim_host_alloc(a->sim, a->card, bytes) == COMEM_OK;
    int64_t after = atomic_fetch_add(&a->sh->ram_total, bytes) + bytes;
    if (after > ram_limit(a->s)) {
        atomic_fetch_sub(&a->sh->ram_total, bytes); /* book, check, undo */
        return false;
    }
    return true;
}

void agent_ram_give(agent *a, int64_t bytes)
{
    if (bytes <= 0)
        return;
    if (agent_uma(a))
        comem_sim_host_free(a->sim, a->card, bytes);
    else
        atomic_fetch_sub(&a->sh->ram_total, bytes);
}

void agent_oom_kill(agent *a)
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
    a->policy->pager_opened(a);
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
        a->policy->inject_faults(a, i, a->inject);
        a->inject = 0;
    }
    if (m->after_pass > before) /* taken by pressure since the last pass */
        agent_ev(a, EV_PAGED_EVICT, i, m->after_pass - before, 0);
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
            agent_ev(a, EV_FAULT_FAIL, i, 1, rc);
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
        agent_ev(a, EV_RELOAD, i, commits - first, 0);
    int64_t retries = comem_pager_stat(a->pager, COMEM_PAGER_STAT_TRANSIENT_RETRIES);
    if (retries > a->retries_seen) {
        agent_ev(a, EV_RETRIED, i, retries - a->retries_seen, 0);
        a->retries_seen = retries;
    }
    if (streamed > 0)
        agent_ev(a, EV_STREAMED, i, streamed, 0);
    /* The streamed part goes through host staging, as large as the policy's staging_target says. */
    if (streamed > 0) {
        int64_t want = a->policy->staging_target(a, staging, streamed);
        if (want > staging) {
            bool ok = a->policy->book_staging(a, want - staging) && agent_ram_take(a, want - staging);
            if (ok)
                atomic_store(&a->sh->p[a->idx].staging, want);
            agent_ev(a, EV_STAGING, i, ok ? want : staging, ok ? 0 : 1);
        }
    }
}

/* ---- steps ---- */

/* Brings model i fully in (a load, or the reload a run needs); cancel as for load_bytes. */
static void bring_in(agent *a, int i, double cancel)
{
    const sc_model *sm = &a->pr->models[i];
    amodel *m = &a->m[i];
    m->last_use = agent_now(a);
    m->wanted = true;
    if (sm->paged) {
        ensure_pager(a);
        if (!a->pager)
            return;
        uint64_t grant = 0;
        if (!m->vbar) {
            a->policy->admit_paged(a, i, &grant); /* granted or not, the pager decides residency */
            agent_ev(a, EV_LOAD, i, sm->size, 0);
            if (comem_vbar_create(a->pager, sm->size, 0, &m->vbar) != COMEM_OK) {
                m->vbar = NULL;
                return;
            }
            sh_sleep(a->sh, (double)sm->size / a->s->load_rate);
            m->listed = true;
            pass(a, i);
            a->policy->paged_loaded(a, i, grant);
            agent_ev(a, EV_LOADED, i, comem_vbar_loaded_size(m->vbar), comem_vbar_loaded_size(m->vbar));
            a->policy->census(a, i);
        }
        return;
    }
    pthread_mutex_lock(&a->load_lock); /* an LLM server's reload on comem-apps' look waits for this one, and back */
    int64_t need = sm->size - m->resident;
    uint64_t grant = 0;
    if (!a->policy->admit_whole(a, i, &need, &grant)) {
        pthread_mutex_unlock(&a->load_lock);
        return;
    }
    agent_ev(a, EV_LOAD, i, need, 0);
    bool oom;
    int64_t got = load_bytes(a, i, need, cancel, &oom);
    if (oom && agent_server(a)) {
        /* an LLM server's load is all or nothing (llama.cpp's, vLLM's): a failed one lets go of what it had */
        pthread_mutex_lock(&a->lock);
        agent_free_whole(a, i, -1, false);
        pthread_mutex_unlock(&a->lock);
        got = 0;
    }
    m->listed = m->resident > 0 || !agent_server(a);
    a->policy->whole_loaded(a, i, grant, got);
    a->policy->census(a, i);
    if (cancel > 0)
        agent_ev(a, EV_CANCEL, i, got, m->resident);
    else if (!(oom && agent_server(a)))
        agent_ev(a, EV_LOADED, i, m->resident, got);
    pthread_mutex_unlock(&a->load_lock);
}

void agent_bring_in(agent *a, int i) { bring_in(a, i, 0); }

static void do_run(agent *a, const sc_step *st)
{
    uint32_t use = st->models;
    for (int i = 0; i < a->pr->n_models && !st->models; i++)
        if (a->m[i].wanted || agent_server(a)) /* a request to a server names its model, loaded or not */
            use |= 1u << i;
    char prompt[64];
    snprintf(prompt, sizeof prompt, "%s-run-%d", a->pr->name, ++a->runs);
    /* The node starts: under comem, from here its models are in use, the loads it does first included. */
    if (a->policy->busy_covers_loads)
        a->policy->busy(a, true, prompt);
    for (int i = 0; i < a->pr->n_models; i++)
        if (use & (1u << i))
            bring_in(a, i, 0);
    int64_t missing = 0; /* a server computes from the card or not at all: the request fails (HTTP 503, an error) */
    for (int i = 0; i < a->pr->n_models && agent_server(a); i++)
        if (use & (1u << i))
            missing += comem_clamp0(a->pr->models[i].size - a->m[i].resident);
    if (missing > 0) {
        agent_ev(a, EV_REQ_FAILED, -1, missing, 0);
        if (a->policy->busy_covers_loads)
            a->policy->busy(a, false, prompt);
        return;
    }
    a->busy = true;
    if (!a->policy->busy_covers_loads)
        a->policy->busy(a, true, prompt);
    atomic_store(&a->sh->p[a->idx].busy, 1);
    int64_t streamed = 0; /* weights the node computes from host RAM (lowvram) instead of the card */
    for (int i = 0; i < a->pr->n_models; i++)
        if ((use & (1u << i)) && !a->pr->models[i].paged)
            streamed += comem_clamp0(a->pr->models[i].size - a->m[i].resident);
    agent_ev(a, EV_RUN, -1, (int64_t)(st->secs * 1000), streamed);
    double t0 = agent_now(a);
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
    agent_ev(a, EV_RUN_END, -1, 0, 0);
    for (int i = 0; i < a->pr->n_models; i++) /* what the passes left of its paged models */
        if (a->pr->models[i].paged)
            a->policy->census(a, i);
    a->policy->busy(a, false, prompt);
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
        freed = agent_free_whole(a, i, -1, false);
        if (!agent_server(a)) /* a server's model comem unloaded stays comem-apps' to load again (docs/apps.md) */
            m->evicted_pending = 0;
        pthread_mutex_unlock(&a->lock);
        a->policy->whole_unloaded(a, i);
    }
    m->listed = false;
    m->wanted = false;
    a->policy->census(a, i);
    agent_ev(a, EV_UNLOAD, i, freed, 0);
}

/* Moves this process's outside bytes on its card to target, in CHUNK steps spread over secs. */
static void do_foreign(agent *a, int64_t target, double secs)
{
    _Atomic int64_t *f = &a->sh->p[a->idx].foreign[a->card];
    int64_t cur = atomic_load(f);
    int64_t delta = target - cur;
    int steps = (int)((llabs(delta) + CHUNK - 1) / CHUNK);
    double t0 = agent_now(a);
    for (int k = 0; k < steps && !atomic_load(&a->sh->end); k++) {
        int64_t d = delta > 0 ? comem_min(CHUNK, target - cur) : -comem_min(CHUNK, cur - target);
        int rc = d > 0 ? comem_sim_alloc(a->sim, a->card, d) : comem_sim_free(a->sim, a->card, -d);
        if (rc != COMEM_OK) {
            agent_ev(a, EV_FOREIGN_OOM, -1, d, cur);
            break;
        }
        cur += d;
        atomic_store(f, cur);
        if (secs > 0)
            sh_sleep_until(a->sh, t0 + secs * (k + 1) / steps);
    }
    agent_ev(a, EV_FOREIGN, -1, cur, 0);
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
        agent_ev(a, EV_OOM, -1, target - cur, cur);
        return;
    }
    a->policy->custom_changed(a, target);
    agent_ev(a, EV_CUSTOM, -1, target, 0);
}

static void do_pin(agent *a, int64_t bytes)
{
    _Atomic int64_t *pinned = &a->sh->p[a->idx].pinned;
    if (!a->policy->pin(a, bytes))
        return;
    if (!agent_ram_take(a, bytes)) {
        /* cudaHostRegister fails: the pages are not there ("CUDA OOM" from pinning) */
        a->policy->unpin(a, bytes);
        agent_ev(a, EV_PIN_FAILED, -1, bytes, 0);
        return;
    }
    int64_t total = atomic_fetch_add(pinned, bytes) + bytes;
    pthread_mutex_lock(&a->lock);
    a->policy->ram_changed(a);
    pthread_mutex_unlock(&a->lock);
    agent_ev(a, EV_PIN, -1, bytes, total);
}

static void do_unpin(agent *a, int64_t bytes)
{
    int64_t give = comem_min(bytes, atomic_load(&a->sh->p[a->idx].pinned));
    if (give <= 0)
        return;
    a->policy->unpin(a, give);
    agent_ram_give(a, give);
    atomic_fetch_sub(&a->sh->p[a->idx].pinned, give);
    pthread_mutex_lock(&a->lock);
    a->policy->ram_changed(a);
    pthread_mutex_unlock(&a->lock);
    agent_ev(a, EV_UNPIN, -1, give, 0);
}

static void do_ram(agent *a, int64_t target)
{
    if (a->policy->ram(a, target))
        return;
    _Atomic int64_t *ram = &a->sh->p[a->idx].ram;
    int64_t cur = atomic_load(ram);
    if (target > cur && !agent_ram_take(a, target - cur)) {
        /* more than the machine (or the cgroup) has: the kernel kills the biggest process */
        int64_t over = target - cur;
        if (!agent_uma(a)) {
            atomic_fetch_add(&a->sh->ram_total, over);
            atomic_store(ram, target);
        }
        agent_ev(a, EV_RAM, -1, target, 1);
        agent_oom_kill(a);
        return;
    }
    if (target < cur)
        agent_ram_give(a, cur - target);
    atomic_store(ram, target);
    agent_ev(a, EV_RAM, -1, target, 0);
}

/* Idles at least secs, then, with until_released, on until none of its models is on the card. */
static void do_idle(agent *a, const sc_step *st)
{
    double t_end = agent_now(a) + st->secs;
    sh_sleep_until(a->sh, t_end);
    for (double limit = t_end + st->secs; st->until_released && agent_now(a) < limit && !atomic_load(&a->sh->end);) {
        bool held = false;
        pthread_mutex_lock(&a->lock);
        for (int i = 0; i < a->pr->n_models; i++)
            held |= agent_model_resident(a, i) > 0;
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
        a->policy->busy(a, true, prompt);
        bring_in(a, st->model, st->cancel);
        a->policy->busy(a, false, prompt);
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
        agent_ev(a, EV_KILL, -1, 0, 0);
        atomic_store(&a->sh->p[a->idx].killed, 1);
        raise(SIGKILL);
        break;
    case ST_RELEASE: {
        int64_t freed = a->policy->release(a, st);
        agent_ev(a, EV_CLI, st->target, st->bytes, freed);
        break;
    }
    case ST_INJECT:
        a->inject += st->count;
        break;
    case ST_PRESSURE: {
        int64_t freed = a->policy->pressure(a, st->bytes);
        agent_ev(a, EV_PRESSURE, -1, st->bytes, freed);
        break;
    }
    }
}

/* ---- the process ---- */

_Noreturn void sim_agent_main(const scenario *s, sc_policy policy, int idx, sh_run *sh, const char *dir,
                              const char *sock, const char *spec, int go_fd, int req_fd, int cmd_fd)
{
    (void)dir;
    static agent a; /* one per process: it lives until _exit */
    memset(&a, 0, sizeof a);
    a.s = s;
    a.pr = &s->procs[idx];
    a.policy = policy == POL_COMEM    ? &agent_policy_comem
               : sc_proc_server(a.pr) ? &agent_policy_alone /* no ComfyUI in it, nobody speaks for it */
                                      : &agent_policy_engine;
    a.idx = idx;
    a.card = a.pr->card;
    a.sh = sh;
    a.sock = sock;
    a.spec = spec;
    a.req_fd = req_fd;
    a.cmd_fd = cmd_fd;
    pthread_mutex_init(&a.lock, NULL);
    pthread_mutexattr_t rec; /* recursive: comem-apps' look holds it around a bring_in, which takes it too */
    pthread_mutexattr_init(&rec);
    pthread_mutexattr_settype(&rec, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&a.load_lock, &rec);
    pthread_mutexattr_destroy(&rec);
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
    agent_ev(&a, EV_START, -1, getpid(), 0);
    if (a.pr->role != ROLE_APP || sc_proc_server(a.pr))
        a.policy->open(&a);
    atomic_store(&sh->p[idx].started, 1); /* others' steps after this start may go on (clock.c) */
    for (int k = 0; k < a.pr->n_steps && !atomic_load(&sh->end); k++) {
        take_marks(&a, k, false);
        do_step(&a, &a.pr->steps[k]);
        take_marks(&a, k, true);
    }
    atomic_store(&sh->p[idx].state, 2);
    while (!atomic_load(&sh->end))
        sh_sleep(sh, 0.5);
    a.policy->close(&a);
    comem_sim_close(a.sim);
    _exit(0);
}
