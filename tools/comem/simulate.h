/*
 * tools/comem/simulate.h - `comem simulate`: scenarios, the shared run state, results.
 *
 * A scenario (docs/scenarios.md) is parsed into a `scenario` (simulate_parse.c).
 * One run replays it under one policy (simulate_run.c):
 *
 *   this process (the orchestrator)
 *   ├── the simulated card(s): one file every process maps (probe/sim.h)
 *   ├── comem:       a real coordinator on a thread (coord/coord.h), its idle
 *   │                release scaled by the scenario's speed
 *   │   comfy-env,
 *   │   uncoord.:    the model engine on a thread (simulate_model.c): one
 *   │                ComfyUI manager per process, and for comfy-env the host's
 *   │                pool (reserve publication, stand-ins, budget callback,
 *   │                idle sweep), answering requests over socketpairs
 *   ├── the sampler thread: reads the card(s) every few ms, reaps children
 *   └── one agent per scenario process (forked before any thread starts;
 *       simulate_agent.c): holds its own bytes on the card, walks its timeline
 *       on the shared clock, and decides through libcomem (comem) or asks the
 *       engine (the other two)
 *
 * Everything the processes share lives in one MAP_SHARED anonymous mapping
 * (sh_run): the clock's origin and speed, an append-only event log, and per
 * process a few live figures (pinned, foreign bytes, RAM, busy). Scenario
 * time is (now - t0) * speed: every process reads the same clock.
 */
#ifndef COMEM_TOOLS_SIMULATE_H
#define COMEM_TOOLS_SIMULATE_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SC_MAX_CARDS 4
#define SC_MAX_PROCS 96
#define SC_MAX_MODELS 8
#define SC_MAX_STEPS 64
#define SC_MAX_EXPECT 40
#define SC_MAX_MARKS 32
#define SC_NAME 32

/* ---- the scenario ---- */

typedef enum sc_role { ROLE_HOST = 1, ROLE_WORKER = 2, ROLE_APP = 3 } sc_role;

typedef enum sc_policy { POL_COMEM = 0, POL_COMFY_ENV = 1, POL_UNCOORD = 2, POL_COUNT = 3 } sc_policy;
extern const char *const sc_policy_names[POL_COUNT];

/* Card semantics as the scenario names them (the values of comem_sim_semantics). */
#define SC_LINUX 0
#define SC_WDDM 1
#define SC_UMA 2
extern const char *const sc_semantics_names[3];

typedef enum sc_step_kind {
    ST_AT,      /* wait until scenario time secs */
    ST_IDLE,    /* wait secs, not computing */
    ST_LOAD,    /* load model (cancel: stop after that fraction) */
    ST_RUN,     /* compute for secs with models (0: every loaded model) */
    ST_UNLOAD,  /* unload model */
    ST_FOREIGN, /* hold bytes outside any manager, reached over secs */
    ST_CUSTOM,  /* a custom node holds bytes of raw VRAM, registered with a release callback (comem) */
    ST_PIN,     /* pin bytes more host RAM */
    ST_UNPIN,   /* unpin bytes */
    ST_RAM,     /* hold bytes of plain host RAM (absolute) */
    ST_KILL,    /* die by SIGKILL */
    ST_RELEASE, /* ask process target to release bytes (-1: all) from the command line */
    ST_INJECT   /* the next count page commits fail transiently (NOT_READY) */
} sc_step_kind;

typedef struct sc_step {
    sc_step_kind kind;
    int line;
    double secs;
    int model;       /* load, unload: index into the process's models */
    uint32_t models; /* run: bit i = model i; 0 = every loaded model */
    int64_t bytes;
    double cancel; /* load: 0 = not cancelled, else the fraction loaded when it is */
    int target;    /* release: process index */
    char tname[SC_NAME]; /* release: the target as written */
    int count;     /* inject */
    bool until_released; /* idle: then on until none of its models is on the card (at most secs more) */
} sc_step;

typedef struct sc_model {
    char name[SC_NAME];
    int64_t size, inference;
    bool paged;
    int line;
} sc_model;

typedef struct sc_proc {
    char name[SC_NAME];
    sc_role role;
    double start;
    int card;
    int line;
    int n_models;
    sc_model models[SC_MAX_MODELS];
    int n_steps;
    sc_step steps[SC_MAX_STEPS];
} sc_proc;

