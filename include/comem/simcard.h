/*
 * comem/simcard.h - the simulated card, for programs that play a GPU's part.
 *
 * A simulated card is a small file in the per-user runtime directory that
 * every process naming the same card maps (src/probe/sim.h). The coordinator
 * reads it the way it reads NVML; this API lets a process allocate and free
 * bytes on it, as cudaMalloc and cudaFree would on a real card, and read it
 * the way NVML (device-wide) or cuMemGetInfo (this process's view, a budget
 * under the wddm semantics) would. The Python binding's simulated placement
 * and the tests use it, so that everything above runs without a GPU.
 *
 * A card's memory dies with its process, as on a real card: the slots of a
 * process that is gone are reaped by the next operation. A handle belongs to
 * the process that opened it (a forked child opens its own).
 */
#ifndef COMEM_SIMCARD_H
#define COMEM_SIMCARD_H

#include <stdint.h>

#include "comem/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct comem_simcard comem_simcard;

/*
 * Opens (creating when absent) the card named by spec ("sim:24GiB",
 * "sim:16GiB:wddm", "sim:2x80GiB:ctx=512MiB", ...; probe/sim.h has the form).
 * NULL means COMEM_DEVICE when it names a simulated card, else "sim:24GiB":
 * the card an embedded coordinator or comemd uses on a machine without a GPU.
 * Returns COMEM_OK, COMEM_EINVAL (a malformed spec), COMEM_EEXIST (a card at
 * that path with other settings) or COMEM_EIO.
 */
COMEM_API int comem_simcard_open(const char *spec, comem_simcard **out);
/* Closes the handle (the card and this process's allocations stay). NULL is a no-op. */
COMEM_API void comem_simcard_close(comem_simcard *s);

/* The number of cards in the file; 0 for NULL. */
COMEM_API int comem_simcard_count(comem_simcard *s);
/* The file's path; "" for NULL. */
COMEM_API const char *comem_simcard_path(comem_simcard *s);

/*
 * Allocates bytes on card for this process (its context is charged first when
 * it has none there). COMEM_ENOSPC when it does not fit (linux semantics) or
 * exceeds this process's budget (wddm); COMEM_ENODEV for no such card.
 */
COMEM_API int comem_simcard_alloc(comem_simcard *s, int card, int64_t bytes);
/* Frees bytes this process allocated on card; COMEM_EINVAL for more than it holds. */
COMEM_API int comem_simcard_free(comem_simcard *s, int card, int64_t bytes);
/* Creates this process's context on card without allocating (CUDA initialisation). */
COMEM_API int comem_simcard_touch(comem_simcard *s, int card);
/* Releases this process's context and allocations on every card, as its exit would. */
COMEM_API int comem_simcard_release_self(comem_simcard *s);

/*
 * Reads card. local 0: the NVML-style reading (device-wide free, the
 * driver-reserved slice counted as used); local 1: this process's
 * cuMemGetInfo-style view (under wddm its budget, which others' allocations do
 * not move). Any out-pointer may be NULL. *scope receives comem_scope.
 * COMEM_EBUSY when the card's lock is held by a stopped process, or stayed
 * held for 2 s: a reading never waits longer than that.
 */
COMEM_API int comem_simcard_read(comem_simcard *s, int card, int local, int64_t *total, int64_t *free_bytes,
                                 int64_t *used, int64_t *reserved, int *scope);

/* One process's context and allocated bytes on card (0 and 0 when it holds nothing there). */
COMEM_API int comem_simcard_usage(comem_simcard *s, int card, int32_t pid, int64_t *context, int64_t *allocated);

#ifdef __cplusplus
}
#endif
#endif
