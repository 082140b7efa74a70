/*
 * probe/sim.h - a simulated GPU that several processes share.
 *
 * The card lives in a small file in the per-user runtime directory, mapped
 * MAP_SHARED by every process that opens the same spec. It has a capacity, a
 * driver-reserved slice (counted by the NVML-style reading, invisible to the
 * cuMemGetInfo-style total), a per-process context cost charged at a process's
 * first allocation on a card, and semantics:
 *
 *   linux: every free reading is device-wide; an allocation that does not fit
 *          in physical memory fails (COMEM_ENOSPC), like cuMemAlloc.
 *   wddm:  a process's own (cuMemGetInfo-style) free is its budget, which other
 *          processes' allocations do not move; only the NVML-style reading sees
 *          the card. An allocation within the budget succeeds even when the card
 *          is physically full: the excess is "overcommit" (VidMm paging someone
 *          out), reported in the NVML-style reading, never an error.
 *   uma:   an integrated device whose memory is host RAM (APU, Jetson, DGX
 *          Spark): one pool. Readings are device-wide like linux, and host
 *          allocations (comem_sim_host_alloc: pinned or plain RAM) draw on the
 *          same pool as device allocations, so VRAM plus RAM can never exceed
 *          the physical memory; an allocation of either kind that does not fit
 *          fails. On linux and wddm cards host allocations are only counted.
 *
 * Layout (one file, drawn from the top):
 *
 *   header   magic, version, robust process-shared mutex (and its holder's
 *            pid, so a waiter can tell a stopped holder), card configs
 *   procs[]  one slot per process: pid (as the /proc the process reads numbers
 *            it, and that /proc's device), start time, and per card its context
 *            bytes, allocated bytes and host bytes (RAM drawn on that card's
 *            pool under uma; only counted elsewhere). The slots are the only source of truth;
 *            every total is derived from them under the lock.
 *
 * Every operation takes the lock and first reaps slots whose process is gone
 * (no such pid, a zombie, or a pid reused by a process with another start
 * time), releasing its context and allocations the way the driver does at
 * exit. A process in a pid namespace of its own is recorded by its pid in the
 * numbering of the /proc it reads (an outer namespace's, unless it mounted its
 * own), so processes outside it judge and attribute it by the pid they, and
 * the coordinator's SO_PEERCRED, know it by; a slot recorded through another
 * /proc whose pid is not found here is never reaped from here (sim.c: WHO A
 * SLOT BELONGS TO). A process killed while holding the lock leaves a robust mutex that the
 * next locker recovers (EOWNERDEAD): its half-written slot belongs to a dead
 * process and is reaped at once.
 */
#ifndef COMEM_PROBE_SIM_H
#define COMEM_PROBE_SIM_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "probe/device.h"

#define COMEM_SIM_MAX_CARDS 8
#define COMEM_SIM_MAX_PROCS 256

typedef enum comem_sim_semantics { COMEM_SIM_LINUX = 0, COMEM_SIM_WDDM = 1, COMEM_SIM_UMA = 2 } comem_sim_semantics;

typedef struct comem_sim_spec {
    int n_cards;
    int64_t capacity;     /* per card, bytes */
    comem_sim_semantics semantics;
    int64_t reserved;     /* driver-reserved slice per card */
    int64_t context_cost; /* charged to a process at its first allocation on a card */
    char path[PATH_MAX];  /* "" chooses one in the runtime directory from the settings */
} comem_sim_spec;

#define COMEM_SIM_DEFAULT_CAPACITY ((int64_t)24 << 30)
#define COMEM_SIM_DEFAULT_RESERVED ((int64_t)256 << 20)
#define COMEM_SIM_DEFAULT_CONTEXT ((int64_t)300 << 20)

/*
 * Parses "sim[:ITEM]...", ITEM being SIZE (capacity), NxSIZE (N cards),
 * linux | wddm | uma, reserved=SIZE, ctx=SIZE, or path=PATH (the rest of the text).
 * Examples: "sim", "sim:24GiB", "sim:16GiB:wddm", "sim:2x80GiB:ctx=512MiB".
 * Returns 0 or COMEM_EINVAL with a reason in err.
 */
