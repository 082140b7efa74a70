/*
 * comem/calc.h - ComfyUI's memory rules as plain functions, for bindings and tests.
 *
 * These are the rules `comem calc` evaluates and the coordinator decides by (src/arith/),
 * exported with plain C types so that a binding (python/comem/calc.py) can call them
 * without spawning a process per case. None of them does I/O or keeps state: free_memory
 * measures and unloads through the caller's callbacks, as ComfyUI's loop calls
 * get_free_memory and model_unload.
 *
 * Where ComfyUI's versions differ, a `rules` argument picks one (docs/conformance.md lists
 * every difference): COMEM_COMFYUI_CURRENT is what comem itself follows (today the same as
 * COMEM_COMFYUI_783545F6, the 2026-08-22 ComfyUI), COMEM_COMFYUI_A125CD84 the 2025-10-12
 * snapshot, COMEM_COMFYUI_V039 ComfyUI v0.39 (October 2026: only its pinned-RAM rules differ
 * from 783545f6's). The conformance tests run each against that ComfyUI's own code. Rules that
 * every version shares take no such argument.
 *
 * Byte figures are doubles where ComfyUI computes in doubles (anything multiplied by 0.8, 1.1,
 * a ratio or a --reserve-vram fraction), so results compare exactly with ComfyUI's own.
 */
#ifndef COMEM_CALC_H
#define COMEM_CALC_H

#include <stddef.h>
#include <stdint.h>

#include "comem/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which ComfyUI's rules to follow, where they differ. */
typedef enum comem_comfyui_rules {
    COMEM_COMFYUI_CURRENT = 0,  /* the rules comem decides by: today 783545f6's */
    COMEM_COMFYUI_A125CD84 = 1, /* the 2025-10-12 snapshot (Comfy-Org/ComfyUI a125cd84) */
    COMEM_COMFYUI_783545F6 = 2, /* Comfy-Org/ComfyUI 783545f6 (2026-08-22): stays this when CURRENT moves on */
    COMEM_COMFYUI_V039 = 3      /* ComfyUI v0.39 (2026-10): 783545f6's but for the pinned-RAM rules */
} comem_comfyui_rules;

/* ComfyUI's VRAMState, with its values. */
typedef enum comem_calc_vram_state {
    COMEM_CALC_VRAM_DISABLED = 0,
    COMEM_CALC_VRAM_NO = 1,
    COMEM_CALC_VRAM_LOW = 2,
    COMEM_CALC_VRAM_NORMAL = 3,
    COMEM_CALC_VRAM_HIGH = 4,
    COMEM_CALC_VRAM_SHARED = 5
} comem_calc_vram_state;

/* The device number of the host CPU (ComfyUI frees nothing for it). */
#define COMEM_CALC_CPU (-1)

/* comem_calc_model.flags */
#define COMEM_CALC_DYNAMIC 1u /* paged by a pager (ModelPatcherDynamic) */
#define COMEM_CALC_KEEP 2u    /* in free_memory's keep_loaded */
#define COMEM_CALC_DEAD 4u    /* LoadedModel.is_dead(): never a candidate */

/* One entry of current_loaded_models (free_memory) or one model being loaded (load needs). */
typedef struct comem_calc_model {
    int64_t size;           /* model_size() */
    int64_t loaded;         /* loaded_size(); at most size */
    int64_t refs;           /* sys.getrefcount(patcher), or any count that orders the same way */
    int32_t device;         /* LoadedModel.device (its load device); COMEM_CALC_CPU for the CPU */
    int32_t current_device; /* current_loaded_device() (load needs only); COMEM_CALC_CPU when offloaded */
    uint32_t flags;         /* COMEM_CALC_DYNAMIC | COMEM_CALC_KEEP | COMEM_CALC_DEAD */
    uint32_t reserved;      /* 0 */
} comem_calc_model;

/*
 * EXTRA_RESERVED_VRAM and minimum_inference_memory() as ComfyUI fixes them at import:
 * 400 MiB; on Windows 600 MiB, plus 100 MiB when total_vram_mib > 15360; --reserve-vram G
 * (reserve_vram_set) replaces it with G * 1024^3. Either out-pointer may be NULL.
 */
COMEM_API int comem_calc_reserve(int windows, double total_vram_mib, int reserve_vram_set, double reserve_vram_gb,
                                 double *reserve, double *minimum_inference);

