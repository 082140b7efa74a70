/*
 * tests/fakes/fake_cuda.c - a scripted CUDA driver for CI machines without a GPU.
 *
 * Hands out its entry points through cuGetProcAddress(_v2) and records every
 * lookup (name, ABI version, flags) so tests can check the loader pinned one
 * version. Simulates primary contexts (reference counted, current per thread),
 * cuMemGetInfo that needs a current context, and allocations that move free
 * memory. Scenarios: see fake_cuda.h.
 */
#include "fake_cuda.h"

#include <stdlib.h>
#include <string.h>

typedef struct fake_ctx {
    int device;
} fake_ctx;

typedef struct fake_dev {
    const char *name;
    unsigned char uuid[16];
    const char *bus_id;
    unsigned long long total, free;
} fake_dev;

static fake_dev g_devs[FAKE_CUDA_DEVICES];
static fake_ctx g_primary[FAKE_CUDA_DEVICES];
static fake_cuda_stats g_stats;
static int g_initialised;
static _Thread_local fake_ctx *t_current;

/* live allocations, so cuMemFree/cuMemRelease can give the bytes back */
#define MAX_ALLOCS 64
static struct {
    unsigned long long addr, size;
    int device, used;
} g_allocs[MAX_ALLOCS];
static unsigned long long g_next_addr = 0x7f0000000000ull;

static const char *mode(void)
{
    const char *m = getenv("FAKE_CUDA_MODE");
    return m && *m ? m : "basic";
}

static int is_mode(const char *m) { return strcmp(mode(), m) == 0; }

static void reset_devices(void)
{
    static const unsigned char u0[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                         0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
    g_devs[0] = (fake_dev){.name = "Fake H200",
                           .bus_id = "0000:3B:00.0",
                           .total = 143771 * FAKE_CUDA_MIB,
                           .free = (143771 - 1143) * FAKE_CUDA_MIB};
    memcpy(g_devs[0].uuid, u0, 16);
    g_devs[1] = (fake_dev){.name = "Fake L4",
                           .bus_id = "0000:5C:00.0",
                           .total = 23034 * FAKE_CUDA_MIB,
                           .free = (23034 - 300) * FAKE_CUDA_MIB};
    for (int i = 0; i < 16; i++)
        g_devs[1].uuid[i] = (unsigned char)(0x10 + i);
    for (int i = 0; i < FAKE_CUDA_DEVICES; i++)
        g_primary[i].device = i;
}

static int device_count(void) { return is_mode("no_devices") ? 0 : FAKE_CUDA_DEVICES; }

#define NEED_INIT()                                                                                \
    do {                                                                                           \
        if (!g_initialised)                                                                        \
            return CUDA_ERROR_NOT_INITIALIZED;                                                     \
    } while (0)

#define NEED_DEVICE(d)                                                                             \
    do {                                                                                           \
        NEED_INIT();                                                                               \
        if ((d) < 0 || (d) >= device_count())                                                      \
            return CUDA_ERROR_INVALID_DEVICE;                                                      \
    } while (0)

#define NEED_CTX()                                                                                 \
    do {                                                                                           \
        NEED_INIT();                                                                               \
        if (!t_current)                                                                            \
            return CUDA_ERROR_INVALID_CONTEXT;                                                     \
    } while (0)

/* ---- initialisation, devices ---- */

static CUresult f_Init(unsigned int flags)
{
    g_stats.init_calls++;
    g_stats.init_flags = flags;
    if (is_mode("init_fails"))
        return CUDA_ERROR_NO_DEVICE;
    reset_devices();
    g_initialised = 1;
    return CUDA_SUCCESS;
}

static CUresult f_DriverGetVersion(int *v)
{
    *v = 13000;
    return CUDA_SUCCESS;
}

static CUresult f_DeviceGetCount(int *n)
{
    NEED_INIT();
    *n = device_count();
    return CUDA_SUCCESS;
}

static CUresult f_DeviceGet(CUdevice *dev, int ordinal)
{
    NEED_DEVICE(ordinal);
    *dev = ordinal;
    return CUDA_SUCCESS;
}

static CUresult f_DeviceGetName(char *name, int len, CUdevice dev)
{
    NEED_DEVICE(dev);
    if (len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    strncpy(name, g_devs[dev].name, (size_t)len - 1);
    name[len - 1] = '\0';
    return CUDA_SUCCESS;
}

static CUresult f_DeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    NEED_DEVICE(dev);
    memcpy(uuid->bytes, g_devs[dev].uuid, 16);
    return CUDA_SUCCESS;
}

static CUresult f_DeviceTotalMem(size_t *bytes, CUdevice dev)
{
    NEED_DEVICE(dev);
    *bytes = (size_t)g_devs[dev].total;
    return CUDA_SUCCESS;
}

static CUresult f_DeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice dev)
{
    NEED_DEVICE(dev);
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = dev == 0 ? 0x3b : 0x5c; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *value = 0; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *value = 0; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        *value = dev == 0 ? 9 : 8;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        *value = dev == 0 ? 0 : 9;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = 1; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: *value = dev == 1 && is_mode("integrated"); return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: *value = is_mode("tcc"); return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult f_DeviceGetPCIBusId(char *busid, int len, CUdevice dev)
{
    NEED_DEVICE(dev);
    if (len < 13)
        return CUDA_ERROR_INVALID_VALUE;
    strncpy(busid, g_devs[dev].bus_id, (size_t)len - 1);
    busid[len - 1] = '\0';
    return CUDA_SUCCESS;
}

/* FAKE_CUDA_LUID (hex) is device 0's LUID, device 1's the next; unset, there are none (as on Linux). */
static CUresult f_DeviceGetLuid(char *luid, unsigned int *mask, CUdevice dev)
{
    NEED_DEVICE(dev);
    const char *e = getenv("FAKE_CUDA_LUID");
    if (!e || !*e)
        return CUDA_ERROR_NOT_SUPPORTED;
    unsigned long long v = strtoull(e, NULL, 16) + (unsigned long long)dev;
    for (int i = 0; i < 4; i++) { /* Windows' LUID: LowPart, then HighPart, each little-endian */
        luid[i] = (char)(v >> (8 * i));
        luid[4 + i] = (char)(v >> (32 + 8 * i));
    }
    *mask = 1u << dev;
    return CUDA_SUCCESS;
}

/* ---- contexts ---- */

static CUresult f_DevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    NEED_DEVICE(dev);
    g_stats.primary_refs[dev]++;
    *ctx = (CUcontext)(void *)&g_primary[dev];
    return CUDA_SUCCESS;
}

