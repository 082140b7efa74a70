/*
 * tools/comem/run.c - `comem run`: start an unmodified CUDA program as a member of the ledger.
 *
 *   comem run [--policy observe|enforce|off] [--min SIZE] [--socket PATH] -- PROGRAM [ARGS]...
 *
 * It puts libcomem_preload.so in front of LD_PRELOAD (COMEM_PRELOAD_LIB names
 * another copy; by default the one in ../lib next to this binary), sets the
 * preload's settings from the flags, and replaces itself with PROGRAM. Exit
 * status: PROGRAM's; 2 for bad arguments; 127 when the library or PROGRAM
 * cannot be found.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/size.h"
#include "cmds.h"
#include "comem/common.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: comem run [--policy observe|enforce|off] [--min SIZE] [--socket PATH] -- PROGRAM [ARGS]...\n\n"
               "Runs PROGRAM with libcomem_preload.so: its CUDA allocations are attributed to it in the\n"
               "coordinator's ledger, and allocations of at least --min bytes (default 64MiB) are asked for\n"
               "first. --policy enforce answers a refused one with CUDA_ERROR_OUT_OF_MEMORY; observe (the\n"
               "default) logs it and lets it go; off attributes nothing. Without a coordinator the program\n"
               "runs as it would without comem (the library says so once).\n");
}

/*
 * The preload library: COMEM_PRELOAD_LIB, else ../lib/libcomem_preload.so beside this executable
 * (the build tree), else where `make install` put it.
 */
static bool find_library(char *out, size_t len)
{
    const char *env = getenv("COMEM_PRELOAD_LIB");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return access(out, R_OK) == 0;
    }
#ifdef COMEM_PRELOAD_INSTALLED
    bool installed = access(COMEM_PRELOAD_INSTALLED, R_OK) == 0;
#else
    bool installed = false;
#endif
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return false;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash)
        return false;
    *slash = 0;
    snprintf(out, len, "%s/../lib/libcomem_preload.so", exe);
    if (access(out, R_OK) == 0)
        return true;
#ifdef COMEM_PRELOAD_INSTALLED
    if (installed)
        snprintf(out, len, "%s", COMEM_PRELOAD_INSTALLED);
#endif
    return installed;
}

int cmd_run(int argc, char **argv)
{
    int i = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        bool has_value = i + 1 < argc;
        if (!strcmp(a, "--policy") && has_value) {
            const char *p = argv[++i];
            if (strcmp(p, "observe") && strcmp(p, "enforce") && strcmp(p, "off")) {
                fprintf(stderr, "comem run: --policy must be observe, enforce or off, not '%s'\n", p);
                return 2;
            }
            setenv("COMEM_PRELOAD_POLICY", p, 1);
        } else if (!strcmp(a, "--min") && has_value) {
            double v;
            char err[128];
            if (comem_parse_size(argv[++i], &v, err, sizeof err) != COMEM_OK) {
                fprintf(stderr, "comem run: --min: %s\n", err);
                return 2;
            }
            setenv("COMEM_PRELOAD_MIN", argv[i], 1);
        } else if (!strcmp(a, "--socket") && has_value) {
            /* the preload finds the coordinator where the program's other settings are: the environment
               (main puts a --socket given before the command first, so that one given after it wins) */
            setenv("COMEM_SOCKET", argv[++i], 1);
        } else {
            fprintf(stderr, "comem run: unexpected '%s'%s\n", a,
                    a[0] == '-' ? " (a flag without its value, or not one of run's)" : " (put -- before the program)");
            usage(stderr);
            return 2;
        }
    }
    if (i >= argc) {
        fprintf(stderr, "comem run: no program given (comem run [FLAGS] -- PROGRAM [ARGS]...)\n");
        return 2;
    }
    char lib[PATH_MAX + 32];
    if (!find_library(lib, sizeof lib)) {
        fprintf(stderr, "comem run: cannot find libcomem_preload.so (looked at %s; set COMEM_PRELOAD_LIB)\n", lib);
        return 127;
    }
    const char *old = getenv("LD_PRELOAD");
    size_t len = strlen(lib) + (old ? strlen(old) : 0) + 2;
    char *preload = malloc(len);
    if (!preload) {
        fprintf(stderr, "comem run: out of memory\n");
        return 1;
    }
    /* After what is there already: a sanitizer runtime must stay first. */
    snprintf(preload, len, "%s%s%s", old && *old ? old : "", old && *old ? ":" : "", lib);
    setenv("LD_PRELOAD", preload, 1);
    free(preload);
    execvp(argv[i], argv + i);
    fprintf(stderr, "comem run: cannot run '%s': %s\n", argv[i], strerror(errno));
    return 127;
}
