/*
 * client/local.h - decisions without a coordinator (client/local.c), from
 * this process's own device reading and ComfyUI's own arithmetic. A call
 * comes here when the call helper says COMEM_CALL_LOCAL (client/call.h). For
 * the files of src/client/ only.
 */
#ifndef COMEM_CLIENT_LOCAL_H
#define COMEM_CLIENT_LOCAL_H

#include "client/state.h"

/* The reserve local decisions use: reserve_base when >= 0, else ComfyUI's default (COMEM_RESERVE_DEFAULT). */
int64_t comem_local_reserve_bytes(const comem_client *c);

/*
 * Local admission of weights (with inference and cast_forward) from this
 * process's device reading: COMEM_OK with out->grant, COMEM_ENOSPC with
 * out->short_by, or the reading's failure. *out (zeroed by the caller)
 * receives the decision's figures (need, free before and after);
 * out->decided stays 0 when the device could not be read.
 */
int comem_local_admit(comem_client *c, int device, int64_t weights, int64_t inference, int64_t cast_forward,
                      comem_admission *out);

/* Local reserve and pager headroom (either may be NULL). */
void comem_local_reserve(comem_client *c, int64_t *reserve, int64_t *pager_headroom);

/* A small JSON object saying the client decides locally (malloc'd). */
int comem_local_status(comem_client *c, char **json);

/* Closes the device source. */
void comem_local_close(comem_client *c);

#endif
