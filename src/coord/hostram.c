/*
 * coord/hostram.c - host RAM as the ledger's last device: its reading, its reserve, what status says of it.
 *
 * Everything else (holders, entries, admissions, asks, receipts, the eviction
 * order, the idle release) treats host RAM as one more device. What is its
 * own lives here: which processes its reading tracks (every session's pid but
 * a tool's: `comem status` reading the ledger would otherwise move it),
 * the warning about RAM a process holds outside anything it registered
 * (shown, never trusted: it is a floor, never counted as reclaimable and never
 * asked for), and the budget, cgroup and ask figures status shows. Its
 * reserve is arith's comem_ram_reserve, fixed when measure.c opens the
 * device. docs/hostram.md is the design.
 */
#include <json-c/json.h>
#include <stdio.h>

#include "base/bytes.h"
#include "base/log.h"
#include "base/size.h"
#include "comem/common.h"
#include "coord/coord_internal.h"
#include "probe/hostram.h"

int coord_read_device(comem_coord_srv *s, int d, comem_device_reading *r)
{
    if (d != s->ram_index)
        return comem_device_read(s->src, d, r);
    int32_t pids[COMEM_MAX_DEVICE_PROCS];
    size_t n = 0;
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.sessions) && n < COMEM_MAX_DEVICE_PROCS; i++) {
        const ledger_session *ss = comem_slab_at(&s->ledger.sessions, i, NULL);
        if (ss && ss->pid > 0 && ss->role != COMEM_ROLE_TOOL) /* looking (comem status) must not move the figure */
            pids[n++] = ss->pid;
    }
    n += coord_app_pids(s, d, pids + n, COMEM_MAX_DEVICE_PROCS - n); /* apps spoken for: their RSS is what they hold */
    comem_hostram_track(s->ram_src, pids, n);
    int rc = comem_device_read(s->ram_src, 0, r);
    r->index = d;
    return rc;
}

/* The slot following pid's unregistered RAM (a new one, the oldest reused, when make), or NULL. */
static coord_ram_over *over_of(comem_coord_srv *s, int32_t pid, bool make)
{
    coord_ram_over *oldest = &s->ram_over[0];
    for (int i = 0; i < COORD_RAM_OVER; i++) {
        if (s->ram_over[i].pid == pid)
            return &s->ram_over[i];
        if (s->ram_over[i].since_ns < oldest->since_ns)
            oldest = &s->ram_over[i];
    }
    if (!make)
        return NULL;
    *oldest = (coord_ram_over){.pid = pid};
    return oldest;
}

void coord_ram_warn(comem_coord_srv *s)
{
    int64_t now = comem_now_ns();
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.sessions); i++) {
        uint64_t id;
        const ledger_session *ss = comem_slab_at(&s->ledger.sessions, i, &id);
        if (!ss)
            continue;
        int64_t un = coord_split_floor(s, id, s->ram_index).unregistered;
        coord_ram_over *o = over_of(s, ss->pid, un > COORD_RAM_WARN_BYTES);
        if (!o)
            continue;
        if (un <= COORD_RAM_WARN_BYTES) { /* back under the bound: a later growth is said again */
            *o = (coord_ram_over){0};
            continue;
        }
        if (!o->since_ns)
            o->since_ns = now;
        /* Between allocating and registering, a process's bytes are its own for a moment: a growth
           is said once it has stayed beyond the bound for COORD_RAM_WARN_MS. */
        if (o->warned || now - o->since_ns < COORD_RAM_WARN_MS * 1000000LL)
            continue;
        char a[32];
        comem_warn("'%s' (pid %d) holds %s of RAM outside anything it registered: shown as unregistered, never "
                   "counted as releasable", ss->name, (int)ss->pid, comem_format_bytes(un, a, sizeof a));
        o->warned = true;
    }
}

size_t coord_ram_warnings(comem_coord_srv *s, char (*out)[COORD_WARNING_MAX], size_t cap)
{
    size_t n = 0;
    if (s->ram_index < 0)
        return 0;
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.sessions) && n < cap; i++) {
        uint64_t id;
        const ledger_session *ss = comem_slab_at(&s->ledger.sessions, i, &id);
        if (!ss)
            continue;
        int64_t un = coord_split_floor(s, id, s->ram_index).unregistered;
        char a[32];
        if (un > COORD_RAM_WARN_BYTES)
            snprintf(out[n++], COORD_WARNING_MAX, "'%.40s' (pid %d): %s of host RAM unregistered", ss->name,
                     (int)ss->pid, comem_format_bytes(un, a, sizeof a));
    }
    return n;
}

static void add_or_null(json_object *o, const char *k, bool known, int64_t v)
{
    json_object_object_add(o, k, known ? json_object_new_int64(v) : NULL);
}

json_object *coord_ram_json(const comem_coord_srv *s, int d)
{
    if (d != s->ram_index || !s->ram_src)
        return NULL;
    const comem_hostmem *h = comem_hostram_last(s->ram_src);
    int64_t budget = comem_hostram_budget(s->ram_src);
    json_object *o = json_object_new_object();
    add_or_null(o, "budget", budget >= 0, budget);
    json_object_object_add(o, "mem_total", json_object_new_int64(h->mem_total));
    json_object_object_add(o, "mem_available", json_object_new_int64(h->mem_available));
    add_or_null(o, "cgroup_limit", h->cgroup_limited, h->cgroup_limit);
    add_or_null(o, "cgroup_usage", h->cgroup_limited && h->cgroup_usage_known, h->cgroup_usage);
    json_object_object_add(o, "cgroup_dir", h->cgroup_limited ? json_object_new_string(h->cgroup_dir) : NULL);
    json_object_object_add(o, "asks", json_object_new_int64((int64_t)s->counters.dev_asks[d]));
    json_object_object_add(o, "bytes_asked", json_object_new_int64(s->counters.dev_bytes_asked[d]));
    json_object_object_add(o, "bytes_freed", json_object_new_int64(s->counters.dev_bytes_freed[d]));
    return o;
}
