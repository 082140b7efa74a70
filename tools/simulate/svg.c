/*
 * tools/simulate/svg.c - the picture: per policy and card, each process's VRAM stacked over time, events marked, pinned RAM below.
 *
 * One row per policy, one column per card. A row's chart stacks, from the
 * bottom: the driver's reserved slice (grey), then each process on that card
 * in scenario order (its context and models in its colour, the bytes it holds
 * outside any manager hatched). The card's capacity is the black line, the
 * budget (capacity minus the headroom) the dashed one; anything above the
 * capacity is overcommit, drawn red. Above the chart a strip marks the events
 * a reader asks about: releases with their receipts (a down arrow and the
 * bytes), idle releases, refusals, OOMs, kills. Below, a thin chart stacks
 * the pinned host RAM with the machine's pin budget. The figures that decide
 * the comparison are printed at the right of each row. What a scenario cannot
 * show is left out (sim_metric_shown): the pinned chart and figures where no
 * run pinned anything, the spill figure and legend off WDDM where nothing
 * spilled.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/bytes.h"
#include "comem/common.h"
#include "simulate/clock.h"
#include "simulate/report.h"
#include "simulate/scenario.h"

#define W_LEFT 70
#define W_CHART 760
#define W_SIDE 230
#define H_STRIP 50
#define H_CHART 210
#define H_PIN 52
#define H_GAP 46
/* A row's height: the pinned chart only where it has something to show. */
#define H_ROW(pins) (H_STRIP + H_CHART + 14 + ((pins) ? H_PIN : 0) + H_GAP)
#define H_TOP 92

static const char *const k_colors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2",
                                       "#edc948", "#ff9da7", "#9c755f", "#86bcb6", "#d37295"};
#define N_COLORS (int)(sizeof k_colors / sizeof k_colors[0])

static const char *color(const scenario *s, int p)
{
    if (s->procs[p].role == ROLE_APP && !sc_proc_server(&s->procs[p])) /* grey: outside bytes only */
        return "#7f7f7f";
    return k_colors[p % N_COLORS];
}

static void esc(FILE *f, const char *t)
{
    for (; *t; t++) {
        if (*t == '<')
            fputs("&lt;", f);
        else if (*t == '>')
            fputs("&gt;", f);
        else if (*t == '&')
            fputs("&amp;", f);
        else
            fputc(*t, f);
    }
}

static double nice_step(double range, int target)
{
    double raw = range / target, mag = pow(10, floor(log10(raw)));
    double n = raw / mag;
    return (n < 1.5 ? 1 : n < 3 ? 2 : n < 7 ? 5 : 10) * mag;
}

typedef struct frame {
    double x0, y0, w, h, tmax, ymax;
} frame;

static double fx(const frame *fr, double t) { return fr->x0 + fr->w * fmin(1, fmax(0, t / fr->tmax)); }
static double fy(const frame *fr, double v) { return fr->y0 + fr->h - fr->h * fmin(1.02, fmax(0, v / fr->ymax)); }

/* A filled band between lo[] and hi[] over the samples. */
static void band(FILE *f, const frame *fr, const run_result *r, const double *lo, const double *hi, const char *fill,
                 const char *extra)
{
    if (r->n_samples < 2)
        return;
    fprintf(f, "<path d=\"M");
    for (int k = 0; k < r->n_samples; k++)
        fprintf(f, "%s%.1f,%.1f", k ? " L" : "", fx(fr, r->samples[k].t), fy(fr, hi[k]));
    for (int k = r->n_samples - 1; k >= 0; k--)
        fprintf(f, " L%.1f,%.1f", fx(fr, r->samples[k].t), fy(fr, lo[k]));
    fprintf(f, " Z\" fill=\"%s\" %s/>\n", fill, extra ? extra : "");
}

