/*
 * arith/reserve.h - ComfyUI's VRAM reserve and minimum inference memory.
 *
 * EXTRA_RESERVED_VRAM is 400 MiB; on Windows 600 MiB, plus 100 MiB when the
 * card reports strictly more than 15360 MiB. --reserve-vram G replaces it with
 * G * 1024^3 (a double, also on Windows, and 0 is a valid value). The minimum
 * inference memory is 0.8 GiB (858993459.2 B, a double) plus that reserve.
 * Source: comfyui-manager-code.md section 1.3 (model_management.py).
 */
#ifndef COMEM_ARITH_RESERVE_H
#define COMEM_ARITH_RESERVE_H

#include <stdbool.h>
#include <stdint.h>

/* EXTRA_RESERVED_VRAM without --reserve-vram, off Windows: the reserve wherever none was said. */
#define COMEM_RESERVE_DEFAULT ((int64_t)400 << 20)

/* The inputs ComfyUI consults when it fixes its reserve at import time. */
typedef struct comem_reserve_opts {
    bool windows;          /* platform.win32_ver() is non-empty */
    double total_vram_mib; /* total VRAM in MiB, as ComfyUI holds it (a float) */
    bool reserve_vram_set; /* --reserve-vram was given */
    double reserve_vram_gb;
} comem_reserve_opts;

/* EXTRA_RESERVED_VRAM in bytes (a double: --reserve-vram makes it fractional). */
double comem_extra_reserved_vram(const comem_reserve_opts *opts);

/* minimum_inference_memory(): 0.8 GiB + reserve, computed in ComfyUI's order. */
double comem_minimum_inference_memory(double reserve);

#endif
