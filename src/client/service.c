/*
 * client/service.c - the client's service thread: it reads every frame,
 * hands replies to their waiters, answers release asks, and when the
 * coordinator goes away it fails what was pending, reconnects with backoff
 * (10 ms doubling to 1 s; every second while it never answered) and has the
 * resync replay the mirror.
 *
 * Only this thread reads the socket and only it closes it; writers share the
 * socket under the write lock (client/conn.c). Release asks are handed to the
 * callback thread (client/callbacks.c), so neither a caller's thread nor this
 * one ever blocks on a release; API calls made from here never wait for
 * replies (they could only come through this thread).
 */
#include <errno.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <string.h>
#include <unistd.h>

#include "base/hops.h"
#include "base/log.h"
#include "client/client_internal.h"

#define RETRY_MIN_MS 10
#define RETRY_MAX_MS 1000
#define RETRY_REFUSED_MS 10000 /* a refusal (bad token) will not change soon */

static _Thread_local const comem_client *tl_service;

bool comem_on_service_thread(const comem_client *c) { return c && tl_service == c; }

/* A reply nobody waits for: its caller timed out. A late grant is given back at once. */
static void late_reply(comem_client *c, const comem_msg *m, uint64_t gen)
{
    if (m->type == COMEM_MSG_ADMIT_REPLY && m->u.admit_reply.granted) {
        comem_info("an admission was granted after its caller gave up; giving grant %llu back",
                   (unsigned long long)m->u.admit_reply.grant_id);
        comem_msg g;
        memset(&g, 0, sizeof g);
        g.type = COMEM_MSG_GRANT_DONE;
        g.request_id = comem_client_next_req(c);
        g.u.grant_done.grant_id = m->u.admit_reply.grant_id;
        g.u.grant_done.entry_id = 0;
        (void)comem_conn_send(c, gen, &g);
        return;
    }
    comem_debug("dropping a late %s (request %u)", comem_wire_type_name(m->type), m->request_id);
}

/*
 * An add answered after its object was removed, or a pin granted after its caller
 * gave up: take it back out of the ledger.
 */
static void give_back(comem_client *c, pend_kind kind, uint64_t coord_id, int64_t bytes, uint64_t gen)
{
    comem_msg g;
    memset(&g, 0, sizeof g);
    if (kind == PEND_PIN) {
        comem_info("pinned RAM was granted after its caller gave up; giving %lld bytes back", (long long)bytes);
        g.type = COMEM_MSG_PIN_RELEASE;
        g.request_id = comem_client_next_req(c);
        g.u.pin.holder_id = coord_id;
        g.u.pin.bytes = bytes;
        (void)comem_conn_send(c, gen, &g);
        return;
    }
    g.type = kind == PEND_HOLDER_ADD ? COMEM_MSG_HOLDER_REMOVE : COMEM_MSG_ENTRY_REMOVE;
    g.request_id = comem_client_next_req(c);
    g.u.id.id = coord_id;
    (void)comem_conn_send(c, gen, &g);
}

/* Dispatches the frame in c->in. COMEM_EPROTO for a frame a coordinator must not send. */
static int dispatch(comem_client *c)
{
    const comem_msg *m = c->in;
    if (m->type == COMEM_MSG_ASK) {
        comem_hop(COMEM_HOP_ASK_READ);
        comem_callbacks_queue(c, &m->u.ask); /* run off this thread: replies must keep flowing */
        return COMEM_OK;
    }
    if (m->type < COMEM_MSG_REPLY ||
        (m->type > COMEM_MSG_STATUS_REPLY && m->type != COMEM_MSG_RELEASE_REPLY && m->type != COMEM_MSG_ADMIT_QUEUED)) {
        comem_error("the coordinator sent a %s frame, which only clients send; reconnecting",
                    comem_wire_type_name(m->type));
        return COMEM_EPROTO;
    }
    pend_kind orphan_kind = PEND_PLAIN;
    uint64_t orphan = 0;
    int64_t orphan_bytes = 0;
    pthread_mutex_lock(&c->lock);
    bool matched = comem_pending_complete(c, m, &orphan_kind, &orphan, &orphan_bytes);
    uint64_t gen = c->gen;
    pthread_mutex_unlock(&c->lock);
    if (!matched)
        late_reply(c, m, gen);
    if (orphan_kind != PEND_PLAIN)
        give_back(c, orphan_kind, orphan, orphan_bytes, gen);
    return COMEM_OK;
}

