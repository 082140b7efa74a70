/*
 * tools/simulate/clock.h - the state the processes of one run share: the clock, the event log, live figures.
 *
 * Everything the processes share lives in one MAP_SHARED anonymous mapping
 * (sh_run): the clock's origin and speed, an append-only event log, and per
 * process a few live figures (pinned, foreign bytes, RAM, busy). Scenario
 * time is (now - t0) * speed: every process reads the same clock.
 *
 * Second floor, on scenario.h alone. The orchestrator (run.c) maps it and
 * samples the cards with it, the agents (agent.c) write their events and
 * figures into it, the model engine (engine.c) reads its clock and who is gone.
 */
#ifndef COMEM_TOOLS_SIMULATE_CLOCK_H
#define COMEM_TOOLS_SIMULATE_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>

#include "simulate/scenario.h"

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
    EV_PRESSURE,    /* an out-of-memory retry site asked the other processes (a: bytes asked, b: bytes they freed) */
    EV_REQ_FAILED,  /* an LLM server could not serve a request: its model is not on the card (a: bytes missing) */
    EV_NO_ROOM_YET, /* comem-apps' reload when free was not admitted within its wait (a: bytes); it looks again */
    EV_KIND_COUNT
} sh_kind;

typedef struct sh_event {
    double t; /* scenario seconds */
    int32_t proc, kind, model, card;
    int64_t a, b;
} sh_event;

typedef struct sh_proc {
    double start; /* scenario time it starts (its sc_proc's, set before the agents are forked) */
    _Atomic int32_t pid;
    _Atomic int32_t state; /* 0 not started, 1 running, 2 done with its timeline, 3 gone */
    _Atomic int32_t started; /* 1 once its start is over: connected, its CUDA context created */
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
    int32_t n_procs; /* p[0 .. n_procs) are the scenario's processes */
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
/*
 * Sleeps until scenario time t and until every process that starts before t
 * has started (its start over, or it is gone): a start is ordered before
 * whatever anyone does at a later scenario time, however late the machine's
 * load made it in real time. Returns early when the run ends.
 */
void sh_sleep_until(sh_run *r, double t);
/* Sleeps for scenario seconds (sh_sleep_until from now). */
void sh_sleep(sh_run *r, double secs);
/* Reads every card of s into *x, stamped now (rd: scratch space for one card's reading). */
struct comem_sim;
struct comem_device_reading;
void sh_read_cards(sh_run *r, const scenario *s, struct comem_sim *sim, struct comem_device_reading *rd,
                   run_sample *x);

#endif
