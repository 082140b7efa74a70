/*
 * pager/pager_test.h - test-only hooks into the pager: an injected clock, the
 * invariant check, and the backend behind a pager (for vmm_sim.h's hooks).
 * Nothing outside tests calls these.
 */
#ifndef COMEM_PAGER_TEST_H
#define COMEM_PAGER_TEST_H

#include <stdint.h>

#include "comem/pager.h"
#include "pager/vmm.h"

/*
 * Replaces the pager's millisecond clock (the device term's cache uses it).
 * fn NULL restores CLOCK_MONOTONIC. The next deficit reads the device again.
 */
void comem_pager_set_clock(comem_pager *p, int64_t (*fn)(void *user), void *user);

/*
 * Verifies the invariants of pager_internal.h under the lock, and, where the
 * backend can tell (comem_vmm_ops.charged: the sim), that the device charges
 * this process exactly usage (besides its context). Returns COMEM_OK, or COMEM_ERANGE after logging the first
 * violation found.
 */
int comem_pager_check(comem_pager *p);

/* The backend (for comem_vmm_sim_inject). */
comem_vmm *comem_pager_vmm(comem_pager *p);

/*
 * Answers a release ask of `kind` (COMEM_RELEASE_*) for `bytes` as the
 * attached pager's callback would, without a client. Returns the bytes freed.
 */
int64_t comem_pager_answer_release(comem_pager *p, int kind, int64_t bytes);

#endif
