/* arith/pinned.c - pinned-RAM ceiling, host buffer size, RAM and page-lock gates, tiers. */
#include "arith/pinned.h"

#include <string.h>

#include "base/bytes.h"

double comem_max_pinned(const comem_pin_ceiling_in *in)
{
    if (!in->enabled)
        return COMEM_PINNING_DISABLED;
    double ram = in->ram;
    if (in->windows)
        return ram * 0.40; /* Windows caps page-locked memory near half of RAM */
    /* 783545f6 counts disk swap whether or not a cgroup limits the process; v0.39 not under a limit. */
    double swap = in->era == COMEM_PIN_ERA_V039 && in->cgroup_limited ? 0.0 : (double)in->disk_swap;
    double gib = 1024.0 * 1024 * 1024;
    double inner = comem_fmin(comem_fmin(ram * 0.90, ram - 4 * gib), ram + swap - 16 * gib);
    return comem_fmax(ram * 0.40, inner);
}

int64_t comem_disk_swap_total(const comem_swap_entry *rows, size_t n)
{
    int64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (rows[i].basename && strncmp(rows[i].basename, "zram", 4) == 0)
            continue; /* compressed RAM is not disk: it cannot back pinned pages */
        total = comem_add(total, comem_mul(rows[i].size_kib, 1024));
    }
    return total;
}

int64_t comem_pinned_hostbuf_size(double size, double max_pinned, bool high_ram)
{
    if (high_ram)
        return comem_clamp0(comem_trunc(size * 2));
    return comem_clamp0(comem_trunc(comem_fmin(size, max_pinned) * 2));
}

/* (subsets, current_prompt, active): 783545f6's pin_eviction_tiers, each destroying pins. */
static const comem_pin_tier k_pin_tiers_base[] = {
    {COMEM_PIN_SET, COMEM_NO, COMEM_ANY, false},
    {COMEM_PIN_SET_LOADED, COMEM_NO, COMEM_ANY, false},
    {COMEM_PIN_SET_LOADED, COMEM_YES, COMEM_ANY, false},
};
static const comem_pin_tier k_pin_tiers_not_loaded[] = {{COMEM_PIN_SET, COMEM_YES, COMEM_NO, false}};
static const comem_pin_tier k_pin_tiers_active[] = {{COMEM_PIN_SET, COMEM_YES, COMEM_YES, false}};

/* v0.39's: the fast pool goes first in each rung where it can, the active ones last. */
static const comem_pin_tier k_pin_tiers_base_v039[] = {
    {COMEM_PIN_SET_FAST, COMEM_NO, COMEM_NO, false},   {COMEM_PIN_SET, COMEM_NO, COMEM_ANY, false},
    {COMEM_PIN_SET_LOADED, COMEM_NO, COMEM_ANY, false}, {COMEM_PIN_SET_FAST, COMEM_YES, COMEM_NO, false},
    {COMEM_PIN_SET_LOADED, COMEM_YES, COMEM_ANY, false},
};
static const comem_pin_tier k_pin_tiers_active_v039[] = {
    {COMEM_PIN_SET_FAST, COMEM_NO, COMEM_YES, false},
    {COMEM_PIN_SET_FAST, COMEM_YES, COMEM_YES, false},
    {COMEM_PIN_SET, COMEM_YES, COMEM_YES, false},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Each era's ladder: the base rungs, the one added when not loaded, those added with evict_active too. */
static const struct pin_ladder {
    const comem_pin_tier *base, *active;
    size_t n_base, n_active;
} k_ladders[] = {
    [COMEM_PIN_ERA_783545F6] = {k_pin_tiers_base, k_pin_tiers_active, COUNT(k_pin_tiers_base),
                                COUNT(k_pin_tiers_active)},
    [COMEM_PIN_ERA_V039] = {k_pin_tiers_base_v039, k_pin_tiers_active_v039, COUNT(k_pin_tiers_base_v039),
                            COUNT(k_pin_tiers_active_v039)},
};

static size_t append(comem_pin_tier *out, size_t n, const comem_pin_tier *rungs, size_t k)
{
    memcpy(out + n, rungs, k * sizeof *rungs);
    return n + k;
}

size_t comem_pin_eviction_tiers(comem_pin_era era, bool loaded, bool evict_active, comem_pin_tier *out)
{
    const struct pin_ladder *l = &k_ladders[era == COMEM_PIN_ERA_V039 ? COMEM_PIN_ERA_V039 : COMEM_PIN_ERA_783545F6];
    size_t n = append(out, 0, l->base, l->n_base);
    if (!loaded) {
        n = append(out, n, k_pin_tiers_not_loaded, COUNT(k_pin_tiers_not_loaded));
        if (evict_active)
            n = append(out, n, l->active, l->n_active);
    }
    return n;
}

size_t comem_registration_eviction_tiers(comem_pin_era era, bool evict_active, comem_pin_tier *out)
{
    const unsigned all = COMEM_PIN_SET | COMEM_PIN_SET_LOADED;
    size_t n = 0;
    int passes = evict_active ? 2 : 1;
    for (int p = 0; p < passes; p++) {
        comem_tristate active = p == 0 ? COMEM_NO : COMEM_YES;
        for (int prompt = 0; prompt < 2; prompt++) {
            comem_tristate current = prompt == 0 ? COMEM_NO : COMEM_YES;
            /* v0.39 destroys the fast pool (its pins cost a re-read from a fast disk only) before it
               unregisters the others; unregistering keeps the RAM, only the page lock goes. */
            if (era == COMEM_PIN_ERA_V039)
                out[n++] = (comem_pin_tier){COMEM_PIN_SET_FAST, current, active, false};
            out[n++] = (comem_pin_tier){all, current, active, true};
        }
    }
    return n;
}

static bool tri_matches(comem_tristate t, bool v) { return t == COMEM_ANY || (t == COMEM_YES) == v; }

double comem_free_model_pins(const comem_pin_model *models, size_t n, double size, const comem_pin_tier *tier,
                             comem_pin_model_free_fn fn, void *user)
{
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        const comem_pin_model *m = &models[i];
        if (!m->dynamic || !tri_matches(tier->active, m->active) ||
            !tri_matches(tier->current_prompt, m->current_prompt))
            continue;
        if (size <= 0)
            return total;
        double freed = fn(user, i, size, tier);
        total += freed;
        size -= freed;
    }
    return total;
}

