/* os/vm_posix.c - os/vm.h over mmap (Linux; any POSIX system with MAP_NORESERVE). */
#include "os/vm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "comem/common.h"

static int failed(int status, char *why, size_t whylen)
{
    if (why && whylen)
        snprintf(why, whylen, "%s", strerror(errno));
    return status;
}

int comem_vm_reserve(int64_t size, void **out, char *why, size_t whylen)
{
    void *p = mmap(NULL, (size_t)size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return failed(COMEM_ENOMEM, why, whylen);
    *out = p;
    return COMEM_OK;
}

int comem_vm_unreserve(void *p, int64_t size, char *why, size_t whylen)
{
    return munmap(p, (size_t)size) == 0 ? COMEM_OK : failed(COMEM_EIO, why, whylen);
}

int comem_vm_open(void *p, int64_t size, char *why, size_t whylen)
{
    return mprotect(p, (size_t)size, PROT_READ | PROT_WRITE) == 0 ? COMEM_OK : failed(COMEM_EIO, why, whylen);
}

int comem_vm_drop(void *p, int64_t size, char *why, size_t whylen)
{
    /* A private anonymous page dropped reads as zero when it is touched again. */
    if (madvise(p, (size_t)size, MADV_DONTNEED) != 0 || mprotect(p, (size_t)size, PROT_NONE) != 0)
        return failed(COMEM_EIO, why, whylen);
    return COMEM_OK;
}
