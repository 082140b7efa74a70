/*
 * pager/vmm_cuda.c - the pager's VMM backend on a CUDA device, through the
 * driver's virtual memory management calls (the dispatch table of
 * probe/cuda_driver.h; no build-time CUDA).
 *
 *   reserve   cuMemAddressReserve
 *   commit    cuMemCreate (pinned device memory) + cuMemMap + cuMemSetAccess
 *             (read-write for this device), unwound in reverse on failure
 *   evict     cuMemUnmap + cuMemRelease (errors logged; the page is gone)
 *   kept pool cuMemUnmap alone (the handle kept); cuMemMap + cuMemSetAccess of
 *             a kept handle; cuMemRelease of one (pager/keep.c)
 *   sync      cuCtxSynchronize
 *   free      cuMemGetInfo (free and total)
 *   copies    cuMemcpyHtoD / cuMemcpyDtoH
 *
 * Granularity is what cuMemGetAllocationGranularity says (minimum), never
 * assumed. Out of memory (CUDA_ERROR_OUT_OF_MEMORY) is COMEM_ENOSPC, the path
 * the core recovers from by evicting; CUDA_ERROR_NOT_READY is COMEM_EBUSY, a
 * transient failure the core retries (F13).
 *
 * Contexts: the backend retains the device's primary context at open (the
 * one PyTorch uses) and releases it at close. Calls that need a context make
 * it current on the calling thread first, when it is not already. If the
 * thread had another context current, that one is made current again after
 * the call; a thread with none (the client's callback thread answering a
 * release ask) keeps ours current, so later evictions on it cost nothing
 * extra. Threads where the primary context is already current (PyTorch's)
 * pay one cuCtxGetCurrent per call.
 */
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/log.h"
#include "comem/common.h"
#include "pager/vmm.h"
#include "probe/cuda_driver.h"
#include "probe/cuda_view.h"

typedef struct vmm_cuda {
    comem_vmm base;
    const comem_cuda *cu;
    int ordinal;
    CUdevice dev;
    CUcontext ctx; /* the retained primary context */
} vmm_cuda;

static vmm_cuda *as_cuda(comem_vmm *m) { return (vmm_cuda *)m; }

/* A driver result as the core's status; failures other than OOM and NOT_READY are logged. */
static int status_of(const char *what, CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS: return COMEM_OK;
    case CUDA_ERROR_OUT_OF_MEMORY: return COMEM_ENOSPC;
    case CUDA_ERROR_NOT_READY: return COMEM_EBUSY;
    default:
        comem_warn("pager cuda: %s failed: %s (%d)", what, comem_cuda_errstr((int)r), (int)r);
        return COMEM_EDRIVER;
    }
}

/* Makes the primary context current; *prev receives the context to restore (NULL: none to restore). */
static int enter(vmm_cuda *c, CUcontext *prev)
{
    CUcontext cur = NULL;
    *prev = NULL;
    if (c->cu->CtxGetCurrent(&cur) == CUDA_SUCCESS && cur == c->ctx)
        return COMEM_OK;
    CUresult r = c->cu->CtxSetCurrent(c->ctx);
    if (r != CUDA_SUCCESS)
        return status_of("cuCtxSetCurrent", r);
    *prev = cur;
    return COMEM_OK;
}

static void leave(vmm_cuda *c, CUcontext prev)
{
    if (prev)
        (void)c->cu->CtxSetCurrent(prev);
}

static int cuda_reserve(comem_vmm *m, int64_t size, uint64_t *va)
{
    vmm_cuda *c = as_cuda(m);
    CUcontext prev;
    int rc = enter(c, &prev);
    if (rc != COMEM_OK)
        return rc;
    CUdeviceptr p = 0;
    rc = status_of("cuMemAddressReserve", c->cu->MemAddressReserve(&p, (size_t)size, 0, 0, 0));
    leave(c, prev);
    if (rc == COMEM_ENOSPC)
        rc = COMEM_ENOMEM; /* out of address space, not of device memory */
    if (rc == COMEM_OK)
        *va = (uint64_t)p;
    return rc;
}

static void cuda_unreserve(comem_vmm *m, uint64_t va, int64_t size)
{
    vmm_cuda *c = as_cuda(m);
    CUcontext prev;
    if (enter(c, &prev) != COMEM_OK) {
        comem_warn("pager cuda: cannot free a reservation of %lld bytes: no context", (long long)size);
        return;
    }
    (void)status_of("cuMemAddressFree", c->cu->MemAddressFree((CUdeviceptr)va, (size_t)size));
    leave(c, prev);
}

