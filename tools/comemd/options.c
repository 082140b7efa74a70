/* tools/comemd/options.c - comemd's command line (options.h). */
#include "options.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/name.h"
#include "base/size.h"
#include "comem/common.h"
#include "common/args.h"
#include "probe/hostram.h"

#ifndef COMEM_VERSION
#define COMEM_VERSION "0.1.0"
#endif

static void usage(FILE *f)
{
    fprintf(f,
            "usage: comemd [--socket PATH] [--device auto|nvml|sim[:...]] [--idle-release SECONDS]\n"
            "              [--hello-timeout SECONDS] [--max-wait SECONDS] [--reserve SIZE] [--ram machine|SIZE|off]\n"
            "              [--check] [--metrics PATH [--metrics-interval SECONDS]] [--started-by TEXT]\n"
            "              [--exit-idle SECONDS] [--version]\n"
            "  The coordinator for comem clients on this machine. Logs to stderr; stops on SIGTERM.\n"
            "  --socket PATH           where to listen (default: COMEM_SOCKET, else the per-user socket);\n"
            "                          an existing file there is replaced only if it is a stale socket of\n"
            "                          this user; PATH.lock (kept) makes a second daemon on PATH refuse to start\n"
            "  --device SPEC           the cards to coordinate (default: COMEM_DEVICE, else auto: NVML when it\n"
            "                          finds a GPU, else no card, and host RAM alone is managed); a simulated\n"
            "                          card only when named (sim[:SIZE]...)\n"
            "  --idle-release SECONDS  ask a holder idle this long to release (default 60, or COMEM_IDLE_SECONDS)\n"
            "  --hello-timeout SECONDS close a connection that has not said HELLO by then (default 5)\n"
            "  --max-wait SECONDS      the longest an admission waits for room, whatever its timeout asks; it is\n"
            "                          answered then with what came back (default 60)\n"
            "  --reserve SIZE          the reserve base hosts keep on every card (e.g. 400MiB); when given, no\n"
            "                          host can change it; without it the first host to join sets it\n"
            "  --ram machine|SIZE|off  host RAM as the last device (docs/hostram.md): the machine's (or its\n"
            "                          cgroup's) RAM, or a bounded budget of SIZE (tests); default COMEM_RAM, else\n"
            "                          off where there is a card and machine where there is none; off with no card:\n"
            "                          nothing to serve, comemd refuses to start\n"
            "  --check                 verify the ledger after every mutation (tests, debugging)\n"
            "  --metrics PATH          keep PATH current with the Prometheus text format (comem metrics),\n"
            "                          rewritten atomically (node_exporter's textfile collector: name it *.prom)\n"
            "  --metrics-interval SECONDS  how often (default 5)\n"
            "  --started-by TEXT       who started this daemon, shown by comem status (at most 127 bytes of UTF-8,\n"
            "                          no control characters); a client that starts one passes its name and pid\n"
            "  --exit-idle SECONDS     exit once no process has been connected for this long (what a client\n"
            "                          that starts comemd passes: it goes away after its last client); default never\n"
            "  --version               print the version\n"
            "  Environment: COMEM_SOCKET, COMEM_DEVICE, COMEM_RAM, COMEM_TOKEN (at most 127 bytes), COMEM_IDLE_SECONDS,\n"
            "  COMEM_CHECK, COMEM_LOG, COMEM_RUNTIME_DIR (the per-user folder of the default socket: mode 0700,\n"
            "  yours; default $XDG_RUNTIME_DIR/comem, else /tmp/comem-UID).\n");
}

enum {
    F_CHECK, F_SOCKET, F_DEVICE, F_EXIT_IDLE, F_IDLE_RELEASE, F_HELLO_TIMEOUT, F_MAX_WAIT, F_METRICS,
    F_METRICS_INTERVAL, F_STARTED_BY, F_RAM, F_RESERVE, N_SPECS
};
/* Every value is checked by apply(), as it comes: the parser only finds the flags. */
static const arg_spec k_specs[N_SPECS] = {
    [F_CHECK] = {"check", ARG_FLAG, false},
    [F_SOCKET] = {"socket", ARG_STRING, false},
    [F_DEVICE] = {"device", ARG_STRING, false},
    [F_EXIT_IDLE] = {"exit-idle", ARG_STRING, false},
    [F_IDLE_RELEASE] = {"idle-release", ARG_STRING, false},
    [F_HELLO_TIMEOUT] = {"hello-timeout", ARG_STRING, false},
    [F_MAX_WAIT] = {"max-wait", ARG_STRING, false},
    [F_METRICS] = {"metrics", ARG_STRING, false},
    [F_METRICS_INTERVAL] = {"metrics-interval", ARG_STRING, false},
    [F_STARTED_BY] = {"started-by", ARG_STRING, false},
    [F_RAM] = {"ram", ARG_STRING, false},
    [F_RESERVE] = {"reserve", ARG_STRING, false},
};

