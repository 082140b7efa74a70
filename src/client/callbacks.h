/*
 * client/callbacks.h - the callback thread and its queue (client/callbacks.c):
 * release asks, answered off the reader's thread, one at a time, each by
 * client/ask.h. The reader hands every ASK here; nothing here waits for a
 * reply. For the reader and client.c (which starts and stops the thread).
 */
#ifndef COMEM_CLIENT_CALLBACKS_H
#define COMEM_CLIENT_CALLBACKS_H

#include "client/state.h"

/* Starts the callback thread. */
int comem_callbacks_start(comem_client *c);
/* Stops it after it has answered every queued ask. Not from the callback thread. */
void comem_callbacks_stop(comem_client *c);
/* Queues a copy of an ask for the callback thread (from the reader); a full or stopped queue answers busy at once. */
void comem_callbacks_queue(comem_client *c, const comem_msg_ask *ask);

#endif
