/*
 * tools/comem/main.c - the comem command line.
 *
 *   comem calc RULE [--flag VALUE]...   evaluate one rule, print JSON
 *   comem demo                          the walkthrough the README runs
 *   comem simulate SCENARIO             replay a workload under each policy (docs/scenarios.md)
 *   comem release --process NAME        ask a process to give memory back, with a receipt
 *   comem run -- PROGRAM [ARGS]         a CUDA program in the ledger, through libcomem_preload.so
 */
#include <stdio.h>
#include <string.h>

#include "cmds.h"

#ifndef COMEM_VERSION
#define COMEM_VERSION "0.1.0"
#endif

static void usage(FILE *f)
{
    fprintf(f,
            "usage: comem COMMAND [ARGS]\n\n"
            "commands:\n"
            "  calc RULE [--flag VALUE]...  evaluate one memory rule and print a JSON object\n"
            "  devices [--device SPEC]      the cards and host RAM as comem reads them\n"
            "  status [--socket PATH]       the machine's memory as the coordinator's ledger sees it\n"
            "  demo                         three processes share a simulated 24 GiB card\n"
            "  simulate SCENARIO            replay a workload under comem, comfy-env and no coordination\n"
            "  release --process NAME       ask a process to release memory now, with a receipt\n"
            "  run -- PROGRAM [ARGS]        run an unmodified CUDA program as a member of the ledger\n"
            "  version                      print the version\n\n"
            "Run 'comem COMMAND --help' for a command's flags.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "calc"))
        return cmd_calc(argc - 2, argv + 2);
    if (!strcmp(cmd, "status"))
        return cmd_status(argc - 2, argv + 2);
    if (!strcmp(cmd, "devices"))
        return cmd_devices(argc - 2, argv + 2);
    if (!strcmp(cmd, "demo-worker")) /* used by the demo to start its workers */
        return cmd_demo_worker(argc - 2, argv + 2);
    if (!strcmp(cmd, "demo"))
        return cmd_demo(argc - 2, argv + 2);
    if (!strcmp(cmd, "simulate"))
        return cmd_simulate(argc - 2, argv + 2);
    if (!strcmp(cmd, "release"))
        return cmd_release(argc - 2, argv + 2);
    if (!strcmp(cmd, "run"))
        return cmd_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("comem %s\n", COMEM_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "comem: unknown command '%s' (see comem --help)\n", cmd);
    return 2;
}
