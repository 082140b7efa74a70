/* probe/wddm_posix.c - probe/wddm.h where there is no WDDM (Linux): nothing to read. */
#include "probe/wddm.h"

#include "comem/common.h"

int comem_wddm_adapters(comem_wddm_adapter *out, int max, int *n)
{
    (void)out, (void)max;
    *n = 0;
    return COMEM_ENOTSUP;
}
