/* tools/simulate/report.c - figures from a run's events and samples: the timeline, the side-by-side summary, expectations, JSON. */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arith/pinned.h"
#include "arith/reserve.h"
#include "base/bytes.h"
#include "base/size.h"
#include "comem/common.h"
#include "simulate/clock.h"
#include "simulate/report.h"
#include "simulate/scenario.h"

const char *sim_gib(double bytes, char *buf, size_t len)
{
    double a = fabs(bytes);
    if (a >= (double)COMEM_GIB)
        snprintf(buf, len, "%.1fG", bytes / (double)COMEM_GIB);
    else if (a >= (double)COMEM_MIB || a == 0)
        snprintf(buf, len, "%.0fM", bytes / (double)COMEM_MIB);
    else
        snprintf(buf, len, "%.0fB", bytes);
    return buf;
}

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b ? 1 : 0;
}

static double pct(const double *v, int n, double p)
{
    if (n == 0)
        return 0;
    int k = (int)ceil(p * n) - 1; /* nearest rank */
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

static int64_t machine_pin_budget(const scenario *s)
{
    bool limited = s->cgroup > 0 && s->cgroup < s->ram;
    comem_pin_ceiling_in in = {.ram = (double)(limited ? s->cgroup : s->ram),
                               .disk_swap = s->swap,
                               .windows = s->card.semantics == SC_WDDM,
                               .cgroup_limited = limited,
                               .enabled = true};
    return (int64_t)comem_max_pinned(&in);
}

static double comfy_reserve(const scenario *s)
{
    comem_reserve_opts ro = {.windows = s->card.semantics == SC_WDDM,
                             .total_vram_mib = (double)(s->card.size - s->card.reserved) / (double)COMEM_MIB,
                             .reserve_vram_set = s->reserve >= 0,
                             .reserve_vram_gb = (double)s->reserve / (double)COMEM_GIB};
    return comem_extra_reserved_vram(&ro);
}

void sim_compute(const scenario *s, run_result *r)
{
    double *v = r->values;
    double leaked = v[M_LEAKED];
    memset(v, 0, sizeof r->values);
    v[M_LEAKED] = leaked;
    double *waits = malloc((size_t)(r->n_events + 1) * sizeof *waits);
    int nw = 0;
    bool killed[SC_MAX_PROCS] = {false};
    for (int i = 0; i < r->n_events; i++) {
        const sh_event *e = &r->events[i];
        switch (e->kind) {
        case EV_OOM:
        case EV_PIN_FAILED:
        case EV_FOREIGN_OOM:
            v[M_FAILED]++;
            break;
        case EV_FAULT_FAIL:
            v[M_FAILED] += (double)e->a;
            break;
        case EV_STAGING:
            v[M_FAILED] += e->b ? 1 : 0;
            v[M_STAGING_PEAK] = fmax(v[M_STAGING_PEAK], (double)e->a);
            break;
        case EV_REFUSE:
        case EV_PIN_REFUSED:
        case EV_RAM_REFUSED:
            v[M_REFUSED]++;
            break;
        case EV_ASKED:
        case EV_EVICT:
        case EV_IDLE_REL:
            if (e->b > 0) {
                v[M_EVICTIONS]++;
                v[M_EVICTED] += (double)e->b;
            }
            break;
        case EV_PAGED_EVICT:
            if (e->a > 0) {
                v[M_EVICTIONS]++;
                v[M_EVICTED] += (double)e->a;
            }
            break;
        case EV_RELOAD:
            v[M_RELOADED] += (double)e->a;
            break;
        case EV_RUN:
            v[M_STREAMED] += (double)e->b;
            break;
        case EV_STREAMED:
            v[M_STREAMED] += (double)e->a;
            break;
        case EV_GRANT:
            if (waits)
                waits[nw++] = (double)e->a / 1e6;
            break;
        case EV_OOM_KILL:
            v[M_OOM_KILLED]++;
            killed[e->proc] = true;
            break;
        case EV_KILL:
            killed[e->proc] = true;
            break;
        case EV_DEATH:
            if (e->a && !killed[e->proc])
                v[M_CRASHED]++;
            break;
        case EV_RELEASED:
            v[M_KILL_MS] = fmax(v[M_KILL_MS], (double)e->a / 1000.0);
            break;
        case EV_LOCAL:
            v[M_DEGRADED]++;
            break;
        case EV_RETRIED:
            v[M_RETRIES] += (double)e->a;
            break;
        case EV_CLI:
            v[M_CLI_FREED] += (double)e->b;
            break;
        default:
            break;
        }
    }
    if (waits) {
        qsort(waits, (size_t)nw, sizeof *waits, cmp_d);
        v[M_WAIT50] = pct(waits, nw, 0.5);
        v[M_WAIT99] = pct(waits, nw, 0.99);
        free(waits);
    }
    double budget_line = (double)s->card.size - comfy_reserve(s);
    for (int k = 0; k < r->n_samples; k++) {
        const run_sample *x = &r->samples[k];
        double dt = k + 1 < r->n_samples ? r->samples[k + 1].t - x->t : 0;
        bool over = false;
        double pinned = 0;
        for (int c = 0; c < s->n_cards; c++) {
            r->per_card_peak[c] = fmax(r->per_card_peak[c], (double)x->used[c]);
            v[M_SPILLED] = fmax(v[M_SPILLED], (double)x->over[c]);
            v[M_GRANTS_OVER] = fmax(v[M_GRANTS_OVER], (double)x->used[c] - budget_line);
            over |= x->over[c] > 0 || x->free[c] < s->headroom;
        }
        for (int i = 0; i < s->n_procs; i++)
            pinned += (double)x->pinned[i];
        v[M_PINNED_PEAK] = fmax(v[M_PINNED_PEAK], pinned);
        v[M_RAM_PEAK] = fmax(v[M_RAM_PEAK], (double)x->ram);
        if (over)
            v[M_OVER_S] += dt;
    }
    v[M_GRANTS_OVER] = fmax(0, v[M_GRANTS_OVER]);
    v[M_PEAK] = r->per_card_peak[0];
    v[M_PIN_BUDGET] = (double)machine_pin_budget(s);
    v[M_PINNED_OVER] = fmax(0, v[M_PINNED_PEAK] - v[M_PIN_BUDGET]);
    v[M_RAM_LIMIT] = (double)(s->cgroup > 0 ? comem_min(s->ram, s->cgroup) : s->ram);
    v[M_CAPACITY] = (double)s->card.size;
    for (int e = 0; e < s->n_expect; e++) {
        const sc_expect *x = &s->expects[e];
        double lhs = sim_metric_value(s, r, &x->lhs), rhs = sim_metric_value(s, r, &x->rhs);
        if (x->rhs_sign)
            rhs += x->rhs_sign * sim_metric_value(s, r, &x->rhs2);
        bool ok = false;
        switch (isnan(lhs) || isnan(rhs) ? -1 : (int)x->op) { /* NaN: a step the reading waits for never came */
        case OP_LT: ok = lhs < rhs; break;
        case OP_LE: ok = lhs <= rhs; break;
        case OP_EQ: ok = lhs == rhs; break;
        case OP_NE: ok = lhs != rhs; break;
        case OP_GE: ok = lhs >= rhs; break;
        case OP_GT: ok = lhs > rhs; break;
        }
        r->expect_ok[e] = ok;
        r->expect_lhs[e] = lhs;
        r->expect_rhs[e] = rhs;
    }
}

/* The first sample at or after t (the last one for t < 0 or past the end). */
static const run_sample *sample_at(const run_result *r, double t)
{
    if (r->n_samples == 0)
        return NULL;
    if (t < 0)
        return &r->samples[r->n_samples - 1];
    for (int k = 0; k < r->n_samples; k++)
        if (r->samples[k].t >= t)
            return &r->samples[k];
    return &r->samples[r->n_samples - 1];
}

/* An event figure counted over one card's events only. */
static double per_card(const run_result *r, sc_metric m, int card)
{
    double v = 0;
    for (int i = 0; i < r->n_events; i++) {
        const sh_event *e = &r->events[i];
        if (e->card != card)
            continue;
        bool release = e->kind == EV_ASKED || e->kind == EV_EVICT || e->kind == EV_IDLE_REL;
        int64_t took = release ? e->b : e->kind == EV_PAGED_EVICT ? e->a : 0;
        if (m == M_EVICTIONS && took > 0)
            v++;
        else if (m == M_EVICTED && took > 0)
            v += (double)took;
        else if (m == M_RELOADED && e->kind == EV_RELOAD)
            v += (double)e->a;
        else if (m == M_FAILED && (e->kind == EV_OOM || e->kind == EV_FOREIGN_OOM || e->kind == EV_PIN_FAILED))
            v++;
    }
    return v;
}

double sim_metric_value(const scenario *s, const run_result *r, const sc_term *t)
{
    if (!t->is_metric)
        return t->value;
    if (t->card_set &&
        (t->metric == M_EVICTIONS || t->metric == M_EVICTED || t->metric == M_RELOADED || t->metric == M_FAILED))
        return per_card(r, t->metric, t->card);
    const run_sample *x = sample_at(r, t->at);
    if (t->mark >= 0) { /* the process's own reading at that step; a step never reached has none */
        if (!r->marks || !r->mark_taken[t->mark])
            return NAN;
        x = &r->marks[t->mark];
    }
    switch (t->metric) {
    case M_PEAK:
        return r->per_card_peak[t->card];
    case M_RESIDENT:
        if (!x)
            return 0;
        return fmax(0, (double)(x->dev[t->proc] - (x->dev[t->proc] > 0 ? s->card.ctx : 0) - x->foreign[t->proc]));
    case M_FOREIGN:
        return x ? (double)x->foreign[t->proc] : 0;
    case M_USED:
        return x ? (double)x->used[t->card] : 0;
    case M_FREE:
        return x ? (double)x->free[t->card] : 0;
    case M_UNATTRIBUTED:
        return (double)r->unattributed[t->proc];
    default:
        return r->values[t->metric];
    }
}

/* ---- the timeline ---- */

static const char *mname(const scenario *s, const sh_event *e)
{
    if (e->model < 0 || e->proc < 0 || e->model >= s->procs[e->proc].n_models)
        return "";
    return s->procs[e->proc].models[e->model].name;
}

void sim_print_timeline(const scenario *s, const run_result *r)
{
    printf("  timeline under %s (scenario seconds):\n", sc_policy_names[r->policy]);
    for (int i = 0; i < r->n_events; i++) {
        const sh_event *e = &r->events[i];
        char a[32], b[32], line[200];
        const char *who = e->proc >= 0 ? s->procs[e->proc].name : "";
        line[0] = '\0';
        switch (e->kind) {
        case EV_START:
            snprintf(line, sizeof line, "starts");
            break;
        case EV_LOAD:
            snprintf(line, sizeof line, "loads %s (%s)", mname(s, e), sim_gib((double)e->a, a, 32));
            break;
        case EV_GRANT:
            if (e->a >= 100000 || e->b > 0)
                snprintf(line, sizeof line, "admitted %s after %.1f s%s%s", mname(s, e), (double)e->a / 1e6,
                         e->b > 0 ? ", others freed " : "", e->b > 0 ? sim_gib((double)e->b, a, 32) : "");
            break;
        case EV_REFUSE:
            snprintf(line, sizeof line, "REFUSED %s (%s, short by %s)", mname(s, e), sim_gib((double)e->a, a, 32),
                     sim_gib((double)e->b, b, 32));
            break;
        case EV_LOADED:
            snprintf(line, sizeof line, "%s resident %s", mname(s, e), sim_gib((double)e->a, a, 32));
            break;
        case EV_OOM:
            snprintf(line, sizeof line, "OOM: allocation of %s failed", sim_gib((double)e->a, a, 32));
            break;
        case EV_ASKED:
            snprintf(line, sizeof line, "asked to release %s, gave %s", e->a < 0 ? "all" : sim_gib((double)e->a, a, 32),
                     sim_gib((double)e->b, b, 32));
            break;
        case EV_IDLE_REL:
            snprintf(line, sizeof line, "idle release: gave %s", sim_gib((double)e->b, b, 32));
            break;
        case EV_EVICT:
            if (e->b > 0)
                snprintf(line, sizeof line, "evicted %s%s%s", sim_gib((double)e->b, b, 32), e->model >= 0 ? " of " : "",
                         mname(s, e));
            break;
        case EV_RELOAD:
            snprintf(line, sizeof line, "reloads %s of %s", sim_gib((double)e->a, a, 32), mname(s, e));
            break;
        case EV_RUN:
            if (e->proc >= 0 && sc_proc_server(&s->procs[e->proc]))
                snprintf(line, sizeof line, "serves a request for %.0f s", (double)e->a / 1000);
            else
                snprintf(line, sizeof line, "computes for %.0f s%s%s%s", (double)e->a / 1000, e->b ? " (" : "",
                         e->b ? sim_gib((double)e->b, b, 32) : "", e->b ? " of its weights from host RAM)" : "");
            break;
        case EV_NO_ROOM_YET:
            snprintf(line, sizeof line, "comem-apps: no room to load %s again yet (%s)", mname(s, e),
                     sim_gib((double)e->a, a, 32));
            break;
        case EV_REQ_FAILED:
            snprintf(line, sizeof line, "a request FAILED: %s of its model not on the card", sim_gib((double)e->a, a, 32));
            break;
        case EV_UNLOAD:
            snprintf(line, sizeof line, "unloads %s (%s)", mname(s, e), sim_gib((double)e->a, a, 32));
            break;
        case EV_FOREIGN:
            snprintf(line, sizeof line, "holds %s outside any manager", sim_gib((double)e->a, a, 32));
            break;
        case EV_FOREIGN_OOM:
            snprintf(line, sizeof line, "OOM: an outside allocation of %s failed", sim_gib((double)e->a, a, 32));
            break;
        case EV_PIN:
            snprintf(line, sizeof line, "pins %s (now %s)", sim_gib((double)e->a, a, 32), sim_gib((double)e->b, b, 32));
            break;
        case EV_PIN_REFUSED:
            snprintf(line, sizeof line, "pin of %s REFUSED by the budget", sim_gib((double)e->a, a, 32));
            break;
        case EV_PIN_FAILED:
            snprintf(line, sizeof line, "FAILED to page-lock %s (not there)", sim_gib((double)e->a, a, 32));
            break;
        case EV_UNPIN:
            snprintf(line, sizeof line, "unpins %s%s", sim_gib((double)e->a, a, 32), e->b ? " (asked)" : "");
            break;
        case EV_CANCEL:
            snprintf(line, sizeof line, "cancels loading %s (%s in, %s kept)", mname(s, e),
                     sim_gib((double)e->a, a, 32), sim_gib((double)e->b, b, 32));
            break;
        case EV_KILL:
            snprintf(line, sizeof line, "dies by SIGKILL");
            break;
        case EV_OOM_KILL:
            snprintf(line, sizeof line, "KILLED by the OOM killer (%s of RAM)", sim_gib((double)e->a, a, 32));
            break;
        case EV_RELEASED:
            snprintf(line, sizeof line, "its bytes are out of the books %.2f ms after its reap", (double)e->a / 1000);
            break;
        case EV_CLI:
            snprintf(line, sizeof line, "release from the command line: %s asked %s, got %s", s->procs[e->model].name,
                     e->a < 0 ? "all" : sim_gib((double)e->a, a, 32), sim_gib((double)e->b, b, 32));
            break;
        case EV_LOCAL:
            snprintf(line, sizeof line, "no coordinator: decides locally");
            break;
        case EV_PAGED_EVICT:
            snprintf(line, sizeof line, "%s of %s paged out by pressure", sim_gib((double)e->a, a, 32), mname(s, e));
            break;
        case EV_FAULT_FAIL:
            snprintf(line, sizeof line, "FAULT FAILED (%lld)", (long long)e->a);
            break;
        case EV_RETRIED:
            snprintf(line, sizeof line, "%lld page commit(s) retried after NOT_READY", (long long)e->a);
            break;
        case EV_RAM:
            snprintf(line, sizeof line, "holds %s of plain RAM%s", sim_gib((double)e->a, a, 32), e->b ? " (over!)" : "");
            break;
        case EV_RAM_DROP:
            snprintf(line, sizeof line, "drops %s of RAM copies (%s)", sim_gib((double)e->a, a, 32),
                     e->b ? "asked by another process" : "its own oldest, to make room the ledger grants");
            break;
        case EV_RAM_REFUSED:
            snprintf(line, sizeof line, "RAM growth of %s REFUSED by the ledger", sim_gib((double)e->a, a, 32));
            break;
        case EV_STAGING:
            snprintf(line, sizeof line, "staging buffer %s%s", sim_gib((double)e->a, a, 32), e->b ? " (grow FAILED)" : "");
            break;
        case EV_CUSTOM:
            snprintf(line, sizeof line, "custom node holds %s", sim_gib((double)e->a, a, 32));
            break;
        case EV_PRESSURE:
            snprintf(line, sizeof line, "at an out-of-memory retry: asked the others for %s, got %s",
                     sim_gib((double)e->a, a, 32), sim_gib((double)e->b, b, 32));
            break;
        default:
            break;
        }
        if (line[0])
            printf("    %7.1f  %-12s %s\n", e->t, who, line);
    }
}

/* ---- the side-by-side summary ---- */

typedef struct row {
    const char *label;
    int metric;
    int kind; /* 0 count, 1 bytes, 2 seconds */
} row;

static const row k_rows[] = {
    {"failed allocations / OOMs", M_FAILED, 0},   {"refused (admission, pins)", M_REFUSED, 0},
    {"spilled past WDDM (peak)", M_SPILLED, 1},    {"time over budget (s)", M_OVER_S, 2},
    {"evictions", M_EVICTIONS, 0},                 {"bytes evicted", M_EVICTED, 1},
    {"bytes reloaded", M_RELOADED, 1},             {"streamed from RAM (lowvram)", M_STREAMED, 1},
    {"admission wait p50 (s)", M_WAIT50, 2},
    {"admission wait p99 (s)", M_WAIT99, 2},       {"pinned peak", M_PINNED_PEAK, 1},
    {"pinned over budget", M_PINNED_OVER, 1},      {"OOM-killed processes", M_OOM_KILLED, 0},
};

bool sim_metric_shown(const scenario *s, run_result *const *rs, int n, int metric)
{
    int peers = metric == M_SPILLED ? M_SPILLED : M_PINNED_PEAK; /* what says the row has anything to show */
    if (metric != M_SPILLED && metric != M_PINNED_PEAK && metric != M_PINNED_OVER)
        return true;
    if (metric == M_SPILLED && s->card.semantics == SC_WDDM)
        return true;
    for (int k = 0; k < n; k++)
        if (rs[k]->ran && rs[k]->values[peers] > 0)
            return true;
    return false;
}

static void cell(double v, int kind, char *buf, size_t len)
{
    if (kind == 1)
        sim_gib(v, buf, len);
    else if (kind == 2)
        snprintf(buf, len, "%.1f", v);
    else
        snprintf(buf, len, "%.0f", v);
}

void sim_print_summary(const scenario *s, run_result *const *rs, int n)
{
    printf("\n%s: %s (%s cards)\n", s->id, s->title[0] ? s->title : s->file, sc_semantics_names[s->card.semantics]);
    printf("  %-28s", "");
    for (int k = 0; k < n; k++)
        printf(" %14s", sc_policy_names[rs[k]->policy]);
    printf("\n");
    for (size_t i = 0; i < sizeof k_rows / sizeof k_rows[0]; i++) {
        if (!sim_metric_shown(s, rs, n, k_rows[i].metric))
            continue;
        printf("  %-28s", k_rows[i].label);
        for (int k = 0; k < n; k++) {
            char b[32];
            cell(rs[k]->values[k_rows[i].metric], k_rows[i].kind, b, sizeof b);
            printf(" %14s", rs[k]->ran ? b : "-");
        }
        printf("\n");
    }
    for (int c = 0; c < s->n_cards; c++) {
        char label[40];
        snprintf(label, sizeof label, "peak used card %d (of %.0fG)", c, (double)s->card.size / (double)COMEM_GIB);
        printf("  %-28s", label);
        for (int k = 0; k < n; k++) {
            char b[32];
            printf(" %14s", sim_gib(rs[k]->per_card_peak[c], b, sizeof b));
        }
        printf("\n");
    }
    printf("  %-28s", "wall time (s)");
    for (int k = 0; k < n; k++)
        printf(" %14.2f", rs[k]->wall_s);
    printf("\n");
    char h[32];
    printf("  time over budget: scenario seconds during which some card had less than %s free (the scenario's\n"
           "  headroom) or more in use than it holds. Figures vary a little from run to run (real processes on a real\n"
           "  clock decide who gives back first, and when); the expectations below are what must hold.\n",
           sim_gib((double)s->headroom, h, sizeof h));
}

/* A value as a reader expects it: bytes in GiB or MiB, small figures (counts, seconds) as numbers. */
static const char *figure(double v, char *buf, size_t len)
{
    if (isnan(v)) {
        snprintf(buf, len, "not taken");
        return buf;
    }
    if (fabs(v) >= (double)COMEM_MIB)
        return sim_gib(v, buf, len);
    snprintf(buf, len, "%g", v);
    return buf;
}

/* Prints each expectation's outcome per policy; returns how many of comem's asserted ones failed. */
int sim_print_expectations(const scenario *s, run_result *const *rs, int n)
{
    int failed = 0;
    if (!s->n_expect)
        return 0;
    printf("  expectations: %s's must pass (the run fails otherwise); the other policies' are recorded: holds or not\n",
           sc_policy_names[POL_COMEM]);
    for (int e = 0; e < s->n_expect; e++) {
        const sc_expect *x = &s->expects[e];
        printf("    %s:%d %-46s", s->id, x->line, x->text);
        for (int k = 0; k < n; k++) {
            bool ok = rs[k]->ran && rs[k]->expect_ok[e];
            char v[32];
            if (rs[k]->policy == POL_COMEM)
                printf(" %s=%s", sc_policy_names[rs[k]->policy], !rs[k]->ran ? "FAIL (not run)" : ok ? "pass" : "FAIL");
            else if (!rs[k]->ran)
                printf(" %s=not run", sc_policy_names[rs[k]->policy]);
            else if (ok)
                printf(" %s=holds", sc_policy_names[rs[k]->policy]);
            else /* what it was instead: "uncoordinated=does not hold (1)" */
                printf(" %s=does not hold (%s)", sc_policy_names[rs[k]->policy], figure(rs[k]->expect_lhs[e], v, 32));
            if (rs[k]->policy == POL_COMEM && !x->gap && !ok)
                failed++;
        }
        printf("\n");
        for (int k = 0; k < n; k++) {
            if (rs[k]->policy == POL_COMEM && !rs[k]->expect_ok[e]) {
                char a[32], b[32];
                printf("      comem: %s is %s, against %s\n", x->text, figure(rs[k]->expect_lhs[e], a, 32),
                       figure(rs[k]->expect_rhs[e], b, 32));
                if (isnan(rs[k]->expect_lhs[e]) || isnan(rs[k]->expect_rhs[e]))
                    printf("      a reading it names was not taken: the step it waits for never came\n");
                if (x->gap)
                    printf("      a known gap, not asserted: %s\n", x->why);
            }
        }
    }
    return failed;
}

/* ---- JSON ---- */

int sim_write_json(const char *path, const scenario *s, run_result *const *rs, int n)
{
    json_object *root = json_object_new_object();
    json_object_object_add(root, "schema", json_object_new_int(1)); /* docs/json.md */
    json_object *sc = json_object_new_object();
    json_object_object_add(sc, "id", json_object_new_string(s->id));
    json_object_object_add(sc, "title", json_object_new_string(s->title));
    json_object_object_add(sc, "file", json_object_new_string(s->file));
    json_object_object_add(sc, "semantics", json_object_new_string(sc_semantics_names[s->card.semantics]));
    json_object_object_add(sc, "cards", json_object_new_int(s->n_cards));
    json_object_object_add(sc, "card_bytes", json_object_new_int64(s->card.size));
    json_object_object_add(sc, "speed", json_object_new_double(s->speed));
    json_object *procs = json_object_new_array();
    for (int i = 0; i < s->n_procs; i++) {
        json_object *p = json_object_new_object();
        json_object_object_add(p, "name", json_object_new_string(s->procs[i].name));
        json_object_object_add(p, "role", json_object_new_string(s->procs[i].role == ROLE_HOST     ? "host"
                                                                  : s->procs[i].role == ROLE_WORKER ? "worker"
                                                                                                    : "app"));
        json_object_object_add(p, "card", json_object_new_int(s->procs[i].card));
        json_object_array_add(procs, p);
    }
    json_object_object_add(sc, "processes", procs);
    json_object_object_add(root, "scenario", sc);
    json_object *runs = json_object_new_array();
    for (int k = 0; k < n; k++) {
        const run_result *r = rs[k];
        json_object *o = json_object_new_object();
        json_object_object_add(o, "policy", json_object_new_string(sc_policy_names[r->policy]));
        json_object_object_add(o, "ran", json_object_new_boolean(r->ran));
        json_object_object_add(o, "wall_s", json_object_new_double(r->wall_s));
        json_object *m = json_object_new_object();
        for (int i = 0; i < M_COUNT; i++)
            if (i != M_RESIDENT && i != M_FOREIGN && i != M_USED && i != M_FREE && i != M_UNATTRIBUTED)
                json_object_object_add(m, sc_metric_names[i], json_object_new_double(r->values[i]));
        json_object *pk = json_object_new_array();
        for (int c = 0; c < s->n_cards; c++)
            json_object_array_add(pk, json_object_new_double(r->per_card_peak[c]));
        json_object_object_add(m, "peak_per_card", pk);
        json_object_object_add(o, "metrics", m);
        json_object *ex = json_object_new_array();
        for (int e = 0; e < s->n_expect; e++) {
            json_object *x = json_object_new_object();
            json_object_object_add(x, "line", json_object_new_int(s->expects[e].line));
            json_object_object_add(x, "text", json_object_new_string(s->expects[e].text));
            json_object_object_add(x, "gap", json_object_new_boolean(s->expects[e].gap));
            json_object_object_add(x, "ok", json_object_new_boolean(r->expect_ok[e]));
            /* null: a reading whose step never came (NaN is not JSON) */
            double lhs = r->expect_lhs[e], rhs = r->expect_rhs[e];
            json_object_object_add(x, "value", isnan(lhs) ? NULL : json_object_new_double(lhs));
            json_object_object_add(x, "against", isnan(rhs) ? NULL : json_object_new_double(rhs));
            json_object_array_add(ex, x);
        }
        json_object_object_add(o, "expectations", ex);
        json_object *tl = json_object_new_array();
        for (int i = 0; i < r->n_events; i++) {
            const sh_event *e = &r->events[i];
            json_object *x = json_object_new_object();
            json_object_object_add(x, "t", json_object_new_double(round(e->t * 1000) / 1000));
            json_object_object_add(x, "process", json_object_new_string(e->proc >= 0 ? s->procs[e->proc].name : ""));
            json_object_object_add(x, "kind", json_object_new_int(e->kind));
            json_object_object_add(x, "model", json_object_new_string(mname(s, e)));
            json_object_object_add(x, "a", json_object_new_int64(e->a));
            json_object_object_add(x, "b", json_object_new_int64(e->b));
            json_object_array_add(tl, x);
        }
        json_object_object_add(o, "events", tl);
        json_object *sm = json_object_new_array();
        for (int i = 0; i < r->n_samples; i++) {
            const run_sample *x = &r->samples[i];
            json_object *o2 = json_object_new_object();
            json_object_object_add(o2, "t", json_object_new_double(round(x->t * 100) / 100));
            json_object *u = json_object_new_array(), *d = json_object_new_array(), *pn = json_object_new_array();
            for (int c = 0; c < s->n_cards; c++)
                json_object_array_add(u, json_object_new_int64(x->used[c]));
            for (int p = 0; p < s->n_procs; p++) {
                json_object_array_add(d, json_object_new_int64(x->dev[p]));
                json_object_array_add(pn, json_object_new_int64(x->pinned[p]));
            }
            json_object_object_add(o2, "used", u);
            json_object_object_add(o2, "process_bytes", d);
            json_object_object_add(o2, "pinned", pn);
            json_object_array_add(sm, o2);
        }
        json_object_object_add(o, "samples", sm);
        json_object_array_add(runs, o);
    }
    json_object_object_add(root, "runs", runs);
    int rc = json_object_to_file_ext(path, root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    json_object_put(root);
    return rc == 0 ? COMEM_OK : COMEM_EIO;
}
