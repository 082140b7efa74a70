/* probe/nvml.c - the "nvml" device source: NVML loaded at run time (os/dl.h). */
#include "probe/nvml.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/log.h"
#include "os/dl.h"
#include "comem/common.h"
#include "os/env.h"
#include "probe/nvml_abi.h"

#define DEFAULT_LIBRARY COMEM_DL_NVML
#define PROCS_FIRST_GUESS 32u /* records in the first process-list buffer */
#define PROCS_ATTEMPTS 5      /* the list can grow between calls; give up after this many */

/* Versioned calls that can be switched off at run time (one bit each). */
enum {
    OFF_HANDLE_V2 = 1u << 0,
    OFF_PCI_V3 = 1u << 1,
    OFF_PCI_V2 = 1u << 2,
    OFF_PCI_V1 = 1u << 3,
    OFF_MEM_V2 = 1u << 4,
    OFF_PROCS_V3 = 1u << 5,
    OFF_PROCS_V2 = 1u << 6,
    OFF_PROCS_V1 = 1u << 7,
};

/* Call kinds that warn once per source, then log at debug level. */
enum {
    WARN_HANDLE = 1u << 0,
    WARN_NAME = 1u << 1,
    WARN_UUID = 1u << 2,
    WARN_PCI = 1u << 3,
    WARN_MEM = 1u << 4,
    WARN_PROCS = 1u << 5,
    WARN_PROCS_MANY = 1u << 6,
    WARN_PCIE = 1u << 7,
};

typedef struct nvml_source {
    comem_device_source base;
    comem_dl *lib;
    char path[256];
    unsigned int count;
    /* resolved once at open; NULL where the library lacks the symbol */
    PFN_nvmlShutdown shutdown;
    PFN_nvmlErrorString error_string;
    PFN_nvmlDeviceGetHandleByIndex handle_v2, handle_v1;
    PFN_nvmlDeviceGetName get_name;
    PFN_nvmlDeviceGetUUID get_uuid;
    PFN_nvmlDeviceGetPciInfo pci_v3, pci_v2, pci_v1;
    PFN_nvmlDeviceGetMemoryInfo_v2 mem_v2;
    PFN_nvmlDeviceGetMemoryInfo mem_v1;
    PFN_nvmlDeviceGetComputeRunningProcesses procs_v3, procs_v2;
    PFN_nvmlDeviceGetComputeRunningProcesses_v1 procs_v1;
    PFN_nvmlDeviceGetPcieLink pcie_gen, pcie_width;
    /* Readers may run on several threads: the only mutable state is atomic. A
     * versioned call is switched off per device (cards of two generations can
     * answer differently); warnings are once per source. */
    atomic_uint off[COMEM_MAX_DEVICES];
    atomic_uint warned;
} nvml_source;

static const comem_device_source_ops g_ops;

static const char *ret_name(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS: return "success";
    case NVML_ERROR_UNINITIALIZED: return "uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case NVML_ERROR_NOT_SUPPORTED: return "not supported";
    case NVML_ERROR_NO_PERMISSION: return "no permission";
    case NVML_ERROR_NOT_FOUND: return "not found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "insufficient size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "driver not loaded";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "function not found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "library/driver version mismatch";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "argument version mismatch";
    default: return "NVML error";
    }
}

static const char *err_str(const nvml_source *s, nvmlReturn_t r)
{
    const char *t = s->error_string ? s->error_string(r) : NULL;
    return t && *t ? t : ret_name(r);
}

static int status_of(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS: return COMEM_OK;
    case NVML_ERROR_INVALID_ARGUMENT: return COMEM_EINVAL;
    case NVML_ERROR_NOT_SUPPORTED: return COMEM_ENOTSUP;
    case NVML_ERROR_NO_PERMISSION: return COMEM_EPERM;
    case NVML_ERROR_NOT_FOUND:
    case NVML_ERROR_DRIVER_NOT_LOADED:
    case NVML_ERROR_GPU_IS_LOST:
    case NVML_ERROR_UNINITIALIZED: return COMEM_ENODEV;
    default: return COMEM_EDRIVER;
    }
}

/* A versioned call answering this is missing in the driver: try the older one. */
static bool try_older(nvmlReturn_t r)
{
    return r == NVML_ERROR_FUNCTION_NOT_FOUND || r == NVML_ERROR_NOT_SUPPORTED ||
           r == NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}

