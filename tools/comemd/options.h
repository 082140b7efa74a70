/*
 * tools/comemd/options.h - comemd's command line: the environment's defaults, then the flags (found
 * by tools/common/args.h), each value checked as it comes, into the coordinator's configuration and
 * the daemon's own settings.
 */
#ifndef COMEM_COMEMD_OPTIONS_H
#define COMEM_COMEMD_OPTIONS_H

#include "coord/coord.h"

typedef struct comemd_options {
    comem_coord_config cfg;   /* what the coordinator is created with */
    const char *metrics_path; /* --metrics PATH (borrowed from argv); NULL: no metrics file */
    double metrics_interval;  /* --metrics-interval, in seconds (default 5) */
} comemd_options;

/*
 * Fills o from the environment (comem_coord_config_defaults, COMEM_SOCKET) and then from argv, in
 * the order given, a flag given again replacing the earlier one. --help (or -h) and --version win
 * wherever they are on the line: printed on stdout. Returns ARGS_GO (tools/common/args.h) when
 * comemd goes on; else its exit status: 0 after --help or --version, 2 after a refusal, said in
 * one line (an unknown or incomplete argument followed by the usage).
 */
int comemd_options_parse(int argc, char **argv, comemd_options *o);

#endif
