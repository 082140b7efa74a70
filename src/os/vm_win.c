/* os/vm_win.c - os/vm.h over VirtualAlloc (Windows): reserved, then committed and decommitted. */
#include "os/vm.h"

#include <stdio.h>
#include <windows.h>

#include "comem/common.h"

static int failed(int status, char *why, size_t whylen)
{
    if (why && whylen)
        snprintf(why, whylen, "error %lu", (unsigned long)GetLastError());
    return status;
}

int comem_vm_reserve(int64_t size, void **out, char *why, size_t whylen)
{
    void *p = VirtualAlloc(NULL, (SIZE_T)size, MEM_RESERVE, PAGE_NOACCESS);
    if (!p)
        return failed(COMEM_ENOMEM, why, whylen);
    *out = p;
    return COMEM_OK;
}

int comem_vm_unreserve(void *p, int64_t size, char *why, size_t whylen)
{
    (void)size; /* a reservation is given back whole */
    return VirtualFree(p, 0, MEM_RELEASE) ? COMEM_OK : failed(COMEM_EIO, why, whylen);
}

int comem_vm_open(void *p, int64_t size, char *why, size_t whylen)
{
    /* Committed pages read as zero until written. */
    return VirtualAlloc(p, (SIZE_T)size, MEM_COMMIT, PAGE_READWRITE) ? COMEM_OK : failed(COMEM_EIO, why, whylen);
}

int comem_vm_drop(void *p, int64_t size, char *why, size_t whylen)
{
    /* Decommitted: the contents go, the range stays reserved and inaccessible. */
    return VirtualFree(p, (SIZE_T)size, MEM_DECOMMIT) ? COMEM_OK : failed(COMEM_EIO, why, whylen);
}
