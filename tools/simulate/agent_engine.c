/*
 * tools/simulate/agent_engine.c - the comfy-env and uncoordinated policies of
 * a scenario process: the model engine decides, the agent carries it out.
 *
 * Under both, every process runs its own ComfyUI, and comfy-env adds the
 * host's pool over them; all of it is the model engine (engine.c), which is
 * where the two policies differ. The agent sends each load, census, node
 * boundary, pin and /free over its request channel (RQ_*, one eng_msg a
 * packet, answered in turn), and a service thread carries out the engine's
 * commands (CM_*: free these bytes of this model, set the pager's headroom)
 * unless the process is computing, when it answers busy.
 *
 * The service thread takes the agent's lock for the model table; everything
 * else runs on the main thread.
 *
 * An LLM server (an app with models) is no ComfyUI: under both policies it
 * runs agent_policy_alone, at the end of this file, and the engine never
 * hears of it.
 */
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/pager.h"
#include "probe/sim.h"
#include "simulate/agent_internal.h"
#include "simulate/engine.h"

/* ---- requests to the model engine ---- */

/* Sends one request and waits (up to 60 s) for its answer, into *reply when given; false when none came. */
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

/* ---- the engine's commands ---- */

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
                freed = a->pr->models[m.model].paged ? agent_free_paged(a, m.model, m.a)
                                                      : agent_free_whole(a, m.model, m.a, true);
                if (m.b == 2) /* the model leaves its manager's list (detach) */
                    a->m[m.model].listed = agent_model_resident(a, m.model) > 0;
                pthread_mutex_unlock(&a->lock);
                r.a = freed;
                if (m.b == 1)
                    agent_ev(a, EV_IDLE_REL, m.model, m.a, freed);
                else
                    agent_ev(a, EV_EVICT, m.model, m.a, freed);
            }
        }
        if (write(a->cmd_fd, &r, sizeof r) != (ssize_t)sizeof r)
            break;
    }
    return NULL;
}

/* ---- loads ---- */

/* The engine runs this process's ComfyUI for a load of model i: the bytes to add (negative: to shed). */
static int64_t engine_admit_for(agent *a, int i, bool *paged_ok)
{
    double t0 = agent_now(a);
    eng_msg r;
    if (!rq(a, RQ_LOAD, i, a->pr->models[i].inference, 0, &r))
        return 0;
    agent_ev(a, EV_GRANT, i, (int64_t)(agent_waited(a, t0) * 1e6), 0);
    *paged_ok = r.b == 1;
    return r.a;
}

static void census_engine(agent *a, int i)
{
    rq(a, RQ_CENSUS, i, agent_model_resident(a, i), a->m[i].listed, NULL);
}

static void admit_paged_engine(agent *a, int i, uint64_t *grant)
{
    (void)grant;
    bool paged_ok;
    engine_admit_for(a, i, &paged_ok); /* the manager makes room; the pager decides residency */
}

static void paged_loaded_engine(agent *a, int i, uint64_t grant)
{
    (void)a;
    (void)i;
    (void)grant;
}

/* ComfyUI calls load_models_gpu before every node, loaded or not: the engine says what to load or shed. */
static bool admit_whole_engine(agent *a, int i, int64_t *need, uint64_t *grant)
{
    (void)grant;
    bool dummy;
    *need = engine_admit_for(a, i, &dummy);
    if (*need < 0) { /* a negative lowvram budget: shed that much of the same model */
        pthread_mutex_lock(&a->lock);
        agent_free_whole(a, i, -*need, false);
        pthread_mutex_unlock(&a->lock);
        census_engine(a, i);
        return false;
    }
    a->m[i].listed = true;
    if (*need == 0) {
        census_engine(a, i);
        return false;
    }
    return true;
}

static void whole_loaded_engine(agent *a, int i, uint64_t grant, int64_t got)
{
    (void)a;
    (void)i;
    (void)grant;
    (void)got; /* the census that follows tells the engine */
}

static void whole_unloaded_engine(agent *a, int i)
{
    (void)a;
    (void)i; /* the census that follows tells the engine */
}

/* ---- the policy ---- */

static void open_engine(agent *a)
{
    rq(a, RQ_HELLO, -1, getpid(), 0, NULL);
    comem_sim_touch(a->sim, a->card);
    if (pthread_create(&a->svc, NULL, service, a) == 0)
        a->svc_on = true;
}

static void close_engine(agent *a)
{
    if (a->pr->role != ROLE_APP)
        rq(a, RQ_BYE, -1, 0, 0, NULL);
    shutdown(a->cmd_fd, SHUT_RDWR);
    if (a->svc_on)
        pthread_join(a->svc, NULL);
    if (a->pager)
        comem_pager_close(a->pager); /* after the service thread, which sets its headroom */
}

static void busy_engine(agent *a, bool on, const char *prompt)
{
    (void)prompt;
    rq(a, RQ_BUSY, -1, on ? 1 : 0, 0, NULL);
}

static void pager_opened_engine(agent *a)
{
    (void)a; /* nothing to attach it to: the engine steers it through its headroom (CM_HEADROOM) */
}

