/*
 * os/dl.h - a shared library loaded at run time: the CUDA driver and NVML are
 * never linked (no build-time CUDA). One interface, one backend per platform,
 * chosen at build time: dl_posix.c (dlopen) and dl_win.c (LoadLibraryW).
 */
#ifndef COMEM_OS_DL_H
#define COMEM_OS_DL_H

#include <stdbool.h>
#include <stddef.h>

/* The driver libraries' names where the system's search finds them. */
#ifdef _WIN32
#define COMEM_DL_CUDA "nvcuda.dll"
#define COMEM_DL_NVML "nvml.dll"
#else
#define COMEM_DL_CUDA "libcuda.so.1"
#define COMEM_DL_NVML "libnvidia-ml.so.1"
#endif

typedef struct comem_dl comem_dl;

/*
 * Loads path (UTF-8: a name the system's search finds, or a path), its symbols
 * kept to this handle. prefer_loaded: the copy the process has loaded already,
 * when it has one (one driver instance per process). NULL, with the system's
 * reason in why, when it cannot be loaded.
 */
comem_dl *comem_dl_open(const char *path, bool prefer_loaded, char *why, size_t whylen);
/* Whether the process has path loaded already (nothing is loaded by asking). */
bool comem_dl_loaded(const char *path);
/* The address of symbol name in dl; NULL when it has none. */
void *comem_dl_sym(comem_dl *dl, const char *name);
void comem_dl_close(comem_dl *dl);

#endif
