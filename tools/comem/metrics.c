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

#include "cmds.h"
#include "common/args.h"
#include "common/jsonout.h"
#include "common/prom.h"
#include "common/snapshot.h"

enum { F_SOCKET, F_TIMEOUT, F_JSON, F_PRETTY, N_SPECS };
static const arg_spec k_specs[N_SPECS] = {
    [F_SOCKET] = {"socket", ARG_STRING, false},
    [F_TIMEOUT] = {"timeout", ARG_STRING, false},
    [F_JSON] = {"json", ARG_FLAG, false},
    [F_PRETTY] = {"pretty", ARG_FLAG, false},
};
static const arg_command k_cmd = {
    "comem metrics",
    "usage: comem metrics [--socket PATH] [--timeout SECONDS] [--json]\n"
    "  Prints the coordinator's figures in the Prometheus text exposition format: per device\n"
    "  capacity, free, reserve, attributed, unattributed, overcommit; per process and holder\n"
    "  resident and granted bytes; counters and the admission latency histogram.\n"
    "  comemd --metrics PATH keeps a file of the same text for node_exporter's textfile collector.\n",
    k_specs, N_SPECS,
};

int cmd_metrics(int argc, char **argv)
{
    arg_value v[N_SPECS];
    int rc = args_begin(&k_cmd, argc, argv, v);
    if (rc != ARGS_GO)
        return rc;
    char err[512];
    int timeout_ms = snapshot_timeout_ms(v[F_TIMEOUT].set ? v[F_TIMEOUT].str : NULL, err, sizeof err);
    if (timeout_ms < 0)
        return args_fail(&k_cmd, v, 2, "%s", err);
    json_object *st = snapshot_fetch(v[F_SOCKET].set ? v[F_SOCKET].str : NULL, "comem-metrics", timeout_ms, err,
                                     sizeof err);
    if (!st)
        return args_fail(&k_cmd, v, 1, "%s", err);
    rc = 0;
    if (v[F_JSON].set) {
        jprint(st, v[F_PRETTY].set);
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
    args_free(v, N_SPECS);
    return rc;
}
