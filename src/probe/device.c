/* probe/device.c - helpers shared by every device source. */
#include "probe/device.h"

#include <string.h>

const char *comem_scope_name(comem_scope s)
{
    return s == COMEM_SCOPE_PROCESS_LOCAL ? "process-local" : "device-wide";
}

void comem_device_reading_clear(comem_device_reading *r)
{
    memset(r, 0, offsetof(comem_device_reading, procs));
    r->index = -1;
    r->source = "";
    r->total = r->free = r->used = r->reserved = -1;
    r->overcommit = 0;
    r->pcie_gen = r->pcie_width = -1;
    r->timestamp_ns = comem_now_ns();
}

