/*
 * tools/comem/calc.c - `comem calc RULE [--flag VALUE]...`: one rule, one JSON object.
 *
 * Each rule maps its flags onto one arith/ function and prints that function's
 * result. Sizes are bytes (fractions allowed) or binary units; numbers print so
 * that they read back as the same double. Bad input: one line on stderr, exit 2.
 * --explain prints the rule in words instead (calc_explain.c).
 */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arith/admission.h"
#include "arith/cgroup.h"
#include "arith/cross_reserve.h"
#include "arith/comfy_a125cd84.h"
#include "arith/evict.h"
#include "arith/lowvram.h"
#include "arith/pinned.h"
#include "arith/ram_cache.h"
#include "arith/reserve.h"
#include "base/bytes.h"
#include "base/size.h"
#include "calc_explain.h"
#include "cmds.h"
#include "common/args.h"
#include "common/jsonout.h"

typedef struct rule_ctx {
    const arg_spec *specs;
    size_t n;
    arg_value *vals;
    char *err;
    size_t errlen;
} rule_ctx;

static arg_value *val(const rule_ctx *c, const char *name) { return args_get(c->specs, c->n, c->vals, name); }
static bool has(const rule_ctx *c, const char *name) { return val(c, name)->set; }
static double num(const rule_ctx *c, const char *name, double dflt)
{
    arg_value *v = val(c, name);
    return v->set ? v->num : dflt;
}
static int64_t inum(const rule_ctx *c, const char *name, int64_t dflt)
{
    arg_value *v = val(c, name);
    return v->set ? comem_trunc(v->num) : dflt;
}

/* ---- ComfyUI rules ---- */

static const arg_spec reserve_specs[] = {
    {"windows", ARG_FLAG, false},
    {"total-vram", ARG_SIZE, false},
    {"reserve-vram", ARG_NUMBER, false},
};
static int rule_reserve(const rule_ctx *c, json_object *out)
{
    comem_reserve_opts o = {
        .windows = has(c, "windows"),
        .total_vram_mib = num(c, "total-vram", 0) / (1024 * 1024),
        .reserve_vram_set = has(c, "reserve-vram"),
        .reserve_vram_gb = num(c, "reserve-vram", 0),
    };
    double reserve = comem_extra_reserved_vram(&o);
    json_object_object_add(out, "reserve", jnum(reserve));
    json_object_object_add(out, "minimum_inference", jnum(comem_minimum_inference_memory(reserve)));
    return 0;
}

#define DEFAULT_RESERVE ((double)COMEM_RESERVE_DEFAULT) /* what --reserve is when not given */

static const arg_spec admission_specs[] = {
    {"weights", ARG_SIZE, true},
    {"memory-required", ARG_SIZE, false},
    {"minimum-memory-required", ARG_SIZE, false},
    {"reserve", ARG_SIZE, false},
    {"free", ARG_SIZE, false},
};
static int rule_admission(const rule_ctx *c, json_object *out)
{
    comem_admission_targets t;
    comem_admission_targets_compute(num(c, "memory-required", 0), has(c, "minimum-memory-required"),
                                    num(c, "minimum-memory-required", 0), num(c, "reserve", DEFAULT_RESERVE), &t);
    double target = comem_admission_free_target(num(c, "weights", 0), t.extra_mem);
    json_object_object_add(out, "extra_mem", jnum(t.extra_mem));
    json_object_object_add(out, "free_target", jnum(target));
    json_object_object_add(out, "minimum_memory_required", jnum(t.mmr));
    json_object_object_add(out, "minimum_inference", jnum(t.inference));
    if (has(c, "free")) {
        /* What the first eviction candidate would be asked to free. */
        json_object_object_add(out, "to_free", jnum(target - num(c, "free", 0)));
        json_object_object_add(out, "second_pass",
                               json_object_new_boolean(comem_admission_needs_second_pass(num(c, "free", 0), t.mmr)));
    } else { /* without --free: not known, but always there (docs/json.md) */
        json_object_object_add(out, "to_free", NULL);
        json_object_object_add(out, "second_pass", NULL);
    }
    return 0;
}

static const struct {
    const char *name;
    comem_vram_state state;
} k_states[] = {
    {"disabled", COMEM_VRAM_DISABLED}, {"no", COMEM_VRAM_NO},     {"low", COMEM_VRAM_LOW},
    {"normal", COMEM_VRAM_NORMAL},     {"high", COMEM_VRAM_HIGH}, {"shared", COMEM_VRAM_SHARED},
};

