/*
 * tools/comem/calc_explain.c - `comem calc RULE ... --explain`: the rule in words.
 *
 * For the rule calc just computed: which function of ComfyUI (or comfy-env) it
 * follows and in which version, its formula, and the formula again with this
 * call's values put in, ending in the result calc computed (read from the same
 * JSON object it prints, never computed a second time here: the explanation
 * cannot disagree with the number). The branches a formula takes are chosen
 * from the inputs, as the rule chooses them.
 */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "arith/cross_reserve.h"
#include "arith/lowvram.h"
#include "arith/pinned.h"
#include "arith/reserve.h"
#include "base/size.h"
#include "calc_explain.h"
#include "common/jsonout.h"

#define MM "comfy/model_management.py"
#define ENV "comfy-env reserve.py"
#define ENV_VERSION "comfy-env 1967b94"

typedef struct ex {
    FILE *f;
    json_object *in, *out;
    bool a125cd84;
    bool v039;
} ex;

static bool has(const ex *e, const char *k) { return jget(e->in, k) != NULL; }
static double in(const ex *e, const char *k, double dflt)
{
    json_object *v = jget(e->in, k);
    return v ? json_object_get_double(v) : dflt;
}
static double out(const ex *e, const char *k)
{
    json_object *v = jget(e->out, k);
    return v ? json_object_get_double(v) : NAN;
}
static bool outb(const ex *e, const char *k)
{
    json_object *v = jget(e->out, k);
    return v && json_object_get_boolean(v);
}

/* A number as calc's JSON prints it: the shortest text that reads back as the same double. */
static const char *n(char *buf, double v)
{
    comem_format_double(v, buf, 40);
    return buf;
}

/* Bytes with a binary unit beside them: "734003200 (700 MiB)". */
static const char *b(char *buf, double v)
{
    char num[40];
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = fabs(v);
    int u = 0;
    while (x >= 1024 && u < 4) {
        x /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, 80, "%s", n(num, v));
    else
        snprintf(buf, 80, "%s (%s%.4g %s)", n(num, v), v < 0 ? "-" : "", x, units[u]);
    return buf;
}

#define B(v) b((char[80]){0}, (v))
#define N(v) n((char[40]){0}, (v))

static void follows(const ex *e, const char *what, const char *version)
{
    fprintf(e->f, "follows: %s (%s)\n", what, version);
}
static const char *era(const ex *e)
{
    return e->a125cd84 ? "ComfyUI a125cd84, 2025-10-12" : e->v039 ? "ComfyUI v0.39, 2026-10" : "ComfyUI 783545f6, 2026-08-22";
}
/* The pin rules' version line: v0.39's differ from 783545f6's. */
static const char *pin_era(const ex *e)
{
    return e->v039 ? "ComfyUI v0.39; 783545f6 differs, a125cd84 has none" : "ComfyUI 783545f6; a125cd84 has none";
}

/* ---- ComfyUI's rules ---- */

static void reserve(const ex *e)
{
    follows(e, MM " EXTRA_RESERVED_VRAM (extra_reserved_memory) and minimum_inference_memory()",
            "ComfyUI 783545f6; a125cd84 the same");
    fprintf(e->f, "formula: reserve = --reserve-vram G x 1024^3 when given, else 400 MiB; on Windows 600 MiB,\n"
                  "         + 100 MiB when total VRAM > 15360 MiB\n"
                  "         minimum_inference = 0.8 x 1024^3 + reserve\n");
    double r = out(e, "reserve");
    if (has(e, "reserve-vram"))
        fprintf(e->f, "values:  reserve = %s x 1024^3 = %s\n", N(in(e, "reserve-vram", 0)), B(r));
    else if (has(e, "windows"))
        fprintf(e->f, "values:  reserve = 600 MiB (Windows)%s = %s\n",
                in(e, "total-vram", 0) / (1024 * 1024) > 15 * 1024 ? " + 100 MiB (total VRAM > 15360 MiB)"
                                                                    : " (total VRAM <= 15360 MiB: nothing added)",
                B(r));
    else
        fprintf(e->f, "values:  reserve = 400 MiB (not Windows, no --reserve-vram) = %s\n", B(r));
    fprintf(e->f, "         minimum_inference = 858993459.2 + %s = %s\n", N(r), B(out(e, "minimum_inference")));
}

