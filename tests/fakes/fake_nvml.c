/*
 * tests/fakes/fake_nvml.c - a scripted NVML for CI machines without a GPU.
 *
 * Exports the entry points comem's NVML source looks up, answering from two
 * scripted devices, and counts every call so tests can see which fallback ran.
 * Scenarios and devices: see fake_nvml.h.
 */
#include "fake_nvml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PROCS 300
#define N_DEVS 2

typedef struct fake_proc {
    unsigned pid;
    unsigned long long used;
} fake_proc;

typedef struct fake_dev {
    const char *name, *uuid;
    unsigned domain, bus, device;
    unsigned long long total, reserved, allocated;
    int pcie_supported;
    unsigned n_procs;
    fake_proc procs[MAX_PROCS];
} fake_dev;

static fake_dev g_devs[N_DEVS];
static int g_inits; /* nvmlInit minus nvmlShutdown */
static char g_mode[32] = "basic";

static const char *const g_names[] = {
    "nvmlInit", "nvmlInit_v2", "nvmlShutdown", "nvmlErrorString", "nvmlDeviceGetCount",
    "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v2",
    "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
};
#define N_NAMES (sizeof g_names / sizeof g_names[0])
static int g_calls[N_NAMES];

static void count(const char *fn)
{
    for (size_t i = 0; i < N_NAMES; i++)
        if (strcmp(g_names[i], fn) == 0)
            g_calls[i]++;
}

int fake_nvml_calls(const char *fn)
{
    for (size_t i = 0; i < N_NAMES; i++)
        if (strcmp(g_names[i], fn) == 0)
            return g_calls[i];
    return -1;
}

void fake_nvml_reset(void) { memset(g_calls, 0, sizeof g_calls); }

static int is_mode(const char *m) { return strcmp(g_mode, m) == 0; }

static void script(void)
{
    const char *m = getenv("FAKE_NVML_MODE");
    snprintf(g_mode, sizeof g_mode, "%s", m && *m ? m : "basic");

    memset(g_devs, 0, sizeof g_devs);
    fake_dev *d = &g_devs[0];
    d->name = "NVIDIA H200";
    d->uuid = "GPU-aaaaaaaa-1111-2222-3333-444444444444";
    d->bus = 0x3b;
    d->total = 143771 * FAKE_NVML_MIB;
    d->reserved = 615 * FAKE_NVML_MIB;
    d->allocated = 2064 * FAKE_NVML_MIB;
    d->pcie_supported = 1;
    if (is_mode("insufficient") || is_mode("too_many")) {
        d->n_procs = is_mode("insufficient") ? 40 : 300;
        for (unsigned i = 0; i < d->n_procs; i++)
            d->procs[i] = (fake_proc){5000 + i, (i + 1) * FAKE_NVML_MIB};
    } else {
        d->n_procs = 2;
        d->procs[0] = (fake_proc){4242, 520 * FAKE_NVML_MIB};
        d->procs[1] = (fake_proc){4343, 1544 * FAKE_NVML_MIB};
        if (is_mode("not_available"))
            d->procs[1].used = NVML_VALUE_NOT_AVAILABLE;
    }

    d = &g_devs[1];
    d->name = "NVIDIA L4";
    d->uuid = "GPU-bbbbbbbb-1111-2222-3333-444444444444";
    d->bus = 0x5c;
    d->total = 23034 * FAKE_NVML_MIB;
    d->reserved = 300 * FAKE_NVML_MIB;
}

static unsigned dev_count(void) { return is_mode("no_devices") ? 0 : N_DEVS; }

/* A handle is a pointer to the scripted device; NULL or foreign pointers are refused. */
static fake_dev *dev_of(nvmlDevice_t h)
{
    for (unsigned i = 0; i < dev_count(); i++)
        if ((void *)h == (void *)&g_devs[i])
            return &g_devs[i];
    return NULL;
}

#define NEED_INIT()                                                                                \
    do {                                                                                           \
        if (g_inits <= 0)                                                                          \
            return NVML_ERROR_UNINITIALIZED;                                                       \
    } while (0)

#define NEED_DEV(h, d)                                                                             \
    NEED_INIT();                                                                                   \
    fake_dev *d = dev_of(h);                                                                       \
    if (!d)                                                                                        \
    return NVML_ERROR_INVALID_ARGUMENT

/* ---- init ---- */