int comem_service_dispatch_all(comem_client *c)
{
    int rc;
    while ((rc = comem_conn_next(c)) == 1)
        if ((rc = dispatch(c)) != COMEM_OK)
            return rc;
    return rc < 0 ? rc : COMEM_OK;
}

/* *done, read where it is written (a leading caller may complete this thread's requests). */
static bool is_done(comem_client *c, const bool *done)
{
    if (!done)
        return false;
    pthread_mutex_lock(&c->lock);
    bool d = *done;
    pthread_mutex_unlock(&c->lock);
    return d;
}

/*
 * Waits for the socket (unless a caller leads: then it is out of the set) or
 * the wake-up eventfd. 1 readable, 2 woken, 0 timeout, COMEM_EIO.
 */
static int wait_service(comem_client *c, int timeout_ms)
{
    struct epoll_event ev[2];
    int n = epoll_wait(c->epfd, ev, 2, timeout_ms);
    if (n < 0)
        return errno == EINTR ? 0 : COMEM_EIO;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (ev[i].data.fd == c->wake_fd) {
            uint64_t v;
            ssize_t r = read(c->wake_fd, &v, sizeof v);
            (void)r;
            return 2;
        }
        rc = 1;
    }
    return rc;
}

int comem_service_pump_until(comem_client *c, const bool *done, int64_t deadline_ns)
{
    for (;;) {
        pthread_mutex_lock(&c->read_lock);
        int rc = comem_service_dispatch_all(c);
        pthread_mutex_unlock(&c->read_lock);
        if (rc != COMEM_OK)
            return rc;
        if (is_done(c, done))
            return COMEM_OK;
        if (atomic_load(&c->stopping))
            return COMEM_ECLOSED;
        int wait = -1;
        if (deadline_ns >= 0 && (wait = comem_ms_until(deadline_ns)) == 0)
            return COMEM_ETIMEDOUT;
        rc = wait_service(c, wait);
        if (rc < 0)
            return rc;
        if (rc == 2 && !done)
            return COMEM_OK; /* woken: the loop looks at stopping and need_sync */
        if (rc == 1) {
            pthread_mutex_lock(&c->read_lock);
            rc = comem_conn_fill(c); /* 0: a leading caller read it first */
            pthread_mutex_unlock(&c->read_lock);
            if (rc < 0)
                return rc;
        }
    }
}

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
    c->wfd = -1; /* no writer can reach the socket once this is seen */
    pthread_mutex_unlock(&c->write_lock);
    pthread_mutex_lock(&c->read_lock); /* a leading caller finishes its read first */
    close(c->fd); /* leaves the epoll set with it */
    c->fd = -1;
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
    int fd = comem_conn_connect(c->path);
    if (fd < 0)
        return fd;
    uint64_t session = 0;
    bool refused = false;
    char why[COMEM_WIRE_TEXT_MAX];
    pthread_mutex_lock(&c->read_lock); /* the hello reads into the buffer; no caller leads now */
    int rc = comem_conn_hello(c, fd, &session, &refused, why, sizeof why);
    pthread_mutex_unlock(&c->read_lock);
    if (rc != COMEM_OK) {
        close(fd);
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
    pthread_mutex_lock(&c->write_lock);
    c->wfd = fd;
    c->wgen = gen;
    pthread_mutex_unlock(&c->write_lock);
    pthread_mutex_lock(&c->read_lock);
    c->fd = fd;
    c->fd_gen = gen;
    comem_conn_watch(c, fd, true);
    pthread_mutex_unlock(&c->read_lock);
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
    tl_service = c;
    while (!atomic_load(&c->stopping)) {
        if (c->fd < 0) {
            if (try_connect(c) == COMEM_OK)
                continue;
            /* The attempt may have consumed close's wake-up (its HELLO waits on the same eventfd):
               look at the flag before sleeping. stopping is set before the wake is written, so a
               close after this check still finds the eventfd readable. */
            if (atomic_load(&c->stopping))
                break;
            /* Sleep, but wake at once for close. A refusal set a longer wait. */
            int wait = c->retry_ms;
            if (comem_conn_read(c, -1, wait) < 0)
                usleep((useconds_t)wait * 1000); /* poll failed: still never spin */
            c->retry_ms = wait >= RETRY_MAX_MS / 2 ? RETRY_MAX_MS : wait * 2;
            continue;
        }
        pthread_mutex_lock(&c->lock);
        bool sync = c->need_sync;
        pthread_mutex_unlock(&c->lock);
        int rc = sync ? comem_resync(c) : comem_service_pump_until(c, NULL, -1);
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
    c->thread_started = false;
}