static void admission(const ex *e)
{
    follows(e, MM " load_models_gpu: extra_mem, the first free_memory target, minimum_memory_required", era(e));
    fprintf(e->f, "formula: inference = 0.8 x 1024^3 + reserve\n"
                  "         extra_mem = max(inference, memory_required + reserve)\n"
                  "         minimum_memory_required = extra_mem, or max(inference, --minimum-memory-required + reserve)\n"
                  "         free_target = weights x 1.1 + extra_mem\n");
    double inf = out(e, "minimum_inference"), mr = in(e, "memory-required", 0), res = in(e, "reserve", COMEM_RESERVE_DEFAULT);
    fprintf(e->f, "values:  inference = %s\n", B(inf));
    fprintf(e->f, "         extra_mem = max(%s, %s + %s) = %s\n", N(inf), N(mr), N(res), B(out(e, "extra_mem")));
    if (has(e, "minimum-memory-required"))
        fprintf(e->f, "         minimum_memory_required = max(%s, %s + %s) = %s\n", N(inf),
                N(in(e, "minimum-memory-required", 0)), N(res), B(out(e, "minimum_memory_required")));
    else
        fprintf(e->f, "         minimum_memory_required = extra_mem = %s\n", B(out(e, "minimum_memory_required")));
    fprintf(e->f, "         free_target = %s x 1.1 + %s = %s\n", N(in(e, "weights", 0)), N(out(e, "extra_mem")),
            B(out(e, "free_target")));
    if (has(e, "free"))
        fprintf(e->f, "         to_free = free_target - free = %s - %s = %s; a second free_memory(mmr) runs when free < mmr: "
                      "%s\n",
                N(out(e, "free_target")), N(in(e, "free", 0)), B(out(e, "to_free")), outb(e, "second_pass") ? "yes" : "no");
}

static void lowvram(const ex *e)
{
    follows(e, MM " load_models_gpu: the lowvram_model_memory budget per model", era(e));
    if (e->a125cd84)
        fprintf(e->f, "formula: cur = free + loaded\n"
                      "         budget = max(0.1, max(128 MiB, cur - mmr, min(cur x ratio, cur - minimum_inference)) - loaded)\n");
    else
        fprintf(e->f, "formula: cur = free + loaded\n"
                      "         budget = max(0, cur - mmr, min(cur x ratio, cur - minimum_inference)) - loaded,\n"
                      "         0.1 when that is exactly 0\n");
    fprintf(e->f, "         0 means a full load, 0.1 load nothing; a full load unless the state is low or normal\n"
                  "         VRAM, lowvram is available and no full load is forced; no VRAM: 0.1\n");
    const char *kind = json_object_get_string(jget(e->out, "kind"));
    double free = in(e, "free", 0), loaded = in(e, "loaded", 0), mmr = in(e, "mmr", 0);
    double inference = comem_minimum_inference_memory(in(e, "reserve", COMEM_RESERVE_DEFAULT));
    json_object *st = jget(e->in, "vram-state");
    const char *state = has(e, "cpu") ? "disabled (load device is the CPU)" : st ? json_object_get_string(st) : "normal";
    fprintf(e->f, "values:  state %s%s%s\n", state, has(e, "force-full-load") ? ", full load forced" : "",
            has(e, "no-lowvram") ? ", lowvram not available" : "");
    if (strcmp(kind, "full") != 0 && !(st && !strcmp(json_object_get_string(st), "no")))
        fprintf(e->f, "         budget = %smax(%s, %s - %s, min(%s x %s, %s - %s)) - %s%s\n", e->a125cd84 ? "max(0.1, " : "",
                e->a125cd84 ? "134217728" : "0", N(free + loaded), N(mmr), N(free + loaded),
                N(in(e, "ratio", COMEM_WEIGHT_RATIO_NVIDIA)), N(free + loaded), N(inference), N(loaded),
                e->a125cd84 ? ")" : "");
    fprintf(e->f, "         = %s: %s\n", N(out(e, "budget")),
            !strcmp(kind, "full") ? "a full load" : !strcmp(kind, "nothing") ? "load nothing" : "bytes it may add");
}

