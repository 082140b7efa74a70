/*
 * coord/input.c - what comes in: connections accepted and closed, and their frames handed on.
 *
 * Connections are accepted within their bounds and closed at the HELLO
 * deadline or at their end; every frame they send is decoded and handed to
 * its handler.
 *
 * The loop (server.c) calls in here; this file calls the handlers
 * (handlers.c) and answers through conn.c. Input is read once per wake-up
 * into the connection's frame buffer; every whole frame in it is decoded and
 * handled in order, and the first frame of a connection must be HELLO. A
 * malformed frame is answered with an error and its connection closed; no
 * other connection notices.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

/* A malformed frame: answer with an error and close; other clients are untouched. */
static void protocol_error(comem_coord_srv *s, conn *c, uint32_t request_id, const char *why)
{
    comem_warn("malformed frame from pid %d (%s); closing its connection", (int)c->pid, why);
    coord_reply(s, c, request_id, COMEM_EPROTO, why);
    c->closing = true;
}

/*
 * Who may hold a connection. A connection that has not said HELLO holds a
 * slot and 64 KiB for nothing, so such connections are bounded: at most
 * COORD_PEER_UNAUTH per process and COORD_MAX_UNAUTH in all, the oldest
 * making room for a new one, and none for longer than the HELLO deadline.
 * A process holds at most COORD_PEER_CONNS connections. The table has a slot
 * for every session there may be and for every connection without HELLO, so
 * a newcomer always gets a slot to say HELLO in; whether it gets a session is
 * decided then (below).
 *
 * Who may hold a session: the ledger's fair share (ledger.h), for sessions.
 * Of the COORD_MAX_SESSIONS the ledger holds, hosts and workers fill all but
 * COORD_TOOL_SESSIONS, tools (comem status) all but the last, which is where a
 * newcomer's HELLO is checked (token, name) before anyone's session is closed
 * for it. Every process is sure of COORD_PEER_SURE sessions; the rest are
 * shared first come, up to COORD_PEER_CONNS a process. A HELLO that finds no
 * room, from a process holding fewer than its sure share, gets a place made:
 * a tool's, the oldest tool session's (a tool holds one for a look); else
 * the newest session's of the process holding the most, when that one holds
 * more than its sure share. The session closed is told why. Any other HELLO
 * that finds no room is refused, naming the bound and whose. So a new process
 * always gets in while any process holds more than its sure share, and
 * comem status costs no host or worker its session while another tool holds
 * one (hosts and workers leave COORD_TOOL_SESSIONS - 1 to tools).
 */
_Static_assert(COORD_MAX_SESSIONS == COMEM_LEDGER_MAX_SESSIONS, "the ledger holds every session the table does");
_Static_assert(COORD_PEER_SURE < COORD_PEER_CONNS && COORD_TOOL_SESSIONS >= 2,
               "a share beyond the sure one; room for a tool's look beside the newcomer's HELLO");

/* Refuses c with one REPLY and closes it at the end of this loop turn. */
static void refuse(comem_coord_srv *s, conn *c, int status, const char *why)
{
    coord_reply(s, c, 0, status, why);
    c->closing = true;
}

/* The oldest connection without HELLO (of pid, or of anyone when pid < 0), not already closing. */
static conn *oldest_unauth(comem_coord_srv *s, int32_t pid)
{
    conn *old = NULL;
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        conn *c = s->conns[i];
        if (c && !c->session && !c->closing && (pid < 0 || c->pid == pid) &&
            (!old || c->accepted_ns < old->accepted_ns))
            old = c;
    }
    return old;
}

/* Counts open connections: without HELLO (of pid, or all when pid < 0), and all of pid. */
static void count_conns(comem_coord_srv *s, int32_t pid, int *unauth, int *of_pid)
{
    *unauth = *of_pid = 0;
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        conn *c = s->conns[i];
        if (!c || c->closing)
            continue;
        if (!c->session && (pid < 0 || c->pid == pid))
            (*unauth)++;
        if (pid >= 0 && c->pid == pid)
            (*of_pid)++;
    }
}

