/*
 * client/callbacks.c - the thread that runs release callbacks.
 *
 * The service thread reads every frame and must never wait on anything a
 * caller holds: it delivers the replies callers are waiting for. A release
 * callback, though, is application code that may take the application's own
 * locks, and the thread holding such a lock may be waiting for a reply. So
 * asks are queued here and run on this thread, one at a time and in arrival
 * order, while the service thread keeps delivering replies; calls made from a
 * callback may therefore wait like any other call. A queue that grows past
 * CALLBACK_QUEUE_MAX (a holder far behind) answers new asks busy at once.
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

static void *callback_main(void *arg)
{
    comem_client *c = arg;
    comem_client_thread_mark(c, CLIENT_THREAD_CALLBACKS);
    pthread_mutex_lock(&c->cb_lock);
    for (;;) {
        while (!c->cb_head && !c->cb_stop)
            pthread_cond_wait(&c->cb_cond, &c->cb_lock);
        if (!c->cb_head)
            break; /* stopping, and nothing left to answer */
        ask_node *n = c->cb_head;
        c->cb_head = n->next;
        if (!c->cb_head)
            c->cb_tail = NULL;
        c->cb_len--;
        pthread_mutex_unlock(&c->cb_lock);
        comem_ask_handle(c, &n->ask, false);
        free(n);
        pthread_mutex_lock(&c->cb_lock);
    }
    pthread_mutex_unlock(&c->cb_lock);
    return NULL;
}

int comem_callbacks_start(comem_client *c)
{
    pthread_mutex_init(&c->cb_lock, NULL);
    pthread_cond_init(&c->cb_cond, NULL);
    c->cb_ready = true;
    if (pthread_create(&c->cb_thread, NULL, callback_main, c) != 0)
        return COMEM_ENOMEM;
    c->cb_started = true;
    return COMEM_OK;
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
    pthread_cond_signal(&c->cb_cond);
    pthread_mutex_unlock(&c->cb_lock);
}

void comem_callbacks_stop(comem_client *c)
{
    if (!c->cb_ready)
        return;
    if (c->cb_started) {
        pthread_mutex_lock(&c->cb_lock);
        c->cb_stop = true;
        pthread_cond_signal(&c->cb_cond);
        pthread_mutex_unlock(&c->cb_lock);
        pthread_join(c->cb_thread, NULL); /* runs what was queued first: each ask gets its receipt */
        c->cb_started = false;
    }
    pthread_cond_destroy(&c->cb_cond);
    pthread_mutex_destroy(&c->cb_lock);
    c->cb_ready = false;
}
