/*
 * tools/comem/stop.c - `comem stop`: ends the user's coordinator cleanly.
 *
 *   comem stop [--socket PATH] [--timeout SECONDS] [--json]
 *
 * Asks the coordinator that answers on the socket for its pid (its status),
 * makes sure that pid is a comemd of this user, sends it SIGTERM (what systemd
 * sends: it closes every session, removes its socket and exits 0) and waits
 * until it is gone. What the sessions held ends with them; their processes
 * carry on deciding locally, and the next client that starts one (the
 * autostart) gets a new coordinator. Exit status: 0 stopped, 1 nobody answers,
 * the pid is not a comemd of this user, or it did not stop within the
 * timeout, 2 bad arguments. (Windows: cmds_win.c.)
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "cmds.h"
#include "common/args.h"
#include "common/jsonout.h"
#include "common/snapshot.h"

enum { F_SOCKET, F_TIMEOUT, F_JSON, F_PRETTY, N_SPECS };
static const arg_spec k_specs[N_SPECS] = {
    [F_SOCKET] = {"socket", ARG_STRING, false},
    [F_TIMEOUT] = {"timeout", ARG_STRING, false},
    [F_JSON] = {"json", ARG_FLAG, false},
    [F_PRETTY] = {"pretty", ARG_FLAG, false},
};
static const arg_command k_cmd = {
    "comem stop",
    "usage: comem stop [--socket PATH] [--timeout SECONDS] [--json]\n"
    "  Ends the coordinator that answers on the socket (default: COMEM_SOCKET, else the per-user\n"
    "  socket): SIGTERM to its pid, once that pid is a comemd of yours, then waits until it is gone\n"
    "  (--timeout, default 10 s). Its sessions end; their processes carry on deciding locally, and\n"
    "  the next client that starts a coordinator gets a new one.\n"
    "  Exit status: 0 stopped, 1 nobody answers, not a comemd of yours, or still running after\n"
    "  the timeout, 2 bad arguments.\n",
    k_specs, N_SPECS,
};

/* Whether pid is a process of this user running a program named comemd (why says what it is otherwise). */
static bool is_my_comemd(long pid, char *why, size_t len)
{
    char path[64], exe[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%ld", pid);
    if (stat(path, &st) != 0) {
        snprintf(why, len, "no process %ld", pid);
        return false;
    }
    if (st.st_uid != getuid()) {
        snprintf(why, len, "process %ld belongs to user %u, not to you", pid, (unsigned)st.st_uid);
        return false;
    }
    snprintf(path, sizeof path, "/proc/%ld/exe", pid);
    ssize_t n = readlink(path, exe, sizeof exe - 1);
    if (n < 0) {
        snprintf(why, len, "cannot see which program process %ld runs (%s)", pid, strerror(errno));
        return false;
    }
    exe[n] = '\0';
    const char *base = strrchr(exe, '/');
    base = base ? base + 1 : exe;
    /* " (deleted)": the binary was replaced (a rebuild, an upgrade) while it runs */
    if (strcmp(base, "comemd") != 0 && strcmp(base, "comemd (deleted)") != 0) {
        snprintf(why, len, "process %ld runs %s, not comemd", pid, exe);
        return false;
    }
    return true;
}

/* Gone, or a zombie its parent has not reaped yet (it has exited: its socket is closed and removed). */
static bool gone(long pid)
{
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return true;
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true;
    bool zombie = false;
    if (fgets(line, sizeof line, f)) {
        const char *close = strrchr(line, ')'); /* the name may hold spaces and parentheses */
        zombie = close && close[1] == ' ' && close[2] == 'Z';
    }
    fclose(f);
    return zombie;
}

int cmd_stop(int argc, char **argv)
{
    arg_value v[N_SPECS];
    int rc = args_begin(&k_cmd, argc, argv, v);
    if (rc != ARGS_GO)
        return rc;
    char err[512];
    int wait_ms = 10000;
    if (v[F_TIMEOUT].set && (wait_ms = snapshot_timeout_ms(v[F_TIMEOUT].str, err, sizeof err)) < 0)
        return args_fail(&k_cmd, v, 2, "%s", err);
    json_object *st = snapshot_fetch(v[F_SOCKET].set ? v[F_SOCKET].str : NULL, "comem-stop", 5000, err, sizeof err);
    if (!st)
        return args_fail(&k_cmd, v, 1, "%s", err);
    json_object *co = NULL, *jpid = NULL, *jsock = NULL;
    long pid = 0;
    char sock[PATH_MAX] = "";
    if (json_object_object_get_ex(st, "coordinator", &co) && json_object_object_get_ex(co, "pid", &jpid))
        pid = (long)json_object_get_int64(jpid);
    if (co && json_object_object_get_ex(co, "socket", &jsock))
        snprintf(sock, sizeof sock, "%s", json_object_get_string(jsock));
    json_object_put(st);
    char why[PATH_MAX + 128];
    if (pid <= 1)
        return args_fail(&k_cmd, v, 1, "the coordinator on %s did not say its pid", sock);
    if (!is_my_comemd(pid, why, sizeof why))
        return args_fail(&k_cmd, v, 1, "what answers on %s says it is pid %ld, but %s: not stopping it", sock, pid,
                         why);
    if (kill((pid_t)pid, SIGTERM) != 0 && errno != ESRCH)
        return args_fail(&k_cmd, v, 1, "cannot signal pid %ld: %s", pid, strerror(errno));
    struct timespec step = {0, 20 * 1000000L};
    for (int waited = 0; !gone(pid); waited += 20) {
        if (waited >= wait_ms)
            return args_fail(&k_cmd, v, 1, "the coordinator (pid %ld) on %s is still running after %.1f s", pid, sock,
                             wait_ms / 1000.0);
        nanosleep(&step, NULL);
    }
    if (v[F_JSON].set) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "schema", json_object_new_int(1));
        json_object_object_add(o, "stopped", json_object_new_boolean(1));
        json_object_object_add(o, "pid", json_object_new_int64(pid));
        json_object_object_add(o, "socket", json_object_new_string(sock));
        jprint(o, v[F_PRETTY].set);
        cli_flush(); /* a document past stdout's buffer: why a write failed is known only now */
        json_object_put(o);
    } else {
        printf("stopped the coordinator (pid %ld) on %s\n", pid, sock);
    }
    args_free(v, N_SPECS);
    return 0;
}
