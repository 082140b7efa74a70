/* probe/sim_spec.c - the text form of a simulated card ("sim:2x80GiB:wddm"). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/size.h"
#include "comem/common.h"
#include "probe/sim.h"

static int parse_bytes(const char *text, int64_t *out, char *err, size_t errlen)
{
    double v;
    char why[160];
    if (comem_parse_size(text, &v, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s", why);
        return COMEM_EINVAL;
    }
    if (v != trunc(v) || v > 9.0e18) {
        snprintf(err, errlen, "a simulated card's size must be a whole number of bytes: '%s'", text);
        return COMEM_EINVAL;
    }
    *out = (int64_t)v;
    return COMEM_OK;
}

int comem_sim_spec_parse(const char *text, comem_sim_spec *out, char *err, size_t errlen)
{
    char dummy[8];
    if (!err) {
        err = dummy;
        errlen = sizeof dummy;
    }
    *out = (comem_sim_spec){
        .n_cards = 1,
        .capacity = COMEM_SIM_DEFAULT_CAPACITY,
        .semantics = COMEM_SIM_LINUX,
        .reserved = COMEM_SIM_DEFAULT_RESERVED,
        .context_cost = COMEM_SIM_DEFAULT_CONTEXT,
    };
    if (!text || strncmp(text, "sim", 3) != 0 || (text[3] != '\0' && text[3] != ':')) {
        snprintf(err, errlen, "a simulated device is written sim[:SIZE][:NxSIZE][:linux|wddm|uma]..., not '%s'",
                 text ? text : "");
        return COMEM_EINVAL;
    }
    const char *p = text + 3;
    while (*p == ':') {
        p++;
        if (strncmp(p, "path=", 5) == 0) { /* the path takes the rest: it may contain ':' */
            if (strlen(p + 5) == 0 || strlen(p + 5) >= sizeof out->path) {
                snprintf(err, errlen, "path= needs a file path shorter than %zu bytes", sizeof out->path);
                return COMEM_EINVAL;
            }
            snprintf(out->path, sizeof out->path, "%s", p + 5);
            p += strlen(p);
            break;
        }
        char item[128];
        size_t len = strcspn(p, ":");
        if (len == 0 || len >= sizeof item) {
            snprintf(err, errlen, "empty or overlong item in '%s'", text);
            return COMEM_EINVAL;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        p += len;
        int rc = COMEM_OK;
        if (!strcmp(item, "linux")) {
            out->semantics = COMEM_SIM_LINUX;
        } else if (!strcmp(item, "wddm")) {
            out->semantics = COMEM_SIM_WDDM;
        } else if (!strcmp(item, "uma")) {
            out->semantics = COMEM_SIM_UMA;
        } else if (!strncmp(item, "reserved=", 9)) {
            rc = parse_bytes(item + 9, &out->reserved, err, errlen);
        } else if (!strncmp(item, "ctx=", 4)) {
            rc = parse_bytes(item + 4, &out->context_cost, err, errlen);
        } else if (isdigit((unsigned char)item[0])) {
            char *x = strchr(item, 'x');
            if (x && x > item) {
                char *end;
                long n = strtol(item, &end, 10);
                if (end != x || n < 1 || n > COMEM_SIM_MAX_CARDS) {
                    snprintf(err, errlen, "card count must be 1 to %d in '%s'", COMEM_SIM_MAX_CARDS, item);
                    return COMEM_EINVAL;
                }
                out->n_cards = (int)n;
                rc = parse_bytes(x + 1, &out->capacity, err, errlen);
            } else {
                rc = parse_bytes(item, &out->capacity, err, errlen);
            }
        } else {
            snprintf(err, errlen, "unknown item '%s' (SIZE, NxSIZE, linux, wddm, uma, reserved=, ctx=, path=)", item);
            return COMEM_EINVAL;
        }
        if (rc != COMEM_OK)
            return rc;
    }
    if (*p != '\0') {
        snprintf(err, errlen, "trailing text in '%s'", text);
        return COMEM_EINVAL;
    }
    if (out->capacity <= 0 || out->reserved < 0 || out->context_cost < 0 ||
        comem_add(out->reserved, out->context_cost) >= out->capacity) {
        snprintf(err, errlen, "a simulated card needs capacity > reserved + context cost");
        return COMEM_EINVAL;
    }
    return COMEM_OK;
}

/* Bytes in the shortest exact binary unit ("24GiB", "300MiB", "12345"). */
static void compact(int64_t v, char *buf, size_t len)
{
    static const char *u[] = {"TiB", "GiB", "MiB", "KiB"};
    static const int shift[] = {40, 30, 20, 10};
    for (int i = 0; i < 4; i++) {
        if (v != 0 && v % ((int64_t)1 << shift[i]) == 0) {
            snprintf(buf, len, "%lld%s", (long long)(v >> shift[i]), u[i]);
            return;
        }
    }
    snprintf(buf, len, "%lld", (long long)v);
}

void comem_sim_spec_format(const comem_sim_spec *s, char *buf, size_t len)
{
    char cap[32], res[32], ctx[32];
    compact(s->capacity, cap, sizeof cap);
    compact(s->reserved, res, sizeof res);
    compact(s->context_cost, ctx, sizeof ctx);
    snprintf(buf, len, "sim:%dx%s:%s:reserved=%s:ctx=%s", s->n_cards, cap,
             s->semantics == COMEM_SIM_WDDM ? "wddm" : s->semantics == COMEM_SIM_UMA ? "uma" : "linux", res, ctx);
}
