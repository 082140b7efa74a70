/* probe/cuda_luid.c - the CUDA devices' LUIDs beside their UUIDs (probe/cuda_luid.h). */
#include "probe/cuda_luid.h"

#include <string.h>

#include "comem/common.h"
#include "probe/cuda_driver.h"
#include "probe/cuda_view.h"

int comem_cuda_luids(comem_cuda_luid *out, int max, int *n)
{
    *n = 0;
    const comem_cuda *cu = NULL;
    if (!comem_cuda_in_process() || comem_cuda_load(&cu) != COMEM_OK)
        return COMEM_ENODEV;
    if (!cu->DeviceGetLuid)
        return COMEM_ENOTSUP;
    int count = 0;
    if (cu->DeviceGetCount(&count) != CUDA_SUCCESS)
        return COMEM_ENODEV;
    bool any_luid = false;
    for (int i = 0; i < count && *n < max; i++) {
        CUdevice dev;
        unsigned char b[8];
        unsigned mask = 0;
        CUuuid u;
        if (cu->DeviceGet(&dev, i) != CUDA_SUCCESS || cu->DeviceGetLuid((char *)b, &mask, dev) != CUDA_SUCCESS)
            continue;
        any_luid = true;
        if (cu->DeviceGetUuid(&u, dev) != CUDA_SUCCESS)
            continue;
        /* Windows' LUID in memory: LowPart (4 bytes), then HighPart, little-endian. */
        uint64_t low = (uint64_t)b[0] | (uint64_t)b[1] << 8 | (uint64_t)b[2] << 16 | (uint64_t)b[3] << 24;
        uint64_t high = (uint64_t)b[4] | (uint64_t)b[5] << 8 | (uint64_t)b[6] << 16 | (uint64_t)b[7] << 24;
        comem_cuda_luid *o = &out[(*n)++];
        o->luid = high << 32 | low;
        comem_cuda_format_uuid((const unsigned char *)u.bytes, o->uuid, sizeof o->uuid);
    }
    return any_luid || count == 0 ? COMEM_OK : COMEM_ENOTSUP;
}
