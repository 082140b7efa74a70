/*
 * arith/ram_cache.h - ComfyUI's default RAM-cache headroom (main.py prompt_worker), and a RAM admission's need.
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

/*
 * What a RAM admission needs free on host RAM: the bytes it will hold
 * (weights, plus working bytes it will hold beside them) and the reserve the
 * RAM keeps (the active headroom above, or 0 on a bounded budget). ComfyUI has
 * no admission sum for RAM: its RAM cache frees entries while free RAM is below
 * its headroom (RAMPressureCache), which is this same comparison made after
 * the fact, and VRAM's 1.1 slack and minimum inference memory are a card's
 * rules, not applied here. Saturating; negative inputs count as 0.
 */
int64_t comem_ram_admit_target(int64_t weights, int64_t working, int64_t reserve);

/*
 * What host RAM keeps free across processes: on the machine's RAM (budget < 0)
 * ComfyUI's active RAM-cache headroom of total_ram (bytes), the free RAM its
 * own RAM cache keeps during a prompt; on a bounded budget (comemd --ram SIZE)
 * nothing, the budget being the room itself.
 */
int64_t comem_ram_reserve(int64_t budget, int64_t total_ram);

#endif
