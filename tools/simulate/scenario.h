/*
 * tools/simulate/scenario.h - the scenario: what docs/scenarios.md writes, parsed (scenario.c).
 *
 * The simulator's ground floor: plain types, the names of policies,
 * semantics and metrics, and the parser. It includes no other header of the
 * simulator; every other floor includes it.
 */
#ifndef COMEM_TOOLS_SIMULATE_SCENARIO_H
#define COMEM_TOOLS_SIMULATE_SCENARIO_H

#include <limits.h>
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

/* An app registers nothing itself: one without models holds only outside bytes (a browser); one with models
   is an LLM server (llama-server, Ollama, vLLM) that comem-apps speaks for under comem (sc_proc_server). */
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
    ST_INJECT,  /* the next count page commits fail transiently (NOT_READY) */
    ST_PRESSURE /* an out-of-memory retry site: ask the other processes for bytes on its card (comem_pressure) */
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

/* An LLM server: an app with models (whole ones), busy while it serves a request (a run). */
static inline bool sc_proc_server(const sc_proc *pr) { return pr->role == ROLE_APP && pr->n_models > 0; }

/* Metrics an expectation can name (scenario.c has their words and meanings, report.c computes them). */
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

#endif