static void evict(const ex *e)
{
    follows(e, MM " free_memory(memory_required, device, keep_loaded, for_dynamic)", era(e));
    fprintf(e->f, "formula: candidates: the device's models (any device's with --any-device), not kept, not dead,\n"
                  "         most offloaded bytes first, then fewest references, then smallest, then list order;\n"
                  "         each is asked memory_required - free (everything without smart memory): a partial\n"
                  "         unload when that is less than it holds and the unload frees it all, else a detach.\n"
                  "         %s\n",
            e->a125cd84 ? "a125cd84: the loop stops at the first model that finds the request covered"
                        : "783545f6: no early stop; with for_dynamic a dynamic model's loaded bytes come off the "
                          "request instead");
    fprintf(e->f, "values:  required %s, free %s\n", B(in(e, "required", 0)), B(in(e, "free", 0)));
    json_object *acts = jget(e->out, "actions");
    size_t k = acts ? json_object_array_length(acts) : 0;
    for (size_t i = 0; i < k; i++) {
        json_object *a = json_object_array_get_idx(acts, i);
        fprintf(e->f, "         entry %d: %s, asked %s\n", json_object_get_int(jget(a, "entry")),
                json_object_get_string(jget(a, "action")), B(json_object_get_double(jget(a, "asked"))));
    }
    if (k == 0)
        fprintf(e->f, "         nothing to ask\n");
    fprintf(e->f, "         freed %s; free after %s; required after %s\n", B(out(e, "freed")), B(out(e, "free_after")),
            B(out(e, "required_after")));
}

static void pinned_max(const ex *e)
{
    follows(e, MM " MAX_PINNED_MEMORY (and the host buffer size)", pin_era(e));
    fprintf(e->f, "formula: disabled: -1; Windows: ram x 0.40; else max(ram x 0.40, min(ram x 0.90, ram - 4 GiB,\n"
                  "         ram + disk swap - 16 GiB)); host buffer = 2 x min(size, max_pinned) (2 x size with high RAM)%s\n",
            e->v039 ? "\n         v0.39: disk swap counts as 0 under a cgroup limit" : "");
    double ram = in(e, "ram", 0), swap = e->v039 && has(e, "cgroup") ? 0 : in(e, "swap", 0);
    if (has(e, "disabled"))
        fprintf(e->f, "values:  pinning disabled: %s\n", N(out(e, "max_pinned")));
    else if (has(e, "windows"))
        fprintf(e->f, "values:  %s x 0.40 = %s\n", N(ram), B(out(e, "max_pinned")));
    else
        fprintf(e->f, "values:  max(%s x 0.40, min(%s x 0.90, %s - 4 GiB, %s + %s - 16 GiB)) = %s\n", N(ram), N(ram), N(ram),
                N(ram), N(swap), B(out(e, "max_pinned")));
    if (has(e, "size"))
        fprintf(e->f, "         host buffer = 2 x %s = %s\n",
                has(e, "high-ram") ? N(in(e, "size", 0)) : N(fmin(in(e, "size", 0), out(e, "max_pinned"))),
                B(out(e, "host_buffer")));
}

static void pin_budget(const ex *e)
{
    follows(e, MM " ensure_pin_budget", pin_era(e));
    fprintf(e->f, "formula: high RAM: passes; %sshortfall = size + max(headroom / 2, RAM floor) - available;\n"
                  "         passes when shortfall <= 0, else pins are freed for shortfall + %s\n",
            e->v039 ? "(v0.39: fast disk or not) " : "fast disk: shortfall = total_pinned + size - max_pinned;\n         else ",
            B((double)COMEM_PIN_PRESSURE_HYSTERESIS));
    if (has(e, "high-ram"))
        fprintf(e->f, "values:  high RAM: passes\n");
    else if (has(e, "fast-disk") && !e->v039)
        fprintf(e->f, "values:  shortfall = %s + %s - %s = %s\n", N(in(e, "total-pinned", 0)), N(in(e, "size", 0)),
                N(in(e, "max-pinned", 0)), B(out(e, "shortfall")));
    else
        fprintf(e->f, "values:  shortfall = %s + max(%s / 2, %s) - %s = %s\n", N(in(e, "size", 0)), N(in(e, "headroom", 0)),
                N((double)COMEM_PIN_RAM_FLOOR), N(in(e, "available", 0)), B(out(e, "shortfall")));
    fprintf(e->f, "         %s; ask %s\n", outb(e, "passes_without_eviction") ? "passes without eviction" : "evicts pins",
            B(out(e, "ask")));
}

static void pin_registerable(const ex *e)
{
    follows(e, MM " ensure_pin_registerable", e->v039 ? "ComfyUI v0.39 and 783545f6; a125cd84 has none"
                                                         : "ComfyUI 783545f6 and v0.39; a125cd84 has none");
    fprintf(e->f, "formula: refused when max_pinned <= 0; shortfall = total_pinned + size - max_pinned;\n"
                  "         passes when shortfall <= 0, else page locks are dropped for target = shortfall + %s\n",
            B((double)COMEM_REGISTERABLE_HYSTERESIS));
    fprintf(e->f, "values:  shortfall = %s + %s - %s = %s; target %s; %s\n", N(in(e, "total-pinned", 0)), N(in(e, "size", 0)),
            N(in(e, "max-pinned", 0)), B(out(e, "shortfall")), B(out(e, "target")),
            outb(e, "refused")              ? "refused (pinning off)"
            : outb(e, "passes_without_eviction") ? "passes without eviction"
                                                 : "drops registrations");
}

