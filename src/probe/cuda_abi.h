/*
 * probe/cuda_abi.h - the few CUDA driver API declarations comem needs, without the SDK.
 *
 * comem never includes <cuda.h> and never links libcuda: the driver is loaded
 * at run time (probe/cuda_driver.c). These are our own declarations, written
 * from the driver API reference, of exactly the types, constants and entry
 * point signatures comem calls. Layouts are the x86-64/aarch64 Linux ABI; the
 * static asserts at the end pin the sizes the driver expects.
 *
 * Signatures are those of the entry points cuGetProcAddress hands out for the
 * pinned ABI version (COMEM_CUDA_ABI_VERSION in probe/cuda_driver.h): sizes are
 * size_t and device pointers 64-bit (the "_v2" generation of the memory calls).
 */
#ifndef COMEM_PROBE_CUDA_ABI_H
#define COMEM_PROBE_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

/* ---- result codes (only those comem names) ---- */
typedef enum CUresult_e {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_STUB_LIBRARY = 34,       /* the toolkit's stub libcuda, not a driver */
    CUDA_ERROR_INSUFFICIENT_DRIVER = 35,
    CUDA_ERROR_DEVICE_UNAVAILABLE = 46, /* exclusive-process or prohibited compute mode */
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;

/* ---- handles ---- */
typedef int CUdevice;                             /* an ordinal, not a pointer */
typedef struct comem_cu_ctx_st *CUcontext;        /* opaque */
typedef struct comem_cu_stream_st *CUstream;      /* opaque; NULL is the legacy default stream */
typedef struct comem_cu_event_st *CUevent;        /* opaque */
typedef unsigned long long CUdeviceptr;           /* device virtual address */
typedef unsigned long long CUmemGenericAllocationHandle; /* a cuMemCreate handle */
typedef uint64_t cuuint64_t;

typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;

/* ---- device attributes (cuDeviceGetAttribute) ---- */
typedef enum CUdevice_attribute_e {
    CU_DEVICE_ATTRIBUTE_INTEGRATED = 18, /* the GPU shares host memory (Jetson, GB10, APUs) */
    CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
    CU_DEVICE_ATTRIBUTE_TCC_DRIVER = 35, /* Windows: the card runs TCC, not WDDM (its memory is the driver's alone) */
    CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
    CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102
} CUdevice_attribute;

/* ---- flags ---- */
#define CU_STREAM_DEFAULT 0x0u
#define CU_STREAM_NON_BLOCKING 0x1u
#define CU_EVENT_DEFAULT 0x0u
#define CU_EVENT_DISABLE_TIMING 0x2u
#define CU_MEMHOSTALLOC_PORTABLE 0x1u
#define CU_MEMHOSTREGISTER_PORTABLE 0x1u

/* ---- virtual memory management ---- */
typedef enum CUmemAllocationType_e {
    CU_MEM_ALLOCATION_TYPE_INVALID = 0,
    CU_MEM_ALLOCATION_TYPE_PINNED = 1 /* resident device memory */
} CUmemAllocationType;

typedef enum CUmemAllocationHandleType_e {
    CU_MEM_HANDLE_TYPE_NONE = 0,
    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
} CUmemAllocationHandleType;

typedef enum CUmemLocationType_e {
    CU_MEM_LOCATION_TYPE_INVALID = 0,
    CU_MEM_LOCATION_TYPE_DEVICE = 1 /* id is a device ordinal */
} CUmemLocationType;

typedef enum CUmemAllocationGranularity_flags_e {
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1
} CUmemAllocationGranularity_flags;

typedef enum CUmemAccess_flags_e {
    CU_MEM_ACCESS_FLAGS_PROT_NONE = 0,
    CU_MEM_ACCESS_FLAGS_PROT_READ = 1,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
} CUmemAccess_flags;

typedef struct CUmemLocation_st {
    CUmemLocationType type;
    int id;
} CUmemLocation;

/* What cuMemCreate should allocate. Zero it, then set type and location. */
typedef struct CUmemAllocationProp_st {
    CUmemAllocationType type;
    CUmemAllocationHandleType requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData; /* Windows only; NULL */
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
    CUmemLocation location;
    CUmemAccess_flags flags;
} CUmemAccessDesc;

/* ---- cuGetProcAddress ---- */
typedef enum CUdriverProcAddress_flags_e {
    CU_GET_PROC_ADDRESS_DEFAULT = 0,
    CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1,           /* stream 0 is the legacy default stream */
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2
} CUdriverProcAddress_flags;

typedef enum CUdriverProcAddressQueryResult_e {
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} CUdriverProcAddressQueryResult;

/* cuGetProcAddress_v2 (CUDA 12.0+): reports why a symbol was not handed out. */
typedef CUresult (*PFN_cuGetProcAddress_v2)(const char *symbol, void **pfn, int cudaVersion,
                                            cuuint64_t flags,
                                            CUdriverProcAddressQueryResult *symbolStatus);
/* cuGetProcAddress (CUDA 11.3+), the exported name without the status argument. */
typedef CUresult (*PFN_cuGetProcAddress_v1)(const char *symbol, void **pfn, int cudaVersion,
                                            cuuint64_t flags);

/* ---- entry points, by base name ---- */
typedef CUresult (*PFN_cuInit)(unsigned int flags);
typedef CUresult (*PFN_cuDriverGetVersion)(int *version);
typedef CUresult (*PFN_cuDeviceGetCount)(int *count);
typedef CUresult (*PFN_cuDeviceGet)(CUdevice *dev, int ordinal);
typedef CUresult (*PFN_cuDeviceGetName)(char *name, int len, CUdevice dev);
typedef CUresult (*PFN_cuDeviceGetUuid)(CUuuid *uuid, CUdevice dev);
typedef CUresult (*PFN_cuDeviceTotalMem)(size_t *bytes, CUdevice dev);
typedef CUresult (*PFN_cuDeviceGetAttribute)(int *value, CUdevice_attribute attrib, CUdevice dev);
typedef CUresult (*PFN_cuDeviceGetPCIBusId)(char *busid, int len, CUdevice dev);
/* The device's LUID, 8 bytes laid out as Windows' LUID (LowPart, then HighPart); Windows only. */
typedef CUresult (*PFN_cuDeviceGetLuid)(char *luid, unsigned int *deviceNodeMask, CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxRelease)(CUdevice dev);
typedef CUresult (*PFN_cuCtxSetCurrent)(CUcontext ctx);
typedef CUresult (*PFN_cuCtxGetCurrent)(CUcontext *ctx);
typedef CUresult (*PFN_cuCtxGetDevice)(CUdevice *dev);
typedef CUresult (*PFN_cuCtxSynchronize)(void);
typedef CUresult (*PFN_cuMemGetInfo)(size_t *free_bytes, size_t *total_bytes);
typedef CUresult (*PFN_cuMemAlloc)(CUdeviceptr *dptr, size_t bytes);
typedef CUresult (*PFN_cuMemFree)(CUdeviceptr dptr);
typedef CUresult (*PFN_cuMemHostAlloc)(void **pp, size_t bytes, unsigned int flags);
typedef CUresult (*PFN_cuMemFreeHost)(void *p);
typedef CUresult (*PFN_cuMemHostRegister)(void *p, size_t bytes, unsigned int flags);
typedef CUresult (*PFN_cuMemHostUnregister)(void *p);
typedef CUresult (*PFN_cuMemcpyHtoD)(CUdeviceptr dst, const void *src, size_t bytes);
typedef CUresult (*PFN_cuMemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);
typedef CUresult (*PFN_cuMemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes,
                                          CUstream stream);
typedef CUresult (*PFN_cuMemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t bytes,
                                          CUstream stream);
typedef CUresult (*PFN_cuMemsetD8)(CUdeviceptr dst, unsigned char value, size_t count);
typedef CUresult (*PFN_cuMemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t count,
                                        CUstream stream);
typedef CUresult (*PFN_cuStreamCreate)(CUstream *stream, unsigned int flags);
typedef CUresult (*PFN_cuStreamDestroy)(CUstream stream);
typedef CUresult (*PFN_cuStreamSynchronize)(CUstream stream);
typedef CUresult (*PFN_cuStreamWaitEvent)(CUstream stream, CUevent event, unsigned int flags);
typedef CUresult (*PFN_cuEventCreate)(CUevent *event, unsigned int flags);
typedef CUresult (*PFN_cuEventDestroy)(CUevent event);
typedef CUresult (*PFN_cuEventRecord)(CUevent event, CUstream stream);
typedef CUresult (*PFN_cuEventSynchronize)(CUevent event);
typedef CUresult (*PFN_cuEventElapsedTime)(float *ms, CUevent start, CUevent end);
typedef CUresult (*PFN_cuMemGetAllocationGranularity)(size_t *granularity,
                                                      const CUmemAllocationProp *prop,
                                                      CUmemAllocationGranularity_flags option);
typedef CUresult (*PFN_cuMemAddressReserve)(CUdeviceptr *ptr, size_t size, size_t alignment,
                                            CUdeviceptr addr, unsigned long long flags);
typedef CUresult (*PFN_cuMemAddressFree)(CUdeviceptr ptr, size_t size);
typedef CUresult (*PFN_cuMemCreate)(CUmemGenericAllocationHandle *handle, size_t size,
                                    const CUmemAllocationProp *prop, unsigned long long flags);
typedef CUresult (*PFN_cuMemRelease)(CUmemGenericAllocationHandle handle);
typedef CUresult (*PFN_cuMemMap)(CUdeviceptr ptr, size_t size, size_t offset,
                                 CUmemGenericAllocationHandle handle, unsigned long long flags);
typedef CUresult (*PFN_cuMemUnmap)(CUdeviceptr ptr, size_t size);
typedef CUresult (*PFN_cuMemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                       size_t count);
typedef CUresult (*PFN_cuGetErrorString)(CUresult error, const char **str);
typedef CUresult (*PFN_cuGetErrorName)(CUresult error, const char **str);

/* The layouts the driver reads and writes; a mismatch here corrupts memory silently. */
_Static_assert(sizeof(CUresult) == 4, "CUresult is a 32-bit enum");
_Static_assert(sizeof(CUdeviceptr) == 8, "CUdeviceptr is 64-bit");
_Static_assert(sizeof(CUuuid) == 16, "CUuuid is 16 bytes");
_Static_assert(sizeof(CUmemLocation) == 8, "CUmemLocation is {type, id}");
_Static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc is {location, flags}");
_Static_assert(offsetof(CUmemAllocationProp, location) == 8, "prop.location at 8");
_Static_assert(offsetof(CUmemAllocationProp, win32HandleMetaData) == 16, "prop.win32 at 16");
_Static_assert(offsetof(CUmemAllocationProp, allocFlags) == 24, "prop.allocFlags at 24");
_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp is 32 bytes");

#endif
