/*
 * client/service.h - the service thread (client/service.c), which reads while
 * no caller leads, reconnects with backoff and, after every HELLO, has the
 * resync (client/resync.h) tell the coordinator what the mirror holds that it
 * does not know. For client.c, which starts and stops the thread.
 */
#ifndef COMEM_CLIENT_SERVICE_H
#define COMEM_CLIENT_SERVICE_H

#include "client/state.h"

/* Starts the service thread. */
int comem_service_start(comem_client *c);

/* Stops it (close). */
void comem_service_stop(comem_client *c);

#endif