static void cache_headroom(const ex *e)
{
    follows(e, "main.py: the RAM cache's default headroom when --cache-ram gives none", "ComfyUI 783545f6");
    fprintf(e->f, "formula: active = min(10, max(2, total_ram_mib x 0.10 / 1024)) GiB\n"
                  "         inactive = min(128, total_ram_mib / 1024) GiB\n");
    double t = in(e, "total-ram-mib", 0);
    fprintf(e->f, "values:  active = min(10, max(2, %s x 0.10 / 1024)) = %s GiB = %s\n", N(t), N(out(e, "active_gb")),
            B(out(e, "active")));
    fprintf(e->f, "         inactive = min(128, %s / 1024) = %s GiB = %s\n", N(t), N(out(e, "inactive_gb")),
            B(out(e, "inactive")));
}

static void ram_admission(const ex *e)
{
    follows(e, "main.py prompt_worker's active RAM-cache headroom, kept free as RAMPressureCache keeps it",
            "ComfyUI 783545f6");
    fprintf(e->f, "formula: reserve = 0 on a bounded budget (comemd --ram SIZE), else the active headroom of the\n"
                  "         machine's RAM: min(10, max(2, total_ram_mib x 0.10 / 1024)) GiB\n"
                  "         need = weights + working + reserve (no card's 1.1 slack, no minimum inference memory)\n");
    if (has(e, "budget"))
        fprintf(e->f, "values:  reserve = 0 (budget %s)\n", B(in(e, "budget", 0)));
    else
        fprintf(e->f, "values:  reserve = active headroom of %s = %s\n", B(in(e, "total-ram", 0)), B(out(e, "reserve")));
    fprintf(e->f, "         need = %s + %s + %s = %s\n", N(in(e, "weights", 0)), N(in(e, "working", 0)),
            N(out(e, "reserve")), B(out(e, "need")));
}

static void cgroup_clamp(const ex *e)
{
    follows(e, "comfy/system_memory.py virtual_memory_total/virtual_memory_available", "ComfyUI 783545f6");
    fprintf(e->f, "formula: a limit >= the host total is ignored; total = min(host total, limit);\n"
                  "         available = max(0, min(host available, limit - usage)) (min(host available, limit)\n"
                  "         without usage; usage is memory.current - inactive_file)\n");
    fprintf(e->f, "values:  %s; total %s, available %s\n", outb(e, "limited") ? "limited" : "no limit applies",
            B(out(e, "total")), B(out(e, "available")));
}

static void pin_tiers(const ex *e)
{
    bool reg = has(e, "registrations");
    follows(e, reg ? MM " registration_eviction_tiers(evict_active)" : MM " pin_eviction_tiers(loaded, evict_active)",
            e->v039 ? "ComfyUI v0.39: the -fast subsets first" : "ComfyUI 783545f6");
    fprintf(e->f, "formula: the tiers in the order they are walked, each freeing the pins of its subsets on models\n"
                  "         that match current_prompt and active (null: any)%s\n",
            reg ? "; unregister keeps the RAM and drops the page lock" : "; --loaded leaves the prompt's active pins");
    json_object *tiers = jget(e->out, "tiers");
    fprintf(e->f, "values:  %zu tier(s)\n", tiers ? json_object_array_length(tiers) : (size_t)0);
}

/* ---- comfy-env's cross-process reserve ---- */

static void charge(const ex *e)
{
    follows(e, ENV " charge(residency, process_local_free, floor)", ENV_VERSION);
    fprintf(e->f, "formula: device-wide free readings (Linux): 0, the host already sees the worker;\n"
                  "         process-local (Windows WDDM): floor + max(0, residency)\n");
    if (has(e, "process-local"))
        fprintf(e->f, "values:  %s + %s = %s\n", N(in(e, "floor", COMEM_CONTEXT_FLOOR)), N(in(e, "residency", 0)),
                B(out(e, "charge")));
    else
        fprintf(e->f, "values:  device-wide reading: %s\n", B(out(e, "charge")));
}

