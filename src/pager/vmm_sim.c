/*
 * pager/vmm_sim.c - the pager's VMM backend on the simulated card.
 *
 * A reservation is host address space without memory (os/vm.h). A commit
 * charges the simulated card (comem_sim_alloc, so other processes and the
 * coordinator see it, and a full card fails it with COMEM_ENOSPC like
 * cuMemCreate) and then opens the pages read-write; they read as zero, as
 * os/vm.h's pages do when never touched or dropped. An eviction drops the
 * pages, closes them again and gives the bytes back to the card. A kernel
 * never runs here, so sync has nothing to wait for. Granularity: 2 MiB, like
 * the CUDA VMM minimum on current GPUs. Commit failures can be scripted
 * (the inject op), for the simulator and the tests through the pager's seam
 * (pager_seam.h).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/log.h"
#include "comem/common.h"
#include "os/env.h"
#include "os/proc.h"
#include "os/vm.h"
#include "pager/vmm.h"
#include "probe/sim.h"

#define SIM_GRANULARITY (2 * COMEM_MIB)
#define SIM_DEFAULT_SPEC "sim:24GiB"

typedef struct vmm_sim {
    comem_vmm base;
    comem_sim *sim;
    int card;
    atomic_int inject_after;
    atomic_int inject_transient;
    atomic_int inject_oom;
    comem_device_reading reading; /* large: kept here, used under the pager lock */
} vmm_sim;

static vmm_sim *as_sim(comem_vmm *m) { return (vmm_sim *)m; }

static int sim_reserve(comem_vmm *m, int64_t size, uint64_t *va)
{
    (void)m;
    void *p = NULL;
    char why[128];
    if (comem_vm_reserve(size, &p, why, sizeof why) != COMEM_OK) {
        comem_warn("pager sim: cannot reserve %lld bytes of address space: %s", (long long)size, why);
        return COMEM_ENOMEM;
    }
    *va = (uint64_t)(uintptr_t)p;
    return COMEM_OK;
}

static void sim_unreserve(comem_vmm *m, uint64_t va, int64_t size)
{
    (void)m;
    char why[128];
    if (comem_vm_unreserve((void *)(uintptr_t)va, size, why, sizeof why) != COMEM_OK)
        comem_warn("pager sim: giving a reservation back failed: %s", why);
}

/* Takes one injected failure of this kind if any is pending. */
static bool take(atomic_int *pending)
{
    int n = atomic_load(pending);
    while (n > 0)
        if (atomic_compare_exchange_weak(pending, &n, n - 1))
            return true;
    return false;
}

static int sim_commit(comem_vmm *m, uint64_t va, int64_t size, uint64_t *handle)
{
    vmm_sim *s = as_sim(m);
    if (!take(&s->inject_after)) {
        if (take(&s->inject_transient))
            return COMEM_EBUSY;
        if (take(&s->inject_oom))
            return COMEM_ENOSPC;
    }
    int rc = comem_sim_alloc(s->sim, s->card, size);
    if (rc != COMEM_OK)
        return rc; /* COMEM_ENOSPC: the card is full */
    char why[128];
    if (comem_vm_open((void *)(uintptr_t)va, size, why, sizeof why) != COMEM_OK) {
        comem_warn("pager sim: cannot open a page: %s", why);
        comem_sim_free(s->sim, s->card, size);
        return COMEM_EIO;
    }
    *handle = 0;
    return COMEM_OK;
}

static void sim_evict(comem_vmm *m, uint64_t va, int64_t size, uint64_t handle)
{
    (void)handle;
    vmm_sim *s = as_sim(m);
    char why[128];
    if (comem_vm_drop((void *)(uintptr_t)va, size, why, sizeof why) != COMEM_OK)
        comem_warn("pager sim: dropping a page failed: %s", why);
    int rc = comem_sim_free(s->sim, s->card, size);
    if (rc != COMEM_OK)
        comem_warn("pager sim: giving %lld bytes back to the card failed: %s", (long long)size,
                   comem_status_str(rc));
}

static void sim_release(comem_vmm *m, int64_t size, uint64_t handle)
{
    (void)handle;
    vmm_sim *s = as_sim(m);
    int rc = comem_sim_free(s->sim, s->card, size);
    if (rc != COMEM_OK)
        comem_warn("pager sim: giving %lld kept bytes back to the card failed: %s", (long long)size,
                   comem_status_str(rc));
}

/* The kept pool: the pages are dropped and closed, the card keeps charging their bytes. */
static bool sim_unmap_keep(comem_vmm *m, uint64_t va, int64_t size, uint64_t handle)
{
    (void)m, (void)handle;
    char why[128];
    if (comem_vm_drop((void *)(uintptr_t)va, size, why, sizeof why) != COMEM_OK) {
        comem_warn("pager sim: dropping a page failed: %s; its bytes go back to the card", why);
        sim_release(m, size, handle);
        return false;
    }
    return true;
}

