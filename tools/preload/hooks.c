/*
 * tools/preload/hooks.c - the interposed entry points.
 *
 * A CUDA program reaches the driver's allocation functions three ways, and
 * each is covered:
 *   - by linking libcuda: the functions below are exported under the
 *     driver's own names (cuMemAlloc_v2, ...), so the dynamic linker binds the
 *     program to them; each finds the driver's own with RTLD_NEXT;
 *   - by dlsym on the driver's handle (the CUDA runtime takes
 *     cuGetProcAddress_v2 that way): dlsym itself is interposed, and a driver
 *     symbol it returns is swapped for its wrapper;
 *   - by cuGetProcAddress (the runtime, cudaGetDriverEntryPoint, PyTorch's
 *     driver API table): the wrapped cuGetProcAddress hands out wrappers for
 *     the functions below, by base name, when asked for a revision these
 *     signatures describe.
 * A wrapper keeps the one real function it stands for; asked for a different
 * revision or variant of a name already wrapped, the lookup hands out the
 * real function unwrapped and says so once. Anything else passes through.
 */
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "preload.h"
#include "probe/cuda_abi.h"
#include "probe/cuda_view.h"

#define EXPORT __attribute__((visibility("default")))

typedef struct comem_cu_pool_st *CUmemoryPool;
typedef CUresult (*fn_alloc)(CUdeviceptr *, size_t);
typedef CUresult (*fn_alloc_pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
typedef CUresult (*fn_alloc_managed)(CUdeviceptr *, size_t, unsigned int);
typedef CUresult (*fn_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*fn_alloc_async)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*fn_alloc_pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*fn_free)(CUdeviceptr);
typedef CUresult (*fn_release)(CUmemGenericAllocationHandle);
typedef CUresult (*fn_free_async)(CUdeviceptr, CUstream);

/* The interposers, under the driver's own names. */
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t width, size_t height, unsigned int elem);
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags);
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
                            unsigned long long flags);
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s);
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s);
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s);
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s);
EXPORT CUresult cuMemFree_v2(CUdeviceptr p);
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h);
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s);
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s);
EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status);
EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int version, cuuint64_t flags);

/* ---- the real dlsym, and RTLD_NEXT on a caller's behalf ---- */

typedef void *(*fn_dlsym)(void *, const char *);

static fn_dlsym real_dlsym(void)
{
    static fn_dlsym real;
    if (!real) {
        void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!p)
            p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        memcpy(&real, &p, sizeof real);
    }
    return real;
}

typedef struct next_search {
    uintptr_t caller;
    bool past_caller;
    const char *name;
    void *found;
} next_search;

static bool contains(const struct dl_phdr_info *info, uintptr_t addr)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && addr >= lo && addr < lo + ph->p_memsz)
            return true;
    }
    return false;
}

static int next_one(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    next_search *s = arg;
    if (!s->past_caller) {
        s->past_caller = contains(info, s->caller);
        return 0;
    }
    if (!info->dlpi_name || !info->dlpi_name[0])
        return 0; /* the main program (or the vDSO) comes first: never "next" */
    void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        return 0;
    s->found = real_dlsym()(h, s->name);
    dlclose(h);
    return s->found != NULL;
}

/*
 * RTLD_NEXT means "after the object that called". dlsym below forwards every
 * lookup but a driver symbol's as a sibling call, so glibc sees the original
 * caller's return address and RTLD_NEXT keeps its meaning (a sanitizer
 * runtime, first in LD_PRELOAD, looks up its interceptors' targets that way
 * while it starts, when little else may run). For a driver symbol asked for
 * with RTLD_NEXT the objects after the caller's, in load order, are searched.
 */
static void *next_after(const void *caller, const char *name)
{
    next_search s = {.caller = (uintptr_t)caller, .name = name};
    dl_iterate_phdr(next_one, &s);
    return s.found;
}

/* ---- one slot per wrapped function ---- */