/*
 * load_models_gpu's targets: minimum_inference (0.8 GiB + reserve), extra_mem =
 * max(inference, memory_required + reserve), and mmr = extra_mem, or with has_minimum
 * max(inference, minimum_memory_required + reserve). Any out-pointer may be NULL.
 */
COMEM_API int comem_calc_admission(double memory_required, int has_minimum, double minimum_memory_required,
                                   double reserve, double *minimum_inference, double *extra_mem, double *mmr);

/* The first free_memory target for one device: need * 1.1 + extra_mem. */
COMEM_API double comem_calc_free_target(double need, double extra_mem);

/* 1 when load_models_gpu's second free_memory(mmr) runs (free < mmr), else 0. */
COMEM_API int comem_calc_needs_second_pass(double free_now, double mmr);

/*
 * load_models_gpu's per-device sums over the models being loaded, one row per device in
 * first-seen order: need (the offloaded part of a model already on that device, else its
 * full size) and pins (the full size of non-dynamic models). *free_for_dynamic is 1 when
 * every model is dynamic. Returns COMEM_OK, COMEM_EINVAL, or COMEM_ERANGE when more than
 * cap devices appear.
 */
COMEM_API int comem_calc_load_needs(const comem_calc_model *models, size_t n, int32_t *devices, int64_t *need,
                                    int64_t *pins, size_t cap, size_t *n_rows, int *free_for_dynamic);

/*
 * load_models_gpu's load order. ids[0..n) are the patchers in the order load_models_gpu
 * visits them (each requested model followed by its model_patches_models()); equal ids are
 * the same patcher. Writes to order[] (room for n) the index in ids[] of each distinct
 * patcher's first appearance, in the order the models are loaded, wrapped, summed per device
 * and inserted at the front of current_loaded_models: first-seen order, reversed. *n_order
 * counts them. COMEM_ENOTSUP for the a125cd84 rules (a set: the order is Python's hash order),
 * COMEM_EINVAL for unknown rules or missing arguments. Quadratic in n (a call loads a few models).
 */
COMEM_API int comem_calc_load_order(int rules, const uint64_t *ids, size_t n, size_t *order, size_t *n_order);

/* comem_calc_lowvram_budget flags */
#define COMEM_CALC_LOAD_DEVICE_CPU 1u  /* the model's load device is the CPU (state DISABLED) */
#define COMEM_CALC_NO_LOWVRAM 2u       /* lowvram_available is False (DirectML) */
#define COMEM_CALC_FORCE_FULL_LOAD 4u  /* load_models_gpu(force_full_load=True) */

/* ComfyUI's budget for "lowvram with nothing resident" (its 0.1 sentinel), for a caller that must pass it. */
COMEM_API double comem_calc_nothing_budget(void);

/* What LoadedModel.model_load hands partially_load for a budget of 0, a full load (its 1e32 sentinel). */
COMEM_API double comem_calc_full_load_sentinel(void);

/* comem_calc_lowvram_budget's *kind */
#define COMEM_CALC_BUDGET_FULL 0    /* budget 0: model_load loads everything (passes 1e32) */
#define COMEM_CALC_BUDGET_NOTHING 1 /* budget 0.1: lowvram with nothing resident */
#define COMEM_CALC_BUDGET_BYTES 2   /* load up to *budget bytes; negative: shed -budget of this model */

/*
 * The lowvram budget load_models_gpu hands one model: free is get_free_memory(load
 * device), loaded the model's resident bytes, mmr and inference as comem_calc_admission
 * gives them, ratio MIN_WEIGHT_MEMORY_RATIO (0.0 on NVIDIA, 0.4 elsewhere). *budget is
 * exactly the value ComfyUI computes (0, 0.1 or bytes). COMEM_EINVAL for an unknown rules
 * or vram_state, or a NULL out-pointer.
 */
COMEM_API int comem_calc_lowvram_budget(int rules, int vram_state, unsigned flags, double free_now, double loaded,
                                        double mmr, double inference, double ratio, int *kind, double *budget);

/* comem_calc_free_memory flags */
#define COMEM_CALC_DEVICE_NONE 1u     /* free_memory(device=None) */
#define COMEM_CALC_FOR_DYNAMIC 2u     /* for_dynamic=True (current rules only) */
#define COMEM_CALC_NO_SMART_MEMORY 4u /* --disable-smart-memory */

