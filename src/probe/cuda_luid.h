/*
 * probe/cuda_luid.h - which CUDA device a WDDM adapter is.
 *
 * DXGI names an adapter by its LUID (probe/wddm.h); CUDA and the coordinator name a card by its
 * UUID. The driver gives each CUDA device's LUID (cuDeviceGetLuid, Windows only), so a process that
 * runs CUDA can say which card each of its WDDM readings is about.
 */
#ifndef COMEM_PROBE_CUDA_LUID_H
#define COMEM_PROBE_CUDA_LUID_H

#include <stdint.h>

typedef struct comem_cuda_luid {
    uint64_t luid;  /* HighPart << 32 | LowPart, as probe/wddm.h writes an adapter's */
    char uuid[48];  /* "GPU-...", as NVML and comem_cuda_format_uuid write it */
} comem_cuda_luid;

/*
 * The (LUID, UUID) of each CUDA device this process sees, at most max, into out: COMEM_OK with *n
 * (devices without a LUID are left out), COMEM_ENODEV when the driver is not in this process
 * already (comem_cuda_in_process: nothing is loaded to answer), COMEM_ENOTSUP when the driver
 * gives no LUID (Linux).
 */
int comem_cuda_luids(comem_cuda_luid *out, int max, int *n);

#endif
