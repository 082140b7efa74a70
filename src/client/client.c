/*
 * client/client.c - a client's life: open (find the socket, connect or start
 * an embedded coordinator, say HELLO, else work locally and say so once),
 * the state calls, and close (stop the service thread, free, stop the
 * embedded coordinator this client started; in a forked child, only let go
 * of the child's descriptors: client/fork.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/name.h"
#include "base/rundir.h"
#include "base/token.h"
#include "client/answer.h"
#include "client/conn.h"
#include "client/frames.h"
#include "client/local.h"
#include "client/request.h"
#include "client/service.h"
#include "client/shared.h"

_Static_assert(COMEM_TOKEN_MAX == COMEM_WIRE_TEXT_MAX - 1, "a token is the HELLO's text<128>");

/* How long open waits for an embedded coordinator it started (or lost a race to) to answer. */
#define EMBED_CONNECT_MS 2000
#define BUSY_CONNECT_MS 1000 /* how long a full accept queue is retried at open */

/* Frees everything open allocated; the service thread is not running. */
static void client_free(comem_client *c)
{
    comem_answer_free(c);
    comem_pending_free_all(c);
    comem_port_close(c->sock);
    if (c->coord)
        comem_coord_stop(c->coord);
    comem_local_close(c);
    comem_fast_free(c);
    comem_client_view_free(c);
    comem_conn_drop_area(c);
    comem_tab_free(c);
    free(c->rbuf);
    free(c->in);
    free(c->out);
    free(c->receipt);
    pthread_mutex_destroy(&c->dev_lock);
    comem_waits_close(c->svc);
    pthread_mutex_destroy(&c->read_lock);
    pthread_mutex_destroy(&c->write_lock);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static comem_client *client_alloc(void)
{
    comem_client *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->write_lock, NULL);
    pthread_mutex_init(&c->dev_lock, NULL);
    c->opener = comem_client_this_process();
    atomic_init(&c->fork_told, false);
    atomic_init(&c->timeout_ms, COMEM_CLIENT_DEFAULT_TIMEOUT_MS);
    atomic_init(&c->next_req, 1u);
    atomic_init(&c->stopping, false);
    atomic_init(&c->threads_running, 0);
    atomic_init(&c->svc_self.marked, false); /* each thread marks itself as it starts (client/state.c) */
    atomic_init(&c->cb_self.marked, false);
    atomic_init(&c->rest, NULL); /* c->cb: the callback thread's, made when it starts (client/answer.c) */
    atomic_init(&c->cb_idle, false);
    atomic_init(&c->service_reads, false);
    atomic_init(&c->read_failed, 0);
    pthread_mutex_init(&c->read_lock, NULL);
    int made = comem_waits_open(&c->svc);
    c->rbuf = malloc(COMEM_WIRE_MAX_FRAME);
    c->in = malloc(sizeof *c->in);
    c->out = malloc(sizeof *c->out);
    c->receipt = malloc(sizeof *c->receipt);
    if (made != COMEM_OK || !c->rbuf || !c->in || !c->out || !c->receipt) {
        client_free(c);
        return NULL;
    }
    return c;
}

/*
 * Connects (*s), starting an embedded coordinator first when asked and nobody answers. Another user's
 * listener at the path is COMEM_EPERM and why: no coordinator of this user's can take the path then.
 */
static int connect_or_embed(comem_client *c, client_sock **s, char *why, size_t whylen)
{
    int rc = comem_port_connect(c->path, c->svc, s, why, whylen);
    /* A full queue (EBUSY) is a coordinator draining a burst of connections: it accepts in
       microseconds, and evicts silent ones to make room, so a real client retries briefly. */
    for (int waited = 0; rc == COMEM_EBUSY && waited < BUSY_CONNECT_MS; waited += 5) {
        comem_sleep_ms(5);
        rc = comem_port_connect(c->path, c->svc, s, why, whylen);
    }
    if (rc == COMEM_OK || rc == COMEM_EPERM || !(c->flags & COMEM_OPEN_EMBED))
        return rc;
    comem_coord *coord = NULL;
    rc = comem_coord_start(c->path, NULL, &coord);
    if (rc == COMEM_OK) {
        c->coord = coord;
    } else if (rc != COMEM_EEXIST) {
        /* EEXIST: another process won the race to start one; connect to it. */
        comem_warn("cannot start a coordinator in this process at %s: %s", c->path, comem_status_str(rc));
        return rc;
    }
    for (int waited = 0; waited < EMBED_CONNECT_MS; waited += 10) {
        if ((rc = comem_port_connect(c->path, c->svc, s, why, whylen)) == COMEM_OK)
            return rc;
        comem_sleep_ms(10);
    }
    return rc;
}

