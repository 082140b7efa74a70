/*
 * tools/simulate/agent_internal.h - what an agent's files share: the agent,
 * its models, and the table each policy fills.
 *
 * One scenario process is one agent (agent.h), in three files:
 *
 *   agent.c          the process, whatever its policy: its start, its timeline,
 *                    its bytes on the card, the host RAM model, the passes over
 *                    paged models
 *   agent_comem.c    the comem policy: libcomem's client, the holders and their
 *                    release callbacks, admission, pins, host RAM on the ledger
 *   agent_engine.c   the comfy-env and uncoordinated policies: the model engine
 *                    (engine.c) decides and the agent carries its decisions
 *                    out; the two differ only inside the engine. And an LLM
 *                    server's under both (agent_policy_alone): nobody decides
 *                    for it
 *
 * agent.c reaches a policy only through its agent_policy table (the redis ae
 * pattern the pager's VMM backends follow); a policy's file uses agent.c's
 * helpers below and never the other policy's file.
 *
 *   agent                    one per process (static in sim_agent_main)
 *   ├── s, pr, idx, card     the scenario, this process in it, its card
 *   ├── sh, sim              the run's shared state (clock.h), the card
 *   ├── policy               the table of the policy it runs under
 *   ├── lock                 guards m[], custom and the RAM copies (comem)
 *   ├── m[] [lock]           its models (amodel)
 *   ├── busy                 computing: the engine's commands are answered busy
 *   ├── pager                its pager, opened at its first paged model
 *   ├── comem's              the client, holder and entry ids, RAM copies, an LLM server's look
 *   └── the engine's         request and command channels, service thread
 *
 * Threads: the main thread walks the timeline; libcomem's own threads run the
 * release callbacks (comem), or the service thread runs the engine's commands
 * (the others). Both take `lock` for the model table. An LLM server under
 * comem has one more, comem-apps' look (agent_comem.c), which loads a model
 * again through agent_bring_in; `load_lock` keeps its loads and the
 * timeline's one at a time.
 */
#ifndef COMEM_TOOLS_SIMULATE_AGENT_INTERNAL_H
#define COMEM_TOOLS_SIMULATE_AGENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "comem/comem.h"
#include "comem/pager.h"
#include "probe/sim.h"
#include "simulate/clock.h"
#include "simulate/scenario.h"

typedef struct amodel {
    int64_t resident;        /* bytes on the card (whole models) */
    bool listed;             /* loaded: in its manager's list */
    bool wanted;             /* the workflow loaded it and has not unloaded it: a run uses it */
    int64_t evicted_pending; /* taken by someone's eviction and not loaded again yet */
    bool idle_taken;         /* an LLM server's, taken by an idle release: loaded again only by a request */
    uint64_t entry;          /* comem entry (whole models) */
    comem_vbar *vbar;        /* paged models */
    int64_t high;            /* most of it ever resident at once (paged) */
    double last_use;         /* scenario time it was last loaded or run */
    int64_t after_pass;      /* resident at the end of the last pass (paged) */
} amodel;

typedef struct agent_policy agent_policy;

typedef struct agent {
    const scenario *s;
    const sc_proc *pr;
    const agent_policy *policy;
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
    comem_pager *pager;
    /* comem (agent_comem.c) */
    comem_client *c;
    uint64_t h_models, h_pins, h_custom, e_custom;
    int64_t retries_seen;
    uint64_t h_ram; /* host RAM (`ram ... ledger`): one entry per growth, oldest first */
    int n_ram;
    struct {
        uint64_t entry;
        int64_t bytes;
    } ram_held[SC_MAX_STEPS];
    int64_t ram_nominal; /* what the timeline's `ram` steps said; less what was dropped is what it holds */
    /* an LLM server (an app with models) under comem: comem-apps' look, which loads again what comem unloaded
       once there is room (reload = "when-free"), on its own thread; one load at a time, its or the timeline's */
    pthread_mutex_t load_lock;
    bool when_free; /* [load_lock] the load in progress is the look's reload when free */
    pthread_t look;
    bool look_on;
    comem_view *view;
    /* comfy-env, uncoordinated (agent_engine.c) */
    int req_fd, cmd_fd;
    pthread_t svc;
    bool svc_on;
} agent;

/*
 * A policy: what agent.c asks of it, at each point where the policies differ.
 * Every member is set. Called on the main thread unless said otherwise.
 */
