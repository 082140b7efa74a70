/*
 * tools/simulate/engine.h - the model engine (engine.c) and the messages it and the agents exchange.
 *
 * Under comfy-env and uncoordinated, ComfyUI's and comfy-env's decisions are
 * made by the engine, a thread of the orchestrator; each agent sends its
 * requests (RQ_*) and carries out the engine's commands (CM_*) over two
 * socketpairs of its own, one eng_msg a packet.
 *
 * Third floor, on scenario.h and clock.h. run.c starts and stops the engine;
 * agent_engine.c speaks the messages only.
 */
#ifndef COMEM_TOOLS_SIMULATE_ENGINE_H
#define COMEM_TOOLS_SIMULATE_ENGINE_H

#include <stdint.h>

#include "simulate/clock.h"
#include "simulate/scenario.h"

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

/* The model engine: a thread serving the agents' requests. */
typedef struct sim_engine sim_engine;
int sim_engine_start(const scenario *s, sc_policy policy, sh_run *sh, const char *spec, const int *req_fds,
                     const int *cmd_fds, sim_engine **out);
void sim_engine_stop(sim_engine *e);

#endif
