/*
 * comem/pager.h - the weight pager: per-model virtual address reservations
 * ("VBARs") split into pages that are committed on fault and evicted under
 * pressure, steerable from other processes through the coordinator.
 *
 * A model's weights live inside one VBAR: a reservation of device virtual
 * address space that costs no memory until a page is committed. Before a layer
 * uses a weight, the caller faults the weight's byte range: the pager commits
 * the missing pages (evicting other pages if it must), pins the range and says
 * RESIDENT, or refuses with OFFLOADED and the caller streams the weight from
 * host memory instead. After use, the caller unpins the range. Each page
 * carries a serial that changes only when the page is committed again; the
 * caller keeps the signatures a fault returned for a weight and copies the
 * weight in only when they change.
 *
 * The rules (aimdo's, reimplemented; reference/aimdo-pager.md section 1):
 *   - Lower addresses in a VBAR win: eviction always takes the page just below
 *     the VBAR's watermark and lowers the watermark, even past absent or pinned
 *     pages. A fault that reaches above the watermark is OFFLOADED at once,
 *     without allocating: the model settles into a resident prefix plus a
 *     streamed suffix instead of thrashing. prioritize() raises it again.
 *   - Across VBARs, the most recently created or prioritized wins: eviction
 *     walks from the lowest priority up, the faulting VBAR included.
 *   - A watermark limit protects a prefix: eviction never lowers a watermark
 *     below it. Pinned pages are never evicted (pins are reference counts).
 *   - Pressure is max(simple, device) + extra (comem_pager_budget_deficit).
 *
 * Pages and sizes: a VBAR is reserved at exactly the size asked, rounded up
 * to whole pages (never clamped to the card). The page size is a multiple of
 * the backend's granularity (2 MiB on the simulated card; the CUDA driver's
 * cuMemGetAllocationGranularity on a GPU).
 *
 * Threads: every function is thread-safe; one mutex per pager guards all of
 * its state, and eviction may run on any thread (the client's callback thread
 * answering a release ask) while another faults. A handle must not be used
 * after it is closed or destroyed. See src/pager/pager_internal.h for the
 * structures and the lock order.
 *
 * The API is what a ctypes binding calls as it is: opaque handles, plain C
 * types, no structs passed by value. Byte counts are int64_t.
 */
#ifndef COMEM_PAGER_H
#define COMEM_PAGER_H

#include <stddef.h>
#include <stdint.h>

#include "comem/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct comem_pager comem_pager;
typedef struct comem_vbar comem_vbar;
typedef struct comem_client comem_client;

/* Backends. */
#define COMEM_PAGER_SIM 1  /* the simulated card (probe/sim.h), host memory behind it */
#define COMEM_PAGER_CUDA 2 /* the CUDA driver's virtual memory management, loaded at run time */

/* What comem_vbar_fault returns besides a negative status. */
#define COMEM_VBAR_RESIDENT 0  /* every page of the range is resident and now pinned */
#define COMEM_VBAR_OFFLOADED 1 /* refused: stream the weight; nothing was pinned */

/* Defaults. */
#define COMEM_PAGER_DEFAULT_PAGE_SIZE ((int64_t)32 << 20)
#define COMEM_PAGER_DEFAULT_SIMPLE_HEADROOM ((int64_t)256 << 20) /* comem_pager_set_simple_headroom */
#define COMEM_PAGER_DEFAULT_DEVICE_HEADROOM ((int64_t)256 << 20) /* comem_pager_set_device_poll */
#define COMEM_PAGER_DEFAULT_POLL_MS 2000 /* how long a device reading is reused */
#define COMEM_PAGER_TOUCH_MS 250 /* a faulting attached pager says it is in use at most this often */