static int parse_state(const rule_ctx *c, comem_vram_state *st)
{
    arg_value *v = val(c, "vram-state");
    *st = COMEM_VRAM_NORMAL;
    if (!v->set)
        return 0;
    for (size_t i = 0; i < sizeof k_states / sizeof k_states[0]; i++) {
        if (strcmp(v->str, k_states[i].name) == 0) {
            *st = k_states[i].state;
            return 0;
        }
    }
    snprintf(c->err, c->errlen, "--vram-state: '%s' is not one of normal, low, no, high, disabled, shared", v->str);
    return -1;
}

/*
 * --comfyui current|783545f6|v0.39|a125cd84: which ComfyUI's rule, where they differ
 * (docs/conformance.md). current is 783545f6's today; a125cd84's differ in the load rules,
 * v0.39's in the pinned-RAM ones.
 */
static int era_of(const char *name, comem_comfyui_rules *era)
{
    static const struct { const char *name; comem_comfyui_rules era; } k_eras[] = {
        {"current", COMEM_COMFYUI_783545F6}, {"783545f6", COMEM_COMFYUI_783545F6}, {"v0.39", COMEM_COMFYUI_V039},
        {"a125cd84", COMEM_COMFYUI_A125CD84},
    };
    for (size_t i = 0; i < sizeof k_eras / sizeof k_eras[0]; i++)
        if (!strcmp(name, k_eras[i].name)) {
            *era = k_eras[i].era;
            return 0;
        }
    return -1;
}

static int parse_comfyui(const rule_ctx *c, comem_comfyui_rules *era)
{
    arg_value *v = val(c, "comfyui");
    *era = COMEM_COMFYUI_783545F6;
    if (v->set && era_of(v->str, era) != 0) {
        snprintf(c->err, c->errlen, "--comfyui: '%s' is not one of current, 783545f6, v0.39, a125cd84", v->str);
        return -1;
    }
    return 0;
}

/* The pin rules' era: a125cd84 has no pinned budget, so its name is refused there. */
static int parse_pin_era(const rule_ctx *c, comem_pin_era *pin)
{
    comem_comfyui_rules era;
    if (parse_comfyui(c, &era) != 0)
        return -1;
    if (era == COMEM_COMFYUI_A125CD84) {
        snprintf(c->err, c->errlen, "--comfyui: ComfyUI a125cd84 has no pinned-RAM budget");
        return -1;
    }
    *pin = era == COMEM_COMFYUI_V039 ? COMEM_PIN_ERA_V039 : COMEM_PIN_ERA_783545F6;
    return 0;
}

static const arg_spec lowvram_specs[] = {
    {"free", ARG_SIZE, true},       {"loaded", ARG_SIZE, false},     {"mmr", ARG_SIZE, true},
    {"reserve", ARG_SIZE, false},   {"ratio", ARG_NUMBER, false},    {"vram-state", ARG_STRING, false},
    {"force-full-load", ARG_FLAG, false}, {"cpu", ARG_FLAG, false},  {"no-lowvram", ARG_FLAG, false},
    {"comfyui", ARG_STRING, false},
};
static int rule_lowvram(const rule_ctx *c, json_object *out)
{
    comem_lowvram_in in = {
        .load_device_is_cpu = has(c, "cpu"),
        .lowvram_available = !has(c, "no-lowvram"),
        .force_full_load = has(c, "force-full-load"),
        .free = num(c, "free", 0),
        .loaded = num(c, "loaded", 0),
        .mmr = num(c, "mmr", 0),
        .inference = comem_minimum_inference_memory(num(c, "reserve", DEFAULT_RESERVE)),
        .ratio = num(c, "ratio", COMEM_WEIGHT_RATIO_NVIDIA),
    };
    comem_comfyui_rules era;
    if (parse_state(c, &in.vram_state) != 0 || parse_comfyui(c, &era) != 0)
        return -1;
    comem_budget b = era == COMEM_COMFYUI_A125CD84 ? comem_lowvram_budget_a125cd84(&in) : comem_lowvram_budget(&in);
    static const char *kinds[] = {"full", "nothing", "bytes"};
    json_object_object_add(out, "kind", json_object_new_string(kinds[b.kind]));
    json_object_object_add(out, "budget", jnum(b.value));
    return 0;
}

