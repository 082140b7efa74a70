/* probe/cuda_driver.c - loads libcuda at run time and fills the dispatch table. */
#include "probe/cuda_driver.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "os/dl.h"
#include "comem/common.h"
#include "os/env.h"

#define DEFAULT_LIBRARY COMEM_DL_CUDA

_Static_assert(sizeof(void *) == sizeof(PFN_cuInit), "function and data pointers have one size");

/* Table slot by driver name; "cu" #f is the base name cuGetProcAddress expects. */
#define SLOT(f) {"cu" #f, offsetof(comem_cuda, f)}
static const struct {
    const char *name;
    size_t offset;
} g_slots[] = {
    SLOT(Init), SLOT(DriverGetVersion), SLOT(DeviceGetCount), SLOT(DeviceGet),
    SLOT(DeviceGetName), SLOT(DeviceGetUuid), SLOT(DeviceTotalMem), SLOT(DeviceGetAttribute),
    SLOT(DeviceGetPCIBusId), SLOT(DevicePrimaryCtxRetain), SLOT(DevicePrimaryCtxRelease),
    SLOT(CtxSetCurrent), SLOT(CtxGetCurrent), SLOT(CtxGetDevice), SLOT(CtxSynchronize),
    SLOT(MemGetInfo), SLOT(MemAlloc), SLOT(MemFree), SLOT(MemHostAlloc), SLOT(MemFreeHost),
    SLOT(MemHostRegister), SLOT(MemHostUnregister), SLOT(MemcpyHtoD), SLOT(MemcpyDtoH),
    SLOT(MemcpyHtoDAsync), SLOT(MemcpyDtoHAsync), SLOT(MemsetD8), SLOT(MemsetD8Async),
    SLOT(StreamCreate), SLOT(StreamDestroy), SLOT(StreamSynchronize), SLOT(StreamWaitEvent),
    SLOT(EventCreate), SLOT(EventDestroy), SLOT(EventRecord), SLOT(EventSynchronize),
    SLOT(EventElapsedTime), SLOT(MemGetAllocationGranularity), SLOT(MemAddressReserve),
    SLOT(MemAddressFree), SLOT(MemCreate), SLOT(MemRelease), SLOT(MemMap), SLOT(MemUnmap),
    SLOT(MemSetAccess), SLOT(GetErrorString), SLOT(GetErrorName),
};
/* Slots a driver may lack: NULL then, and the load goes on. */
static const struct {
    const char *name;
    size_t offset;
} g_optional[] = {SLOT(DeviceGetLuid)};
#undef SLOT
_Static_assert((sizeof g_slots / sizeof g_slots[0]) + (sizeof g_optional / sizeof g_optional[0]) ==
                   sizeof(comem_cuda) / sizeof(void *),
               "every table slot is resolved");

/* Written once inside pthread_once, read-only afterwards. */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static comem_cuda g_table;
static int g_status = COMEM_ENODEV;
static char g_error[512];
static atomic_bool g_ready; /* the table is usable (errstr may ask the driver) */

/* Resolves one entry point through whichever cuGetProcAddress the library has. */
static CUresult resolve(PFN_cuGetProcAddress_v2 gpa2, PFN_cuGetProcAddress_v1 gpa1,
                        const char *name, void **fn, CUdriverProcAddressQueryResult *why)
{
    *fn = NULL;
    *why = CU_GET_PROC_ADDRESS_SUCCESS;
    if (gpa2)
        return gpa2(name, fn, COMEM_CUDA_ABI_VERSION, COMEM_CUDA_PROC_FLAGS, why);
    return gpa1(name, fn, COMEM_CUDA_ABI_VERSION, COMEM_CUDA_PROC_FLAGS);
}

static const char *query_result_str(CUdriverProcAddressQueryResult r)
{
    switch (r) {
    case CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: return "symbol not found";
    case CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: return "driver too old for this revision";
    default: return "not handed out";
    }
}

COMEM_PRINTF(1, 2) static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
    return COMEM_ENODEV;
}

