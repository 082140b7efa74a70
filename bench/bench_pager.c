/*
 * bench/bench_pager.c - the weight pager on a real GPU, side by side with the bare driver.
 *
 *   bench_pager [--gib N] [--quick]
 *
 * 1. An ask from the coordinator to bytes released: a pager process holds 8 GiB
 *    of pages on a nearly full card; another process's admission needs 6 GiB of
 *    them. (Run first: the pager process is forked before this one touches CUDA.)
 * 2. Fault-in throughput of N GiB (commit + copy from pinned host memory, the
 *    next page's commit overlapping the current page's copy) against one plain
 *    pinned cuMemcpyHtoD of the same bytes. Target: >= 90%.
 * 3. Evicting 8 GiB of resident pages against the bare driver calls for the same
 *    mappings (sync, unmap + release each, sync), at 32, 64 and 128 MiB pages.
 *    Target: within 10% + 1 ms.
 * 4. What set_simple_headroom costs: the call, and the next fault that must
 *    evict because of it, against an ordinary resident fault.
 *
 * Without a GPU it says so and exits 0. Figures are printed, not asserted.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "comem/pager.h"
#include "probe/cuda_driver.h"
#include "probe/nvml.h"

#define MIB COMEM_MIB
#define GIB COMEM_GIB

static const comem_cuda *cu;
static bool g_quick;

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

#define CK(x)                                                                                                     \
    do {                                                                                                          \
        int r_ = (x);                                                                                             \
        if (r_ != 0) {                                                                                            \
            fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, r_);                                     \
            exit(1);                                                                                              \
        }                                                                                                         \
    } while (0)

/* ---- 1. ask -> release, across processes ---- */

static void bench_ask(void)
{
    char dir[] = "/tmp/comem-bench-pager-XXXXXX", sock[128];
    if (!mkdtemp(dir))
        return;
    snprintf(sock, sizeof sock, "%s/comem.sock", dir);
    comem_coord *coord;
    if (comem_coord_start(sock, "nvml", &coord) != COMEM_OK) {
        printf("  ask -> release: cannot start a coordinator on NVML\n");
        return;
    }
    int ready[2], done[2];
    if (pipe(ready) || pipe(done))
        return;
    pid_t child = fork();
    if (child == 0) { /* the pager process: first to touch CUDA */
        comem_pager *p;
        comem_vbar *v;
        comem_client *c;
        CK(comem_cuda_load(&cu)); /* the parent has not initialised CUDA: safe to do here */
        CK(comem_pager_open(COMEM_PAGER_CUDA, 0, NULL, &p));
        CK(comem_client_open(sock, COMEM_CLIENT_WORKER, "pager-proc", -1, COMEM_OPEN_NO_LOCAL, &c));
        CK(comem_pager_attach(p, c, "weights"));
        size_t free_b, total;
        CUdeviceptr filler = 0;
        cu->MemGetInfo(&free_b, &total);
        int64_t fill = (int64_t)free_b - 10 * GIB; /* leave 8 GiB for the pages and ~2 GiB free */
        if (fill > 0)
            CK(cu->MemAlloc(&filler, (size_t)fill));
        comem_pager_set_device_poll(p, 0, 2000); /* regulate to 0: keep its pages unless asked */
        comem_pager_set_simple_headroom(p, 0);
        CK(comem_vbar_create(p, 8 * GIB, 0, &v));
        uint32_t sig[8];
        for (int64_t off = 0; off < 8 * GIB; off += 32 * MIB) {
            int rc = comem_vbar_fault(v, off, 32 * MIB, sig, 8);
            if (rc == COMEM_VBAR_RESIDENT)
                comem_vbar_unpin(v, off, 32 * MIB);
        }
        int64_t before = comem_vbar_loaded_size(v);
        if (write(ready[1], &before, sizeof before) != sizeof before)
            _exit(1);
        int64_t got;
        if (read(done[0], &got, sizeof got) != sizeof got)
            _exit(1);
        int64_t after = comem_vbar_loaded_size(v);
        if (write(ready[1], &after, sizeof after) != sizeof after)
            _exit(1);
        comem_pager_close(p);
        comem_client_close(c);
        if (filler)
            cu->MemFree(filler);
        _exit(0);
    }
    int64_t before = 0, after = 0;
    if (read(ready[0], &before, sizeof before) != sizeof before) {
        printf("  ask -> release: the pager process failed\n");
        waitpid(child, NULL, 0);
        return;
    }
    comem_client *req;
    CK(comem_client_open(sock, COMEM_CLIENT_WORKER, "requester", -1, COMEM_OPEN_NO_LOCAL, &req));
    uint64_t grant;
    int64_t short_by = 0, freed = 0, need = 0, fb = 0;
    int asked = 0;
    int64_t t0 = now_ns();
    int rc = comem_admit(req, 0, 0, 6 * GIB, 0, 0, NULL, 0, 20000, &grant, &short_by);
    double ms = (double)(now_ns() - t0) / 1e6;
    comem_admit_details(req, &need, &fb, NULL, &freed, &asked, NULL);
    int64_t one = 1;
    if (write(done[1], &one, sizeof one) != sizeof one || read(ready[0], &after, sizeof after) != sizeof after)
        after = -1;
    waitpid(child, NULL, 0);
    printf("  admission of 6 GiB on a full card, granted=%s: %.2f ms from the request to the grant\n",
           rc == COMEM_OK ? "yes" : "no", ms);
    printf("    (free before %.2f GiB, ask target %.2f GiB; %d holder asked; the pager freed %.2f GiB: "
           "its pages %.2f -> %.2f GiB)\n",
           (double)fb / GIB, (double)need / GIB, asked, (double)freed / GIB, (double)before / GIB,
           (double)after / GIB);
    comem_client_close(req);
    comem_coord_stop(coord);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        return;
}