/* SECONDS for flag, at most hi and at least lo; else the one line (the parser's reason, or range) and -1. */
static int seconds_within(const char *flag, const char *v, double lo, double hi, const char *range, double *out)
{
    char err[256] = "";
    if (comem_parse_seconds(flag, v, out, err, sizeof err) != COMEM_OK || *out < lo || *out > hi) {
        comem_error("%s", err[0] ? err : range);
        return -1;
    }
    return 0;
}

/* One flag's value into the configuration: 0, or -1 with the refusal said in one line. */
static int apply(int flag, const char *v, comemd_options *o)
{
    comem_coord_config *cfg = &o->cfg;
    char err[256];
    double secs;
    switch (flag) {
    case F_CHECK:
        cfg->check = true;
        return 0;
    case F_SOCKET:
        if ((size_t)snprintf(cfg->socket_path, sizeof cfg->socket_path, "%s", v) >= sizeof cfg->socket_path) {
            comem_error("--socket: path too long");
            return -1;
        }
        return 0;
    case F_DEVICE:
        snprintf(cfg->device_spec, sizeof cfg->device_spec, "%s", v);
        return 0;
    case F_EXIT_IDLE:
    case F_IDLE_RELEASE: {
        const char *name = flag == F_EXIT_IDLE ? "--exit-idle" : "--idle-release";
        double *out = flag == F_EXIT_IDLE ? &cfg->exit_idle_s : &cfg->idle_release_s;
        if (comem_parse_seconds(name, v, out, err, sizeof err) != COMEM_OK) {
            comem_error("%s", err);
            return -1;
        }
        return 0;
    }
    case F_HELLO_TIMEOUT:
        if (seconds_within("--hello-timeout", v, 0, 3600, "--hello-timeout: at most 3600 seconds", &secs) != 0)
            return -1;
        cfg->hello_timeout_ms = secs * 1000 < 1 ? 1 : (int)(secs * 1000);
        return 0;
    case F_MAX_WAIT:
        if (seconds_within("--max-wait", v, 0.1, 3600, "--max-wait: from 0.1 to 3600 seconds", &secs) != 0)
            return -1;
        cfg->max_wait_ms = (int)(secs * 1000);
        return 0;
    case F_METRICS:
        o->metrics_path = v;
        return 0;
    case F_METRICS_INTERVAL:
        return seconds_within("--metrics-interval", v, 0.1, 3600, "--metrics-interval: 0.1 to 3600 seconds",
                              &o->metrics_interval);
    case F_STARTED_BY:
        /* Shown by comem status and logged: the rule every name follows, and a length the field holds. */
        if (!*v || strlen(v) >= sizeof cfg->started_by) {
            comem_error("--started-by: 1 to %zu bytes", sizeof cfg->started_by - 1);
            return -1;
        }
        if (comem_name_check(v, err, sizeof err) != COMEM_OK) {
            comem_error("--started-by: %s", err);
            return -1;
        }
        snprintf(cfg->started_by, sizeof cfg->started_by, "%s", v);
        return 0;
    case F_RAM: {
        int64_t budget;
        bool off = strcmp(v, "off") == 0;
        if (!off && comem_hostram_parse(v, &budget, err, sizeof err) != COMEM_OK) {
            comem_error("--ram: %s", err);
            return -1;
        }
        snprintf(cfg->ram_spec, sizeof cfg->ram_spec, "%s", off ? "" : v);
        cfg->ram_off = off; /* with no card found: refuse to start rather than manage RAM alone */
        return 0;
    }
    case F_RESERVE: {
        double bytes;
        err[0] = '\0';
        if (comem_parse_size(v, &bytes, err, sizeof err) != COMEM_OK || bytes >= 9.2e18) {
            comem_error("--reserve: %s", err[0] ? err : "too large");
            return -1;
        }
        cfg->reserve_base = (int64_t)bytes;
        return 0;
    }
    }
    return -1;
}

int comemd_options_parse(int argc, char **argv, comemd_options *o)
{
    char err[256];
    *o = (comemd_options){.metrics_path = NULL, .metrics_interval = 5};
    if (comem_coord_config_defaults(&o->cfg, err, sizeof err) != COMEM_OK) {
        comem_error("%s", err);
        return 2;
    }
    static const char *const k_first[] = {"--help", "-h", "--version", NULL}; /* they win wherever they are */
    int first = args_find(argc - 1, argv + 1, k_first, false);
    if (first >= 0) {
        if (!strcmp(argv[1 + first], "--version"))
            printf("comemd %s\n", COMEM_VERSION);
        else
            usage(stdout);
        return 0;
    }
    const char *env = getenv("COMEM_SOCKET");
    if (env && *env)
        snprintf(o->cfg.socket_path, sizeof o->cfg.socket_path, "%s", env);
    for (int i = 1; i < argc;) {
        int at = i;
        const char *v;
        int flag = args_next(argc, argv, &i, k_specs, N_SPECS, ARGS_SEPARATE, &v, err, sizeof err);
        if (flag < 0) {
            fprintf(stderr, "comemd: unknown or incomplete argument '%s'\n", argv[at]);
            usage(stderr);
            return 2;
        }
        if (apply(flag, v, o) != 0)
            return 2;
    }
    return ARGS_GO;
}
