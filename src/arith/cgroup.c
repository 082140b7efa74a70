/* arith/cgroup.c - the cgroup clamp on RAM total and available. */
#include "arith/cgroup.h"

#include "base/bytes.h"

void comem_cgroup_clamp(const comem_cgroup_in *in, comem_cgroup_out *out)
{
    out->limited = in->limit_found && in->limit < in->host_total;
    out->limit = out->limited ? in->limit : -1;
    if (!out->limited) {
        out->total = in->host_total;
        out->available = in->host_available;
        return;
    }
    out->total = comem_min(in->host_total, in->limit);
    if (!in->usage_known)
        out->available = comem_min(in->host_available, in->limit);
    else
        out->available = comem_clamp0(comem_min(in->host_available, comem_sub(in->limit, in->usage)));
}

int64_t comem_cgroup_usage(int64_t current, int64_t inactive_file)
{
    return comem_clamp0(comem_sub(current, inactive_file));
}
