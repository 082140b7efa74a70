/*
 * comem/common.h - what every comem header shares: the export marker and the
 * status codes that every fallible call returns.
 *
 * Byte counts are int64_t everywhere. Functions return a comem_status and
 * write results through out parameters; there is no hidden error state.
 */
#ifndef COMEM_COMMON_H
#define COMEM_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the library exports: ELF's default visibility (the rest is hidden); on Windows comem.dll's
   exports, marked where the library itself is built (COMEM_BUILD_DLL) and plain for its users. */
#if defined(_WIN32)
#if defined(COMEM_BUILD_DLL)
#define COMEM_API __declspec(dllexport)
#else
#define COMEM_API
#endif
#elif defined(__GNUC__)
#define COMEM_API __attribute__((visibility("default")))
#else
#define COMEM_API
#endif

/*
 * Devices are numbered 0 .. COMEM_MAX_DEVICES - 1: the one limit every layer
 * keeps (the probes read at most this many, the ledger books them, the
 * protocol carries them, the client API checks indices against it).
 */
#define COMEM_MAX_DEVICES 16

/* Negative-errno style: 0 is success, every failure is negative. */
typedef enum comem_status {
    COMEM_OK = 0,
    COMEM_EINVAL = -1,    /* bad argument */
    COMEM_ENOMEM = -2,    /* host allocation failed */
    COMEM_ENODEV = -3,    /* no such device, or the driver/library is absent */
    COMEM_EIO = -4,       /* reading or writing a file or socket failed */
    COMEM_ETIMEDOUT = -5, /* a deadline passed */
    COMEM_EPROTO = -6,    /* malformed or unexpected frame */
    COMEM_EPERM = -7,     /* authentication or permission refused */
    COMEM_EBUSY = -8,     /* the holder is busy; try later */
    COMEM_ENOSPC = -9,    /* not enough memory could be found (refusal) */
    COMEM_ENOENT = -10,   /* no such holder, entry, grant or file */
    COMEM_ECLOSED = -11,  /* the peer closed the connection */
    COMEM_ENOTSUP = -12,  /* the operation is not supported here */
    COMEM_EDRIVER = -13,  /* the GPU driver returned an error */
    COMEM_EEXIST = -14,   /* already exists / already registered */
    COMEM_ERANGE = -15,   /* a value is out of range */
    COMEM_EFORKED = -16,  /* the client was opened by another process: a forked child opens its own */
    COMEM_EVERSION = -17  /* the peer speaks another protocol version: another comem install's coordinator */
} comem_status;

/*
 * The scope of a free-memory figure: whose allocations move it. Linux readings
 * are device-wide; under Windows WDDM a process's own reading is its budget.
 */
typedef enum comem_scope {
    COMEM_SCOPE_DEVICE_WIDE = 0,  /* every process's allocations move it */
    COMEM_SCOPE_PROCESS_LOCAL = 1 /* only the reader's own allocations move it (WDDM budget) */
} comem_scope;

/* A short, stable, lower-case description of a status ("ok", "busy", ...). */
COMEM_API const char *comem_status_str(int status);

#ifdef __cplusplus
}
#endif
#endif
