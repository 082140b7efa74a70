/*
 * client/callbacks.c - the queue of release asks the callback thread answers (client/answer.c).
 *
 * Whoever reads the socket must never wait on anything a caller holds: it delivers the replies
 * callers are waiting for. A release callback, though, is application code that may take the
 * application's own locks, and the thread holding such a lock may be waiting for a reply. So asks
 * are queued here and answered on the callback thread, one at a time and in arrival order. A
 * queue that grows past CALLBACK_QUEUE_MAX (a holder far behind) answers new asks busy at once.
 * Each ask queued wakes the callback thread's wait set (c->cb, client/port.h).
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "client/ask.h"
#include "client/callbacks.h"

#define CALLBACK_QUEUE_MAX 256

typedef struct ask_node {
    struct ask_node *next;
    comem_msg_ask ask;
} ask_node;

static void signal_thread(comem_client *c)
{
    if (c->cb) /* none when it could not be made: then no thread started either */
        comem_waits_wake(c->cb);
}

int comem_callbacks_init(comem_client *c)
{
    pthread_mutex_init(&c->cb_lock, NULL);
    c->cb_ready = true;
    return comem_waits_open(&c->cb);
}

void comem_callbacks_queue(comem_client *c, const comem_msg_ask *ask)
{
    ask_node *n = NULL;
    pthread_mutex_lock(&c->cb_lock);
    bool room = c->cb_started && !c->cb_stop && c->cb_len < CALLBACK_QUEUE_MAX;
    pthread_mutex_unlock(&c->cb_lock);
    if (room)
        n = malloc(sizeof *n);
    if (!n) {
        comem_ask_handle(c, ask, true); /* busy at once: never a silent drop */
        return;
    }
    memcpy(&n->ask, ask, sizeof *ask);
    n->next = NULL;
    pthread_mutex_lock(&c->cb_lock);
    if (!c->cb_started || c->cb_stop || c->cb_len >= CALLBACK_QUEUE_MAX) {
        /* stopped (or filled) while the node was allocated: the thread may have drained and gone, so
           appending now would leave the ask unanswered */
        pthread_mutex_unlock(&c->cb_lock);
        free(n);
        comem_ask_handle(c, ask, true);
        return;
    }
    if (c->cb_tail)
        c->cb_tail->next = n;
    else
        c->cb_head = n;
    c->cb_tail = n;
    c->cb_len++;
    pthread_mutex_unlock(&c->cb_lock);
    if (!comem_on_callback_thread(c))
        signal_thread(c); /* the callback thread read it itself: it looks at the queue next */
}

int comem_callbacks_pop(comem_client *c, comem_msg_ask *ask)
{
    pthread_mutex_lock(&c->cb_lock);
    ask_node *n = c->cb_head;
    int rc = n ? 1 : c->cb_stop ? -1 : 0;
    if (n) {
        c->cb_head = n->next;
        if (!c->cb_head)
            c->cb_tail = NULL;
        c->cb_len--;
    }
    pthread_mutex_unlock(&c->cb_lock);
    if (n) {
        memcpy(ask, &n->ask, sizeof *ask);
        free(n);
    }
    return rc;
}

void comem_callbacks_close(comem_client *c)
{
    if (!c->cb_ready)
        return;
    pthread_mutex_lock(&c->cb_lock);
    c->cb_stop = true;
    pthread_mutex_unlock(&c->cb_lock);
    signal_thread(c);
}

void comem_callbacks_free(comem_client *c)
{
    if (!c->cb_ready)
        return;
    while (c->cb_head) { /* none: the thread pops every ask before it ends */
        ask_node *n = c->cb_head;
        c->cb_head = n->next;
        free(n);
    }
    comem_waits_close(c->cb);
    c->cb = NULL;
    pthread_mutex_destroy(&c->cb_lock);
    c->cb_ready = false;
}
