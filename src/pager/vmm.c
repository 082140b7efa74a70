/* pager/vmm.c - choosing a VMM backend by its number; the core never names one. */
#include "pager/vmm.h"

#include "comem/common.h"
#include "comem/pager.h"

int comem_vmm_open(int kind, int device, const char *sim_spec, comem_vmm **out)
{
    if (!out || device < 0)
        return COMEM_EINVAL;
    switch (kind) {
    case COMEM_PAGER_SIM: return comem_vmm_sim_open(device, sim_spec, out);
    case COMEM_PAGER_CUDA: return comem_vmm_cuda_open(device, out);
    default: return COMEM_EINVAL;
    }
}
