/*
 * arith/evict.h - free_memory's eviction ladder and the empty-cache decision.
 *
 * Candidates are the entries on the device (or any device when device is
 * none) that are neither kept nor dead. They are visited in ascending order of
 * the key (-offloaded, refs, size, list index): most offloaded first, then
 * fewest references, then smallest, then lowest index (index 0 is the most
 * recently loaded). For each candidate:
 *
 *   to_free = 1e32                                   (smart memory off: detach all)
 *   if smart memory or device is none:
 *       to_free = device none ? 0 : required - free_now()   (re-measured per victim,
 *                                                  a dynamic one passed over below included)
 *       if entry is dynamic and the load is dynamic:
 *           required -= entry.loaded; to_free = 0    (accumulates into later victims)
 *   if to_free > 0: unload(to_free)
 *
 * unload(to_free) is LoadedModel.model_unload: when to_free < loaded, try a
 * partial unload; if it frees at least to_free the entry stays (partial),
 * otherwise, or when to_free >= loaded, the entry is detached.
 * Source: comfyui-manager-code.md sections 3-4; vectors V6, V10.
 *
 * The ladder does no I/O: measuring and unloading are callbacks, so the same
 * code plans inside one process (calc, tests) and across processes (coord).
 */
#ifndef COMEM_ARITH_EVICT_H
#define COMEM_ARITH_EVICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arith/lowvram.h"

/* ComfyUI's "free everything" targets. */
#define COMEM_SMART_OFF_TO_FREE 1e32
#define COMEM_UNLOAD_ALL 1e30

typedef struct comem_evict_entry {
    int64_t size;   /* model_memory() */
    int64_t loaded; /* loaded_size() */
    int64_t refs;   /* reference count: a tie-breaker, injected */
    int device;
    bool dynamic;
    bool keep; /* in keep_loaded */
    bool dead;
} comem_evict_entry;

typedef struct comem_evict_ops {
    /* get_free_memory(device), measured now. */
    double (*free_now)(void *user);
    /* partially_unload(entry, to_free): returns the bytes actually freed. */
    double (*partial)(void *user, size_t entry, double to_free);
    /* detach(entry): unload the whole entry. */
    void (*detach)(void *user, size_t entry);
    void *user;
} comem_evict_ops;

typedef enum comem_evict_action_kind {
    COMEM_EVICT_PARTIAL = 0, /* partially unloaded; the entry stays loaded */
    COMEM_EVICT_DETACH = 1   /* fully unloaded (after a partial that fell short, if tried_partial) */
} comem_evict_action_kind;

typedef struct comem_evict_action {
    size_t entry;
    comem_evict_action_kind kind;
    bool tried_partial;    /* a partial unload ran first and fell short */
    double asked;          /* to_free for this victim */
    double partial_freed;  /* what the partial unload returned (0 if none ran) */
} comem_evict_action;

typedef struct comem_evict_request {
    double required;  /* memory_required */
    bool device_none; /* device is None: frees nothing */
    int device;
    bool for_dynamic;
    bool smart_memory; /* not --disable-smart-memory */
    /*
     * Stop at the first candidate that needs nothing freed. Only valid when
     * free_now never decreases during the walk (a planner's projection does
     * not), because then every later candidate would need nothing either.
     * ComfyUI itself visits every candidate; the array form leaves this off.
     */
    bool stop_when_covered;
} comem_evict_request;

typedef struct comem_evict_result {
    size_t n_order;   /* candidates visited, in order, written to order[] */
    size_t n_actions; /* unload actions taken, written to actions[] */
    size_t n_detached;
    double required_after; /* required after dynamic reductions */
} comem_evict_result;

/*
 * Runs the ladder over entries[0..n). order[] and actions[] need room for n
 * items each. Returns 0, or COMEM_EINVAL for missing arguments.
 */
int comem_evict_run(const comem_evict_request *req, const comem_evict_entry *entries, size_t n,
                    const comem_evict_ops *ops, size_t *order, comem_evict_action *actions,
                    comem_evict_result *result);

/*
 * The ladder over candidates that a callback hands out already in eviction
 * order (the coordinator keeps them ordered, so it need not sort per plan).
 * next() returns false when there are no more; it is responsible for the
 * device/keep/dead filtering. actions[] has room for max_actions; the walk
 * stops early (without error) when it is full.
 */
typedef struct comem_evict_walk_ops {
    bool (*next)(void *user, size_t *index, comem_evict_entry *entry);
    double (*free_now)(void *user);
    double (*partial)(void *user, size_t index, double to_free);
    void (*detach)(void *user, size_t index);
    void *user;
} comem_evict_walk_ops;

int comem_evict_walk(const comem_evict_request *req, const comem_evict_walk_ops *ops, comem_evict_action *actions,
                     size_t max_actions, comem_evict_result *result);

/*
 * Candidate order only (no callbacks): writes the indices free_memory would
 * visit into order[] and returns how many.
 */
size_t comem_evict_order(const comem_evict_request *req, const comem_evict_entry *entries, size_t n,
                         size_t *order);

/*
 * free_memory's pin step (783545f6), after the unloads are popped: true when it calls
 * ensure_pin_budget(pins_required) and ensure_pin_registerable(pins_required), i.e. not
 * for_dynamic and pins_required > 0. ram_required is only logged.
 */
bool comem_evict_ensures_pins(bool for_dynamic, double pins_required);

/*
 * soft_empty_cache after free_memory: yes when anything was unloaded; else,
 * for a real device outside HIGH_VRAM, when free_torch > 0.25 * free_total.
 */
bool comem_should_empty_cache(bool unloaded_any, bool device_none, comem_vram_state state,
                              double free_total, double free_torch);

#endif