static void total_reserve(const ex *e)
{
    follows(e, ENV " total_reserve(base, charges, device_total)", ENV_VERSION);
    fprintf(e->f, "formula: total = max(0, base) + sum of max(0, charge), at most trunc(device_total x 0.75) when given\n");
    json_object *cs = jget(e->in, "charge");
    fprintf(e->f, "values:  %s", N(in(e, "base", 0)));
    for (size_t i = 0; cs && i < json_object_array_length(cs); i++)
        fprintf(e->f, " + %s", N(json_object_get_double(json_object_array_get_idx(cs, i))));
    if (has(e, "device-total"))
        fprintf(e->f, ", capped at trunc(%s x 0.75)", N(in(e, "device-total", 0)));
    fprintf(e->f, " = %s\n", B(out(e, "total")));
}

static void next_reserve(const ex *e)
{
    follows(e, ENV " next_reserve(current, proposed, shrink_allowed)", ENV_VERSION);
    fprintf(e->f, "formula: grow at once (proposed >= current); shrink only with a measured receipt\n");
    fprintf(e->f, "values:  current %s, proposed %s, %s: %s\n", N(in(e, "current", 0)), N(in(e, "proposed", 0)),
            has(e, "shrink-allowed") ? "shrink allowed" : "no receipt", B(out(e, "reserve")));
}

static void ask_target(const ex *e)
{
    follows(e, ENV " ask_target (mirrors " MM " load_models_gpu's first free_memory)", ENV_VERSION);
    fprintf(e->f, "formula: need = trunc(weights x slack) + max(min_inference, want_inference + extra_reserved)\n");
    fprintf(e->f, "values:  trunc(%s x %s) + max(%s, %s + %s) = %s\n", N(in(e, "weights", 0)),
            N(in(e, "slack", COMEM_WEIGHT_SLACK)), N(in(e, "min-inference", 0)), N(in(e, "want-inference", 0)),
            N(in(e, "extra-reserved", 0)), B(out(e, "need")));
}

static void pager_headroom(const ex *e)
{
    follows(e, ENV " aimdo_headroom(seed, published, base)", ENV_VERSION);
    fprintf(e->f, "formula: headroom = max(0, seed) + max(0, published - max(0, base)); seed defaults to 256 MiB\n"
                  "         (aimdo's VRAM_HEADROOM): only what was added on top of the base is forwarded\n");
    fprintf(e->f, "values:  %s + max(0, %s - %s) = %s\n", N(in(e, "seed", COMEM_PAGER_DEFAULT_HEADROOM)),
            N(in(e, "published", 0)), N(in(e, "base", 0)), B(out(e, "headroom")));
}

static void requester_reserve(const ex *e)
{
    follows(e, ENV " reserve_for_requester(published, own_charge)", ENV_VERSION);
    fprintf(e->f, "formula: reserve = max(0, published - max(0, own_charge)): the load it is about to do is that growth\n");
    fprintf(e->f, "values:  max(0, %s - %s) = %s\n", N(in(e, "published", 0)), N(in(e, "own-charge", 0)),
            B(out(e, "reserve")));
}

static void cast_forward(const ex *e)
{
    follows(e, "comfy-env state_sync.py forward_cast_need(largest_tensor, num_streams)", "comfy-env 808d727");
    fprintf(e->f, "formula: want_inference = streams x largest tensor (0 when either is 0)\n");
    fprintf(e->f, "values:  %s x %s = %s\n", N(in(e, "streams", 0)), N(in(e, "largest-tensor", 0)),
            B(out(e, "want_inference")));
}

static const struct {
    const char *rule;
    void (*fn)(const ex *);
} k_explain[] = {
    {"reserve", reserve},
    {"admission", admission},
    {"lowvram", lowvram},
    {"evict", evict},
    {"pinned-max", pinned_max},
    {"pin-budget", pin_budget},
    {"pin-registerable", pin_registerable},
    {"cache-headroom", cache_headroom},
    {"ram-admission", ram_admission},
    {"cgroup-clamp", cgroup_clamp},
    {"pin-tiers", pin_tiers},
    {"charge", charge},
    {"total-reserve", total_reserve},
    {"next-reserve", next_reserve},
    {"ask-target", ask_target},
    {"pager-headroom", pager_headroom},
    {"requester-reserve", requester_reserve},
    {"cast-forward", cast_forward},
};

int calc_explain(FILE *f, const char *rule, const char *summary, json_object *inputs, json_object *result, comem_comfyui_rules era)
{
    for (size_t i = 0; i < sizeof k_explain / sizeof k_explain[0]; i++) {
        if (strcmp(k_explain[i].rule, rule) != 0)
            continue;
        fprintf(f, "%s: %s\n", rule, summary);
        k_explain[i].fn(&(ex){.f = f, .in = inputs, .out = result, .a125cd84 = era == COMEM_COMFYUI_A125CD84,
                                     .v039 = era == COMEM_COMFYUI_V039});
        return 0;
    }
    return -1;
}