/* Metrics an expectation can name (simulate_report.c has their words and meanings). */
typedef enum sc_metric {
    M_FAILED, M_REFUSED, M_SPILLED, M_OVER_S, M_EVICTIONS, M_EVICTED, M_RELOADED, M_WAIT50, M_WAIT99,
    M_PEAK, M_PINNED_PEAK, M_PIN_BUDGET, M_PINNED_OVER, M_RAM_PEAK, M_RAM_LIMIT, M_OOM_KILLED, M_LEAKED,
    M_KILL_MS, M_RESIDENT, M_FOREIGN, M_USED, M_FREE, M_UNATTRIBUTED, M_DEGRADED, M_CRASHED, M_RETRIES,
    M_CLI_FREED, M_CAPACITY, M_GRANTS_OVER, M_STAGING_PEAK, M_STREAMED, M_COUNT
} sc_metric;
extern const char *const sc_metric_names[M_COUNT];
extern const char *const sc_metric_help[M_COUNT];

typedef struct sc_term {
    bool is_metric;
    double value; /* a constant */
    sc_metric metric;
    int proc;  /* -1: none */
    char pname[SC_NAME]; /* the process as written (resolved into proc after the whole file) */
    int card;  /* 0 unless named */
    bool card_set; /* "card N" was written: event figures count that card's events only */
    double at; /* < 0: the whole run (or its end, for a reading) */
    int mark_line;   /* > 0: a reading as the step written on that line begins (before) or ends (after) */
    bool mark_after;
    int mark;        /* index into scenario.marks once resolved; -1: none */
} sc_term;

typedef enum sc_op { OP_LT, OP_LE, OP_EQ, OP_NE, OP_GE, OP_GT } sc_op;

typedef struct sc_expect {
    int line;
    bool gap; /* expect-gap: evaluated and reported, never asserted */
    char text[200];
    char why[200];
    sc_term lhs, rhs, rhs2; /* rhs (+|-) rhs2 */
    int rhs_sign;           /* 0: no rhs2 */
    sc_op op;
} sc_expect;

typedef struct sc_card {
    int64_t size, reserved, ctx;
    int semantics;
} sc_card;

/*
 * A reading the process itself takes as one of its steps begins or ends:
 * what happened before that point in its timeline has happened, whatever the
 * machine's load did to the clock, so an expectation on it asserts an order,
 * not a speed.
 */
typedef struct sc_mark {
    int proc, step, line;
    bool after;
} sc_mark;

typedef struct scenario {
    char file[PATH_MAX];
    char id[SC_NAME];
    char title[200];
    double speed;        /* scenario seconds per real second */
    double end;          /* scenario length; <= 0: when every process is done, plus 5 s */
    double idle_release; /* seconds */
    double load_rate;    /* bytes per scenario second a load copies */
    double admit_wait;   /* how long a refused admission or pin keeps retrying */
    int64_t headroom;    /* free bytes below which a card counts as over budget */
    int64_t reserve;     /* ComfyUI's reserve override (--reserve-vram); -1: its default */
    int n_cards;
    sc_card card; /* every card has these settings (one simulated file) */
    bool on[3];   /* semantics the suite runs it on (linux, wddm, uma) */
    int64_t ram, swap, cgroup; /* host RAM; cgroup < 0: none */
    bool ram_ledger;           /* `ram ... ledger`: comem's coordinator serves host RAM (comemd --ram) */
    bool coordinator;          /* false: comem clients find no coordinator (local mode) */
    int n_procs;
    sc_proc procs[SC_MAX_PROCS];
    int n_expect;
    sc_expect expects[SC_MAX_EXPECT];
    int n_marks;
    sc_mark marks[SC_MAX_MARKS];
} scenario;

/*
 * Parses the scenario file at path into *out (zeroed first). On error returns
 * COMEM_EINVAL with "file:line: what is wrong" in err; nothing is half-parsed
 * into a run because nothing runs until the whole file parsed.
 */
int sc_parse_file(const char *path, scenario *out, char *err, size_t errlen);

/* Applies a semantics override to every card ("linux", "wddm", "uma"); false when unknown. */
bool sc_set_semantics(scenario *s, const char *name);

/* The process named name, or -1. */
int sc_proc_index(const scenario *s, const char *name);

/* ---- the state the processes of one run share ---- */