/*
 * While more than limit connections (of pid; of anyone when pid < 0) have not
 * said HELLO, closes the oldest, to make room. A connection accepted in the
 * same burst may have its HELLO waiting unread: each candidate is read first,
 * and one that turns out to be a session is kept (and no longer counts). True
 * when one was closed.
 */
static bool reclaim_unauth(comem_coord_srv *s, int32_t pid, int limit, const char *why)
{
    for (;;) {
        int unauth, of_pid;
        count_conns(s, pid, &unauth, &of_pid);
        conn *old = unauth > limit ? oldest_unauth(s, pid) : NULL;
        if (!old)
            return false;
        coord_conn_readable(s, old);
        if (old->session || old->closing)
            continue; /* it said HELLO after all (or went): not silent */
        refuse(s, old, COMEM_ETIMEDOUT, why);
        return true;
    }
}

/* The REPLY that refuses a connection before it has a slot, into s->frame: its length, or < 0. */
static int refusal(comem_coord_srv *s, const char *why)
{
    comem_msg m = {.type = COMEM_MSG_REPLY, .request_id = 0};
    m.u.reply.status = COMEM_EBUSY;
    snprintf(m.u.reply.message, sizeof m.u.reply.message, "%s", why);
    return comem_wire_encode(&m, s->frame, COMEM_WIRE_MAX_FRAME);
}

/* Tells a connection that gets no slot why, in one frame written at once (never waited on), and closes it. */
static void refuse_unslotted(comem_coord_srv *s, comem_stream *st, int32_t pid, const char *why)
{
    int n = refusal(s, why);
    int rc = n > 0 ? comem_stream_write(st, s->frame, (size_t)n, 0) : n;
    if (rc != COMEM_OK)
        comem_debug("could not tell pid %d it was refused: %s", (int)pid, comem_status_str(rc));
    comem_stream_close(st);
}

/* Out of descriptors: one connection is accepted on the listener's spare only to be refused. */
static void refuse_on_spare(comem_coord_srv *s)
{
    int n = refusal(s, "refused: the coordinator is out of file descriptors");
    if (n > 0 && comem_listener_refuse_one(s->listener, s->frame, (size_t)n) == COMEM_OK)
        comem_warn("out of file descriptors; refusing a connection");
}

static int free_slot(comem_coord_srv *s)
{
    for (int i = 0; i < COORD_MAX_CONNS; i++)
        if (!s->conns[i])
            return i;
    return -1;
}

