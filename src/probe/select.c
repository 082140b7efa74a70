/*
 * probe/select.c - which device source a --device spec names; "auto" without a GPU opens no card.
 *
 * A machine without a GPU has no card to coordinate: auto then opens the empty
 * source (no devices, named "none"), never a simulated card a user did not ask
 * for, so every layer above sees zero cards and says so (the coordinator
 * manages host RAM alone, a client's local decisions refuse card ordinals with
 * COMEM_ENODEV, comem devices prints a note). A simulated card is opened only
 * when a spec names one.
 */
#include "probe/select.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comem/common.h"
#include "os/env.h"
#include "probe/cuda_view.h"
#include "probe/nvml.h"
#include "probe/sim.h"

/* ---- the empty source: no cards (static: it holds nothing to free) ---- */

static int none_count(comem_device_source *src, int *n)
{
    (void)src;
    *n = 0;
    return COMEM_OK;
}

static int none_read(comem_device_source *src, int index, comem_device_reading *out)
{
    (void)src, (void)index, (void)out;
    return COMEM_ENODEV;
}

static void none_close(comem_device_source *src) { (void)src; }

static const comem_device_source_ops k_none_ops = {none_count, none_read, none_close};
static comem_device_source k_none = {&k_none_ops, COMEM_NO_CARD_SOURCE, NULL};

bool comem_devices_none(const comem_device_source *src) { return src == &k_none; }

int comem_devices_open(const char *spec, comem_device_source **out, char *note, size_t notelen)
{
    char why[256] = "";
    note[0] = '\0';
    if (!spec)
        spec = comem_env("COMEM_DEVICE");
    if (!spec || !*spec || !strcmp(spec, "auto")) {
        if (comem_nvml_open(out, why, sizeof why) == COMEM_OK)
            return COMEM_OK;
        *out = &k_none;
        snprintf(note, notelen, "no GPU found (%s): no card to manage", why);
        return COMEM_OK;
    }
    if (!strcmp(spec, "nvml")) {
        int rc = comem_nvml_open(out, why, sizeof why);
        if (rc != COMEM_OK)
            snprintf(note, notelen, "%s", why);
        return rc;
    }
    if (!strcmp(spec, "cuda")) {
        int rc = comem_cuda_view_open(false, out);
        if (rc != COMEM_OK)
            snprintf(note, notelen, "the CUDA driver is not usable: %s", comem_status_str(rc));
        return rc;
    }
    if (!strncmp(spec, "sim", 3))
        return comem_sim_open_source(spec, out, note, notelen);
    snprintf(note, notelen, "unknown device '%s' (auto, nvml, cuda, or sim[:SIZE][:NxSIZE][:linux|wddm]...)", spec);
    return COMEM_EINVAL;
}