static bool is_off(nvml_source *s, int index, unsigned bit)
{
    return (atomic_load(&s->off[index]) & bit) != 0;
}

static void switch_off(nvml_source *s, int index, unsigned bit, const char *fn, nvmlReturn_t r)
{
    if (!(atomic_fetch_or(&s->off[index], bit) & bit))
        comem_debug("nvml: %s(device %d) answered '%s'; using the older call from now on", fn,
                    index, err_str(s, r));
}

/* Real driver errors warn once per kind and source; repeats go to debug. */
static void report(nvml_source *s, unsigned kind, const char *fn, int index, nvmlReturn_t r)
{
    bool first = !(atomic_fetch_or(&s->warned, kind) & kind);
    comem_log(first && r != NVML_ERROR_NOT_SUPPORTED ? COMEM_LOG_WARN : COMEM_LOG_DEBUG,
              "nvml: %s(device %d) failed: %s (%d)", fn, index, err_str(s, r), (int)r);
}

static int64_t ull_bytes(unsigned long long v)
{
    return v > (unsigned long long)INT64_MAX ? INT64_MAX : (int64_t)v;
}

static int get_handle(nvml_source *s, int index, nvmlDevice_t *d)
{
    nvmlReturn_t r = NVML_ERROR_FUNCTION_NOT_FOUND;
    if (s->handle_v2 && !is_off(s, index, OFF_HANDLE_V2)) {
        r = s->handle_v2((unsigned)index, d);
        if (r == NVML_SUCCESS)
            return COMEM_OK;
        if (!try_older(r) || !s->handle_v1) {
            report(s, WARN_HANDLE, "nvmlDeviceGetHandleByIndex_v2", index, r);
            return status_of(r);
        }
        switch_off(s, index, OFF_HANDLE_V2, "nvmlDeviceGetHandleByIndex_v2", r);
    }
    if (s->handle_v1 && (r = s->handle_v1((unsigned)index, d)) == NVML_SUCCESS)
        return COMEM_OK;
    report(s, WARN_HANDLE, "nvmlDeviceGetHandleByIndex", index, r);
    return status_of(r);
}

/* PCI bus id as NVML spells it ("00000000:3B:00.0"); "" when unknown. */
static void get_pci(nvml_source *s, nvmlDevice_t d, int index, char *out, size_t len)
{
    static const struct {
        size_t fn_off;
        unsigned bit;
        const char *name;
    } chain[] = {
        {offsetof(nvml_source, pci_v3), OFF_PCI_V3, "nvmlDeviceGetPciInfo_v3"},
        {offsetof(nvml_source, pci_v2), OFF_PCI_V2, "nvmlDeviceGetPciInfo_v2"},
        {offsetof(nvml_source, pci_v1), OFF_PCI_V1, "nvmlDeviceGetPciInfo"},
    };
    out[0] = '\0';
    nvmlReturn_t r = NVML_ERROR_FUNCTION_NOT_FOUND;
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++) {
        PFN_nvmlDeviceGetPciInfo fn;
        memcpy(&fn, (const char *)s + chain[i].fn_off, sizeof fn);
        if (!fn || is_off(s, index, chain[i].bit))
            continue;
        nvmlPciInfo_t p;
        memset(&p, 0, sizeof p);
        r = fn(d, &p);
        if (r == NVML_SUCCESS) {
            if (i == 0 && p.busId[0]) {
                p.busId[sizeof p.busId - 1] = '\0';
                snprintf(out, len, "%s", p.busId);
            } else {
                /* older layouts: the numeric ids are at the same offsets; the string is not */
                snprintf(out, len, "%08X:%02X:%02X.0", p.domain, p.bus, p.device);
            }
            return;
        }
        if (!try_older(r))
            break;
        switch_off(s, index, chain[i].bit, chain[i].name, r);
    }
    report(s, WARN_PCI, "nvmlDeviceGetPciInfo", index, r);
}

static void get_uuid(nvml_source *s, nvmlDevice_t d, int index, char *out, size_t len)
{
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
    out[0] = '\0';
    if (!s->get_uuid)
        return;
    nvmlReturn_t r = s->get_uuid(d, buf, sizeof buf);
    if (r != NVML_SUCCESS) {
        report(s, WARN_UUID, "nvmlDeviceGetUUID", index, r);
        return;
    }
    buf[sizeof buf - 1] = '\0';
    snprintf(out, len, "%s", buf);
}

