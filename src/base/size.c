/* base/size.c - parsing sizes, printing doubles that round-trip, human byte text. */
#include "base/size.h"

#include <ctype.h>
#include <math.h> /* its float tests are used as __builtin_*: MinGW's macros convert a double to float first */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "comem/common.h"

/* Writes "reason: 'text'" into err and returns COMEM_EINVAL. */
static int fail(char *err, size_t errlen, const char *reason, const char *s)
{
    if (err && errlen)
        snprintf(err, errlen, "%s: '%s'", reason, s ? s : "");
    return COMEM_EINVAL;
}

/* Reads a plain decimal number at s; *end points past it. Hex, inf and nan are refused. */
static int read_decimal(const char *s, double *out, const char **end)
{
    const char *p = s;
    bool digits = false;
    if (*p == '+' || *p == '-')
        p++;
    while (isdigit((unsigned char)*p)) {
        p++;
        digits = true;
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            p++;
            digits = true;
        }
    }
    if (!digits)
        return COMEM_EINVAL;
    if (*p == 'e' || *p == 'E') {
        const char *q = p + 1;
        if (*q == '+' || *q == '-')
            q++;
        if (isdigit((unsigned char)*q)) {
            while (isdigit((unsigned char)*q))
                q++;
            p = q;
        }
    }
    char *stop;
    double v = strtod(s, &stop);
    if (stop != p || !__builtin_isfinite(v))
        return COMEM_EINVAL;
    *out = v;
    *end = p;
    return COMEM_OK;
}

int comem_parse_number(const char *s, double *out, char *err, size_t errlen)
{
    const char *end;
    double v;
    if (!s || read_decimal(s, &v, &end) != COMEM_OK || *end != '\0')
        return fail(err, errlen, "not a number", s);
    if (v < 0 || __builtin_signbit(v))
        return fail(err, errlen, "must not be negative", s);
    *out = v;
    return COMEM_OK;
}

int comem_parse_seconds(const char *what, const char *s, double *out, char *err, size_t errlen)
{
    const char *end;
    double v;
    if (!s || read_decimal(s, &v, &end) != COMEM_OK || *end != '\0' || !(v > 0) || !__builtin_isfinite(v) || v > 1e9) {
        if (err && errlen)
            snprintf(err, errlen, "%s needs a positive number of seconds, not '%s'", what, s ? s : "");
        return COMEM_EINVAL;
    }
    *out = v;
    return COMEM_OK;
}

int comem_parse_size(const char *s, double *out, char *err, size_t errlen)
{
    static const struct {
        const char *name;
        double scale;
    } units[] = {
        {"b", 1.0},
        {"kib", 1024.0},
        {"mib", 1048576.0},
        {"gib", 1073741824.0},
        {"tib", 1099511627776.0},
    };
    const char *end;
    double v;
    if (!s)
        return fail(err, errlen, "missing size", "");
    while (isspace((unsigned char)*s))
        s++;
    if (read_decimal(s, &v, &end) != COMEM_OK)
        return fail(err, errlen, "not a size (bytes, or a number with B, KiB, MiB, GiB or TiB)", s);
    if (v < 0 || __builtin_signbit(v))
        return fail(err, errlen, "size must not be negative", s);
    while (*end == ' ')
        end++;
    if (*end == '\0') {
        *out = v;
        return COMEM_OK;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].name) == 0) {
            double r = v * units[i].scale;
            if (!__builtin_isfinite(r))
                return fail(err, errlen, "size too large", s);
            *out = r;
            return COMEM_OK;
        }
    }
    if (strcasecmp(end, "kb") == 0 || strcasecmp(end, "mb") == 0 || strcasecmp(end, "gb") == 0 ||
        strcasecmp(end, "tb") == 0 || strcasecmp(end, "k") == 0 || strcasecmp(end, "m") == 0 ||
        strcasecmp(end, "g") == 0 || strcasecmp(end, "t") == 0)
        return fail(err, errlen, "ambiguous unit, write KiB, MiB, GiB or TiB (powers of 1024)", s);
    return fail(err, errlen, "unknown unit (use B, KiB, MiB, GiB or TiB)", s);
}

char *comem_format_double(double x, char *buf, size_t len)
{
    if (!__builtin_isfinite(x)) {
        /* JSON has no spelling for these; callers never produce them, but be safe. */
        snprintf(buf, len, "null");
        return buf;
    }
    if (x == trunc(x) && fabs(x) < 9.2e18) {
        snprintf(buf, len, "%lld", (long long)x);
        return buf;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return buf;
    }
    return buf;
}

char *comem_format_bytes(int64_t bytes, char *buf, size_t len)
{
    static const char *names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (fabs(v) >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%lld B", (long long)bytes);
    else
        snprintf(buf, len, "%.2f %s", v, names[u]);
    return buf;
}
