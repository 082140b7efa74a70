/*
 * tests/fakes/fake_cuda.h - what the fake CUDA driver exports, and how a test inspects it.
 *
 * The fake (fake_cuda.c, built as libfake_cuda.so) exports only what comem's
 * loader looks up with dlsym: cuGetProcAddress_v2 and cuGetProcAddress (the
 * "legacy" build, libfake_cuda_legacy.so, lacks _v2). Every driver entry point
 * is handed out through them, as the real driver does, cuGetProcAddress itself
 * included (its _v2 revision, as CUDA 12 asks for it).
 *
 * FAKE_CUDA_MODE, read at cuInit and at each lookup, picks the scenario:
 *   basic (default)  two devices (below), no context current anywhere
 *   init_fails       cuInit returns CUDA_ERROR_NO_DEVICE
 *   no_devices       cuInit succeeds, cuDeviceGetCount gives 0
 *   missing_symbol   cuMemSetAccess is refused (version not sufficient)
 *   integrated       device 1 reports CU_DEVICE_ATTRIBUTE_INTEGRATED (its memory is host RAM)
 *   no_luid          cuDeviceGetLuid is not handed out (a driver without it: the load goes on)
 *   tcc              every device reports CU_DEVICE_ATTRIBUTE_TCC_DRIVER (Windows: not WDDM)
 *
 * FAKE_CUDA_LUID (hex), read at each cuDeviceGetLuid, is device 0's LUID and device 1's is one
 * more; unset, cuDeviceGetLuid answers CUDA_ERROR_NOT_SUPPORTED.
 *
 * Devices: 0 "Fake H200", UUID bytes 00 11 22 .. ff, bus 0000:3B:00.0,
 * 143771 MiB, 1143 MiB used at start; 1 "Fake L4", UUID bytes 10 11 .. 1f,
 * bus 0000:5C:00.0, 23034 MiB, 300 MiB used at start. cuMemAlloc and
 * cuMemCreate charge the current context's device; VMM granularity is 2 MiB.
 */
#ifndef COMEM_TESTS_FAKE_CUDA_H
#define COMEM_TESTS_FAKE_CUDA_H

#include "probe/cuda_abi.h"

#define FAKE_CUDA_MAX_LOOKUPS 128
#define FAKE_CUDA_DEVICES 2
#define FAKE_CUDA_MIB (1024ull * 1024ull)

typedef struct fake_cuda_stats {
    int lookups;            /* cuGetProcAddress* calls */
    int lookups_v1;         /* ... of which through the original cuGetProcAddress */
    char names[FAKE_CUDA_MAX_LOOKUPS][48];
    int versions[FAKE_CUDA_MAX_LOOKUPS];
    unsigned long long flags[FAKE_CUDA_MAX_LOOKUPS];
    int init_calls;
    unsigned init_flags;
    int memgetinfo_calls;       /* every cuMemGetInfo */
    int memgetinfo_without_ctx; /* ... made with no context current (refused) */
    int primary_refs[FAKE_CUDA_DEVICES];
    unsigned long long free_bytes[FAKE_CUDA_DEVICES];
} fake_cuda_stats;

/* Copies the fake's counters (the test finds it with dlsym on the fake). */
void fake_cuda_get_stats(fake_cuda_stats *out);
typedef void (*fake_cuda_get_stats_fn)(fake_cuda_stats *out);

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
#ifndef FAKE_CUDA_LEGACY
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus);
#endif

#endif