static int read_memory(nvml_source *s, nvmlDevice_t d, int index, comem_device_reading *out)
{
    nvmlReturn_t r;
    if (s->mem_v2 && !is_off(s, index, OFF_MEM_V2)) {
        nvmlMemory_v2_t m;
        memset(&m, 0, sizeof m);
        m.version = NVML_MEMORY_V2_VERSION;
        r = s->mem_v2(d, &m);
        if (r == NVML_SUCCESS) {
            out->total = ull_bytes(m.total);
            out->free = ull_bytes(m.free);
            out->reserved = ull_bytes(m.reserved);
            /* v2 splits reserved out of used; the reading's used includes it, as v1's does */
            out->used = comem_add(ull_bytes(m.used), out->reserved);
            return COMEM_OK;
        }
        if (!try_older(r) || !s->mem_v1) {
            report(s, WARN_MEM, "nvmlDeviceGetMemoryInfo_v2", index, r);
            return status_of(r);
        }
        switch_off(s, index, OFF_MEM_V2, "nvmlDeviceGetMemoryInfo_v2", r);
    }
    nvmlMemory_t m;
    memset(&m, 0, sizeof m);
    r = s->mem_v1(d, &m);
    if (r != NVML_SUCCESS) {
        report(s, WARN_MEM, "nvmlDeviceGetMemoryInfo", index, r);
        return status_of(r);
    }
    out->total = ull_bytes(m.total);
    out->free = ull_bytes(m.free);
    out->used = ull_bytes(m.used); /* includes reserved; reserved itself is unknown (-1) */
    return COMEM_OK;
}

typedef enum { PROCS_OK, PROCS_OLDER, PROCS_FAILED } procs_result;

static void put_proc(comem_device_reading *out, unsigned pid, unsigned long long used)
{
    comem_proc_use *p = &out->procs[out->n_procs++];
    p->pid = (int32_t)pid;
    p->bytes = used == NVML_VALUE_NOT_AVAILABLE ? -1 : ull_bytes(used);
}

/*
 * One variant of the process query, growing the buffer while NVML says it is
 * too small (processes can start between calls), up to COMEM_MAX_DEVICE_PROCS.
 * version: 3 or 2 (24-byte records) or 1 (16-byte records).
 */
static procs_result fetch_procs(nvml_source *s, nvmlDevice_t d, int index, int version,
                                comem_device_reading *out, nvmlReturn_t *rr)
{
    size_t rec = version == 1 ? sizeof(nvmlProcessInfo_v1_t) : sizeof(nvmlProcessInfo_t);
    unsigned cap = PROCS_FIRST_GUESS;
    for (int attempt = 0; attempt < PROCS_ATTEMPTS; attempt++) {
        void *buf = calloc(cap, rec);
        if (!buf) {
            *rr = NVML_ERROR_MEMORY;
            return PROCS_FAILED;
        }
        unsigned n = cap;
        nvmlReturn_t r = version == 3   ? s->procs_v3(d, &n, buf)
                         : version == 2 ? s->procs_v2(d, &n, buf)
                                        : s->procs_v1(d, &n, buf);
        *rr = r;
        if (r == NVML_SUCCESS) {
            if (n > cap)
                n = cap;
            out->n_procs = 0;
            for (unsigned i = 0; i < n; i++) {
                if (version == 1) {
                    const nvmlProcessInfo_v1_t *p = (const nvmlProcessInfo_v1_t *)buf + i;
                    put_proc(out, p->pid, p->usedGpuMemory);
                } else {
                    const nvmlProcessInfo_t *p = (const nvmlProcessInfo_t *)buf + i;
                    put_proc(out, p->pid, p->usedGpuMemory);
                }
            }
            out->procs_known = true;
            free(buf);
            return PROCS_OK;
        }
        free(buf);
        if (r != NVML_ERROR_INSUFFICIENT_SIZE)
            return try_older(r) ? PROCS_OLDER : PROCS_FAILED;
        if (cap >= COMEM_MAX_DEVICE_PROCS || n > COMEM_MAX_DEVICE_PROCS) {
            bool first = !(atomic_fetch_or(&s->warned, WARN_PROCS_MANY) & WARN_PROCS_MANY);
            comem_log(first ? COMEM_LOG_WARN : COMEM_LOG_DEBUG,
                      "nvml: device %d runs %u compute processes, more than the %d comem lists; "
                      "per-process use unknown",
                      index, n, COMEM_MAX_DEVICE_PROCS);
            return PROCS_FAILED;
        }
        /* room for the ones NVML counted plus a few that may start before the next call */
        unsigned want = (n > cap ? n : cap) + 8u;
        cap = want > COMEM_MAX_DEVICE_PROCS ? COMEM_MAX_DEVICE_PROCS : want;
    }
    comem_debug("nvml: device %d: the process list kept growing; per-process use unknown", index);
    return PROCS_FAILED;
}

