/*
 * arith/planners.h - whom to ask for memory back, and how much.
 *
 * pressure release: holders other than the requester that are alive, answer
 *   sized asks, are not inside a call and hold something; largest first (ties
 *   by key); each asked min(held, remaining) until the shortfall is covered.
 * idle release: alive, advertising, not in a call, holding something, and
 *   either idle for min_idle seconds, or with its last prompt over while the
 *   card is tight (comfy-env's newest rule: a prompt boundary alone is no reason).
 * pin pressure: at most every `interval` seconds, ask every non-host holder
 *   with at least min_slice pinned for its proportional share of the target,
 *   floored at min_slice (so the asks may sum past the target).
 * Source: comfy-env-code.md section 1.2.10; vectors section 5.3.
 */
#ifndef COMEM_ARITH_PLANNERS_H
#define COMEM_ARITH_PLANNERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * May a holder be asked to release now? Only when it answers that kind of ask,
 * and not while it computes unless it releases while busy (a pager): a compute
 * thread is never interrupted; it is asked again at its next boundary. The
 * coordinator plans with this rule and a holder's own client answers by it.
 */
static inline bool comem_may_release_now(bool answers, bool busy, bool releases_while_busy)
{
    return answers && (!busy || releases_while_busy);
}

#define COMEM_IDLE_RELEASE_SECONDS 60.0
#define COMEM_PIN_PRESSURE_MIN_SLICE ((int64_t)256 << 20)
#define COMEM_PIN_PRESSURE_INTERVAL 10.0

typedef struct comem_release_holder {
    const char *key; /* stable name; ties are broken by strcmp order */
    bool alive;
    bool advertises; /* answers this kind of ask */
    bool in_flight;  /* inside a call right now */
    int64_t held;    /* bytes it holds that an ask could return */
} comem_release_holder;

typedef struct comem_release_ask {
    size_t holder; /* index into the holders array */
    int64_t bytes;
} comem_release_ask;

/*
 * Plans asks covering shortfall. requester is the index to skip, or SIZE_MAX.
 * asks needs room for n entries; returns how many were written.
 */
size_t comem_plan_pressure_release(const comem_release_holder *holders, size_t n, int64_t shortfall,
                                   size_t requester, comem_release_ask *asks);

typedef struct comem_idle_holder {
    const char *key;
    bool alive;
    bool advertises;
    bool in_flight;
    bool holding;
    bool idle_known;          /* idle_since is set */
    double idle_since;        /* seconds, same clock as now */
    const char *last_prompt;  /* NULL when unknown */
} comem_idle_holder;

/*
 * Selects idle holders to release, written to out[] as indices sorted by key.
 * current_prompt may be NULL. Returns the count.
 */
size_t comem_plan_idle_release(const comem_idle_holder *holders, size_t n, double now, double min_idle,
                               const char *current_prompt, bool card_tight, size_t *out);

typedef struct comem_pin_report {
    const char *key; /* "host" is never asked */
    int64_t pinned;
} comem_pin_report;

/*
 * Plans pin release asks. asks needs room for n entries; returns the count
 * (0 when the sweep is too soon, the target is not positive, or nobody qualifies).
 */
size_t comem_plan_pin_pressure(const comem_pin_report *reports, size_t n, int64_t target, double now,
                               double last_sweep, int64_t min_slice, double interval,
                               comem_release_ask *asks);

#endif