static CUresult f_DevicePrimaryCtxRelease(CUdevice dev)
{
    NEED_DEVICE(dev);
    if (g_stats.primary_refs[dev] <= 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    g_stats.primary_refs[dev]--;
    return CUDA_SUCCESS;
}

static CUresult f_CtxSetCurrent(CUcontext ctx)
{
    NEED_INIT();
    t_current = (fake_ctx *)(void *)ctx;
    return CUDA_SUCCESS;
}

static CUresult f_CtxGetCurrent(CUcontext *ctx)
{
    NEED_INIT();
    *ctx = (CUcontext)(void *)t_current;
    return CUDA_SUCCESS;
}

static CUresult f_CtxGetDevice(CUdevice *dev)
{
    NEED_CTX();
    *dev = t_current->device;
    return CUDA_SUCCESS;
}

static CUresult f_CtxSynchronize(void)
{
    NEED_CTX();
    return CUDA_SUCCESS;
}

/* ---- memory ---- */

static CUresult f_MemGetInfo(size_t *free_b, size_t *total_b)
{
    NEED_INIT();
    g_stats.memgetinfo_calls++;
    if (!t_current) {
        g_stats.memgetinfo_without_ctx++;
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    *free_b = (size_t)g_devs[t_current->device].free;
    *total_b = (size_t)g_devs[t_current->device].total;
    return CUDA_SUCCESS;
}

static CUresult charge(size_t bytes, unsigned long long *addr)
{
    NEED_CTX();
    fake_dev *d = &g_devs[t_current->device];
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (bytes > d->free)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (g_allocs[i].used)
            continue;
        d->free -= bytes;
        g_allocs[i].used = 1;
        g_allocs[i].addr = g_next_addr;
        g_allocs[i].size = bytes;
        g_allocs[i].device = t_current->device;
        g_next_addr += (bytes + 0x1fffffull) & ~0x1fffffull;
        *addr = g_allocs[i].addr;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult uncharge(unsigned long long addr)
{
    NEED_INIT();
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (g_allocs[i].used && g_allocs[i].addr == addr) {
            g_devs[g_allocs[i].device].free += g_allocs[i].size;
            g_allocs[i].used = 0;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult f_MemAlloc(CUdeviceptr *p, size_t bytes) { return charge(bytes, p); }
static CUresult f_MemFree(CUdeviceptr p) { return uncharge(p); }

static CUresult f_MemHostAlloc(void **pp, size_t bytes, unsigned int flags)
{
    (void)flags;
    NEED_CTX();
    *pp = malloc(bytes ? bytes : 1);
    return *pp ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult f_MemFreeHost(void *p)
{
    NEED_INIT();
    free(p);
    return CUDA_SUCCESS;
}

static CUresult f_MemHostRegister(void *p, size_t bytes, unsigned int flags)
{
    (void)p, (void)bytes, (void)flags;
    NEED_CTX();
    return CUDA_SUCCESS;
}

static CUresult f_MemHostUnregister(void *p)
{
    (void)p;
    NEED_CTX();
    return CUDA_SUCCESS;
}

static CUresult f_MemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
    (void)dst, (void)src, (void)n;
    NEED_CTX();
    return CUDA_SUCCESS;
}

static CUresult f_MemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
    (void)src;
    NEED_CTX();
    memset(dst, 0, n);
    return CUDA_SUCCESS;
}

static CUresult f_MemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    (void)s;
    return f_MemcpyHtoD(dst, src, n);
}

static CUresult f_MemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    (void)s;
    return f_MemcpyDtoH(dst, src, n);
}

static CUresult f_MemsetD8(CUdeviceptr dst, unsigned char v, size_t n)
{
    (void)dst, (void)v, (void)n;
    NEED_CTX();
    return CUDA_SUCCESS;
}

static CUresult f_MemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s)
{
    (void)s;
    return f_MemsetD8(dst, v, n);
}

/* ---- streams and events: opaque tokens, everything already complete ---- */

static char g_token;

static CUresult f_StreamCreate(CUstream *s, unsigned int flags)
{
    (void)flags;
    NEED_CTX();
    *s = (CUstream)(void *)&g_token;
    return CUDA_SUCCESS;
}

static CUresult f_StreamDestroy(CUstream s)
{
    (void)s;
    NEED_INIT();
    return CUDA_SUCCESS;
}

static CUresult f_StreamSynchronize(CUstream s)
{
    (void)s;
    NEED_CTX();
    return CUDA_SUCCESS;
}

static CUresult f_StreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
    (void)s, (void)e, (void)flags;
    NEED_CTX();
    return CUDA_SUCCESS;
}