static void read_procs(nvml_source *s, nvmlDevice_t d, int index, comem_device_reading *out)
{
    static const struct {
        int version;
        unsigned bit;
        const char *name;
    } chain[] = {
        {3, OFF_PROCS_V3, "nvmlDeviceGetComputeRunningProcesses_v3"},
        {2, OFF_PROCS_V2, "nvmlDeviceGetComputeRunningProcesses_v2"},
        {1, OFF_PROCS_V1, "nvmlDeviceGetComputeRunningProcesses"},
    };
    out->procs_known = false;
    out->n_procs = 0;
    nvmlReturn_t r = NVML_ERROR_FUNCTION_NOT_FOUND;
    const char *last = "nvmlDeviceGetComputeRunningProcesses";
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++) {
        bool have = chain[i].version == 3   ? s->procs_v3 != NULL
                    : chain[i].version == 2 ? s->procs_v2 != NULL
                                            : s->procs_v1 != NULL;
        if (!have || is_off(s, index, chain[i].bit))
            continue;
        last = chain[i].name;
        procs_result pr = fetch_procs(s, d, index, chain[i].version, out, &r);
        if (pr == PROCS_OK)
            return;
        if (pr == PROCS_FAILED) {
            if (r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT_SIZE)
                report(s, WARN_PROCS, last, index, r);
            return;
        }
        switch_off(s, index, chain[i].bit, chain[i].name, r);
    }
    report(s, WARN_PROCS, last, index, r);
}

static void read_pcie(nvml_source *s, nvmlDevice_t d, int index, comem_device_reading *out)
{
    unsigned v = 0;
    nvmlReturn_t r;
    if (s->pcie_gen) {
        if ((r = s->pcie_gen(d, &v)) == NVML_SUCCESS)
            out->pcie_gen = (int)v;
        else
            report(s, WARN_PCIE, "nvmlDeviceGetCurrPcieLinkGeneration", index, r);
    }
    if (s->pcie_width) {
        if ((r = s->pcie_width(d, &v)) == NVML_SUCCESS)
            out->pcie_width = (int)v;
        else
            report(s, WARN_PCIE, "nvmlDeviceGetCurrPcieLinkWidth", index, r);
    }
}

static int src_count(comem_device_source *src, int *n)
{
    *n = (int)((nvml_source *)src)->count;
    return COMEM_OK;
}

static int src_read(comem_device_source *src, int index, comem_device_reading *out)
{
    nvml_source *s = (nvml_source *)src;
    if (!out || index < 0 || (unsigned)index >= s->count)
        return COMEM_EINVAL;
    comem_device_reading_clear(out);
    out->index = index;
    out->source = "nvml";
    out->scope = COMEM_SCOPE_DEVICE_WIDE;

    nvmlDevice_t d;
    int rc = get_handle(s, index, &d);
    if (rc != COMEM_OK)
        return rc;
    if (s->get_name) {
        nvmlReturn_t r = s->get_name(d, out->name, (unsigned)sizeof out->name);
        if (r != NVML_SUCCESS) {
            out->name[0] = '\0';
            report(s, WARN_NAME, "nvmlDeviceGetName", index, r);
        }
        out->name[sizeof out->name - 1] = '\0';
    }
    get_uuid(s, d, index, out->uuid, sizeof out->uuid);
    get_pci(s, d, index, out->pci_bus_id, sizeof out->pci_bus_id);
    if ((rc = read_memory(s, d, index, out)) != COMEM_OK)
        return rc;
    read_procs(s, d, index, out);
    read_pcie(s, d, index, out);
    out->timestamp_ns = comem_now_ns();
    return COMEM_OK;
}

static void src_close(comem_device_source *src)
{
    nvml_source *s = (nvml_source *)src;
    if (!s)
        return;
    if (s->shutdown) {
        nvmlReturn_t r = s->shutdown();
        if (r != NVML_SUCCESS)
            comem_warn("nvml: nvmlShutdown failed: %s (%d)", err_str(s, r), (int)r);
    }
    comem_dl_close(s->lib);
    free(s);
}

