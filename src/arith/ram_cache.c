/* arith/ram_cache.c - default active and inactive RAM-cache headroom; a RAM admission's need. */
#include "arith/ram_cache.h"

#include "base/bytes.h"

void comem_ram_cache_headroom(double total_ram_mib, comem_cache_headroom *out)
{
    out->active_gb = comem_fmin(10.0, comem_fmax(2.0, total_ram_mib * 0.10 / 1024.0));
    out->inactive_gb = comem_fmin(128.0, total_ram_mib / 1024.0);
    out->active = comem_clamp0(comem_trunc(out->active_gb * (double)COMEM_GIB));
    out->inactive = comem_clamp0(comem_trunc(out->inactive_gb * (double)COMEM_GIB));
}

int64_t comem_ram_admit_target(int64_t weights, int64_t working, int64_t reserve)
{
    return comem_add(comem_add(comem_clamp0(weights), comem_clamp0(working)), comem_clamp0(reserve));
}

int64_t comem_ram_reserve(int64_t budget, int64_t total_ram)
{
    if (budget >= 0)
        return 0;
    comem_cache_headroom h;
    comem_ram_cache_headroom((double)comem_clamp0(total_ram) / (double)COMEM_MIB, &h);
    return h.active;
}