static int cuda_commit(comem_vmm *m, uint64_t va, int64_t size, uint64_t *handle)
{
    vmm_cuda *c = as_cuda(m);
    CUcontext prev;
    int rc = enter(c, &prev);
    if (rc != COMEM_OK)
        return rc;
    CUmemAllocationProp prop;
    comem_cuda_device_prop(c->ordinal, &prop);
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, c->ordinal}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUmemGenericAllocationHandle h = 0;
    CUresult r = c->cu->MemCreate(&h, (size_t)size, &prop, 0);
    if (r != CUDA_SUCCESS) {
        rc = status_of("cuMemCreate", r);
        goto out;
    }
    r = c->cu->MemMap((CUdeviceptr)va, (size_t)size, 0, h, 0);
    if (r != CUDA_SUCCESS) {
        rc = status_of("cuMemMap", r);
        goto fail_release;
    }
    r = c->cu->MemSetAccess((CUdeviceptr)va, (size_t)size, &access, 1);
    if (r != CUDA_SUCCESS) {
        rc = status_of("cuMemSetAccess", r);
        goto fail_unmap;
    }
    *handle = (uint64_t)h;
    rc = COMEM_OK;
    goto out;
fail_unmap:
    (void)status_of("cuMemUnmap (unwinding a commit)", c->cu->MemUnmap((CUdeviceptr)va, (size_t)size));
fail_release:
    (void)status_of("cuMemRelease (unwinding a commit)", c->cu->MemRelease(h));
out:
    leave(c, prev);
    return rc;
}

static void cuda_evict(comem_vmm *m, uint64_t va, int64_t size, uint64_t handle)
{
    vmm_cuda *c = as_cuda(m);
    CUcontext prev;
    if (enter(c, &prev) != COMEM_OK) {
        comem_warn("pager cuda: cannot evict a page of %lld bytes: no context; it stays mapped", (long long)size);
        return;
    }
    (void)status_of("cuMemUnmap", c->cu->MemUnmap((CUdeviceptr)va, (size_t)size));
    (void)status_of("cuMemRelease", c->cu->MemRelease((CUmemGenericAllocationHandle)handle));
    leave(c, prev);
}

/* The kept pool: the mapping goes, the physical allocation stays under its handle for a later cuMemMap. */
static bool cuda_unmap_keep(comem_vmm *m, uint64_t va, int64_t size, uint64_t handle)
{
    vmm_cuda *c = as_cuda(m);
    CUcontext prev;
    if (enter(c, &prev) != COMEM_OK) {
        comem_warn("pager cuda: cannot unmap a page of %lld bytes: no context; it stays mapped", (long long)size);
        return false;
    }
    bool ok = status_of("cuMemUnmap", c->cu->MemUnmap((CUdeviceptr)va, (size_t)size)) == COMEM_OK;
    if (!ok)
        (void)status_of("cuMemRelease", c->cu->MemRelease((CUmemGenericAllocationHandle)handle));
    leave(c, prev);
    return ok;
}

static int cuda_remap(comem_vmm *m, uint64_t va, int64_t size, uint64_t handle)
{
    vmm_cuda *c = as_cuda(m);
    CUcontext prev;
    int rc = enter(c, &prev);
    if (rc != COMEM_OK)
        return rc;
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, c->ordinal}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    rc = status_of("cuMemMap", c->cu->MemMap((CUdeviceptr)va, (size_t)size, 0, (CUmemGenericAllocationHandle)handle, 0));
    if (rc == COMEM_OK) {
        rc = status_of("cuMemSetAccess", c->cu->MemSetAccess((CUdeviceptr)va, (size_t)size, &access, 1));
        if (rc != COMEM_OK)
            (void)status_of("cuMemUnmap (unwinding a remap)", c->cu->MemUnmap((CUdeviceptr)va, (size_t)size));
    }
    leave(c, prev);
    return rc;
}

static void cuda_release(comem_vmm *m, int64_t size, uint64_t handle)
{
    vmm_cuda *c = as_cuda(m);
    CUcontext prev;
    if (enter(c, &prev) != COMEM_OK) {
        comem_warn("pager cuda: cannot release %lld kept bytes: no context", (long long)size);
        return;
    }
    (void)status_of("cuMemRelease", c->cu->MemRelease((CUmemGenericAllocationHandle)handle));
    leave(c, prev);
}

