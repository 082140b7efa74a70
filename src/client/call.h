/*
 * client/call.h - THE CALL HELPER: the one skeleton of every public call that
 * tells or asks the coordinator (client/call.c). A call checks its arguments,
 * builds its frame with one builder (client/frames.h), and hands it here; the
 * route, the request's start, the send, the wait and the reply's status are
 * written once, below. Two shapes:
 *
 *   A DECISION waits for figures (admission, pressure, a release, the reserve,
 *   the status text, a pin):
 *
 *       rc = comem_call_decide(c, &call);
 *
 *   under the lock: call.build (may read the mirror; NULL when call.m is built
 *   already), the route (no coordinator: COMEM_CALL_LOCAL, or COMEM_ECLOSED
 *   under COMEM_OPEN_NO_LOCAL; on the service thread: COMEM_EBUSY), the
 *   request's start; without it: the send, the wait, and the reply's type.
 *   COMEM_CALL_LOCAL is not a status: the caller decides locally (local.h).
 *
 *   AN UPDATE tells the coordinator what the mirror now holds (registrations,
 *   removals, censuses, reports, busy marks, the device map, pins given back);
 *   the mirror changes in the same critical section that starts the request:
 *
 *       lock; change the mirror;
 *       if (the record is live) comem_call_begin(c, &call, comem_frame_...(&m, ...));
 *       unlock;
 *       return comem_call_update(c, &call);     (comem_call_add for an add)
 *
 *   A lost connection is success for an update (the mirror changed; the
 *   resync replays it), and an unsent one too; an error reply is the
 *   coordinator's word, logged once with call.what and kept as the reason.
 *
 * For the public calls' files (register.c, admit.c, calls.c) only.
 */
#ifndef COMEM_CLIENT_CALL_H
#define COMEM_CLIENT_CALL_H

#include "client/request.h"

/* comem_call_decide: no coordinator to ask now, decide locally (positive: not a status). */
#define COMEM_CALL_LOCAL 1

typedef struct client_call client_call;
/* A decision's frame, built under c->lock before the route: COMEM_OK, a status, or COMEM_CALL_LOCAL. */
typedef int (*client_build_fn)(comem_client *c, client_call *call);

struct client_call {
    /* what the call sets (a designated initializer: the rest is 0) */
    comem_msg *m;           /* the frame */
    client_build_fn build;  /* decide: fills m under the lock (NULL: m is built) */
    const void *arg;        /* for build */
    pend_kind kind;         /* the pending record's kind (PEND_PLAIN) */
    uint64_t obj, snap;     /* and its object and snapshot (adds, pins; client/request.h) */
    uint16_t want;          /* the reply type that answers (0: COMEM_MSG_REPLY) */
    int timeout_ms;         /* decide: the wait, resolved (comem_client_timeout); updates wait the default */
    int ack_ms;             /* decide: > 0, a coordinator that does not acknowledge within it is not waited for */
    const char *what;       /* update: what a refusal's warning names (NULL: no warning); add: the record's name */
    bool removal;           /* update: COMEM_ENOENT is success, the record is gone there already */
    /* what the helper sets */
    client_req r;           /* the request (r.gen: the connection it went on) */
    bool begun, sent;
    client_reply rep;       /* the reply, when the call returned COMEM_OK */
    char *text;             /* PEND_STATUS: the status text, the caller's to free */
    int refused;            /* update: an error reply's status (0: none) */
    bool unanswered;        /* decide with ack_ms: neither answered nor acknowledged in time */
};

/* The coordinator's budget for a caller that waits timeout_ms: a little less, so its answer still finds the caller. */
uint32_t comem_call_budget(int timeout_ms);

/*
 * A decision of the coordinator's (above). COMEM_OK with call->rep of type
 * call->want; COMEM_CALL_LOCAL; an error reply's status (its reason kept for
 * comem_take_reason); COMEM_EPROTO for another frame; COMEM_ECLOSED,
 * COMEM_ETIMEDOUT (call->unanswered), COMEM_EBUSY, COMEM_ENOMEM, or build's status.
 */
int comem_call_decide(comem_client *c, client_call *call);

/*
 * Lock held, the link not down: starts the request for frame m, awaited
 * unless on the service thread (which reads the replies). COMEM_OK, or
 * COMEM_ENOMEM (nothing begun: comem_call_update then says COMEM_OK).
 */
int comem_call_begin(comem_client *c, client_call *call, comem_msg *m);

/*
 * Lock held, begun: sends the frame now, in order with the state it carries
 * (ACTIVITY has no sequence number of its own). A lost connection abandons the
 * request: the next connection is told by the resync.
 */
void comem_call_send_now(comem_client *c, client_call *call);

/* Without the lock: sends a begun update (unless sent), waits, and gives the call's status (above). */
int comem_call_update(comem_client *c, client_call *call);

/*
 * Without the lock: sends a begun HOLDER_ADD or ENTRY_ADD and waits for its id
 * (the reader maps it). A lost connection leaves the record for the resync;
 * a refusal or a timeout takes it out of the mirror (a timed-out one was
 * already, by comem_req_give_up).
 */
int comem_call_add(comem_client *c, client_call *call);

#endif
