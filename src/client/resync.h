/*
 * client/resync.h - the replay (client/resync.c): what the mirror holds that
 * the coordinator does not know, told with the calls' own builders. For the
 * service thread (client/service.c) only.
 */
#ifndef COMEM_CLIENT_RESYNC_H
#define COMEM_CLIENT_RESYNC_H

#include "client/state.h"

/*
 * Service thread, link up or syncing: tells the coordinator everything in the
 * mirror it does not know yet (holders, entries, residency, reports, busy
 * marks, pins), then marks the link up. COMEM_OK or the connection's failure.
 */
int comem_resync(comem_client *c);

#endif
