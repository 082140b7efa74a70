/*
 * tests/gpu/test_gpu_probe.c - the NVML and CUDA sources against a real GPU.
 *
 * Exits 77 (ctest: skipped) when NVML or the CUDA driver is missing or there
 * is no device. Otherwise: NVML's reading is sane; three forked children
 * (the parent never initialises CUDA) each create a context through comem's
 * dispatch table and hold 256, 512 and 1024 MiB; NVML must list each child
 * with at least its allocation, the device-wide used must grow by the sum of
 * the children's usage, a child's cuMemGetInfo free must agree with NVML's
 * (both device-wide on Linux), and the VMM granularity must be a power of two
 * of at least 2 MiB. Then the largest child is SIGKILLed and its bytes must
 * come back within 2 s. Every measured number is printed.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/common.h"
#include "gpu/gpu_child.h"
#include "probe/device.h"
#include "probe/nvml.h"

#define SKIP 77
#define K 3
#define MIB COMEM_MIB
#define READY_TIMEOUT_MS 120000
#define GROWTH_TOL(k) (32 * MIB + (int64_t)(k) * 16 * MIB) /* bookkeeping per process */
#define FREE_TOL (64 * MIB)
#define RECLAIM_DEADLINE_NS (2 * (int64_t)1000000000)

static const int64_t g_sizes[K] = {256 * MIB, 512 * MIB, 1024 * MIB};
static comem_gpuchild g_kids[K];
static int g_started;
static int g_failures;
static comem_device_reading g_r; /* large; off the stack */

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (cond) {                                                                                \
            printf("  ok: ");                                                                      \
        } else {                                                                                   \
            printf("FAIL: ");                                                                      \
            g_failures++;                                                                          \
        }                                                                                          \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
    } while (0)

static double mib(int64_t b) { return (double)b / (double)MIB; }

static void stop_all(void)
{
    for (int i = 0; i < g_started; i++)
        comem_gpuchild_stop(&g_kids[i]);
    g_started = 0;
}

static const comem_proc_use *find_proc(const comem_device_reading *r, pid_t pid)
{
    for (size_t i = 0; i < r->n_procs; i++)
        if (r->procs[i].pid == (int32_t)pid)
            return &r->procs[i];
    return NULL;
}

