/* tests/unit/vectors_adapt.c - conformance-vector adapters over the arith/ functions. */
#include "vectors_adapt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "arith/admission.h"
#include "arith/cgroup.h"
#include "arith/cross_reserve.h"
#include "arith/evict.h"
#include "arith/lowvram.h"
#include "arith/pinned.h"
#include "arith/planners.h"
#include "arith/ram_cache.h"
#include "arith/reserve.h"
#include "base/bytes.h"

static json_object *field(json_object *o, const char *k)
{
    json_object *v = NULL;
    return json_object_object_get_ex(o, k, &v) ? v : NULL;
}
static bool has(json_object *o, const char *k) { return field(o, k) != NULL; }
static double num(json_object *o, const char *k, double d)
{
    json_object *v = field(o, k);
    return v ? json_object_get_double(v) : d;
}
static int64_t inum(json_object *o, const char *k, int64_t d)
{
    json_object *v = field(o, k);
    if (!v)
        return d;
    if (json_object_is_type(v, json_type_int))
        return json_object_get_int64(v);
    return comem_trunc(json_object_get_double(v));
}
static bool flag(json_object *o, const char *k)
{
    json_object *v = field(o, k);
    return v && json_object_get_boolean(v);
}
static const char *str(json_object *o, const char *k)
{
    json_object *v = field(o, k);
    return v ? json_object_get_string(v) : NULL;
}
static void put(json_object *o, const char *k, json_object *v) { json_object_object_add(o, k, v); }
static json_object *dbl(double v) { return json_object_new_double(v); }
static json_object *i64(int64_t v) { return json_object_new_int64(v); }

static comem_vram_state state_of(json_object *in)
{
    static const char *names[] = {"disabled", "no", "low", "normal", "high", "shared"};
    const char *s = str(in, "vram-state");
    for (int i = 0; s && i < 6; i++)
        if (!strcmp(s, names[i]))
            return (comem_vram_state)i;
    return COMEM_VRAM_NORMAL;
}

#define RESERVE_DEFAULT (400.0 * 1024 * 1024)

static json_object *run_reserve(json_object *in)
{
    comem_reserve_opts o = {flag(in, "windows"), num(in, "total-vram", 0) / (1024 * 1024), has(in, "reserve-vram"),
                            num(in, "reserve-vram", 0)};
    json_object *out = json_object_new_object();
    double r = comem_extra_reserved_vram(&o);
    put(out, "reserve", dbl(r));
    put(out, "minimum_inference", dbl(comem_minimum_inference_memory(r)));
    return out;
}

static json_object *run_admission(json_object *in)
{
    comem_admission_targets t;
    comem_admission_targets_compute(num(in, "memory-required", 0), has(in, "minimum-memory-required"),
                                    num(in, "minimum-memory-required", 0), num(in, "reserve", RESERVE_DEFAULT), &t);
    double target = comem_admission_free_target(num(in, "weights", 0), t.extra_mem);
    json_object *out = json_object_new_object();
    put(out, "extra_mem", dbl(t.extra_mem));
    put(out, "free_target", dbl(target));
    put(out, "minimum_memory_required", dbl(t.mmr));
    put(out, "minimum_inference", dbl(t.inference));
    if (has(in, "free")) {
        put(out, "to_free", dbl(target - num(in, "free", 0)));
        put(out, "second_pass", json_object_new_boolean(comem_admission_needs_second_pass(num(in, "free", 0), t.mmr)));
    }
    return out;
}

static json_object *run_lowvram(json_object *in)
{
    comem_lowvram_in l = {
        .vram_state = state_of(in),
        .load_device_is_cpu = flag(in, "cpu"),
        .lowvram_available = !flag(in, "no-lowvram"),
        .force_full_load = flag(in, "force-full-load"),
        .free = num(in, "free", 0),
        .loaded = num(in, "loaded", 0),
        .mmr = num(in, "mmr", 0),
        .inference = comem_minimum_inference_memory(num(in, "reserve", RESERVE_DEFAULT)),
        .ratio = num(in, "ratio", 0),
    };
    comem_budget b = comem_lowvram_budget(&l);
    static const char *kinds[] = {"full", "nothing", "bytes"};
    json_object *out = json_object_new_object();
    put(out, "kind", json_object_new_string(kinds[b.kind]));
    put(out, "budget", dbl(b.value));
    return out;
}