void coord_accept(comem_coord_srv *s)
{
    for (;;) {
        int slot = free_slot(s);
        if (slot < 0) {
            /* Full. A connection that never said HELLO gives its slot up (it is freed at the
               end of this turn, and the newcomer accepted on the next); else the newcomer is
               told the coordinator is full. */
            if (reclaim_unauth(s, -1, 0, "closed: its slot went to a newer connection (no HELLO)"))
                return;
            for (int i = 0; i < COORD_MAX_CONNS; i++)
                if (s->conns[i] && s->conns[i]->closing)
                    return; /* a slot frees at the end of this turn: accept on the next */
        }
        comem_stream *st = NULL;
        comem_peer peer;
        int rc = comem_accept(s->listener, 0, &st, &peer);
        if (rc != COMEM_OK) {
            if (rc == COMEM_ENOMEM &&
                !reclaim_unauth(s, -1, 0, "closed: its descriptor went to a newer connection (no HELLO)"))
                refuse_on_spare(s);
            return; /* COMEM_ETIMEDOUT: no more; other errors: try again on the next event */
        }
        int32_t pid = (int32_t)peer.pid;
        if (slot < 0) { /* sessions and connections without HELLO fill the table less than this: be safe */
            comem_warn("refusing a connection from pid %d: %d connections", (int)pid, COORD_MAX_CONNS);
            refuse_unslotted(s, st, pid, "refused: the coordinator is full (its connections)");
            continue;
        }
        conn *c = calloc(1, sizeof *c);
        if (c)
            c->in = malloc(COMEM_WIRE_MAX_FRAME);
        if (!c || !c->in) {
            comem_error("refusing a connection from pid %d: no memory", (int)pid);
            if (c)
                free(c);
            refuse_unslotted(s, st, pid, "refused: the coordinator is out of memory");
            continue;
        }
        c->stream = st;
        c->pid = pid;
        c->uid = (uint32_t)strtoul(peer.user, NULL, 10); /* a uid, as text (os/stream.h) */
        c->slot = slot;
        c->accepted_ns = comem_now_ns();
        coord_devmap_init(s, c);
        c->tag = (ep_tag){EP_CONN, c};
        c->pid_tag = (ep_tag){EP_PIDFD, c};
        s->conns[slot] = c;
        if (comem_loop_add_stream(s->loop, st, &c->tag) != COMEM_OK) {
            comem_error("refusing a connection from pid %d: the loop cannot watch it", (int)pid);
            s->conns[slot] = NULL;
            free(c->in);
            free(c);
            refuse_unslotted(s, st, pid, "refused: the coordinator is out of memory");
            continue;
        }
        if (!peer.same_user) {
            /* Another user may never read or change this user's ledger. */
            char me[192];
            comem_proc_self_user(me, sizeof me);
            comem_warn("refused pid %d: uid %s is not the coordinator's uid %s", (int)pid, peer.user, me);
            char why[sizeof me + 48]; /* the reply keeps what fits its text */
            snprintf(why, sizeof why, "refused: this coordinator serves uid %s only", me);
            refuse(s, c, COMEM_EPERM, why);
            continue;
        }
        if (pid > 0) { /* 0: a peer in another pid namespace; only the totals bound those */
            int unauth, of_pid;
            count_conns(s, pid, &unauth, &of_pid);
            if (of_pid > COORD_PEER_CONNS) {
                comem_warn("refused pid %d: it holds %d connections already", (int)pid, of_pid - 1);
                refuse(s, c, COMEM_EBUSY, "refused: this process holds " COORD_STR(COORD_PEER_CONNS) " connections");
                continue;
            }
            /* the same process keeps opening and not saying HELLO */
            reclaim_unauth(s, pid, COORD_PEER_UNAUTH, "closed: this process opened more connections without HELLO");
        }
        reclaim_unauth(s, -1, COORD_MAX_UNAUTH, "closed: its slot went to a newer connection (no HELLO)");
    }
}

void coord_hello_deadlines(comem_coord_srv *s, int64_t now)
{
    int64_t limit = (int64_t)s->cfg.hello_timeout_ms * 1000000;
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        conn *c = s->conns[i];
        if (c && !c->session && !c->closing && now - c->accepted_ns > limit) {
            comem_info("pid %d said no HELLO within %d ms; closing its connection", (int)c->pid,
                       s->cfg.hello_timeout_ms);
            refuse(s, c, COMEM_ETIMEDOUT, "closed: no HELLO in time");
        }
    }
}

/* Sessions a HELLO of role may find: hosts and workers leave the tools theirs, tools the newcomer's. */
static int session_room(uint8_t role)
{
    return role == COMEM_ROLE_TOOL ? COORD_MAX_SESSIONS - 1 : COORD_MAX_SESSIONS - COORD_TOOL_SESSIONS;
}

/* Whether the sessions held (the ledger's count) leave no room for a HELLO of role. */
static bool sessions_full(comem_coord_srv *s, uint8_t role)
{
    if ((int)s->ledger.sessions.used < session_room(role))
        return false;
    /* The sessions of closing connections end at this turn's end anyway: their room is the newcomer's now. */
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        conn *o = s->conns[i];
        if (o && o->closing && o->session)
            coord_session_end(s, o, "connection closed");
    }
    return (int)s->ledger.sessions.used >= session_room(role);
}

