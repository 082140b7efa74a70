/*
 * client/request.h - a request and its reply, in two rooms:
 *
 *   pending.c  the records of requests waiting for replies (c->pending, under
 *              c->lock): begun, completed by the reply that names them,
 *              given up, taken by their waiter; and what a reply does when
 *              nobody waits any more (an add's id is still mapped, a late
 *              pin is given back).
 *   reader.c   THE READER ROLE (client/state.h draws it) in one place: reading
 *              frames and dispatching them (replies to their records, asks to
 *              the callback thread, late grants given back), and a request's
 *              wait: the caller leads (reads its own reply), sleeps on its
 *              record, or, on the service thread, pumps.
 *
 * The calls reach these through the call helper (client/call.h); the resync
 * and the service thread use them directly. For the files of src/client/ only.
 */
#ifndef COMEM_CLIENT_REQUEST_H
#define COMEM_CLIENT_REQUEST_H

#include "client/state.h"

/* The few reply bodies a caller waits for (the full comem_msg is 16 KiB: 16,440 bytes). */
typedef struct client_reply {
    uint16_t type; /* 0: the request was sent and its reply will not be awaited */
    union {
        comem_msg_reply reply;
        comem_msg_id id;
        comem_msg_admit_reply admit_reply;
        comem_msg_pressure_reply pressure_reply;
        comem_msg_pin_reply pin_reply;
        comem_msg_reserve_reply reserve_reply;
        comem_msg_release_reply release_reply;
    } u;
} client_reply;

typedef enum pend_kind {
    PEND_PLAIN = 0,
    PEND_HOLDER_ADD = 1, /* the service thread maps the id itself, waiter or not */
    PEND_ENTRY_ADD = 2,
    PEND_STATUS = 3, /* STATUS_REPLY chunks are reassembled into text */
    PEND_PIN = 4     /* a pin acquire: granted after its caller gave up, its bytes are given back */
} pend_kind;

/*
 * One request waiting for its reply. A record with `waiting` set belongs to
 * the thread that waits (it unlinks and frees it); a detached one (an add sent
 * from the service thread, or one whose caller timed out) is unlinked and
 * freed by the reader when the reply comes, or when the connection ends.
 */
struct client_pending {
    struct client_pending *next;
    uint32_t req;
    uint64_t gen;
    pend_kind kind;
    uint64_t obj;  /* the client id an add is for; a pin's holder (coordinator id) */
    uint64_t snap; /* ENTRY_ADD: the entry's seq when the frame was built; PIN: its bytes */
    bool waiting;
    bool done;
    bool acked; /* an ADMIT_QUEUED named it: the coordinator has it and will answer */
    int status; /* when done: COMEM_OK (reply holds the frame) or a failure */
    client_reply reply;
    char *text; /* PEND_STATUS */
    uint32_t text_total, text_got;
    bool text_started;
    pthread_cond_t cond;
};

/* A request being made: begun under the lock, finished without it. */
typedef struct client_req {
    uint64_t gen;
    uint32_t id;
    client_pending *p; /* NULL: fire and forget */
} client_req;

/* ---- pending.c: the records ---- */

/*
 * Under c->lock, with the link not down: starts a request on the current
 * connection. With await, the reply will be waited for; without it, only adds
 * keep a (detached) record so their ids still get mapped. COMEM_ENOMEM.
 */
int comem_req_begin(comem_client *c, client_req *r, pend_kind kind, uint64_t obj, uint64_t snap, bool await);

/*
 * Sends a begun request's frame (its request_id is set here). May be called
 * with c->lock held, for frames whose order against the state they carry
 * matters and that have no sequence number of their own (ACTIVITY). Returns
 * what comem_conn_send returns.
 */
int comem_req_send(comem_client *c, client_req *r, comem_msg *m);

/* Abandons a begun request that will not be sent or was not sent (under c->lock). */
void comem_req_abort(comem_client *c, client_req *r);

/*
 * Lock held, the waiter's reply came (r->p->done): unlinks and frees the
 * record; returns its status, with the reply body in *out and status text
 * in *text (either may be NULL).
 */