/* aimdo has no retry in its fault path (comfy-aimdo#100, open): "Fault failed: 2" */
static void inject_faults_engine(agent *a, int i, int count) { agent_ev(a, EV_FAULT_FAIL, i, count, 0); }

/* aimdo's HostBuffer grows to what one prompt streams (ComfyUI#15575). */
static int64_t staging_target_engine(agent *a, int64_t staging, int64_t streamed)
{
    (void)a;
    return comem_add(staging, streamed);
}

static bool book_staging_engine(agent *a, int64_t bytes)
{
    (void)a;
    (void)bytes;
    return true; /* no budget across processes: only the machine can say no */
}

/* This process's own pin ceiling (ComfyUI's), kept by the engine. */
static bool pin_engine(agent *a, int64_t bytes)
{
    eng_msg r;
    if (!rq(a, RQ_PIN, -1, bytes, 0, &r) || r.a != 1) {
        agent_ev(a, EV_PIN_REFUSED, -1, bytes, 0);
        return false;
    }
    return true;
}

static void unpin_engine(agent *a, int64_t bytes) { rq(a, RQ_UNPIN, -1, bytes, 0, NULL); }

static void custom_changed_engine(agent *a, int64_t bytes)
{
    (void)a;
    (void)bytes; /* nobody is told: a custom node's raw VRAM is outside every manager */
}

static bool ram_engine(agent *a, int64_t target)
{
    (void)a;
    (void)target;
    return false; /* plain RAM, with no ledger */
}

static void ram_changed_engine(agent *a) { (void)a; }

/* ComfyUI's /free, asked of the target process. */
static int64_t release_engine(agent *a, const sc_step *st)
{
    eng_msg r;
    return rq(a, RQ_FREE_API, st->target, st->bytes, 0, &r) ? r.a : 0;
}

static int64_t pressure_engine(agent *a, int64_t bytes)
{
    (void)a;
    (void)bytes;
    return 0; /* not modelled under these policies: nobody is asked (docs/scenarios.md) */
}

const agent_policy agent_policy_engine = {
    .open = open_engine,
    .close = close_engine,
    .busy = busy_engine,
    .busy_covers_loads = false,
    .admit_paged = admit_paged_engine,
    .paged_loaded = paged_loaded_engine,
    .admit_whole = admit_whole_engine,
    .whole_loaded = whole_loaded_engine,
    .whole_unloaded = whole_unloaded_engine,
    .census = census_engine,
    .pager_opened = pager_opened_engine,
    .inject_faults = inject_faults_engine,
    .staging_target = staging_target_engine,
    .book_staging = book_staging_engine,
    .pin = pin_engine,
    .unpin = unpin_engine,
    .custom_changed = custom_changed_engine,
    .ram = ram_engine,
    .ram_changed = ram_changed_engine,
    .release = release_engine,
    .pressure = pressure_engine,
};

/* ---- an LLM server under these policies: nobody speaks for it ---- */

/*
 * An LLM server (an app with models) with no comem-apps: it is no ComfyUI and
 * tells the engine nothing (neither ComfyUI nor comfy-env knows it is there;
 * they see its bytes in the card's reading), loads a whole model whenever a
 * request needs it, failing where it does not fit (agent.c lets go of a
 * failed load), and never lets go of a model but by its own unload step.
 */
static void open_alone(agent *a) { comem_sim_touch(a->sim, a->card); /* its CUDA context */ }

static void busy_alone(agent *a, bool on, const char *prompt)
{
    (void)a;
    (void)on;
    (void)prompt;
}

static bool admit_whole_alone(agent *a, int i, int64_t *need, uint64_t *grant)
{
    (void)a;
    (void)i;
    (void)grant;
    return *need > 0; /* all of what is missing, no arithmetic: it fits, or the allocation fails */
}

static void census_alone(agent *a, int i)
{
    (void)a;
    (void)i;
}

const agent_policy agent_policy_alone = {
    .open = open_alone,
    .close = close_engine, /* no service thread, no pager: closes its end of the engine's channel */
    .busy = busy_alone,
    .busy_covers_loads = false,
    .admit_paged = admit_paged_engine, /* a server's models are whole (scenario.c): never called */
    .paged_loaded = paged_loaded_engine,
    .admit_whole = admit_whole_alone,
    .whole_loaded = whole_loaded_engine,
    .whole_unloaded = whole_unloaded_engine,
    .census = census_alone,
    .pager_opened = pager_opened_engine,
    .inject_faults = inject_faults_engine,
    .staging_target = staging_target_engine,
    .book_staging = book_staging_engine,
    .pin = pin_engine, /* an app does not pin (scenario.c): never called */
    .unpin = unpin_engine,
    .custom_changed = custom_changed_engine,
    .ram = ram_engine, /* plain RAM */
    .ram_changed = ram_changed_engine,
    .release = release_engine, /* a `release` step typed beside it: ComfyUI's /free, as for anyone */
    .pressure = pressure_engine,
};
