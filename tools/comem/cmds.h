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

/*
 * Output that could not be written (a full disk, > /dev/full) is a failure, never a silent success.
 * cli_flush flushes stdout, for a command that shows its output as it goes, and keeps the first
 * failed write's errno; main ends every command that prints with cli_finish_output, which flushes
 * the rest and, when a write failed, says "comem: cannot write output: REASON" on stderr and
 * returns rc, or 1 where rc was 0. A reader that went away (EPIPE: comem status | head) is nobody
 * to tell: 0, quietly. A write larger than stdout's buffer (a whole JSON document, the metrics text)
 * goes out at once and, failing, leaves nothing for the last flush: its command calls cli_flush
 * right after it, while errno still says why.
 */
void cli_flush(void);
int cli_finish_output(int rc);

#endif