static const comem_device_source_ops g_ops = {
    .count = src_count,
    .read = src_read,
    .close = src_close,
};

/* A symbol into a function pointer of any type (POSIX guarantees the conversion; Windows' too). */
#define RESOLVE(lib, dst, name)                                                                    \
    do {                                                                                           \
        void *sym_ = comem_dl_sym((lib), (name));                                                  \
        memcpy(&(dst), &sym_, sizeof(dst));                                                        \
    } while (0)

int comem_nvml_open(comem_device_source **out, char *why, size_t whylen)
{
    char scratch[2];
    if (!why || whylen == 0) {
        why = scratch;
        whylen = sizeof scratch;
    }
    why[0] = '\0';
    if (!out)
        return COMEM_EINVAL;
    *out = NULL;

    const char *env = comem_env(COMEM_NVML_LIBRARY_ENV);
    const char *path = env && *env ? env : DEFAULT_LIBRARY;
    char reason[160] = "";
    comem_dl *lib = comem_dl_open(path, false, reason, sizeof reason);
    if (!lib) {
        snprintf(why, whylen, "cannot load %s: %s", path, reason);
        return COMEM_ENODEV;
    }
    nvml_source *s = calloc(1, sizeof *s);
    if (!s) {
        comem_dl_close(lib);
        snprintf(why, whylen, "out of memory");
        return COMEM_ENOMEM;
    }
    s->base.ops = &g_ops;
    s->base.name = "nvml";
    s->lib = lib;
    snprintf(s->path, sizeof s->path, "%s", path);

    PFN_nvmlInit init = NULL;
    const char *init_name = "nvmlInit_v2";
    RESOLVE(lib, init, "nvmlInit_v2");
    if (!init) {
        init_name = "nvmlInit";
        RESOLVE(lib, init, "nvmlInit");
    }
    PFN_nvmlDeviceGetCount get_count = NULL;
    RESOLVE(lib, get_count, "nvmlDeviceGetCount_v2");
    if (!get_count)
        RESOLVE(lib, get_count, "nvmlDeviceGetCount");
    RESOLVE(lib, s->shutdown, "nvmlShutdown");
    RESOLVE(lib, s->error_string, "nvmlErrorString");
    RESOLVE(lib, s->handle_v2, "nvmlDeviceGetHandleByIndex_v2");
    RESOLVE(lib, s->handle_v1, "nvmlDeviceGetHandleByIndex");
    RESOLVE(lib, s->get_name, "nvmlDeviceGetName");
    RESOLVE(lib, s->get_uuid, "nvmlDeviceGetUUID");
    RESOLVE(lib, s->pci_v3, "nvmlDeviceGetPciInfo_v3");
    RESOLVE(lib, s->pci_v2, "nvmlDeviceGetPciInfo_v2");
    RESOLVE(lib, s->pci_v1, "nvmlDeviceGetPciInfo");
    RESOLVE(lib, s->mem_v2, "nvmlDeviceGetMemoryInfo_v2");
    RESOLVE(lib, s->mem_v1, "nvmlDeviceGetMemoryInfo");
    RESOLVE(lib, s->procs_v3, "nvmlDeviceGetComputeRunningProcesses_v3");
    RESOLVE(lib, s->procs_v2, "nvmlDeviceGetComputeRunningProcesses_v2");
    RESOLVE(lib, s->procs_v1, "nvmlDeviceGetComputeRunningProcesses");
    RESOLVE(lib, s->pcie_gen, "nvmlDeviceGetCurrPcieLinkGeneration");
    RESOLVE(lib, s->pcie_width, "nvmlDeviceGetCurrPcieLinkWidth");

    const char *missing = !init                                 ? "nvmlInit"
                          : !s->shutdown                        ? "nvmlShutdown"
                          : !get_count                          ? "nvmlDeviceGetCount"
                          : !s->handle_v2 && !s->handle_v1      ? "nvmlDeviceGetHandleByIndex"
                          : !s->mem_v2 && !s->mem_v1            ? "nvmlDeviceGetMemoryInfo"
                                                                : NULL;
    if (missing) {
        snprintf(why, whylen, "%s has no %s", path, missing);
        s->shutdown = NULL; /* never initialised */
        src_close(&s->base);
        return COMEM_ENODEV;
    }

    nvmlReturn_t r = init();
    if (r != NVML_SUCCESS) {
        snprintf(why, whylen, "%s failed in %s: %s (%d)", init_name, path, err_str(s, r), (int)r);
        s->shutdown = NULL;
        src_close(&s->base);
        return COMEM_ENODEV;
    }
    unsigned n = 0;
    r = get_count(&n);
    if (r != NVML_SUCCESS || n == 0) {
        if (r != NVML_SUCCESS)
            snprintf(why, whylen, "nvmlDeviceGetCount failed in %s: %s (%d)", path, err_str(s, r),
                     (int)r);
        else
            snprintf(why, whylen, "NVML (%s) sees no NVIDIA device", path);
        src_close(&s->base);
        return COMEM_ENODEV;
    }
    if (n > COMEM_MAX_DEVICES) {
        comem_warn("nvml: %u devices, using the first %d", n, COMEM_MAX_DEVICES);
        n = COMEM_MAX_DEVICES;
    }
    s->count = n;
    comem_debug("nvml: %s via %s, %u device(s)", path, init_name, n);
    *out = &s->base;
    return COMEM_OK;
}

