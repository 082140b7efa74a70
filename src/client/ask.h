/*
 * client/ask.h - the answer to one release ask (client/ask.c): the busy rule,
 * the holder's callback with this client's ids, and the RECEIPT. For the
 * callback thread (client/callbacks.c) only.
 */
#ifndef COMEM_CLIENT_ASK_H
#define COMEM_CLIENT_ASK_H

#include "client/state.h"

/*
 * Answers one ask. Runs on the callback thread; with busy_now it skips the
 * callback and answers busy (the queue was full, or the thread stopped),
 * which is safe from the reader's thread.
 */
void comem_ask_handle(comem_client *c, const comem_msg_ask *ask, bool busy_now);

#endif
