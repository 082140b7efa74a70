/* probe/hostram.c - the host RAM device: total and available RAM (or a bounded budget) and each process's RSS. */
#include "probe/hostram.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/size.h"
#include "comem/common.h"

#define MIN_BUDGET ((int64_t)64 << 20)

typedef struct hostram_source {
    comem_device_source base;
    int64_t budget; /* -1: the machine's (cgroup-clamped) RAM */
    size_t n_pids;
    int32_t pids[COMEM_MAX_DEVICE_PROCS];
    comem_hostmem host; /* the last host reading */
    char spec[64];
} hostram_source;

int comem_hostram_parse(const char *spec, int64_t *budget, char *err, size_t errlen)
{
    if (!spec || !*spec) {
        snprintf(err, errlen, "empty RAM spec (machine, or a size such as 4GiB)");
        return COMEM_EINVAL;
    }
    if (!strncmp(spec, "ram:", 4))
        spec += 4;
    if (!strcmp(spec, "machine")) {
        *budget = -1;
        return COMEM_OK;
    }
    double v = 0;
    char why[128] = "";
    if (comem_parse_size(spec, &v, why, sizeof why) != COMEM_OK || v > 9.0e18) {
        snprintf(err, errlen, "RAM spec '%.40s': %s (machine, or a size such as 4GiB)", spec,
                 why[0] ? why : "too large");
        return COMEM_EINVAL;
    }
    if ((int64_t)v < MIN_BUDGET) {
        snprintf(err, errlen, "RAM budget '%.40s' is below 64MiB", spec);
        return COMEM_EINVAL;
    }
    *budget = (int64_t)v;
    return COMEM_OK;
}

static int hostram_count(comem_device_source *src, int *n)
{
    (void)src;
    *n = 1;
    return COMEM_OK;
}

static int hostram_read(comem_device_source *src, int index, comem_device_reading *r)
{
    hostram_source *h = (hostram_source *)src;
    if (index != 0)
        return COMEM_ENODEV;
    comem_device_reading_clear(r);
    int rc = comem_hostmem_read(NULL, &h->host); /* read again every time: a cgroup limit may change */
    if (rc != COMEM_OK)
        return rc;
    r->index = 0;
    snprintf(r->uuid, sizeof r->uuid, "%s", COMEM_HOSTRAM_UUID);
    snprintf(r->name, sizeof r->name, "%s", COMEM_HOSTRAM_NAME);
    r->source = "hostram";
    r->scope = COMEM_SCOPE_DEVICE_WIDE;
    r->local_scope = COMEM_SCOPE_DEVICE_WIDE;
    r->procs_known = true;
    int64_t rss_sum = 0;
    for (size_t i = 0; i < h->n_pids; i++) {
        int64_t rss;
        if (comem_hostram_rss(NULL, h->pids[i], &rss) != COMEM_OK)
            continue; /* gone between the ledger and now: its session ends on its pidfd */
        r->procs[r->n_procs].pid = h->pids[i];
        r->procs[r->n_procs].bytes = rss;
        r->n_procs++;
        rss_sum = comem_add(rss_sum, rss);
    }
    if (h->budget >= 0) {
        r->total = h->budget;
        r->free = comem_clamp0(comem_sub(h->budget, rss_sum));
    } else {
        r->total = h->host.total;
        r->free = comem_clamp0(h->host.available);
    }
    r->used = comem_sub(r->total, r->free);
    r->reserved = 0;
    r->overcommit = 0; /* a card's spill to RAM; processes beyond a bounded budget show as free 0 */
    r->timestamp_ns = comem_now_ns();
    return COMEM_OK;
}

static void hostram_close(comem_device_source *src) { free(src); }

static const comem_device_source_ops hostram_ops = {hostram_count, hostram_read, hostram_close};

int comem_hostram_open(const char *spec, comem_device_source **out, char *note, size_t notelen)
{
    int64_t budget;
    note[0] = '\0';
    if (comem_hostram_parse(spec, &budget, note, notelen) != COMEM_OK)
        return COMEM_EINVAL;
    hostram_source *h = calloc(1, sizeof *h);
    if (!h)
        return COMEM_ENOMEM;
    if (comem_hostmem_read(NULL, &h->host) != COMEM_OK) {
        snprintf(note, notelen, "cannot read /proc/meminfo");
        free(h);
        return COMEM_EIO;
    }
    h->budget = budget;
    snprintf(h->spec, sizeof h->spec, "%s", spec);
    h->base.ops = &hostram_ops;
    h->base.name = "hostram";
    h->base.spec = h->spec;
    *out = &h->base;
    return COMEM_OK;
}

void comem_hostram_track(comem_device_source *src, const int32_t *pids, size_t n)
{
    hostram_source *h = (hostram_source *)src;
    h->n_pids = 0;
    for (size_t i = 0; i < n && h->n_pids < COMEM_MAX_DEVICE_PROCS; i++) {
        bool seen = false;
        for (size_t j = 0; j < h->n_pids && !seen; j++)
            seen = h->pids[j] == pids[i];
        if (!seen && pids[i] > 0)
            h->pids[h->n_pids++] = pids[i];
    }
}

int64_t comem_hostram_budget(const comem_device_source *src) { return ((const hostram_source *)src)->budget; }

const comem_hostmem *comem_hostram_last(const comem_device_source *src)
{
    return &((const hostram_source *)src)->host;
}
