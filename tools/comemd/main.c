/*
 * tools/comemd/main.c - the coordinator as a daemon.
 *
 *   comemd [--socket PATH] [--device SPEC] [--idle-release SECONDS] [--check]
 *
 * Runs in the foreground (a service manager backgrounds it), logs to stderr,
 * and shuts down cleanly on SIGTERM or SIGINT: the socket is removed and every
 * session's connection closed. The token, if any, comes from COMEM_TOKEN.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/size.h"
#include "comem/common.h"
#include "coord/coord.h"

static comem_coord_srv *g_srv;

static void on_signal(int sig)
{
    (void)sig;
    if (g_srv)
        comem_coord_request_stop(g_srv); /* an eventfd write: async-signal-safe */
}

static void usage(FILE *f)
{
    fprintf(f, "usage: comemd [--socket PATH] [--device auto|nvml|sim[:...]] [--idle-release SECONDS] [--check]\n"
               "  The coordinator for comem clients on this machine. Logs to stderr; stops on SIGTERM.\n"
               "  Environment: COMEM_SOCKET, COMEM_DEVICE, COMEM_TOKEN (at most 127 bytes), COMEM_IDLE_SECONDS,\n"
               "  COMEM_CHECK, COMEM_LOG.\n");
}

int main(int argc, char **argv)
{
    comem_coord_config cfg;
    char err[256];
    if (comem_coord_config_defaults(&cfg, err, sizeof err) != COMEM_OK) {
        comem_error("%s", err);
        return 2;
    }
    const char *env = getenv("COMEM_SOCKET");
    if (env && *env)
        snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s", env);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--check")) {
            cfg.check = true;
        } else if (!strcmp(a, "--socket") && v) {
            snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s", v);
            i++;
        } else if (!strcmp(a, "--device") && v) {
            snprintf(cfg.device_spec, sizeof cfg.device_spec, "%s", v);
            i++;
        } else if (!strcmp(a, "--idle-release") && v) {
            if (comem_parse_seconds("--idle-release", v, &cfg.idle_release_s, err, sizeof err) != COMEM_OK) {
                comem_error("%s", err);
                return 2;
            }
            i++;
        } else {
            fprintf(stderr, "comemd: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    int rc = comem_coord_create(&cfg, &g_srv);
    if (rc == COMEM_EEXIST) {
        comem_error("another coordinator already answers on %s", cfg.socket_path[0] ? cfg.socket_path : "the default socket");
        return 1;
    }
    if (rc != COMEM_OK) {
        comem_error("cannot start: %s", comem_status_str(rc));
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    rc = comem_coord_run(g_srv);
    comem_info("coordinator: shutting down");
    comem_coord_destroy(g_srv);
    return rc == COMEM_OK ? 0 : 1;
}
