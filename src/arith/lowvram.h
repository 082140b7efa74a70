/*
 * arith/lowvram.h - the lowvram budget load_models_gpu hands each model.
 *
 *   cur    = free + L                     (L: bytes of this model already resident)
 *   budget = max(0, cur - mmr, min(cur * ratio, cur - minimum_inference)) - L
 *   budget == 0 exactly  -> 0.1           (lowvram, nothing resident)
 *   NO_VRAM              -> 0.1
 *   HIGH/DISABLED/SHARED, a CPU load device, or force_full_load -> 0 (full load)
 *
 * ratio is MIN_WEIGHT_MEMORY_RATIO: 0.0 on NVIDIA, 0.4 elsewhere. A negative
 * budget is real: ComfyUI then partially unloads -budget bytes of that same
 * model. Source: comfyui-manager-code.md section 5.3 and vector V4.
 */
#ifndef COMEM_ARITH_LOWVRAM_H
#define COMEM_ARITH_LOWVRAM_H

#include <stdbool.h>

/* ComfyUI's VRAMState, with its values. */
typedef enum comem_vram_state {
    COMEM_VRAM_DISABLED = 0,
    COMEM_VRAM_NO = 1,
    COMEM_VRAM_LOW = 2,
    COMEM_VRAM_NORMAL = 3,
    COMEM_VRAM_HIGH = 4,
    COMEM_VRAM_SHARED = 5
} comem_vram_state;

#define COMEM_WEIGHT_RATIO_NVIDIA 0.0
#define COMEM_WEIGHT_RATIO_OTHER 0.4

/* What the budget means. ComfyUI encodes the first two as sentinels (0 and 0.1). */
typedef enum comem_budget_kind {
    COMEM_BUDGET_FULL = 0,    /* load everything (ComfyUI passes 0, turned into 1e32) */
    COMEM_BUDGET_NOTHING = 1, /* lowvram with nothing resident (ComfyUI's 0.1) */
    COMEM_BUDGET_BYTES = 2    /* load up to this many bytes; negative means shed -bytes */
} comem_budget_kind;

typedef struct comem_lowvram_in {
    comem_vram_state vram_state;
    bool load_device_is_cpu; /* a CPU load device forces DISABLED */
    bool lowvram_available;  /* false under DirectML */
    bool force_full_load;
    double free;     /* get_free_memory(load_device) */
    double loaded;   /* model_loaded_memory(): L */
    double mmr;      /* minimum_memory_required after admission */
    double inference; /* minimum_inference_memory() */
    double ratio;    /* MIN_WEIGHT_MEMORY_RATIO */
} comem_lowvram_in;

typedef struct comem_budget {
    comem_budget_kind kind;
    double value; /* exactly what ComfyUI passes to model_load: 0, 0.1 or the bytes */
} comem_budget;

comem_budget comem_lowvram_budget(const comem_lowvram_in *in);

/* The sentinel model_load turns a 0 budget into. */
#define COMEM_FULL_LOAD_SENTINEL 1e32
#define COMEM_LOAD_NOTHING_BUDGET 0.1

#endif