/* get_free_memory(device), measured now. */
typedef double (*comem_calc_free_fn)(void *user);
/* patcher.partially_unload(offload device, to_free) of models[entry]: returns the bytes it freed. */
typedef double (*comem_calc_partial_fn)(void *user, size_t entry, double to_free);
/* patcher.detach() of models[entry]: the whole model leaves the device. */
typedef void (*comem_calc_detach_fn)(void *user, size_t entry);

/* One model_unload free_memory made, in the order it made them. */
typedef struct comem_calc_unload {
    uint64_t entry;        /* index into models[] */
    double asked;          /* memory_to_free (1e32 with smart memory off) */
    double partial_freed;  /* what the partial unload returned (0 when none ran) */
    int32_t detached;      /* 1: fully unloaded, the entry leaves the list; 0: partial, it stays */
    int32_t tried_partial; /* 1: a partial unload ran first and fell short */
} comem_calc_unload;

/*
 * free_memory(memory_required, device, keep_loaded) over models[0..n) (index 0 is the most
 * recently loaded), measuring and unloading through the callbacks: partial may be NULL (no
 * partial unload is tried), detach NULL (detaches are only recorded), free_now NULL only with
 * smart memory off or DEVICE_NONE. order[] (room for n) receives every candidate in eviction order and
 * *n_order their count; unloads[] (room for n) the unloads made and *n_unloads their count;
 * *required_after (may be NULL) memory_required after the dynamic reductions.
 * Returns COMEM_OK or COMEM_EINVAL (bad arguments, an unknown rules, or a flag the chosen
 * rules do not have).
 */
COMEM_API int comem_calc_free_memory(int rules, double memory_required, int device, unsigned flags,
                                     const comem_calc_model *models, size_t n, comem_calc_free_fn free_now,
                                     comem_calc_partial_fn partial, comem_calc_detach_fn detach, void *user,
                                     size_t *order, size_t *n_order, comem_calc_unload *unloads, size_t *n_unloads,
                                     double *required_after);

/*
 * 1 when free_memory, after its unloads, calls ensure_pin_budget(pins_required) and then
 * ensure_pin_registerable(pins_required) (results ignored): not for_dynamic
 * (COMEM_CALC_FOR_DYNAMIC in flags) and pins_required > 0. Always 0 under the a125cd84 rules
 * (no pins). ram_required has no effect in any version (783545f6 only logs it). -1 (COMEM_EINVAL)
 * for unknown rules.
 */
COMEM_API int comem_calc_free_memory_ensures_pins(int rules, unsigned flags, double pins_required);

/*
 * free_memory's closing soft_empty_cache: 1 when anything was fully unloaded; else, for a
 * real device outside HIGH_VRAM, when free_torch > 0.25 * free_total; else 0.
 */
COMEM_API int comem_calc_should_empty_cache(int unloaded_any, int device_none, int vram_state, double free_total,
                                            double free_torch);

/* ---- pinned host RAM (ComfyUI 783545f6 and v0.39; a125cd84 has no pinned budget: COMEM_ENOTSUP) ---- */

/*
 * MAX_PINNED_MEMORY: -1 unless enabled (NVIDIA or AMD, no --disable-pinned-memory); on
 * Windows 0.40 * ram; else max(0.40 ram, min(0.90 ram, ram - 4 GiB, ram + disk_swap - 16 GiB)).
 * ram is ComfyUI's RAM total (783545f6: psutil's; v0.39: a cgroup limit where one is lower);
 * disk_swap /proc/swaps without zram devices, cgroup limit or not (783545f6's rule).
 */
COMEM_API double comem_calc_max_pinned(int enabled, int windows, double ram, int64_t disk_swap);

/*
 * The same by a version's rule into *max_pinned: under COMEM_COMFYUI_V039 the swap counts as 0
 * when cgroup_limited (a cgroup memory limit applies). Returns 0, COMEM_EINVAL (unknown rules,
 * max_pinned NULL) or COMEM_ENOTSUP (a125cd84).
 */
COMEM_API int comem_calc_max_pinned_of(int rules, int enabled, int windows, double ram, int64_t disk_swap,
                                       int cgroup_limited, double *max_pinned);

/* pinned_hostbuf_size(size): max(0, int(min(size, max_pinned) * 2)); int(size * 2) with --high-ram. */
COMEM_API int64_t comem_calc_pinned_hostbuf_size(double size, double max_pinned, int high_ram);

