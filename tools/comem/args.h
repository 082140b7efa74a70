/*
 * tools/comem/args.h - "--flag VALUE" parsing for comem subcommands.
 *
 * A command declares its flags in a table; args_parse() fills one value per
 * flag or fails with a one-line reason (unknown flag, missing value, a flag
 * given twice, a required flag absent, a bad size). Values are borrowed from argv.
 */
#ifndef COMEM_TOOLS_ARGS_H
#define COMEM_TOOLS_ARGS_H

#include <stdbool.h>
#include <stddef.h>

typedef enum arg_kind {
    ARG_FLAG,       /* --name, no value */
    ARG_SIZE,       /* --name SIZE (bytes or with a binary unit) */
    ARG_NUMBER,     /* --name N (non-negative decimal, no unit) */
    ARG_STRING,     /* --name TEXT */
    ARG_SIZE_LIST,  /* --name SIZE, repeatable */
    ARG_STRING_LIST /* --name TEXT, repeatable */
} arg_kind;

typedef struct arg_spec {
    const char *name; /* without the leading dashes */
    arg_kind kind;
    bool required;
} arg_spec;

#define ARGS_LIST_MAX 4096

typedef struct arg_value {
    bool set;
    double num;
    const char *str;
    size_t count;     /* list kinds */
    double *nums;     /* ARG_SIZE_LIST, owned; freed by args_free */
    const char **strs; /* ARG_STRING_LIST, owned array of borrowed strings */
} arg_value;

/* Returns 0, or -1 with err filled. vals has one slot per spec. */
int args_parse(int argc, char **argv, const arg_spec *specs, size_t n, arg_value *vals, char *err,
               size_t errlen);
void args_free(arg_value *vals, size_t n);

/* The value slot for a flag name (the name must be in specs). */
arg_value *args_get(const arg_spec *specs, size_t n, arg_value *vals, const char *name);

#endif