/* --entry size=S,loaded=S,refs=N[,dynamic][,keep][,dead] */
static int parse_entry(const char *text, comem_evict_entry *e, char *err, size_t errlen)
{
    char buf[512];
    if (strlen(text) >= sizeof buf) {
        snprintf(err, errlen, "--entry: too long");
        return -1;
    }
    strcpy(buf, text);
    *e = (comem_evict_entry){.refs = 0};
    bool have_size = false;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            if (!strcmp(tok, "dynamic"))
                e->dynamic = true;
            else if (!strcmp(tok, "keep"))
                e->keep = true;
            else if (!strcmp(tok, "dead"))
                e->dead = true;
            else {
                snprintf(err, errlen, "--entry: unknown field '%s' (size=, loaded=, refs=, dynamic, keep, dead)", tok);
                return -1;
            }
            continue;
        }
        *eq = '\0';
        const char *k = tok, *v = eq + 1;
        double d;
        char why[160];
        if (!strcmp(k, "size") || !strcmp(k, "loaded")) {
            if (comem_parse_size(v, &d, why, sizeof why) != 0) {
                snprintf(err, errlen, "--entry %s: %s", k, why);
                return -1;
            }
            if (d != trunc(d)) {
                snprintf(err, errlen, "--entry %s: a model's bytes are whole: '%s'", k, v);
                return -1;
            }
            if (!strcmp(k, "size")) {
                e->size = comem_trunc(d);
                have_size = true;
            } else {
                e->loaded = comem_trunc(d);
            }
        } else if (!strcmp(k, "refs")) {
            if (comem_parse_number(v, &d, why, sizeof why) != 0 || d != trunc(d)) {
                snprintf(err, errlen, "--entry refs: not a whole number: '%s'", v);
                return -1;
            }
            e->refs = comem_trunc(d);
        } else {
            snprintf(err, errlen, "--entry: unknown field '%s'", k);
            return -1;
        }
    }
    if (!have_size) {
        snprintf(err, errlen, "--entry: size= is required");
        return -1;
    }
    if (e->loaded > e->size) {
        snprintf(err, errlen, "--entry: loaded (%lld) exceeds size (%lld)", (long long)e->loaded, (long long)e->size);
        return -1;
    }
    return 0;
}

/* calc's model of a card: free is the given free plus what was freed so far. */
typedef struct evict_sim {
    double free;
    double freed;
    const comem_evict_entry *entries;
} evict_sim;

static double sim_free(void *u)
{
    evict_sim *s = u;
    return s->free + s->freed;
}
static double sim_partial(void *u, size_t i, double to_free)
{
    evict_sim *s = u;
    (void)i;
    double got = ceil(to_free); /* a partial unload frees exactly ceil(asked) */
    s->freed += got;
    return got;
}
static void sim_detach(void *u, size_t i)
{
    evict_sim *s = u;
    s->freed += (double)s->entries[i].loaded;
}

