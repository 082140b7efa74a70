/*
 * client/answer.h - the callback thread (client/answer.c): it answers the queued
 * release asks one at a time and, while it has none, is the one that waits on the
 * socket, so the next ask is read where it is answered. For client.c, which starts
 * and stops it.
 */
#ifndef COMEM_CLIENT_ANSWER_H
#define COMEM_CLIENT_ANSWER_H

#include "client/state.h"

/* Starts the callback thread (its queue first: client/callbacks.h). */
int comem_answer_start(comem_client *c);
/* Stops it after it has answered every queued ask. Not from the callback thread. */
void comem_answer_stop(comem_client *c);
/* Frees its queue and wait set, once no thread of c runs. */
void comem_answer_free(comem_client *c);

#endif
