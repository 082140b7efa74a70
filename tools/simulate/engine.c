/*
 * tools/simulate/engine.c - the model engine: ComfyUI per process, and comfy-env's host pool.
 *
 * The two policies that are not comem are models, decided here on one thread
 * from the card's real readings and each process's census, and carried out by
 * the agents (which hold the bytes). docs/scenarios.md writes the models down
 * with their sources; every rule is a function of src/arith/:
 *
 *   ComfyUI, one per process (both policies): load_models_gpu's admission
 *     (comem_admission_targets_compute, comem_admission_free_target), its
 *     free_memory ladder (comem_evict_run) over that process's own list
 *     measured with that process's own reading (device-wide on linux and
 *     uma, its own budget under wddm), the second pass, and the lowvram
 *     budget (comem_lowvram_budget). Pins: its own MAX_PINNED_MEMORY
 *     (comem_max_pinned) against its own pins only.
 *
 *   comfy-env (the host's pool, comfy-env-code.md section 3): a stand-in in
 *     the host's list for every worker model; a worker's load goes through
 *     the budget callback (true free from NVML, offset = blind - true, the
 *     ask target comem_ask_target + floor, the host's free_memory over its
 *     list, then partial_release asks to idle workers planned by
 *     comem_plan_pressure_release); the reserve is published (comem_charge,
 *     comem_total_reserve, comem_next_reserve) and forwarded to the host's
 *     pager only (comem_pager_headroom_forward); idle workers get a
 *     full_release after the idle time (comem_plan_idle_release, swept every
 *     10 s and at node boundaries). Single device: everything is judged on
 *     the host's card. No pin budget across processes.
 *
 * A busy process (computing) answers every command with "busy": neither
 * ComfyUI nor comfy-env takes weights from a running node.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arith/admission.h"
#include "arith/cross_reserve.h"
#include "arith/evict.h"
#include "arith/lowvram.h"
#include "arith/pinned.h"
#include "arith/planners.h"
#include "arith/reserve.h"
#include "base/bytes.h"
#include "comem/common.h"
#include "probe/sim.h"
#include "simulate/clock.h"
#include "simulate/engine.h"
#include "simulate/scenario.h"

#define LIST_MAX 128
#define SWEEP_SECONDS 10.0 /* comfy-env's IDLE_SWEEP_INTERVAL_SECONDS */

typedef struct lent {
    int proc, model; /* proc != the list's owner: a comfy-env stand-in */
} lent;

typedef struct mproc {
    bool hello, alive;
    int32_t pid;
    int64_t resident[SC_MAX_MODELS];
    bool listed[SC_MAX_MODELS];
    bool busy;
    double idle_since;
    bool idle_known;
    int64_t pinned;
    lent list[LIST_MAX]; /* this process's ComfyUI current_loaded_models, index 0 most recent */
    int n_list;
} mproc;

struct sim_engine {
    const scenario *s;
    sc_policy pol;
    sh_run *sh;
    comem_sim *sim;
    const int *req, *cmd;
    pthread_t thread;
    int stop[2];
    mproc p[SC_MAX_PROCS];
    int host; /* the comfy-env parent: the first host, or -1 */
    int64_t base, published;
    double last_sweep;
    comem_device_reading rd;
};

static const sc_model *model(sim_engine *e, int p, int m) { return &e->s->procs[p].models[m]; }

static bool wddm(sim_engine *e) { return e->s->card.semantics == SC_WDDM; }

/* ---- readings ---- */

/* The NVML-style free of card: every process counts. */
static int64_t true_free(sim_engine *e, int card)
{
    if (comem_sim_read(e->sim, card, &e->rd) != COMEM_OK)
        return 0;
    return e->rd.free;
}

/* What process p's cuMemGetInfo says is free on card: device-wide, or its own budget under wddm. */
static int64_t local_free(sim_engine *e, int p, int card)
{
    if (comem_sim_read(e->sim, card, &e->rd) != COMEM_OK)
        return 0;
    if (!wddm(e))
        return e->rd.free;
    int64_t own = 0;
    for (size_t i = 0; i < e->rd.n_procs; i++)
        if (e->rd.procs[i].pid == e->p[p].pid)
            own = e->rd.procs[i].bytes;
    return comem_clamp0(e->s->card.size - e->s->card.reserved - own);
}

