/*
 * probe/nvml.h - NVML, loaded at run time, as the "nvml" device source.
 *
 * The machine-wide view: total/free/used/reserved of each card, every compute
 * process on it with its bytes (context included), identity (name, UUID, PCI
 * bus id) and the current PCIe link. All readings are device-wide. NVML never
 * creates a CUDA context, so this source is safe in a process that forks CUDA
 * workers and cheap enough to poll (GetMemoryInfo ~7 us on an H200; the
 * process list grows ~8 us per CUDA process, so poll that less often).
 *
 * Versioned calls are preferred and fall back, per call, to older ones when a
 * symbol is missing or the driver answers "function not found", "not
 * supported" or "argument version mismatch": nvmlInit_v2 -> nvmlInit,
 * GetCount_v2 / GetHandleByIndex_v2 -> unversioned, GetPciInfo_v3 -> _v2 ->
 * unversioned, GetMemoryInfo_v2 (with reserved) -> unversioned (reserved -1),
 * GetComputeRunningProcesses_v3 -> _v2 -> unversioned.
 *
 * COMEM_NVML_LIBRARY, when set, names the library to load instead of
 * libnvidia-ml.so.1 (tests point it at a fake).
 */
#ifndef COMEM_PROBE_NVML_H
#define COMEM_PROBE_NVML_H

#include <stdbool.h>
#include <stddef.h>

#include "probe/device.h"

/* Environment variable that overrides the library path. */
#define COMEM_NVML_LIBRARY_ENV "COMEM_NVML_LIBRARY"

/*
 * Loads NVML, initialises it and counts the devices.
 *   out: receives the source; comem_device_close() shuts NVML down (NVML
 *        counts its initialisations, so several sources may be open at once).
 *   why, whylen: receive a one-line reason on failure (why may be NULL).
 * Returns 0; COMEM_ENODEV when the library is missing or incomplete, init or
 * the device count fails, or there are no devices; COMEM_ENOMEM.
 */
int comem_nvml_open(comem_device_source **out, char *why, size_t whylen);

/*
 * Finds the NVML index of the device with this UUID ("GPU-..." or "MIG-...",
 * compared exactly).
 *   src: a source from comem_nvml_open (anything else gives COMEM_EINVAL).
 *   index: receives the index.
 * Returns 0, COMEM_ENOENT when no device matches, COMEM_EINVAL.
 */
int comem_nvml_index_by_uuid(comem_device_source *src, const char *uuid, int *index);

/*
 * Finds the NVML index of the device at this PCI address. Both spellings
 * match: NVML's "00000000:3B:00.0" and the CUDA driver's "0000:3b:00.0"
 * (see comem_pci_bus_id_equal).
 * Returns 0, COMEM_ENOENT when no device matches, COMEM_EINVAL.
 */
int comem_nvml_index_by_pci_bus_id(comem_device_source *src, const char *bus_id, int *index);

/*
 * True when a and b name the same PCI function: "[domain:]bus:device.function"
 * in hex, compared by value, so digit count and case do not matter. An
 * unparsable id equals nothing.
 */
bool comem_pci_bus_id_equal(const char *a, const char *b);

#endif