static nvml_source *as_nvml(comem_device_source *src)
{
    return src && src->ops == &g_ops ? (nvml_source *)src : NULL;
}

/* Whether NVML's device d (index i) is the one key names: by its UUID, or by its PCI bus id. */
typedef bool (*device_match)(nvml_source *s, nvmlDevice_t d, int i, const char *key);

static bool uuid_is(nvml_source *s, nvmlDevice_t d, int i, const char *uuid)
{
    char u[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    get_uuid(s, d, i, u, sizeof u);
    return u[0] && strcmp(u, uuid) == 0;
}

static bool bus_id_is(nvml_source *s, nvmlDevice_t d, int i, const char *bus_id)
{
    char b[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    get_pci(s, d, i, b, sizeof b);
    return comem_pci_bus_id_equal(b, bus_id);
}

/* The index of the first of src's devices that match says is key's. */
static int index_where(comem_device_source *src, device_match match, const char *key, int *index)
{
    nvml_source *s = as_nvml(src);
    if (!s || !key || !index)
        return COMEM_EINVAL;
    for (unsigned i = 0; i < s->count; i++) {
        nvmlDevice_t d;
        if (get_handle(s, (int)i, &d) == COMEM_OK && match(s, d, (int)i, key)) {
            *index = (int)i;
            return COMEM_OK;
        }
    }
    return COMEM_ENOENT;
}

int comem_nvml_index_by_uuid(comem_device_source *src, const char *uuid, int *index)
{
    return index_where(src, uuid_is, uuid, index);
}

int comem_nvml_index_by_pci_bus_id(comem_device_source *src, const char *bus_id, int *index)
{
    return index_where(src, bus_id_is, bus_id, index);
}

/* Reads 1-8 hex digits (no "0x", no sign) and the separator after them. */
static bool hex_field(const char **p, unsigned *v, char sep)
{
    unsigned x = 0;
    int digits = 0;
    for (const char *c = *p;; c++) {
        int d = *c >= '0' && *c <= '9'   ? *c - '0'
                : *c >= 'a' && *c <= 'f' ? *c - 'a' + 10
                : *c >= 'A' && *c <= 'F' ? *c - 'A' + 10
                                         : -1;
        if (d < 0) {
            if (digits == 0 || *c != sep)
                return false;
            *v = x;
            *p = sep ? c + 1 : c;
            return true;
        }
        if (++digits > 8)
            return false;
        x = x << 4 | (unsigned)d;
    }
}

/* "[domain:]bus:device.function" in hex; the whole string must match. */
static bool parse_bus_id(const char *s, unsigned v[4])
{
    const char *p = s;
    if (hex_field(&p, &v[0], ':') && hex_field(&p, &v[1], ':') && hex_field(&p, &v[2], '.') &&
        hex_field(&p, &v[3], '\0'))
        return true;
    p = s;
    v[0] = 0;
    return hex_field(&p, &v[1], ':') && hex_field(&p, &v[2], '.') && hex_field(&p, &v[3], '\0');
}

bool comem_pci_bus_id_equal(const char *a, const char *b)
{
    unsigned x[4], y[4];
    if (!a || !b || !parse_bus_id(a, x) || !parse_bus_id(b, y))
        return false;
    return memcmp(x, y, sizeof x) == 0;
}
