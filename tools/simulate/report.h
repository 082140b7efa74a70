/*
 * tools/simulate/report.h - what one run leaves (run_result), and the figures, tables and files made from it.
 *
 * report.c computes the metrics and expectations and prints the timeline,
 * the side-by-side summary and the JSON; svg.c draws the picture.
 *
 * Third floor, on scenario.h and clock.h. run.c fills a run_result (sim_run
 * allocates its arrays, sim_result_free frees them: run.h) and calls
 * sim_compute on it; the command (tools/comem/simulate.c) prints and writes it.
 */
#ifndef COMEM_TOOLS_SIMULATE_REPORT_H
#define COMEM_TOOLS_SIMULATE_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "simulate/clock.h"
#include "simulate/scenario.h"

#define RUN_MAX_SAMPLES 6000

typedef struct run_result {
    sc_policy policy;
    int semantics;
    bool ran;
    char error[256];
    double wall_s; /* real seconds the run took */
    double values[M_COUNT];
    double per_card_peak[SC_MAX_CARDS];
    int64_t ctx_of[SC_MAX_PROCS]; /* context bytes per process at its last sample */
    /* end-of-run ledger figures (comem) */
    int64_t unattributed[SC_MAX_PROCS];
    bool expect_ok[SC_MAX_EXPECT];
    double expect_lhs[SC_MAX_EXPECT], expect_rhs[SC_MAX_EXPECT];
    int n_samples;
    run_sample *samples; /* owned */
    run_sample *marks;   /* owned: SC_MAX_MARKS, the readings of scenario.marks */
    bool mark_taken[SC_MAX_MARKS];
    int n_events;
    sh_event *events; /* owned, sorted by time */
} run_result;

/* Metrics, expectations and output (report.c, svg.c). */
void sim_compute(const scenario *s, run_result *r);
double sim_metric_value(const scenario *s, const run_result *r, const sc_term *t);
void sim_print_timeline(const scenario *s, const run_result *r);
void sim_print_summary(const scenario *s, run_result *const *rs, int n);
int sim_print_expectations(const scenario *s, run_result *const *rs, int n);
/*
 * Whether the summary and the picture show a metric for these runs: spill only on WDDM cards or where a
 * run spilled, the pinned rows only where a run pinned anything; every other metric always.
 */
bool sim_metric_shown(const scenario *s, run_result *const *rs, int n, int metric);
int sim_write_json(const char *path, const scenario *s, run_result *const *rs, int n);
int sim_write_svg(const char *path, const scenario *s, run_result *const *rs, int n);

/* Formats bytes compactly ("12.0G", "300M") for narrow tables. */
const char *sim_gib(double bytes, char *buf, size_t len);

#endif
