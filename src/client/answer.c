/*
 * client/answer.c - the callback thread: it answers release asks, one at a time and in arrival
 * order (client/ask.c), from the queue whoever reads the socket fills (client/callbacks.c).
 *
 * While it has nothing to answer it also waits on the socket itself (the reader role's resting
 * place, client/reader.c): an ASK that comes then is read, queued and answered on this one thread,
 * with no wake-up of a second thread between the reading and the answering (on the H200 host that
 * hand-off cost 16-35 us of an admission's release path: docs/measurements.md, issue 24). While it
 * answers, the socket rests with the service thread, so replies keep flowing to callers that wait,
 * whatever the callback does and however long it takes.
 */
#include <pthread.h>

#include "base/log.h"
#include "client/answer.h"
#include "client/ask.h"
#include "client/callbacks.h"
#include "client/request.h"

/* Waits for an ask queued, stopping, or (while the socket rests here) bytes on it, which it reads. */
static void wait_idle(comem_client *c)
{
    if (comem_waits_wait(c->cb, -1) == 1)
        comem_reader_idle(c); /* ASKs it reads are queued: the loop answers them next */
}

static void *answer_main(void *arg)
{
    comem_client *c = arg;
    comem_client_thread_mark(c, CLIENT_THREAD_CALLBACKS);
    atomic_fetch_add(&c->threads_running, 1);
    for (;;) {
        comem_msg_ask ask;
        int got = comem_callbacks_pop(c, &ask);
        if (got < 0)
            break; /* stopping, and nothing left to answer */
        if (got == 1) {
            comem_reader_rest_with(c, false); /* the service thread reads while the callback runs */
            comem_ask_handle(c, &ask, false);
            continue;
        }
        comem_reader_rest_with(c, true); /* nothing to answer: the socket rests here */
        wait_idle(c);
    }
    comem_reader_rest_with(c, false);
    return NULL;
}

int comem_answer_start(comem_client *c)
{
    int rc = comem_callbacks_init(c);
    if (rc != COMEM_OK)
        return rc;
    pthread_mutex_lock(&c->cb_lock);
    c->cb_started = pthread_create(&c->cb_thread, NULL, answer_main, c) == 0;
    pthread_mutex_unlock(&c->cb_lock);
    return c->cb_started ? COMEM_OK : COMEM_ENOMEM;
}

void comem_answer_stop(comem_client *c)
{
    if (!c->cb_ready)
        return;
    comem_callbacks_close(c);
    if (c->cb_started) {
        pthread_join(c->cb_thread, NULL); /* answers what was queued first: each ask gets its receipt */
        comem_client_thread_unmark(c, CLIENT_THREAD_CALLBACKS);
        pthread_mutex_lock(&c->cb_lock);
        c->cb_started = false; /* asks read from now on are answered busy at once */
        pthread_mutex_unlock(&c->cb_lock);
    }
    /* The queue and the thread's wait set stay until the client is freed: the service thread, still
       running, may read an ask (answered busy) and look at where the socket rests. */
}

void comem_answer_free(comem_client *c)
{
    comem_callbacks_free(c);
}