static nvmlReturn_t init_common(void)
{
    script();
    if (is_mode("init_fails"))
        return NVML_ERROR_DRIVER_NOT_LOADED;
    g_inits++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit(void)
{
    count(__func__);
    return init_common();
}

nvmlReturn_t nvmlShutdown(void)
{
    count(__func__);
    NEED_INIT();
    g_inits--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
    count(__func__);
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *n)
{
    count(__func__);
    NEED_INIT();
    *n = dev_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    count(__func__);
    NEED_INIT();
    if (index >= dev_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)(void *)&g_devs[index];
    return NVML_SUCCESS;
}

/* ---- identity ---- */

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned int len)
{
    count(__func__);
    NEED_DEV(h, d);
    if (len < strlen(d->name) + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(name, d->name);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned int len)
{
    count(__func__);
    NEED_DEV(h, d);
    if (len < strlen(d->uuid) + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(uuid, d->uuid);
    return NVML_SUCCESS;
}

/* The pre-_v3 layout: 16-byte busId, the ids, then reserved words. */
typedef struct old_pci {
    char busId[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    unsigned reserved[4];
} old_pci;

static nvmlReturn_t pci_old(nvmlDevice_t h, nvmlPciInfo_t *pci)
{
    NEED_DEV(h, d);
    old_pci o;
    memset(&o, 0, sizeof o);
    snprintf(o.busId, sizeof o.busId, "%04X:%02X:%02X.0", d->domain, d->bus, d->device);
    o.domain = d->domain;
    o.bus = d->bus;
    o.device = d->device;
    o.pciDeviceId = 0x233510de;
    for (int i = 0; i < 4; i++)
        o.reserved[i] = 0x41414141u; /* non-zero, so a reader of busId would see junk */
    memcpy(pci, &o, sizeof o);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t h, nvmlPciInfo_t *pci)
{
    count(__func__);
    return pci_old(h, pci);
}

/* ---- memory ---- */

static nvmlReturn_t mem_fill(nvmlDevice_t h, unsigned long long *total,
                             unsigned long long *reserved, unsigned long long *free_b,
                             unsigned long long *allocated)
{
    NEED_DEV(h, d);
    if (is_mode("mem_lost"))
        return NVML_ERROR_GPU_IS_LOST;
    *total = d->total;
    *reserved = d->reserved;
    *allocated = d->allocated;
    *free_b = d->total - d->reserved - d->allocated;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m)
{
    count(__func__);
    unsigned long long t, r, f, a;
    nvmlReturn_t rc = mem_fill(h, &t, &r, &f, &a);
    if (rc != NVML_SUCCESS)
        return rc;
    m->total = t;
    m->free = f;
    m->used = a + r; /* the unversioned call counts reserved as used */
    return NVML_SUCCESS;
}

/* ---- processes ---- */

static nvmlReturn_t procs_common(nvmlDevice_t h, unsigned int *n, void *infos, int v1)
{
    NEED_DEV(h, d);
    if (*n < d->n_procs) {
        *n = d->n_procs;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (d->n_procs && !infos)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < d->n_procs; i++) {
        if (v1) {
            nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)infos + i;
            p->pid = d->procs[i].pid;
            p->usedGpuMemory = d->procs[i].used;
        } else {
            nvmlProcessInfo_t *p = (nvmlProcessInfo_t *)infos + i;
            p->pid = d->procs[i].pid;
            p->usedGpuMemory = d->procs[i].used;
            p->gpuInstanceId = 0xffffffffu;
            p->computeInstanceId = 0xffffffffu;
        }
    }
    *n = d->n_procs;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t h, unsigned int *n,
                                                  nvmlProcessInfo_v1_t *infos)
{
    count(__func__);
    return procs_common(h, n, infos, 1);
}

/* ---- PCIe ---- */

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t h, unsigned int *gen)
{
    count(__func__);
    NEED_DEV(h, d);
    if (!d->pcie_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    *gen = 5;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t h, unsigned int *width)
{
    count(__func__);
    NEED_DEV(h, d);
    if (!d->pcie_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    *width = 16;
    return NVML_SUCCESS;
}

/* ---- versioned entry points (absent from the legacy build) ---- */
#ifndef FAKE_NVML_LEGACY

nvmlReturn_t nvmlInit_v2(void)
{
    count(__func__);
    return init_common();
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
    count(__func__);
    NEED_INIT();
    *n = dev_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    count(__func__);
    NEED_INIT();
    if (index >= dev_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)(void *)&g_devs[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t h, nvmlPciInfo_t *pci)
{
    count(__func__);
    return pci_old(h, pci);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *pci)
{
    count(__func__);
    if (is_mode("no_v3"))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    NEED_DEV(h, d);
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", d->domain, d->bus,
             d->device);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", d->domain, d->bus, d->device);
    pci->domain = d->domain;
    pci->bus = d->bus;
    pci->device = d->device;
    pci->pciDeviceId = 0x233510de;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m)
{
    count(__func__);
    if (is_mode("no_v2_mem"))
        return NVML_ERROR_NOT_SUPPORTED;
    if (m->version != ((unsigned)sizeof(nvmlMemory_v2_t) | (2u << 24)))
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long t, r, f, a;
    nvmlReturn_t rc = mem_fill(h, &t, &r, &f, &a);
    if (rc != NVML_SUCCESS)
        return rc;
    m->total = t;
    m->reserved = r;
    m->free = f;
    m->used = a; /* _v2 splits reserved out */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *n,
                                                     nvmlProcessInfo_t *infos)
{
    count(__func__);
    if (is_mode("only_v1_procs"))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    return procs_common(h, n, infos, 0);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *n,
                                                     nvmlProcessInfo_t *infos)
{
    count(__func__);
    if (is_mode("no_v3") || is_mode("only_v1_procs"))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    return procs_common(h, n, infos, 0);
}

#endif
