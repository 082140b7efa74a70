/*
 * probe/nvml_abi.h - the few NVML declarations comem needs, without the SDK.
 *
 * libnvidia-ml.so.1 is loaded at run time (probe/nvml.c); these are our own
 * declarations, written from the NVML API reference, of the return codes,
 * structs and entry point signatures comem calls, versioned and unversioned.
 * The static asserts pin the struct sizes the library writes into.
 */
#ifndef COMEM_PROBE_NVML_ABI_H
#define COMEM_PROBE_NVML_ABI_H

#include <limits.h>
#include <stddef.h>

typedef enum nvmlReturn_e {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,   /* the buffer was too small; the count says how many */
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13, /* the library has it, the driver does not */
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18, /* library and kernel module differ */
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25, /* a versioned struct's version is not known */
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef struct comem_nvml_device_st *nvmlDevice_t; /* opaque */

/* Buffer sizes the library guarantees are enough. */
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16

/* nvmlDeviceGetMemoryInfo: used includes the driver-reserved bytes. */
typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

/* nvmlDeviceGetMemoryInfo_v2: reserved is split out of used. Set version first. */
typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define NVML_MEMORY_V2_VERSION ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

/* nvmlDeviceGetComputeRunningProcesses (unversioned): the original 16-byte record. */
typedef struct nvmlProcessInfo_v1_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

/* The _v2 and _v3 process calls: with the MIG instance ids, 24 bytes. */
typedef struct nvmlProcessInfo_st {
    unsigned int pid;
    unsigned long long usedGpuMemory; /* NVML_VALUE_NOT_AVAILABLE when unknown (WDDM, MIG) */
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

/* usedGpuMemory when the driver cannot say (the header's (-1), as an unsigned long long). */
#define NVML_VALUE_NOT_AVAILABLE ULLONG_MAX

/*
 * nvmlDeviceGetPciInfo_v3 fills all of it. The older _v2 and unversioned calls
 * write the older 52-byte layout: a 16-byte busId where busIdLegacy sits, the
 * ids at the same offsets, then reserved words over the start of busId. This
 * layout is the larger, so it is safe to pass to all three, but only after
 * _v3 is busId meaningful.
 */
typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE]; /* "0000:3B:00.0" */
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;    /* device id << 16 | vendor id */
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE]; /* "00000000:3B:00.0" */
} nvmlPciInfo_t;

/* ---- entry points ---- */
typedef nvmlReturn_t (*PFN_nvmlInit)(void);                  /* nvmlInit_v2, nvmlInit */
typedef nvmlReturn_t (*PFN_nvmlShutdown)(void);
typedef const char *(*PFN_nvmlErrorString)(nvmlReturn_t result);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetCount)(unsigned int *count); /* _v2 and plain */
typedef nvmlReturn_t (*PFN_nvmlDeviceGetHandleByIndex)(unsigned int index, nvmlDevice_t *device);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetName)(nvmlDevice_t device, char *name, unsigned int len);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetUUID)(nvmlDevice_t device, char *uuid, unsigned int len);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetPciInfo)(nvmlDevice_t device, nvmlPciInfo_t *pci);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetMemoryInfo)(nvmlDevice_t device, nvmlMemory_t *memory);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetMemoryInfo_v2)(nvmlDevice_t device,
                                                       nvmlMemory_v2_t *memory);
/* _v3 and _v2 */
typedef nvmlReturn_t (*PFN_nvmlDeviceGetComputeRunningProcesses)(nvmlDevice_t device,
                                                                 unsigned int *count,
                                                                 nvmlProcessInfo_t *infos);
/* unversioned */
typedef nvmlReturn_t (*PFN_nvmlDeviceGetComputeRunningProcesses_v1)(nvmlDevice_t device,
                                                                    unsigned int *count,
                                                                    nvmlProcessInfo_v1_t *infos);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetPcieLink)(nvmlDevice_t device, unsigned int *value);

_Static_assert(sizeof(nvmlReturn_t) == 4, "nvmlReturn_t is a 32-bit enum");
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t is 3 x u64");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t is u32 (padded) + 4 x u64");
_Static_assert(NVML_MEMORY_V2_VERSION == 0x02000028u, "nvmlMemory_v2 version tag");
_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "v1 process record is 16 bytes");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "v2/v3 process record is 24 bytes");
_Static_assert(offsetof(nvmlPciInfo_t, domain) == 16, "pci.domain after busIdLegacy");
_Static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "pci.busId after the five ids");
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t is 68 bytes");

#endif
