/*
 * tools/comem/main.c - the comem command line.
 *
 *   comem [--socket PATH] [--json] COMMAND [ARGS]
 *
 * The global flags may come before or after the command (`comem --json status`
 * is `comem status --json`); --help anywhere on the line prints the command's
 * help; --version prints the version. comem(1) is the manual, exit codes included:
 * 0 success, 1 the command could not do what was asked (no coordinator, a refusal,
 * a failed expectation, output that could not be written), 2 a usage error.
 * `comem run [FLAGS] -- PROGRAM [ARGS]` is the one exception: what follows -- is
 * the program's own, never scanned for --help nor given the global flags.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"

#ifndef COMEM_VERSION
#define COMEM_VERSION "0.1.0"
#endif

static void usage(FILE *f)
{
    fprintf(f,
            "usage: comem [--socket PATH] [--json] COMMAND [ARGS]\n\n"
            "commands:\n"
            "  status                       the machine's memory as the coordinator's ledger sees it\n"
            "  watch                        the same, live and full screen (q quits)\n"
            "  metrics                      the coordinator's figures in Prometheus' text format\n"
            "  release --holder NAME | --pid PID | --all  [--device N] [--bytes SIZE]\n"
            "                               ask holders to release memory now, with receipts\n"
            "  devices [--device SPEC]      the cards and host RAM as comem reads them\n"
            "  calc RULE [--flag VALUE]...  evaluate one memory rule and print a JSON object\n"
            "  simulate SCENARIO            replay a workload under comem, comfy-env and no coordination\n"
            "  demo                         three processes share a simulated 24 GiB card\n"
            "  run -- PROGRAM [ARGS]        run an unmodified CUDA program as a member of the ledger\n"
            "  stop                         end the coordinator cleanly (its sessions end with it)\n"
            "  version                      print the version\n\n"
            "global flags (before or after the command):\n"
            "  --socket PATH  the coordinator's socket (default: COMEM_SOCKET, else the per-user socket)\n"
            "  --json         machine-readable output (docs/json.md); --help anywhere: the command's help\n\n"
            "Run 'comem COMMAND --help' for a command's flags; man comem for the manual.\n");
}

static int g_out_err; /* the errno of the first write to stdout that failed; 0 while none has */

void cli_flush(void)
{
    /* The flush fails with its own errno; a write that failed before it (the stream's error flag)
       left errno saying why, as long as nothing failed since: hence right after the write. */
    if ((fflush(stdout) != 0 || ferror(stdout)) && !g_out_err)
        g_out_err = errno ? errno : EIO;
}

int cli_finish_output(int rc)
{
    cli_flush();
    if (!g_out_err)
        return rc;
    if (g_out_err == EPIPE)
        return 0; /* nobody is reading any more: nothing to report to */
    fprintf(stderr, "comem: cannot write output: %s\n", strerror(g_out_err));
    return rc ? rc : 1;
}

typedef int (*cmd_fn)(int, char **);

typedef struct command {
    const char *name;
    cmd_fn fn;
    bool socket; /* takes --socket */
    bool json;   /* takes --json as a flag (calc prints JSON anyway; simulate's --json names a file) */
} command;

static const command k_commands[] = {
    {"status", cmd_status, true, true},      {"watch", cmd_watch, true, false},
    {"metrics", cmd_metrics, true, true},    {"release", cmd_release, true, true},
    {"devices", cmd_devices, false, true},   {"calc", cmd_calc, false, false},
    {"simulate", cmd_simulate, false, false}, {"demo", cmd_demo, false, false},
    {"demo-worker", cmd_demo_worker, false, false}, /* the demo's own workers */
    {"run", cmd_run, true, false},           {"stop", cmd_stop, true, true},
};

static bool is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

int main(int argc, char **argv)
{
    const char *socket = NULL;
    bool json = false;
    int i = 1;
    /* Global flags before the command. */
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (is_help(a)) {
            usage(stdout);
            return cli_finish_output(0);
        } else if (!strcmp(a, "--version")) {
            printf("comem %s\n", COMEM_VERSION);
            return cli_finish_output(0);
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--socket") && i + 1 < argc) {
            socket = argv[++i];
        } else if (!strncmp(a, "--socket=", 9)) {
            socket = a + 9;
        } else {
            fprintf(stderr, "comem: unknown or incomplete flag '%s' before the command (see comem --help)\n", a);
            return 2;
        }
    }
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[i++];
    if (!strcmp(name, "version")) {
        printf("comem %s\n", COMEM_VERSION);
        return cli_finish_output(0);
    }
    if (!strcmp(name, "help")) {
        usage(stdout);
        return cli_finish_output(0);
    }
    const command *cmd = NULL;
    for (size_t k = 0; k < sizeof k_commands / sizeof k_commands[0]; k++)
        if (!strcmp(name, k_commands[k].name))
            cmd = &k_commands[k];
    if (!cmd) {
        fprintf(stderr, "comem: unknown command '%s' (see comem --help)\n", name);
        return 2;
    }
    int rest = argc - i;
    if (!strcmp(cmd->name, "run")) { /* PROGRAM's arguments are its own: no --help scan, nothing appended */
        for (int k = i; k < argc && strcmp(argv[k], "--") != 0; k++) {
            if (is_help(argv[k])) { /* --help anywhere before the program */
                char *help[] = {"--help", NULL};
                return cli_finish_output(cmd_run(1, help));
            }
        }
        if (json) {
            fprintf(stderr, "comem run: takes no --json\n");
            return 2;
        }
        return cmd_run_at(socket, rest, argv + i);
    }
    /* A reader that went away (comem metrics | head) ends the output quietly: writes fail with EPIPE
       instead of the signal killing us (exit 141); `run` above keeps the default for its program. */
#ifdef SIGPIPE /* Windows has none: a write to a closed pipe fails there already */
    signal(SIGPIPE, SIG_IGN);
#endif
    if (strcmp(cmd->name, "demo-worker") != 0) {
        for (int k = i; k < argc; k++) {
            if (is_help(argv[k])) { /* --help anywhere on the line */
                char *help[] = {"--help", NULL};
                return cli_finish_output(cmd->fn(1, help));
            }
        }
    }
    if ((socket && !cmd->socket) || (json && !cmd->json && strcmp(cmd->name, "calc") != 0)) {
        fprintf(stderr, "comem %s: takes no %s%s\n", cmd->name, socket && !cmd->socket ? "--socket" : "--json",
                !strcmp(cmd->name, "simulate") ? " flag (its --json FILE writes the report to a file)" : "");
        return 2;
    }
    /* The command's own arguments, then the global flags it takes: one parser sees them all. */
    char **args = calloc((size_t)rest + 4, sizeof *args);
    if (!args)
        return 1;
    int n = 0;
    for (int k = i; k < argc; k++)
        args[n++] = argv[k];
    bool has_json = false;
    for (int k = 0; k < n; k++)
        has_json |= !strcmp(args[k], "--json");
    if (socket) {
        args[n++] = "--socket";
        args[n++] = (char *)socket;
    }
    if (json && cmd->json && !has_json)
        args[n++] = "--json";
    int rc = cmd->fn(n, args);
    free(args);
    return cli_finish_output(rc);
}
