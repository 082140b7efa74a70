/*
 * probe/hostmem.h - host RAM as ComfyUI's system_memory.py reads it.
 *
 * Reads <root>/proc/meminfo (MemTotal, MemAvailable, SwapTotal),
 * <root>/proc/swaps, <root>/proc/self/cgroup and the cgroup v2/v1 files under
 * <root>/sys/fs/cgroup. root is "" for the real machine; tests point it at
 * fixture trees. NULL means the real machine unless COMEM_HOSTMEM_ROOT names a
 * tree of the same shape (comem simulate gives its coordinator the scenario's
 * RAM and cgroup limit that way). The hierarchy walk: the process's own cgroup directories
 * (v2 "0::path", v1 lines with the memory controller), each followed by its
 * ancestors up to the mount root, then the two mount roots; the smallest limit
 * wins, and usage is read in the directory the limit came from.
 */
#ifndef COMEM_PROBE_HOSTMEM_H
#define COMEM_PROBE_HOSTMEM_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct comem_hostmem {
    int64_t mem_total;     /* MemTotal, bytes */
    int64_t mem_available; /* MemAvailable, bytes */
    int64_t swap_total;    /* SwapTotal, bytes (all kinds) */
    int64_t disk_swap;     /* /proc/swaps without zram, bytes */
    bool cgroup_limited;   /* a cgroup limit below MemTotal applies */
    int64_t cgroup_limit;  /* -1 when none */
    bool cgroup_usage_known;
    int64_t cgroup_usage;               /* working set in the limiting cgroup */
    char cgroup_dir[PATH_MAX];          /* where the limit was found ("" if none) */
    int64_t total;                      /* clamped total (virtual_memory_total) */
    int64_t available;                  /* clamped available (virtual_memory_available) */
} comem_hostmem;

/* Reads everything. Returns 0, or COMEM_EIO when meminfo cannot be read. */
int comem_hostmem_read(const char *root, comem_hostmem *out);

/* The tree a reading takes its files from: root itself, or for NULL the machine ("") unless
 * COMEM_HOSTMEM_ROOT names a stand-in tree (comem simulate's machine). */
const char *comem_hostmem_root(const char *root);

#endif
