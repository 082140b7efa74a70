/*
 * client/service.c - the client's service thread: it reads every frame,
 * hands replies to their waiters, answers release asks, and when the
 * coordinator goes away it fails what was pending, reconnects with backoff
 * (10 ms doubling to 1 s; every second while it never answered) and has the
 * resync replay the mirror.
 *
 * It reads while the socket rests with it (client/request.h: while the callback
 * thread answers an ask, while it reads for its own requests, after the callback
 * thread's read failed; the reading and dispatching are client/reader.c's);
 * only it closes the socket; writers share the socket under the write lock
 * (client/conn.c). Release asks are answered on the callback thread
 * (client/answer.c), so neither a caller's thread nor this one ever blocks on a
 * release; API calls made from here never wait for replies (they could only
 * come through this thread).
 */
#include "base/clock.h"
#include "base/log.h"
#include "client/conn.h"
#include "client/request.h"
#include "client/resync.h"
#include "client/service.h"
#include "client/shared.h"

#define RETRY_MIN_MS 10
#define RETRY_MAX_MS 1000
#define RETRY_REFUSED_MS 10000 /* a refusal (bad token) will not change soon */

/* The connection ended: fail what waits on it and decide locally until the next one. */
static void lost(comem_client *c, int why)
{
    comem_fast_detach(c);
    pthread_mutex_lock(&c->lock);
    bool was = c->link != LINK_DOWN;
    c->link = LINK_DOWN;
    comem_pending_fail_all(c);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_lock(&c->write_lock);
    c->wsock = NULL; /* no writer can reach the socket once this is seen */
    pthread_mutex_unlock(&c->write_lock);
    pthread_mutex_lock(&c->read_lock); /* a leading caller finishes its read first */
    comem_port_close(c->sock); /* leaves the wait sets with it */
    c->sock = NULL;
    atomic_store(&c->rest, NULL);
    atomic_store(&c->read_failed, 0); /* a failure the callback thread met was this socket's */
    c->fd_gen = 0;
    c->rlen = c->rpos = 0;
    pthread_mutex_unlock(&c->read_lock);
    c->retry_ms = RETRY_MIN_MS;
    if (was && !atomic_load(&c->stopping))
        comem_warn("lost the coordinator at %s (%s); deciding locally until it answers again", c->path,
                   comem_status_str(why));
}

/* One attempt: connect, HELLO, resync. COMEM_OK when the link is up. */
static int try_connect(comem_client *c)
{
    client_sock *s = NULL;
    char foreign[COMEM_CLIENT_PATH_MAX + 512] = "";
    int rc = comem_port_connect(c->path, c->svc, &s, foreign, sizeof foreign);
    if (rc == COMEM_EPERM && foreign[0]) { /* another user listens there now: a refusal, said once */
        pthread_mutex_lock(&c->lock);
        bool logged = c->refused_logged;
        c->refused_logged = true;
        pthread_mutex_unlock(&c->lock);
        if (!logged)
            comem_warn("%s; deciding locally", foreign);
        c->retry_ms = RETRY_REFUSED_MS;
    }
    if (rc != COMEM_OK)
        return rc;
    uint64_t session = 0;
    bool refused = false;
    char why[COMEM_WIRE_TEXT_MAX];
    pthread_mutex_lock(&c->read_lock); /* the hello reads into the buffer; no caller leads now */
    rc = comem_conn_hello(c, s, &session, &refused, why, sizeof why);
    pthread_mutex_unlock(&c->read_lock);
    if (rc != COMEM_OK) {
        comem_port_close(s);
        if (refused) {
            pthread_mutex_lock(&c->lock);
            bool logged = c->refused_logged;
            c->refused_logged = true;
            pthread_mutex_unlock(&c->lock);
            if (!logged)
                comem_warn("the coordinator at %s refused this process: %s (%s); deciding locally", c->path,
                           comem_status_str(rc), why);
            c->retry_ms = RETRY_REFUSED_MS;
        }
        return rc;
    }
    pthread_mutex_lock(&c->lock);
    c->gen++;
    c->link = LINK_SYNC;
    c->session_id = session;
    c->refused_logged = false;
    /* A new session knows nothing of this process yet. */
    c->synced_sess_busy = false;
    c->synced_sess_pins = 0;
    uint64_t gen = c->gen;
    pthread_mutex_unlock(&c->lock);
    bool blocks = comem_port_adopt(s, COMEM_CONN_WAIT_SLICE_MS);
    pthread_mutex_lock(&c->write_lock);
    c->wsock = s;
    c->wgen = gen;
    pthread_mutex_unlock(&c->write_lock);
    pthread_mutex_lock(&c->read_lock);
    c->sock = s;
    c->fd_gen = gen;
    c->fd_blocks = blocks;
    comem_reader_rest_new(c);
    pthread_mutex_unlock(&c->read_lock);
    comem_reader_settle(c); /* a wish made meanwhile (the callback thread began or ended an answer) */
    comem_fast_attach(c, gen, session);
    comem_client_view_attach(c);
    rc = comem_resync(c);
    if (rc != COMEM_OK) {
        lost(c, rc);
        return rc;
    }
    c->retry_ms = RETRY_MIN_MS;
    return COMEM_OK;
}

static void *service_main(void *arg)
{
    comem_client *c = arg;
    comem_client_thread_mark(c, CLIENT_THREAD_SERVICE);
    atomic_fetch_add(&c->threads_running, 1);
    while (!atomic_load(&c->stopping)) {
        if (!c->sock) {
            if (try_connect(c) == COMEM_OK)
                continue;
            /* The attempt may have consumed close's wake-up (its HELLO waits on the same wait set):
               look at the flag before sleeping. stopping is set before the wake is written, so a
               close after this check still finds its wake-up pending. */
            if (atomic_load(&c->stopping))
                break;
            /* Sleep, but wake at once for close. A refusal set a longer wait. */
            int wait = c->retry_ms;
            if (comem_conn_read(c, NULL, wait) < 0)
                comem_sleep_ms(wait); /* the wait failed: still never spin */
            c->retry_ms = wait >= RETRY_MAX_MS / 2 ? RETRY_MAX_MS : wait * 2;
            continue;
        }
        int failed = atomic_load(&c->read_failed);
        if (failed) { /* the callback thread's read of the socket failed (client/answer.c) */
            lost(c, failed);
            continue;
        }
        pthread_mutex_lock(&c->lock);
        bool sync = c->need_sync;
        pthread_mutex_unlock(&c->lock);
        int rc = sync ? comem_resync(c) : comem_reader_pump(c, NULL, -1);
        if (rc != COMEM_OK && !atomic_load(&c->stopping))
            lost(c, rc);
    }
    return NULL;
}

int comem_service_start(comem_client *c)
{
    if (pthread_create(&c->thread, NULL, service_main, c) != 0)
        return COMEM_ENOMEM;
    c->thread_started = true;
    return COMEM_OK;
}

void comem_service_stop(comem_client *c)
{
    if (!c->thread_started)
        return;
    atomic_store(&c->stopping, true);
    comem_client_wake(c);
    pthread_join(c->thread, NULL);
    comem_client_thread_unmark(c, CLIENT_THREAD_SERVICE);
    c->thread_started = false;
}