static const arg_spec evict_specs[] = {
    {"required", ARG_SIZE, true},        {"free", ARG_SIZE, true},
    {"for-dynamic", ARG_FLAG, false},    {"no-smart-memory", ARG_FLAG, false},
    {"any-device", ARG_FLAG, false},     {"entry", ARG_STRING_LIST, false},
    {"comfyui", ARG_STRING, false},
};
static int rule_evict(const rule_ctx *c, json_object *out)
{
    arg_value *ev = val(c, "entry");
    size_t n = ev->count;
    comem_evict_entry *entries = calloc(n ? n : 1, sizeof *entries);
    size_t *order = calloc(n ? n : 1, sizeof *order);
    comem_evict_action *actions = calloc(n ? n : 1, sizeof *actions);
    int rc = -1;
    comem_comfyui_rules era;
    if (!entries || !order || !actions) {
        snprintf(c->err, c->errlen, "out of memory");
        goto done;
    }
    if (parse_comfyui(c, &era) != 0)
        goto done;
    bool a125cd84 = era == COMEM_COMFYUI_A125CD84;
    for (size_t i = 0; i < n; i++)
        if (parse_entry(ev->strs[i], &entries[i], c->err, c->errlen) != 0)
            goto done;

    evict_sim sim = {.free = num(c, "free", 0), .entries = entries};
    comem_evict_request req = {
        .required = num(c, "required", 0),
        .device_none = has(c, "any-device"),
        .device = 0,
        .for_dynamic = has(c, "for-dynamic"),
        .smart_memory = !has(c, "no-smart-memory"),
    };
    comem_evict_ops ops = {.free_now = sim_free, .partial = sim_partial, .detach = sim_detach, .user = &sim};
    comem_evict_result res;
    if ((a125cd84 ? comem_evict_run_a125cd84 : comem_evict_run)(&req, entries, n, &ops, order, actions, &res) != 0) {
        snprintf(c->err, c->errlen, a125cd84 && req.for_dynamic ? "evict: ComfyUI a125cd84 has no dynamic loads"
                                                                 : "evict: invalid request");
        goto done;
    }
    json_object *jorder = json_object_new_array();
    for (size_t k = 0; k < res.n_order; k++)
        json_object_array_add(jorder, jint((int64_t)order[k]));
    json_object *jactions = json_object_new_array();
    json_object *junloaded = json_object_new_array();
    for (size_t k = 0; k < res.n_actions; k++) {
        json_object *a = json_object_new_object();
        json_object_object_add(a, "entry", jint((int64_t)actions[k].entry));
        json_object_object_add(a, "action",
                               json_object_new_string(actions[k].kind == COMEM_EVICT_PARTIAL ? "partial" : "detach"));
        json_object_object_add(a, "asked", jnum(actions[k].asked));
        json_object_array_add(jactions, a);
    }
    /* ComfyUI pops detached entries highest index first. */
    for (size_t k = n; k-- > 0;)
        for (size_t j = 0; j < res.n_actions; j++)
            if (actions[j].entry == k && actions[j].kind == COMEM_EVICT_DETACH)
                json_object_array_add(junloaded, jint((int64_t)k));
    json_object_object_add(out, "order", jorder);
    json_object_object_add(out, "actions", jactions);
    json_object_object_add(out, "freed", jnum(sim.freed));
    json_object_object_add(out, "free_after", jnum(sim.free + sim.freed));
    json_object_object_add(out, "unloaded", junloaded);
    json_object_object_add(out, "required_after", jnum(res.required_after));
    rc = 0;
done:
    free(entries);
    free(order);
    free(actions);
    return rc;
}

/* ---- pinned host RAM ---- */

static const arg_spec pinned_max_specs[] = {
    {"ram", ARG_SIZE, true},        {"swap", ARG_SIZE, false},     {"windows", ARG_FLAG, false},
    {"cgroup", ARG_FLAG, false},    {"disabled", ARG_FLAG, false}, {"size", ARG_SIZE, false},
    {"high-ram", ARG_FLAG, false},  {"comfyui", ARG_STRING, false},
};
static int rule_pinned_max(const rule_ctx *c, json_object *out)
{
    comem_pin_era era;
    if (parse_pin_era(c, &era) != 0)
        return -1;
    comem_pin_ceiling_in in = {
        .era = era,
        .ram = num(c, "ram", 0),
        .disk_swap = inum(c, "swap", 0),
        .windows = has(c, "windows"),
        .cgroup_limited = has(c, "cgroup"),
        .enabled = !has(c, "disabled"),
    };
    double max = comem_max_pinned(&in);
    json_object_object_add(out, "max_pinned", jnum(max));
    json_object_object_add(out, "host_buffer",
                           has(c, "size") ? jint(comem_pinned_hostbuf_size(num(c, "size", 0), max, has(c, "high-ram")))
                                          : NULL);
    return 0;
}

static const arg_spec pin_budget_specs[] = {
    {"size", ARG_SIZE, true},          {"available", ARG_SIZE, true},  {"headroom", ARG_SIZE, true},
    {"high-ram", ARG_FLAG, false},     {"fast-disk", ARG_FLAG, false}, {"total-pinned", ARG_SIZE, false},
    {"max-pinned", ARG_SIZE, false},   {"comfyui", ARG_STRING, false},
};
static int rule_pin_budget(const rule_ctx *c, json_object *out)
{
    comem_pin_era era;
    if (parse_pin_era(c, &era) != 0)
        return -1;
    /* --fast-disk compares with the page-lock ceiling (783545f6; v0.39 has no such branch): else RAM decides. */
    bool fast = has(c, "fast-disk") && era == COMEM_PIN_ERA_783545F6;
    const char *need = !fast ? NULL : !has(c, "total-pinned") ? "total-pinned" : !has(c, "max-pinned") ? "max-pinned"
                                                                                                     : NULL;
    if (need) {
        snprintf(c->err, c->errlen, "--%s is required with --fast-disk", need);
        return -1;
    }
    comem_pin_budget_in in = {.era = era,
                              .size = num(c, "size", 0),
                              .ram_cache_headroom = inum(c, "headroom", 0),
                              .available = num(c, "available", 0),
                              .high_ram = has(c, "high-ram"),
                              .fast_disk = fast,
                              .total_pinned = num(c, "total-pinned", 0),
                              .max_pinned = num(c, "max-pinned", 0)};
    comem_pin_budget_check r;
    comem_pin_budget_of(&in, &r);
    json_object_object_add(out, "shortfall", jnum(r.shortfall));
    json_object_object_add(out, "ask", jnum(r.ask));
    json_object_object_add(out, "passes_without_eviction", json_object_new_boolean(r.passes_now));
    return 0;
}