typedef struct hook {
    const char *base;     /* the name cuGetProcAddress is asked for */
    const char *exported; /* the driver's exported symbol */
    int min_version;      /* the first CUDA version whose revision these signatures describe */
    bool per_thread;      /* the per-thread default stream variant */
    bool stream;          /* takes a stream: the two variants are different functions */
    void *wrapper;
    void *real;
} hook;

enum {
    H_ALLOC, H_PITCH, H_MANAGED, H_CREATE, H_ASYNC, H_ASYNC_PT, H_POOL, H_POOL_PT,
    H_FREE, H_RELEASE, H_FREE_ASYNC, H_FREE_ASYNC_PT, H_GPA, H_GPA_V1, H_GPA_INNER, H_COUNT
};

static hook g_hooks[H_COUNT];

static void *get_real(int i) { return __atomic_load_n(&g_hooks[i].real, __ATOMIC_ACQUIRE); }

/* Keeps r as hook i's real function; false when it already keeps a different one. */
static bool set_real(int i, void *r)
{
    if (r == g_hooks[i].wrapper)
        return true; /* found ourselves (the global scope has this library first): the real one is further on */
    void *expected = NULL;
    return __atomic_compare_exchange_n(&g_hooks[i].real, &expected, r, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
           expected == r;
}

/* The driver's cuGetProcAddress, whichever revision is known (returns CUDA_ERROR_NOT_FOUND when none). */
static CUresult real_gpa(const char *sym, void **pfn, int version, cuuint64_t flags)
{
    PFN_cuGetProcAddress_v2 v2 = (PFN_cuGetProcAddress_v2)get_real(H_GPA);
    PFN_cuGetProcAddress_v1 v1 = (PFN_cuGetProcAddress_v1)get_real(H_GPA_V1);
    if (!v2 && !v1) {
        void *p = real_dlsym()(RTLD_NEXT, "cuGetProcAddress_v2");
        if (p && set_real(H_GPA, p))
            v2 = (PFN_cuGetProcAddress_v2)p;
    }
    *pfn = NULL;
    if (v2)
        return v2(sym, pfn, version, flags, NULL);
    if (v1)
        return v1(sym, pfn, version, flags);
    return CUDA_ERROR_NOT_FOUND;
}

/* The real function for hook i, found on first use when the program came in by its exported name. */
static void *real_of(int i)
{
    void *r = get_real(i);
    if (r)
        return r;
    hook *h = &g_hooks[i];
    r = real_dlsym()(RTLD_NEXT, h->exported);
    if (!r && i != H_GPA && i != H_GPA_V1) /* a driver that exports only cuGetProcAddress (as the test fake) */
        real_gpa(h->base, &r, 12000,
                 h->per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    if (!r) {
        preload_say_once(h, "%s: the driver has no such function here; answering not initialised", h->exported);
        return NULL;
    }
    if (!set_real(i, r))
        r = get_real(i);
    return r;
}

/* ---- the devices, as this process's driver names them ---- */

static int current_ordinal(void)
{
    static PFN_cuCtxGetDevice get;
    if (!get) {
        void *p = NULL;
        real_gpa("cuCtxGetDevice", &p, 2000, 0);
        get = (PFN_cuCtxGetDevice)p;
    }
    CUdevice d = 0;
    if (!get || get(&d) != CUDA_SUCCESS) {
        preload_say_once(&get, "no current CUDA context can be read: allocations are charged to CUDA device 0");
        return 0;
    }
    return d;
}

int preload_ordinal_uuid(int ordinal, char *uuid, size_t len)
{
    void *p = NULL, *q = NULL;
    real_gpa("cuDeviceGet", &p, 2000, 0);
    real_gpa("cuDeviceGetUuid", &q, 11040, 0);
    PFN_cuDeviceGet get = (PFN_cuDeviceGet)p;
    PFN_cuDeviceGetUuid get_uuid = (PFN_cuDeviceGetUuid)q;
    CUdevice dev;
    CUuuid u;
    if (!get || !get_uuid || get(&dev, ordinal) != CUDA_SUCCESS || get_uuid(&u, dev) != CUDA_SUCCESS || len < 41)
        return -1;
    comem_cuda_format_uuid((const unsigned char *)u.bytes, uuid, len);
    return 0;
}

/* ---- the wrappers ---- */

/* Keys: device pointers and cuMemCreate handles live in one table, apart. */
static uint64_t ptr_key(CUdeviceptr p) { return (uint64_t)p << 1; }
static uint64_t handle_key(CUmemGenericAllocationHandle h) { return ((uint64_t)h << 1) | 1u; }

#define NO_REAL(i, T)                                                                                       \
    T real = (T)real_of(i);                                                                                 \
    if (!real)                                                                                              \
    return CUDA_ERROR_NOT_INITIALIZED

static CUresult alloc_common(fn_alloc real, CUdeviceptr *p, size_t n, const char *what)
{
    if (preload_inside() || !p)
        return real(p, n);
    preload_ticket t;
    if (!preload_before(current_ordinal(), n, what, &t))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(p, n);
    preload_after(&t, r == CUDA_SUCCESS ? ptr_key(*p) : 0, n);
    return r;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
    NO_REAL(H_ALLOC, fn_alloc);
    return alloc_common(real, p, n, "cuMemAlloc");
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t width, size_t height, unsigned int elem)
{
    NO_REAL(H_PITCH, fn_alloc_pitch);
    if (preload_inside() || !p || !pitch)
        return real(p, pitch, width, height, elem);
    preload_ticket t;
    if (!preload_before(current_ordinal(), width * height, "cuMemAllocPitch", &t))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(p, pitch, width, height, elem);
    preload_after(&t, r == CUDA_SUCCESS ? ptr_key(*p) : 0, r == CUDA_SUCCESS ? *pitch * height : 0);
    return r;
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags)
{
    NO_REAL(H_MANAGED, fn_alloc_managed);
    if (preload_inside() || !p)
        return real(p, n, flags);
    preload_ticket t;
    if (!preload_before(current_ordinal(), n, "cuMemAllocManaged", &t))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(p, n, flags);
    preload_after(&t, r == CUDA_SUCCESS ? ptr_key(*p) : 0, n);
    return r;
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
                            unsigned long long flags)
{
    NO_REAL(H_CREATE, fn_create);
    if (preload_inside() || !h)
        return real(h, n, prop, flags);
    int ordinal = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : current_ordinal();
    preload_ticket t;
    if (!preload_before(ordinal, n, "cuMemCreate", &t))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(h, n, prop, flags);
    preload_after(&t, r == CUDA_SUCCESS ? handle_key(*h) : 0, n);
    return r;
}

static CUresult alloc_async(int i, CUdeviceptr *p, size_t n, CUstream s)
{
    NO_REAL(i, fn_alloc_async);
    if (preload_inside() || !p)
        return real(p, n, s);
    preload_ticket t;
    if (!preload_before(current_ordinal(), n, "cuMemAllocAsync", &t))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(p, n, s);
    preload_after(&t, r == CUDA_SUCCESS ? ptr_key(*p) : 0, n);
    return r;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { return alloc_async(H_ASYNC, p, n, s); }
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s)
{
    return alloc_async(H_ASYNC_PT, p, n, s);
}

static CUresult alloc_pool(int i, CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    NO_REAL(i, fn_alloc_pool);
    if (preload_inside() || !p)
        return real(p, n, pool, s);
    preload_ticket t;
    if (!preload_before(current_ordinal(), n, "cuMemAllocFromPoolAsync", &t))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(p, n, pool, s);
    preload_after(&t, r == CUDA_SUCCESS ? ptr_key(*p) : 0, n);
    return r;
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    return alloc_pool(H_POOL, p, n, pool, s);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    return alloc_pool(H_POOL_PT, p, n, pool, s);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    NO_REAL(H_FREE, fn_free);
    CUresult r = real(p);
    if (r == CUDA_SUCCESS)
        preload_freed(ptr_key(p));
    return r;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    NO_REAL(H_RELEASE, fn_release);
    CUresult r = real(h);
    if (r == CUDA_SUCCESS)
        preload_freed(handle_key(h));
    return r;
}

static CUresult free_async(int i, CUdeviceptr p, CUstream s)
{
    NO_REAL(i, fn_free_async);
    CUresult r = real(p, s);
    if (r == CUDA_SUCCESS)
        preload_freed(ptr_key(p)); /* freed in stream order: soon, and the driver may reuse it at once */
    return r;
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { return free_async(H_FREE_ASYNC, p, s); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return free_async(H_FREE_ASYNC_PT, p, s); }

/* ---- cuGetProcAddress: hands out wrappers ---- */

static void *wrap(const char *base, void *real, int version, cuuint64_t flags);

EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status)
{
    NO_REAL(H_GPA, PFN_cuGetProcAddress_v2);
    CUresult r = real(sym, pfn, version, flags, status);
    if (r == CUDA_SUCCESS && sym && pfn && *pfn)
        *pfn = wrap(sym, *pfn, version, flags);
    return r;
}

/*
 * The cuGetProcAddress that cuGetProcAddress hands out for itself may be
 * another pointer than the exported one (the fake's is): a second wrapper.
 */
static CUresult gpa_inner(const char *sym, void **pfn, int version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult *status)
{
    NO_REAL(H_GPA_INNER, PFN_cuGetProcAddress_v2);
    CUresult r = real(sym, pfn, version, flags, status);
    if (r == CUDA_SUCCESS && sym && pfn && *pfn)
        *pfn = wrap(sym, *pfn, version, flags);
    return r;
}

EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int version, cuuint64_t flags)
{
    NO_REAL(H_GPA_V1, PFN_cuGetProcAddress_v1);
    CUresult r = real(sym, pfn, version, flags);
    if (r == CUDA_SUCCESS && sym && pfn && *pfn)
        *pfn = wrap(sym, *pfn, version, flags);
    return r;
}

static hook g_hooks[H_COUNT] = {
    [H_ALLOC] = {"cuMemAlloc", "cuMemAlloc_v2", 3020, false, false, (void *)cuMemAlloc_v2, NULL},
    [H_PITCH] = {"cuMemAllocPitch", "cuMemAllocPitch_v2", 3020, false, false, (void *)cuMemAllocPitch_v2, NULL},
    [H_MANAGED] = {"cuMemAllocManaged", "cuMemAllocManaged", 6000, false, false, (void *)cuMemAllocManaged, NULL},
    [H_CREATE] = {"cuMemCreate", "cuMemCreate", 10020, false, false, (void *)cuMemCreate, NULL},
    [H_ASYNC] = {"cuMemAllocAsync", "cuMemAllocAsync", 11020, false, true, (void *)cuMemAllocAsync, NULL},
    [H_ASYNC_PT] = {"cuMemAllocAsync", "cuMemAllocAsync_ptsz", 11020, true, true, (void *)cuMemAllocAsync_ptsz, NULL},
    [H_POOL] = {"cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 11020, false, true,
                (void *)cuMemAllocFromPoolAsync, NULL},
    [H_POOL_PT] = {"cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz", 11020, true, true,
                   (void *)cuMemAllocFromPoolAsync_ptsz, NULL},
    [H_FREE] = {"cuMemFree", "cuMemFree_v2", 3020, false, false, (void *)cuMemFree_v2, NULL},
    [H_RELEASE] = {"cuMemRelease", "cuMemRelease", 10020, false, false, (void *)cuMemRelease, NULL},
    [H_FREE_ASYNC] = {"cuMemFreeAsync", "cuMemFreeAsync", 11020, false, true, (void *)cuMemFreeAsync, NULL},
    [H_FREE_ASYNC_PT] = {"cuMemFreeAsync", "cuMemFreeAsync_ptsz", 11020, true, true, (void *)cuMemFreeAsync_ptsz,
                         NULL},
    [H_GPA] = {"cuGetProcAddress", "cuGetProcAddress_v2", 12000, false, false, (void *)cuGetProcAddress_v2, NULL},
    [H_GPA_V1] = {"cuGetProcAddress", "cuGetProcAddress", 11030, false, false, (void *)cuGetProcAddress, NULL},
    [H_GPA_INNER] = {"cuGetProcAddress", "cuGetProcAddress_v2", 12000, false, false, (void *)gpa_inner, NULL},
};

/* Device memory the library sees allocated but does not attribute: said once each. */
static const char *const g_unattributed[] = {"cuArrayCreate", "cuArray3DCreate", "cuMipmappedArrayCreate",
                                             "cuMemAllocHost", "cuMemHostAlloc", "cuMemPoolCreate"};

static bool starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

static void *wrap(const char *base, void *real, int version, cuuint64_t flags)
{
    bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    if (!strcmp(base, "cuGetProcAddress")) {
        int i = version >= 12000 ? H_GPA : H_GPA_V1;
        if (set_real(i, real))
            return g_hooks[i].wrapper;
        if (i == H_GPA && set_real(H_GPA_INNER, real))
            return g_hooks[H_GPA_INNER].wrapper;
        preload_say_once(&g_hooks[i].wrapper, "a third cuGetProcAddress: what it hands out is not attributed");
        return real;
    }
    for (int i = 0; i < H_GPA; i++) {
        hook *h = &g_hooks[i];
        if (strcmp(h->base, base) || (h->stream && h->per_thread != per_thread))
            continue;
        if (version < h->min_version) {
            preload_say_once(h, "%s asked for as of CUDA %d, older than the revision comem knows: not attributed",
                             base, version);
            return real;
        }
        if (!set_real(i, real)) {
            preload_say_once(&h->wrapper, "%s asked for a second revision or variant: that one is not attributed",
                             base);
            return real;
        }
        comem_debug("preload: %s (CUDA %d, flags %llu) through cuGetProcAddress: attributed", base, version,
                    (unsigned long long)flags);
        return h->wrapper;
    }
    /* The runtime looks these up at start whether the program uses them or not: a debug line, not a warning. */
    for (size_t k = 0; k < sizeof g_unattributed / sizeof g_unattributed[0]; k++)
        if (starts(base, g_unattributed[k]))
            comem_debug("preload: %s is handed out unwrapped: device arrays and host memory are not attributed",
                        g_unattributed[k]);
    return real;
}

/* A driver symbol found by dlsym, by its exported name: the wrapper, when it is one of ours. */
static void *wrap_exported(const char *name, void *real)
{
    for (int i = 0; i < H_GPA_INNER; i++) {
        hook *h = &g_hooks[i];
        if (strcmp(h->exported, name))
            continue;
        if (real == h->wrapper) {
            (void)real_of(i); /* the driver's, behind this library */
            return real;
        }
        if (!set_real(i, real)) {
            preload_say_once(&h->wrapper, "%s found twice, as two functions: the second is not attributed", name);
            return real;
        }
        comem_debug("preload: %s through dlsym: attributed", name);
        return h->wrapper;
    }
    if (!strcmp(name, "cuMemAlloc") || !strcmp(name, "cuMemFree"))
        preload_say_once(&g_hooks[H_ALLOC].base, "%s (the CUDA 3.1 revision) is not attributed", name);
    return real;
}

static void *dlsym_driver(void *handle, const char *name, const void *caller)
{
    void *p = handle == RTLD_NEXT ? next_after(caller, name) : real_dlsym()(handle, name);
    if (p && preload_policy_now() != PRELOAD_OFF)
        p = wrap_exported(name, p);
    return p;
}

/* Must stay a sibling call for anything not the driver's (see next_after): optimised even at -O0. */
__attribute__((optimize("O2", "optimize-sibling-calls"))) EXPORT void *dlsym(void *handle, const char *name)
{
    if (name[0] == 'c' && name[1] == 'u')
        return dlsym_driver(handle, name, __builtin_return_address(0));
    return real_dlsym()(handle, name);
}