static int cmp_pid(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The process holding the most sessions (*most, or -1 when none) and how many (*n); pid 0, peers of
   another pid namespace, counts as one process. */
static void most_sessions(comem_coord_srv *s, int32_t *most, int *n)
{
    int32_t pids[COORD_MAX_CONNS];
    int k = 0;
    for (int i = 0; i < COORD_MAX_CONNS; i++)
        if (s->conns[i] && s->conns[i]->session && !s->conns[i]->closing)
            pids[k++] = s->conns[i]->pid;
    qsort(pids, (size_t)k, sizeof *pids, cmp_pid);
    *most = -1;
    *n = 0;
    for (int i = 0, j; i < k; i = j) {
        for (j = i; j < k && pids[j] == pids[i]; j++)
            ;
        if (j - i > *n) {
            *most = pids[i];
            *n = j - i;
        }
    }
}

/* The sessions of pid, and its newest (NULL when none); not counting closing connections. */
static int sessions_of(comem_coord_srv *s, int32_t pid, conn **newest)
{
    int n = 0;
    *newest = NULL;
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        conn *o = s->conns[i];
        if (o && o->session && !o->closing && o->pid == pid) {
            n++;
            if (!*newest || o->accepted_ns >= (*newest)->accepted_ns)
                *newest = o;
        }
    }
    return n;
}

/* The oldest session of a tool, or NULL. */
static conn *oldest_tool(comem_coord_srv *s)
{
    conn *old = NULL;
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        conn *o = s->conns[i];
        if (!o || !o->session || o->closing)
            continue;
        const ledger_session *ss = comem_ledger_session(&s->ledger, o->session);
        if (ss && ss->role == COMEM_ROLE_TOOL && (!old || o->accepted_ns < old->accepted_ns))
            old = o;
    }
    return old;
}

static const char *session_name(comem_coord_srv *s, const conn *c)
{
    const ledger_session *ss = c && c->session ? comem_ledger_session(&s->ledger, c->session) : NULL;
    return ss ? ss->name : "";
}

/*
 * HELLO (the first frame, m) gets a session where there is room for its role, or where room is made
 * for it ("Who may hold a session", above); else it is refused with COMEM_EBUSY, naming whose.
 */
static void hello(comem_coord_srv *s, conn *c, comem_msg *m)
{
    uint8_t role = m->u.hello.role;
    conn *victim = NULL, *newest;
    int32_t most = -1;
    int n = 0, mine = 0;
    bool tool_place = false;
    if (sessions_full(s, role)) {
        mine = sessions_of(s, c->pid, &newest);
        most_sessions(s, &most, &n);
        if (mine < COORD_PEER_SURE && role == COMEM_ROLE_TOOL)
            victim = oldest_tool(s); /* a look costs no host or worker its session */
        tool_place = victim != NULL;
        if (mine < COORD_PEER_SURE && !victim && n > COORD_PEER_SURE)
            sessions_of(s, most, &victim);
        if (!victim) {
            conn *whose;
            sessions_of(s, most, &whose);
            char why[2 * COMEM_WIRE_TEXT_MAX]; /* the reply keeps what fits its text */
            snprintf(why, sizeof why,
                     "refused: the coordinator is full (%d sessions, %d sure a process, this one has %d; "
                     "most: '%s' pid %d, %d)",
                     session_room(role), COORD_PEER_SURE, mine, session_name(s, whose), (int)most, n);
            comem_warn("refused pid %d: the session table is full and it holds %d session(s)", (int)c->pid, mine);
            coord_reply(s, c, m->request_id, COMEM_EBUSY, why);
            c->closing = true;
            return;
        }
    }
    coord_handle(s, c, m);
    if (!victim || !c->session)
        return; /* refused for itself (a bad token, a bad name): nobody made room */
    char why[2 * COMEM_WIRE_TEXT_MAX];
    if (!tool_place)
        snprintf(why, sizeof why,
                 "closed: the coordinator is full; this process held the most (%d) and pid %d ('%s') is sure of one",
                 n, (int)c->pid, session_name(s, c));
    else
        snprintf(why, sizeof why, "closed: the coordinator is full and a newer tool (pid %d) took this tool's place",
                 (int)c->pid);
    comem_warn("session %llx ('%s', pid %d) closed: the table is full and pid %d ('%s') is sure of a session",
               (unsigned long long)victim->session, session_name(s, victim), (int)victim->pid, (int)c->pid,
               session_name(s, c));
    coord_reply(s, victim, 0, COMEM_EBUSY, why);
    coord_session_end(s, victim, "closed to make room");
    victim->closing = true;
}

