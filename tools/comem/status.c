/*
 * tools/comem/status.c - `comem status`: the machine's memory as the ledger sees it.
 *
 *   comem status [--socket PATH] [--timeout SECONDS] [--json] [--pretty]
 *
 * Asks the coordinator (COMEM_SOCKET or the per-user socket by default) for
 * its snapshot and prints it: per device, capacity, true free, the reserve,
 * each process with its context floor, holders and entries, outstanding
 * grants, unattributed bytes, and pinned host RAM; with no card at all (no
 * GPU), a line saying the coordinator manages host RAM only. When no coordinator
 * answers it says why (comem_probe): nothing at the path, a stale socket,
 * refused (uid, token), full, or frozen; and exits 1.
 */
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#ifndef _WIN32
#include <signal.h>
#include <sys/types.h>
#endif

#include "base/size.h"
#include "cmds.h"
#include "comem/comem.h"
#include "comem/common.h"
#include "common/args.h"
#include "common/jsonout.h"
#include "common/snapshot.h"

enum { F_SOCKET, F_JSON, F_PRETTY, F_TIMEOUT, N_SPECS };
static const arg_spec k_specs[N_SPECS] = {
    [F_SOCKET] = {"socket", ARG_STRING, false},
    [F_JSON] = {"json", ARG_FLAG, false},
    [F_PRETTY] = {"pretty", ARG_FLAG, false},
    [F_TIMEOUT] = {"timeout", ARG_STRING, false},
};
static const arg_command k_cmd = {
    "comem status",
    "usage: comem status [--socket PATH] [--timeout SECONDS] [--json] [--pretty]\n"
    "  --timeout SECONDS  how long to wait for the coordinator (default 5)\n",
    k_specs, N_SPECS,
};

static const char *sz(int64_t v, char *b) { return v < 0 ? "-" : comem_format_bytes(v, b, 32); }

static void print_holder(json_object *h)
{
    char b[2][32];
    json_object *ans = jget(h, "answers");
    char flags[64] = "";
    for (size_t i = 0; ans && i < json_object_array_length(ans); i++) {
        if (flags[0])
            strcat(flags, ",");
        strncat(flags, json_object_get_string(json_object_array_get_idx(ans, i)), sizeof flags - strlen(flags) - 1);
    }
    printf("      holder %-16s %-7s %-9s %10s  answers %s\n", jget_str(h, "name"), jget_str(h, "kind"),
           json_object_get_boolean(jget(h, "busy")) ? "busy" : "idle", sz(jget_int(h, "resident", -1), b[0]),
           flags[0] ? flags : "nothing");
    json_object *es = jget(h, "entries");
    for (size_t i = 0; es && i < json_object_array_length(es); i++) {
        json_object *e = json_object_array_get_idx(es, i);
        printf("        %-24s %10s of %-10s%s\n", jget_str(e, "name"), sz(jget_int(e, "resident", -1), b[0]), sz(jget_int(e, "size", -1), b[1]),
               json_object_get_boolean(jget(e, "paged")) ? "  (paged)" : "");
    }
}

/*
 * Whether the process that started the coordinator still runs, where its words end in "(pid N)" as a
 * starting client writes them (python/comem/autostart.py): " (running)", " (exited)", or "" when
 * they name no pid or this platform cannot tell.
 */
static const char *starter_state(const char *started_by)
{
#ifdef _WIN32
    (void)started_by;
    return "";
#else
    const char *at = started_by ? strrchr(started_by, '(') : NULL;
    long long pid = 0;
    char tail = 0;
    if (!at || sscanf(at, "(pid %lld%c", &pid, &tail) != 2 || tail != ')' || at[strlen(at) - 1] != ')' || pid <= 1 ||
        pid > INT_MAX)
        return "";
    if (kill((pid_t)pid, 0) == 0 || errno == EPERM)
        return " (running)";
    return errno == ESRCH ? " (exited)" : "";
#endif
}

