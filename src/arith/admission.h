/*
 * arith/admission.h - load_models_gpu's admission arithmetic.
 *
 *   inference = minimum_inference_memory()             (0.8 GiB + reserve)
 *   extra_mem = max(inference, memory_required + reserve)
 *   mmr       = extra_mem, or max(inference, minimum_memory_required + reserve)
 *   first free target per device = need[dev] * 1.1 + extra_mem
 *   second pass: free_memory(mmr) when the device's free is still below mmr
 *
 * need[dev] sums, over the models being loaded onto dev, the offloaded part of
 * a model already on dev (size - loaded) or the full size of one that is not.
 * pins[dev] sums the full size of non-dynamic models. The first free runs for
 * dynamic loads only when every model is dynamic (free_for_dynamic).
 * Source: comfyui-manager-code.md section 5.1-5.2.
 */
#ifndef COMEM_ARITH_ADMISSION_H
#define COMEM_ARITH_ADMISSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Device number of the host CPU (ComfyUI skips it when freeing). */
#define COMEM_DEVICE_CPU (-1)

typedef struct comem_admission_targets {
    double inference; /* minimum_inference_memory() */
    double extra_mem;
    double mmr; /* minimum_memory_required after the reserve is added */
} comem_admission_targets;

/*
 * Computes extra_mem and mmr. has_minimum selects whether
 * minimum_memory_required was given (None in ComfyUI otherwise).
 */
void comem_admission_targets_compute(double memory_required, bool has_minimum,
                                     double minimum_memory_required, double reserve,
                                     comem_admission_targets *out);

/* The first free target for one device: need * 1.1 + extra_mem (need is an integer sum upstream). */
double comem_admission_free_target(double need, double extra_mem);

/* True when the second pass runs: free < mmr. */
bool comem_admission_needs_second_pass(double free_now, double mmr);

/* One model in a load_models_gpu call. */
typedef struct comem_load_model {
    int64_t size;       /* model_size() */
    int64_t loaded;     /* loaded_size() */
    int load_device;    /* where it is being loaded (LoadedModel.device) */
    int current_device; /* current_loaded_device(); COMEM_DEVICE_CPU when offloaded */
    bool dynamic;       /* is_dynamic(): paged by a pager */
} comem_load_model;

/* Per-device sums over the incoming models. */
typedef struct comem_device_need {
    int device;
    int64_t need; /* Σ model_memory_required(device) */
    int64_t pins; /* Σ model_memory() of non-dynamic models */
} comem_device_need;

/*
 * Fills out[0..*n_out) with one row per device in first-seen order and sets
 * *free_for_dynamic. Returns 0, or COMEM_ERANGE when more than cap devices appear.
 */
int comem_admission_needs(const comem_load_model *models, size_t n, comem_device_need *out,
                          size_t cap, size_t *n_out, bool *free_for_dynamic);

/*
 * load_models_gpu's order (783545f6): an order-preserving dedup of the visited patchers
 * (ids[], each requested model followed by its model_patches_models()), reversed. order[]
 * gets the index of each distinct id's first appearance, last-seen first. Returns 0.
 */
int comem_admission_load_order(const uint64_t *ids, size_t n, size_t *order, size_t *n_order);

#endif