/* ComfyUI's EXTRA_RESERVED_VRAM for this scenario's card. */
static double default_reserve(sim_engine *e)
{
    comem_reserve_opts ro = {.windows = wddm(e),
                             .total_vram_mib = (double)(e->s->card.size - e->s->card.reserved) / (double)COMEM_MIB,
                             .reserve_vram_set = e->s->reserve >= 0,
                             .reserve_vram_gb = (double)e->s->reserve / (double)COMEM_GIB};
    return comem_extra_reserved_vram(&ro);
}

static int64_t held(sim_engine *e, int p)
{
    int64_t h = 0;
    for (int m = 0; m < e->s->procs[p].n_models; m++)
        h = comem_add(h, e->p[p].resident[m]);
    return h;
}

/* ---- commands to agents ---- */

/* Asks process p to free bytes (-1: all) of model m; returns the bytes freed, 0 when busy or gone. */
static int64_t command_free(sim_engine *e, int p, int m, int64_t bytes, int how)
{
    mproc *x = &e->p[p];
    if (!x->alive) /* its memory died with it */
        return 0;
    if (x->busy)
        return 0;
    eng_msg c = {.kind = CM_FREE, .proc = p, .model = m, .a = bytes, .b = how}, r;
    if (write(e->cmd[p], &c, sizeof c) != (ssize_t)sizeof c)
        return 0;
    struct pollfd pf = {.fd = e->cmd[p], .events = POLLIN};
    if (poll(&pf, 1, 10000) <= 0 || read(e->cmd[p], &r, sizeof r) != (ssize_t)sizeof r)
        return 0;
    if (r.a < 0) {
        x->busy = true; /* it started computing meanwhile */
        return 0;
    }
    x->resident[m] = comem_clamp0(x->resident[m] - r.a);
    return r.a;
}

static void command_headroom(sim_engine *e, int p, int64_t bytes)
{
    eng_msg c = {.kind = CM_HEADROOM, .proc = p, .a = bytes}, r;
    if (write(e->cmd[p], &c, sizeof c) == (ssize_t)sizeof c) {
        struct pollfd pf = {.fd = e->cmd[p], .events = POLLIN};
        if (poll(&pf, 1, 10000) > 0 && read(e->cmd[p], &r, sizeof r) != (ssize_t)sizeof r)
            return;
    }
}

/* ---- one process's ComfyUI list ---- */

static void list_remove(mproc *x, int proc, int m)
{
    for (int i = 0; i < x->n_list; i++) {
        if (x->list[i].proc == proc && x->list[i].model == m) {
            memmove(&x->list[i], &x->list[i + 1], (size_t)(x->n_list - i - 1) * sizeof x->list[0]);
            x->n_list--;
            return;
        }
    }
}

/* Puts (proc, m) at index 0 (ComfyUI inserts a loaded model at the front). */
static void list_front(mproc *x, int proc, int m)
{
    list_remove(x, proc, m);
    if (x->n_list == LIST_MAX)
        x->n_list--;
    memmove(&x->list[1], &x->list[0], (size_t)x->n_list * sizeof x->list[0]);
    x->list[0] = (lent){proc, m};
    x->n_list++;
}

static bool listed(const mproc *x, int proc, int m)
{
    for (int i = 0; i < x->n_list; i++)
        if (x->list[i].proc == proc && x->list[i].model == m)
            return true;
    return false;
}

typedef struct ladder {
    sim_engine *e;
    int owner, card;
    lent ents[LIST_MAX];
    int64_t freed_from[SC_MAX_PROCS];
} ladder;

static double op_free_now(void *user)
{
    ladder *l = user;
    return (double)local_free(l->e, l->owner, l->card);
}

static double op_partial(void *user, size_t i, double to_free)
{
    ladder *l = user;
    lent en = l->ents[i];
    int64_t got = command_free(l->e, en.proc, en.model, (int64_t)ceil(to_free), 0);
    l->freed_from[en.proc] += got;
    return (double)got;
}

static void op_detach(void *user, size_t i)
{
    ladder *l = user;
    lent en = l->ents[i];
    sim_engine *e = l->e;
    if (!e->p[en.proc].alive) { /* comfy-env: a dead worker's stand-in counts as offloaded */
        list_remove(&e->p[l->owner], en.proc, en.model);
        return;
    }
    int64_t got = command_free(e, en.proc, en.model, -1, 2);
    l->freed_from[en.proc] += got;
    if (e->p[en.proc].resident[en.model] == 0) {
        list_remove(&e->p[l->owner], en.proc, en.model);
        if (en.proc == l->owner)
            e->p[en.proc].listed[en.model] = false;
    }
}

