/*
 * client/local.c - decisions without a coordinator, from this process's own
 * device reading and ComfyUI's own arithmetic: admit when free covers the
 * ask target, no siblings to ask under pressure, pins unlimited, the reserve
 * is the operator's. The device source is opened on first use (COMEM_DEVICE,
 * else a GPU via NVML) and kept until close; with no GPU and no simulated card
 * named there is no card, and every card ordinal is COMEM_ENODEV.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arith/cross_reserve.h"
#include "arith/reserve.h"
#include "base/bytes.h"
#include "base/log.h"
#include "base/size.h"
#include "client/local.h"
#include "probe/select.h"

int64_t comem_local_reserve_bytes(const comem_client *c)
{
    return c->reserve_base >= 0 ? c->reserve_base : COMEM_RESERVE_DEFAULT;
}

/* Reads device `index` of this process's source, opening it the first time. */
static int read_device(comem_client *c, int index, comem_device_reading *r)
{
    pthread_mutex_lock(&c->dev_lock);
    if (!c->dev_tried) {
        char note[256];
        c->dev_tried = true;
        c->dev_rc = comem_devices_open(NULL, &c->dev, note, sizeof note);
        if (c->dev_rc != COMEM_OK)
            comem_error("local decisions cannot read a device: %s (%s)", note, comem_status_str(c->dev_rc));
        else if (note[0])
            comem_info("local decisions: %s", note);
    }
    int rc = c->dev_rc;
    int n = 0;
    if (rc == COMEM_OK && (rc = comem_device_count(c->dev, &n)) == COMEM_OK) {
        if (index >= n)
            rc = COMEM_ENODEV;
        else
            rc = comem_device_read(c->dev, index, r);
    }
    pthread_mutex_unlock(&c->dev_lock);
    return rc;
}

int comem_local_admit(comem_client *c, int device, int64_t weights, int64_t inference, int64_t cast_forward,
                      comem_admission *out)
{
    int64_t need = comem_admit_target(weights, comem_add(inference, cast_forward), comem_local_reserve_bytes(c));
    comem_device_reading *r = malloc(sizeof *r);
    if (!r)
        return COMEM_ENOMEM;
    int rc = read_device(c, device, r);
    int64_t free_now = rc == COMEM_OK ? r->free : 0;
    free(r);
    if (rc != COMEM_OK)
        return rc;
    /* Nobody to ask: free after is free before. */
    out->decided = 1;
    out->need = need;
    out->free_before = out->free_after = free_now;
    char a[32], b[32], s[32];
    if (free_now < need) {
        int64_t missing = comem_sub(need, free_now);
        out->short_by = missing;
        comem_info("admission (local) on device %d: need %s, free %s: refused, short by %s", device,
                   comem_format_bytes(need, a, sizeof a), comem_format_bytes(free_now, b, sizeof b),
                   comem_format_bytes(missing, s, sizeof s));
        return COMEM_ENOSPC;
    }
    pthread_mutex_lock(&c->lock);
    client_grant *g = comem_tab_add_grant(c); /* gen 0: nothing is booked anywhere */
    uint64_t id = g ? g->id : 0;
    if (g)
        g->bytes = weights;
    pthread_mutex_unlock(&c->lock);
    if (!g)
        return COMEM_ENOMEM;
    out->grant = id;
    comem_debug("admission (local) on device %d: need %s, free %s: granted", device,
                comem_format_bytes(need, a, sizeof a), comem_format_bytes(free_now, b, sizeof b));
    return COMEM_OK;
}

void comem_local_reserve(comem_client *c, int64_t *reserve, int64_t *pager_headroom)
{
    int64_t base = comem_local_reserve_bytes(c);
    if (reserve)
        *reserve = base;
    /* Nothing is published on top of the base, so the pager keeps its seed. */
    if (pager_headroom)
        *pager_headroom = comem_pager_headroom_forward(false, 0, base, base);
}

/* Appends s as a JSON string (quotes and escapes). */
static size_t json_str(char *buf, size_t cap, size_t at, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    char tmp[8];
    if (at < cap)
        buf[at] = '"';
    at++;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        size_t n = 0;
        if (*p == '"' || *p == '\\') {
            tmp[n++] = '\\';
            tmp[n++] = (char)*p;
        } else if (*p < 0x20) {
            memcpy(tmp, "\\u00", 4);
            n = 4;
            tmp[n++] = hex[*p >> 4];
            tmp[n++] = hex[*p & 15];
        } else {
            tmp[n++] = (char)*p;
        }
        for (size_t i = 0; i < n; i++, at++)
            if (at < cap)
                buf[at] = tmp[i];
    }
    if (at < cap)
        buf[at] = '"';
    return at + 1;
}

int comem_local_status(comem_client *c, char **json)
{
    static const char *roles[] = {"", "host", "worker", "tool"};
    pthread_mutex_lock(&c->lock);
    size_t holders = c->n_holders, entries = c->n_entries;
    pthread_mutex_unlock(&c->lock);
    size_t cap = 3 * (strlen(c->path) + strlen(c->name)) * 6 + 512;
    char *buf = malloc(cap);
    if (!buf)
        return COMEM_ENOMEM;
    /* The shape `comem status --json` has, with nothing a coordinator would know, then this client. */
    size_t at = (size_t)snprintf(buf, cap, "{\"schema\":1,\"coordinator\":null,\"counters\":null,\"pins\":null,"
                                           "\"devices\":[],\"wddm\":[],\"warnings\":[");
    char warning[COMEM_CLIENT_PATH_MAX + 96];
    snprintf(warning, sizeof warning, "no coordinator answers at %s: this process decides locally", c->path);
    at = json_str(buf, cap, at, warning);
    at += (size_t)snprintf(buf + at, cap - at, "],\"local\":{\"mode\":\"local\",\"connected\":false,\"socket\":");
    at = json_str(buf, cap, at, c->path);
    at += (size_t)snprintf(buf + at, cap - at, ",\"name\":");
    at = json_str(buf, cap, at, c->name);
    snprintf(buf + at, cap - at, ",\"pid\":%d,\"role\":\"%s\",\"holders\":%zu,\"entries\":%zu}}", (int)comem_client_this_process(),
             roles[c->role], holders, entries);
    *json = buf;
    return COMEM_OK;
}

void comem_local_close(comem_client *c)
{
    comem_device_close(c->dev);
    c->dev = NULL;
}
