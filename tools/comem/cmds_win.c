/*
 * tools/comem/cmds_win.c - the subcommands comem.exe does not have on Windows (docs/windows.md),
 * each saying why instead: `run` puts a program under the Linux preload (LD_PRELOAD), `demo`,
 * `simulate` and `watch` start their processes with fork() or draw on a POSIX terminal, and `stop`
 * finds and signals comemd through /proc. Exit 2,
 * as for a command this build does not know.
 */
#include <stdio.h>

#include "cmds.h"

static int not_here(const char *cmd, const char *why)
{
    fprintf(stderr, "comem %s: not on Windows: %s (docs/windows.md)\n", cmd, why);
    return 2;
}

int cmd_run(int argc, char **argv)
{
    (void)argc, (void)argv;
    return not_here("run", "it loads the Linux preload library (LD_PRELOAD) into the program");
}

int cmd_demo(int argc, char **argv)
{
    (void)argc, (void)argv;
    return not_here("demo", "its workers are forked processes");
}

int cmd_demo_worker(int argc, char **argv)
{
    (void)argc, (void)argv;
    return not_here("demo-worker", "the demo's workers are forked processes");
}

int cmd_simulate(int argc, char **argv)
{
    (void)argc, (void)argv;
    return not_here("simulate", "the simulator's agents are forked processes");
}

int cmd_watch(int argc, char **argv)
{
    (void)argc, (void)argv;
    return not_here("watch", "it draws on a POSIX terminal; `comem status` shows the same figures");
}

int cmd_stop(int argc, char **argv)
{
    (void)argc, (void)argv;
    return not_here("stop", "it signals comemd through /proc; end comemd.exe with `taskkill /IM comemd.exe`");
}