/*
 * ComfyUI's free_memory(required, device, keep_loaded) for process owner's list:
 * the ladder with owner's own reading. keep is (proc, model) or proc -1.
 */
static void free_memory(sim_engine *e, int owner, int card, double required, lent keep, bool for_dynamic,
                        int64_t *freed_from)
{
    mproc *x = &e->p[owner];
    ladder l = {.e = e, .owner = owner, .card = card};
    comem_evict_entry ents[LIST_MAX];
    int n = x->n_list;
    for (int i = 0; i < n; i++) {
        lent en = x->list[i];
        l.ents[i] = en;
        const sc_model *sm = model(e, en.proc, en.model);
        ents[i] = (comem_evict_entry){
            .size = sm->size,
            .loaded = e->p[en.proc].resident[en.model],
            .refs = en.proc == owner ? 2 : 1, /* a stand-in is referenced by the list only */
            /* a stand-in's load_device is the host's device whatever card the worker is on
               (pool.py _register_new_patchers: get_torch_device()); single-device by design */
            .device = en.proc != owner || e->s->procs[en.proc].card == card ? card : -2,
            .dynamic = sm->paged && en.proc == owner, /* a stand-in says is_dynamic() False */
            .keep = en.proc == keep.proc && en.model == keep.model,
            .dead = !e->p[en.proc].alive && en.proc != owner,
        };
    }
    comem_evict_request req = {.required = required, .device = card, .for_dynamic = for_dynamic, .smart_memory = true};
    comem_evict_ops ops = {op_free_now, op_partial, op_detach, &l};
    size_t order[LIST_MAX];
    comem_evict_action acts[LIST_MAX];
    comem_evict_result res;
    comem_evict_run(&req, ents, (size_t)n, &ops, order, acts, &res);
    if (freed_from)
        for (int i = 0; i < e->s->n_procs; i++)
            freed_from[i] += l.freed_from[i];
}

/*
 * load_models_gpu([model m of p]) in p's own ComfyUI with reserve R. Returns
 * the bytes the model should gain (negative: shed); *paged when the pager
 * decides residency instead.
 */
static int64_t comfy_load(sim_engine *e, int p, int m, double R, bool *paged)
{
    const sc_model *sm = model(e, p, m);
    mproc *x = &e->p[p];
    int card = e->s->procs[p].card;
    comem_admission_targets t;
    comem_admission_targets_compute((double)sm->inference, false, 0, R, &t);
    int64_t need = sm->size - x->resident[m];
    list_front(x, p, m);
    x->listed[m] = true;
    lent self = {p, m};
    free_memory(e, p, card, comem_admission_free_target((double)need, t.extra_mem), self, sm->paged, NULL);
    if (comem_admission_needs_second_pass((double)local_free(e, p, card), t.mmr))
        free_memory(e, p, card, t.mmr, self, sm->paged, NULL);
    *paged = sm->paged;
    if (sm->paged)
        return 0;
    comem_lowvram_in in = {.vram_state = COMEM_VRAM_NORMAL,
                           .lowvram_available = true,
                           .free = (double)local_free(e, p, card),
                           .loaded = (double)x->resident[m],
                           .mmr = t.mmr,
                           .inference = t.inference,
                           .ratio = COMEM_WEIGHT_RATIO_NVIDIA};
    comem_budget b = comem_lowvram_budget(&in);
    if (getenv("COMEM_SIM_DEBUG"))
        fprintf(stderr, "engine: %s loads %s: R %.0f free %.0f loaded %lld mmr %.0f budget kind %d value %.0f\n",
                e->s->procs[p].name, sm->name, R, in.free, (long long)x->resident[m], t.mmr, (int)b.kind, b.value);
    /* model_load -> partially_load(extra = budget): 0 is a full load; 0.1 gains nothing (an unloaded model
       stays in lowvram with nothing resident); a negative budget sheds that much of the same model. */
    int64_t want = b.kind == COMEM_BUDGET_FULL      ? sm->size
                   : b.kind == COMEM_BUDGET_NOTHING ? x->resident[m]
                                                    : comem_min(sm->size, comem_clamp0(x->resident[m] + (int64_t)b.value));
    return want - x->resident[m];
}