/* Counters for comem_pager_stat. */
#define COMEM_PAGER_STAT_FAULTS 0            /* comem_vbar_fault calls */
#define COMEM_PAGER_STAT_OFFLOADED 1         /* ... that returned OFFLOADED */
#define COMEM_PAGER_STAT_COMMITS 2           /* pages committed */
#define COMEM_PAGER_STAT_EVICTIONS 3         /* pages evicted (destroy included) */
#define COMEM_PAGER_STAT_SYNCS 4             /* backend synchronisations around unmaps */
#define COMEM_PAGER_STAT_TRANSIENT_RETRIES 5 /* commits retried after a transient error (F13) */
#define COMEM_PAGER_STAT_PRESSURE_RETRIES 6  /* commits retried after evicting for a deficit or OOM */
#define COMEM_PAGER_STAT_POLLS 7             /* device readings taken */
#define COMEM_PAGER_STAT_RELEASE_ASKS 8      /* release asks answered (attached pagers) */
#define COMEM_PAGER_STAT_REPORTS 9           /* residency censuses sent (attached pagers) */
#define COMEM_PAGER_STAT_TOUCHES 10          /* "in use" signs sent to the coordinator (attached pagers) */
#define COMEM_PAGER_STAT_IDLE_DECLINED 11    /* idle release asks declined: the pager had just faulted */
#define COMEM_PAGER_STAT_KEPT 12             /* evicted pages whose memory went to the kept pool */
#define COMEM_PAGER_STAT_REUSED 13           /* commits that mapped kept memory instead of creating it */
#define COMEM_PAGER_STAT_COUNT 14

/* ---- the pager ---- */

/*
 * Opens a pager on one device.
 *   backend:  COMEM_PAGER_SIM or COMEM_PAGER_CUDA.
 *   device:   the card index (sim) or CUDA device ordinal.
 *   sim_spec: the simulated card for the sim backend ("sim:8GiB:path=/tmp/x/card");
 *             NULL means COMEM_DEVICE when it names a sim card, else "sim:24GiB".
 *             Ignored by the CUDA backend.
 *   out:      receives the pager.
 * Returns COMEM_OK; COMEM_EINVAL (bad backend or spec); COMEM_ENODEV (no such
 * device, or no CUDA driver); COMEM_ENOTSUP (the device has no VMM); COMEM_ENOMEM.
 */
COMEM_API int comem_pager_open(int backend, int device, const char *sim_spec, comem_pager **out);

/* Detaches (if attached), destroys every VBAR (pins ignored), releases the backend, frees. NULL is a no-op. */
COMEM_API void comem_pager_close(comem_pager *p);

/* The backend's allocation granularity in bytes (page sizes must be multiples of it); 0 for NULL. */
COMEM_API int64_t comem_pager_granularity(comem_pager *p);

/*
 * Sets the simple headroom: the margin the per-process term keeps between the
 * pager's own usage and the card's capacity (aimdo's simple_vram_headroom).
 * Live: the very next fault uses it. bytes >= 0, else COMEM_EINVAL.
 */
COMEM_API int comem_pager_set_simple_headroom(comem_pager *p, int64_t bytes);
/* The simple headroom now (default 256 MiB); 0 for NULL. */
COMEM_API int64_t comem_pager_simple_headroom(comem_pager *p);

/* Sets the extra headroom, added to the deficit after the max (per device; default 0). bytes >= 0. */
COMEM_API int comem_pager_set_extra_headroom(comem_pager *p, int64_t bytes);

/*
 * Sets the device term: the margin of free device memory it regulates to
 * (default 256 MiB) and how long a reading is reused (default 2000 ms; 0
 * reads at every call). The next deficit reads the device again.
 * headroom_bytes >= 0 and cache_ms >= 0, else COMEM_EINVAL.
 */
COMEM_API int comem_pager_set_device_poll(comem_pager *p, int64_t headroom_bytes, int64_t cache_ms);

