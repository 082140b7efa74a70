/*
 * client/call.c - the call helper (client/call.h): the route, the request's
 * start, the send, the wait and the reply's status, written once for every
 * public call that tells or asks the coordinator.
 */
#include <string.h>

#include "base/log.h"
#include "client/call.h"

uint32_t comem_call_budget(int timeout_ms)
{
    int margin = timeout_ms / 10 < 250 ? timeout_ms / 10 : 250;
    return (uint32_t)(timeout_ms - margin);
}

/* The reply's status: COMEM_OK for the awaited type, an error reply's status (its reason kept), else COMEM_EPROTO. */
static int reply_status(const client_reply *rep, uint16_t want)
{
    if (rep->type == COMEM_MSG_REPLY && rep->u.reply.status != COMEM_OK) {
        comem_client_set_reason(rep->u.reply.message);
        return rep->u.reply.status;
    }
    if (rep->type == want)
        return COMEM_OK;
    comem_error("the coordinator answered with %s where %s was due", comem_wire_type_name(rep->type),
                comem_wire_type_name(want));
    return COMEM_EPROTO;
}

static uint16_t want_of(const client_call *call) { return call->want ? call->want : COMEM_MSG_REPLY; }

int comem_call_decide(comem_client *c, client_call *call)
{
    pthread_mutex_lock(&c->lock);
    int rc = call->build ? call->build(c, call) : COMEM_OK;
    if (rc == COMEM_OK && c->link != LINK_UP)
        rc = COMEM_CALL_LOCAL;
    if (rc == COMEM_CALL_LOCAL && (c->flags & COMEM_OPEN_NO_LOCAL))
        rc = COMEM_ECLOSED;
    if (rc == COMEM_OK && comem_on_service_thread(c)) {
        /* The service thread reads the replies: waiting for one there would wait for itself. */
        comem_warn("a call that waits for the coordinator was made on the library's service thread; refused as busy");
        rc = COMEM_EBUSY;
    }
    if (rc == COMEM_OK)
        rc = comem_req_begin(c, &call->r, call->kind, call->obj, call->snap, true);
    call->begun = rc == COMEM_OK;
    pthread_mutex_unlock(&c->lock);
    if (rc != COMEM_OK)
        return rc;
    rc = call->ack_ms > 0 ? comem_req_finish_acked(c, &call->r, call->m, call->ack_ms, call->timeout_ms, &call->rep,
                                                   &call->unanswered)
                          : comem_req_finish(c, &call->r, call->m, call->timeout_ms, &call->rep,
                                             call->kind == PEND_STATUS ? &call->text : NULL);
    call->sent = true;
    if (rc == COMEM_OK)
        rc = reply_status(&call->rep, want_of(call));
    return rc;
}

int comem_call_begin(comem_client *c, client_call *call, comem_msg *m)
{
    call->m = m;
    int rc = comem_req_begin(c, &call->r, call->kind, call->obj, call->snap, !comem_on_service_thread(c));
    call->begun = rc == COMEM_OK;
    return rc;
}

void comem_call_send_now(comem_client *c, client_call *call)
{
    if (!call->begun)
        return;
    if (comem_req_send(c, &call->r, call->m) != COMEM_OK) {
        comem_req_abort(c, &call->r); /* the connection is gone: the next one is told by the resync */
        call->begun = false;
        return;
    }
    call->sent = true;
}

int comem_call_update(comem_client *c, client_call *call)
{
    if (!call->begun)
        return COMEM_OK;
    int rc = comem_req_finish(c, &call->r, call->sent ? NULL : call->m, comem_client_timeout(c, -1), &call->rep, NULL);
    call->sent = true;
    if (rc == COMEM_ECLOSED)
        return COMEM_OK; /* the mirror changed: the resync tells the next connection */
    if (rc != COMEM_OK || call->rep.type == 0)
        return rc; /* a failure, or sent from the service thread without waiting */
    const comem_msg_reply *x = &call->rep.u.reply;
    if (call->rep.type == COMEM_MSG_REPLY && x->status != COMEM_OK) {
        call->refused = x->status;
        if (call->removal && x->status == COMEM_ENOENT)
            return COMEM_OK;
        if (call->what)
            comem_warn("the coordinator refused %s: %s (%s)", call->what, comem_status_str(x->status), x->message);
    }
    return reply_status(&call->rep, want_of(call));
}

int comem_call_add(comem_client *c, client_call *call)
{
    if (!call->begun)
        return COMEM_OK;
    client_reply *rep = &call->rep;
    int rc = comem_req_finish(c, &call->r, call->sent ? NULL : call->m, comem_client_timeout(c, -1), rep, NULL);
    call->sent = true;
    if (rc == COMEM_ECLOSED || (rc == COMEM_OK && (rep->type == 0 || rep->type == COMEM_MSG_ID_REPLY)))
        return COMEM_OK;
    if (rc == COMEM_ETIMEDOUT)
        return rc;
    bool holder = call->kind == PEND_HOLDER_ADD;
    if (rc == COMEM_OK) {
        bool said = rep->type == COMEM_MSG_REPLY;
        rc = said && rep->u.reply.status != COMEM_OK ? rep->u.reply.status : COMEM_EPROTO;
        comem_warn("the coordinator refused %s '%s': %s (%s)", holder ? "holder" : "entry", call->what,
                   comem_status_str(rc), said ? rep->u.reply.message : "unexpected reply");
        comem_client_set_reason(said ? rep->u.reply.message : "unexpected reply");
    }
    pthread_mutex_lock(&c->lock);
    if (holder)
        comem_tab_remove_holder(c, call->obj);
    else
        comem_tab_remove_entry(c, call->obj);
    pthread_mutex_unlock(&c->lock);
    return rc;
}
