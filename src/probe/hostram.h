/*
 * probe/hostram.h - host RAM as one more device: the machine's (or its cgroup's) RAM, or a bounded budget.
 *
 * The source has one device, "host RAM". Its reading is shaped like a card's:
 *
 *   machine   total = the cgroup-clamped total (probe/hostmem.h, read again on
 *             every reading, so a cgroup limit changed at run time is seen at the
 *             next one); free = the cgroup-clamped MemAvailable
 *   SIZE      a bounded budget (tests, `comem simulate`): total = SIZE, free =
 *             SIZE minus the RSS of the tracked processes, so the machine is never
 *             near its real limit while the ledger behaves as if it were
 *
 * Per-process use is each tracked process's resident set (VmRSS of
 * /proc/PID/status), as NVML's per-process figure is a card's: what a process
 * holds beyond what it registered becomes its floor, and the part beyond its
 * context floor is shown as unregistered RAM. RSS counts shared pages (libraries,
 * a page cache mapping) in every process that maps them: the bound on the
 * error is the size of those shared mappings, which the figure overstates.
 *
 * The source does not know the ledger: the coordinator tells it which
 * processes to read (comem_hostram_track) before each reading.
 */
#ifndef COMEM_PROBE_HOSTRAM_H
#define COMEM_PROBE_HOSTRAM_H

#include <stddef.h>
#include <stdint.h>

#include "probe/device.h"
#include "probe/hostmem.h"

#define COMEM_HOSTRAM_UUID "RAM-host"  /* the device's UUID: no card has it */
#define COMEM_HOSTRAM_NAME "host RAM"

/*
 * Parses a RAM spec: "machine" (the machine's or the cgroup's RAM) or a size
 * ("4GiB", optionally written "ram:4GiB"). *budget is -1 for the machine, else
 * the size in bytes (at least 64 MiB). Returns 0, or COMEM_EINVAL with err set.
 */
int comem_hostram_parse(const char *spec, int64_t *budget, char *err, size_t errlen);

/* Opens the host RAM source for spec (see comem_hostram_parse). note receives the reason on failure. */
int comem_hostram_open(const char *spec, comem_device_source **out, char *note, size_t notelen);

/* The processes whose RSS the next readings report (at most COMEM_MAX_DEVICE_PROCS; duplicates read once). */
void comem_hostram_track(comem_device_source *src, const int32_t *pids, size_t n);

/* The bounded budget (-1: the machine's RAM) and the host reading the last reading was made from. */
int64_t comem_hostram_budget(const comem_device_source *src);
const comem_hostmem *comem_hostram_last(const comem_device_source *src);

/*
 * The resident set of pid from <root>/proc/PID/status (root "": the real
 * machine; NULL: the machine, unless COMEM_HOSTMEM_ROOT names a stand-in tree,
 * as comem_hostmem_read), in bytes; on Windows its working set, what psutil calls its rss there
 * (probe/hostmem_win.c). COMEM_ENOENT when the process is gone.
 */
int comem_hostram_rss(const char *root, int32_t pid, int64_t *bytes);

#endif
