/*
 * tools/simulate/run.h - one run: a scenario replayed under one policy; the simulator's top floor.
 *
 * A scenario (docs/scenarios.md) is parsed into a `scenario` (scenario.c).
 * One run replays it under one policy (run.c):
 *
 *   this process (the orchestrator)
 *   ├── the simulated card(s): one file every process maps (probe/sim.h)
 *   ├── comem:       a real coordinator on a thread (coord/coord.h), its idle
 *   │                release scaled by the scenario's speed
 *   │   comfy-env,
 *   │   uncoord.:    the model engine on a thread (engine.c): one
 *   │                ComfyUI manager per process, and for comfy-env the host's
 *   │                pool (reserve publication, stand-ins, budget callback,
 *   │                idle sweep), answering requests over socketpairs
 *   ├── the main thread, once the clock starts: samples the card(s) every
 *   │                0.25 scenario seconds (checking every 2 ms), reaps children
 *   └── one agent per scenario process (forked before any thread starts;
 *       agent.c): holds its own bytes on the card, walks its timeline
 *       on the shared clock (clock.h), and decides through libcomem (comem)
 *       or asks the engine (the other two)
 *
 * The floors of tools/simulate/, each including only those below it:
 *
 *   5  run.h      run.c                  one run: fork, serve, sample, collect
 *   4  agent.h    agent.c                one scenario process (agent_internal.h:
 *                agent_comem.c,         its policies: comem, and the engine's two)
 *                agent_engine.c
 *   3  engine.h   engine.c               the model engine (comfy-env, uncoordinated)
 *   3  report.h   report.c, svg.c        a run's result; figures, tables, JSON, SVG
 *   2  clock.h    clock.c                the state a run's processes share
 *   1  scenario.h scenario.c             the scenario and its parser
 *   1  tmpdir.h   tmpdir.c               a private scratch folder
 *
 * The command (tools/comem/simulate.c) includes run.h and report.h.
 */
#ifndef COMEM_TOOLS_SIMULATE_RUN_H
#define COMEM_TOOLS_SIMULATE_RUN_H

#include <stdbool.h>

#include "simulate/report.h"
#include "simulate/scenario.h"

/* Runs scenario s under policy into *out (allocates samples/events). Returns 0 or a status. */
int sim_run(const scenario *s, sc_policy policy, bool verbose, run_result *out);
/* Frees the arrays sim_run allocated into r (r itself is the caller's). */
void sim_result_free(run_result *r);

#endif