/* ---- comfy-env's pool ---- */

static bool is_worker(sim_engine *e, int p) { return e->s->procs[p].role == ROLE_WORKER && e->p[p].hello; }

static void publish(sim_engine *e, bool shrink)
{
    int host = e->host;
    int card = e->s->procs[host].card;
    int64_t charges[SC_MAX_PROCS];
    size_t n = 0;
    for (int i = 0; i < e->s->n_procs; i++)
        if (is_worker(e, i) && e->p[i].alive)
            charges[n++] = comem_charge(held(e, i), wddm(e), COMEM_CONTEXT_FLOOR);
    (void)card;
    int64_t proposed = comem_total_reserve(e->base, charges, n, e->s->card.size);
    int64_t next = comem_next_reserve(e->published, proposed, shrink);
    if (next == e->published)
        return;
    e->published = next;
    bool pager = false;
    for (int m = 0; m < e->s->procs[host].n_models; m++)
        pager |= model(e, host, m)->paged;
    if (pager) /* only the host's pager is steered */
        command_headroom(e, host,
                         comem_pager_headroom_forward(e->s->reserve >= 0, e->s->reserve, e->published, e->base));
}

/* A stand-in for every loaded worker model, in the host's list (registration at a boundary). */
static void register_standins(sim_engine *e)
{
    mproc *h = &e->p[e->host];
    for (int w = 0; w < e->s->n_procs; w++) {
        if (!is_worker(e, w))
            continue;
        for (int m = 0; m < e->s->procs[w].n_models; m++) {
            bool want = e->p[w].alive && e->p[w].listed[m] && e->p[w].resident[m] > 0;
            if (want && !listed(h, w, m))
                list_front(h, w, m);
            else if (!e->p[w].alive && listed(h, w, m))
                list_remove(h, w, m);
        }
    }
}

/* _ask_idle_workers: sized partial_release asks to idle workers, largest first; returns bytes freed. */
static int64_t ask_idle_workers(sim_engine *e, int64_t shortfall, int requester)
{
    comem_release_holder hs[SC_MAX_PROCS];
    int idx[SC_MAX_PROCS];
    size_t n = 0, req = SIZE_MAX;
    for (int w = 0; w < e->s->n_procs; w++) {
        if (!is_worker(e, w))
            continue;
        if (w == requester)
            req = n;
        idx[n] = w;
        hs[n++] = (comem_release_holder){e->s->procs[w].name, e->p[w].alive, true, e->p[w].busy, held(e, w)};
    }
    comem_release_ask asks[SC_MAX_PROCS];
    size_t k = comem_plan_pressure_release(hs, n, shortfall, req, asks);
    int64_t total = 0;
    for (size_t i = 0; i < k; i++) {
        int w = idx[asks[i].holder];
        int card = e->s->procs[w].card;
        /* the worker's own ladder: free_memory(free_before + size) */
        int64_t before = local_free(e, w, card);
        int64_t got[SC_MAX_PROCS] = {0};
        free_memory(e, w, card, (double)(before + asks[i].bytes), (lent){-1, -1}, false, got);
        total += comem_clamp0(local_free(e, w, card) - before); /* the receipt: free after - free before */
    }
    if (total > 0)
        publish(e, true);
    return total;
}

/* The budget callback for worker w loading model m; fills the reply's reserve and true free. */
static void budget_callback(sim_engine *e, int w, int m, int64_t *extra, int64_t *device_free)
{
    int host = e->host;
    int card = e->s->procs[host].card; /* one device: the host's */
    int64_t blind = local_free(e, host, card), tru = true_free(e, card);
    int64_t offset = comem_clamp0(blind - tru);
    double min_inf = comem_minimum_inference_memory((double)e->published);
    int64_t own = comem_charge(held(e, w), wddm(e), COMEM_CONTEXT_FLOOR);
    int64_t host_res = comem_reserve_for_requester(e->published, own);
    int64_t need = comem_add(comem_ask_target(model(e, w, m)->size, COMEM_WEIGHT_SLACK, comem_trunc(min_inf), host_res, 0),
                             COMEM_CONTEXT_FLOOR);
    free_memory(e, host, card, (double)comem_add(need, offset), (lent){-1, -1}, false, NULL);
    int64_t post = true_free(e, card);
    if (need > post)
        ask_idle_workers(e, need - post, w);
    *extra = comem_reserve_for_requester(e->published, own);
    *device_free = true_free(e, card);
}

