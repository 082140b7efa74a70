/*
 * probe/cuda_view.h - the CUDA driver's own view of the devices, as a device source.
 *
 * Name, UUID ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"), PCI bus id and
 * total memory come from device queries that need no context. Free and used
 * come from cuMemGetInfo, which reads through the calling thread's current
 * context: the view reads them only when a context for that device is already
 * current (it never creates one behind the caller's back: a context costs
 * ~0.5 GiB of device memory and ~150 ms), unless it was opened with
 * retain_context, in which case it retains the device's primary context once
 * and makes it current around each read.
 *
 * Scope: on Linux cuMemGetInfo's free is device-wide (other processes'
 * allocations move it), so readings say COMEM_SCOPE_DEVICE_WIDE. Under Windows
 * WDDM the same call reports the caller's own budget: there a card not in TCC
 * mode (CU_DEVICE_ATTRIBUTE_TCC_DRIVER) reads COMEM_SCOPE_PROCESS_LOCAL. The
 * simulated card models that case on Linux.
 * The view has no per-process list and no reserved figure (-1).
 */
#ifndef COMEM_PROBE_CUDA_VIEW_H
#define COMEM_PROBE_CUDA_VIEW_H

#include <stdbool.h>

#include "probe/device.h"

/*
 * Opens the "cuda" source, loading the driver if needed (comem_cuda_load).
 *   retain_context: retain each device's primary context on its first read
 *                   (released at close) so free/used are always known.
 *   out: receives the source; close it with comem_device_close().
 * Returns 0, COMEM_ENODEV (no driver, or it sees no device; the reason is
 * logged at debug level and available from comem_cuda_load_error() for load
 * failures), or COMEM_ENOMEM.
 */
int comem_cuda_view_open(bool retain_context, comem_device_source **out);

/*
 * Formats a 16-byte CUDA UUID the way NVML and nvidia-smi print it:
 * "GPU-" + 8-4-4-4-12 lower-case hex digits. buf needs 41 bytes. Returns buf.
 */
char *comem_cuda_format_uuid(const unsigned char bytes[16], char *buf, size_t len);

#endif
