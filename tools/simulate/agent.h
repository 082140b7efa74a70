/*
 * tools/simulate/agent.h - one scenario process, forked by the run (agent.c, with its policies in
 * agent_comem.c and agent_engine.c; agent_internal.h draws them).
 *
 * Fourth floor, on scenario.h, clock.h and engine.h's messages. run.c forks
 * one agent per scenario process; nothing else calls it.
 */
#ifndef COMEM_TOOLS_SIMULATE_AGENT_H
#define COMEM_TOOLS_SIMULATE_AGENT_H

#include "simulate/clock.h"
#include "simulate/scenario.h"

/* Runs the agent of process idx; never returns. */
_Noreturn void sim_agent_main(const scenario *s, sc_policy policy, int idx, sh_run *sh, const char *dir,
                              const char *sock, const char *spec, int go_fd, int req_fd, int cmd_fd);

#endif