static void idle_sweep(sim_engine *e, double now)
{
    comem_idle_holder hs[SC_MAX_PROCS];
    int idx[SC_MAX_PROCS];
    size_t n = 0;
    for (int w = 0; w < e->s->n_procs; w++) {
        if (!is_worker(e, w))
            continue;
        idx[n] = w;
        hs[n++] = (comem_idle_holder){.key = e->s->procs[w].name,
                                      .alive = e->p[w].alive,
                                      .advertises = true,
                                      .in_flight = e->p[w].busy,
                                      .holding = held(e, w) > 0,
                                      .idle_known = e->p[w].idle_known,
                                      .idle_since = e->p[w].idle_since};
    }
    int card = e->s->procs[e->host].card;
    bool tight = true_free(e, card) < e->published;
    size_t sel[SC_MAX_PROCS];
    size_t k = comem_plan_idle_release(hs, n, now, e->s->idle_release, NULL, tight, sel);
    bool any = false;
    for (size_t i = 0; i < k; i++) {
        int w = idx[sel[i]];
        for (int m = 0; m < e->s->procs[w].n_models; m++)
            if (e->p[w].resident[m] > 0)
                command_free(e, w, m, -1, 1);
        e->p[w].idle_since = now; /* its activity clock restarts */
        any = true;
    }
    if (any)
        publish(e, true);
    e->last_sweep = now;
}

static void boundary(sim_engine *e)
{
    if (e->pol != POL_COMFY_ENV || e->host < 0)
        return;
    register_standins(e);
    idle_sweep(e, sh_now(e->sh));
    publish(e, false);
}

/* ---- requests ---- */

static int64_t pin_ceiling(sim_engine *e)
{
    const scenario *s = e->s;
    bool limited = s->cgroup > 0 && s->cgroup < s->ram;
    comem_pin_ceiling_in in = {.ram = (double)(limited ? s->cgroup : s->ram),
                               .disk_swap = s->swap,
                               .windows = wddm(e),
                               .cgroup_limited = limited,
                               .enabled = true};
    return (int64_t)comem_max_pinned(&in);
}

/* ComfyUI's /free (unload_all_models) on the host; returns what came back from target. */
static int64_t free_api(sim_engine *e, int target)
{
    int host = e->host;
    if (host < 0 || (e->pol == POL_UNCOORD && target != host))
        return 0; /* nothing but the graph could have asked it, and the graph does not run */
    int64_t got[SC_MAX_PROCS] = {0};
    free_memory(e, host, e->s->procs[host].card, COMEM_UNLOAD_ALL, (lent){-1, -1}, false, got);
    if (e->pol == POL_COMFY_ENV)
        publish(e, true);
    return got[target];
}

static void handle(sim_engine *e, int p, const eng_msg *m, eng_msg *r)
{
    mproc *x = &e->p[p];
    *r = *m;
    r->a = r->b = 0;
    switch (m->kind) {
    case RQ_HELLO:
        x->hello = x->alive = true;
        x->pid = (int32_t)m->a;
        x->idle_since = sh_now(e->sh);
        x->idle_known = true;
        break;
    case RQ_LOAD: {
        bool paged = false;
        double R = default_reserve(e);
        int64_t add;
        if (e->pol == POL_COMFY_ENV && e->host >= 0 && p != e->host) {
            int64_t extra, dfree;
            budget_callback(e, p, m->model, &extra, &dfree);
            int64_t others = comem_clamp0(local_free(e, p, e->s->procs[p].card) - dfree);
            R = (double)comem_add(extra, others); /* the worker's EXTRA_RESERVED_VRAM: a sum, never a max */
        } else if (e->pol == POL_COMFY_ENV && p == e->host) {
            R = (double)e->published;
        }
        add = comfy_load(e, p, m->model, R, &paged);
        r->a = add;
        r->b = paged;
        break;
    }
    case RQ_CENSUS:
        x->resident[m->model] = m->a;
        x->listed[m->model] = m->b != 0;
        if (!m->b)
            list_remove(x, p, m->model);
        if (e->pol == POL_COMFY_ENV && e->host >= 0 && p != e->host) {
            x->idle_since = sh_now(e->sh);
            register_standins(e);
            publish(e, false);
        }
        break;
    case RQ_BUSY:
        x->busy = m->a != 0;
        if (!x->busy) {
            x->idle_since = sh_now(e->sh);
            x->idle_known = true;
            boundary(e);
        }
        break;
    case RQ_PIN:
        if (comem_add(x->pinned, m->a) <= pin_ceiling(e)) {
            x->pinned += m->a;
            r->a = 1;
        }
        break;
    case RQ_UNPIN:
        x->pinned = comem_clamp0(x->pinned - m->a);
        break;
    case RQ_FREE_API:
        r->a = free_api(e, m->model);
        break;
    case RQ_BYE:
        x->alive = false;
        break;
    default:
        break;
    }
}