static const arg_spec pin_registerable_specs[] = {
    {"total-pinned", ARG_SIZE, true},
    {"size", ARG_SIZE, true},
    {"max-pinned", ARG_SIZE, true},
};
static int rule_pin_registerable(const rule_ctx *c, json_object *out)
{
    comem_pin_registerable_check r;
    comem_pin_registerable(num(c, "total-pinned", 0), num(c, "size", 0), num(c, "max-pinned", 0), &r);
    json_object_object_add(out, "shortfall", jnum(r.shortfall));
    json_object_object_add(out, "target", jnum(r.target));
    json_object_object_add(out, "passes_without_eviction", json_object_new_boolean(r.passes_now));
    json_object_object_add(out, "refused", json_object_new_boolean(r.refused));
    return 0;
}

static const arg_spec cache_headroom_specs[] = {
    {"total-ram-mib", ARG_NUMBER, true},
};
static int rule_cache_headroom(const rule_ctx *c, json_object *out)
{
    comem_cache_headroom h;
    comem_ram_cache_headroom(num(c, "total-ram-mib", 0), &h);
    json_object_object_add(out, "active", jint(h.active));
    json_object_object_add(out, "inactive", jint(h.inactive));
    json_object_object_add(out, "active_gb", jnum(h.active_gb));
    json_object_object_add(out, "inactive_gb", jnum(h.inactive_gb));
    return 0;
}

static const arg_spec ram_admission_specs[] = {
    {"weights", ARG_SIZE, true},
    {"working", ARG_SIZE, false},
    {"total-ram", ARG_SIZE, true},
    {"budget", ARG_SIZE, false},
};
static int rule_ram_admission(const rule_ctx *c, json_object *out)
{
    int64_t reserve = comem_ram_reserve(has(c, "budget") ? inum(c, "budget", 0) : -1, inum(c, "total-ram", 0));
    json_object_object_add(out, "reserve", jint(reserve));
    int64_t need = comem_ram_admit_target(inum(c, "weights", 0), inum(c, "working", 0), reserve);
    json_object_object_add(out, "need", jint(need));
    return 0;
}

static const arg_spec cgroup_clamp_specs[] = {
    {"host-total", ARG_SIZE, true}, {"host-available", ARG_SIZE, true}, {"limit", ARG_SIZE, false},
    {"usage", ARG_SIZE, false},
};
static int rule_cgroup_clamp(const rule_ctx *c, json_object *out)
{
    comem_cgroup_in in = {.host_total = inum(c, "host-total", 0), .host_available = inum(c, "host-available", 0),
                          .limit_found = has(c, "limit"), .limit = inum(c, "limit", 0), .usage_known = has(c, "usage"),
                          .usage = inum(c, "usage", 0)};
    comem_cgroup_out o;
    comem_cgroup_clamp(&in, &o);
    json_object_object_add(out, "limited", json_object_new_boolean(o.limited));
    json_object_object_add(out, "total", jint(o.total));
    json_object_object_add(out, "available", jint(o.available));
    return 0;
}

