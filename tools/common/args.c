/* tools/common/args.c - table-driven flag parsing with one-line errors, and the commands' prologue. */
#include "common/args.h"

#include <stdarg.h>
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

int args_next(int argc, char **argv, int *i, const arg_spec *specs, size_t n, arg_style style, const char **value,
              char *err, size_t errlen)
{
    const char *a = argv[*i];
    *value = NULL;
    if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
        snprintf(err, errlen, "unexpected argument '%s'", a);
        return -1;
    }
    const char *name = a + 2;
    const char *eq = style == ARGS_INLINE ? strchr(name, '=') : NULL;
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    size_t idx;
    const arg_spec *s = find(specs, n, name, len, &idx);
    if (!s) {
        snprintf(err, errlen, "unknown flag '--%.*s'", (int)len, name);
        return -1;
    }
    if (s->kind == ARG_FLAG) {
        if (eq) {
            snprintf(err, errlen, "flag '--%s' takes no value", s->name);
            return -1;
        }
        (*i)++;
        return (int)idx;
    }
    if (eq) {
        *value = eq + 1;
        (*i)++;
    } else if (*i + 1 < argc) {
        *value = argv[*i + 1];
        *i += 2;
    } else {
        snprintf(err, errlen, "flag '--%s' needs a value", s->name);
        return -1;
    }
    return (int)idx;
}

int args_parse(int argc, char **argv, const arg_spec *specs, size_t n, arg_value *vals, char *err,
               size_t errlen)
{
    memset(vals, 0, n * sizeof *vals);
    for (int i = 0; i < argc;) {
        const char *value;
        int idx = args_next(argc, argv, &i, specs, n, ARGS_INLINE, &value, err, errlen);
        if (idx < 0)
            return -1;
        const arg_spec *s = &specs[idx];
        arg_value *v = &vals[idx];
        bool list = s->kind == ARG_SIZE_LIST || s->kind == ARG_STRING_LIST;
        if (v->set && !list) {
            snprintf(err, errlen, "flag '--%s' given twice", s->name);
            return -1;
        }
        if (s->kind == ARG_FLAG) {
            v->set = true;
            continue;
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

int args_find(int argc, char **argv, const char *const *names, bool until_dashdash)
{
    for (int i = 0; i < argc; i++) {
        if (until_dashdash && !strcmp(argv[i], "--"))
            return -1;
        for (const char *const *k = names; *k; k++)
            if (!strcmp(argv[i], *k))
                return i;
    }
    return -1;
}

bool args_asks_help(int argc, char **argv, bool until_dashdash)
{
    static const char *const help[] = {"--help", "-h", NULL};
    return args_find(argc, argv, help, until_dashdash) >= 0;
}

int args_begin(const arg_command *cmd, int argc, char **argv, arg_value *vals)
{
    if (cmd->help && argc > 0 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        fputs(cmd->help, stdout);
        return 0;
    }
    char err[640];
    if (args_parse(argc, argv, cmd->specs, cmd->n, vals, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", cmd->name, err);
        args_free(vals, cmd->n);
        return 2;
    }
    return ARGS_GO;
}

int args_fail(const arg_command *cmd, arg_value *vals, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cmd->name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (vals)
        args_free(vals, cmd->n);
    return rc;
}
