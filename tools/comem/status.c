/*
 * tools/comem/status.c - `comem status`: the machine's memory as the ledger sees it.
 *
 *   comem status [--socket PATH] [--timeout SECONDS] [--json] [--pretty]
 *
 * Asks the coordinator (COMEM_SOCKET or the per-user socket by default) for
 * its snapshot and prints it: per device, capacity, true free, the reserve,
 * each process with its context floor, holders and entries, outstanding
 * grants, unattributed bytes, and pinned host RAM. When no coordinator
 * answers it says why (comem_probe): nothing at the path, a stale socket,
 * refused (uid, token), full, or frozen; and exits 1.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "base/size.h"
#include "comem/common.h"
#include "cmds.h"
#include "comem/comem.h"
#include "jsonout.h"

static const arg_spec k_specs[] = {
    {"socket", ARG_STRING, false},
    {"json", ARG_FLAG, false},
    {"pretty", ARG_FLAG, false},
    {"timeout", ARG_STRING, false},
};
#define N_SPECS (sizeof k_specs / sizeof k_specs[0])

static int64_t geti(json_object *o, const char *k)
{
    json_object *v;
    return json_object_object_get_ex(o, k, &v) && v ? json_object_get_int64(v) : -1; /* null: unknown */
}
static const char *gets(json_object *o, const char *k)
{
    json_object *v;
    return json_object_object_get_ex(o, k, &v) && v ? json_object_get_string(v) : "";
}
static json_object *geta(json_object *o, const char *k)
{
    json_object *v;
    return json_object_object_get_ex(o, k, &v) ? v : NULL;
}
static const char *sz(int64_t v, char *b) { return v < 0 ? "-" : comem_format_bytes(v, b, 32); }

static void print_holder(json_object *h)
{
    char b[2][32];
    json_object *ans = geta(h, "answers");
    char flags[64] = "";
    for (size_t i = 0; ans && i < json_object_array_length(ans); i++) {
        if (flags[0])
            strcat(flags, ",");
        strncat(flags, json_object_get_string(json_object_array_get_idx(ans, i)), sizeof flags - strlen(flags) - 1);
    }
    printf("      holder %-16s %-7s %-9s %10s  answers %s\n", gets(h, "name"), gets(h, "kind"),
           json_object_get_boolean(geta(h, "busy")) ? "busy" : "idle", sz(geti(h, "resident"), b[0]),
           flags[0] ? flags : "nothing");
    json_object *es = geta(h, "entries");
    for (size_t i = 0; es && i < json_object_array_length(es); i++) {
        json_object *e = json_object_array_get_idx(es, i);
        printf("        %-24s %10s of %-10s%s\n", gets(e, "name"), sz(geti(e, "resident"), b[0]), sz(geti(e, "size"), b[1]),
               json_object_get_boolean(geta(e, "paged")) ? "  (paged)" : "");
    }
}