static void axes(FILE *f, const frame *fr, bool time_labels, double unit, const char *unit_name, bool y_labels)
{
    double ts = nice_step(fr->tmax, 10);
    for (double t = 0; t <= fr->tmax + 1e-9; t += ts) {
        double x = fx(fr, t);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n", x, fr->y0, x,
                fr->y0 + fr->h);
        if (time_labels)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"ax\" text-anchor=\"middle\">%.0f s</text>\n", x,
                    fr->y0 + fr->h + 13, t);
    }
    double ys = nice_step(fr->ymax / unit, fr->h < 80 ? 2 : 4) * unit;
    for (double v = 0; y_labels && v <= fr->ymax + 1; v += ys) {
        double y = fy(fr, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eeeeee\"/>\n", fr->x0, y,
                fr->x0 + fr->w, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"ax\" text-anchor=\"end\">%.0f %s</text>\n", fr->x0 - 5,
                y + 3, v / unit, unit_name);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#999\"/>\n", fr->x0,
            fr->y0, fr->w, fr->h);
}

/* ---- the event strip ---- */

typedef struct mark {
    double t;
    int lane;
    const char *sym, *col;
    char label[40];
} mark;

static void strip(FILE *f, const scenario *s, const run_result *r, int card, const frame *fr, double y_top)
{
    mark ms[256];
    int n = 0;
    for (int i = 0; i < r->n_events && n < 256; i++) {
        const sh_event *e = &r->events[i];
        if (e->proc < 0 || s->procs[e->proc].card != card)
            continue;
        mark m = {.t = e->t, .col = color(s, e->proc)};
        char b[32];
        switch (e->kind) {
        case EV_ASKED:
        case EV_EVICT:
            if (e->b <= 0)
                continue;
            m.sym = "\xe2\x86\x93"; /* down arrow: bytes given back */
            m.lane = 0;
            snprintf(m.label, sizeof m.label, "%s", sim_gib(-(double)e->b, b, 32));
            break;
        case EV_IDLE_REL:
            if (e->b <= 0)
                continue;
            m.sym = "\xe2\x86\x93";
            m.lane = 0;
            snprintf(m.label, sizeof m.label, "idle %s", sim_gib(-(double)e->b, b, 32));
            break;
        case EV_REFUSE:
        case EV_PIN_REFUSED:
            m.sym = "\xe2\x8a\x98"; /* circled slash */
            m.col = "#c0392b";
            m.lane = 1;
            snprintf(m.label, sizeof m.label, "refused");
            break;
        case EV_OOM:
        case EV_FOREIGN_OOM:
        case EV_PIN_FAILED:
        case EV_FAULT_FAIL:
            m.sym = "\xe2\x9c\x96"; /* heavy x */
            m.col = "#d62728";
            m.lane = 1;
            snprintf(m.label, sizeof m.label, "%s", e->kind == EV_PIN_FAILED ? "pin failed" : "OOM");
            break;
        case EV_KILL:
        case EV_OOM_KILL:
            m.sym = "\xe2\x98\xa0"; /* skull */
            m.col = "#222222";
            m.lane = 2;
            snprintf(m.label, sizeof m.label, "%s %s", e->kind == EV_KILL ? "SIGKILL" : "OOM-kill",
                     s->procs[e->proc].name);
            break;
        case EV_LOAD:
            m.sym = "\xe2\x96\xb2"; /* triangle: a load starts */
            m.lane = 2;
            snprintf(m.label, sizeof m.label, "%s", "");
            break;
        default:
            continue;
        }
        /* merge with an earlier mark of the same lane and process close in time */
        bool merged = false;
        for (int k = n - 1; k >= 0 && !merged; k--) {
            if (ms[k].lane == m.lane && ms[k].col == m.col && fx(fr, m.t) - fx(fr, ms[k].t) < 18 &&
                !strcmp(ms[k].sym, m.sym))
                merged = true;
        }
        if (!merged)
            ms[n++] = m;
    }
    /* rows: 0-1 releases (a second row when labels would collide), 2 refusals and failures, 3 loads and kills */
    double last_x[4] = {-1e9, -1e9, -1e9, -1e9};
    for (int k = 0; k < n; k++) {
        double x = fx(fr, ms[k].t);
        int row = ms[k].lane == 0 ? 0 : ms[k].lane + 1;
        if (row == 0 && x < last_x[0])
            row = 1;
        double y = y_top + 10 + 11.5 * row;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"sym\" fill=\"%s\" text-anchor=\"middle\">%s</text>\n", x, y,
                ms[k].col, ms[k].sym);
        if (ms[k].label[0] && x >= last_x[row]) {
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"ev\" fill=\"%s\">", x + 6, y, ms[k].col);
            esc(f, ms[k].label);
            fprintf(f, "</text>\n");
            last_x[row] = x + 10 + 5.6 * (double)strlen(ms[k].label);
        } else if (!ms[k].label[0] && x > last_x[row]) {
            last_x[row] = x + 6;
        }
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-opacity=\"0.25\"/>\n",
                x, y + 3, x, fr->y0, ms[k].col);
    }
}