static int load_once(void)
{
    const char *env = comem_env(COMEM_CUDA_LIBRARY_ENV);
    const char *path = env && *env ? env : DEFAULT_LIBRARY;

    /* Prefer the copy already loaded (by PyTorch, say): one driver instance per process. */
    char reason[160] = "";
    comem_dl *lib = comem_dl_open(path, true, reason, sizeof reason);
    if (!lib)
        return fail("cannot load %s: %s", path, reason);

    PFN_cuGetProcAddress_v2 gpa2 = NULL;
    PFN_cuGetProcAddress_v1 gpa1 = NULL;
    void *sym = comem_dl_sym(lib, "cuGetProcAddress_v2");
    if (sym) {
        memcpy(&gpa2, &sym, sizeof sym);
    } else {
        sym = comem_dl_sym(lib, "cuGetProcAddress"); /* CUDA 11.3-11.8: no status argument */
        if (!sym) {
            comem_dl_close(lib);
            return fail("%s has no cuGetProcAddress; a CUDA 11.3 or newer driver is needed", path);
        }
        memcpy(&gpa1, &sym, sizeof sym);
    }

    comem_cuda t;
    for (size_t i = 0; i < sizeof g_slots / sizeof g_slots[0]; i++) {
        void *fn;
        CUdriverProcAddressQueryResult why;
        CUresult rc = resolve(gpa2, gpa1, g_slots[i].name, &fn, &why);
        if (rc != CUDA_SUCCESS || !fn) {
            comem_dl_close(lib);
            return fail("cannot resolve %s at ABI %d in %s: %s (CUresult %d)", g_slots[i].name,
                        COMEM_CUDA_ABI_VERSION, path,
                        gpa2 && why != CU_GET_PROC_ADDRESS_SUCCESS ? query_result_str(why)
                                                                   : "not handed out",
                        (int)rc);
        }
        memcpy((char *)&t + g_slots[i].offset, &fn, sizeof fn);
    }

    for (size_t i = 0; i < sizeof g_optional / sizeof g_optional[0]; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult why;
        if (resolve(gpa2, gpa1, g_optional[i].name, &fn, &why) != CUDA_SUCCESS)
            fn = NULL;
        memcpy((char *)&t + g_optional[i].offset, &fn, sizeof fn);
    }

    CUresult rc = t.Init(0);
    if (rc != CUDA_SUCCESS) {
        const char *s = NULL;
        if (t.GetErrorString(rc, &s) != CUDA_SUCCESS || !s)
            s = comem_cuda_errstr((int)rc);
        int st = fail("cuInit(0) failed in %s: %s (CUresult %d)", path, s, (int)rc);
        comem_dl_close(lib);
        return st;
    }

    int version = 0;
    if (t.DriverGetVersion(&version) != CUDA_SUCCESS)
        version = 0;
    comem_debug("cuda: %s loaded, driver API %d, entry points pinned at ABI %d%s", path, version,
                COMEM_CUDA_ABI_VERSION, gpa2 ? "" : " (cuGetProcAddress without status)");
    g_table = t;
    return COMEM_OK;
}

static void load_entry(void)
{
    g_error[0] = '\0';
    g_status = load_once();
    if (g_status == COMEM_OK)
        atomic_store(&g_ready, true);
    else
        comem_debug("cuda: %s", g_error);
}

int comem_cuda_load(const comem_cuda **out)
{
    pthread_once(&g_once, load_entry);
    if (g_status != COMEM_OK)
        return g_status;
    if (out)
        *out = &g_table;
    return COMEM_OK;
}

bool comem_cuda_in_process(void)
{
    if (atomic_load(&g_ready))
        return true;
    const char *env = comem_env(COMEM_CUDA_LIBRARY_ENV);
    return comem_dl_loaded(env && *env ? env : DEFAULT_LIBRARY);
}

const char *comem_cuda_load_error(void) { return g_error; }

int comem_cuda_status(int curesult)
{
    switch (curesult) {
    case CUDA_SUCCESS: return COMEM_OK;
    case CUDA_ERROR_OUT_OF_MEMORY: return COMEM_ENOSPC;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE: return COMEM_ENODEV;
    default: return COMEM_EDRIVER;
    }
}

static const char *local_name(int curesult)
{
    switch (curesult) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_DEINITIALIZED: return "CUDA_ERROR_DEINITIALIZED";
    case CUDA_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
    case CUDA_ERROR_INSUFFICIENT_DRIVER: return "CUDA_ERROR_INSUFFICIENT_DRIVER";
    case CUDA_ERROR_DEVICE_UNAVAILABLE: return "CUDA_ERROR_DEVICE_UNAVAILABLE";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case CUDA_ERROR_UNKNOWN: return "CUDA_ERROR_UNKNOWN";
    default: return NULL;
    }
}

const char *comem_cuda_errstr(int curesult)
{
    if (atomic_load(&g_ready)) {
        const char *s = NULL;
        if (g_table.GetErrorString((CUresult)curesult, &s) == CUDA_SUCCESS && s)
            return s;
    }
    const char *n = local_name(curesult);
    return n ? n : "unrecognised CUDA error";
}

void comem_cuda_device_prop(int device, CUmemAllocationProp *prop)
{
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = device;
}

int comem_cuda_granularity(int device, int64_t *minimum, int64_t *recommended)
{
    const comem_cuda *cu;
    int rc = comem_cuda_load(&cu);
    if (rc != COMEM_OK)
        return rc;
    CUmemAllocationProp prop;
    comem_cuda_device_prop(device, &prop);
    static const CUmemAllocationGranularity_flags which[2] = {
        CU_MEM_ALLOC_GRANULARITY_MINIMUM, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED};
    int64_t *outs[2] = {minimum, recommended};
    for (int i = 0; i < 2; i++) {
        if (!outs[i])
            continue;
        size_t g = 0;
        CUresult r = cu->MemGetAllocationGranularity(&g, &prop, which[i]);
        if (r != CUDA_SUCCESS) {
            comem_warn("cuda: cuMemGetAllocationGranularity(device %d) failed: %s (%d)", device,
                       comem_cuda_errstr((int)r), (int)r);
            return comem_cuda_status((int)r);
        }
        *outs[i] = (int64_t)g;
    }
    return COMEM_OK;
}