static void print_table(json_object *root)
{
    char b[6][32];
    json_object *co = jget(root, "coordinator");
    printf("coordinator pid %lld on %s (devices: %s), %lld session(s)", (long long)jget_int(co, "pid", -1), jget_str(co, "socket"),
           jget_str(co, "source"), (long long)jget_int(co, "sessions", -1));
    if (json_object_get_boolean(jget(co, "checking")))
        printf(", ledger checks %lld, violations %lld", (long long)jget_int(co, "checks", -1), (long long)jget_int(co, "violations", -1));
    printf("\n");
    if (jget(co, "started_by")) /* null: not said (the service manager, a person, an embedded coordinator) */
        printf("started by %s%s\n", jget_str(co, "started_by"), starter_state(jget_str(co, "started_by")));
    json_object *devs = jget(root, "devices");
    size_t n_devs = devs ? json_object_array_length(devs) : 0, n_cards = 0;
    for (size_t d = 0; d < n_devs; d++)
        n_cards += jget(json_object_array_get_idx(devs, d), "host_ram") == NULL; /* host_ram: null for a card */
    if (n_cards == 0) /* auto found no GPU (source "none"): said before any device, where the eye lands */
        printf("no GPU: %s\n", n_devs ? "managing host RAM only" : "no device to manage");
    json_object *ws = jget(root, "warnings");
    for (size_t w = 0; ws && w < json_object_array_length(ws); w++)
        printf("warning: %s\n", json_object_get_string(json_object_array_get_idx(ws, w)));
    for (size_t d = 0; devs && d < json_object_array_length(devs); d++) {
        json_object *dv = json_object_array_get_idx(devs, d);
        json_object *rv = jget(dv, "reserve");
        printf("\ndevice %lld  %s  %s  (%s free)\n", (long long)jget_int(dv, "index", -1), jget_str(dv, "name"), jget_str(dv, "uuid"),
               jget_str(dv, "scope"));
        json_object *hr = jget(dv, "host_ram"); /* null for a card */
        if (hr) {
            printf("  capacity %s  free %s  used %s (the processes' resident sets%s)\n",
                   sz(jget_int(dv, "capacity", -1), b[0]), sz(jget_int(dv, "free", -1), b[1]), sz(jget_int(dv, "used", -1), b[2]),
                   jget(hr, "budget") ? "" : " and everything else on the machine");
            if (jget(hr, "budget"))
                printf("  a bounded budget of %s (the machine: %s total, %s available)\n",
                       sz(jget_int(hr, "budget", -1), b[0]), sz(jget_int(hr, "mem_total", -1), b[1]),
                       sz(jget_int(hr, "mem_available", -1), b[2]));
            else
                printf("  the machine's RAM: %s total, %s available\n", sz(jget_int(hr, "mem_total", -1), b[0]),
                       sz(jget_int(hr, "mem_available", -1), b[1]));
            if (jget_int(hr, "asks", 0) > 0)
                printf("  %lld release ask(s) to RAM holders for %s; their receipts: %s freed\n",
                       (long long)jget_int(hr, "asks", 0), sz(jget_int(hr, "bytes_asked", 0), b[0]),
                       sz(jget_int(hr, "bytes_freed", 0), b[1]));
            if (jget(hr, "cgroup_limit"))
                printf("  cgroup limit %s (working set %s) at %s\n", sz(jget_int(hr, "cgroup_limit", -1), b[0]),
                       sz(jget_int(hr, "cgroup_usage", -1), b[1]), jget_str(hr, "cgroup_dir"));
        } else {
            printf("  capacity %s  free %s  used %s  driver reserved %s\n", sz(jget_int(dv, "capacity", -1), b[0]),
                   sz(jget_int(dv, "free", -1), b[1]), sz(jget_int(dv, "used", -1), b[2]), sz(jget_int(dv, "driver_reserved", -1), b[3]));
        }
        printf("  reserve %s (base %s)  resident %s  context floors %s  granted %s  unattributed %s\n",
               sz(jget_int(rv, "published", -1), b[0]), sz(jget_int(rv, "base", -1), b[1]), sz(jget_int(dv, "resident", -1), b[2]),
               sz(jget_int(dv, "context_floors", -1), b[3]), sz(jget_int(dv, "granted", -1), b[4]), sz(jget_int(dv, "unattributed", -1), b[5]));
        int64_t told = jget_int(rv, "host_told", -1), published = jget_int(rv, "published", -1);
        if (told >= 0 && told != published)
            printf("  the host keeps a reserve of %s, told at its last load; it takes %s at its next\n", sz(told, b[0]),
                   sz(published, b[1]));
        json_object *sp = jget(dv, "spill");
        if (sp && jget_int(sp, "overcommit", -1) > 0)
            printf("  OVERCOMMITTED by %s: the driver pages memory to system RAM (pushed past by pid %lld%s%s)\n",
                   sz(jget_int(sp, "overcommit", -1), b[0]), (long long)jget_int(sp, "pid", -1), jget(sp, "process") ? ", " : "",
                   jget(sp, "process") ? jget_str(sp, "process") : "");
        if (jget_int(dv, "unregistered", -1) > 0)
            printf("  unregistered %s (joined processes' bytes outside any holder and their contexts)\n",
                   sz(jget_int(dv, "unregistered", -1), b[0]));
        json_object *ps = jget(dv, "processes");
        if (ps && json_object_array_length(ps)) {
            printf("  %-8s %-16s %-7s %-5s %12s %12s %12s\n", "PID", "NAME", "ROLE", "STATE", "FLOOR", "RESIDENT", "PINNED");
            for (size_t i = 0; i < json_object_array_length(ps); i++) {
                json_object *p = json_object_array_get_idx(ps, i);
                json_object *hs0 = jget(p, "holders");
                if (!strcmp(jget_str(p, "role"), "tool") && (!hs0 || !json_object_array_length(hs0)))
                    continue; /* observers, this command included, hold nothing */
                printf("  %-8lld %-16s %-7s %-5s %12s %12s %12s\n", (long long)jget_int(p, "pid", -1), jget_str(p, "name"),
                       jget_str(p, "role"), json_object_get_boolean(jget(p, "busy")) ? "busy" : "idle",
                       sz(jget_int(p, "context_floor", -1), b[0]), sz(jget_int(p, "resident", -1), b[1]), sz(jget_int(p, "pinned", -1), b[2]));
                if (jget_int(p, "unregistered", -1) > 0)
                    printf("    unregistered %s\n", sz(jget_int(p, "unregistered", -1), b[0]));
                json_object *hs = jget(p, "holders");
                for (size_t k = 0; hs && k < json_object_array_length(hs); k++)
                    print_holder(json_object_array_get_idx(hs, k));
            }
        } else {
            printf("  no processes have joined\n");
        }
        json_object *gs = jget(dv, "grants");
        for (size_t i = 0; gs && i < json_object_array_length(gs); i++) {
            json_object *g = json_object_array_get_idx(gs, i);
            printf("  grant %s: %s for session %s, expires in %.1f s\n", jget_str(g, "id"), sz(jget_int(g, "bytes", -1), b[0]),
                   jget_str(g, "session"), json_object_get_double(jget(g, "expires_in_s")));
        }
        json_object *os = jget(dv, "other_processes");
        for (size_t i = 0; os && i < json_object_array_length(os); i++) {
            json_object *o = json_object_array_get_idx(os, i);
            printf("  pid %lld (not in the ledger): %s\n", (long long)jget_int(o, "pid", -1), sz(jget_int(o, "bytes", -1), b[0]));
        }
    }
    json_object *pins = jget(root, "pins");
    printf("\npinned host RAM: %s of %s\n", sz(jget_int(pins, "total", -1), b[0]), sz(jget_int(pins, "max", -1), b[1]));
    json_object *wddm = jget(root, "wddm"); /* Windows: the processes' own WDDM readings, added up */
    for (size_t i = 0; wddm && i < json_object_array_length(wddm); i++) {
        json_object *a = json_object_array_get_idx(wddm, i), *ps = jget(a, "processes");
        long long dev = jget_int(a, "device", -1); /* null: no process named its card */
        char which[32] = "";
        if (dev >= 0)
            snprintf(which, sizeof which, " (device %lld)", dev);
        printf("WDDM adapter %s%s: %s used by %zu reporting process(es)\n", jget_str(a, "luid"), which,
               sz(jget_int(a, "usage", -1), b[0]), ps ? json_object_array_length(ps) : (size_t)0);
    }
}

int cmd_status(int argc, char **argv)
{
    arg_value vals[N_SPECS];
    int rc = args_begin(&k_cmd, argc, argv, vals);
    if (rc != ARGS_GO)
        return rc;
    char err[256];
    double timeout_s = 5;
    if (vals[F_TIMEOUT].set &&
        comem_parse_seconds("--timeout", vals[F_TIMEOUT].str, &timeout_s, err, sizeof err) != COMEM_OK)
        return args_fail(&k_cmd, vals, 2, "%s", err);
    int timeout_ms = timeout_s * 1000 > 3600000 ? 3600000 : (int)(timeout_s * 1000);
    /* Asks first whether anyone answers, and why not: the client's own failure says only that. */
    json_object *root = snapshot_fetch(vals[F_SOCKET].set ? vals[F_SOCKET].str : NULL, "comem-status", timeout_ms, err,
                                       sizeof err);
    if (!root)
        return args_fail(&k_cmd, vals, 1, "%s", err);
    if (vals[F_JSON].set)
        jprint(root, vals[F_PRETTY].set);
    else
        print_table(root);
    cli_flush(); /* a document past stdout's buffer: why a write failed is known only now */
    json_object_put(root);
    args_free(vals, N_SPECS);
    return 0;
}