typedef struct card {
    double free, freed;
    const comem_evict_entry *e;
} card;
static double c_free(void *u) { return ((card *)u)->free + ((card *)u)->freed; }
static double c_partial(void *u, size_t i, double to_free)
{
    (void)i;
    ((card *)u)->freed += ceil(to_free);
    return ceil(to_free);
}
static void c_detach(void *u, size_t i) { ((card *)u)->freed += (double)((card *)u)->e[i].loaded; }

static json_object *run_evict(json_object *in)
{
    json_object *list = field(in, "entry");
    size_t n = list ? json_object_array_length(list) : 0;
    comem_evict_entry *e = calloc(n + 1, sizeof *e);
    size_t *order = calloc(n + 1, sizeof *order);
    comem_evict_action *acts = calloc(n + 1, sizeof *acts);
    for (size_t i = 0; i < n; i++) {
        json_object *x = json_object_array_get_idx(list, i);
        e[i] = (comem_evict_entry){.size = inum(x, "size", 0), .loaded = inum(x, "loaded", 0), .refs = inum(x, "refs", 0),
                                   .dynamic = flag(x, "dynamic"), .keep = flag(x, "keep"), .dead = flag(x, "dead")};
    }
    card c = {.free = num(in, "free", 0), .e = e};
    comem_evict_request req = {.required = num(in, "required", 0), .device_none = flag(in, "any-device"),
                               .for_dynamic = flag(in, "for-dynamic"), .smart_memory = !flag(in, "no-smart-memory")};
    comem_evict_ops ops = {c_free, c_partial, c_detach, &c};
    comem_evict_result r;
    json_object *out = NULL;
    if (comem_evict_run(&req, e, n, &ops, order, acts, &r) == 0) {
        out = json_object_new_object();
        json_object *jo = json_object_new_array(), *ja = json_object_new_array(), *ju = json_object_new_array();
        for (size_t k = 0; k < r.n_order; k++)
            json_object_array_add(jo, i64((int64_t)order[k]));
        for (size_t k = 0; k < r.n_actions; k++) {
            json_object *a = json_object_new_object();
            put(a, "entry", i64((int64_t)acts[k].entry));
            put(a, "action", json_object_new_string(acts[k].kind == COMEM_EVICT_PARTIAL ? "partial" : "detach"));
            put(a, "asked", dbl(acts[k].asked));
            json_object_array_add(ja, a);
        }
        for (size_t k = n; k-- > 0;)
            for (size_t j = 0; j < r.n_actions; j++)
                if (acts[j].entry == k && acts[j].kind == COMEM_EVICT_DETACH)
                    json_object_array_add(ju, i64((int64_t)k));
        put(out, "order", jo);
        put(out, "actions", ja);
        put(out, "unloaded", ju);
        put(out, "freed", dbl(c.freed));
        put(out, "free_after", dbl(c.free + c.freed));
        put(out, "required_after", dbl(r.required_after));
    }
    free(e);
    free(order);
    free(acts);
    return out;
}

static json_object *run_pinned_max(json_object *in)
{
    comem_pin_ceiling_in p = {.ram = num(in, "ram", 0), .disk_swap = inum(in, "swap", 0), .windows = flag(in, "windows"),
                              .cgroup_limited = flag(in, "cgroup"), .enabled = !flag(in, "disabled")};
    double m = comem_max_pinned(&p);
    json_object *out = json_object_new_object();
    put(out, "max_pinned", dbl(m));
    if (has(in, "size"))
        put(out, "host_buffer", i64(comem_pinned_hostbuf_size(num(in, "size", 0), m, flag(in, "high-ram"))));
    return out;
}

static json_object *run_pin_budget(json_object *in)
{
    comem_pin_budget_check c;
    comem_pin_budget(num(in, "size", 0), inum(in, "headroom", 0), num(in, "available", 0), flag(in, "high-ram"), &c);
    json_object *out = json_object_new_object();
    put(out, "shortfall", dbl(c.shortfall));
    put(out, "ask", dbl(c.ask));
    put(out, "passes_without_eviction", json_object_new_boolean(c.passes_now));
    return out;
}

static json_object *run_pin_registerable(json_object *in)
{
    comem_pin_registerable_check c;
    comem_pin_registerable(num(in, "total-pinned", 0), num(in, "size", 0), num(in, "max-pinned", 0), &c);
    json_object *out = json_object_new_object();
    put(out, "shortfall", dbl(c.shortfall));
    put(out, "target", dbl(c.target));
    put(out, "passes_without_eviction", json_object_new_boolean(c.passes_now));
    put(out, "refused", json_object_new_boolean(c.refused));
    return out;
}