static void *loop(void *arg)
{
    sim_engine *e = arg;
    const scenario *s = e->s;
    struct pollfd pf[SC_MAX_PROCS + 1];
    for (;;) {
        int n = 0;
        int who[SC_MAX_PROCS];
        for (int i = 0; i < s->n_procs; i++) {
            if (e->req[i] < 0)
                continue;
            pf[n] = (struct pollfd){.fd = e->req[i], .events = POLLIN};
            who[n++] = i;
        }
        pf[n] = (struct pollfd){.fd = e->stop[0], .events = POLLIN};
        double now = sh_now(e->sh);
        int timeout = (int)comem_max(1, (int64_t)((e->last_sweep + SWEEP_SECONDS - now) / s->speed * 1000));
        int rc = poll(pf, (nfds_t)n + 1, timeout);
        if (rc < 0 && errno != EINTR)
            break;
        if (pf[n].revents)
            break;
        /* processes that are gone: their memory died with them */
        for (int i = 0; i < s->n_procs; i++) {
            if (e->p[i].alive && atomic_load(&e->sh->p[i].state) == 3) {
                e->p[i].alive = false;
                memset(e->p[i].resident, 0, sizeof e->p[i].resident);
                for (int k = 0; k < s->n_procs; k++)
                    for (int mm = 0; mm < s->procs[i].n_models; mm++)
                        if (k != i)
                            list_remove(&e->p[k], i, mm); /* a dead worker's stand-in counts as offloaded */
            }
        }
        for (int k = 0; k < n; k++) {
            if (!(pf[k].revents & (POLLIN | POLLHUP)))
                continue;
            int p = who[k];
            eng_msg m, r;
            ssize_t got = read(e->req[p], &m, sizeof m);
            if (got != (ssize_t)sizeof m) {
                e->p[p].alive = false;
                continue;
            }
            handle(e, p, &m, &r);
            if (write(e->req[p], &r, sizeof r) != (ssize_t)sizeof r)
                e->p[p].alive = false;
        }
        now = sh_now(e->sh);
        if (e->pol == POL_COMFY_ENV && e->host >= 0 && now >= e->last_sweep + SWEEP_SECONDS)
            idle_sweep(e, now);
    }
    return NULL;
}

int sim_engine_start(const scenario *s, sc_policy policy, sh_run *sh, const char *spec, const int *req_fds,
                     const int *cmd_fds, sim_engine **out)
{
    sim_engine *e = calloc(1, sizeof *e);
    if (!e)
        return COMEM_ENOMEM;
    e->s = s;
    e->pol = policy;
    e->sh = sh;
    e->req = req_fds;
    e->cmd = cmd_fds;
    e->host = -1;
    for (int i = 0; i < s->n_procs && e->host < 0; i++)
        if (s->procs[i].role == ROLE_HOST)
            e->host = i;
    e->base = comem_trunc(default_reserve(e)); /* read once, before the first publish */
    e->published = e->base;
    comem_sim_spec sp;
    if (comem_sim_spec_parse(spec, &sp, NULL, 0) != COMEM_OK || comem_sim_open(&sp, &e->sim) != COMEM_OK ||
        pipe(e->stop) != 0) {
        free(e);
        return COMEM_EIO;
    }
    if (pthread_create(&e->thread, NULL, loop, e) != 0) {
        comem_sim_close(e->sim);
        free(e);
        return COMEM_ENOMEM;
    }
    *out = e;
    return COMEM_OK;
}

void sim_engine_stop(sim_engine *e)
{
    if (!e)
        return;
    char c = 'q';
    if (write(e->stop[1], &c, 1) != 1)
        perror("comem simulate: stopping the engine");
    pthread_join(e->thread, NULL);
    close(e->stop[0]);
    close(e->stop[1]);
    comem_sim_close(e->sim);
    free(e);
}