/* ---- 2. fault-in throughput ---- */

static void bench_fault_in(comem_pager *p, int64_t bytes)
{
    void *host;
    CK(cu->MemHostAlloc(&host, (size_t)bytes, 0));
    memset(host, 0x5a, (size_t)bytes);
    CUstream st;
    CK(cu->StreamCreate(&st, 1 /* non-blocking */));
    CUevent a, b;
    CK(cu->EventCreate(&a, 0));
    CK(cu->EventCreate(&b, 0));
    /* the plain copy: one pinned cuMemcpyHtoD of the same bytes */
    CUdeviceptr dst;
    CK(cu->MemAlloc(&dst, (size_t)bytes));
    double plain[5];
    for (int r = 0; r < 5; r++) {
        CK(cu->EventRecord(a, st));
        CK(cu->MemcpyHtoDAsync(dst, host, (size_t)bytes, st));
        CK(cu->EventRecord(b, st));
        CK(cu->EventSynchronize(b));
        float ms;
        CK(cu->EventElapsedTime(&ms, a, b));
        plain[r] = (double)bytes / (ms * 1e-3) / 1e9;
    }
    CK(cu->MemFree(dst));
    double plain_gbs = median(plain, 5);
    /* the pager: fault page i (commit), issue its copy, fault page i+1 while the copy runs */
    const int64_t page = 32 * MIB;
    double paged[5];
    for (int r = 0; r < 5; r++) {
        comem_vbar *v;
        CK(comem_vbar_create(p, bytes, page, &v));
        uint32_t sig[4];
        int64_t t0 = now_ns();
        for (int64_t off = 0; off < bytes; off += page) {
            if (comem_vbar_fault(v, off, page, sig, 4) != COMEM_VBAR_RESIDENT) {
                printf("  fault-in: a page was refused at %lld MiB\n", (long long)(off / MIB));
                break;
            }
            CK(cu->MemcpyHtoDAsync(comem_vbar_base(v) + (CUdeviceptr)off, (char *)host + off, (size_t)page, st));
        }
        CK(cu->StreamSynchronize(st));
        double s = (double)(now_ns() - t0) / 1e9;
        paged[r] = (double)bytes / s / 1e9;
        comem_vbar_unpin(v, 0, bytes);
        comem_vbar_destroy(v);
    }
    double paged_gbs = median(paged, 5);
    printf("  fault-in of %.0f GiB (32 MiB pages, commit overlapped with copy): %.2f GB/s; plain pinned "
           "cuMemcpyHtoD %.2f GB/s: %.1f%%\n",
           (double)bytes / GIB, paged_gbs, plain_gbs, 100.0 * paged_gbs / plain_gbs);
    cu->EventDestroy(a);
    cu->EventDestroy(b);
    cu->StreamDestroy(st);
    cu->MemFreeHost(host);
}

/* ---- 3. eviction against the bare driver ---- */

static double bare_evict_ms(int64_t bytes, int64_t page)
{
    int64_t n = bytes / page;
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemAccessDesc acc = {0};
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CUdeviceptr base;
    CK(cu->MemAddressReserve(&base, (size_t)bytes, 0, 0, 0));
    CUmemGenericAllocationHandle *h = malloc(sizeof *h * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        CK(cu->MemCreate(&h[i], (size_t)page, &prop, 0));
        CK(cu->MemMap(base + (CUdeviceptr)(i * page), (size_t)page, 0, h[i], 0));
        CK(cu->MemSetAccess(base + (CUdeviceptr)(i * page), (size_t)page, &acc, 1));
    }
    int64_t t0 = now_ns();
    CK(cu->CtxSynchronize());
    for (int64_t i = n; i-- > 0;) {
        CK(cu->MemUnmap(base + (CUdeviceptr)(i * page), (size_t)page));
        CK(cu->MemRelease(h[i]));
    }
    CK(cu->CtxSynchronize());
    double ms = (double)(now_ns() - t0) / 1e6;
    CK(cu->MemAddressFree(base, (size_t)bytes));
    free(h);
    return ms;
}

static double pager_evict_ms(comem_pager *p, int64_t bytes, int64_t page)
{
    comem_vbar *v;
    CK(comem_vbar_create(p, bytes, page, &v));
    uint32_t sig[4];
    for (int64_t off = 0; off < bytes; off += page)
        if (comem_vbar_fault(v, off, page, sig, 4) == COMEM_VBAR_RESIDENT)
            comem_vbar_unpin(v, off, page);
    int64_t freed = 0, t0 = now_ns();
    comem_pager_free_memory(p, bytes, &freed);
    double ms = (double)(now_ns() - t0) / 1e6;
    if (freed != bytes)
        printf("  (the pager freed %lld of %lld bytes)\n", (long long)freed, (long long)bytes);
    comem_vbar_destroy(v);
    return ms;
}

