/*
 * arith/comfy_a125cd84.h - the rules of ComfyUI's 2025-10-12 snapshot (a125cd84) where they
 * differ from the ones comem decides by (model_management.py @02b2b388, see evict.h, lowvram.h).
 *
 * comem plans with the newer rules; these exist so that the older ComfyUI can be reproduced
 * exactly (the conformance test runs that snapshot's own code) and so that a caller living
 * beside an older ComfyUI can ask what it will do. docs/conformance.md lists each difference.
 *
 * free_memory (a125cd84): candidates and their order are the same key as evict.h. Then
 *   for each candidate:
 *       if smart memory:
 *           f = free_now(); if f > required: stop     (the whole walk, not this candidate)
 *           to_free = required - f                    (>= 0: 0 is acted on)
 *           model_unload(to_free)
 *       else: model_unload(None)                      (detach, no partial)
 *   model_unload(to_free): partial when to_free < loaded and it frees >= to_free, else detach.
 *   There is no device None (a walk over no device has no candidates), no for_dynamic, no pins.
 *
 * lowvram budget (a125cd84): inside the lowvram branch
 *       budget = max(128 MiB, cur - mmr, min(cur * ratio, cur - inference))
 *       budget = max(0.1, budget - L)                 (never 0, never negative)
 *   and NO_VRAM -> 0.1, everything else 0 (full load), as in lowvram.h.
 */
#ifndef COMEM_ARITH_COMFY_A125CD84_H
#define COMEM_ARITH_COMFY_A125CD84_H

#include "arith/evict.h"
#include "arith/lowvram.h"

/* The snapshot's lowvram floor: 128 MiB. */
#define COMEM_A125CD84_LOWVRAM_FLOOR (128.0 * 1024 * 1024)

/*
 * free_memory as the snapshot runs it, over entries[0..n) with the same callbacks and
 * outputs as comem_evict_run (order[] holds every candidate; result->n_order counts them,
 * result->required_after is required unchanged). req->for_dynamic is refused (COMEM_EINVAL):
 * the snapshot has no dynamic loads; req->stop_when_covered is ignored (the snapshot stops
 * by its own rule). Returns 0 or COMEM_EINVAL.
 */
int comem_evict_run_a125cd84(const comem_evict_request *req, const comem_evict_entry *entries, size_t n,
                             const comem_evict_ops *ops, size_t *order, comem_evict_action *actions,
                             comem_evict_result *result);

/* The snapshot's lowvram budget, with the same inputs and meaning of the result as lowvram.h. */
comem_budget comem_lowvram_budget_a125cd84(const comem_lowvram_in *in);

#endif