static void print_table(json_object *root)
{
    char b[6][32];
    json_object *co = geta(root, "coordinator");
    printf("coordinator pid %lld on %s (devices: %s), %lld session(s)", (long long)geti(co, "pid"), gets(co, "socket"),
           gets(co, "source"), (long long)geti(co, "sessions"));
    if (json_object_get_boolean(geta(co, "checking")))
        printf(", ledger checks %lld, violations %lld", (long long)geti(co, "checks"), (long long)geti(co, "violations"));
    printf("\n");
    json_object *devs = geta(root, "devices");
    json_object *ws = geta(root, "warnings");
    for (size_t w = 0; ws && w < json_object_array_length(ws); w++)
        printf("warning: %s\n", json_object_get_string(json_object_array_get_idx(ws, w)));
    for (size_t d = 0; devs && d < json_object_array_length(devs); d++) {
        json_object *dv = json_object_array_get_idx(devs, d);
        json_object *rv = geta(dv, "reserve");
        printf("\ndevice %lld  %s  %s  (%s free)\n", (long long)geti(dv, "index"), gets(dv, "name"), gets(dv, "uuid"),
               gets(dv, "scope"));
        printf("  capacity %s  free %s  used %s  driver reserved %s\n", sz(geti(dv, "capacity"), b[0]),
               sz(geti(dv, "free"), b[1]), sz(geti(dv, "used"), b[2]), sz(geti(dv, "driver_reserved"), b[3]));
        printf("  reserve %s (base %s)  resident %s  context floors %s  granted %s  unattributed %s\n",
               sz(geti(rv, "published"), b[0]), sz(geti(rv, "base"), b[1]), sz(geti(dv, "resident"), b[2]),
               sz(geti(dv, "context_floors"), b[3]), sz(geti(dv, "granted"), b[4]), sz(geti(dv, "unattributed"), b[5]));
        json_object *sp = geta(dv, "spill");
        if (sp && geti(sp, "overcommit") > 0)
            printf("  OVERCOMMITTED by %s: the driver pages memory to system RAM (pushed past by pid %lld%s%s)\n",
                   sz(geti(sp, "overcommit"), b[0]), (long long)geti(sp, "pid"), geta(sp, "process") ? ", " : "",
                   geta(sp, "process") ? gets(sp, "process") : "");
        if (geti(dv, "unregistered") > 0)
            printf("  unregistered %s (joined processes' bytes outside any holder and their contexts)\n",
                   sz(geti(dv, "unregistered"), b[0]));
        json_object *ps = geta(dv, "processes");
        if (ps && json_object_array_length(ps)) {
            printf("  %-8s %-16s %-7s %-5s %12s %12s %12s\n", "PID", "NAME", "ROLE", "STATE", "FLOOR", "RESIDENT", "PINNED");
            for (size_t i = 0; i < json_object_array_length(ps); i++) {
                json_object *p = json_object_array_get_idx(ps, i);
                json_object *hs0 = geta(p, "holders");
                if (!strcmp(gets(p, "role"), "tool") && (!hs0 || !json_object_array_length(hs0)))
                    continue; /* observers, this command included, hold nothing */
                printf("  %-8lld %-16s %-7s %-5s %12s %12s %12s\n", (long long)geti(p, "pid"), gets(p, "name"),
                       gets(p, "role"), json_object_get_boolean(geta(p, "busy")) ? "busy" : "idle",
                       sz(geti(p, "context_floor"), b[0]), sz(geti(p, "resident"), b[1]), sz(geti(p, "pinned"), b[2]));
                if (geti(p, "unregistered") > 0)
                    printf("    unregistered %s\n", sz(geti(p, "unregistered"), b[0]));
                json_object *hs = geta(p, "holders");
                for (size_t k = 0; hs && k < json_object_array_length(hs); k++)
                    print_holder(json_object_array_get_idx(hs, k));
            }
        } else {
            printf("  no processes have joined\n");
        }
        json_object *gs = geta(dv, "grants");
        for (size_t i = 0; gs && i < json_object_array_length(gs); i++) {
            json_object *g = json_object_array_get_idx(gs, i);
            printf("  grant %s: %s for session %s, expires in %.1f s\n", gets(g, "id"), sz(geti(g, "bytes"), b[0]),
                   gets(g, "session"), json_object_get_double(geta(g, "expires_in_s")));
        }
        json_object *os = geta(dv, "other_processes");
        for (size_t i = 0; os && i < json_object_array_length(os); i++) {
            json_object *o = json_object_array_get_idx(os, i);
            printf("  pid %lld (not in the ledger): %s\n", (long long)geti(o, "pid"), sz(geti(o, "bytes"), b[0]));
        }
    }
    json_object *pins = geta(root, "pins");
    printf("\npinned host RAM: %s of %s\n", sz(geti(pins, "total"), b[0]), sz(geti(pins, "max"), b[1]));
}

int cmd_status(int argc, char **argv)
{
    if (argc > 0 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        printf("usage: comem status [--socket PATH] [--timeout SECONDS] [--json] [--pretty]\n"
               "  --timeout SECONDS  how long to wait for the coordinator (default 5)\n");
        return 0;
    }
    arg_value vals[N_SPECS];
    char err[256];
    if (args_parse(argc, argv, k_specs, N_SPECS, vals, err, sizeof err) != 0) {
        fprintf(stderr, "comem status: %s\n", err);
        return 2;
    }
    double timeout_s = 5;
    if (vals[3].set && comem_parse_seconds("--timeout", vals[3].str, &timeout_s, err, sizeof err) != COMEM_OK) {
        fprintf(stderr, "comem status: %s\n", err);
        args_free(vals, N_SPECS);
        return 2;
    }
    int timeout_ms = timeout_s * 1000 > 3600000 ? 3600000 : (int)(timeout_s * 1000);
    comem_client *c = NULL;
    const char *sock = vals[0].set ? vals[0].str : NULL;
    /* Ask first whether anyone answers, and why not: the client's own failure says only that. */
    char why[512];
    int rc = comem_probe(sock, timeout_ms, why, sizeof why);
    if (rc == COMEM_OK && (rc = comem_client_open(sock, COMEM_CLIENT_TOOL, "comem-status", -1, COMEM_OPEN_NO_LOCAL,
                                                  &c)) != COMEM_OK)
        snprintf(why, sizeof why, "it answered once, then this client could not join (%s)", comem_status_str(rc));
    if (rc != COMEM_OK) {
        fprintf(stderr, "comem status: no coordinator answers: %s\n", why);
        args_free(vals, N_SPECS);
        return 1;
    }
    comem_client_set_timeout(c, timeout_ms);
    char *text = NULL;
    rc = comem_status_json(c, &text);
    comem_client_close(c);
    if (rc != COMEM_OK || !text) {
        fprintf(stderr, "comem status: %s\n", comem_status_str(rc));
        args_free(vals, N_SPECS);
        return 1;
    }
    json_object *root = json_tokener_parse(text);
    if (!root) {
        fprintf(stderr, "comem status: the coordinator sent unreadable JSON\n");
        comem_free(text);
        args_free(vals, N_SPECS);
        return 1;
    }
    if (vals[1].set)
        jprint(root, vals[2].set);
    else
        print_table(root);
    json_object_put(root);
    comem_free(text);
    args_free(vals, N_SPECS);
    return 0;
}