/* Pin subsets, as bits (ComfyUI's names). */
#define COMEM_CALC_PINS_WEIGHTS 1u        /* "weights" */
#define COMEM_CALC_PINS_PATCHES 2u        /* "patches" */
#define COMEM_CALC_PINS_WEIGHTS_LOADED 4u /* "weights-loaded" */
#define COMEM_CALC_PINS_PATCHES_LOADED 8u /* "patches-loaded" */
#define COMEM_CALC_PINS_WEIGHTS_FAST 16u  /* "weights-fast" (v0.39) */
#define COMEM_CALC_PINS_PATCHES_FAST 32u  /* "patches-fast" (v0.39) */

/* One entry of current_loaded_models (list order, index 0 most recent), as flags: */
#define COMEM_CALC_PIN_MODEL_DYNAMIC 1u        /* a live dynamic patcher (only these hold pins) */
#define COMEM_CALC_PIN_MODEL_ACTIVE 2u         /* dynamic_pins[load_device]["active"] */
#define COMEM_CALC_PIN_MODEL_CURRENT_PROMPT 4u /* dynamic_pins[load_device]["current_prompt"] */

/*
 * Frees up to size bytes of model's pins in the subsets (COMEM_CALC_PINS_* bits): with
 * unregister 0, partially_unload_ram (destroys pins); with 1, unregister_inactive_pins (the RAM
 * stays, the page lock goes). Returns the bytes freed.
 */
typedef double (*comem_calc_pin_free_fn)(void *user, size_t model, double size, unsigned subsets, int unregister);

/* Gate flags. */
#define COMEM_CALC_PIN_HIGH_RAM 1u     /* --high-ram */
#define COMEM_CALC_PIN_FAST_DISK 2u    /* --fast-disk (783545f6's RAM gate; v0.39 ignores it there) */
#define COMEM_CALC_PIN_LOADED 4u       /* loaded=True */
#define COMEM_CALC_PIN_EVICT_ACTIVE 8u /* evict_active=True */

/*
 * ensure_pin_budget(size, evict_active, loaded): --high-ram passes; shortfall = total_pinned +
 * size - max_pinned with --fast-disk (783545f6 only), else size + max(ram_cache_headroom / 2, 2 GiB) -
 * available; passes when <= 0, else free_pins(shortfall + 256 MiB) over models[0..n) and
 * passes when that freed >= shortfall. *passed is 1 or 0; *shortfall (may be NULL) the figure.
 */
COMEM_API int comem_calc_ensure_pin_budget(int rules, unsigned flags, double size, int64_t ram_cache_headroom,
                                           double available, double total_pinned, double max_pinned,
                                           const uint32_t *models, size_t n, comem_calc_pin_free_fn fn, void *user,
                                           int *passed, double *shortfall);

/*
 * free_pins(size, evict_active, loaded): the pin eviction ladder of the rules' version (see arith/pinned.h), each
 * rung asked for size minus what earlier rungs freed. *freed the total (may exceed size).
 */
COMEM_API int comem_calc_free_pins(int rules, unsigned flags, double size, const uint32_t *models, size_t n,
                                   comem_calc_pin_free_fn fn, void *user, double *freed);

/*
 * free_registrations(shortfall, evict_active): refused (0) when max_pinned <= 0, passes when
 * shortfall <= 0, else walks the registration ladder from shortfall + 2 GiB and passes when
 * what is left is <= 2 GiB.
 */
COMEM_API int comem_calc_free_registrations(int rules, unsigned flags, double shortfall, double max_pinned,
                                            const uint32_t *models, size_t n, comem_calc_pin_free_fn fn, void *user,
                                            int *passed);

/* ensure_pin_registerable(size, evict_active): free_registrations(total_pinned + size - max_pinned). */
COMEM_API int comem_calc_ensure_pin_registerable(int rules, unsigned flags, double total_pinned, double size,
                                                 double max_pinned, const uint32_t *models, size_t n,
                                                 comem_calc_pin_free_fn fn, void *user, int *passed);

/*
 * should_free_pins_for_ram_pressure(shortfall): 0 for shortfall <= 0; 1 off Windows; on
 * Windows 1 when available < 512 MiB, when the swap reading failed (swap_known 0) or swap use
 * >= 5 %.
 */
COMEM_API int comem_calc_should_free_pins_for_ram_pressure(double shortfall, int windows, double available,
                                                           int swap_known, double swap_percent);

#ifdef __cplusplus
}
#endif
#endif