struct agent_policy {
    /* Starts the policy once the card is open, before the first step (not for an app); ends it after the
       last, for every process, closing the pager too (the policy knows what must go before it). */
    void (*open)(agent *a);
    void (*close)(agent *a);
    /* A node begins computing (on) or ends. */
    void (*busy)(agent *a, bool on, const char *prompt);
    /* A run's node is busy from its start, the loads it does first included (comem: nobody is asked for
       what it is loading); false: from when it computes (ComfyUI alone). */
    bool busy_covers_loads;
    /* Before paged model i's VBAR is made: the admission, granted or not (*grant: a grant to close, or 0);
       after its first pass: closes it. */
    void (*admit_paged)(agent *a, int i, uint64_t *grant);
    void (*paged_loaded)(agent *a, int i, uint64_t grant);
    /* Before whole model i loads *need more bytes (what it lacks; the policy may change it): false when
       nothing is to load (refused, or the manager decided otherwise). After the load of got bytes. */
    bool (*admit_whole)(agent *a, int i, int64_t *need, uint64_t *grant);
    void (*whole_loaded)(agent *a, int i, uint64_t grant, int64_t got);
    /* Whole model i is gone from the card (an unload step). */
    void (*whole_unloaded)(agent *a, int i);
    /* Tells the manager what model i holds now. */
    void (*census)(agent *a, int i);
    /* The pager was just opened. */
    void (*pager_opened)(agent *a);
    /* count page commits of paged model i's next pass fail transiently (`inject-faults`). */
    void (*inject_faults)(agent *a, int i, int count);
    /* The host staging buffer a pass that streamed bytes needs, from staging now; and booking its growth
       with the policy (false: refused). */
    int64_t (*staging_target)(agent *a, int64_t staging, int64_t streamed);
    bool (*book_staging)(agent *a, int64_t bytes);
    /* Pinning bytes more is allowed (false: refused, and said so); pinned bytes are let go. */
    bool (*pin)(agent *a, int64_t bytes);
    void (*unpin)(agent *a, int64_t bytes);
    /* The custom node holds bytes now. */
    void (*custom_changed)(agent *a, int64_t bytes);
    /* A `ram` step to target: true when the policy carried it out (comem's ledger), false for the plain
       RAM model. */
    bool (*ram)(agent *a, int64_t target);
    /* This process's host RAM changed. Caller holds a->lock. */
    void (*ram_changed)(agent *a);
    /* A `release` step: the bytes it got back. */
    int64_t (*release)(agent *a, const sc_step *st);
    /* A `pressure` step (an out-of-memory retry site): the bytes the others freed. */
    int64_t (*pressure)(agent *a, int64_t bytes);
};

extern const agent_policy agent_policy_comem;  /* agent_comem.c */
extern const agent_policy agent_policy_engine; /* agent_engine.c: comfy-env and uncoordinated */
extern const agent_policy agent_policy_alone;  /* agent_engine.c: an LLM server under those two: nobody speaks for it */

/* ---- agent.c's helpers, for the policies ---- */

static inline void agent_ev(agent *a, sh_kind k, int model, int64_t x, int64_t y)
{
    sh_event_add(a->sh, a->idx, k, model, a->card, x, y);
}

/* Scenario seconds now, and since t0. */
static inline double agent_now(agent *a) { return sh_now(a->sh); }
static inline double agent_waited(agent *a, double t0) { return agent_now(a) - t0; }

/* The card is a uma one: host RAM and the card are one pool. */
static inline bool agent_uma(const agent *a) { return a->s->card.semantics == SC_UMA; }

/* Frees up to bytes of whole model i (all of it for < 0); eviction: someone took them. Caller holds the lock. */
int64_t agent_free_whole(agent *a, int i, int64_t bytes, bool eviction);
/* Frees up to bytes of paged model i through its pager (all unpinned for < 0). */
int64_t agent_free_paged(agent *a, int i, int64_t bytes);
/* Bytes of model i on the card. */
int64_t agent_model_resident(agent *a, int i);
/* Loads whole model i (what of it is missing) as a run would, its policy's admission first; under load_lock. */
void agent_bring_in(agent *a, int i);
/* This process is an LLM server (an app with models). */
static inline bool agent_server(const agent *a) { return sc_proc_server(a->pr); }

/* Books bytes of host RAM (pinned or plain) on the machine; false when it is not there. */
bool agent_ram_take(agent *a, int64_t bytes);
/* Gives host RAM back to the machine. */
void agent_ram_give(agent *a, int64_t bytes);
/* The kernel's OOM killer: the process using the most host RAM dies. */
void agent_oom_kill(agent *a);

#endif
