/*
 * arith/pinned.h - pinned (page-locked) host RAM: ceiling, buffer size, gates, eviction ladders.
 *
 * The rules of ComfyUI 783545f6 (comfy/model_management.py, comfy/pinned_memory.py):
 *
 *   ceiling (Windows) = 0.40 * R
 *   ceiling (other)   = max(0.40 R, min(0.90 R, R - 4 GiB, R + swap - 16 GiB))
 *                       swap = /proc/swaps minus zram, counted under a cgroup limit too
 *   host buffer       = max(0, int(min(size, ceiling) * 2))   (int(size * 2) with --high-ram)
 *   RAM gate          --high-ram: passes;
 *                     shortfall = total_pinned + size - ceiling       (--fast-disk)
 *                               = size + max(headroom / 2, 2 GiB) - available  (otherwise);
 *                     passes if <= 0, else ask free_pins(shortfall + 256 MiB)
 *                     and pass if that freed >= shortfall
 *   page-lock gate    shortfall = total_pinned + size - ceiling; refused when the
 *                     ceiling <= 0; passes if <= 0, else walk the registration
 *                     tiers from shortfall + 2 GiB and pass if what is left <= 2 GiB
 *   pin tiers         (PIN, F, any) (LOADED, F, any) (LOADED, T, any)
 *                     + (PIN, T, F) when not loaded, + (PIN, T, T) when also evict_active
 *                     (subsets, current_prompt, active); each destroys pins
 *   registration      (PIN+LOADED, F, F) (PIN+LOADED, T, F)
 *   tiers             + (PIN+LOADED, F, T) (PIN+LOADED, T, T) when evict_active; each unregisters
 *   free_model_pins   walks current_loaded_models in list order (MRU first), dynamic
 *                     patchers whose pin state matches the tier; returns once size <= 0
 *
 * R is psutil's RAM total (MemTotal: 783545f6 has no cgroup clamp; comem's probe may
 * pass a clamped total). Pinning is disabled (ceiling -1) unless the device is NVIDIA or
 * AMD and --disable-pinned-memory is absent. The older per-file snapshot comem followed
 * before (model_management.py @02b2b388) had a third, "-fast" subset in both ladders,
 * destroyed fast pins in the registration ladder, had no --fast-disk branch and ignored
 * swap under a cgroup limit (docs/conformance.md).
 * Source: comfyui-manager-code.md section 9 and 14 (a7631e35, the same ladders); vectors V7, V12, V13.
 *
 * ComfyUI v0.39 (the assembled tree, model_management.py of 2026-10; COMEM_PIN_ERA_V039) differs in
 * four places, and comem follows each era's:
 *   ceiling           swap counts as 0 when a cgroup limit applies (R is then the limit)
 *   RAM gate          no --fast-disk branch: always the RAM shortfall
 *   pin tiers         (FAST, F, F) (PIN, F, any) (LOADED, F, any) (FAST, T, F) (LOADED, T, any)
 *                     + (PIN, T, F) when not loaded, + (FAST, F, T) (FAST, T, T) (PIN, T, T)
 *                     when also evict_active; each destroys pins
 *   registration      for each active in (F, then T when evict_active), each prompt in (F, T):
 *   tiers             (FAST, p, a) destroying, then (PIN+LOADED, p, a) unregistering
 */
#ifndef COMEM_ARITH_PINNED_H
#define COMEM_ARITH_PINNED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define COMEM_PIN_PRESSURE_HYSTERESIS ((int64_t)256 << 20)
#define COMEM_REGISTERABLE_HYSTERESIS ((int64_t)2048 << 20)
#define COMEM_PIN_RAM_FLOOR ((int64_t)2048 << 20)
#define COMEM_WINDOWS_PIN_SWAP_PERCENT 5.0
#define COMEM_WINDOWS_PIN_EMERGENCY_AVAILABLE ((int64_t)512 << 20)
#define COMEM_PINNING_DISABLED (-1.0)

