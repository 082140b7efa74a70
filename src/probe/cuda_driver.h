/*
 * probe/cuda_driver.h - the CUDA driver, loaded at run time, as one dispatch table.
 *
 * comem has no build-time CUDA dependency. comem_cuda_load() finds libcuda
 * (the copy already in the process if there is one, so comem and PyTorch talk
 * to the same driver instance), resolves cuGetProcAddress with dlsym, and asks
 * it for every entry point below by base name with one pinned ABI version,
 * COMEM_CUDA_ABI_VERSION. Pinning matters: a newer driver may hand out a newer
 * revision of a function with a different signature when asked for its own
 * version; asked for ours, it hands out the revision these declarations
 * describe. Then it calls cuInit(0).
 *
 * The table is process-global, filled once (pthread_once) and never freed; the
 * library stays loaded for the life of the process. Fork safety is the
 * caller's: a process that has called into the driver must not use CUDA in a
 * forked child, so a parent that forks CUDA workers should not load it.
 *
 * COMEM_CUDA_LIBRARY, when set, names the library to load instead of
 * libcuda.so.1 (tests point it at a fake).
 */
#ifndef COMEM_PROBE_CUDA_DRIVER_H
#define COMEM_PROBE_CUDA_DRIVER_H

#include <stdbool.h>
#include <stdint.h>

#include "probe/cuda_abi.h"

/* The CUDA version whose entry point revisions the declarations in cuda_abi.h describe. */
#define COMEM_CUDA_ABI_VERSION 12000

/* The search flags passed to cuGetProcAddress: stream 0 means the legacy default stream. */
#define COMEM_CUDA_PROC_FLAGS CU_GET_PROC_ADDRESS_LEGACY_STREAM

/* Environment variable that overrides the library path. */
#define COMEM_CUDA_LIBRARY_ENV "COMEM_CUDA_LIBRARY"

/*
 * One slot per driver entry point, named like the driver function without its
 * "cu" prefix: cu->MemAlloc(&p, n) is cuMemAlloc (the _v2 revision). Every slot
 * is non-NULL once comem_cuda_load() has returned 0.
 */
typedef struct comem_cuda {
    /* initialisation and version */
    PFN_cuInit Init;
    PFN_cuDriverGetVersion DriverGetVersion;
    /* devices (no context needed) */
    PFN_cuDeviceGetCount DeviceGetCount;
    PFN_cuDeviceGet DeviceGet;
    PFN_cuDeviceGetName DeviceGetName;
    PFN_cuDeviceGetUuid DeviceGetUuid;
    PFN_cuDeviceTotalMem DeviceTotalMem;
    PFN_cuDeviceGetAttribute DeviceGetAttribute;
    PFN_cuDeviceGetPCIBusId DeviceGetPCIBusId;
    /* contexts: comem only uses primary contexts, shared with PyTorch */
    PFN_cuDevicePrimaryCtxRetain DevicePrimaryCtxRetain;
    PFN_cuDevicePrimaryCtxRelease DevicePrimaryCtxRelease;
    PFN_cuCtxSetCurrent CtxSetCurrent;
    PFN_cuCtxGetCurrent CtxGetCurrent;
    PFN_cuCtxGetDevice CtxGetDevice;
    PFN_cuCtxSynchronize CtxSynchronize;
    /* memory (needs a current context) */
    PFN_cuMemGetInfo MemGetInfo;
    PFN_cuMemAlloc MemAlloc;
    PFN_cuMemFree MemFree;
    PFN_cuMemHostAlloc MemHostAlloc;
    PFN_cuMemFreeHost MemFreeHost;
    PFN_cuMemHostRegister MemHostRegister;
    PFN_cuMemHostUnregister MemHostUnregister;
    PFN_cuMemcpyHtoD MemcpyHtoD;
    PFN_cuMemcpyDtoH MemcpyDtoH;
    PFN_cuMemcpyHtoDAsync MemcpyHtoDAsync;
    PFN_cuMemcpyDtoHAsync MemcpyDtoHAsync;
    PFN_cuMemsetD8 MemsetD8;
    PFN_cuMemsetD8Async MemsetD8Async;
    /* streams and events */
    PFN_cuStreamCreate StreamCreate;
    PFN_cuStreamDestroy StreamDestroy;
    PFN_cuStreamSynchronize StreamSynchronize;
    PFN_cuStreamWaitEvent StreamWaitEvent;
    PFN_cuEventCreate EventCreate;
    PFN_cuEventDestroy EventDestroy;
    PFN_cuEventRecord EventRecord;
    PFN_cuEventSynchronize EventSynchronize;
    PFN_cuEventElapsedTime EventElapsedTime;
    /* virtual memory management (the pager's backend) */
    PFN_cuMemGetAllocationGranularity MemGetAllocationGranularity;
    PFN_cuMemAddressReserve MemAddressReserve;
    PFN_cuMemAddressFree MemAddressFree;
    PFN_cuMemCreate MemCreate;
    PFN_cuMemRelease MemRelease;
    PFN_cuMemMap MemMap;
    PFN_cuMemUnmap MemUnmap;
    PFN_cuMemSetAccess MemSetAccess;
    /* errors */
    PFN_cuGetErrorString GetErrorString;
    PFN_cuGetErrorName GetErrorName;
    /* optional: NULL where the driver hands out none (it means something on Windows only) */
    PFN_cuDeviceGetLuid DeviceGetLuid;
} comem_cuda;

/*
 * Loads the driver once per process and hands out the table.
 *   out: receives the table (valid for the life of the process) on success.
 * Returns 0, or COMEM_ENODEV when the library is missing, lacks an entry
 * point, or cuInit fails (comem_cuda_load_error() says which); later calls
 * return the first call's result without retrying. Thread-safe.
 */
int comem_cuda_load(const comem_cuda **out);

/*
 * Whether this process has the driver already: loaded by comem, or by anyone (PyTorch) from the
 * library comem_cuda_load would take. Loads nothing: a process that never used CUDA is not made to.
 */
bool comem_cuda_in_process(void);

/*
 * Why the load failed, one line ("cannot load libcuda.so.1: ...",
 * "cuInit(0) failed: ..."); "" before a load or after a successful one.
 */
const char *comem_cuda_load_error(void);

/*
 * Maps a CUresult to a comem status: CUDA_SUCCESS -> 0, out of memory ->
 * COMEM_ENOSPC, no device / not initialised / deinitialised / invalid device
 * -> COMEM_ENODEV, anything else -> COMEM_EDRIVER.
 */
int comem_cuda_status(int curesult);

/*
 * A description of a CUresult for log lines: the driver's own text when it is
 * loaded and knows the code, else the code's name ("CUDA_ERROR_NO_DEVICE") or
 * "unrecognised CUDA error". Never NULL; the string is static.
 */
const char *comem_cuda_errstr(int curesult);

/*
 * The VMM allocation granularity of device memory (pinned, on device `device`)
 * as cuMemGetAllocationGranularity reports it, in bytes.
 *   minimum, recommended: receive the two values; either may be NULL.
 * Loads the driver if needed. Returns 0, COMEM_ENODEV (no driver), or the
 * mapped driver error (comem_cuda_status).
 */
int comem_cuda_granularity(int device, int64_t *minimum, int64_t *recommended);

/* The allocation properties of plain device memory on `device` (what the pager commits). */
void comem_cuda_device_prop(int device, CUmemAllocationProp *prop);

#endif
