/* probe/select.c - which device source a --device spec names, with the fallback to a simulated card. */
#include "probe/select.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comem/common.h"
#include "os/env.h"
#include "probe/cuda_view.h"
#include "probe/nvml.h"
#include "probe/sim.h"

int comem_devices_open(const char *spec, comem_device_source **out, char *note, size_t notelen)
{
    char why[256] = "";
    note[0] = '\0';
    if (!spec)
        spec = comem_env("COMEM_DEVICE");
    if (!spec || !*spec || !strcmp(spec, "auto")) {
        if (comem_nvml_open(out, why, sizeof why) == COMEM_OK)
            return COMEM_OK;
        int rc = comem_sim_open_source(COMEM_DEFAULT_SIM, out, note, notelen);
        if (rc == COMEM_OK)
            snprintf(note, notelen, "no GPU found (%s); using a simulated 24 GiB linux card", why);
        return rc;
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
