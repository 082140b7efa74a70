/* base/status.c - names for comem_status values. */
#include "comem/common.h"

const char *comem_status_str(int status)
{
    switch (status) {
    case COMEM_OK: return "ok";
    case COMEM_EINVAL: return "invalid argument";
    case COMEM_ENOMEM: return "out of host memory";
    case COMEM_ENODEV: return "no such device or driver";
    case COMEM_EIO: return "i/o error";
    case COMEM_ETIMEDOUT: return "timed out";
    case COMEM_EPROTO: return "protocol error";
    case COMEM_EPERM: return "permission denied";
    case COMEM_EBUSY: return "busy";
    case COMEM_ENOSPC: return "not enough memory";
    case COMEM_ENOENT: return "not found";
    case COMEM_ECLOSED: return "connection closed";
    case COMEM_ENOTSUP: return "not supported";
    case COMEM_EDRIVER: return "driver error";
    case COMEM_EEXIST: return "already exists";
    case COMEM_ERANGE: return "out of range";
    case COMEM_EFORKED: return "opened by another process (a forked child must open its own client)";
    case COMEM_EVERSION: return "another protocol version";
    default: return "unknown status";
    }
}