static void bench_evict(comem_pager *p)
{
    int64_t pages[3] = {32 * MIB, 64 * MIB, 128 * MIB};
    int reps = g_quick ? 3 : 5;
    for (int k = 0; k < 3; k++) {
        double b[8], q[8];
        for (int r = 0; r < reps; r++) {
            b[r] = bare_evict_ms(8 * GIB, pages[k]);
            q[r] = pager_evict_ms(p, 8 * GIB, pages[k]);
        }
        double bm = median(b, reps), qm = median(q, reps);
        printf("  evict 8 GiB at %3lld MiB pages: pager %.2f ms, bare driver calls %.2f ms: %+.1f%% (%+.2f ms)%s\n",
               (long long)(pages[k] / MIB), qm, bm, 100.0 * (qm - bm) / bm, qm - bm,
               qm <= bm * 1.10 + 1.0 ? "" : "  (outside 10% + 1 ms)");
    }
}

/* ---- 4. set_simple_headroom, live ---- */

static void bench_headroom(comem_pager *p)
{
    comem_vbar *v;
    const int64_t page = 32 * MIB, bytes = 8 * GIB;
    CK(comem_vbar_create(p, bytes, page, &v));
    uint32_t sig[4];
    for (int64_t off = 0; off < bytes; off += page)
        if (comem_vbar_fault(v, off, page, sig, 4) == COMEM_VBAR_RESIDENT)
            comem_vbar_unpin(v, off, page);
    double hit[200];
    for (int i = 0; i < 200; i++) {
        int64_t t0 = now_ns();
        comem_vbar_fault(v, 0, page, sig, 4);
        hit[i] = (double)(now_ns() - t0) / 1e3;
        comem_vbar_unpin(v, 0, page);
    }
    size_t free_b, total;
    cu->MemGetInfo(&free_b, &total);
    int64_t old = comem_pager_simple_headroom(p);
    int64_t want = (int64_t)total - comem_pager_usage(p) + 1 * GIB; /* the simple term now wants 1 GiB back */
    int64_t t0 = now_ns();
    comem_pager_set_simple_headroom(p, want);
    double set_us = (double)(now_ns() - t0) / 1e3;
    int64_t u0 = comem_pager_usage(p);
    t0 = now_ns();
    comem_vbar_fault(v, 0, page, sig, 4);
    double next_ms = (double)(now_ns() - t0) / 1e6;
    int64_t evicted = u0 - comem_pager_usage(p);
    comem_vbar_unpin(v, 0, page);
    printf("  set_simple_headroom: the call %.2f us; the next fault %.2f ms (evicted %.2f GiB for it); an "
           "ordinary resident fault %.2f us (p50)\n",
           set_us, next_ms, (double)evicted / GIB, median(hit, 200));
    comem_pager_set_simple_headroom(p, old);
    comem_vbar_destroy(v);
}

int main(int argc, char **argv)
{
    int64_t gib = 8;
    setvbuf(stdout, NULL, _IOLBF, 0); /* the forked pager process must not inherit unflushed lines */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gib") && i + 1 < argc)
            gib = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            g_quick = true;
        else {
            fprintf(stderr, "usage: bench_pager [--gib N] [--quick]\n");
            return 2;
        }
    }
    if (gib < 1 || gib > 64) {
        fprintf(stderr, "bench_pager: --gib must be between 1 and 64\n");
        return 2;
    }
    comem_device_source *nv;
    char why[256];
    if (comem_nvml_open(&nv, why, sizeof why) != COMEM_OK) {
        printf("bench_pager: no GPU (%s); nothing to measure\n", why);
        return 0;
    }
    comem_device_close(nv);
    setenv("COMEM_LOG", "warn", 0);
    signal(SIGPIPE, SIG_IGN);
    printf("bench_pager: NVIDIA GPU 0\n");
    fflush(stdout);
    bench_ask(); /* first: it forks its pager process before this one touches CUDA */
    if (comem_cuda_load(&cu) != COMEM_OK) {
        printf("bench_pager: %s\n", comem_cuda_load_error());
        return 0;
    }
    comem_pager *p;
    if (comem_pager_open(COMEM_PAGER_CUDA, 0, NULL, &p) != COMEM_OK) {
        printf("bench_pager: cannot open the CUDA pager\n");
        return 1;
    }
    comem_pager_set_device_poll(p, 0, 2000);
    /* The ask test's process has just freed most of the card: copies started now run 4-7 % slower
       (bench_pager_aimdo's probe, docs/measurements.md issue 11 item 4), so let the device settle. */
    (void)cu->CtxSynchronize();
    sleep(2);
    bench_fault_in(p, gib * GIB);
    bench_evict(p);
    bench_headroom(p);
    comem_pager_close(p);
    return 0;
}