/* ---- one row ---- */

/* What every row shows, the same for all (sim_metric_shown over every run). */
typedef struct row_parts {
    bool pins;  /* the pinned host RAM chart and the "pinned over budget" figure */
    bool spill; /* the "spilled (peak)" figure */
} row_parts;

/* The thin chart below a row: pinned host RAM stacked per process, the machine's pin budget dotted. */
static void pinned(FILE *f, const scenario *s, const run_result *r, double x0, double y0, double tmax, double *lo,
                   double *hi)
{
    const double G = (double)COMEM_GIB;
    double pmax = fmax(r->values[M_PIN_BUDGET] * 1.1, 1 * G);
    for (int k = 0; k < r->n_samples; k++) {
        double t = 0;
        for (int p = 0; p < s->n_procs; p++)
            t += (double)r->samples[k].pinned[p];
        pmax = fmax(pmax, t * 1.05);
    }
    frame pf = {x0, y0, W_CHART, H_PIN, tmax, pmax};
    bool pinned_any = r->values[M_PINNED_PEAK] > 0;
    axes(f, &pf, true, G, "G", pinned_any);
    for (int k = 0; k < r->n_samples; k++)
        hi[k] = 0;
    for (int p = 0; p < s->n_procs; p++) {
        bool any = false;
        for (int k = 0; k < r->n_samples; k++) {
            lo[k] = hi[k];
            hi[k] = lo[k] + (double)r->samples[k].pinned[p];
            any |= r->samples[k].pinned[p] > 0;
        }
        if (any)
            band(f, &pf, r, lo, hi, color(s, p), "fill-opacity=\"0.85\"");
    }
    double yp = fy(&pf, r->values[M_PIN_BUDGET]);
    if (pinned_any && r->values[M_PIN_BUDGET] <= pmax)
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" stroke-dasharray=\"2,2\"/>\n",
                pf.x0, yp, pf.x0 + pf.w, yp);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"ax\">%s</text>\n", pf.x0 + 4, pf.y0 + 12,
            pinned_any ? "pinned host RAM (dotted: the machine's pin budget)" : "pinned host RAM: none");
}

/* The figures that decide the comparison, at the right of a row from (sx, sy). */
static void figures(FILE *f, const run_result *r, const row_parts *sh, double sx, double sy)
{
    char b[32], line[96];
    const struct {
        const char *label;
        int m;
        int kind;
    } figs[] = {{"failed allocations", M_FAILED, 0}, {"refused", M_REFUSED, 0},     {"spilled (peak)", M_SPILLED, 1},
                {"over budget", M_OVER_S, 2},        {"evicted", M_EVICTED, 1},     {"reloaded", M_RELOADED, 1},
                {"streamed (lowvram)", M_STREAMED, 1}, {"wait p99", M_WAIT99, 2},   {"pinned over budget", M_PINNED_OVER, 1}};
    for (size_t i = 0; i < sizeof figs / sizeof figs[0]; i++) {
        if ((figs[i].m == M_SPILLED && !sh->spill) || (figs[i].m == M_PINNED_OVER && !sh->pins))
            continue;
        double v = r->values[figs[i].m];
        if (figs[i].kind == 1)
            sim_gib(v, b, sizeof b);
        else if (figs[i].kind == 2)
            snprintf(b, sizeof b, "%.1f s", v);
        else
            snprintf(b, sizeof b, "%.0f", v);
        bool bad = (figs[i].m == M_FAILED || figs[i].m == M_SPILLED || figs[i].m == M_PINNED_OVER) && v > 0;
        snprintf(line, sizeof line, "%s", figs[i].label);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"fig\">%s</text>", sx, sy, line);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"figv\" text-anchor=\"end\"%s>%s</text>\n", sx + W_SIDE - 24,
                sy, bad ? " fill=\"#d62728\"" : "", b);
        sy += 17;
    }
}

