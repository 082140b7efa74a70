/*
 * bench/bench_probe.c - what the device probes cost, and what they see, on a real GPU.
 *
 * Prints p50/p99 of nvmlInit_v2, nvmlDeviceGetMemoryInfo (v1, v2),
 * nvmlDeviceGetComputeRunningProcesses_v3 with 1 and 8 CUDA processes alive,
 * a full comem "nvml" reading, and cuMemGetInfo (timed inside a CUDA child:
 * this process never initialises CUDA, because it forks the CUDA processes);
 * the device memory of a process that holds only a context; and device-wide
 * used against the sum of per-process usage plus the driver's reserve.
 * Without NVML or a GPU it says why and exits 0. Not a test: run it by hand
 * (build/bin/bench_probe). COMEM_NVML_LIBRARY / COMEM_CUDA_LIBRARY work here
 * too, so the fakes can stand in for a dry run.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "comem/common.h"
#include "gpu/gpu_child.h"
#include "probe/device.h"
#include "probe/nvml.h"
#include "probe/nvml_abi.h"

#define MIB COMEM_MIB
#define N_FAST 1000 /* samples of the cheap calls */
#define N_SLOW 300  /* samples of the process list and a full reading */
#define N_INIT 20   /* nvmlShutdown + nvmlInit_v2 cycles */
#define N_KIDS 8
#define KID_BYTES (64 * MIB) /* what each child beyond the first holds */

typedef struct raw_nvml {
    void *lib;
    PFN_nvmlInit init;
    PFN_nvmlShutdown shutdown;
    PFN_nvmlDeviceGetHandleByIndex handle;
    PFN_nvmlDeviceGetMemoryInfo mem_v1;
    PFN_nvmlDeviceGetMemoryInfo_v2 mem_v2;
    PFN_nvmlDeviceGetComputeRunningProcesses procs_v3;
    nvmlDevice_t dev;
} raw_nvml;

static comem_device_reading g_r;
static int64_t g_ns[N_FAST];

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void print_stats(const char *what, int64_t *ns, int n)
{
    qsort(ns, (size_t)n, sizeof ns[0], cmp_i64);
    int i99 = (n * 99) / 100 < n ? (n * 99) / 100 : n - 1;
    printf("%-52s n=%4d  p50 %9.2f us  p99 %9.2f us  max %9.2f us\n", what, n,
           (double)ns[n / 2] / 1e3, (double)ns[i99] / 1e3, (double)ns[n - 1] / 1e3);
}

static double mib(int64_t b) { return (double)b / (double)MIB; }

#define RESOLVE(dst, name)                                                                         \
    do {                                                                                           \
        void *s_ = dlsym(n->lib, name);                                                            \
        memcpy(&(dst), &s_, sizeof(dst));                                                          \
    } while (0)

/* Loads NVML directly (not through comem's source) so nvmlInit_v2 itself can be timed. */
static int raw_open(raw_nvml *n)
{
    const char *env = getenv(COMEM_NVML_LIBRARY_ENV);
    const char *path = env && *env ? env : "libnvidia-ml.so.1";
    memset(n, 0, sizeof *n);
    n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        printf("bench_probe: no NVML (%s); nothing to measure\n", dlerror());
        return -1;
    }
    RESOLVE(n->init, "nvmlInit_v2");
    RESOLVE(n->shutdown, "nvmlShutdown");
    RESOLVE(n->handle, "nvmlDeviceGetHandleByIndex_v2");
    RESOLVE(n->mem_v1, "nvmlDeviceGetMemoryInfo");
    RESOLVE(n->mem_v2, "nvmlDeviceGetMemoryInfo_v2");
    RESOLVE(n->procs_v3, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!n->init || !n->shutdown || !n->handle || !n->mem_v1) {
        printf("bench_probe: %s lacks nvmlInit_v2 or another basic call; nothing to measure\n",
               path);
        return -1;
    }
    int64_t t0 = comem_now_ns();
    nvmlReturn_t r = n->init();
    int64_t first = comem_now_ns() - t0;
    if (r != NVML_SUCCESS) {
        printf("bench_probe: nvmlInit_v2 failed (%d); no GPU to measure\n", (int)r);
        return -1;
    }
    printf("nvmlInit_v2, first call in this process: %.2f ms\n", (double)first / 1e6);
    for (int i = 0; i < N_INIT; i++) {
        n->shutdown();
        t0 = comem_now_ns();
        r = n->init();
        g_ns[i] = comem_now_ns() - t0;
        if (r != NVML_SUCCESS) {
            printf("bench_probe: nvmlInit_v2 failed on repeat (%d)\n", (int)r);
            return -1;
        }
    }
    print_stats("nvmlInit_v2 (after nvmlShutdown)", g_ns, N_INIT);
    if (n->handle(0, &n->dev) != NVML_SUCCESS) {
        printf("bench_probe: NVML sees no device 0; nothing to measure\n");
        return -1;
    }
    return 0;
}

static void time_memory_info(raw_nvml *n)
{
    nvmlMemory_t m1;
    for (int i = 0; i < N_FAST; i++) {
        int64_t t0 = comem_now_ns();
        n->mem_v1(n->dev, &m1);
        g_ns[i] = comem_now_ns() - t0;
    }
    print_stats("nvmlDeviceGetMemoryInfo", g_ns, N_FAST);
    if (!n->mem_v2) {
        printf("nvmlDeviceGetMemoryInfo_v2: not in this library\n");
        return;
    }
    nvmlMemory_v2_t m2;
    for (int i = 0; i < N_FAST; i++) {
        m2.version = NVML_MEMORY_V2_VERSION;
        int64_t t0 = comem_now_ns();
        n->mem_v2(n->dev, &m2);
        g_ns[i] = comem_now_ns() - t0;
    }
    print_stats("nvmlDeviceGetMemoryInfo_v2", g_ns, N_FAST);
}