static json_object *run_cache_headroom(json_object *in)
{
    comem_cache_headroom h;
    comem_ram_cache_headroom(num(in, "total-ram-mib", 0), &h);
    json_object *out = json_object_new_object();
    put(out, "active", i64(h.active));
    put(out, "inactive", i64(h.inactive));
    put(out, "active_gb", dbl(h.active_gb));
    put(out, "inactive_gb", dbl(h.inactive_gb));
    return out;
}

static json_object *one(const char *k, json_object *v)
{
    json_object *out = json_object_new_object();
    put(out, k, v);
    return out;
}

static json_object *run_total_reserve(json_object *in)
{
    json_object *list = field(in, "charge");
    size_t n = list ? json_object_array_length(list) : 0;
    int64_t charges[16] = {0};
    for (size_t i = 0; i < n && i < 16; i++)
        charges[i] = comem_trunc(json_object_get_double(json_object_array_get_idx(list, i)));
    return one("total", i64(comem_total_reserve(inum(in, "base", 0), charges, n, inum(in, "device-total", 0))));
}

static json_object *run_held(json_object *in)
{
    json_object *ws = field(in, "workers");
    size_t n = json_object_array_length(ws);
    comem_held_worker w[16];
    comem_held_model m[16][8];
    for (size_t i = 0; i < n && i < 16; i++) {
        json_object *x = json_object_array_get_idx(ws, i);
        json_object *ms = field(x, "models");
        size_t k = ms ? json_object_array_length(ms) : 0;
        for (size_t j = 0; j < k && j < 8; j++) {
            json_object *y = json_object_array_get_idx(ms, j);
            m[i][j] = (comem_held_model){inum(y, "ledger", 0), inum(y, "peak", 0), inum(y, "size", 0)};
        }
        w[i] = (comem_held_worker){flag(x, "in_flight"), has(x, "excess") && !json_object_is_type(field(x, "excess"), json_type_null),
                                   inum(x, "excess", 0), m[i], k};
    }
    return one("held", i64(comem_held_from_snapshot(w, n, inum(in, "floor", 0), has(in, "cap"), inum(in, "cap", 0))));
}

static bool flag_default(json_object *o, const char *k, bool d)
{
    json_object *v = field(o, k);
    return v ? json_object_get_boolean(v) : d;
}

static json_object *asks_json(const comem_release_ask *a, size_t k, const char **keys)
{
    json_object *arr = json_object_new_array();
    for (size_t i = 0; i < k; i++) {
        json_object *pair = json_object_new_array();
        json_object_array_add(pair, json_object_new_string(keys[a[i].holder]));
        json_object_array_add(pair, i64(a[i].bytes));
        json_object_array_add(arr, pair);
    }
    return one("asks", arr);
}

static json_object *run_plan_pressure(json_object *in)
{
    json_object *hs = field(in, "holders");
    size_t n = json_object_array_length(hs), req = SIZE_MAX;
    comem_release_holder h[16];
    const char *keys[16];
    for (size_t i = 0; i < n && i < 16; i++) {
        json_object *x = json_object_array_get_idx(hs, i);
        keys[i] = str(x, "key");
        h[i] = (comem_release_holder){keys[i], flag_default(x, "alive", true), flag_default(x, "advertises", true),
                                      flag(x, "in_flight"), inum(x, "held", 0)};
        if (str(in, "requester") && !strcmp(str(in, "requester"), keys[i]))
            req = i;
    }
    comem_release_ask asks[16];
    size_t k = comem_plan_pressure_release(h, n, inum(in, "shortfall", 0), req, asks);
    return asks_json(asks, k, keys);
}

static json_object *run_plan_idle(json_object *in)
{
    json_object *hs = field(in, "holders");
    size_t n = json_object_array_length(hs);
    comem_idle_holder h[16];
    for (size_t i = 0; i < n && i < 16; i++) {
        json_object *x = json_object_array_get_idx(hs, i);
        h[i] = (comem_idle_holder){str(x, "key"), flag_default(x, "alive", true), flag_default(x, "advertises", true),
                                   flag(x, "in_flight"), flag_default(x, "holding", true), has(x, "idle_since"),
                                   num(x, "idle_since", 0), str(x, "last_prompt")};
    }
    size_t sel[16];
    size_t k = comem_plan_idle_release(h, n, num(in, "now", 0), num(in, "min_idle", COMEM_IDLE_RELEASE_SECONDS),
                                       str(in, "current_prompt"), flag(in, "card_tight"), sel);
    json_object *arr = json_object_new_array();
    for (size_t i = 0; i < k; i++)
        json_object_array_add(arr, json_object_new_string(h[sel[i]].key));
    return one("selected", arr);
}

