/*
 * tools/common/args.h - "--flag VALUE" parsing for comem's commands and for comemd.
 *
 * A program declares its flags in a table of arg_spec. Three ways to use it:
 *
 *   args_begin()  a command's whole prologue: --help prints the command's help,
 *                 then args_parse(); a refusal is one line, "comem status: REASON",
 *                 and exit status 2 (every command of the comem CLI);
 *   args_parse()  one value per flag, or a one-line reason (unknown flag, missing
 *                 value, a flag given twice, a required flag absent, a bad size);
 *   args_next()   one flag at a time, for a program that checks each value as it
 *                 comes and lets a later flag replace an earlier one (comemd).
 *
 * args_find() says where --help (or any flag of a list) first appears, for the
 * programs whose --help and --version win wherever they are on the line.
 * Values are borrowed from argv.
 */
#ifndef COMEM_TOOLS_ARGS_H
#define COMEM_TOOLS_ARGS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/log.h" /* COMEM_PRINTF */

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

/* How args_next reads a value. */
typedef enum arg_style {
    ARGS_INLINE,  /* --name VALUE or --name=VALUE (the comem CLI) */
    ARGS_SEPARATE /* --name VALUE only: "--name=VALUE" is a flag of that whole name (comemd) */
} arg_style;

/*
 * The flag at argv[*i]: returns its index in specs and sets *value (NULL for an ARG_FLAG), with
 * *i moved past the flag and its value; or -1 with err filled ("unexpected argument 'x'", "unknown
 * flag '--x'", "flag '--x' takes no value", "flag '--x' needs a value") and *i left on the
 * argument refused. Converts nothing and keeps no record: what a value means, and a flag given
 * twice, are the caller's.
 */
int args_next(int argc, char **argv, int *i, const arg_spec *specs, size_t n, arg_style style, const char **value,
              char *err, size_t errlen);

/* Returns 0, or -1 with err filled. vals has one slot per spec. */
int args_parse(int argc, char **argv, const arg_spec *specs, size_t n, arg_value *vals, char *err,
               size_t errlen);
void args_free(arg_value *vals, size_t n);

/* The value slot for a flag name (the name must be in specs). */
arg_value *args_get(const arg_spec *specs, size_t n, arg_value *vals, const char *name);

/*
 * The index of the first argument that is one of names (a NULL-terminated list), or -1. With
 * until_dashdash the search stops at a bare "--": what follows is a program's own (comem run).
 */
int args_find(int argc, char **argv, const char *const *names, bool until_dashdash);

/* --help or -h among the arguments (up to a bare "--" with until_dashdash). */
bool args_asks_help(int argc, char **argv, bool until_dashdash);

/* A command as its prologue sees it: the name its messages begin with, its help and its flags. */
typedef struct arg_command {
    const char *name; /* "comem status": every refusal reads "NAME: REASON" */
    const char *help; /* printed on stdout for --help or -h as the first argument; NULL: not looked for */
    const arg_spec *specs;
    size_t n; /* specs' length; vals holds as many */
} arg_command;

#define ARGS_GO (-1) /* args_begin: the arguments are good, the command goes on */

/*
 * The prologue of a command: --help (or -h) as the first argument prints cmd's help and returns 0
 * (the CLI's main hands every command asked for help exactly that); otherwise args_parse into vals,
 * where a refusal prints "NAME: REASON" on stderr and returns 2. ARGS_GO when the command goes on,
 * its values in vals (the caller args_frees them).
 */
int args_begin(const arg_command *cmd, int argc, char **argv, arg_value *vals);

/*
 * A refusal after the prologue: "NAME: MESSAGE" on stderr, vals freed (NULL: none); returns rc
 * (2 for bad arguments, 1 for a failure), so that a command ends with `return args_fail(...)`.
 */
int args_fail(const arg_command *cmd, arg_value *vals, int rc, const char *fmt, ...) COMEM_PRINTF(4, 5);

#endif