static const arg_spec pin_tiers_specs[] = {
    {"registrations", ARG_FLAG, false},
    {"loaded", ARG_FLAG, false},
    {"evict-active", ARG_FLAG, false},
    {"comfyui", ARG_STRING, false},
};
static json_object *tristate(comem_tristate t)
{
    return t == COMEM_ANY ? NULL : json_object_new_boolean(t == COMEM_YES); /* null: any */
}
static int rule_pin_tiers(const rule_ctx *c, json_object *out)
{
    comem_pin_era era;
    if (parse_pin_era(c, &era) != 0)
        return -1;
    comem_pin_tier tiers[COMEM_PIN_TIERS_MAX];
    size_t n = has(c, "registrations") ? comem_registration_eviction_tiers(era, has(c, "evict-active"), tiers)
                                       : comem_pin_eviction_tiers(era, has(c, "loaded"), has(c, "evict-active"), tiers);
    static const struct { unsigned bit; const char *name; } subsets[] = {
        {COMEM_PIN_WEIGHTS, "weights"}, {COMEM_PIN_PATCHES, "patches"},
        {COMEM_PIN_WEIGHTS_LOADED, "weights-loaded"}, {COMEM_PIN_PATCHES_LOADED, "patches-loaded"},
        {COMEM_PIN_WEIGHTS_FAST, "weights-fast"}, {COMEM_PIN_PATCHES_FAST, "patches-fast"},
    };
    json_object *arr = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        json_object *t = json_object_new_object(), *ss = json_object_new_array();
        for (size_t k = 0; k < sizeof subsets / sizeof subsets[0]; k++)
            if (tiers[i].subsets & subsets[k].bit)
                json_object_array_add(ss, json_object_new_string(subsets[k].name));
        json_object_object_add(t, "subsets", ss);
        json_object_object_add(t, "current_prompt", tristate(tiers[i].current_prompt));
        json_object_object_add(t, "active", tristate(tiers[i].active));
        json_object_object_add(t, "unregister", json_object_new_boolean(tiers[i].unregister));
        json_object_array_add(arr, t);
    }
    json_object_object_add(out, "tiers", arr);
    return 0;
}

/* ---- comfy-env's cross-process reserve ---- */

static const arg_spec charge_specs[] = {
    {"residency", ARG_SIZE, true},
    {"process-local", ARG_FLAG, false},
    {"floor", ARG_SIZE, false},
};
static int rule_charge(const rule_ctx *c, json_object *out)
{
    int64_t ch = comem_charge(inum(c, "residency", 0), has(c, "process-local"), inum(c, "floor", COMEM_CONTEXT_FLOOR));
    json_object_object_add(out, "charge", jint(ch));
    return 0;
}