static json_object *run_plan_pin(json_object *in)
{
    json_object *rs = field(in, "reports");
    size_t n = json_object_array_length(rs);
    comem_pin_report r[16];
    const char *keys[16];
    for (size_t i = 0; i < n && i < 16; i++) {
        json_object *x = json_object_array_get_idx(rs, i);
        keys[i] = str(x, "key");
        r[i] = (comem_pin_report){keys[i], inum(x, "pinned", 0)};
    }
    comem_release_ask asks[16];
    size_t k = comem_plan_pin_pressure(r, n, inum(in, "target", 0), num(in, "now", 0), num(in, "last_sweep", 0),
                                       COMEM_PIN_PRESSURE_MIN_SLICE, COMEM_PIN_PRESSURE_INTERVAL, asks);
    return asks_json(asks, k, keys);
}

static json_object *run_empty_cache(json_object *in)
{
    return one("empty_cache", json_object_new_boolean(comem_should_empty_cache(
                                  flag(in, "unloaded"), flag(in, "any-device"), state_of(in), num(in, "free-total", 0),
                                  num(in, "free-torch", 0))));
}

static json_object *run_cgroup(json_object *in)
{
    comem_cgroup_in c = {inum(in, "host-total", 0), inum(in, "host-available", 0), has(in, "limit"), inum(in, "limit", 0),
                         has(in, "usage"), inum(in, "usage", 0)};
    comem_cgroup_out o;
    comem_cgroup_clamp(&c, &o);
    json_object *out = json_object_new_object();
    put(out, "limited", json_object_new_boolean(o.limited));
    put(out, "total", i64(o.total));
    put(out, "available", i64(o.available));
    return out;
}

json_object *vector_run(const char *rule, json_object *in)
{
    if (!strcmp(rule, "reserve"))
        return run_reserve(in);
    if (!strcmp(rule, "admission"))
        return run_admission(in);
    if (!strcmp(rule, "lowvram"))
        return run_lowvram(in);
    if (!strcmp(rule, "evict"))
        return run_evict(in);
    if (!strcmp(rule, "pinned-max"))
        return run_pinned_max(in);
    if (!strcmp(rule, "pin-budget"))
        return run_pin_budget(in);
    if (!strcmp(rule, "pin-registerable"))
        return run_pin_registerable(in);
    if (!strcmp(rule, "cache-headroom"))
        return run_cache_headroom(in);
    if (!strcmp(rule, "charge"))
        return one("charge", i64(comem_charge(inum(in, "residency", 0), flag(in, "process-local"),
                                              inum(in, "floor", COMEM_CONTEXT_FLOOR))));
    if (!strcmp(rule, "total-reserve"))
        return run_total_reserve(in);
    if (!strcmp(rule, "next-reserve"))
        return one("reserve", i64(comem_next_reserve(inum(in, "current", 0), inum(in, "proposed", 0),
                                                     flag(in, "shrink-allowed"))));
    if (!strcmp(rule, "ask-target"))
        return one("need", i64(comem_ask_target(inum(in, "weights", 0), num(in, "slack", COMEM_WEIGHT_SLACK),
                                                inum(in, "min-inference", 0), inum(in, "extra-reserved", 0),
                                                inum(in, "want-inference", 0))));
    if (!strcmp(rule, "pager-headroom"))
        return one("headroom", i64(comem_pager_headroom_forward(has(in, "seed"), inum(in, "seed", 0),
                                                                inum(in, "published", 0), inum(in, "base", 0))));
    if (!strcmp(rule, "requester-reserve"))
        return one("reserve", i64(comem_reserve_for_requester(inum(in, "published", 0), inum(in, "own-charge", 0))));
    if (!strcmp(rule, "cast-forward"))
        return one("want_inference", i64(comem_forward_cast_need(inum(in, "largest-tensor", 0), inum(in, "streams", 0))));
    if (!strcmp(rule, "held-from-snapshot"))
        return run_held(in);
    if (!strcmp(rule, "plan-pressure-release"))
        return run_plan_pressure(in);
    if (!strcmp(rule, "plan-idle-release"))
        return run_plan_idle(in);
    if (!strcmp(rule, "plan-pin-pressure"))
        return run_plan_pin(in);
    if (!strcmp(rule, "empty-cache"))
        return run_empty_cache(in);
    if (!strcmp(rule, "cgroup-clamp"))
        return run_cgroup(in);
    return NULL;
}