static void row(FILE *f, const scenario *s, const run_result *r, const row_parts *sh, int card, double x0, double y0,
                double tmax, double *lo, double *hi)
{
    const double G = (double)COMEM_GIB;
    double cap = (double)s->card.size, ymax = cap * 1.08;
    for (int k = 0; k < r->n_samples; k++)
        ymax = fmax(ymax, (double)r->samples[k].used[card] * 1.04);
    frame fr = {x0, y0 + H_STRIP, W_CHART, H_CHART, tmax, ymax};
    char title[160];
    snprintf(title, sizeof title, "%s  \xc2\xb7  card %d: %.0f GiB, %s", sc_policy_names[r->policy], card, cap / G,
             sc_semantics_names[s->card.semantics]);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"h2\">", x0, y0 + 4);
    esc(f, title);
    fprintf(f, "</text>\n");
    axes(f, &fr, !sh->pins, G, "G", true); /* the time under the card's chart, unless the pinned one is below it */
    /* the driver's slice */
    for (int k = 0; k < r->n_samples; k++) {
        lo[k] = 0;
        hi[k] = (double)s->card.reserved;
    }
    band(f, &fr, r, lo, hi, "#d9d9d9", NULL);
    for (int p = 0; p < s->n_procs; p++) {
        if (s->procs[p].card != card)
            continue;
        for (int k = 0; k < r->n_samples; k++) {
            lo[k] = hi[k];
            hi[k] = lo[k] + fmax(0, (double)(r->samples[k].dev[p] - r->samples[k].foreign[p]));
        }
        band(f, &fr, r, lo, hi, color(s, p), "fill-opacity=\"0.85\"");
        bool any = false;
        for (int k = 0; k < r->n_samples; k++) {
            lo[k] = hi[k];
            hi[k] = lo[k] + (double)r->samples[k].foreign[p];
            any |= r->samples[k].foreign[p] > 0;
        }
        if (any) {
            char pat[48];
            if (s->procs[p].role == ROLE_APP && !sc_proc_server(&s->procs[p]))
                snprintf(pat, sizeof pat, "url(#hatchapp)");
            else
                snprintf(pat, sizeof pat, "url(#hatch%d)", p % N_COLORS);
            band(f, &fr, r, lo, hi, pat, NULL);
        }
    }
    /* overcommit: the part above the capacity */
    for (int k = 0; k < r->n_samples; k++) {
        lo[k] = cap;
        hi[k] = fmax(cap, (double)r->samples[k].used[card]);
    }
    band(f, &fr, r, lo, hi, "#d62728", "fill-opacity=\"0.7\"");
    double yc = fy(&fr, cap), yb = fy(&fr, cap - (double)s->headroom);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" stroke-width=\"1.5\"/>\n", fr.x0,
            yc, fr.x0 + fr.w, yc);
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" stroke-dasharray=\"5,3\"/>\n",
            fr.x0, yb, fr.x0 + fr.w, yb);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"ax\" text-anchor=\"end\">capacity</text>\n", fr.x0 + fr.w - 3,
            yc - 3);
    strip(f, s, r, card, &fr, y0 + 6);
    if (sh->pins)
        pinned(f, s, r, x0, fr.y0 + fr.h + 14, tmax, lo, hi);
    figures(f, r, sh, x0 + W_CHART + 18, fr.y0 + 8);
}