/*
 * on != 0: the device term reads the device-wide free figure (NVML's: every
 * process's allocations count) instead of this process's own (cuMemGetInfo's).
 * They differ under Windows WDDM, where the process's own figure is its budget
 * and does not move when another process allocates; aimdo's nvml_pressure,
 * which ComfyUI turns on there. The next deficit reads the device again.
 * Returns COMEM_OK, COMEM_EINVAL, or COMEM_ENOTSUP when the backend has no
 * device-wide reading (the CUDA backend today; the simulated card has one).
 */
COMEM_API int comem_pager_set_device_wide(comem_pager *p, int on);

/*
 * The pressure formula, as a fault evaluates it for a commit of `size` bytes:
 *   reading (at most every cache_ms): deficit_sync = device_headroom - device_free,
 *                                     usage_at_poll = held
 *   simple  = (held + size) + simple_headroom - capacity
 *   delta   = deficit_sync + (held - usage_at_poll) + size
 *   deficit = max(simple, delta) + extra_headroom
 * held is the pager's own committed bytes plus its kept pool (comem_pager_set_keep;
 * empty by default, and then this is aimdo's formula); capacity and device_free
 * come from the backend. A positive result is what must be freed; negative is headroom.
 * May read the device. Returns 0 for NULL.
 */
COMEM_API int64_t comem_pager_budget_deficit(comem_pager *p, int64_t size);

/* Bytes committed by this pager now (Σ resident pages × their page size); 0 for NULL. */
COMEM_API int64_t comem_pager_usage(comem_pager *p);

/*
 * Bytes eviction could take now: resident, unpinned pages at or above each
 * VBAR's watermark limit. 0 for NULL.
 */
COMEM_API int64_t comem_pager_reclaimable(comem_pager *p);

/*
 * Evicts at least `bytes` if it can: lowest-priority VBAR first, lowering each
 * watermark page by page down to its limit and freeing the unpinned resident
 * pages passed (one backend sync before the first unmap and one after the
 * last). *freed (may be NULL) receives the bytes actually freed.
 * Returns COMEM_OK (also when less could be freed) or COMEM_EINVAL.
 */
COMEM_API int comem_pager_free_memory(comem_pager *p, int64_t bytes, int64_t *freed);

/*
 * The kept pool: up to `bytes` of evicted pages' device memory stays with the
 * pager, unmapped, and the next commits of the same page size map it again
 * instead of creating memory (a cuMemMap and a cuMemSetAccess, where a fresh
 * page is a cuMemCreate too, and where memory just given back slows the
 * driver's next copies). 0, the default, keeps nothing (aimdo's behaviour).
 *
 * Kept memory is this process's on the card: the pressure formula counts it
 * as held; while attached the holder has an entry "kept" of that size in the
 * ledger whose resident bytes are the pool's, so other processes' admissions
 * see it and ask for it; and every eviction that must give memory back (a
 * deficit or an out-of-memory at a fault, a release ask, an idle release)
 * releases the pool before any loaded page. Evictions that make room for the
 * pager's own pages (a fault's miss, comem_pager_free_memory, unpin above the
 * watermark, destroy) fill it. So a process that frees pager memory for its
 * own allocations outside the pager (PyTorch's) keeps the bound at 0.
 *
 * Lowering the bound releases the excess at once. Set it before attaching:
 * while attached a change is COMEM_EBUSY (the ledger's entry is sized then).
 * Returns COMEM_OK, COMEM_EINVAL, COMEM_EBUSY, or COMEM_ENOTSUP (a backend
 * that cannot keep memory unmapped).
 */
COMEM_API int comem_pager_set_keep(comem_pager *p, int64_t bytes);
/* The pool's bound (comem_pager_set_keep); 0 for NULL. */
COMEM_API int64_t comem_pager_keep(comem_pager *p);
/* Bytes in the kept pool now; 0 for NULL. */
COMEM_API int64_t comem_pager_kept(comem_pager *p);

/* Sets every VBAR's watermark limit back to 0. */
COMEM_API int comem_pager_reset_watermark_limits(comem_pager *p);

