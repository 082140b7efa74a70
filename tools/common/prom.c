/*
 * tools/common/prom.c - status JSON to the Prometheus text exposition format (version 0.0.4).
 *
 * Every family is written as one group (HELP, TYPE, then all its samples), as
 * the format requires; a figure the coordinator does not know (null) is left
 * out rather than written as a guess. Byte figures end in _bytes, counters in
 * _total, the latency histogram in seconds.
 */
#include "common/prom.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonout.h"
#include "common/text.h"

static json_object *at(json_object *a, size_t i) { return json_object_array_get_idx(a, i); }

/* A label value as the format escapes it: backslash, double quote and newline. */
static void put_label(comem_text *f, const char *name, const char *v, bool first)
{
    text_printf(f, "%s%s=\"", first ? "" : ",", name);
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            text_printf(f, "\\%c", *v);
        else if (*v == '\n')
            text_puts(f, "\\n");
        else
            text_putc(f, *v);
    }
    text_putc(f, '"');
}

static void family(comem_text *f, const char *name, const char *type, const char *help)
{
    text_printf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample: name{labels} value; labels is the pairs labels() wrote, or "". */
static void sample_i(comem_text *f, const char *name, const char *labels, int64_t v)
{
    text_printf(f, "%s%s%s%s %lld\n", name, labels[0] ? "{" : "", labels, labels[0] ? "}" : "", (long long)v);
}

/* Labels into buf: pairs of (name, value), n of them (cut at cap: never a name's worth). */
static const char *labels(char *buf, size_t cap, const char *const *kv, int n)
{
    comem_text t = {0};
    for (int i = 0; i < n; i++)
        put_label(&t, kv[2 * i], kv[2 * i + 1], i == 0);
    char *text = text_take(&t);
    snprintf(buf, cap, "%s", text ? text : "");
    free(text);
    return buf;
}

static const char *device_labels(char *buf, size_t cap, json_object *d)
{
    const char *kv[] = {"device", jget_str(d, "index"), "uuid", jget_str(d, "uuid"), "name", jget_str(d, "name")};
    return labels(buf, cap, kv, 3);
}

/* A process the snapshot lists that holds nothing and only looks (comem status, this exporter). */
static bool observer(json_object *p) { return !strcmp(jget_str(p, "role"), "tool") && jlen(jget(p, "holders")) == 0; }

static const char *session_labels(char *buf, size_t cap, json_object *d, json_object *p)
{
    const char *kv[] = {"device", jget_str(d, "index"), "session", jget_str(p, "session"), "pid", jget_str(p, "pid"),
                        "process", jget_str(p, "name"), "role", jget_str(p, "role")};
    return labels(buf, cap, kv, 5);
}

static const char *holder_labels(char *buf, size_t cap, json_object *d, json_object *p, json_object *h)
{
    const char *kv[] = {"device", jget_str(d, "index"), "session", jget_str(p, "session"), "pid", jget_str(p, "pid"),
                        "process", jget_str(p, "name"), "holder", jget_str(h, "name"), "kind", jget_str(h, "kind")};
    return labels(buf, cap, kv, 6);
}

/* Bytes of the device's grants that belong to a session (holder NULL) or to one holder. */
static int64_t granted_to(json_object *d, const char *session, const char *holder)
{
    int64_t sum = 0;
    json_object *gs = jget(d, "grants");
    for (size_t i = 0; i < jlen(gs); i++) {
        json_object *g = at(gs, i);
        if (session && strcmp(jget_str(g, "session"), session) != 0)
            continue;
        if (holder && (!jget(g, "holder") || strcmp(jget_str(g, "holder"), holder) != 0))
            continue;
        sum += json_object_get_int64(jget(g, "bytes"));
    }
    return sum;
}

typedef struct dev_gauge {
    const char *key, *sub, *metric, *help;
} dev_gauge;

static const dev_gauge k_dev[] = {
    {"capacity", NULL, "comem_device_capacity_bytes", "Memory of the card as the coordinator reads it."},
    {"free", NULL, "comem_device_free_bytes", "True free at the last reading (device-wide)."},
    {"used", NULL, "comem_device_used_bytes", "Used at the last reading, the driver's reserved slice included."},
    {"driver_reserved", NULL, "comem_device_driver_reserved_bytes", "The driver's reserved slice."},
    {"reserve", "published", "comem_device_reserve_bytes", "The reserve hosts keep free (base plus charges)."},
    {"reserve", "base", "comem_device_reserve_base_bytes", "The operator's reserve base (absent until a host or --reserve sets it)."},
    {"resident", NULL, "comem_device_resident_bytes", "Bytes the ledger's entries hold."},
    {"context_floors", NULL, "comem_device_context_floor_bytes", "Bytes of the processes' CUDA contexts."},
    {"granted", NULL, "comem_device_granted_bytes", "Bytes promised to admissions and not yet loaded."},
    {"attributed", NULL, "comem_device_attributed_bytes", "Bytes the ledger attributes to a process."},
    {"unattributed", NULL, "comem_device_unattributed_bytes", "Used bytes the ledger cannot name (other apps)."},
    {"overcommit", NULL, "comem_device_overcommit_bytes", "Bytes spilled beyond physical memory (WDDM)."},
    {"unregistered", NULL, "comem_device_unregistered_bytes",
     "Bytes joined processes hold beyond their entries, holders' reports and contexts (host RAM: beyond 300 MiB)."},
    {"host_ram", "budget", "comem_host_ram_budget_bytes", "Host RAM's bounded budget (comemd --ram SIZE)."},
    {"host_ram", "mem_total", "comem_host_ram_mem_total_bytes", "MemTotal of /proc/meminfo (host RAM device)."},
    {"host_ram", "mem_available", "comem_host_ram_mem_available_bytes",
     "MemAvailable of /proc/meminfo (host RAM device)."},
    {"host_ram", "cgroup_limit", "comem_host_ram_cgroup_limit_bytes", "The cgroup limit that clamps host RAM."},
    {"host_ram", "cgroup_usage", "comem_host_ram_cgroup_usage_bytes", "The working set of the limiting cgroup."},
};

typedef struct counter {
    const char *key, *metric, *help;
} counter;

static const counter k_counters[] = {
    {"admissions", "comem_admissions_total", "Admission requests granted."},
    {"refusals", "comem_admission_refusals_total", "Admission requests refused."},
    {"asks", "comem_release_asks_total", "Release asks sent to holders (sized, idle and pin asks)."},
    {"asks_busy", "comem_release_asks_busy_total", "Release asks answered busy, unanswered in time, or failed."},
    {"bytes_asked", "comem_release_asked_bytes_total", "Bytes release asks asked for."},
    {"bytes_freed", "comem_release_freed_bytes_total", "Bytes that came off the holders asked (a receipt counts at most that)."},
    {"idle_releases", "comem_idle_release_asks_total", "Idle release asks sent."},
    {"sessions_ended", "comem_sessions_ended_total", "Sessions ended, for any reason."},
    {"sessions_died", "comem_sessions_died_total", "Sessions whose process was exiting or gone when they ended (killed, crashed)."},
    {"spill_events", "comem_spill_events_total", "Overcommits started on WDDM cards (the driver paging memory to system RAM)."},
};

static void device_families(comem_text *f, json_object *devs)
{
    char lb[1024];
    for (size_t g = 0; g < sizeof k_dev / sizeof k_dev[0]; g++) {
        family(f, k_dev[g].metric, "gauge", k_dev[g].help);
        for (size_t i = 0; i < jlen(devs); i++) {
            json_object *d = at(devs, i), *v = jget(d, k_dev[g].key);
            if (k_dev[g].sub)
                v = jget(v, k_dev[g].sub);
            /* null: not known now, and a base of -1: not set yet; either is left out */
            if (v && (!k_dev[g].sub || strcmp(k_dev[g].sub, "base") != 0 || json_object_get_int64(v) >= 0))
                sample_i(f, k_dev[g].metric, device_labels(lb, sizeof lb, d), json_object_get_int64(v));
        }
    }
}

/* Host RAM's asks and receipts (the device that has a host_ram object). */
static void host_ram_counters(comem_text *f, json_object *devs)
{
    static const counter k[] = {
        {"asks", "comem_host_ram_release_asks_total", "Release asks sent to host RAM holders."},
        {"bytes_asked", "comem_host_ram_release_asked_bytes_total", "Bytes release asks on host RAM asked for."},
        {"bytes_freed", "comem_host_ram_release_freed_bytes_total", "Bytes that came off the host RAM holders asked."},
    };
    char lb[1024];
    for (size_t g = 0; g < sizeof k / sizeof k[0]; g++) {
        family(f, k[g].metric, "counter", k[g].help);
        for (size_t i = 0; i < jlen(devs); i++) {
            json_object *d = at(devs, i), *v = jget(jget(d, "host_ram"), k[g].key);
            if (v)
                sample_i(f, k[g].metric, device_labels(lb, sizeof lb, d), json_object_get_int64(v));
        }
    }
}

static void session_families(comem_text *f, json_object *devs)
{
    char lb[2048];
    static const char *names[] = {"comem_session_resident_bytes", "comem_session_granted_bytes",
                                  "comem_session_context_floor_bytes", "comem_session_busy",
                                  "comem_session_unregistered_bytes"};
    static const char *helps[] = {"Bytes a process's entries hold on the device.",
                                  "Bytes promised to a process's admissions, not yet loaded.",
                                  "Bytes of a process's CUDA context on the device.",
                                  "1 while the process computes (it is not asked to release), else 0.",
                                  "Bytes a process holds on the device outside anything it registered."};
    for (int k = 0; k < 5; k++) {
        family(f, names[k], "gauge", helps[k]);
        for (size_t i = 0; i < jlen(devs); i++) {
            json_object *d = at(devs, i), *ps = jget(d, "processes");
            for (size_t j = 0; j < jlen(ps); j++) {
                json_object *p = at(ps, j);
                if (observer(p))
                    continue;
                int64_t v = k == 0   ? json_object_get_int64(jget(p, "resident"))
                            : k == 1 ? granted_to(d, jget_str(p, "session"), NULL)
                            : k == 2 ? json_object_get_int64(jget(p, "context_floor"))
                            : k == 3 ? json_object_get_boolean(jget(p, "busy"))
                                     : json_object_get_int64(jget(p, "unregistered"));
                sample_i(f, names[k], session_labels(lb, sizeof lb, d, p), v);
            }
        }
    }
    /* Pinned host RAM is the process's, not a card's: one sample per session. */
    family(f, "comem_session_pinned_bytes", "gauge", "Pinned host RAM a process has booked.");
    json_object *seen = json_object_new_object();
    for (size_t i = 0; i < jlen(devs); i++) {
        json_object *ps = jget(at(devs, i), "processes");
        for (size_t j = 0; j < jlen(ps); j++) {
            json_object *p = at(ps, j);
            if (observer(p) || jget(seen, jget_str(p, "session")))
                continue;
            json_object_object_add(seen, jget_str(p, "session"), json_object_new_boolean(1));
            const char *kv[] = {"session", jget_str(p, "session"), "pid", jget_str(p, "pid"), "process", jget_str(p, "name")};
            sample_i(f, "comem_session_pinned_bytes", labels(lb, sizeof lb, kv, 3),
                     json_object_get_int64(jget(p, "pinned")));
        }
    }
    json_object_put(seen);
}

static void holder_families(comem_text *f, json_object *devs)
{
    char lb[2048];
    static const char *names[] = {"comem_holder_resident_bytes", "comem_holder_granted_bytes", "comem_holder_busy"};
    static const char *helps[] = {"Bytes a holder's entries hold on the device.",
                                  "Bytes promised to a holder's admissions, not yet loaded.",
                                  "1 while the holder computes, else 0."};
    for (int k = 0; k < 3; k++) {
        family(f, names[k], "gauge", helps[k]);
        for (size_t i = 0; i < jlen(devs); i++) {
            json_object *d = at(devs, i), *ps = jget(d, "processes");
            for (size_t j = 0; j < jlen(ps); j++) {
                json_object *p = at(ps, j), *hs = jget(p, "holders");
                for (size_t n = 0; n < jlen(hs); n++) {
                    json_object *h = at(hs, n);
                    int64_t v = k == 0   ? json_object_get_int64(jget(h, "resident"))
                                : k == 1 ? granted_to(d, jget_str(p, "session"), jget_str(h, "id"))
                                         : json_object_get_boolean(jget(h, "busy"));
                    sample_i(f, names[k], holder_labels(lb, sizeof lb, d, p, h), v);
                }
            }
        }
    }
}

static void latency_family(comem_text *f, json_object *h)
{
    const char *m = "comem_admission_latency_seconds";
    family(f, m, "histogram", "Time from an admission request's arrival to its answer.");
    json_object *bounds = jget(h, "bounds_s"), *counts = jget(h, "counts");
    for (size_t i = 0; i < jlen(bounds) && i < jlen(counts); i++)
        text_printf(f, "%s_bucket{le=\"%g\"} %lld\n", m, json_object_get_double(at(bounds, i)),
                (long long)json_object_get_int64(at(counts, i)));
    long long count = (long long)json_object_get_int64(jget(h, "count"));
    text_printf(f, "%s_bucket{le=\"+Inf\"} %lld\n", m, count);
    text_printf(f, "%s_sum %.9g\n", m, json_object_get_double(jget(h, "sum_s")));
    text_printf(f, "%s_count %lld\n", m, count);
}

char *comem_prom_text(json_object *st)
{
    comem_text text = {0}, *f = &text;
    json_object *co = jget(st, "coordinator"), *pins = jget(st, "pins"), *devs = jget(st, "devices");
    json_object *ctr = jget(st, "counters");
    family(f, "comem_up", "gauge", "1 when the coordinator answered this snapshot.");
    text_printf(f, "comem_up 1\n");
    family(f, "comem_uptime_seconds", "gauge", "Seconds since the coordinator started.");
    text_printf(f, "comem_uptime_seconds %.3f\n", json_object_get_double(jget(co, "uptime_s")));
    family(f, "comem_sessions", "gauge", "Processes joined to the coordinator (observers included).");
    sample_i(f, "comem_sessions", "", json_object_get_int64(jget(co, "sessions")));
    family(f, "comem_asks_in_flight", "gauge", "Release asks waiting for their receipts.");
    sample_i(f, "comem_asks_in_flight", "", json_object_get_int64(jget(co, "asks_in_flight")));
    family(f, "comem_requests_in_flight", "gauge", "Admission and pressure requests being decided.");
    sample_i(f, "comem_requests_in_flight", "", json_object_get_int64(jget(co, "requests_in_flight")));
    family(f, "comem_pinned_host_bytes", "gauge", "Pinned host RAM booked machine-wide.");
    sample_i(f, "comem_pinned_host_bytes", "", json_object_get_int64(jget(pins, "total")));
    family(f, "comem_pinned_host_limit_bytes", "gauge", "The machine-wide pinned host RAM ceiling.");
    sample_i(f, "comem_pinned_host_limit_bytes", "", json_object_get_int64(jget(pins, "max")));
    device_families(f, devs);
    host_ram_counters(f, devs);
    session_families(f, devs);
    holder_families(f, devs);
    for (size_t i = 0; i < sizeof k_counters / sizeof k_counters[0]; i++) {
        family(f, k_counters[i].metric, "counter", k_counters[i].help);
        sample_i(f, k_counters[i].metric, "", json_object_get_int64(jget(ctr, k_counters[i].key)));
    }
    latency_family(f, jget(ctr, "admission_latency"));
    return text_take(f);
}

char *comem_prom_down(void)
{
    return strdup("# HELP comem_up 1 when the coordinator answered this snapshot.\n# TYPE comem_up gauge\ncomem_up 0\n");
}