/* Whose pin rules: the ladders and the swap rule differ between ComfyUI 783545f6 and v0.39. */
typedef enum comem_pin_era { COMEM_PIN_ERA_783545F6 = 0, COMEM_PIN_ERA_V039 = 1 } comem_pin_era;

typedef struct comem_pin_ceiling_in {
    double ram;          /* RAM total, bytes (783545f6: psutil's; v0.39: clamped to a lower cgroup limit) */
    int64_t disk_swap;   /* swap excluding zram, bytes */
    bool windows;
    bool cgroup_limited; /* a cgroup limit applies: swap counts as 0 under v0.39, no effect under 783545f6 */
    bool enabled;        /* NVIDIA/AMD and pinning not disabled */
    comem_pin_era era;   /* whose rule (0, the default: 783545f6's) */
} comem_pin_ceiling_in;

/* MAX_PINNED_MEMORY: a double, or COMEM_PINNING_DISABLED. */
double comem_max_pinned(const comem_pin_ceiling_in *in);

/* A /proc/swaps row: the resolved device basename and its size in KiB. */
typedef struct comem_swap_entry {
    const char *basename;
    int64_t size_kib;
} comem_swap_entry;

/* Disk swap: the rows' sizes in bytes, skipping devices named zram*. */
int64_t comem_disk_swap_total(const comem_swap_entry *rows, size_t n);

/* pinned_hostbuf_size(size). */
int64_t comem_pinned_hostbuf_size(double size, double max_pinned, bool high_ram);

/* Pin subsets of a dynamic model, as bits (783545f6's four; v0.39 adds the "-fast" pair back). */
enum {
    COMEM_PIN_WEIGHTS = 1 << 0,
    COMEM_PIN_PATCHES = 1 << 1,
    COMEM_PIN_WEIGHTS_LOADED = 1 << 2,
    COMEM_PIN_PATCHES_LOADED = 1 << 3,
    COMEM_PIN_WEIGHTS_FAST = 1 << 4,
    COMEM_PIN_PATCHES_FAST = 1 << 5,
};
#define COMEM_PIN_SET (COMEM_PIN_WEIGHTS | COMEM_PIN_PATCHES)
#define COMEM_PIN_SET_LOADED (COMEM_PIN_WEIGHTS_LOADED | COMEM_PIN_PATCHES_LOADED)
#define COMEM_PIN_SET_FAST (COMEM_PIN_WEIGHTS_FAST | COMEM_PIN_PATCHES_FAST)

/* A filter that is either "any" or must match. */
typedef enum comem_tristate { COMEM_ANY = -1, COMEM_NO = 0, COMEM_YES = 1 } comem_tristate;

/* One rung of a pin eviction ladder. */
typedef struct comem_pin_tier {
    unsigned subsets;
    comem_tristate current_prompt; /* used by the running prompt? */
    comem_tristate active;         /* in use by a running model? */
    bool unregister;               /* unregister (keep the RAM) instead of destroying */
} comem_pin_tier;

/* Room for a ladder: the longest is v0.39's pin ladder, 9 rungs (5 base + not loaded + 3 evict_active). */
#define COMEM_PIN_TIERS_MAX 9

/* pin_eviction_tiers(loaded, evict_active) of an era; returns the count. */
size_t comem_pin_eviction_tiers(comem_pin_era era, bool loaded, bool evict_active, comem_pin_tier *out);

/* registration_eviction_tiers(evict_active) of an era; returns the count. */
size_t comem_registration_eviction_tiers(comem_pin_era era, bool evict_active, comem_pin_tier *out);

/* free_model_pins(size, tier): frees up to size from matching models; returns bytes freed. */
typedef double (*comem_free_model_pins_fn)(void *user, double size, const comem_pin_tier *tier);

/* One entry of current_loaded_models as models_for_pin_eviction sees it. */
typedef struct comem_pin_model {
    bool dynamic;        /* a live, dynamic patcher: the only kind with pins (others are skipped) */
    bool active;         /* dynamic_pins[load_device]["active"] */
    bool current_prompt; /* dynamic_pins[load_device]["current_prompt"] */
} comem_pin_model;

