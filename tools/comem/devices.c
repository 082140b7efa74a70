/*
 * tools/comem/devices.c - `comem devices`: the cards and host RAM as comem reads them.
 *
 *   comem devices [--device SPEC] [--json]
 *
 * A table by default, one JSON object with --json. SPEC is auto (default),
 * nvml, cuda or sim[:...] (also from COMEM_DEVICE). When auto finds no GPU
 * the table has no card, a note on stderr ("note" in JSON) says so and why,
 * and host RAM is listed as ever.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "base/size.h"
#include "cmds.h"
#include "comem/common.h"
#include "common/args.h"
#include "common/jsonout.h"
#include "probe/hostmem.h"
#include "probe/select.h"

enum { F_DEVICE, F_JSON, F_PRETTY, N_SPECS };
static const arg_spec k_specs[N_SPECS] = {
    [F_DEVICE] = {"device", ARG_STRING, false},
    [F_JSON] = {"json", ARG_FLAG, false},
    [F_PRETTY] = {"pretty", ARG_FLAG, false},
};
static const arg_command k_cmd = {
    "comem devices",
    "usage: comem devices [--device auto|nvml|cuda|sim[:SIZE][:NxSIZE][:linux|wddm]...] [--json]\n",
    k_specs, N_SPECS,
};

static const char *sz(int64_t v, char *buf)
{
    if (v < 0)
        return "-";
    return comem_format_bytes(v, buf, 32);
}

static json_object *reading_json(const comem_device_reading *r)
{
    json_object *d = json_object_new_object();
    json_object_object_add(d, "index", jint(r->index));
    json_object_object_add(d, "name", json_object_new_string(r->name));
    json_object_object_add(d, "uuid", json_object_new_string(r->uuid));
    json_object_object_add(d, "source", json_object_new_string(r->source));
    json_object_object_add(d, "scope", json_object_new_string(comem_scope_name(r->scope)));
    json_object_object_add(d, "total", jint(r->total));
    json_object_object_add(d, "used", jint(r->used));
    json_object_object_add(d, "free", jint(r->free));
    json_object_object_add(d, "reserved", jint(r->reserved));
    /* Every key is always there (docs/json.md): null where the source cannot tell. */
    json_object_object_add(d, "overcommit", jint(r->overcommit > 0 ? r->overcommit : 0));
    json_object_object_add(d, "pci_bus_id", r->pci_bus_id[0] ? json_object_new_string(r->pci_bus_id) : NULL);
    json_object_object_add(d, "pcie_gen", r->pcie_gen > 0 ? jint(r->pcie_gen) : NULL);
    json_object_object_add(d, "pcie_width", r->pcie_gen > 0 ? jint(r->pcie_width) : NULL);
    if (!r->procs_known) {
        json_object_object_add(d, "processes", NULL);
    } else {
        json_object *ps = json_object_new_array();
        for (size_t i = 0; i < r->n_procs; i++) {
            json_object *p = json_object_new_object();
            json_object_object_add(p, "pid", jint(r->procs[i].pid));
            json_object_object_add(p, "bytes", jint(r->procs[i].bytes));
            json_object_array_add(ps, p);
        }
        json_object_object_add(d, "processes", ps);
    }
    return d;
}

static json_object *host_json(const comem_hostmem *h)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "total", jint(h->total));
    json_object_object_add(o, "available", jint(h->available));
    json_object_object_add(o, "swap", jint(h->swap_total));
    json_object_object_add(o, "disk_swap", jint(h->disk_swap));
    json_object_object_add(o, "cgroup_limit", h->cgroup_limited ? jint(h->cgroup_limit) : NULL);
    return o;
}

int cmd_devices(int argc, char **argv)
{
    arg_value vals[N_SPECS];
    int rc = args_begin(&k_cmd, argc, argv, vals);
    if (rc != ARGS_GO)
        return rc;
    char note[512];
    bool json = vals[F_JSON].set;
    comem_device_source *src = NULL;
    rc = comem_devices_open(vals[F_DEVICE].set ? vals[F_DEVICE].str : NULL, &src, note, sizeof note);
    if (rc != COMEM_OK)
        return args_fail(&k_cmd, vals, rc == COMEM_EINVAL ? 2 : 1, "%s", note[0] ? note : comem_status_str(rc));
    int n = 0;
    comem_device_count(src, &n);
    static comem_device_reading r; /* large: keep it off the stack */
    comem_hostmem host;
    bool have_host = comem_hostmem_read(NULL, &host) == COMEM_OK;

    json_object *out = json ? json_object_new_object() : NULL;
    json_object *list = json ? json_object_new_array() : NULL;
    char b[6][32];
    if (!json) {
        if (note[0])
            fprintf(stderr, "note: %s\n", note); /* stdout is the table alone, for whoever parses it */
        printf("%-3s  %-28s  %-40s  %-6s  %-13s  %10s  %10s  %10s  %10s\n", "IDX", "NAME", "UUID", "SOURCE", "SCOPE",
               "TOTAL", "USED", "FREE", "RESERVED");
    }
    int status = 0;
    for (int i = 0; i < n; i++) {
        if ((rc = comem_device_read(src, i, &r)) != COMEM_OK) {
            fprintf(stderr, "comem devices: device %d: %s\n", i, comem_status_str(rc));
            status = 1;
            continue;
        }
        if (json) {
            json_object_array_add(list, reading_json(&r));
            continue;
        }
        printf("%-3d  %-28.28s  %-40.40s  %-6s  %-13s  %10s  %10s  %10s  %10s\n", r.index, r.name, r.uuid, r.source,
               comem_scope_name(r.scope), sz(r.total, b[0]), sz(r.used, b[1]), sz(r.free, b[2]),
               sz(r.reserved, b[3]));
        if (r.overcommit > 0)
            printf("     overcommitted by %s (spilled beyond physical memory)\n", sz(r.overcommit, b[4]));
        if (r.procs_known) {
            if (r.n_procs == 0)
                printf("     no processes\n");
            for (size_t p = 0; p < r.n_procs; p++)
                printf("     pid %-8d %10s\n", r.procs[p].pid, sz(r.procs[p].bytes, b[5]));
        }
    }
    if (json) {
        json_object_object_add(out, "schema", jint(1));
        json_object_object_add(out, "devices", list);
        json_object_object_add(out, "note", note[0] ? json_object_new_string(note) : NULL);
        json_object_object_add(out, "host", have_host ? host_json(&host) : NULL);
        jprint(out, vals[F_PRETTY].set);
        cli_flush(); /* a document past stdout's buffer: why a write failed is known only now */
        json_object_put(out);
    } else if (have_host) {
        printf("host RAM: %s total, %s available, %s disk swap", sz(host.total, b[0]), sz(host.available, b[1]),
               sz(host.disk_swap, b[2]));
        if (host.cgroup_limited)
            printf(" (cgroup limit %s at %s)", sz(host.cgroup_limit, b[3]), host.cgroup_dir);
        printf("\n");
    }
    comem_device_close(src);
    args_free(vals, N_SPECS);
    return status;
}