int comem_req_take(comem_client *c, client_req *r, client_reply *out, char **text);

/*
 * Lock held, the waiter stops waiting before its reply: an add's object is
 * forgotten and its record detached, so a late id finds nothing and is given
 * back; a pin's record is detached, so a late grant is given back; any other
 * record is freed, and a late reply matches nothing.
 */
void comem_req_give_up(comem_client *c, client_req *r);

/*
 * Lock held: a reply frame arrived; completes its request. *orphan_kind
 * (PEND_PLAIN when there is nothing to undo) and *orphan receive an add whose
 * object is gone (remove it at the coordinator), or a pin granted after its
 * caller gave up (*orphan the holder, *orphan_bytes the bytes to release).
 * Returns false when no request waits for it.
 */
bool comem_pending_complete(comem_client *c, const comem_msg *m, pend_kind *orphan_kind, uint64_t *orphan,
                            int64_t *orphan_bytes);

/* Lock held: every request fails with COMEM_ECLOSED (the connection ended). */
void comem_pending_fail_all(comem_client *c);

/* Frees every record (close, no thread running). */
void comem_pending_free_all(comem_client *c);

/* ---- reader.c: the reader role and the wait ---- */

/*
 * Without the lock: sends m (NULL: comem_req_send already did) and, for an
 * awaited request, waits up to timeout_ms (the service thread pumps frames instead of
 * sleeping). COMEM_OK with *out filled (out->type 0 when not awaited; *text
 * receives status text), COMEM_ECLOSED when the connection ended first,
 * COMEM_ETIMEDOUT (comem_req_give_up: an add's object is removed from the
 * mirror in the same critical section, so a late id is given back).
 */
int comem_req_finish(comem_client *c, client_req *r, comem_msg *m, int timeout_ms, client_reply *out, char **text);

/*
 * comem_req_finish for an ADMIT whose coordinator must show it is there: when
 * neither the reply nor its acknowledgement (ADMIT_QUEUED) has come within
 * ack_ms, COMEM_ETIMEDOUT with *unanswered true; once acknowledged, the wait
 * is the whole timeout_ms. ack_ms <= 0: no such bound.
 */
int comem_req_finish_acked(comem_client *c, client_req *r, comem_msg *m, int ack_ms, int timeout_ms, client_reply *out,
                           bool *unanswered);

/*
 * The service thread, as the reader: reads and dispatches frames until *done
 * (may be NULL) turns true, the wake-up fires (done NULL only), or the
 * deadline (CLOCK_MONOTONIC ns; < 0: none) passes. COMEM_OK, COMEM_ETIMEDOUT,
 * or the connection's failure (COMEM_EPROTO for a frame a coordinator must
 * not send): the caller then treats the connection as lost.
 */
int comem_reader_pump(comem_client *c, const bool *done, int64_t deadline_ns);

/*
 * WHERE THE SOCKET RESTS while nobody leads: in the callback thread's wait set
 * (c->cb, client/port.h) while that thread has nothing to answer, so the ask it
 * reads is answered where it was read; else in the service thread's (c->svc):
 * while a callback runs, while the service thread reads for its own requests
 * (the resync), and once the callback thread's read has failed; always the
 * service thread's where the socket cannot move (Windows). A wish changes
 * without the reader role; the role's holder moves the socket when it lets go
 * (c->rest, under read_lock; NULL while a leader reads or there is no socket).
 */

/* The callback thread: it idles (true: the socket may rest with it) or answers (false). */
void comem_reader_rest_with(comem_client *c, bool callback);

/* Moves the socket where it is wished, if the reader role is free now (else its holder does). */
void comem_reader_settle(comem_client *c);

/* Reader role held (or no thread yet): a new socket in c->fd starts resting where it is wished. */
void comem_reader_rest_new(comem_client *c);

/*
 * The callback thread, the socket resting with it and readable: reads and
 * dispatches what came (ASKs to its own queue). A failed read is left in
 * c->read_failed for the service thread, which it wakes, and the socket rests
 * with the service thread from then on.
 */
void comem_reader_idle(comem_client *c);

#endif
