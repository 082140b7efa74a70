/*
 * pager/pager_seam.h - the pager's seam for the simulator and the tests: what
 * they may do to a pager that the product never does.
 *
 * The product uses the pager through comem/pager.h alone. Two kinds of caller
 * need more, and reach it here and nowhere else (neither includes
 * pager_internal.h or a backend's internals):
 *
 *   comem simulate (tools/simulate)   scripts commit failures into a pager on
 *                                     the simulated card (a scenario's
 *                                     `inject-faults`, F13)
 *   the pager's tests (tests/unit,    the same, plus a clock of their own for
 *   tests/gpu)                        the device reading's cache, the invariant
 *                                     check, and a release ask answered without
 *                                     a client
 *
 * Nothing in src/ calls these. They are defined in seam.c, apart from the
 * pager's own files: the core keeps only the state they set (its clock, and the
 * backend's injection counters behind comem_vmm_ops.inject).
 */
#ifndef COMEM_PAGER_SEAM_H
#define COMEM_PAGER_SEAM_H

#include <stdint.h>

#include "comem/pager.h"

/*
 * Scripts commit failures in p's backend: the next `after` commits go through,
 * then `transient` commits fail with COMEM_EBUSY (as CUDA's NOT_READY right
 * after an eviction: the fault path retries them), then `oom` commits fail with
 * COMEM_ENOSPC, before touching the card. Replaces what was pending. Safe from
 * any thread. Returns COMEM_OK, COMEM_EINVAL for a NULL pager or a negative
 * count, COMEM_ENOTSUP when the backend cannot script failures (only the
 * simulated card's can).
 */
int comem_pager_inject_commit_failures(comem_pager *p, int after, int transient, int oom);

/*
 * Replaces the pager's millisecond clock (the device term's cache uses it).
 * fn NULL restores CLOCK_MONOTONIC. The next deficit reads the device again.
 */
void comem_pager_set_clock(comem_pager *p, int64_t (*fn)(void *user), void *user);

/*
 * Verifies the invariants of pager_internal.h under the lock, and, where the
 * backend can tell (comem_vmm_ops.charged: the sim), that the device charges
 * this process exactly what the pager holds (besides its context). Returns
 * COMEM_OK, or COMEM_ERANGE after logging the first violation found.
 */
int comem_pager_check(comem_pager *p);

/*
 * Answers a release ask of `kind` (COMEM_RELEASE_*) for `bytes` as the
 * attached pager's callback would, without a client. Returns the bytes freed.
 */
int64_t comem_pager_answer_release(comem_pager *p, int kind, int64_t bytes);

#endif