/* Parses and handles every whole frame in the input buffer. */
static void consume(comem_coord_srv *s, conn *c)
{
    size_t off = 0;
    while (!c->closing && c->in_len - off >= COMEM_WIRE_HEADER_SIZE) {
        comem_wire_header h;
        if (comem_wire_decode_header(c->in + off, c->in_len - off, &h) != COMEM_OK) {
            protocol_error(s, c, 0, "bad frame header");
            break;
        }
        if (c->in_len - off < COMEM_WIRE_HEADER_SIZE + (size_t)h.length)
            break; /* wait for the rest */
        if (comem_wire_decode(&h, c->in + off + COMEM_WIRE_HEADER_SIZE, &s->msg) != COMEM_OK) {
            protocol_error(s, c, h.request_id, "malformed payload");
            break;
        }
        off += COMEM_WIRE_HEADER_SIZE + h.length;
        if (c->goodbye) { /* the session ended when it said so: nothing after that is served */
            protocol_error(s, c, h.request_id, "a request after GOODBYE");
            break;
        }
        if (!c->session && s->msg.type != COMEM_MSG_HELLO) {
            protocol_error(s, c, h.request_id, "the first frame must be HELLO");
            break;
        }
        if (!c->session)
            hello(s, c, &s->msg);
        else
            coord_handle(s, c, &s->msg);
    }
    if (off) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
}

/*
 * Reads once: the loop is level-triggered, so if more is waiting it wakes us again.
 * (Reading on until nothing is left would cost one more syscall on every request.)
 */
void coord_conn_readable(comem_coord_srv *s, conn *c)
{
    if (c->in_len == COMEM_WIRE_MAX_FRAME) { /* cannot happen with a valid header; be safe */
        protocol_error(s, c, 0, "frame too large");
        return;
    }
    int n = comem_loop_read(s->loop, c->stream, c->in + c->in_len, COMEM_WIRE_MAX_FRAME - c->in_len);
    if (n > 0) {
        c->in_len += (size_t)n;
        consume(s, c);
        return;
    }
    if (n == COMEM_ETIMEDOUT)
        return; /* nothing yet */
    coord_drop_output(s, c); /* the end, or an error: nobody reads what is queued */
}

void coord_conn_close(comem_coord_srv *s, conn *c)
{
    if (c->session)
        coord_session_end(s, c, "connection closed");
    comem_loop_remove_stream(s->loop, c->stream);
    comem_stream_close(c->stream);
    for (int i = 0; i < c->n_pass; i++)
        comem_shm_token_drop(c->pass[i]); /* never sent */
    if (c->watch) {
        comem_loop_remove_process(s->loop, c->watch);
        comem_proc_watch_close(c->watch);
    }
    s->conns[c->slot] = NULL;
    s->alone_since_ns = 0; /* --exit-idle counts from the next tick: this connection was here until now */
    s->out_total -= c->out_len;
    free(c->in);
    free(c->out);
    free(c);
}
