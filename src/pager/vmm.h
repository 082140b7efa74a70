/*
 * pager/vmm.h - the pager's view of a device's virtual memory: one small ops
 * table, one file per backend (vmm_sim.c, vmm_cuda.c), the redis ae.c pattern.
 *
 * The pager core calls these and nothing else below it; it never names a
 * backend's internals and a backend never reaches into the core. Every call is
 * made with the pager lock held, so a backend needs no lock of its own for the
 * state these calls touch (the seam's injection counters excepted, which are
 * atomics: inject is called without the lock). Addresses are uint64_t: a device virtual address (CUDA) or a
 * host address (sim). A committed page is identified by (address, size,
 * handle); the handle is the backend's (a CUmemGenericAllocationHandle; unused
 * by the sim).
 *
 * Status conventions for commit: COMEM_OK; COMEM_ENOSPC when the device is out
 * of memory (the recoverable path: the core evicts and retries); COMEM_EBUSY
 * for a transient failure worth retrying as it is (CUDA_ERROR_NOT_READY right
 * after an eviction, F13); anything else is an error for this fault.
 */
#ifndef COMEM_PAGER_VMM_H
#define COMEM_PAGER_VMM_H

#include <stdbool.h>
#include <stdint.h>

typedef struct comem_vmm comem_vmm;

typedef struct comem_vmm_ops {
    /* Reserves size bytes of address space (no memory). */
    int (*reserve)(comem_vmm *m, int64_t size, uint64_t *va);
    /* Gives a reservation back; every page in it has been evicted. */
    void (*unreserve)(comem_vmm *m, uint64_t va, int64_t size);
    /* Backs [va, va+size) with fresh device memory, readable and writable. */
    int (*commit)(comem_vmm *m, uint64_t va, int64_t size, uint64_t *handle);
    /* Unmaps and releases one committed page. Errors are logged, never returned: the page is gone. */
    void (*evict)(comem_vmm *m, uint64_t va, int64_t size, uint64_t handle);
    /* The kept pool's three (pager/keep.c): unmaps a committed page and keeps its memory under its handle
       (false: it could not be unmapped, and is released instead); maps kept memory at [va, va+size),
       readable and writable; releases kept memory. */
    bool (*unmap_keep)(comem_vmm *m, uint64_t va, int64_t size, uint64_t handle);
    int (*remap)(comem_vmm *m, uint64_t va, int64_t size, uint64_t handle);
    void (*release)(comem_vmm *m, int64_t size, uint64_t handle);
    /* Waits until no kernel can still read a page about to be unmapped (CUDA: cuCtxSynchronize). */
    int (*sync)(comem_vmm *m);
    /* The device's free bytes and the capacity the pager budgets against. */
    int (*read_free)(comem_vmm *m, int64_t *free_bytes, int64_t *capacity);
    /* The device-wide free bytes (NVML's figure: every process counts, also under WDDM); NULL when the
       backend has no such reading. */
    int (*read_free_wide)(comem_vmm *m, int64_t *free_bytes);
    /* The bytes the device charges this process for its committed pages, its context apart: what the
       invariant check holds against the pager's usage. NULL when the backend cannot tell (CUDA). */
    int (*charged)(comem_vmm *m, int64_t *bytes);
    /* The seam's (pager_seam.h, comem_pager_inject_commit_failures), never the core's: the next `after`
       commits go through, then `transient` fail with COMEM_EBUSY, then `oom` with COMEM_ENOSPC, replacing
       what was pending. Called without the pager lock. NULL when the backend cannot script failures (CUDA). */
    void (*inject)(comem_vmm *m, int after, int transient, int oom);
    /* Copies host memory into committed pages, and back. */
    int (*write)(comem_vmm *m, uint64_t va, const void *src, int64_t size);
    int (*read)(comem_vmm *m, uint64_t va, void *dst, int64_t size);
    /* Releases everything the backend holds (reservations are already given back). */
    void (*close)(comem_vmm *m);
} comem_vmm_ops;

/* Backends put this first in their own struct. */
struct comem_vmm {
    const comem_vmm_ops *ops;
    const char *name;    /* "sim", "cuda" */
    int64_t granularity; /* page sizes must be multiples of it */
    char uuid[80];       /* the card's UUID ("GPU-...", "SIM-..."); empty when unknown */
};

/*
 * Opens the backend `kind` (COMEM_PAGER_SIM or COMEM_PAGER_CUDA) on device.
 * sim_spec as for comem_pager_open. Returns COMEM_OK or the backend's error.
 */
int comem_vmm_open(int kind, int device, const char *sim_spec, comem_vmm **out);

/* The constructors comem_vmm_open chooses between. */
int comem_vmm_sim_open(int device, const char *sim_spec, comem_vmm **out);
int comem_vmm_cuda_open(int device, comem_vmm **out);

#endif
