/*
 * arith/cgroup.h - clamping host RAM figures to the cgroup limit that applies.
 *
 *   a limit >= the host total tells nothing and is ignored
 *   total     = min(host total, limit)
 *   available = min(host available, limit)               when usage is unknown
 *             = max(0, min(host available, limit - usage)) otherwise
 *
 * usage is memory.current - inactive_file (v2) or usage_in_bytes -
 * total_inactive_file (v1), floored at 0. Swap is never added.
 * Source: comfyui-manager-code.md section 11; vector V15.
 */
#ifndef COMEM_ARITH_CGROUP_H
#define COMEM_ARITH_CGROUP_H

#include <stdbool.h>
#include <stdint.h>

typedef struct comem_cgroup_in {
    int64_t host_total;
    int64_t host_available;
    bool limit_found;
    int64_t limit; /* the smallest limit found walking up the hierarchy */
    bool usage_known;
    int64_t usage;
} comem_cgroup_in;

typedef struct comem_cgroup_out {
    bool limited; /* a limit below the host total applies */
    int64_t limit;
    int64_t total;
    int64_t available;
} comem_cgroup_out;

void comem_cgroup_clamp(const comem_cgroup_in *in, comem_cgroup_out *out);

/* Working-set usage from raw counters: max(0, current - inactive_file). */
int64_t comem_cgroup_usage(int64_t current, int64_t inactive_file);

#endif