double comem_free_pins(comem_pin_era era, double size, bool loaded, bool evict_active, comem_free_model_pins_fn fn,
                       void *user)
{
    comem_pin_tier tiers[COMEM_PIN_TIERS_MAX];
    size_t n = comem_pin_eviction_tiers(era, loaded, evict_active, tiers);
    double freed = 0;
    for (size_t i = 0; i < n; i++)
        freed += fn(user, size - freed, &tiers[i]);
    return freed;
}

void comem_pin_budget_of(const comem_pin_budget_in *in, comem_pin_budget_check *out)
{
    if (in->high_ram) {
        *out = (comem_pin_budget_check){.passes_now = true};
        return;
    }
    if (in->fast_disk && in->era == COMEM_PIN_ERA_783545F6) { /* v0.39 dropped this branch */
        out->shortfall = in->total_pinned + in->size - in->max_pinned;
    } else {
        double floor = comem_fmax((double)in->ram_cache_headroom / 2, (double)COMEM_PIN_RAM_FLOOR);
        out->shortfall = in->size + floor - in->available;
    }
    out->passes_now = out->shortfall <= 0;
    out->ask = out->shortfall + (double)COMEM_PIN_PRESSURE_HYSTERESIS;
}

void comem_pin_budget(double size, int64_t ram_cache_headroom, double available, bool high_ram,
                      comem_pin_budget_check *out)
{
    comem_pin_budget_in in = {.size = size, .ram_cache_headroom = ram_cache_headroom, .available = available,
                              .high_ram = high_ram};
    comem_pin_budget_of(&in, out);
}

bool comem_ensure_pin_budget_of(const comem_pin_budget_in *in, bool evict_active, bool loaded,
                                comem_free_model_pins_fn fn, void *user)
{
    comem_pin_budget_check c;
    comem_pin_budget_of(in, &c);
    if (c.passes_now)
        return true;
    return comem_free_pins(in->era, c.ask, loaded, evict_active, fn, user) >= c.shortfall;
}

bool comem_ensure_pin_budget(double size, int64_t ram_cache_headroom, double available, bool high_ram,
                             bool evict_active, bool loaded, comem_free_model_pins_fn fn, void *user)
{
    comem_pin_budget_in in = {.size = size, .ram_cache_headroom = ram_cache_headroom, .available = available,
                              .high_ram = high_ram};
    return comem_ensure_pin_budget_of(&in, evict_active, loaded, fn, user);
}

void comem_pin_registerable(double total_pinned, double size, double max_pinned,
                            comem_pin_registerable_check *out)
{
    out->refused = max_pinned <= 0;
    out->shortfall = total_pinned + size - max_pinned;
    out->passes_now = !out->refused && out->shortfall <= 0;
    out->target = out->shortfall + (double)COMEM_REGISTERABLE_HYSTERESIS;
}

bool comem_free_registrations(comem_pin_era era, double shortfall, double max_pinned, bool evict_active,
                              comem_free_model_pins_fn fn, void *user)
{
    if (max_pinned <= 0)
        return false;
    if (shortfall <= 0)
        return true;
    comem_pin_tier tiers[COMEM_PIN_TIERS_MAX];
    size_t n = comem_registration_eviction_tiers(era, evict_active, tiers);
    double s = shortfall + (double)COMEM_REGISTERABLE_HYSTERESIS;
    for (size_t i = 0; i < n; i++)
        s -= fn(user, s, &tiers[i]);
    return s <= (double)COMEM_REGISTERABLE_HYSTERESIS;
}

bool comem_ensure_pin_registerable(comem_pin_era era, double total_pinned, double size, double max_pinned,
                                   bool evict_active, comem_free_model_pins_fn fn, void *user)
{
    return comem_free_registrations(era, total_pinned + size - max_pinned, max_pinned, evict_active, fn, user);
}

bool comem_should_free_pins_for_ram_pressure(double shortfall, bool windows, double available,
                                             bool swap_known, double swap_percent)
{
    if (shortfall <= 0)
        return false;
    if (!windows)
        return true;
    if (available < (double)COMEM_WINDOWS_PIN_EMERGENCY_AVAILABLE)
        return true;
    if (!swap_known)
        return true; /* cannot read swap: fall back to evicting under RAM pressure */
    return swap_percent >= COMEM_WINDOWS_PIN_SWAP_PERCENT;
}
