/*
 * client/callbacks.h - the queue of release asks (client/callbacks.c) that the
 * callback thread (client/answer.c) answers, one at a time, each by
 * client/ask.h. Whoever reads the socket queues every ASK here; nothing here
 * waits for a reply. For the reader, the callback thread and client.c.
 */
#ifndef COMEM_CLIENT_CALLBACKS_H
#define COMEM_CLIENT_CALLBACKS_H

#include "client/state.h"

/* Makes the queue and the callback thread's wait set (c->cb): COMEM_OK, COMEM_ENOMEM, COMEM_EIO. */
int comem_callbacks_init(comem_client *c);
/* Queues a copy of an ask (from the reader); a full or stopped queue answers busy at once. */
void comem_callbacks_queue(comem_client *c, const comem_msg_ask *ask);
/* The callback thread: the next ask into *ask (1), none now (0), or stopping with none left (-1). */
int comem_callbacks_pop(comem_client *c, comem_msg_ask *ask);
/* No more asks are queued (they are answered busy); what is queued is still popped. */
void comem_callbacks_close(comem_client *c);
/* Frees the queue (the thread is gone). */
void comem_callbacks_free(comem_client *c);

#endif
