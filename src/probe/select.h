/*
 * probe/select.h - choosing the device source from --device / COMEM_DEVICE.
 *
 *   "" or "auto"  NVML when it finds a GPU; otherwise a simulated 24 GiB
 *                 linux card, and the note says so (and why)
 *   "nvml"        NVML, or an error saying why not
 *   "cuda"        the CUDA driver's in-process view (no context is created)
 *   "sim[:...]"   a simulated card (see probe/sim.h for the text form)
 */
#ifndef COMEM_PROBE_SELECT_H
#define COMEM_PROBE_SELECT_H

#include <stddef.h>

#include "probe/device.h"

#define COMEM_DEFAULT_SIM "sim:24GiB"

/*
 * Opens the source spec names (NULL reads COMEM_DEVICE, then "auto"). note
 * receives one line for the user when a fallback happened, else "". On failure
 * note holds the reason. Returns 0 or a negative status.
 */
int comem_devices_open(const char *spec, comem_device_source **out, char *note, size_t notelen);

#endif
