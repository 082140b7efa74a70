/*
 * arith/cross_reserve.h - comfy-env's reserve arithmetic across processes.
 *
 * The host keeps ComfyUI's own formulas and is told the card is smaller by what
 * it cannot see. What it cannot see depends on how its free reading is scoped:
 *
 *   charge       = 0                              device-wide free (Linux, NVML)
 *                = floor + max(0, residency)      process-local free (WDDM)
 *   total        = max(0, base) + Σ max(0, charge), capped at int(device_total*0.75)
 *   next reserve = grow at once; shrink only with a receipt (evidence)
 *   ask target   = int(weights * slack) + max(min_inference, want_inference + extra_reserved)
 *   pager forward= seed (256 MiB default) + max(0, published - max(0, base))
 *   requester    = max(0, published - max(0, own charge))
 *
 * All integer results truncate toward zero exactly like Python's int(); the
 * callers pass values Python would already have turned into ints.
 * Source: comfy-env-code.md section 1.1 and 1.2.9; vectors section 5.1-5.4.
 */
#ifndef COMEM_ARITH_CROSS_RESERVE_H
#define COMEM_ARITH_CROSS_RESERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define COMEM_CONTEXT_FLOOR ((int64_t)300 << 20)   /* per-worker context + handles */
#define COMEM_PAGER_DEFAULT_HEADROOM ((int64_t)256 << 20)
#define COMEM_WEIGHT_SLACK 1.1                     /* upstream's multiplier, never lower */

/* What one worker adds to the host's reserve. */
int64_t comem_charge(int64_t residency, bool process_local_free, int64_t floor);

/* base plus the charges, capped at 3/4 of the card when device_total != 0. */
int64_t comem_total_reserve(int64_t base, const int64_t *charges, size_t n, int64_t device_total);

/* Grow now; shrink only when shrink_allowed (a release receipt came back). */
int64_t comem_next_reserve(int64_t current, int64_t proposed, bool shrink_allowed);

/* The bytes an admission asks the card to have free (mirrors load_models_gpu). */
int64_t comem_ask_target(int64_t weights, double slack, int64_t min_inference,
                         int64_t extra_reserved, int64_t want_inference);

/*
 * The ask target of one admission as comem computes it, in the coordinator and
 * in a client deciding alone: comem_ask_target with upstream's slack (1.1), the
 * minimum inference memory for reserve (int() of 0.8 GiB + reserve), and
 * working = inference + cast buffers, so
 *   int(weights * 1.1) + max(int(minimum_inference_memory()), working + reserve).
 */
int64_t comem_admit_target(int64_t weights, int64_t working, int64_t reserve);

/*
 * The weights of a refused admission that would fit: the largest w <= weights
 * whose target is at least short_by lower (only the weights' int(w * 1.1)
 * term moves with w). weights itself when short_by <= 0; 0 when none fits, and
 * when w * 1.1 does not fit an int64_t (the target then saturates and hides what
 * a part would need).
 */
int64_t comem_admit_fitting(int64_t weights, int64_t short_by);

/* The pager headroom to forward: seed plus what the coordinator added on top of base. */
int64_t comem_pager_headroom_forward(bool seed_set, int64_t seed, int64_t published, int64_t base);

/* The reserve a requester must keep free: its own charge is the load it is about to do. */
int64_t comem_reserve_for_requester(int64_t published, int64_t own_charge);

/* Cast buffers a worker will need: streams * largest tensor, 0 when either is 0. */
int64_t comem_forward_cast_need(int64_t largest_tensor, int64_t num_streams);

/* One model in a worker snapshot. */
typedef struct comem_held_model {
    int64_t ledger; /* last known resident bytes */
    int64_t peak;   /* highest residency since the last census */
    int64_t size;
} comem_held_model;

/* One worker in a snapshot: every listed worker is alive and books its floor. */
typedef struct comem_held_worker {
    bool in_flight;
    bool excess_known;
    int64_t excess; /* allocator overhead beyond the residency census */
    const comem_held_model *models;
    size_t n_models;
} comem_held_worker;

/*
 * Bytes the workers hold as far as the host's ledger can tell (the WDDM
 * fallback): per model max(ledger, peak), or max(size, ledger, peak) while a
 * call is in flight; plus per worker floor + excess (excess capped at
 * cap - floor when cap_set).
 */
int64_t comem_held_from_snapshot(const comem_held_worker *workers, size_t n, int64_t floor,
                                 bool cap_set, int64_t cap);

#endif
