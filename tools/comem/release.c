/*
 * tools/comem/release.c - `comem release`: ask a process to give memory back, now, with a receipt.
 *
 *   comem release [--socket PATH] (--process NAME | --entry ID) [--bytes SIZE] [--json]
 *
 * A direct call, independent of any workflow (user-needs F19: an unload node
 * tied to the graph may never run). It reads the coordinator's snapshot, and
 * asks the holders of the named process's entries, largest resident first,
 * through comem_ask_release until SIZE bytes came back (all of them without
 * --bytes). Each receipt is the bytes the holder reports freed. A holder that
 * is computing answers busy and keeps its bytes; that is reported, not hidden.
 * Exit status: 0 when something came back or nothing was held, 1 when every
 * ask was refused (busy, not answering) or no coordinator answers, 2 for bad
 * arguments.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "base/size.h"
#include "cmds.h"
#include "comem/comem.h"

static const arg_spec k_specs[] = {
    {"socket", ARG_STRING, false}, {"process", ARG_STRING, false}, {"entry", ARG_STRING, false},
    {"bytes", ARG_SIZE, false},    {"json", ARG_FLAG, false},
};
#define N_SPECS (sizeof k_specs / sizeof k_specs[0])

typedef struct target {
    uint64_t id;
    char name[128];
    int64_t resident;
} target;

static json_object *jget(json_object *o, const char *k)
{
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, k, &v) ? v : NULL;
}

static int by_resident(const void *x, const void *y)
{
    const target *a = x, *b = y;
    return a->resident < b->resident ? 1 : a->resident > b->resident ? -1 : 0;
}

/* The entries of process `name` (or the entry `entry`) that hold bytes, from the snapshot. */
static size_t find(json_object *root, const char *name, const char *entry, target *out, size_t cap, bool *found)
{
    size_t n = 0;
    *found = false;
    json_object *devs = jget(root, "devices");
    for (size_t d = 0; devs && d < json_object_array_length(devs); d++) {
        json_object *ps = jget(json_object_array_get_idx(devs, d), "processes");
        for (size_t i = 0; ps && i < json_object_array_length(ps); i++) {
            json_object *p = json_object_array_get_idx(ps, i);
            if (name && strcmp(json_object_get_string(jget(p, "name")), name) != 0)
                continue;
            json_object *hs = jget(p, "holders");
            if (name)
                *found = true;
            for (size_t k = 0; hs && k < json_object_array_length(hs); k++) {
                json_object *es = jget(json_object_array_get_idx(hs, k), "entries");
                for (size_t e = 0; es && e < json_object_array_length(es) && n < cap; e++) {
                    json_object *x = json_object_array_get_idx(es, e);
                    const char *id = json_object_get_string(jget(x, "id"));
                    if (entry && strcmp(id, entry) != 0)
                        continue;
                    if (entry)
                        *found = true;
                    int64_t res = json_object_get_int64(jget(x, "resident"));
                    if (res <= 0)
                        continue;
                    out[n].id = strtoull(id, NULL, 16);
                    snprintf(out[n].name, sizeof out[n].name, "%s", json_object_get_string(jget(x, "name")));
                    out[n].resident = res;
                    n++;
                }
            }
        }
    }
    qsort(out, n, sizeof *out, by_resident);
    return n;
}

int cmd_release(int argc, char **argv)
{
    if (argc > 0 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        printf("usage: comem release [--socket PATH] (--process NAME | --entry ID) [--bytes SIZE] [--json]\n"
               "  Asks the process's holders to release SIZE bytes (all without --bytes) now, and prints\n"
               "  the receipts: the bytes each holder reports freed.\n");
        return 0;
    }
    arg_value v[N_SPECS];
    char err[256];
    if (args_parse(argc, argv, k_specs, N_SPECS, v, err, sizeof err) != 0) {
        fprintf(stderr, "comem release: %s\n", err);
        return 2;
    }
    const char *name = v[1].set ? v[1].str : NULL, *entry = v[2].set ? v[2].str : NULL;
    if (!name == !entry) {
        fprintf(stderr, "comem release: name one process (--process NAME) or one entry (--entry ID)\n");
        args_free(v, N_SPECS);
        return 2;
    }
    int64_t want = v[3].set ? (int64_t)v[3].num : -1;
    bool json = v[4].set;
    comem_client *c = NULL;
    int rc = comem_client_open(v[0].set ? v[0].str : NULL, COMEM_CLIENT_TOOL, "comem-release", -1,
                               COMEM_OPEN_NO_LOCAL, &c);
    if (rc != COMEM_OK) {
        fprintf(stderr, "comem release: no coordinator answers (%s)\n", comem_status_str(rc));
        args_free(v, N_SPECS);
        return 1;
    }
    char *text = NULL;
    json_object *root = NULL;
    if (comem_status_json(c, &text) == COMEM_OK)
        root = json_tokener_parse(text);
    comem_free(text);
    target ts[256];
    bool found = false;
    size_t n = root ? find(root, name, entry, ts, 256, &found) : 0;
    if (root)
        json_object_put(root);
    if (!found) {
        fprintf(stderr, "comem release: no %s '%s' in the ledger\n", name ? "process" : "entry", name ? name : entry);
        comem_client_close(c);
        args_free(v, N_SPECS);
        return 1;
    }
    json_object *out = json_object_new_object(), *asks = json_object_new_array();
    int64_t freed_total = 0;
    int answered = 0;
    for (size_t i = 0; i < n && (want < 0 || freed_total < want); i++) {
        int64_t ask = want < 0 ? -1 : want - freed_total, freed = 0, resident = 0;
        rc = comem_ask_release(c, ts[i].id, ask, 10000, &freed, &resident);
        if (rc == COMEM_OK || (rc == COMEM_ENOENT && freed > 0)) {
            answered++;
            freed_total += freed;
        }
        json_object *a = json_object_new_object();
        char id[24];
        snprintf(id, sizeof id, "%llx", (unsigned long long)ts[i].id);
        json_object_object_add(a, "entry", json_object_new_string(id));
        json_object_object_add(a, "name", json_object_new_string(ts[i].name));
        json_object_object_add(a, "asked", json_object_new_int64(ask));
        json_object_object_add(a, "status", json_object_new_string(comem_status_str(rc)));
        json_object_object_add(a, "freed", json_object_new_int64(freed));
        json_object_object_add(a, "resident_after", json_object_new_int64(resident));
        json_object_array_add(asks, a);
        if (!json) {
            char b[3][32];
            printf("%-24s asked %-10s %-6s freed %-10s resident now %s\n", ts[i].name,
                   ask < 0 ? "all" : comem_format_bytes(ask, b[0], 32), comem_status_str(rc),
                   comem_format_bytes(freed, b[1], 32), comem_format_bytes(resident, b[2], 32));
        }
    }
    json_object_object_add(out, "target", json_object_new_string(name ? name : entry));
    json_object_object_add(out, "asked", json_object_new_int64(want));
    json_object_object_add(out, "freed", json_object_new_int64(freed_total));
    json_object_object_add(out, "asks", asks);
    if (json) {
        printf("%s\n", json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN));
    } else {
        char b[32];
        printf("released %s from %s (%d of %zu ask(s) answered)\n", comem_format_bytes(freed_total, b, 32),
               name ? name : entry, answered, n);
    }
    json_object_put(out);
    comem_client_close(c);
    args_free(v, N_SPECS);
    return n == 0 || answered > 0 ? 0 : 1;
}
