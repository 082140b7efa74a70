/* probe/simcard.c - the public face of the simulated card (include/comem/simcard.h) over probe/sim.h. */
#include "comem/simcard.h"

#include <stdlib.h>
#include <string.h>

#include "os/env.h"
#include "probe/select.h"
#include "probe/sim.h"

/* The public handle is the sim itself: the type is only renamed at the edge. */
static comem_sim *sim_of(comem_simcard *s) { return (comem_sim *)s; }

int comem_simcard_open(const char *spec, comem_simcard **out)
{
    if (!out)
        return COMEM_EINVAL;
    *out = NULL;
    if (!spec) {
        const char *env = comem_env("COMEM_DEVICE");
        spec = env && strncmp(env, "sim", 3) == 0 ? env : COMEM_DEFAULT_SIM;
    }
    comem_sim_spec sp;
    int rc = comem_sim_spec_parse(spec, &sp, NULL, 0);
    if (rc != COMEM_OK)
        return rc;
    comem_sim *sim;
    if ((rc = comem_sim_open(&sp, &sim)) != COMEM_OK)
        return rc;
    *out = (comem_simcard *)sim;
    return COMEM_OK;
}

void comem_simcard_close(comem_simcard *s)
{
    if (s)
        comem_sim_close(sim_of(s));
}

int comem_simcard_count(comem_simcard *s) { return s ? comem_sim_cards(sim_of(s)) : 0; }

const char *comem_simcard_path(comem_simcard *s) { return s ? comem_sim_path(sim_of(s)) : ""; }

int comem_simcard_alloc(comem_simcard *s, int card, int64_t bytes)
{
    return s ? comem_sim_alloc(sim_of(s), card, bytes) : COMEM_EINVAL;
}

int comem_simcard_free(comem_simcard *s, int card, int64_t bytes)
{
    return s ? comem_sim_free(sim_of(s), card, bytes) : COMEM_EINVAL;
}

int comem_simcard_touch(comem_simcard *s, int card) { return s ? comem_sim_touch(sim_of(s), card) : COMEM_EINVAL; }

int comem_simcard_release_self(comem_simcard *s) { return s ? comem_sim_release_self(sim_of(s)) : COMEM_EINVAL; }

int comem_simcard_read(comem_simcard *s, int card, int local, int64_t *total, int64_t *free_bytes, int64_t *used,
                       int64_t *reserved, int *scope)
{
    if (!s)
        return COMEM_EINVAL;
    comem_device_reading *r = malloc(sizeof *r); /* 4 KiB of process list: not on a caller's stack */
    if (!r)
        return COMEM_ENOMEM;
    int rc = local ? comem_sim_read_local(sim_of(s), card, r) : comem_sim_read(sim_of(s), card, r);
    if (rc == COMEM_OK) {
        if (total)
            *total = r->total;
        if (free_bytes)
            *free_bytes = r->free;
        if (used)
            *used = r->used;
        if (reserved)
            *reserved = r->reserved;
        if (scope)
            *scope = (int)r->scope;
    }
    free(r);
    return rc;
}

int comem_simcard_usage(comem_simcard *s, int card, int32_t pid, int64_t *context, int64_t *allocated)
{
    int64_t ctx = 0, alloc = 0;
    int rc = s ? comem_sim_usage(sim_of(s), card, pid, &ctx, &alloc) : COMEM_EINVAL;
    if (rc == COMEM_OK) {
        if (context)
            *context = ctx;
        if (allocated)
            *allocated = alloc;
    }
    return rc;
}