/*
 * One model's share of a tier: partially_unload_ram(size, subsets) (destroy) or
 * unregister_inactive_pins(size, subsets) (tier->unregister). Returns the bytes freed.
 */
typedef double (*comem_pin_model_free_fn)(void *user, size_t model, double size, const comem_pin_tier *tier);

/*
 * free_model_pins(size, tier) over models[0..n) in list order: each model matching the
 * tier's filters is asked for what is still wanted, until that is <= 0. Returns the total.
 */
double comem_free_model_pins(const comem_pin_model *models, size_t n, double size, const comem_pin_tier *tier,
                             comem_pin_model_free_fn fn, void *user);

/* free_pins(size): walks the era's eviction tiers; returns the total freed (may exceed size). */
double comem_free_pins(comem_pin_era era, double size, bool loaded, bool evict_active, comem_free_model_pins_fn fn,
                       void *user);

typedef struct comem_pin_budget_check {
    bool passes_now; /* shortfall <= 0 (or --high-ram) */
    double shortfall;
    double ask; /* shortfall + 256 MiB: what free_pins is asked for */
} comem_pin_budget_check;

/* What ensure_pin_budget reads. */
typedef struct comem_pin_budget_in {
    double size;
    int64_t ram_cache_headroom; /* comfy.memory_management.RAM_CACHE_HEADROOM */
    double available;           /* psutil.virtual_memory().available */
    bool high_ram;              /* --high-ram: always passes */
    bool fast_disk;             /* --fast-disk: the page-lock shortfall instead of the RAM one (783545f6 only) */
    comem_pin_era era;          /* whose gate and ladder (0, the default: 783545f6's) */
    double total_pinned;        /* TOTAL_PINNED_MEMORY (--fast-disk only) */
    double max_pinned;          /* MAX_PINNED_MEMORY (--fast-disk only) */
} comem_pin_budget_in;

/* The RAM gate's arithmetic (ensure_pin_budget without the eviction). */
void comem_pin_budget_of(const comem_pin_budget_in *in, comem_pin_budget_check *out);

/* The same without --fast-disk, 783545f6's ladder. */
void comem_pin_budget(double size, int64_t ram_cache_headroom, double available, bool high_ram,
                      comem_pin_budget_check *out);

/* ensure_pin_budget: the gate, then free_pins(ask) when short. */
bool comem_ensure_pin_budget_of(const comem_pin_budget_in *in, bool evict_active, bool loaded,
                                comem_free_model_pins_fn fn, void *user);

/* The same without --fast-disk, 783545f6's ladder. */
bool comem_ensure_pin_budget(double size, int64_t ram_cache_headroom, double available, bool high_ram,
                             bool evict_active, bool loaded, comem_free_model_pins_fn fn, void *user);

typedef struct comem_pin_registerable_check {
    bool refused;    /* pinning disabled (ceiling <= 0) */
    bool passes_now; /* shortfall <= 0 */
    double shortfall;
    double target; /* shortfall + 2 GiB: where the registration tiers start */
} comem_pin_registerable_check;

/* The page-lock gate's arithmetic (ensure_pin_registerable without the eviction). */
void comem_pin_registerable(double total_pinned, double size, double max_pinned,
                            comem_pin_registerable_check *out);

/* free_registrations(shortfall): walks the era's registration tiers. */
bool comem_free_registrations(comem_pin_era era, double shortfall, double max_pinned, bool evict_active,
                              comem_free_model_pins_fn fn, void *user);

/* ensure_pin_registerable(size): free_registrations(total_pinned + size - max_pinned). */
bool comem_ensure_pin_registerable(comem_pin_era era, double total_pinned, double size, double max_pinned,
                                   bool evict_active, comem_free_model_pins_fn fn, void *user);

/*
 * should_free_pins_for_ram_pressure: never for shortfall <= 0; always off
 * Windows; on Windows when available < 512 MiB or swap use >= 5 %, or when the
 * swap reading failed (swap_known false).
 */
bool comem_should_free_pins_for_ram_pressure(double shortfall, bool windows, double available,
                                             bool swap_known, double swap_percent);

#endif