static void time_procs(raw_nvml *n, const char *label)
{
    if (!n->procs_v3) {
        printf("nvmlDeviceGetComputeRunningProcesses_v3: not in this library\n");
        return;
    }
    static nvmlProcessInfo_t infos[COMEM_MAX_DEVICE_PROCS];
    unsigned seen = 0;
    for (int i = 0; i < N_SLOW; i++) {
        unsigned c = COMEM_MAX_DEVICE_PROCS;
        int64_t t0 = comem_now_ns();
        n->procs_v3(n->dev, &c, infos);
        g_ns[i] = comem_now_ns() - t0;
        seen = c;
    }
    char what[96];
    snprintf(what, sizeof what, "ComputeRunningProcesses_v3, %s (saw %u)", label, seen);
    print_stats(what, g_ns, N_SLOW);
}

static void time_reading(comem_device_source *nv)
{
    for (int i = 0; i < N_SLOW; i++) {
        int64_t t0 = comem_now_ns();
        comem_device_read(nv, 0, &g_r);
        g_ns[i] = comem_now_ns() - t0;
    }
    print_stats("comem nvml source: one full reading", g_ns, N_SLOW);
}

static const comem_proc_use *find_proc(pid_t pid)
{
    for (size_t i = 0; i < g_r.n_procs; i++)
        if (g_r.procs[i].pid == (int32_t)pid)
            return &g_r.procs[i];
    return NULL;
}

static void accounting(const char *label)
{
    int64_t sum = 0;
    for (size_t i = 0; i < g_r.n_procs; i++)
        sum = comem_add(sum, comem_clamp0(g_r.procs[i].bytes));
    int64_t reserved = comem_clamp0(g_r.reserved);
    printf("%s: device used %.0f MiB; sum of %zu process(es) %.0f MiB + reserved %.0f MiB = "
           "%.0f MiB; unattributed %.0f MiB\n",
           label, mib(g_r.used), g_r.n_procs, mib(sum), mib(g_r.reserved), mib(sum + reserved),
           mib(g_r.used - sum - reserved));
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    raw_nvml n;
    if (raw_open(&n) != 0)
        return 0;
    char why[512];
    comem_device_source *nv = NULL;
    if (comem_nvml_open(&nv, why, sizeof why) != COMEM_OK) {
        printf("bench_probe: %s\n", why);
        return 0;
    }
    if (comem_device_read(nv, 0, &g_r) != COMEM_OK) {
        printf("bench_probe: cannot read device 0\n");
        return 0;
    }
    char uuid[sizeof g_r.uuid];
    snprintf(uuid, sizeof uuid, "%s", g_r.uuid);
    printf("device 0: %s %s, total %.0f MiB, %zu compute process(es) before we start\n", g_r.name,
           uuid, mib(g_r.total), g_r.n_procs);

    time_memory_info(&n);
    time_reading(nv);
    time_procs(&n, "before our children");
    comem_device_read(nv, 0, &g_r);
    accounting("before our children");

    static comem_gpuchild kids[N_KIDS];
    int started = 0;
    comem_gpuchild_report rep;
    if (comem_gpuchild_start(uuid, 0, &kids[0]) != 0 ||
        comem_gpuchild_ready(&kids[0], 120000, &rep) != 0) {
        printf("bench_probe: the first CUDA child did not start\n");
        goto out;
    }
    started = 1;
    if (rep.status != COMEM_OK) {
        printf("bench_probe: no usable CUDA driver (%s); CUDA measurements skipped\n", rep.reason);
        goto out;
    }
    comem_device_read(nv, 0, &g_r);
    const comem_proc_use *p = find_proc(kids[0].pid);
    if (p)
        printf("device memory of a process holding only a primary context: %.0f MiB\n",
               mib(p->bytes));
    else
        printf("the context-only child (pid %d) is not in NVML's list (pid namespace?)\n",
               (int)kids[0].pid);
    time_procs(&n, "1 CUDA child alive");
    if (comem_gpuchild_ask(&kids[0], 'b', 60000, &rep) == 0 && rep.status == COMEM_OK)
        printf("%-52s n=%4d  p50 %9.2f us  p99 %9.2f us\n", "cuMemGetInfo (in a CUDA child)",
               COMEM_GPUCHILD_BENCH_N, (double)rep.p50_ns / 1e3, (double)rep.p99_ns / 1e3);
    accounting("1 child");

    int64_t t0 = comem_now_ns();
    for (int i = 1; i < N_KIDS; i++) {
        if (comem_gpuchild_start(uuid, KID_BYTES, &kids[i]) != 0)
            break;
        started++;
    }
    for (int i = 1; i < started; i++) {
        if (comem_gpuchild_ready(&kids[i], 120000, &rep) != 0 || rep.status != COMEM_OK) {
            printf("bench_probe: child %d failed: %s\n", i, rep.reason);
            goto out;
        }
    }
    printf("%d more CUDA children (%.0f MiB each) ready in %.0f ms\n", started - 1,
           mib(KID_BYTES), (double)(comem_now_ns() - t0) / 1e6);
    time_procs(&n, "8 CUDA children alive");
    comem_device_read(nv, 0, &g_r);
    accounting("8 children");

out:
    for (int i = 0; i < started; i++)
        comem_gpuchild_stop(&kids[i]);
    comem_device_close(nv);
    n.shutdown();
    dlclose(n.lib);
    return 0;
}
