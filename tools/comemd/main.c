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
 * another coordinator runs on the socket.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/name.h"
#include "base/size.h"
#include "comem/comem.h"
#include "comem/common.h"
#include "coord/coord.h"
#include "os/proc.h"
#include "jsonout.h"
#include "metrics.h"
#include "probe/hostram.h"
#include "snapshot.h"

#ifndef COMEM_VERSION
#define COMEM_VERSION "0.1.0"
#endif

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

int main(int argc, char **argv)
{
    comem_coord_config cfg;
    char err[256];
    if (comem_coord_config_defaults(&cfg, err, sizeof err) != COMEM_OK) {
        comem_error("%s", err);
        return 2;
    }
    for (int i = 1; i < argc; i++) { /* --help and --version win wherever they are */
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--version")) {
            printf("comemd %s\n", COMEM_VERSION);
            return 0;
        }
    }
    const char *metrics_path = NULL;
    double metrics_interval = 5;
    const char *env = getenv("COMEM_SOCKET");
    if (env && *env)
        snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s", env);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--check")) {
            cfg.check = true;
        } else if (!strcmp(a, "--socket") && v) {
            if ((size_t)snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s", v) >= sizeof cfg.socket_path) {
                comem_error("--socket: path too long");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--device") && v) {
            snprintf(cfg.device_spec, sizeof cfg.device_spec, "%s", v);
            i++;
        } else if (!strcmp(a, "--exit-idle") && v) {
            if (comem_parse_seconds("--exit-idle", v, &cfg.exit_idle_s, err, sizeof err) != COMEM_OK) {
                comem_error("%s", err);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--idle-release") && v) {
            if (comem_parse_seconds("--idle-release", v, &cfg.idle_release_s, err, sizeof err) != COMEM_OK) {
                comem_error("%s", err);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--hello-timeout") && v) {
            double secs;
            if (comem_parse_seconds("--hello-timeout", v, &secs, err, sizeof err) != COMEM_OK || secs > 3600) {
                comem_error("%s", err[0] ? err : "--hello-timeout: at most 3600 seconds");
                return 2;
            }
            cfg.hello_timeout_ms = secs * 1000 < 1 ? 1 : (int)(secs * 1000);
            i++;
        } else if (!strcmp(a, "--max-wait") && v) {
            double secs;
            if (comem_parse_seconds("--max-wait", v, &secs, err, sizeof err) != COMEM_OK || secs < 0.1 || secs > 3600) {
                comem_error("%s", err[0] ? err : "--max-wait: from 0.1 to 3600 seconds");
                return 2;
            }
            cfg.max_wait_ms = (int)(secs * 1000);
            i++;
        } else if (!strcmp(a, "--metrics") && v) {
            metrics_path = v;
            i++;
        } else if (!strcmp(a, "--metrics-interval") && v) {
            if (comem_parse_seconds("--metrics-interval", v, &metrics_interval, err, sizeof err) != COMEM_OK ||
                metrics_interval < 0.1 || metrics_interval > 3600) {
                comem_error("%s", err[0] ? err : "--metrics-interval: 0.1 to 3600 seconds");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--started-by") && v) {
            /* Shown by comem status and logged: the rule every name follows, and a length the field holds. */
            if (!*v || strlen(v) >= sizeof cfg.started_by) {
                comem_error("--started-by: 1 to %zu bytes", sizeof cfg.started_by - 1);
                return 2;
            }
            if (comem_name_check(v, err, sizeof err) != COMEM_OK) {
                comem_error("--started-by: %s", err);
                return 2;
            }
            snprintf(cfg.started_by, sizeof cfg.started_by, "%s", v);
            i++;
        } else if (!strcmp(a, "--ram") && v) {
            int64_t budget;
            if (strcmp(v, "off") != 0 && comem_hostram_parse(v, &budget, err, sizeof err) != COMEM_OK) {
                comem_error("--ram: %s", err);
                return 2;
            }
            snprintf(cfg.ram_spec, sizeof cfg.ram_spec, "%s", strcmp(v, "off") != 0 ? v : "");
            cfg.ram_off = strcmp(v, "off") == 0; /* with no card found: refuse to start rather than manage RAM alone */
            i++;
        } else if (!strcmp(a, "--reserve") && v) {
            double bytes;
            if (comem_parse_size(v, &bytes, err, sizeof err) != COMEM_OK || bytes >= 9.2e18) {
                comem_error("--reserve: %s", err[0] ? err : "too large");
                return 2;
            }
            cfg.reserve_base = (int64_t)bytes;
            i++;
        } else {
            fprintf(stderr, "comemd: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
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
    int rc = comem_coord_create(&cfg, &srv);
    g_srv = srv;
    if (rc == COMEM_OK && g_stop_asked)
        comem_coord_request_stop(srv); /* asked while it was starting: run returns at once, cleaning up */
    if (rc == COMEM_EEXIST) {
        char where[sizeof cfg.socket_path];
        if (cfg.socket_path[0])
            snprintf(where, sizeof where, "%s", cfg.socket_path);
        else if (comem_default_socket(where, sizeof where) != COMEM_OK)
            snprintf(where, sizeof where, "the default socket");
        say_taken(cfg.socket_path[0] ? cfg.socket_path : NULL, where);
        return COMEM_COMEMD_EXIT_TAKEN; /* 3: not a failure to retry (the unit's RestartPreventExitStatus=3) */
    }
    if (rc == COMEM_EINVAL) /* a setting it was given (--device, the environment): already named in one line */
        return 2;
    if (rc != COMEM_OK) {
        comem_error("cannot start: %s", comem_status_str(rc));
        return 1;
    }
    if (cfg.started_by[0])
        comem_info("coordinator: started by %s", cfg.started_by);
    metrics_writer *mw = metrics_path ? metrics_writer_start(comem_coord_socket(srv), metrics_path, metrics_interval)
                                      : NULL;
    if (metrics_path && !mw) {
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
