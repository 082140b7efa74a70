/* probe/wddm_win.c - the WDDM budget per adapter from DXGI 1.4 (probe/wddm.h). */
#define COBJMACROS
#include "probe/wddm.h"

#include <stdio.h>
#include <string.h>
#include <windows.h>
#include <dxgi1_4.h>

#include "comem/common.h"
#include "os/wide_win.h"

int comem_wddm_adapters(comem_wddm_adapter *out, int max, int *n)
{
    *n = 0;
    IDXGIFactory1 *factory = NULL;
    if (FAILED(CreateDXGIFactory1(&IID_IDXGIFactory1, (void **)&factory)))
        return COMEM_EIO;
    int rc = COMEM_OK;
    IDXGIAdapter1 *a1 = NULL;
    for (UINT i = 0; *n < max && IDXGIFactory1_EnumAdapters1(factory, i, &a1) != DXGI_ERROR_NOT_FOUND; i++) {
        DXGI_ADAPTER_DESC1 desc;
        IDXGIAdapter3 *a3 = NULL;
        bool hardware = SUCCEEDED(IDXGIAdapter1_GetDesc1(a1, &desc)) && !(desc.Flags & DXGI_ADAPTER_FLAG_SOFTWARE);
        if (hardware && FAILED(IDXGIAdapter1_QueryInterface(a1, &IID_IDXGIAdapter3, (void **)&a3))) {
            rc = COMEM_ENOTSUP; /* DXGI before 1.4: no budgets to read */
            hardware = false;
        }
        DXGI_QUERY_VIDEO_MEMORY_INFO local;
        if (hardware && SUCCEEDED(IDXGIAdapter3_QueryVideoMemoryInfo(a3, 0, DXGI_MEMORY_SEGMENT_GROUP_LOCAL, &local))) {
            comem_wddm_adapter *o = &out[(*n)++];
            memset(o, 0, sizeof *o);
            if (!comem_narrow(desc.Description, o->name, sizeof o->name))
                snprintf(o->name, sizeof o->name, "adapter %u", (unsigned)i);
            o->luid = ((uint64_t)(uint32_t)desc.AdapterLuid.HighPart << 32) | desc.AdapterLuid.LowPart;
            o->vendor = desc.VendorId;
            o->dedicated = (int64_t)desc.DedicatedVideoMemory;
            o->budget = (int64_t)local.Budget;
            o->usage = (int64_t)local.CurrentUsage;
            o->reservation = (int64_t)local.CurrentReservation;
            o->reservable = (int64_t)local.AvailableForReservation;
            rc = COMEM_OK;
        }
        if (a3)
            IDXGIAdapter3_Release(a3);
        IDXGIAdapter1_Release(a1);
    }
    IDXGIFactory1_Release(factory);
    return *n > 0 ? COMEM_OK : rc;
}