static CUresult f_EventCreate(CUevent *e, unsigned int flags)
{
    (void)flags;
    NEED_CTX();
    *e = (CUevent)(void *)&g_token;
    return CUDA_SUCCESS;
}

static CUresult f_EventDestroy(CUevent e)
{
    (void)e;
    NEED_INIT();
    return CUDA_SUCCESS;
}

static CUresult f_EventRecord(CUevent e, CUstream s)
{
    (void)e, (void)s;
    NEED_CTX();
    return CUDA_SUCCESS;
}

static CUresult f_EventSynchronize(CUevent e)
{
    (void)e;
    NEED_CTX();
    return CUDA_SUCCESS;
}

static CUresult f_EventElapsedTime(float *ms, CUevent a, CUevent b)
{
    (void)a, (void)b;
    NEED_CTX();
    *ms = 1.0f;
    return CUDA_SUCCESS;
}

/* ---- virtual memory management ---- */

static CUresult f_MemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option)
{
    NEED_INIT();
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
        prop->location.id >= device_count() ||
        (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
         option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    *g = (size_t)(2 * FAKE_CUDA_MIB);
    return CUDA_SUCCESS;
}

static CUresult f_MemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                                    unsigned long long flags)
{
    (void)align, (void)addr, (void)flags;
    NEED_INIT();
    *p = g_next_addr;
    g_next_addr += (size + 0x1fffffull) & ~0x1fffffull;
    return CUDA_SUCCESS;
}

static CUresult f_MemAddressFree(CUdeviceptr p, size_t size)
{
    (void)p, (void)size;
    NEED_INIT();
    return CUDA_SUCCESS;
}

static CUresult f_MemCreate(CUmemGenericAllocationHandle *h, size_t size,
                            const CUmemAllocationProp *prop, unsigned long long flags)
{
    (void)flags;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    return charge(size, h); /* physical memory is charged at create, as on the H200 */
}

static CUresult f_MemRelease(CUmemGenericAllocationHandle h) { return uncharge(h); }

static CUresult f_MemMap(CUdeviceptr p, size_t size, size_t off, CUmemGenericAllocationHandle h,
                         unsigned long long flags)
{
    (void)p, (void)size, (void)off, (void)h, (void)flags;
    NEED_CTX();
    return CUDA_SUCCESS;
}

static CUresult f_MemUnmap(CUdeviceptr p, size_t size)
{
    (void)p, (void)size;
    NEED_CTX();
    return CUDA_SUCCESS;
}

static CUresult f_MemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *d, size_t n)
{
    (void)p, (void)size;
    NEED_CTX();
    return n == 1 && d->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? CUDA_SUCCESS
                                                                   : CUDA_ERROR_INVALID_VALUE;
}

/* ---- errors ---- */