static int sim_remap(comem_vmm *m, uint64_t va, int64_t size, uint64_t handle)
{
    (void)m, (void)handle;
    char why[128];
    if (comem_vm_open((void *)(uintptr_t)va, size, why, sizeof why) != COMEM_OK) {
        comem_warn("pager sim: cannot open a page: %s", why);
        return COMEM_EIO;
    }
    return COMEM_OK;
}

static int sim_sync(comem_vmm *m)
{
    (void)m;
    return COMEM_OK; /* nothing runs on a simulated card */
}

static int sim_read_free(comem_vmm *m, int64_t *free_bytes, int64_t *capacity)
{
    vmm_sim *s = as_sim(m);
    int rc = comem_sim_read_local(s->sim, s->card, &s->reading);
    if (rc != COMEM_OK)
        return rc;
    *free_bytes = s->reading.free;
    *capacity = s->reading.total;
    return COMEM_OK;
}

static int sim_read_free_wide(comem_vmm *m, int64_t *free_bytes)
{
    vmm_sim *s = as_sim(m);
    int rc = comem_sim_read(s->sim, s->card, &s->reading); /* the NVML-style reading */
    if (rc == COMEM_OK)
        *free_bytes = s->reading.free;
    return rc;
}

static int sim_charged(comem_vmm *m, int64_t *bytes)
{
    vmm_sim *s = as_sim(m);
    int64_t context = 0;
    return comem_sim_usage(s->sim, s->card, (int32_t)comem_proc_id(), &context, bytes); /* this process's slot */
}

static int sim_write(comem_vmm *m, uint64_t va, const void *src, int64_t size)
{
    (void)m;
    memcpy((void *)(uintptr_t)va, src, (size_t)size);
    return COMEM_OK;
}

static int sim_read(comem_vmm *m, uint64_t va, void *dst, int64_t size)
{
    (void)m;
    memcpy(dst, (const void *)(uintptr_t)va, (size_t)size);
    return COMEM_OK;
}

/* Scripted commit failures (the seam's: pager_seam.h); sim_commit takes them. */
static void sim_inject(comem_vmm *m, int after, int transient, int oom)
{
    vmm_sim *s = as_sim(m);
    atomic_store(&s->inject_oom, oom);
    atomic_store(&s->inject_transient, transient);
    atomic_store(&s->inject_after, after);
}

static void sim_close(comem_vmm *m)
{
    vmm_sim *s = as_sim(m);
    comem_sim_close(s->sim);
    free(s);
}

static const comem_vmm_ops k_sim_ops = {
    .reserve = sim_reserve,
    .unreserve = sim_unreserve,
    .commit = sim_commit,
    .evict = sim_evict,
    .unmap_keep = sim_unmap_keep,
    .remap = sim_remap,
    .release = sim_release,
    .sync = sim_sync,
    .read_free = sim_read_free,
    .read_free_wide = sim_read_free_wide,
    .charged = sim_charged,
    .write = sim_write,
    .read = sim_read,
    .inject = sim_inject,
    .close = sim_close,
};

int comem_vmm_sim_open(int device, const char *sim_spec, comem_vmm **out)
{
    const char *text = sim_spec;
    if (!text) {
        const char *env = comem_env("COMEM_DEVICE");
        text = env && !strncmp(env, "sim", 3) ? env : SIM_DEFAULT_SPEC;
    }
    comem_sim_spec spec;
    char err[256];
    int rc = comem_sim_spec_parse(text, &spec, err, sizeof err);
    if (rc != COMEM_OK) {
        comem_warn("pager sim: bad card spec '%s': %s", text, err);
        return COMEM_EINVAL;
    }
    vmm_sim *s = calloc(1, sizeof *s);
    if (!s)
        return COMEM_ENOMEM;
    if ((rc = comem_sim_open(&spec, &s->sim)) != COMEM_OK) {
        comem_warn("pager sim: cannot open the card '%s': %s", text, comem_status_str(rc));
        free(s);
        return rc;
    }
    if (device >= comem_sim_cards(s->sim)) {
        comem_sim_close(s->sim);
        free(s);
        return COMEM_ENODEV;
    }
    /* As the CUDA backend retains the primary context at open, this process's context exists from
       now on: a device reading taken before the first commit already counts it. */
    if ((rc = comem_sim_touch(s->sim, device)) != COMEM_OK) {
        comem_sim_close(s->sim);
        free(s);
        return rc;
    }
    s->base = (comem_vmm){&k_sim_ops, "sim", SIM_GRANULARITY, ""};
    comem_device_reading r;
    if (comem_sim_read(s->sim, device, &r) == COMEM_OK)
        snprintf(s->base.uuid, sizeof s->base.uuid, "%s", r.uuid);
    s->card = device;
    atomic_init(&s->inject_after, 0);
    atomic_init(&s->inject_transient, 0);
    atomic_init(&s->inject_oom, 0);
    *out = &s->base;
    return COMEM_OK;
}
