/*
 * probe/select.h - choosing the device source from --device / COMEM_DEVICE.
 *
 *   "" or "auto"  NVML when it finds a GPU; otherwise no card at all (the
 *                 empty source, named COMEM_NO_CARD_SOURCE), and the note says
 *                 so (and why). A simulated card only when a spec names one.
 *   "nvml"        NVML, or an error saying why not
 *   "cuda"        the CUDA driver's in-process view (no context is created)
 *   "sim[:...]"   a simulated card (see probe/sim.h for the text form)
 */
#ifndef COMEM_PROBE_SELECT_H
#define COMEM_PROBE_SELECT_H

#include <stdbool.h>
#include <stddef.h>

#include "probe/device.h"

#define COMEM_DEFAULT_SIM "sim:24GiB" /* the card comem_simcard_open(NULL) opens when COMEM_DEVICE names none */
#define COMEM_NO_CARD_SOURCE "none"  /* the empty source's name: status's coordinator.source says it */

/*
 * Opens the source spec names (NULL reads COMEM_DEVICE, then "auto"). note
 * receives one line for the user when auto found no GPU, else "". On failure
 * note holds the reason. Returns 0 or a negative status. Auto on a machine
 * without a GPU succeeds with the empty source (zero devices, the note says
 * why); closing it does nothing.
 */
int comem_devices_open(const char *spec, comem_device_source **out, char *note, size_t notelen);

/* True when src is the empty source auto opens on a machine without a GPU. */
bool comem_devices_none(const comem_device_source *src);

#endif
