/* arith/reserve.c - ComfyUI's reserve defaults and minimum inference memory. */
#include "arith/reserve.h"

double comem_extra_reserved_vram(const comem_reserve_opts *opts)
{
    if (opts->reserve_vram_set)
        return opts->reserve_vram_gb * 1024 * 1024 * 1024; /* same left-to-right products */
    double reserve = (double)COMEM_RESERVE_DEFAULT; /* 400 MiB, exactly 400.0 * 1024 * 1024 */
    if (opts->windows) {
        reserve = 600.0 * 1024 * 1024; /* the shared-VRAM issue */
        if (opts->total_vram_mib > 15 * 1024)
            reserve += 100.0 * 1024 * 1024;
    }
    return reserve;
}

double comem_minimum_inference_memory(double reserve)
{
    return (1024.0 * 1024 * 1024) * 0.8 + reserve;
}
