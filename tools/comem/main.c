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
 * Each command's row in k_commands says which global flags it takes and where
 * --help is looked for; each command parses the rest (tools/common/args.h).
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "common/args.h"

#ifndef COMEM_VERSION
#define COMEM_VERSION "0.1.0"
#endif

/* What main does with a command's line besides running it: the global flags it takes, where --help is looked for. */
enum {
    CMD_SOCKET = 1 << 0,      /* takes the global --socket: appended to its arguments */
    CMD_JSON = 1 << 1,        /* takes the global --json as its own flag: appended, unless its arguments have it */
    CMD_PRINTS_JSON = 1 << 2, /* prints JSON anyway (calc): the global --json is accepted and not passed on */
    CMD_PROGRAM = 1 << 3,     /* what follows -- is a program's own (run): --help is looked for only before it,
                                 the global --socket goes first (one given after the command wins), and SIGPIPE
                                 keeps its default, for the program to inherit */
    CMD_OWN_LINE = 1 << 4,    /* its arguments are never looked at for --help (the demo's workers: the demo's own) */
    CMD_BARE = 1 << 5,        /* runs at once, whatever follows it and whatever global flags came (version, help) */
};

typedef int (*cmd_fn)(int, char **);

typedef struct command {
    const char *name;
    cmd_fn fn;
    unsigned flags; /* CMD_* */
    const char *synopsis, *summary; /* its line in comem --help; NULL: not listed */
    const char *refusal; /* added to its refusal of a global flag, "comem NAME: takes no --json" (NULL: nothing) */
} command;

static int cmd_version(int argc, char **argv);
static int cmd_help(int argc, char **argv);

static const command k_commands[] = {
    {"status", cmd_status, CMD_SOCKET | CMD_JSON, "status", "the machine's memory as the coordinator's ledger sees it",
     NULL},
    {"watch", cmd_watch, CMD_SOCKET, "watch", "the same, live and full screen (q quits)", NULL},
    {"metrics", cmd_metrics, CMD_SOCKET | CMD_JSON, "metrics", "the coordinator's figures in Prometheus' text format",
     NULL},
    {"release", cmd_release, CMD_SOCKET | CMD_JSON,
     "release --holder NAME | --pid PID | --all  [--device N] [--bytes SIZE]",
     "ask holders to release memory now, with receipts", NULL},
    {"devices", cmd_devices, CMD_JSON, "devices [--device SPEC]", "the cards and host RAM as comem reads them", NULL},
    {"calc", cmd_calc, CMD_PRINTS_JSON, "calc RULE [--flag VALUE]...", "evaluate one memory rule and print a JSON object",
     NULL},
    {"simulate", cmd_simulate, 0, "simulate SCENARIO", "replay a workload under comem, comfy-env and no coordination",
     " flag (its --json FILE writes the report to a file)"},
    {"demo", cmd_demo, 0, "demo", "three processes share a simulated 24 GiB card", NULL},
    {"demo-worker", cmd_demo_worker, CMD_OWN_LINE, NULL, NULL, NULL}, /* the demo's own workers */
    {"run", cmd_run, CMD_SOCKET | CMD_PROGRAM, "run -- PROGRAM [ARGS]",
     "run an unmodified CUDA program as a member of the ledger", NULL},
    {"stop", cmd_stop, CMD_SOCKET | CMD_JSON, "stop", "end the coordinator cleanly (its sessions end with it)", NULL},
    {"version", cmd_version, CMD_BARE, "version", "print the version", NULL},
    {"help", cmd_help, CMD_BARE, NULL, NULL, NULL},
};
#define N_COMMANDS (sizeof k_commands / sizeof k_commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: comem [--socket PATH] [--json] COMMAND [ARGS]\n\ncommands:\n");
    for (size_t k = 0; k < N_COMMANDS; k++) {
        const command *c = &k_commands[k];
        if (!c->synopsis)
            continue;
        if (strlen(c->synopsis) > 28) /* a synopsis too wide for the column: its summary on the next line */
            fprintf(f, "  %s\n  %-28s %s\n", c->synopsis, "", c->summary);
        else
            fprintf(f, "  %-28s %s\n", c->synopsis, c->summary);
    }
    fprintf(f,
            "\nglobal flags (before or after the command):\n"
            "  --socket PATH  the coordinator's socket (default: COMEM_SOCKET, else the per-user socket)\n"
            "  --json         machine-readable output (docs/json.md); --help anywhere: the command's help\n\n"
            "Run 'comem COMMAND --help' for a command's flags; man comem for the manual.\n");
}

static int cmd_version(int argc, char **argv)
{
    (void)argc, (void)argv;
    printf("comem %s\n", COMEM_VERSION);
    return 0;
}

static int cmd_help(int argc, char **argv)
{
    (void)argc, (void)argv;
    usage(stdout);
    return 0;
}

/* The command's own arguments and the global flags it takes, given to it as one line: one parser sees them all. */
static int run_command(const command *cmd, const char *socket, bool json, int argc, char **argv)
{
    char **args = calloc((size_t)argc + 4, sizeof *args);
    if (!args)
        return 1;
    int n = 0;
    bool program = cmd->flags & CMD_PROGRAM, has_json = false;
    if (socket && program) {
        args[n++] = "--socket";
        args[n++] = (char *)socket;
    }
    for (int k = 0; k < argc; k++) {
        args[n++] = argv[k];
        has_json |= !strcmp(argv[k], "--json");
    }
    if (socket && !program) {
        args[n++] = "--socket";
        args[n++] = (char *)socket;
    }
    if (json && (cmd->flags & CMD_JSON) && !has_json)
        args[n++] = "--json";
    int rc = cmd->fn(n, args);
    free(args);
    return rc;
}

int main(int argc, char **argv)
{
    const char *socket = NULL;
    bool json = false;
    int i = 1;
    /* Global flags before the command. */
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            return cli_finish_output(cmd_help(0, NULL));
        } else if (!strcmp(a, "--version")) {
            return cli_finish_output(cmd_version(0, NULL));
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
    const command *cmd = NULL;
    for (size_t k = 0; k < N_COMMANDS; k++)
        if (!strcmp(name, k_commands[k].name))
            cmd = &k_commands[k];
    if (!cmd) {
        fprintf(stderr, "comem: unknown command '%s' (see comem --help)\n", name);
        return 2;
    }
    if (cmd->flags & CMD_BARE)
        return cli_finish_output(cmd->fn(0, NULL));
    bool program = cmd->flags & CMD_PROGRAM;
    /* A reader that went away (comem metrics | head) ends the output quietly: writes fail with EPIPE
       instead of the signal killing us (exit 141); a program that `run` starts keeps the default. */
#ifdef SIGPIPE /* Windows has none: a write to a closed pipe fails there already */
    if (!program)
        signal(SIGPIPE, SIG_IGN);
#endif
    if (!(cmd->flags & CMD_OWN_LINE) && args_asks_help(argc - i, argv + i, program)) { /* --help anywhere */
        char *help[] = {"--help", NULL};
        return cli_finish_output(cmd->fn(1, help));
    }
    bool no_socket = socket && !(cmd->flags & CMD_SOCKET);
    if (no_socket || (json && !(cmd->flags & (CMD_JSON | CMD_PRINTS_JSON)))) {
        fprintf(stderr, "comem %s: takes no %s%s\n", cmd->name, no_socket ? "--socket" : "--json",
                cmd->refusal ? cmd->refusal : "");
        return 2;
    }
    return cli_finish_output(run_command(cmd, socket, json, argc - i, argv + i));
}