typedef enum sh_kind {
    EV_START,       /* a process starts (a: pid) */
    EV_LOAD,        /* a load begins (a: bytes to load) */
    EV_GRANT,       /* admitted (a: wait in microseconds of scenario time, b: bytes others freed for it) */
    EV_REFUSE,      /* refused after the admission wait (a: bytes, b: short by) */
    EV_LOADED,      /* a load finished (a: resident now, b: bytes it loaded) */
    EV_OOM,         /* an allocation failed (a: bytes asked) */
    EV_ASKED,       /* a release ask answered (a: bytes asked, b: bytes freed) */
    EV_IDLE_REL,    /* an idle release (b: bytes freed) */
    EV_EVICT,       /* a manager evicted this process's bytes (a: asked, b: freed) */
    EV_RELOAD,      /* bytes loaded again after an eviction (a) */
    EV_RUN,         /* computing starts (a: milliseconds it lasts, b: bytes of its whole models not on the card) */
    EV_RUN_END,     /* computing ends */
    EV_UNLOAD,      /* a model unloaded (a: bytes freed) */
    EV_FOREIGN,     /* outside bytes now (a) */
    EV_FOREIGN_OOM, /* an outside allocation failed (a: bytes) */
    EV_PIN,         /* pinned (a: bytes, b: total now) */
    EV_PIN_REFUSED, /* the pin budget said no (a: bytes, b: short by) */
    EV_PIN_FAILED,  /* page-locking failed on the machine (a: bytes) */
    EV_UNPIN,       /* unpinned (a: bytes, b: 1 when asked by someone else) */
    EV_CANCEL,      /* a load cancelled (a: bytes loaded, b: bytes kept) */
    EV_KILL,        /* about to die by SIGKILL */
    EV_OOM_KILL,    /* the RAM model's OOM killer killed this process */
    EV_DEATH,       /* reaped (a: 1 if by a signal) */
    EV_RELEASED,    /* the dead process's bytes are back (a: microseconds of real time after the reap) */
    EV_CLI,         /* a command-line release (a: asked, b: freed; model: target process) */
    EV_LOCAL,       /* no coordinator: deciding locally */
    EV_PAGED_EVICT, /* pages of a paged model taken by pressure between passes (a: bytes) */
    EV_FAULT_FAIL,  /* a page fault failed (a: count) */
    EV_RETRIED,     /* page commits retried after a transient error (a: count) */
    EV_RAM,         /* plain RAM now (a) */
    EV_STAGING,     /* host staging buffer now (a: bytes, b: 1 if a grow failed) */
    EV_CUSTOM,      /* custom-node bytes now (a) */
    EV_STREAMED,    /* a pass of a paged model streamed a bytes from host memory (the pager refused them) */
    EV_RAM_DROP,    /* RAM copies dropped for the ledger (a: bytes, b: 1 asked by another process, 0 to make room) */
    EV_RAM_REFUSED, /* a RAM growth the ledger refused even after dropping this process's own copies (a: bytes) */
    EV_KIND_COUNT
} sh_kind;

typedef struct sh_event {
    double t; /* scenario seconds */
    int32_t proc, kind, model, card;
    int64_t a, b;
} sh_event;

typedef struct sh_proc {
    _Atomic int32_t pid;
    _Atomic int32_t state; /* 0 not started, 1 running, 2 done with its timeline, 3 gone */
    _Atomic int32_t busy;
    _Atomic int32_t killed; /* a scripted kill or the OOM killer: not a crash */
    _Atomic int64_t pinned;
    _Atomic int64_t ram;
    _Atomic int64_t staging;
    _Atomic int64_t foreign[SC_MAX_CARDS];
} sh_proc;

#define SH_MAX_EVENTS 32768

typedef struct run_sample {
    double t;
    int64_t used[SC_MAX_CARDS], free[SC_MAX_CARDS], over[SC_MAX_CARDS];
    int64_t dev[SC_MAX_PROCS];    /* each process's bytes on its card, context included */
    int64_t pinned[SC_MAX_PROCS]; /* each process's pinned host RAM (staging included) */
    int64_t foreign[SC_MAX_PROCS]; /* each process's bytes outside any manager */
    int64_t ram; /* Σ pinned + plain RAM on the machine */
} run_sample;

typedef struct sh_run {
    int64_t t0_ns; /* CLOCK_MONOTONIC origin; 0 until the run starts */
    double speed;
    _Atomic int32_t end;       /* set when the run is over: agents close and exit */
    _Atomic int64_t ram_total; /* Σ pinned + plain RAM of every process (the RAM model) */
    _Atomic uint32_t n_events;
    _Atomic uint32_t dropped;
    sh_proc p[SC_MAX_PROCS];
    sh_event ev[SH_MAX_EVENTS];
    _Atomic int32_t mark_taken[SC_MAX_MARKS]; /* set once marks[i] holds its reading */
    run_sample marks[SC_MAX_MARKS];
} sh_run;

