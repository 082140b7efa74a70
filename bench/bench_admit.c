/*
 * bench/bench_admit.c - the C library's own cost for one admission, for side-by-side runs.
 *
 *   bench_admit SOCKET N [view|local]
 *
 * Opens a worker client on SOCKET and times N admissions that fit (comem_admit of
 * 1 MiB, then comem_grant_done cancelling it); with "view", N reads of the
 * shared-memory view; with "local", N admissions decided locally (SOCKET names
 * no coordinator: no round trip, so the figure is the library's own work). Prints
 * the median and the mean per operation in nanoseconds ("median_ns=...
 * mean_ns=..."). bench/bench_python.py runs it beside the same loops through the
 * Python binding.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comem/comem.h"

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_admit SOCKET N [view]\n");
        return 2;
    }
    int n = atoi(argv[2]);
    int view = argc > 3 && strcmp(argv[3], "view") == 0;
    int local = argc > 3 && strcmp(argv[3], "local") == 0;
    if (n <= 0) {
        fprintf(stderr, "bench_admit: N must be a positive count\n");
        return 2;
    }
    long long *t = malloc((size_t)n * sizeof *t);
    comem_client *c = NULL;
    comem_view *v = NULL;
    if (!t || comem_client_open(argv[1], COMEM_CLIENT_WORKER, "bench-c", -1, local ? 0 : COMEM_OPEN_NO_LOCAL, &c) != COMEM_OK) {
        fprintf(stderr, "bench_admit: no coordinator at %s\n", argv[1]);
        return 1;
    }
    if (view && comem_view_open(argv[1], &v) != COMEM_OK) {
        fprintf(stderr, "bench_admit: no view at %s\n", argv[1]);
        return 1;
    }
    long long sum = 0;
    for (int i = 0; i < n; i++) {
        long long s = now_ns();
        if (view) {
            int64_t f;
            if (comem_view_read(v, 0, NULL, &f, NULL, NULL) != COMEM_OK)
                return 1;
        } else {
            uint64_t g;
            if (comem_admit(c, 0, 0, 1 << 20, 0, 0, NULL, 0, -1, &g, NULL) != COMEM_OK ||
                comem_grant_done(c, g, 0, 0) != COMEM_OK)
                return 1;
        }
        t[i] = now_ns() - s;
        sum += t[i];
    }
    qsort(t, (size_t)n, sizeof *t, cmp);
    printf("median_ns=%lld mean_ns=%lld\n", t[n / 2], sum / n);
    comem_view_close(v);
    comem_client_close(c);
    free(t);
    return 0;
}