static int read_dev(comem_device_source *nv, int index)
{
    int rc = comem_device_read(nv, index, &g_r);
    if (rc != COMEM_OK)
        printf("FAIL: NVML read of device %d: %s\n", index, comem_status_str(rc));
    return rc;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    char why[512];
    comem_device_source *nv = NULL;
    int rc = comem_nvml_open(&nv, why, sizeof why);
    if (rc == COMEM_ENODEV) {
        printf("skipped: no NVML device: %s\n", why);
        return SKIP;
    }
    if (rc != COMEM_OK) {
        printf("FAIL: comem_nvml_open: %s (%s)\n", comem_status_str(rc), why);
        return 1;
    }
    const int dev = 0;
    if (read_dev(nv, dev) != COMEM_OK)
        return 1;
    char uuid[sizeof g_r.uuid];
    snprintf(uuid, sizeof uuid, "%s", g_r.uuid);
    printf("device %d: %s %s %s, PCIe gen %d x%d\n", dev, g_r.name, g_r.uuid, g_r.pci_bus_id,
           g_r.pcie_gen, g_r.pcie_width);
    printf("NVML: total %.0f MiB, free %.0f MiB, used %.0f MiB, reserved %.0f MiB, "
           "%zu process(es)\n",
           mib(g_r.total), mib(g_r.free), mib(g_r.used), mib(g_r.reserved), g_r.n_procs);

    /* 1. NVML is sane */
    EXPECT(g_r.total > 0, "total > 0");
    EXPECT(g_r.free >= 0 && g_r.free <= g_r.total, "0 <= free <= total");
    int64_t gap = g_r.used - (g_r.total - g_r.free);
    EXPECT(gap >= -FREE_TOL && gap <= FREE_TOL,
           "used = total - free within 64 MiB (off by %.1f MiB)", mib(gap));
    EXPECT(g_r.uuid[0] && g_r.name[0] && g_r.pci_bus_id[0], "name, UUID and bus id present");
    int found = -1;
    EXPECT(comem_nvml_index_by_uuid(nv, uuid, &found) == COMEM_OK && found == dev,
           "index by UUID finds device %d", dev);
    EXPECT(comem_nvml_index_by_pci_bus_id(nv, g_r.pci_bus_id, &found) == COMEM_OK && found == dev,
           "index by PCI bus id finds device %d", dev);

    int64_t need = 0;
    for (int i = 0; i < K; i++)
        need += g_sizes[i] + 1024 * MIB; /* allocation plus a generous context */
    if (g_r.free < need) {
        printf("skipped: device %d has %.0f MiB free, the test needs %.0f MiB\n", dev,
               mib(g_r.free), mib(need));
        comem_device_close(nv);
        return SKIP;
    }
    int64_t used_before = g_r.used;

    /* 2. children hold memory; the parent never touches CUDA */
    int64_t t0 = comem_now_ns();
    for (int i = 0; i < K; i++) {
        if (comem_gpuchild_start(uuid, g_sizes[i], &g_kids[i]) != 0) {
            printf("FAIL: fork\n");
            stop_all();
            return 1;
        }
        g_started++;
    }
    comem_gpuchild_report rep[K];
    for (int i = 0; i < K; i++) {
        int w = comem_gpuchild_ready(&g_kids[i], READY_TIMEOUT_MS, &rep[i]);
        if (w != 0) {
            printf("FAIL: child %d (pid %d) did not report: %s\n", i, (int)g_kids[i].pid,
                   w == -ETIMEDOUT ? "timed out" : "pipe closed");
            stop_all();
            return 1;
        }
        if (rep[i].status == COMEM_ENODEV) {
            printf("skipped: the CUDA driver is not usable: %s\n", rep[i].reason);
            stop_all();
            comem_device_close(nv);
            return SKIP;
        }
        if (rep[i].status != COMEM_OK) {
            printf("FAIL: child %d: %s (%s)\n", i, rep[i].reason, comem_status_str(rep[i].status));
            stop_all();
            return 1;
        }
    }
    printf("%d children ready in %.0f ms (CUDA device %d)\n", K,
           (double)(comem_now_ns() - t0) / 1e6, rep[0].cuda_device);
    /* Fork safety needs the parent never to call cuInit; merely having libcuda mapped is
     * harmless, and on driver 580 NVML maps it by itself (seen on an H200). */
    printf("libcuda mapped in the parent: %s (the parent never calls comem_cuda_load)\n",
           dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) ? "yes, by NVML" : "no");

    if (read_dev(nv, dev) != COMEM_OK) {
        stop_all();
        return 1;
    }
    EXPECT(g_r.procs_known, "NVML lists processes");
    int64_t sum = 0;
    for (int i = 0; i < K; i++) {
        const comem_proc_use *p = find_proc(&g_r, g_kids[i].pid);
        if (!p) {
            EXPECT(0, "child pid %d listed by NVML (in a container, NVML shows host pids)",
                   (int)g_kids[i].pid);
            continue;
        }
        printf("child %d pid %d: holds %.0f MiB, NVML usedGpuMemory %.0f MiB (context etc. "
               "%.0f MiB), its cuMemGetInfo free %.0f MiB\n",
               i, (int)p->pid, mib(g_sizes[i]), mib(p->bytes), mib(p->bytes - g_sizes[i]),
               mib(rep[i].free));
        EXPECT(p->bytes >= g_sizes[i], "child %d: usage %.0f MiB >= %.0f MiB", i, mib(p->bytes),
               mib(g_sizes[i]));
        sum = comem_add(sum, p->bytes);
    }
    int64_t grew = g_r.used - used_before;
    printf("device used %.0f -> %.0f MiB: grew %.0f MiB; children's usage sums to %.0f MiB\n",
           mib(used_before), mib(g_r.used), mib(grew), mib(sum));
    EXPECT(grew - sum >= -GROWTH_TOL(K) && grew - sum <= GROWTH_TOL(K),
           "growth matches the children's usage within %.0f MiB (off by %.1f MiB)",
           mib(GROWTH_TOL(K)), mib(grew - sum));

    /* 3. a child's cuMemGetInfo agrees with NVML: both are device-wide on Linux */
    int64_t nv_before = g_r.free;
    comem_gpuchild_report m;
    if (comem_gpuchild_ask(&g_kids[0], 'm', 10000, &m) != 0 || m.status != COMEM_OK) {
        EXPECT(0, "child 0 answers cuMemGetInfo");
    } else {
        read_dev(nv, dev);
        int64_t nv_after = g_r.free;
        int64_t lo = comem_min(nv_before, nv_after) - FREE_TOL;
        int64_t hi = comem_max(nv_before, nv_after) + FREE_TOL;
        printf("cuMemGetInfo in child 0: free %.0f MiB, total %.0f MiB; NVML free %.0f / %.0f "
               "MiB around it, NVML total %.0f MiB\n",
               mib(m.free), mib(m.total), mib(nv_before), mib(nv_after), mib(g_r.total));
        EXPECT(m.free >= lo && m.free <= hi,
               "child's free agrees with NVML's within 64 MiB (off by %.1f MiB)",
               mib(m.free - nv_after));
        EXPECT(m.total > 0 && m.total <= g_r.total, "cuMemGetInfo total <= NVML total");
    }

    /* 4. VMM granularity */
    int64_t g = rep[0].gran_min, gr = rep[0].gran_rec;
    printf("VMM granularity: minimum %lld B, recommended %lld B\n", (long long)g, (long long)gr);
    EXPECT(g >= 2 * MIB && (g & (g - 1)) == 0, "minimum granularity is a power of two >= 2 MiB");
    EXPECT(gr >= g && (gr & (gr - 1)) == 0, "recommended granularity is a power of two >= minimum");

    /* 5. SIGKILL the largest holder; its bytes come back */
    int victim = K - 1;
    const comem_proc_use *vp = find_proc(&g_r, g_kids[victim].pid);
    int64_t victim_bytes = vp ? vp->bytes : g_sizes[victim];
    int64_t used_kill = g_r.used;
    int64_t target = used_kill - victim_bytes + FREE_TOL;
    pid_t vpid = g_kids[victim].pid;
    int64_t k0 = comem_now_ns(), reaped_ns = -1, back_ns = -1;
    comem_gpuchild_kill(&g_kids[victim]);
    while (comem_now_ns() - k0 < RECLAIM_DEADLINE_NS) {
        if (reaped_ns < 0 && comem_gpuchild_try_reap(&g_kids[victim]))
            reaped_ns = comem_now_ns() - k0;
        if (comem_device_read(nv, dev, &g_r) == COMEM_OK && g_r.used <= target &&
            !find_proc(&g_r, vpid)) {
            back_ns = comem_now_ns() - k0;
            break;
        }
        usleep(1000);
    }
    printf("SIGKILL of pid %d holding %.0f MiB: reaped after %.1f ms, memory back after %.1f ms "
           "(used %.0f -> %.0f MiB)\n",
           (int)vpid, mib(victim_bytes), (double)reaped_ns / 1e6, (double)back_ns / 1e6,
           mib(used_kill), mib(g_r.used));
    EXPECT(back_ns >= 0, "the killed child's memory came back within 2 s");

    stop_all();
    comem_device_close(nv);
    printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "passed", g_failures);
    return g_failures ? 1 : 0;
}