static const arg_spec total_reserve_specs[] = {
    {"base", ARG_SIZE, true},
    {"charge", ARG_SIZE_LIST, false},
    {"device-total", ARG_SIZE, false},
};
static int rule_total_reserve(const rule_ctx *c, json_object *out)
{
    arg_value *cv = val(c, "charge");
    int64_t *charges = calloc(cv->count ? cv->count : 1, sizeof *charges);
    if (!charges) {
        snprintf(c->err, c->errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < cv->count; i++)
        charges[i] = comem_trunc(cv->nums[i]);
    int64_t total = comem_total_reserve(inum(c, "base", 0), charges, cv->count, inum(c, "device-total", 0));
    free(charges);
    json_object_object_add(out, "total", jint(total));
    return 0;
}

static const arg_spec next_reserve_specs[] = {
    {"current", ARG_SIZE, true},
    {"proposed", ARG_SIZE, true},
    {"shrink-allowed", ARG_FLAG, false},
};
static int rule_next_reserve(const rule_ctx *c, json_object *out)
{
    json_object_object_add(out, "reserve",
                           jint(comem_next_reserve(inum(c, "current", 0), inum(c, "proposed", 0), has(c, "shrink-allowed"))));
    return 0;
}

static const arg_spec ask_target_specs[] = {
    {"weights", ARG_SIZE, true},        {"min-inference", ARG_SIZE, true},  {"extra-reserved", ARG_SIZE, true},
    {"want-inference", ARG_SIZE, false}, {"slack", ARG_NUMBER, false},
};
static int rule_ask_target(const rule_ctx *c, json_object *out)
{
    int64_t need = comem_ask_target(inum(c, "weights", 0), num(c, "slack", COMEM_WEIGHT_SLACK), inum(c, "min-inference", 0),
                                    inum(c, "extra-reserved", 0), inum(c, "want-inference", 0));
    json_object_object_add(out, "need", jint(need));
    return 0;
}

static const arg_spec pager_headroom_specs[] = {
    {"published", ARG_SIZE, true},
    {"base", ARG_SIZE, true},
    {"seed", ARG_SIZE, false},
};
static int rule_pager_headroom(const rule_ctx *c, json_object *out)
{
    json_object_object_add(out, "headroom",
                           jint(comem_pager_headroom_forward(has(c, "seed"), inum(c, "seed", 0), inum(c, "published", 0),
                                                             inum(c, "base", 0))));
    return 0;
}

static const arg_spec requester_reserve_specs[] = {
    {"published", ARG_SIZE, true},
    {"own-charge", ARG_SIZE, true},
};
static int rule_requester_reserve(const rule_ctx *c, json_object *out)
{
    json_object_object_add(out, "reserve",
                           jint(comem_reserve_for_requester(inum(c, "published", 0), inum(c, "own-charge", 0))));
    return 0;
}

static const arg_spec cast_forward_specs[] = {
    {"largest-tensor", ARG_SIZE, true},
    {"streams", ARG_NUMBER, true},
};
static int rule_cast_forward(const rule_ctx *c, json_object *out)
{
    json_object_object_add(out, "want_inference",
                           jint(comem_forward_cast_need(inum(c, "largest-tensor", 0), inum(c, "streams", 0))));
    return 0;
}

typedef struct rule {
    const char *name;
    const arg_spec *specs;
    size_t n;
    int (*fn)(const rule_ctx *, json_object *);
    const char *summary;
} rule;

#define RULE(name, prefix, summary) {name, prefix##_specs, sizeof prefix##_specs / sizeof prefix##_specs[0], rule_##prefix, summary}

static const rule k_rules[] = {
    RULE("reserve", reserve, "ComfyUI's VRAM reserve and minimum inference memory"),
    RULE("admission", admission, "load_models_gpu: extra_mem, first free target, minimum_memory_required"),
    RULE("lowvram", lowvram, "the per-model lowvram budget (full / nothing / bytes)"),
    RULE("evict", evict, "free_memory's eviction ladder over a model list"),
    RULE("pinned-max", pinned_max, "the pinned host RAM ceiling (and host buffer size with --size)"),
    RULE("pin-budget", pin_budget, "the RAM gate before pinning (--fast-disk: against the ceiling)"),
    RULE("pin-registerable", pin_registerable, "the page-lock gate before registering a pin"),
    RULE("cache-headroom", cache_headroom, "the default RAM-cache headroom"),
    RULE("ram-admission", ram_admission, "what a RAM admission needs free on host RAM, its reserve included"),
    RULE("cgroup-clamp", cgroup_clamp, "host RAM total and available clamped to a cgroup limit"),
    RULE("pin-tiers", pin_tiers, "the pin (or registration) eviction ladder ComfyUI walks"),
    RULE("charge", charge, "what one worker adds to the host's reserve"),
    RULE("total-reserve", total_reserve, "base plus charges, capped at 3/4 of the card"),
    RULE("next-reserve", next_reserve, "grow now, shrink only on a receipt"),
    RULE("ask-target", ask_target, "the bytes an admission asks the card to have free"),
    RULE("pager-headroom", pager_headroom, "the headroom forwarded to a pager"),
    RULE("requester-reserve", requester_reserve, "the reserve a requester keeps (own charge removed)"),
    RULE("cast-forward", cast_forward, "cast buffers a worker needs: streams x largest tensor"),
};

static void usage(FILE *f)
{
    fprintf(f, "usage: comem calc RULE [--flag VALUE]... [--pretty | --explain]\n\nrules:\n");
    for (size_t i = 0; i < sizeof k_rules / sizeof k_rules[0]; i++) {
        fprintf(f, "  %-18s %s\n   ", k_rules[i].name, k_rules[i].summary);
        for (size_t j = 0; j < k_rules[i].n; j++) {
            const arg_spec *s = &k_rules[i].specs[j];
            const char *meta = s->kind == ARG_FLAG ? "" : s->kind == ARG_NUMBER ? " N" : s->kind == ARG_STRING ? " TEXT"
                             : s->kind == ARG_STRING_LIST ? " TEXT..." : s->kind == ARG_SIZE_LIST ? " SIZE..." : " SIZE";
            fprintf(f, " %s--%s%s%s", s->required ? "" : "[", s->name, meta, s->required ? "" : "]");
        }
        fprintf(f, "\n");
    }
    fprintf(f, "\nSIZE: bytes (fractions allowed) or a number with B, KiB, MiB, GiB or TiB.\n"
               "--comfyui: current (the default; today the same as 783545f6, ComfyUI 2026-08-22), 783545f6,\n"
               "v0.39 (2026-10: the same load rules; pin ladders with the -fast subsets first, no --fast-disk\n"
               "branch in pin-budget, no swap in pinned-max under a cgroup limit), or a125cd84 (2025-10-12:\n"
               "free_memory stops once covered, the lowvram budget has a 128 MiB floor; no pinned RAM).\n"
               "--explain: text instead of JSON: the ComfyUI (or comfy-env) function the rule follows, its\n"
               "version, the formula, and the formula with these values put in, ending in the result.\n");
}

/* The flags as given, by name: numbers, true for a flag, text, or arrays for the repeatable ones. */
static json_object *inputs_json(const rule_ctx *c)
{
    json_object *o = json_object_new_object();
    for (size_t i = 0; i < c->n; i++) {
        const arg_spec *s = &c->specs[i];
        const arg_value *v = &c->vals[i];
        if (!v->set)
            continue;
        json_object *x = NULL;
        if (s->kind == ARG_FLAG) {
            x = json_object_new_boolean(1);
        } else if (s->kind == ARG_STRING) {
            x = json_object_new_string(v->str);
        } else if (s->kind == ARG_SIZE_LIST || s->kind == ARG_STRING_LIST) {
            x = json_object_new_array();
            for (size_t k = 0; k < v->count; k++)
                json_object_array_add(x, s->kind == ARG_SIZE_LIST ? json_object_new_double(v->nums[k])
                                                                   : json_object_new_string(v->strs[k]));
        } else {
            x = json_object_new_double(v->num);
        }
        json_object_object_add(o, s->name, x);
    }
    return o;
}

int cmd_calc(int argc, char **argv)
{
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h") || !strcmp(argv[0], "help")) {
        usage(argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    const rule *r = NULL;
    for (size_t i = 0; i < sizeof k_rules / sizeof k_rules[0]; i++)
        if (!strcmp(argv[0], k_rules[i].name))
            r = &k_rules[i];
    if (!r) {
        fprintf(stderr, "comem calc: unknown rule '%s' (see comem calc --help)\n", argv[0]);
        return 2;
    }
    char who[64], err[256];
    snprintf(who, sizeof who, "comem calc %s", r->name);
    const arg_command cmd = {who, NULL, r->specs, r->n}; /* its help is the rule list above */
    /* --pretty and --explain are common to every rule; take them out before the rule's own flags. */
    int pretty = 0, explain = 0, m = 0;
    char **rest = calloc((size_t)argc, sizeof *rest);
    if (!rest)
        return 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--pretty"))
            pretty = 1;
        else if (!strcmp(argv[i], "--explain"))
            explain = 1;
        else
            rest[m++] = argv[i];
    }
    if (pretty && explain) {
        free(rest);
        return args_fail(&cmd, NULL, 2, "--pretty and --explain do not go together (--explain prints text)");
    }
    arg_value vals[16]; /* every rule declares fewer flags than this */
    if (r->n > sizeof vals / sizeof vals[0]) {
        free(rest);
        return 1;
    }
    rule_ctx ctx = {.specs = r->specs, .n = r->n, .vals = vals, .err = err, .errlen = sizeof err};
    int rc = args_begin(&cmd, m, rest, vals);
    if (rc != ARGS_GO) {
        free(rest);
        return rc;
    }
    rc = 2;
    json_object *out = json_object_new_object();
    json_object_object_add(out, "schema", jint(1)); /* docs/json.md */
    json_object_object_add(out, "rule", json_object_new_string(r->name));
    if (r->fn(&ctx, out) != 0) {
        args_fail(&cmd, NULL, 2, "%s", err);
    } else if (explain) {
        json_object *given = inputs_json(&ctx);
        arg_value *name = args_get(r->specs, r->n, vals, "comfyui");
        comem_comfyui_rules era = COMEM_COMFYUI_783545F6;
        if (name && name->set)
            (void)era_of(name->str, &era); /* the rule accepted it already */
        rc = calc_explain(stdout, r->name, r->summary, given, out, era) == 0 ? 0 : 1;
        json_object_put(given);
    } else {
        jprint(out, pretty);
        cli_flush(); /* a document past stdout's buffer: why a write failed is known only now */
        rc = 0;
    }
    json_object_put(out);
    args_free(vals, r->n);
    free(rest);
    return rc;
}