static int cuda_sync(comem_vmm *m)
{
    vmm_cuda *c = as_cuda(m);
    CUcontext prev;
    int rc = enter(c, &prev);
    if (rc != COMEM_OK)
        return rc;
    rc = status_of("cuCtxSynchronize", c->cu->CtxSynchronize());
    leave(c, prev);
    return rc;
}

static int cuda_read_free(comem_vmm *m, int64_t *free_bytes, int64_t *capacity)
{
    vmm_cuda *c = as_cuda(m);
    CUcontext prev;
    int rc = enter(c, &prev);
    if (rc != COMEM_OK)
        return rc;
    size_t f = 0, t = 0;
    rc = status_of("cuMemGetInfo", c->cu->MemGetInfo(&f, &t));
    leave(c, prev);
    if (rc == COMEM_OK) {
        *free_bytes = (int64_t)f;
        *capacity = (int64_t)t;
    }
    return rc;
}

static int cuda_write(comem_vmm *m, uint64_t va, const void *src, int64_t size)
{
    vmm_cuda *c = as_cuda(m);
    CUcontext prev;
    int rc = enter(c, &prev);
    if (rc != COMEM_OK)
        return rc;
    rc = status_of("cuMemcpyHtoD", c->cu->MemcpyHtoD((CUdeviceptr)va, src, (size_t)size));
    leave(c, prev);
    return rc == COMEM_ENOSPC || rc == COMEM_EBUSY ? COMEM_EDRIVER : rc;
}

static int cuda_read(comem_vmm *m, uint64_t va, void *dst, int64_t size)
{
    vmm_cuda *c = as_cuda(m);
    CUcontext prev;
    int rc = enter(c, &prev);
    if (rc != COMEM_OK)
        return rc;
    rc = status_of("cuMemcpyDtoH", c->cu->MemcpyDtoH(dst, (CUdeviceptr)va, (size_t)size));
    leave(c, prev);
    return rc == COMEM_ENOSPC || rc == COMEM_EBUSY ? COMEM_EDRIVER : rc;
}

static void cuda_close(comem_vmm *m)
{
    vmm_cuda *c = as_cuda(m);
    (void)status_of("cuDevicePrimaryCtxRelease", c->cu->DevicePrimaryCtxRelease(c->dev));
    free(c);
}

static const comem_vmm_ops k_cuda_ops = {
    .reserve = cuda_reserve,
    .unreserve = cuda_unreserve,
    .commit = cuda_commit,
    .evict = cuda_evict,
    .unmap_keep = cuda_unmap_keep,
    .remap = cuda_remap,
    .release = cuda_release,
    .sync = cuda_sync,
    .read_free = cuda_read_free,
    .write = cuda_write,
    .read = cuda_read,
    .close = cuda_close,
};

int comem_vmm_cuda_open(int device, comem_vmm **out)
{
    const comem_cuda *cu;
    int rc = comem_cuda_load(&cu);
    if (rc != COMEM_OK) {
        comem_info("pager cuda: no CUDA driver: %s", comem_cuda_load_error());
        return COMEM_ENODEV;
    }
    CUdevice dev = 0;
    CUresult r = cu->DeviceGet(&dev, device);
    if (r != CUDA_SUCCESS) {
        comem_info("pager cuda: no device %d: %s", device, comem_cuda_errstr((int)r));
        return COMEM_ENODEV;
    }
    int vmm = 0;
    r = cu->DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
    if (r != CUDA_SUCCESS || !vmm) {
        comem_warn("pager cuda: device %d has no virtual memory management", device);
        return COMEM_ENOTSUP;
    }
    int64_t gran = 0;
    if ((rc = comem_cuda_granularity(device, &gran, NULL)) != COMEM_OK || gran <= 0)
        return rc != COMEM_OK ? rc : COMEM_EDRIVER;
    vmm_cuda *c = calloc(1, sizeof *c);
    if (!c)
        return COMEM_ENOMEM;
    r = cu->DevicePrimaryCtxRetain(&c->ctx, dev);
    if (r != CUDA_SUCCESS) {
        rc = status_of("cuDevicePrimaryCtxRetain", r);
        free(c);
        return rc == COMEM_OK ? COMEM_EDRIVER : rc;
    }
    c->base = (comem_vmm){&k_cuda_ops, "cuda", gran, ""};
    CUuuid u;
    if (cu->DeviceGetUuid(&u, dev) == CUDA_SUCCESS)
        comem_cuda_format_uuid((const unsigned char *)u.bytes, c->base.uuid, sizeof c->base.uuid);
    c->cu = cu;
    c->ordinal = device;
    c->dev = dev;
    *out = &c->base;
    return COMEM_OK;
}