/* Scenario seconds since the run started. */
double sh_now(const sh_run *r);
/* Appends an event stamped now (dropped, and counted, when the log is full). */
void sh_event_add(sh_run *r, int proc, sh_kind kind, int model, int card, int64_t a, int64_t b);
/* Sleeps until scenario time t (returns early when the run ends). */
void sh_sleep_until(sh_run *r, double t);
/* Sleeps for scenario seconds. */
void sh_sleep(sh_run *r, double secs);
/* Reads every card of s into *x, stamped now (rd: scratch space for one card's reading). */
struct comem_sim;
struct comem_device_reading;
void sh_read_cards(sh_run *r, const scenario *s, struct comem_sim *sim, struct comem_device_reading *rd,
                   run_sample *x);

/* ---- between agents and the model engine (comfy-env, uncoordinated) ---- */

typedef enum eng_kind {
    RQ_HELLO = 1, /* a: pid */
    RQ_LOAD,      /* model; a: inference bytes. Reply a: bytes to add (negative: shed), b: 1 when paged */
    RQ_CENSUS,    /* model; a: resident, b: 1 in the manager's list, 0 unloaded */
    RQ_BUSY,      /* a: 1 computing, 0 done (a node boundary) */
    RQ_PIN,       /* a: bytes. Reply a: 1 allowed by this process's own ceiling */
    RQ_UNPIN,     /* a: bytes */
    RQ_FREE_API,  /* ComfyUI's /free for process model (target); reply a: bytes freed */
    RQ_BYE,
    CM_FREE = 100, /* engine to agent: free a bytes (-1: all) of model. Reply a: freed, -1 busy */
    CM_HEADROOM,   /* engine to agent: the pager's simple headroom is a */
} eng_kind;

typedef struct eng_msg {
    int32_t kind, proc, model, card;
    int64_t a, b;
} eng_msg;

/* ---- one run ---- */

#define RUN_MAX_SAMPLES 6000

typedef struct run_result {
    sc_policy policy;
    int semantics;
    bool ran;
    char error[256];
    double wall_s; /* real seconds the run took */
    double values[M_COUNT];
    double per_card_peak[SC_MAX_CARDS];
    int64_t ctx_of[SC_MAX_PROCS]; /* context bytes per process at its last sample */
    /* end-of-run ledger figures (comem) */
    int64_t unattributed[SC_MAX_PROCS];
    bool expect_ok[SC_MAX_EXPECT];
    double expect_lhs[SC_MAX_EXPECT], expect_rhs[SC_MAX_EXPECT];
    int n_samples;
    run_sample *samples; /* owned */
    run_sample *marks;   /* owned: SC_MAX_MARKS, the readings of scenario.marks */
    bool mark_taken[SC_MAX_MARKS];
    int n_events;
    sh_event *events; /* owned, sorted by time */
} run_result;

/* Runs scenario s under policy into *out (allocates samples/events). Returns 0 or a status. */
int sim_run(const scenario *s, sc_policy policy, bool verbose, run_result *out);
void sim_result_free(run_result *r);

/* Runs the agent of process idx; never returns (simulate_agent.c). */
_Noreturn void sim_agent_main(const scenario *s, sc_policy policy, int idx, sh_run *sh, const char *dir,
                              const char *sock, const char *spec, int go_fd, int req_fd, int cmd_fd);

/* The model engine (simulate_model.c): a thread serving the agents' requests. */
typedef struct sim_engine sim_engine;
int sim_engine_start(const scenario *s, sc_policy policy, sh_run *sh, const char *spec, const int *req_fds,
                     const int *cmd_fds, sim_engine **out);
void sim_engine_stop(sim_engine *e);

/* Metrics, expectations and output (simulate_report.c, simulate_svg.c). */
void sim_compute(const scenario *s, run_result *r);
double sim_metric_value(const scenario *s, const run_result *r, const sc_term *t);
void sim_print_timeline(const scenario *s, const run_result *r);
void sim_print_summary(const scenario *s, run_result *const *rs, int n);
int sim_print_expectations(const scenario *s, run_result *const *rs, int n);
int sim_write_json(const char *path, const scenario *s, run_result *const *rs, int n);
int sim_write_svg(const char *path, const scenario *s, run_result *const *rs, int n);

/* Formats bytes compactly ("12.0G", "300M") for narrow tables. */
const char *sim_gib(double bytes, char *buf, size_t len);

#endif
