/*
 * probe/device.h - one interface over every source of device memory readings.
 *
 * A source (NVML, the CUDA driver's in-process view, the simulated card)
 * counts devices and reads one at a time. Every reading says what its free
 * figure means: device-wide (NVML, cuMemGetInfo on Linux: other processes'
 * allocations move it) or process-local (cuMemGetInfo under Windows WDDM: only
 * the caller's own allocations move it). The arithmetic branches on that flag,
 * never on the build platform, so both branches run in tests on Linux.
 *
 * Sources are backends behind a small ops table (the redis ae.c pattern): the
 * rest of comem never names a backend's internals.
 */
#ifndef COMEM_PROBE_DEVICE_H
#define COMEM_PROBE_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/clock.h" /* readings are stamped with comem_now_ns() */
#include "comem/common.h"  /* comem_scope, COMEM_MAX_DEVICES */

/* comem_scope (the scope of a free figure) is in comem/common.h: the protocol carries it too. */
const char *comem_scope_name(comem_scope s); /* "device-wide" / "process-local" */

#define COMEM_MAX_DEVICE_PROCS 256

typedef struct comem_proc_use {
    int32_t pid;
    int64_t bytes; /* device memory charged to the process, its context included */
} comem_proc_use;

/* One reading of one device. Fields a source cannot give are -1 (or "" for text). */
typedef struct comem_device_reading {
    int index;
    char uuid[80];      /* "GPU-...", "MIG-...", or "SIM-..." for simulated cards */
    char name[96];
    char pci_bus_id[32];
    const char *source; /* "nvml", "cuda", "sim" */
    comem_scope scope;  /* of free */
    comem_scope local_scope; /* of a process's own (cuMemGetInfo-style) free on this device: process-local
                                under WDDM, whatever this reading's own scope (NVML sees the card) */
    int64_t total;
    int64_t free;
    int64_t used;       /* as the source reports it; device-wide sources include reserved */
    int64_t reserved;   /* driver-reserved bytes */
    int64_t overcommit; /* bytes beyond physical memory (simulated WDDM spill); 0 elsewhere */
    bool unified;       /* the device's memory is host RAM (UMA): pinned RAM comes out of its free */
    bool procs_known;
    size_t n_procs;
    comem_proc_use procs[COMEM_MAX_DEVICE_PROCS];
    int pcie_gen, pcie_width;
    int64_t timestamp_ns; /* CLOCK_MONOTONIC when read */
} comem_device_reading;

typedef struct comem_device_source comem_device_source;

typedef struct comem_device_source_ops {
    /* Number of devices this source sees. */
    int (*count)(comem_device_source *src, int *n);
    /* Reads device index into *out. */
    int (*read)(comem_device_source *src, int index, comem_device_reading *out);
    /* Releases the source and everything it loaded or mapped. */
    void (*close)(comem_device_source *src);
} comem_device_source_ops;

/* Backends put this first in their own struct. */
struct comem_device_source {
    const comem_device_source_ops *ops;
    const char *name; /* "nvml", "cuda", "sim" */
    const char *spec; /* a device spec that opens these same cards ("sim:...:path=FILE"); NULL where none */
};

static inline int comem_device_count(comem_device_source *s, int *n) { return s->ops->count(s, n); }
static inline int comem_device_read(comem_device_source *s, int i, comem_device_reading *r)
{
    return s->ops->read(s, i, r);
}
static inline void comem_device_close(comem_device_source *s)
{
    if (s)
        s->ops->close(s);
}

/* Clears a reading to "unknown" everywhere (-1, "", no processes). */
void comem_device_reading_clear(comem_device_reading *r);

#endif