int comem_client_open(const char *socket_path, int role, const char *name, int64_t reserve_base, unsigned flags,
                      comem_client **out)
{
    if (!out)
        return COMEM_EINVAL;
    *out = NULL;
    if (!name)
        name = "";
    if (role < COMEM_CLIENT_HOST || role > COMEM_CLIENT_TOOL || strlen(name) >= COMEM_WIRE_NAME_MAX || comem_name_check(name, NULL, 0) != COMEM_OK ||
        (flags & ~(COMEM_OPEN_EMBED | COMEM_OPEN_NO_LOCAL)))
        return COMEM_EINVAL;
    char token[COMEM_TOKEN_MAX + 1], err[160];
    if (comem_token_from_env(token, sizeof token, err, sizeof err) != COMEM_OK) {
        comem_error("%s", err); /* the coordinator refuses the same value with the same line */
        return COMEM_EINVAL;
    }
    comem_client *c = client_alloc();
    if (!c)
        return COMEM_ENOMEM;
    c->role = role;
    snprintf(c->name, sizeof c->name, "%s", name);
    snprintf(c->token, sizeof c->token, "%s", token);
    c->reserve_base = reserve_base < 0 ? -1 : reserve_base;
    c->flags = flags;
    int rc = comem_socket_resolve(socket_path, c->path, sizeof c->path);
    if (rc != COMEM_OK) {
        comem_error("no usable socket path for the coordinator: %s", comem_status_str(rc));
        client_free(c);
        return rc;
    }

    bool up = false, refused = false;
    client_sock *s = NULL;
    char foreign[COMEM_CLIENT_PATH_MAX + 512] = "";
    rc = connect_or_embed(c, &s, foreign, sizeof foreign);
    if (rc == COMEM_EPERM && foreign[0]) {
        /* Another user listens at the path; nothing was sent to it. Said as a refusal is, once. */
        if (flags & COMEM_OPEN_NO_LOCAL) {
            comem_error("%s", foreign);
            client_free(c);
            return rc;
        }
        comem_warn("%s; deciding locally", foreign);
        refused = c->refused_logged = true;
    } else if (rc == COMEM_OK) {
        uint64_t session = 0;
        char why[COMEM_WIRE_TEXT_MAX];
        rc = comem_conn_hello(c, s, &session, &refused, why, sizeof why);
        if (rc == COMEM_OK) {
            up = true;
            c->fd_blocks = comem_port_adopt(s, COMEM_CONN_WAIT_SLICE_MS);
            c->sock = c->wsock = s;
            c->gen = c->wgen = c->fd_gen = 1;
            comem_reader_rest_new(c);
            c->link = LINK_UP;
            c->session_id = session;
            c->ever_connected = true;
            comem_debug("connected to the coordinator at %s (session %llu)", c->path, (unsigned long long)session);
            comem_fast_attach(c, c->gen, session);
            comem_client_view_attach(c);
        } else {
            comem_port_close(s);
            if (refused && (flags & COMEM_OPEN_NO_LOCAL)) {
                comem_error("the coordinator at %s refused this process: %s (%s)", c->path, comem_status_str(rc), why);
                client_free(c);
                return rc;
            }
            if (refused) {
                comem_warn("the coordinator at %s refused this process: %s (%s); deciding locally", c->path,
                           comem_status_str(rc), why);
                c->refused_logged = true;
            }
        }
    }
    if (!up && (flags & COMEM_OPEN_NO_LOCAL)) {
        client_free(c);
        return COMEM_ECLOSED; /* comem_probe says why */
    }
    if (!up && !refused)
        comem_info("no coordinator at %s; deciding locally", c->path);
    /* After a loss the service thread retries fast; a process that started alone checks every
       second; a refused one rarely (a bad token stays bad until the coordinator changes). */
    c->retry_ms = up ? 10 : refused ? 10000 : 1000;
    if ((rc = comem_answer_start(c)) != COMEM_OK || (rc = comem_service_start(c)) != COMEM_OK) {
        comem_answer_stop(c);
        client_free(c);
        return rc;
    }
    /* Returned with both threads at work, not still starting: a process that forks right after open
       then copies no thread in the middle of its start (in a sanitizer's runtime, that left an
       allocator's lock held in the child, and the child's own threads hung at their start). */
    for (int waited = 0; atomic_load(&c->threads_running) < 2 && waited < 2000; waited++)
        comem_sleep_ms(1);
    *out = c;
    return COMEM_OK;
}

/*
 * A forked child's copy: its threads and the session are the parent's. Only the
 * child's own wait sets (their descriptors) go; nothing is said to
 * the coordinator (a GOODBYE would end the parent's session), no thread is
 * joined, no lock is taken (one the parent's threads held at the fork stays
 * held here), and the copied memory stays. The socket is not closed: whether
 * the number in c->sock is still the connection's cannot be told without the
 * parent's locks; it closes at exec (close-on-exec) or exit and carries
 * nothing meanwhile.
 */
static void close_forked_copy(comem_client *c)
{
    comem_debug("closing a client opened by pid %d in forked pid %d: the parent's session is left alone",
                (int)c->opener, (int)comem_client_this_process());
    comem_waits_close_forked(c->svc);
    comem_waits_close_forked(c->cb);
}

void comem_client_close(comem_client *c)
{
    if (!c)
        return;
    if (c->opener != comem_client_this_process()) {
        close_forked_copy(c);
        return;
    }
    if (comem_on_service_thread(c) || comem_on_callback_thread(c)) {
        /* Joining a thread from itself would never return. */
        comem_error("comem_client_close called from a release callback; ignored");
        return;
    }
    /* Say this end is on purpose, so the coordinator does not count it a death. */
    pthread_mutex_lock(&c->lock);
    bool up = c->link == LINK_UP;
    uint64_t gen = c->gen;
    pthread_mutex_unlock(&c->lock);
    if (up) {
        comem_msg m;
        (void)comem_conn_send(c, gen, comem_frame_bare(&m, COMEM_MSG_GOODBYE));
    }
    comem_answer_stop(c); /* first, while the service thread still delivers its replies */
    comem_service_stop(c);
    client_free(c);
}

int comem_client_connected(comem_client *c)
{
    if (comem_client_owned(c) != COMEM_OK)
        return 0;
    pthread_mutex_lock(&c->lock);
    int up = c->link == LINK_UP;
    pthread_mutex_unlock(&c->lock);
    return up;
}

void comem_client_set_timeout(comem_client *c, int timeout_ms)
{
    if (comem_client_owned(c) == COMEM_OK)
        atomic_store(&c->timeout_ms, timeout_ms >= 0 ? timeout_ms : COMEM_CLIENT_DEFAULT_TIMEOUT_MS);
}
