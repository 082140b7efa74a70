/*
 * tools/comemd/main.c - the coordinator as a daemon.
 *
 *   comemd [--socket PATH] [--device SPEC] [--idle-release SECONDS] [--hello-timeout SECONDS]
 *          [--max-wait SECONDS] [--reserve SIZE] [--ram machine|SIZE|off] [--check] [--metrics PATH [--metrics-interval SECONDS]]
 *          [--started-by TEXT] [--version]
 *
 * Runs in the foreground (a service manager backgrounds it), logs to stderr,
 * and shuts down cleanly on SIGTERM or SIGINT (on Windows: Ctrl-C, Ctrl-Break,
 * the console closed, log-off, shutdown): every session's connection is closed
 * and the socket it created is removed (nothing it did not create).
 * The token, if any, comes from COMEM_TOKEN. comemd(8) is the manual, exit
 * codes included: 0 after a clean stop, 1 when it cannot start or the loop
 * fails, 2 for bad arguments or environment, 3 (COMEM_COMEMD_EXIT_TAKEN) when
 * another coordinator runs on the socket. The command line is options.c's.
 */
#include <signal.h>
#include <stdio.h>

#include "base/log.h"
#include "comem/comem.h"
#include "comem/common.h"
#include "common/args.h"
#include "common/jsonout.h"
#include "common/snapshot.h"
#include "coord/coord.h"
#include "metrics.h"
#include "options.h"
#include "os/proc.h"

static comem_coord_srv *volatile g_srv;
static volatile sig_atomic_t g_stop_asked; /* a signal before the coordinator existed */

static void on_stop(void)
{
    g_stop_asked = 1;
    comem_coord_srv *srv = g_srv;
    if (srv)
        comem_coord_request_stop(srv); /* a wake-up of the loop: an eventfd write, async-signal-safe */
}

/*
 * The line a second comemd leaves when another holds the socket's lock (sock: the path as given, NULL for
 * the default one; where: that path resolved, for the reader). It asks the running one for its status, as
 * `comem status` does, to name its pid and who started it; one that does not answer (it holds the lock
 * and is still starting) is said so, with the probe's reason. Every variant begins "another coordinator
 * already runs on PATH", for a person; a program that started this comemd reads the lost start from its exit
 * status (COMEM_COMEMD_EXIT_TAKEN: python/comem/autostart.py).
 */
static void say_taken(const char *sock, const char *where)
{
    char why[512] = "";
    json_object *root = snapshot_fetch(sock, "comemd", 1000, why, sizeof why);
    json_object *co = root ? jget(root, "coordinator") : NULL;
    long long pid = co ? (long long)jget_int(co, "pid", -1) : -1;
    if (pid > 0) {
        char by[200] = "";
        if (jget(co, "started_by")) /* null: nobody said (a service manager, a person) */
            snprintf(by, sizeof by, ", started by %s", jget_str(co, "started_by"));
#ifdef _WIN32
        comem_error("another coordinator already runs on %s: pid %lld%s (`comem status --socket %s` shows it)", where,
                    pid, by, where);
#else
        comem_error("another coordinator already runs on %s: pid %lld%s (`comem status --socket %s` shows it, "
                    "`comem stop --socket %s` ends it)",
                    where, pid, by, where, where);
#endif
    } else {
        comem_error("another coordinator already runs on %s: it holds the socket's lock and does not answer yet (%s); "
                    "`comem status --socket %s` names its pid once it does",
                    where, why[0] ? why : "its status could not be read", where);
    }
    if (root)
        json_object_put(root);
}

int main(int argc, char **argv)
{
    comemd_options o;
    int rc = comemd_options_parse(argc, argv, &o);
    if (rc != ARGS_GO)
        return rc;
    comem_coord_config *cfg = &o.cfg;
    /* A daemon may hold a connection and a process watch per session. */
    comem_proc_raise_open_limit();
    /* Shut to the user's other processes (not dumpable; on Windows a process access list): none can
       reach comemd's memory or descriptors, so each session's booking area stays between comemd and
       that session (docs/booking.md). */
    if (comem_proc_protect_self() != COMEM_OK)
        comem_warn("cannot shut comemd to this user's other processes; they can reach its memory");
    /* Before the socket exists: a stop asked the moment it listens still removes it (a service
       manager, or a test, that stops a daemon it just saw answer). */
    comem_proc_on_stop(on_stop);
    comem_coord_srv *srv = NULL;
    rc = comem_coord_create(cfg, &srv);
    g_srv = srv;
    if (rc == COMEM_OK && g_stop_asked)
        comem_coord_request_stop(srv); /* asked while it was starting: run returns at once, cleaning up */
    if (rc == COMEM_EEXIST) {
        char where[sizeof cfg->socket_path];
        if (cfg->socket_path[0])
            snprintf(where, sizeof where, "%s", cfg->socket_path);
        else if (comem_default_socket(where, sizeof where) != COMEM_OK)
            snprintf(where, sizeof where, "the default socket");
        say_taken(cfg->socket_path[0] ? cfg->socket_path : NULL, where);
        return COMEM_COMEMD_EXIT_TAKEN; /* 3: not a failure to retry (the unit's RestartPreventExitStatus=3) */
    }
    if (rc == COMEM_EINVAL) /* a setting it was given (--device, the environment): already named in one line */
        return 2;
    if (rc != COMEM_OK) {
        comem_error("cannot start: %s", comem_status_str(rc));
        return 1;
    }
    if (cfg->started_by[0])
        comem_info("coordinator: started by %s", cfg->started_by);
    metrics_writer *mw = o.metrics_path ? metrics_writer_start(comem_coord_socket(srv), o.metrics_path, o.metrics_interval)
                                        : NULL;
    if (o.metrics_path && !mw) {
        g_srv = NULL; /* no signal reaches a destroyed coordinator */
        comem_coord_destroy(srv);
        return 1;
    }
    rc = comem_coord_run(srv);
    metrics_writer_stop(mw); /* before the coordinator goes: its last snapshot, then comem_up 0 */
    comem_info("coordinator: shutting down");
    g_srv = NULL; /* no signal reaches a destroyed coordinator */
    comem_coord_destroy(srv);
    return rc == COMEM_OK ? 0 : 1;
}
