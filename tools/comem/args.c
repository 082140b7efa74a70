/* tools/comem/args.c - table-driven flag parsing with one-line errors. */
#include "args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/size.h"

static const arg_spec *find(const arg_spec *specs, size_t n, const char *name, size_t len, size_t *idx)
{
    for (size_t i = 0; i < n; i++) {
        if (strlen(specs[i].name) == len && strncmp(specs[i].name, name, len) == 0) {
            *idx = i;
            return &specs[i];
        }
    }
    return NULL;
}

static int append(arg_value *v, double num, const char *str, arg_kind kind)
{
    if (v->count >= ARGS_LIST_MAX)
        return -1;
    if (kind == ARG_SIZE_LIST) {
        double *p = realloc(v->nums, (v->count + 1) * sizeof *p);
        if (!p)
            return -1;
        v->nums = p;
        p[v->count] = num;
    } else {
        const char **p = realloc(v->strs, (v->count + 1) * sizeof *p);
        if (!p)
            return -1;
        v->strs = p;
        p[v->count] = str;
    }
    v->count++;
    v->set = true;
    return 0;
}

int args_parse(int argc, char **argv, const arg_spec *specs, size_t n, arg_value *vals, char *err,
               size_t errlen)
{
    memset(vals, 0, n * sizeof *vals);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            snprintf(err, errlen, "unexpected argument '%s'", a);
            return -1;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        size_t idx;
        const arg_spec *s = find(specs, n, name, len, &idx);
        if (!s) {
            snprintf(err, errlen, "unknown flag '--%.*s'", (int)len, name);
            return -1;
        }
        arg_value *v = &vals[idx];
        if (s->kind == ARG_FLAG) {
            if (eq) {
                snprintf(err, errlen, "flag '--%s' takes no value", s->name);
                return -1;
            }
            if (v->set) {
                snprintf(err, errlen, "flag '--%s' given twice", s->name);
                return -1;
            }
            v->set = true;
            continue;
        }
        const char *value = eq ? eq + 1 : NULL;
        if (!value) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "flag '--%s' needs a value", s->name);
                return -1;
            }
            value = argv[++i];
        }
        bool list = s->kind == ARG_SIZE_LIST || s->kind == ARG_STRING_LIST;
        if (v->set && !list) {
            snprintf(err, errlen, "flag '--%s' given twice", s->name);
            return -1;
        }
        double num = 0;
        char why[200];
        if (s->kind == ARG_SIZE || s->kind == ARG_SIZE_LIST) {
            if (comem_parse_size(value, &num, why, sizeof why) != 0) {
                snprintf(err, errlen, "--%s: %s", s->name, why);
                return -1;
            }
        } else if (s->kind == ARG_NUMBER) {
            if (comem_parse_number(value, &num, why, sizeof why) != 0) {
                snprintf(err, errlen, "--%s: %s", s->name, why);
                return -1;
            }
        }
        if (list) {
            if (append(v, num, value, s->kind) != 0) {
                snprintf(err, errlen, "--%s: too many values", s->name);
                return -1;
            }
        } else {
            v->set = true;
            v->num = num;
            v->str = value;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (specs[i].required && !vals[i].set) {
            snprintf(err, errlen, "missing required flag '--%s'", specs[i].name);
            return -1;
        }
    }
    return 0;
}

void args_free(arg_value *vals, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(vals[i].nums);
        free(vals[i].strs);
        vals[i].nums = NULL;
        vals[i].strs = NULL;
    }
}

arg_value *args_get(const arg_spec *specs, size_t n, arg_value *vals, const char *name)
{
    size_t idx;
    if (find(specs, n, name, strlen(name), &idx))
        return &vals[idx];
    return NULL;
}