static const char *err_text(CUresult e, int name)
{
    switch (e) {
    case CUDA_SUCCESS: return name ? "CUDA_SUCCESS" : "no error";
    case CUDA_ERROR_INVALID_VALUE: return name ? "CUDA_ERROR_INVALID_VALUE" : "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY: return name ? "CUDA_ERROR_OUT_OF_MEMORY" : "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED:
        return name ? "CUDA_ERROR_NOT_INITIALIZED" : "initialization error";
    case CUDA_ERROR_NO_DEVICE:
        return name ? "CUDA_ERROR_NO_DEVICE" : "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE:
        return name ? "CUDA_ERROR_INVALID_DEVICE" : "invalid device ordinal";
    case CUDA_ERROR_INVALID_CONTEXT:
        return name ? "CUDA_ERROR_INVALID_CONTEXT" : "invalid device context";
    default: return NULL;
    }
}

static CUresult f_GetErrorString(CUresult e, const char **s)
{
    *s = err_text(e, 0);
    return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult f_GetErrorName(CUresult e, const char **s)
{
    *s = err_text(e, 1);
    return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- the lookup table ---- */

static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status, int v1);

/* cuGetProcAddress asked for itself, as of CUDA 12: the _v2 revision (as the real driver answers). */
static CUresult f_GetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status)
{
    return lookup(symbol, pfn, version, flags, status, 0);
}

typedef void (*any_fn)(void);
#define ENTRY(f) {"cu" #f, (any_fn)f_##f}
static const struct {
    const char *name;
    any_fn fn;
} g_entries[] = {
    ENTRY(Init), ENTRY(DriverGetVersion), ENTRY(DeviceGetCount), ENTRY(DeviceGet),
    ENTRY(DeviceGetName), ENTRY(DeviceGetUuid), ENTRY(DeviceTotalMem), ENTRY(DeviceGetAttribute),
    ENTRY(DeviceGetPCIBusId), ENTRY(DeviceGetLuid), ENTRY(DevicePrimaryCtxRetain), ENTRY(DevicePrimaryCtxRelease),
    ENTRY(CtxSetCurrent), ENTRY(CtxGetCurrent), ENTRY(CtxGetDevice), ENTRY(CtxSynchronize),
    ENTRY(MemGetInfo), ENTRY(MemAlloc), ENTRY(MemFree), ENTRY(MemHostAlloc), ENTRY(MemFreeHost),
    ENTRY(MemHostRegister), ENTRY(MemHostUnregister), ENTRY(MemcpyHtoD), ENTRY(MemcpyDtoH),
    ENTRY(MemcpyHtoDAsync), ENTRY(MemcpyDtoHAsync), ENTRY(MemsetD8), ENTRY(MemsetD8Async),
    ENTRY(StreamCreate), ENTRY(StreamDestroy), ENTRY(StreamSynchronize), ENTRY(StreamWaitEvent),
    ENTRY(EventCreate), ENTRY(EventDestroy), ENTRY(EventRecord), ENTRY(EventSynchronize),
    ENTRY(EventElapsedTime), ENTRY(MemGetAllocationGranularity), ENTRY(MemAddressReserve),
    ENTRY(MemAddressFree), ENTRY(MemCreate), ENTRY(MemRelease), ENTRY(MemMap), ENTRY(MemUnmap),
    ENTRY(MemSetAccess), ENTRY(GetErrorString), ENTRY(GetErrorName), ENTRY(GetProcAddress),
};
#undef ENTRY

static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status, int v1)
{
    int k = g_stats.lookups++;
    if (v1)
        g_stats.lookups_v1++;
    if (k < FAKE_CUDA_MAX_LOOKUPS) {
        strncpy(g_stats.names[k], symbol, sizeof g_stats.names[k] - 1);
        g_stats.versions[k] = version;
        g_stats.flags[k] = flags;
    }
    *pfn = NULL;
    if (is_mode("no_luid") && strcmp(symbol, "cuDeviceGetLuid") == 0) {
        if (status)
            *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    if (is_mode("missing_symbol") && strcmp(symbol, "cuMemSetAccess") == 0) {
        if (status)
            *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        return CUDA_ERROR_NOT_FOUND;
    }
    for (size_t i = 0; i < sizeof g_entries / sizeof g_entries[0]; i++) {
        if (strcmp(symbol, g_entries[i].name) == 0) {
            memcpy(pfn, &g_entries[i].fn, sizeof *pfn);
            if (status)
                *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    }
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return lookup(symbol, pfn, cudaVersion, flags, NULL, 1);
}

#ifndef FAKE_CUDA_LEGACY
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus, 0);
}
#endif

void fake_cuda_get_stats(fake_cuda_stats *out)
{
    *out = g_stats;
    for (int i = 0; i < FAKE_CUDA_DEVICES; i++)
        out->free_bytes[i] = g_devs[i].free;
}