int comem_sim_spec_parse(const char *text, comem_sim_spec *out, char *err, size_t errlen);

/* The canonical text of a spec without its path ("sim:1x24GiB:linux:reserved=256MiB:ctx=300MiB"). */
void comem_sim_spec_format(const comem_sim_spec *spec, char *buf, size_t len);

typedef struct comem_sim comem_sim;

/*
 * Opens (creating when absent) the card file named by spec->path, or by the
 * settings in the runtime directory when the path is empty. An existing file
 * with other settings is refused with COMEM_EEXIST. The handle belongs to the
 * calling process; a forked child must open its own.
 */
int comem_sim_open(const comem_sim_spec *spec, comem_sim **out);
void comem_sim_close(comem_sim *sim);

const char *comem_sim_path(const comem_sim *sim);
int comem_sim_cards(const comem_sim *sim);
const comem_sim_spec *comem_sim_settings(const comem_sim *sim);

/* Allocates bytes on card for the calling process (its context is charged first if new). */
int comem_sim_alloc(comem_sim *sim, int card, int64_t bytes);
/* Frees bytes this process allocated on card; more than it holds is COMEM_EINVAL. */
int comem_sim_free(comem_sim *sim, int card, int64_t bytes);
/* Creates this process's context on card without allocating (CUDA initialisation). */
int comem_sim_touch(comem_sim *sim, int card);
/* Releases the calling process's context and allocations on every card (as exit would). */
int comem_sim_release_self(comem_sim *sim);

/*
 * Allocates bytes of host RAM for the calling process against card: on a uma
 * card they draw on the card's pool (COMEM_ENOSPC when the pool cannot hold
 * them, device allocations included); on linux and wddm cards they are only
 * counted. No context is created.
 */
int comem_sim_host_alloc(comem_sim *sim, int card, int64_t bytes);
/* Frees host bytes this process allocated against card; more than it holds is COMEM_EINVAL. */
int comem_sim_host_free(comem_sim *sim, int card, int64_t bytes);
/* One process's host bytes counted against card (0 when none); pid as comem_sim_usage takes it. */
int comem_sim_host_usage(comem_sim *sim, int card, int32_t pid, int64_t *host);

/*
 * Readings never wait without a bound for the card lock: COMEM_EBUSY when its
 * holder is stopped (it holds it until it is continued), or after 2 s.
 */
/* The NVML-style reading: device-wide free, the reserved slice, every process (uma: host bytes in used). */
int comem_sim_read(comem_sim *sim, int card, comem_device_reading *out);
/* The cuMemGetInfo-style reading for the calling process (process-local under wddm). */
int comem_sim_read_local(comem_sim *sim, int card, comem_device_reading *out);
/*
 * One process's context and allocated bytes on card (0, 0 when it holds
 * nothing). pid is as this process's /proc numbers it; the caller's own
 * getpid() names its own slot, in a pid namespace of its own too.
 */
int comem_sim_usage(comem_sim *sim, int card, int32_t pid, int64_t *context, int64_t *allocated);
/* How many times a lock left by a dead process was recovered (for tests). */
uint64_t comem_sim_recoveries(comem_sim *sim);

/* Takes the card lock and returns still holding it. Only for tests of lock recovery. */
int comem_sim_debug_hold_lock(comem_sim *sim);

/*
 * The sim as a device source. comem_sim_source gives NVML-style readings;
 * comem_sim_local_source gives this process's cuMemGetInfo-style view. Both
 * borrow sim: closing them does nothing; close the sim itself.
 */
comem_device_source *comem_sim_source(comem_sim *sim);
comem_device_source *comem_sim_local_source(comem_sim *sim);

/*
 * Opens a sim from spec text as a source that owns it: closing the source
 * closes the sim. Used for --device sim:... .
 */
int comem_sim_open_source(const char *spec_text, comem_device_source **out, char *err, size_t errlen);

#endif
