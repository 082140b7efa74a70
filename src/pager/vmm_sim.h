/*
 * pager/vmm_sim.h - test hooks of the simulated-card VMM backend (vmm_sim.c).
 *
 * Tests reach the backend of a sim pager through comem_pager_vmm()
 * (pager_test.h). Nothing outside tests calls these.
 */
#ifndef COMEM_PAGER_VMM_SIM_H
#define COMEM_PAGER_VMM_SIM_H

#include "pager/vmm.h"

/*
 * Scripts commit failures: the next `after` commits go through, then
 * `transient` commits fail with COMEM_EBUSY (as CUDA's NOT_READY right after
 * an eviction), then `oom` commits fail with COMEM_ENOSPC, before touching the
 * card. Replaces what was pending. Safe from any thread.
 */
void comem_vmm_sim_inject(comem_vmm *m, int after, int transient, int oom);

#endif
