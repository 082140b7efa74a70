/*
 * tests/fakes/fake_nvml.h - what the fake NVML exports, and how a test inspects it.
 *
 * fake_nvml.c builds twice: libfake_nvml.so exports the versioned and the
 * unversioned entry points; libfake_nvml_legacy.so (FAKE_NVML_LEGACY) only the
 * unversioned ones, so the loader's missing-symbol fallbacks run.
 *
 * FAKE_NVML_MODE, read at every nvmlInit, picks the scenario:
 *   basic (default) two devices (below)
 *   no_v3           the _v3 process and PCI calls answer FUNCTION_NOT_FOUND
 *   only_v1_procs   the _v3 and _v2 process calls answer FUNCTION_NOT_FOUND
 *   no_v2_mem       GetMemoryInfo_v2 answers NOT_SUPPORTED
 *   init_fails      nvmlInit_v2 / nvmlInit answer DRIVER_NOT_LOADED
 *   no_devices      the count is 0
 *   insufficient    device 0 runs 40 processes (pid 5000+i, i+1 MiB each)
 *   too_many        device 0 runs 300 processes
 *   not_available   device 0's second process has usedGpuMemory NOT_AVAILABLE
 *   mem_lost        GetMemoryInfo (both) answer GPU_IS_LOST
 *
 * Device 0: "NVIDIA H200", GPU-aaaaaaaa-1111-2222-3333-444444444444,
 * 00000000:3B:00.0, total 143771 MiB, reserved 615 MiB, allocated 2064 MiB,
 * processes {4242: 520 MiB, 4343: 1544 MiB}, PCIe gen 5 x16.
 * Device 1: "NVIDIA L4", GPU-bbbbbbbb-1111-2222-3333-444444444444,
 * 00000000:5C:00.0, total 23034 MiB, reserved 300 MiB, allocated 0, no
 * processes, PCIe link queries NOT_SUPPORTED.
 * GetMemoryInfo_v2 refuses a wrong version tag with ARGUMENT_VERSION_MISMATCH.
 */
#ifndef COMEM_TESTS_FAKE_NVML_H
#define COMEM_TESTS_FAKE_NVML_H

#include "probe/nvml_abi.h"

#define FAKE_NVML_MIB (1024ull * 1024ull)

/* How many times the named entry point was called since the last reset. */
int fake_nvml_calls(const char *fn);
typedef int (*fake_nvml_calls_fn)(const char *fn);

/* Zeroes the call counters. */
void fake_nvml_reset(void);
typedef void (*fake_nvml_reset_fn)(void);

nvmlReturn_t nvmlInit(void);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t r);
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count);
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int len);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int len);
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *count,
                                                  nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen);
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *width);
#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos);
#endif

#endif