int sim_write_svg(const char *path, const scenario *s, run_result *const *rs, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return COMEM_EIO;
    double tmax = 1;
    int maxs = 2;
    for (int k = 0; k < n; k++) {
        if (rs[k]->n_samples)
            tmax = fmax(tmax, rs[k]->samples[rs[k]->n_samples - 1].t);
        if (rs[k]->n_samples > maxs)
            maxs = rs[k]->n_samples;
    }
    double lo[RUN_MAX_SAMPLES], hi[RUN_MAX_SAMPLES];
    row_parts sh = {sim_metric_shown(s, rs, n, M_PINNED_PEAK), sim_metric_shown(s, rs, n, M_SPILLED)};
    int width = W_LEFT + s->n_cards * (W_CHART + W_SIDE) + 10, height = H_TOP + n * H_ROW(sh.pins);
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
            width, height, width, height);
    fprintf(f, "<style>.h1{font-size:17px;font-weight:bold}.h2{font-size:13px;font-weight:bold}"
               ".ax{font-size:10px;fill:#555}.ev{font-size:10px}.sym{font-size:12px}"
               ".fig{font-size:11.5px;fill:#333}.figv{font-size:11.5px;font-weight:bold;fill:#111}"
               ".lg{font-size:11.5px}</style>\n");
    fprintf(f, "<defs>\n");
    for (int c = 0; c < N_COLORS; c++)
        fprintf(f,
                "<pattern id=\"hatch%d\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
                "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"%s\" fill-opacity=\"0.3\"/>"
                "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"%s\" stroke-width=\"3\"/></pattern>\n",
                c, k_colors[c], k_colors[c]);
    fprintf(f, "<pattern id=\"hatchapp\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
               "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#bbbbbb\"/>"
               "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#555\" stroke-width=\"2.5\"/></pattern>\n");
    fprintf(f, "</defs>\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"24\" class=\"h1\">", W_LEFT);
    esc(f, s->id);
    fprintf(f, ": ");
    esc(f, s->title);
    fprintf(f, "</text>\n");
    /* legend */
    double lx = W_LEFT, ly = 48;
    int shown = 0;
    for (int p = 0; p < s->n_procs && shown < 14; p++, shown++) {
        const char *role = s->procs[p].role == ROLE_HOST     ? "host"
                           : s->procs[p].role == ROLE_WORKER ? "worker"
                           : sc_proc_server(&s->procs[p])   ? "LLM server"
                                                             : "app";
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>", lx, ly - 10,
                color(s, p));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"lg\">", lx + 16, ly);
        esc(f, s->procs[p].name);
        fprintf(f, " (%s)</text>\n", role);
        lx += 26 + 7.0 * (double)(strlen(s->procs[p].name) + strlen(role) + 3);
        if (lx > W_LEFT + W_CHART + 80) {
            lx = W_LEFT;
            ly += 18;
        }
    }
    if (s->n_procs > shown)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"lg\">+ %d more</text>\n", lx, ly, s->n_procs - shown);
    fprintf(f,
            "<text x=\"%d\" y=\"%.1f\" class=\"ax\">grey: driver slice \xc2\xb7 hatched: bytes outside any manager "
            "%s\xc2\xb7 dashed: budget (capacity - headroom) \xc2\xb7 "
            "\xe2\x96\xb2 load \xe2\x86\x93 bytes given back \xe2\x8a\x98 refused \xe2\x9c\x96 failed "
            "\xe2\x98\xa0 killed</text>\n",
            W_LEFT, ly + 20, sh.spill ? "\xc2\xb7 red: past the card (WDDM spill) " : "");
    for (int k = 0; k < n; k++)
        for (int c = 0; c < s->n_cards; c++)
            row(f, s, rs[k], &sh, c, W_LEFT + c * (W_CHART + W_SIDE), H_TOP + k * H_ROW(sh.pins), tmax, lo, hi);
    fprintf(f, "</svg>\n");
    return fclose(f) == 0 ? COMEM_OK : COMEM_EIO;
}
