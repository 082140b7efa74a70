/*
 * client/admit.h - the one admission call the library keeps for itself
 * (client/admit.c): the preload's, which must not wait on a coordinator that
 * does not answer. Outside src/client/ it is reached through
 * client/client_internal.h.
 */
#ifndef COMEM_CLIENT_ADMIT_H
#define COMEM_CLIENT_ADMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "comem/comem.h"

/*
 * comem_admit of `weights` for holder (no working memory, no keep list) for a caller that must not wait
 * on a coordinator that does not answer (the preload, tools/preload/): when it neither answers nor
 * acknowledges the ADMIT (ADMIT_QUEUED: it is asking other processes) within ack_ms, COMEM_ETIMEDOUT
 * with *unanswered true; acknowledged, it waits up to timeout_ms (< 0: the client's default).
 */
int comem_admit_acked(comem_client *c, int device, uint64_t holder, int64_t weights, int ack_ms, int timeout_ms,
                      uint64_t *grant, int64_t *short_by, bool *unanswered);

#endif