/* One counter (COMEM_PAGER_STAT_*); -1 for an unknown one or NULL. */
COMEM_API int64_t comem_pager_stat(comem_pager *p, int which);

/* ---- VBARs ---- */

/*
 * Reserves a VBAR of `size` bytes, rounded up to whole pages (not clamped to
 * the card), and puts it at the top of the priority list with its watermark at
 * the last page and its limit at 0.
 *   page_size: 0 means 32 MiB; otherwise a positive multiple of the granularity.
 *   out:       receives the VBAR, owned by the pager (comem_vbar_destroy or close).
 * When the pager is attached, the VBAR is registered as an entry (a round trip).
 * Returns COMEM_OK, COMEM_EINVAL (size <= 0, bad page size), COMEM_ENOMEM, or
 * the backend's error for the reservation.
 */
COMEM_API int comem_vbar_create(comem_pager *p, int64_t size, int64_t page_size, comem_vbar **out);

/* Evicts every page (pins ignored: the caller must be done with it), releases the reservation, frees. */
COMEM_API void comem_vbar_destroy(comem_vbar *v);

/* The base address: a device virtual address (CUDA) or a host address (sim). 0 for NULL. */
COMEM_API uint64_t comem_vbar_base(comem_vbar *v);
/* The page size in bytes; 0 for NULL. */
COMEM_API int64_t comem_vbar_page_size(comem_vbar *v);
/* The number of pages; 0 for NULL. */
COMEM_API int64_t comem_vbar_pages(comem_vbar *v);
/* The reserved size in bytes (pages × page size); 0 for NULL. */
COMEM_API int64_t comem_vbar_size(comem_vbar *v);

/*
 * Makes [offset, offset+size) resident and pins it, or refuses.
 *   signatures: receives one serial per page of the range (first page first);
 *               n is its capacity, at least the number of pages the range
 *               touches (size/page_size + 2 always suffices). May be NULL when
 *               n is 0. Written for the pages seen resident or committed, also
 *               when the fault ends OFFLOADED or in an error.
 * Steps: evict for the standing deficit (budget_deficit(0)); refuse at once if
 * the range ends above the watermark; for each page: resident -> its serial;
 * at the first miss make room for every missing page of this VBAR below the
 * range's end (refuse if that lowered this VBAR's watermark below it); commit,
 * evicting max(deficit, page) and retrying once when the budget is short or
 * the commit runs out of memory (refuse if that lowered the watermark below
 * the range's end); a transient driver error is retried a few times without
 * surfacing. When every page is resident, each page's pin count goes up by one.
 * Pages committed before a refusal or an error stay resident and unpinned.
 * Returns COMEM_VBAR_RESIDENT, COMEM_VBAR_OFFLOADED, COMEM_EINVAL,
 * COMEM_ERANGE (the range leaves the VBAR), COMEM_ENOSPC (still short after
 * evicting) or the backend's error (COMEM_EDRIVER).
 */
COMEM_API int comem_vbar_fault(comem_vbar *v, int64_t offset, int64_t size, uint32_t *signatures, size_t n);

/*
 * Drops one pin from each page of [offset, offset+size) (never below 0; pages
 * past the end are ignored), then evicts the now unpinned pages of the range
 * that lie at or above the watermark (an eviction passed them while pinned).
 */
COMEM_API int comem_vbar_unpin(comem_vbar *v, int64_t offset, int64_t size);

/* Moves the VBAR to the top of the priority list and its watermark to the last page. */
COMEM_API int comem_vbar_prioritize(comem_vbar *v);
/* Moves the VBAR to the bottom of the priority list: the first to be evicted. */
COMEM_API int comem_vbar_deprioritize(comem_vbar *v);

/*
 * Sets the watermark to ceil(bytes / page_size) pages (at most every page) and
 * evicts the unpinned resident pages at or above it. Not bounded by the limit:
 * this is the application's own decision. bytes >= 0.
 */
