/*
 * tools/comem/metrics.c - `comem metrics`: the coordinator's figures in Prometheus' text format.
 *
 *   comem metrics [--socket PATH] [--timeout SECONDS] [--json]
 *
 * One snapshot, printed as the text exposition format (prom.c lists the
 * families). --json prints the same snapshot as `comem status --json`, whose
 * "counters" object carries the counters and the latency histogram. For a
 * file a node_exporter textfile collector reads, run `comemd --metrics PATH`,
 * which rewrites it atomically. Exit status: 0, 1 when no coordinator answers
 * (nothing is printed), 2 for bad arguments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#include <fcntl.h>
#include <io.h>
#endif

#include "args.h"
#include "cmds.h"
#include "jsonout.h"
#include "prom.h"
#include "snapshot.h"

static const arg_spec k_specs[] = {
    {"socket", ARG_STRING, false},
    {"timeout", ARG_STRING, false},
    {"json", ARG_FLAG, false},
    {"pretty", ARG_FLAG, false},
};
#define N_SPECS (sizeof k_specs / sizeof k_specs[0])

int cmd_metrics(int argc, char **argv)
{
    if (argc > 0 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        printf("usage: comem metrics [--socket PATH] [--timeout SECONDS] [--json]\n"
               "  Prints the coordinator's figures in the Prometheus text exposition format: per device\n"
               "  capacity, free, reserve, attributed, unattributed, overcommit; per process and holder\n"
               "  resident and granted bytes; counters and the admission latency histogram.\n"
               "  comemd --metrics PATH keeps a file of the same text for node_exporter's textfile collector.\n");
        return 0;
    }
    arg_value v[N_SPECS];
    char err[512];
    if (args_parse(argc, argv, k_specs, N_SPECS, v, err, sizeof err) != 0) {
        fprintf(stderr, "comem metrics: %s\n", err);
        return 2;
    }
    int timeout_ms = snapshot_timeout_ms(v[1].set ? v[1].str : NULL, err, sizeof err);
    if (timeout_ms < 0) {
        fprintf(stderr, "comem metrics: %s\n", err);
        return 2;
    }
    json_object *st = snapshot_fetch(v[0].set ? v[0].str : NULL, "comem-metrics", timeout_ms, err, sizeof err);
    if (!st) {
        fprintf(stderr, "comem metrics: %s\n", err);
        return 1;
    }
    int rc = 0;
    if (v[2].set) {
        jprint(st, v[3].set);
        cli_flush(); /* a document past stdout's buffer: why a write failed is known only now */
    } else {
        char *text = comem_prom_text(st);
#ifdef _WIN32
        _setmode(_fileno(stdout), _O_BINARY); /* the format's lines end in \n alone, on Windows too */
#endif
        if (text) {
            fputs(text, stdout);
            cli_flush(); /* the text is past stdout's buffer: why a write failed is known only now */
        } else
            rc = 1;
        free(text);
    }
    json_object_put(st);
    return rc;
}
