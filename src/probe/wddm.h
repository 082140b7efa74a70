/*
 * probe/wddm.h - the WDDM video memory budget (Windows: probe/wddm_win.c; elsewhere
 * probe/wddm_posix.c, which has none to read).
 *
 * Under WDDM the operating system, not the driver, decides how much of a card's memory each
 * process may have: its budget, which moves with what the other processes use, and beyond which
 * the process's allocations are paged out or fail. The free-memory reading CUDA gives a process
 * there is about that budget, not the card. DXGI tells each process its own budget and its own
 * usage per adapter (IDXGIAdapter3::QueryVideoMemoryInfo); an adapter is matched to a CUDA device
 * by its LUID (cuDeviceGetLuid). The coordinator learns the card's truth by adding up what each
 * process reads for itself.
 */
#ifndef COMEM_PROBE_WDDM_H
#define COMEM_PROBE_WDDM_H

#include <stdint.h>

#define COMEM_WDDM_MAX_ADAPTERS 16

/* One adapter as this process sees it. Bytes. */
typedef struct comem_wddm_adapter {
    char name[128];         /* its description, UTF-8 */
    uint64_t luid;          /* its LUID (HighPart << 32 | LowPart): the CUDA device with the same LUID is it */
    uint32_t vendor;        /* PCI vendor id (0x10de: NVIDIA) */
    int64_t dedicated;      /* dedicated video memory: the card's size as Windows gives it */
    int64_t budget;         /* this process's budget in local (on-card) memory now */
    int64_t usage;          /* what this process uses of it now */
    int64_t reservation;    /* what this process has reserved (SetVideoMemoryReservation) */
    int64_t reservable;     /* the most it may reserve */
} comem_wddm_adapter;

/*
 * Reads every hardware adapter (software ones, like the Basic Render Driver, are left out) into
 * out, at most max: COMEM_OK with *n (0: none), COMEM_ENOTSUP (no WDDM: not Windows, or no DXGI
 * 1.4: before Windows 10), COMEM_EIO.
 */
int comem_wddm_adapters(comem_wddm_adapter *out, int max, int *n);

#endif