COMEM_API int comem_vbar_set_watermark(comem_vbar *v, int64_t bytes);
/* The watermark in bytes (pages × page size); -1 for NULL. */
COMEM_API int64_t comem_vbar_watermark(comem_vbar *v);
/* Sets the limit to ceil(bytes / page_size) pages: eviction never lowers the watermark below it. */
COMEM_API int comem_vbar_set_watermark_limit(comem_vbar *v, int64_t bytes);
/* The watermark limit in bytes; -1 for NULL. */
COMEM_API int64_t comem_vbar_watermark_limit(comem_vbar *v);

/* Like comem_pager_free_memory, restricted to this VBAR (down to its limit). */
COMEM_API int comem_vbar_free_memory(comem_vbar *v, int64_t bytes, int64_t *freed);

/* Resident bytes of this VBAR (resident pages × page size); 0 for NULL. */
COMEM_API int64_t comem_vbar_loaded_size(comem_vbar *v);

/*
 * Writes one byte per page, for min(n, pages) pages: bit 0 resident, bit 1
 * pinned. Returns the number of pages written, or a negative status.
 */
COMEM_API int64_t comem_vbar_residency(comem_vbar *v, uint8_t *map, size_t n);

/*
 * Copies host memory into the VBAR at offset (CUDA: cuMemcpyHtoD; sim: memcpy).
 * Every page the range touches must be resident (COMEM_ENOENT otherwise); the
 * copy runs under the pager lock, so no eviction can race it.
 * Returns COMEM_OK, COMEM_EINVAL, COMEM_ERANGE, COMEM_ENOENT or the backend's error.
 */
COMEM_API int comem_vbar_write(comem_vbar *v, int64_t offset, const void *src, int64_t size);
/* Copies from the VBAR at offset into host memory; the same rules as comem_vbar_write. */
COMEM_API int comem_vbar_read(comem_vbar *v, int64_t offset, void *dst, int64_t size);

/* ---- across processes ---- */

/*
 * Registers the pager with the coordinator through client c: a holder named
 * `name` (COMEM_KIND_PAGER; answers sized and idle releases, also while busy)
 * with one paged entry per VBAR (size = VBAR size, resident = loaded bytes).
 * First it tells the coordinator which card the pager's device ordinal is, by
 * the UUID its backend reads (comem_client_map_device), so a process under any
 * CUDA_VISIBLE_DEVICES is charged on the right card; a card the coordinator
 * does not know is logged and the ordinal is taken as its index. From then on: VBARs created get entries and destroyed ones lose them;
 * residency is reported (comem_entry_set_resident) after a call that changed
 * it, never while the pager lock is held; and release asks are answered on the
 * client's callback thread by evicting unpinned pages lowest priority first
 * (COMEM_RELEASE_BYTES within watermark limits, COMEM_RELEASE_IDLE everything
 * unpinned), receipts carrying the bytes actually freed. A pager in use is not
 * idle: while it faults it tells the coordinator so (comem_holder_touch, at
 * most every COMEM_PAGER_TOUCH_MS, never waiting for a reply), and it answers
 * an idle release busy when it faulted less than COMEM_PAGER_TOUCH_MS ago.
 * c must outlive the attachment. Returns COMEM_OK, COMEM_EEXIST (already
 * attached) or the client's error.
 */
COMEM_API int comem_pager_attach(comem_pager *p, comem_client *c, const char *name);

/* The holder id the attachment registered (0 when detached). */
COMEM_API uint64_t comem_pager_holder(comem_pager *p);

/*
 * Removes the entries and the holder and waits for release callbacks and
 * reports in flight. Must not be called from a release callback.
 * Returns COMEM_OK or COMEM_ENOENT (not attached).
 */
COMEM_API int comem_pager_detach(comem_pager *p);

#ifdef __cplusplus
}
#endif
#endif
