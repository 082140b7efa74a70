/* tools/comem/cmds.h - the subcommands of the comem CLI. */
#ifndef COMEM_TOOLS_CMDS_H
#define COMEM_TOOLS_CMDS_H

int cmd_calc(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_demo_worker(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_simulate(int argc, char **argv);
int cmd_release(int argc, char **argv);
int cmd_metrics(int argc, char **argv);
int cmd_watch(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_stop(int argc, char **argv);
/* `comem --socket PATH run ...`: cmd_run with the coordinator's socket given before the command (NULL: none). */
int cmd_run_at(const char *socket, int argc, char **argv);

#endif
