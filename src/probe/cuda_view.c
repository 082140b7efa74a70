/* probe/cuda_view.c - the "cuda" device source: device queries plus cuMemGetInfo. */
#include "probe/cuda_view.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/log.h"
#include "comem/common.h"
#include "probe/cuda_driver.h"

typedef struct cuda_view {
    comem_device_source base;
    const comem_cuda *cu;
    bool retain;
    pthread_mutex_t lock;               /* guards ctx/retained (first read may race) */
    CUcontext ctx[COMEM_MAX_DEVICES];   /* primary contexts we retained */
    CUdevice dev[COMEM_MAX_DEVICES];    /* ... and the device each belongs to */
    bool retained[COMEM_MAX_DEVICES];
} cuda_view;

char *comem_cuda_format_uuid(const unsigned char b[16], char *buf, size_t len)
{
    snprintf(buf, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
    return buf;
}

static int count_devices(const comem_cuda *cu, int *n)
{
    int c = 0;
    CUresult r = cu->DeviceGetCount(&c);
    if (r != CUDA_SUCCESS) {
        comem_warn("cuda: cuDeviceGetCount failed: %s (%d)", comem_cuda_errstr((int)r), (int)r);
        return comem_cuda_status((int)r);
    }
    if (c > COMEM_MAX_DEVICES) {
        comem_warn("cuda: %d devices, using the first %d", c, COMEM_MAX_DEVICES);
        c = COMEM_MAX_DEVICES;
    }
    *n = c < 0 ? 0 : c;
    return COMEM_OK;
}

static int view_count(comem_device_source *src, int *n)
{
    return count_devices(((cuda_view *)src)->cu, n);
}

/* Retains device index's primary context the first time it is needed. */
static int retained_ctx(cuda_view *v, int index, CUdevice dev, CUcontext *out)
{
    int rc = COMEM_OK;
    pthread_mutex_lock(&v->lock);
    if (!v->retained[index]) {
        CUresult r = v->cu->DevicePrimaryCtxRetain(&v->ctx[index], dev);
        if (r == CUDA_SUCCESS) {
            v->retained[index] = true;
            v->dev[index] = dev;
        } else {
            comem_warn("cuda: cuDevicePrimaryCtxRetain(device %d) failed: %s (%d)", index,
                       comem_cuda_errstr((int)r), (int)r);
            rc = comem_cuda_status((int)r);
        }
    }
    *out = v->ctx[index];
    pthread_mutex_unlock(&v->lock);
    return rc;
}

/*
 * cuMemGetInfo for device dev. *known is false (and 0 returned) when no
 * context of that device is current and the view does not retain one.
 */
static int mem_info(cuda_view *v, int index, CUdevice dev, size_t *free_b, size_t *total_b,
                    bool *known)
{
    const comem_cuda *cu = v->cu;
    *known = false;
    CUcontext cur = NULL;
    if (cu->CtxGetCurrent(&cur) != CUDA_SUCCESS)
        cur = NULL;

    if (!v->retain) {
        CUdevice cur_dev = -1;
        if (!cur || cu->CtxGetDevice(&cur_dev) != CUDA_SUCCESS || cur_dev != dev)
            return COMEM_OK; /* creating a context here would cost the caller ~0.5 GiB */
        CUresult r = cu->MemGetInfo(free_b, total_b);
        if (r != CUDA_SUCCESS) {
            comem_warn("cuda: cuMemGetInfo(device %d) failed: %s (%d)", index,
                       comem_cuda_errstr((int)r), (int)r);
            return comem_cuda_status((int)r);
        }
        *known = true;
        return COMEM_OK;
    }

    CUcontext ours;
    int rc = retained_ctx(v, index, dev, &ours);
    if (rc != COMEM_OK)
        return rc;
    /* Make ours current only for this call, then give the thread back what it had. */
    if (cur != ours) {
        CUresult r = cu->CtxSetCurrent(ours);
        if (r != CUDA_SUCCESS) {
            comem_warn("cuda: cuCtxSetCurrent failed: %s (%d)", comem_cuda_errstr((int)r), (int)r);
            return comem_cuda_status((int)r);
        }
    }
    CUresult r = cu->MemGetInfo(free_b, total_b);
    if (cur != ours)
        (void)cu->CtxSetCurrent(cur);
    if (r != CUDA_SUCCESS) {
        comem_warn("cuda: cuMemGetInfo(device %d) failed: %s (%d)", index,
                   comem_cuda_errstr((int)r), (int)r);
        return comem_cuda_status((int)r);
    }
    *known = true;
    return COMEM_OK;
}

static int view_read(comem_device_source *src, int index, comem_device_reading *out)
{
    cuda_view *v = (cuda_view *)src;
    const comem_cuda *cu = v->cu;
    if (!out || index < 0 || index >= COMEM_MAX_DEVICES)
        return COMEM_EINVAL;
    comem_device_reading_clear(out);
    out->index = index;
    out->source = "cuda";
    out->scope = COMEM_SCOPE_DEVICE_WIDE; /* Linux; WDDM would be process-local (see header) */

    CUdevice dev;
    CUresult r = cu->DeviceGet(&dev, index);
    if (r != CUDA_SUCCESS) /* an index past the last device is CUDA_ERROR_INVALID_DEVICE */
        return r == CUDA_ERROR_INVALID_VALUE ? COMEM_ENODEV : comem_cuda_status((int)r);

    /* Identity is best effort: a reading without a name is still a reading. */
    if ((r = cu->DeviceGetName(out->name, (int)sizeof out->name, dev)) != CUDA_SUCCESS) {
        comem_debug("cuda: cuDeviceGetName(%d): %s", index, comem_cuda_errstr((int)r));
        out->name[0] = '\0';
    }
    out->name[sizeof out->name - 1] = '\0';
    CUuuid u;
    if ((r = cu->DeviceGetUuid(&u, dev)) == CUDA_SUCCESS)
        comem_cuda_format_uuid((const unsigned char *)u.bytes, out->uuid, sizeof out->uuid);
    else
        comem_debug("cuda: cuDeviceGetUuid(%d): %s", index, comem_cuda_errstr((int)r));
    if ((r = cu->DeviceGetPCIBusId(out->pci_bus_id, (int)sizeof out->pci_bus_id, dev)) !=
        CUDA_SUCCESS) {
        comem_debug("cuda: cuDeviceGetPCIBusId(%d): %s", index, comem_cuda_errstr((int)r));
        out->pci_bus_id[0] = '\0';
    }
    out->pci_bus_id[sizeof out->pci_bus_id - 1] = '\0';

    size_t total = 0;
    if ((r = cu->DeviceTotalMem(&total, dev)) != CUDA_SUCCESS) {
        comem_warn("cuda: cuDeviceTotalMem(device %d) failed: %s (%d)", index,
                   comem_cuda_errstr((int)r), (int)r);
        return comem_cuda_status((int)r);
    }
    out->total = (int64_t)total;
    int integrated = 0;
    if (cu->DeviceGetAttribute(&integrated, CU_DEVICE_ATTRIBUTE_INTEGRATED, dev) == CUDA_SUCCESS)
        out->unified = integrated != 0; /* one pool: pinned RAM comes out of the device's free */
#ifdef _WIN32
    /* Under WDDM (a card not in TCC mode) cuMemGetInfo reads this process's budget, not the card. */
    int tcc = 0;
    if (cu->DeviceGetAttribute(&tcc, CU_DEVICE_ATTRIBUTE_TCC_DRIVER, dev) != CUDA_SUCCESS || !tcc)
        out->scope = out->local_scope = COMEM_SCOPE_PROCESS_LOCAL;
#endif

    size_t free_b = 0, ctx_total = 0;
    bool known;
    int rc = mem_info(v, index, dev, &free_b, &ctx_total, &known);
    if (rc != COMEM_OK)
        return rc;
    if (known) {
        out->free = (int64_t)free_b;
        /* used from the same call's total, so the pair is consistent with itself */
        out->used = comem_clamp0(comem_sub((int64_t)ctx_total, (int64_t)free_b));
    }
    out->timestamp_ns = comem_now_ns();
    return COMEM_OK;
}

static void view_close(comem_device_source *src)
{
    cuda_view *v = (cuda_view *)src;
    for (int i = 0; i < COMEM_MAX_DEVICES; i++) {
        if (v->retained[i])
            (void)v->cu->DevicePrimaryCtxRelease(v->dev[i]);
    }
    pthread_mutex_destroy(&v->lock);
    free(v);
}

static const comem_device_source_ops g_ops = {
    .count = view_count,
    .read = view_read,
    .close = view_close,
};

int comem_cuda_view_open(bool retain_context, comem_device_source **out)
{
    if (!out)
        return COMEM_EINVAL;
    *out = NULL;
    const comem_cuda *cu;
    int rc = comem_cuda_load(&cu);
    if (rc != COMEM_OK)
        return rc;
    int n = 0;
    if ((rc = count_devices(cu, &n)) != COMEM_OK)
        return rc;
    if (n == 0) {
        comem_debug("cuda: the driver sees no device");
        return COMEM_ENODEV;
    }
    cuda_view *v = calloc(1, sizeof *v);
    if (!v)
        return COMEM_ENOMEM;
    v->base.ops = &g_ops;
    v->base.name = "cuda";
    v->cu = cu;
    v->retain = retain_context;
    pthread_mutex_init(&v->lock, NULL);
    *out = &v->base;
    return COMEM_OK;
}
