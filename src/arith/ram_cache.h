/*
 * arith/ram_cache.h - ComfyUI's default RAM-cache headroom (main.py prompt_worker).
 *
 *   active   = min(10, max(2, total_ram_MiB * 0.10 / 1024)) GB
 *   inactive = min(128, total_ram_MiB / 1024) GB
 *   bytes    = int(GB * 2^30), clamped at 0
 *
 * The active headroom is what ensure_pin_budget halves (during a prompt only).
 * Source: comfyui-manager-code.md section 10; vector V8.
 */
#ifndef COMEM_ARITH_RAM_CACHE_H
#define COMEM_ARITH_RAM_CACHE_H

#include <stdint.h>

typedef struct comem_cache_headroom {
    double active_gb;
    double inactive_gb;
    int64_t active; /* bytes */
    int64_t inactive;
} comem_cache_headroom;

void comem_ram_cache_headroom(double total_ram_mib, comem_cache_headroom *out);

#endif
