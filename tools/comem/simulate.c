/*
 * tools/comem/simulate.c - `comem simulate SCENARIO`: replay a workload under each policy, side by side.
 *
 *   comem simulate SCENARIO [--policy comem|comfy-env|uncoordinated|all] [--semantics linux|wddm|uma]
 *                           [--json FILE] [--svg FILE] [--speed N] [--timeline POLICY|all|none] [--check]
 *
 * The scenario is parsed whole first: a malformed one gets "file:line: what
 * is wrong" and exit 2, and nothing runs. Each policy then runs on a fresh
 * simulated card (tools/simulate/run.c); the summary puts the policies side
 * by side, and the scenario's expectations are evaluated for each: comem's
 * are asserted (exit 1 when one fails), the others' recorded.
 * docs/scenarios.md is the manual.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "comem/common.h"
#include "simulate/report.h"
#include "simulate/run.h"
#include "simulate/scenario.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: comem simulate SCENARIO [--policy comem|comfy-env|uncoordinated|all]\n"
               "                      [--semantics linux|wddm|uma] [--json FILE] [--svg FILE] [--speed N]\n"
               "                      [--timeline comem|comfy-env|uncoordinated|all|none] [--check] [--figures]\n"
               "  Replays SCENARIO (docs/scenarios.md) with a real coordinator and one real process per\n"
               "  scenario process on a simulated card, under each policy, and prints the timeline and\n"
               "  the policies side by side. Exit 1 when one of comem's expectations fails, 2 on bad input.\n"
               "  --check parses the scenario and exits; --figures lists the figures expectations name.\n");
}

static int policy_of(const char *t)
{
    for (int i = 0; i < POL_COUNT; i++)
        if (!strcmp(t, sc_policy_names[i]))
            return i;
    return -1;
}

int cmd_simulate(int argc, char **argv)
{
    const char *file = NULL, *json = NULL, *svg = NULL, *pol = "all", *sem = NULL, *timeline = "comem";
    double speed = 0;
    bool check = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--figures")) {
            for (int m = 0; m < M_COUNT; m++)
                printf("%-16s %s\n", sc_metric_names[m], sc_metric_help[m]);
            return 0;
        } else if (!strcmp(a, "--check")) {
            check = true;
        } else if (v && !strcmp(a, "--policy")) {
            pol = argv[++i];
        } else if (v && !strcmp(a, "--semantics")) {
            sem = argv[++i];
        } else if (v && !strcmp(a, "--json")) {
            json = argv[++i];
        } else if (v && !strcmp(a, "--svg")) {
            svg = argv[++i];
        } else if (v && !strcmp(a, "--timeline")) {
            timeline = argv[++i];
        } else if (v && !strcmp(a, "--speed")) {
            char *end;
            speed = strtod(argv[++i], &end);
            if (*end || !(speed >= 1 && speed <= 1000)) {
                fprintf(stderr, "comem simulate: --speed is 1 to 1000 scenario seconds per second, not '%s'\n", v);
                return 2;
            }
        } else if (a[0] == '-' || file) {
            fprintf(stderr, "comem simulate: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        } else {
            file = a;
        }
    }
    if (!file) {
        usage(stderr);
        return 2;
    }
    bool want[POL_COUNT] = {false};
    if (!strcmp(pol, "all")) {
        for (int i = 0; i < POL_COUNT; i++)
            want[i] = true;
    } else if (policy_of(pol) >= 0) {
        want[policy_of(pol)] = true;
    } else {
        fprintf(stderr, "comem simulate: --policy is comem, comfy-env, uncoordinated or all, not '%s'\n", pol);
        return 2;
    }
    if (strcmp(timeline, "all") && strcmp(timeline, "none") && policy_of(timeline) < 0) {
        fprintf(stderr, "comem simulate: --timeline is a policy, all or none, not '%s'\n", timeline);
        return 2;
    }
    static scenario s; /* large: not on the stack */
    char err[512];
    if (sc_parse_file(file, &s, err, sizeof err) != COMEM_OK) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (sem && !sc_set_semantics(&s, sem)) {
        fprintf(stderr, "comem simulate: --semantics is linux, wddm or uma, not '%s'\n", sem);
        return 2;
    }
    if (speed > 0)
        s.speed = speed;
    if (check) {
        printf("%s: %d process(es), %d expectation(s): ok\n", file, s.n_procs, s.n_expect);
        return 0;
    }
    run_result res[POL_COUNT];
    run_result *rs[POL_COUNT];
    int n = 0, status = 0;
    for (int p = 0; p < POL_COUNT; p++) {
        if (!want[p])
            continue;
        run_result *r = &res[n];
        int rc = sim_run(&s, (sc_policy)p, getenv("COMEM_SIM_VERBOSE") != NULL, r);
        if (rc != COMEM_OK || !r->ran) {
            fprintf(stderr, "comem simulate: the %s run failed: %s\n", sc_policy_names[p],
                    r->error[0] ? r->error : comem_status_str(rc));
            status = 1;
        }
        rs[n++] = r;
        if (r->ran && (!strcmp(timeline, "all") || policy_of(timeline) == p)) {
            if (n == 1)
                printf("%s: %s\n", s.id, s.title);
            sim_print_timeline(&s, r);
        }
    }
    sim_print_summary(&s, rs, n);
    if (sim_print_expectations(&s, rs, n) > 0)
        status = 1;
    if (json) {
        if (sim_write_json(json, &s, rs, n) != COMEM_OK) {
            fprintf(stderr, "comem simulate: cannot write %s\n", json);
            status = 1;
        } else {
            printf("  JSON written to %s\n", json);
        }
    }
    if (svg) {
        if (sim_write_svg(svg, &s, rs, n) != COMEM_OK) {
            fprintf(stderr, "comem simulate: cannot write %s\n", svg);
            status = 1;
        } else {
            printf("  picture written to %s\n", svg);
        }
    }
    for (int k = 0; k < n; k++)
        sim_result_free(rs[k]);
    return status;
}
