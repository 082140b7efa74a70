/* coord/session.c - HELLO, authentication, and the end of a session. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/name.h"
#include "base/size.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

/* Compares two tokens in time that depends only on the longer length. */
static bool token_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), n = la > lb ? la : lb;
    unsigned diff = (unsigned)(la ^ lb);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned)(unsigned char)(i < la ? a[i] : 0) ^ (unsigned)(unsigned char)(i < lb ? b[i] : 0);
    return diff == 0;
}

/*
 * Who sets the reserve base (the operator's EXTRA_RESERVED_VRAM, before comem
 * adds charges). comemd --reserve fixes it for the coordinator's life and no
 * host can change it. Otherwise the first host to join with a base sets it;
 * other hosts' offers are logged and ignored, and only that host's leaving
 * clears it (the next host to join then sets it). So another process
 * of the same user that claims the host role cannot zero the reserve a running
 * host set; one that joins before any host can, which --reserve rules out.
 */
static void offer_base(comem_coord_srv *s, uint64_t session, const comem_msg_hello *h)
{
    char a[32], b[32];
    if (s->host_base >= 0) {
        if (h->reserve_base != s->host_base)
            comem_info("host '%s' offers a reserve base of %s; keeping %s (%s)", h->name,
                       comem_format_bytes(h->reserve_base, a, 32), comem_format_bytes(s->host_base, b, 32),
                       s->cfg.reserve_base >= 0 ? "comemd --reserve" : "set by the first host");
        return;
    }
    /* The operator's base, read once: later publishes add to it and never compound. */
    s->host_base = h->reserve_base;
    s->host_base_session = session;
    comem_info("reserve base %s, set by host '%s'", comem_format_bytes(s->host_base, a, 32), h->name);
    for (int d = 0; d < s->ledger.n_devices; d++)
        coord_publish_reserve(s, d, true);
}

int coord_hello(comem_coord_srv *s, conn *c, const comem_msg_hello *h, uint32_t request_id)
{
    if (c->session) {
        coord_reply(s, c, request_id, COMEM_EPROTO, "HELLO twice");
        c->closing = true;
        return COMEM_EPROTO;
    }
    if (h->proto_version != COMEM_WIRE_VERSION) {
        coord_reply(s, c, request_id, COMEM_EPROTO, "protocol version not supported");
        c->closing = true;
        return COMEM_EPROTO;
    }
    char why[64], text[COMEM_WIRE_TEXT_MAX];
    if (comem_name_check(h->name, why, sizeof why) != COMEM_OK) { /* never logged or printed raw */
        comem_warn("refused pid %d: its process name breaks the name rule (%s)", (int)c->pid, why);
        snprintf(text, sizeof text, "process name: %s", why);
        coord_reply(s, c, request_id, COMEM_EINVAL, text);
        c->closing = true;
        return COMEM_EINVAL;
    }
    if (s->cfg.token[0] && !token_equal(s->cfg.token, h->token)) {
        comem_warn("refused pid %d ('%s'): bad token", (int)c->pid, h->name);
        coord_reply(s, c, request_id, COMEM_EPERM, "refused: bad token");
        c->closing = true;
        return COMEM_EPERM;
    }
    uint64_t id;
    /* The kernel's word on the pid (SO_PEERCRED), not the frame's. */
    int rc = comem_ledger_session_add(&s->ledger, c->pid, c->uid, h->role, h->scope, h->caps, h->name,
                                      comem_now_ns(), &id);
    if (rc != COMEM_OK) {
        coord_reply(s, c, request_id, rc, "cannot add the session");
        c->closing = true;
        return rc;
    }
    c->session = id;
    /* Watch the process itself: its death ends the session even if the socket is inherited. */
    if (comem_proc_watch_open(c->pid, &c->watch) == COMEM_OK &&
        comem_loop_add_process(s->loop, c->watch, &c->pid_tag) != COMEM_OK) {
        comem_proc_watch_close(c->watch); /* its end comes with its connection's, as without a watch */
        c->watch = NULL;
    }
    if (h->scope == COMEM_SCOPE_PROCESS_LOCAL && s->max_pinned_windows < s->ledger.max_pinned &&
        s->ledger.total_pinned <= s->max_pinned_windows) {
        /* A WDDM process: this is Windows, where ComfyUI pins at most 40 % of RAM. */
        s->ledger.max_pinned = s->max_pinned_windows;
        comem_info("pin ceiling: %lld bytes (Windows: 40%% of RAM)", (long long)s->ledger.max_pinned);
    }
    if (h->role == COMEM_ROLE_HOST && h->reserve_base >= 0)
        offer_base(s, id, h);
    /* The shares ride beside the reply's first byte (Linux), so nothing may go before it; the reply
       names each by its number (os/shm.h). */
    uint64_t view_share = 0, area_share = 0;
    comem_shm_token t;
    if (c->out_len == 0 && comem_view_sealed_share(&s->view, c->pid, &t) == COMEM_OK) {
        view_share = comem_shm_token_number(t, c->n_pass); /* the view no other process can write */
        c->pass[c->n_pass++] = t;
    }
    if (c->out_len == 0 && coord_book_session_start(s, c, h->role, &t)) {
        area_share = comem_shm_token_number(t, c->n_pass);
        c->pass[c->n_pass++] = t;
    }
    comem_info("session %llx: %s '%s' pid %d joined", (unsigned long long)id,
               h->role == COMEM_ROLE_HOST ? "host" : h->role == COMEM_ROLE_WORKER ? "worker" : "tool", h->name,
               (int)c->pid);
    comem_msg m = {.type = COMEM_MSG_HELLO_REPLY, .request_id = request_id};
    m.u.hello_reply.session_id = id;
    m.u.hello_reply.coord_pid = (uint32_t)getpid();
    m.u.hello_reply.proto_version = COMEM_WIRE_VERSION;
    m.u.hello_reply.n_devices = (uint16_t)s->ledger.n_devices;
    m.u.hello_reply.view_share = view_share;
    m.u.hello_reply.area_share = area_share;
    coord_send(s, c, &m);
    return COMEM_OK;
}

/*
 * Is c's process exiting or gone? A killed process's socket is closed inside its exit, before
 * its pidfd turns readable, so the connection's end can come first: the process inside its exit
 * (Linux's PF_EXITING, set before the kernel closes its files) or ended answers then. A client
 * that closes its socket and lives on (comem_client_close) is neither.
 */
static bool process_gone(const conn *c)
{
    if (c->watch && comem_proc_watch_wait(c->watch, 0) == COMEM_OK)
        return true;
    comem_proc_info in;
    int rc = comem_proc_look(c->pid, &in);
    if (rc != COMEM_OK)
        return rc == COMEM_ENOENT; /* one this user may not describe is there */
    return in.ended || in.exiting;
}

void coord_session_end(comem_coord_srv *s, conn *c, const char *why)
{
    uint64_t id = c->session;
    if (!id)
        return;
    ledger_session *ss = comem_ledger_session(&s->ledger, id);
    char name[COMEM_LEDGER_NAME_MAX] = "";
    if (ss)
        snprintf(name, sizeof name, "%s", ss->name);
    coord_wddm_forget(s, c);
    c->session = 0;
    s->trim_due = true;
    coord_asks_session_ended(s, id);
    coord_jobs_session_ended(s, id);
    coord_book_session_end(s, c); /* what it booked in shared memory, before the ledger drops its grants */
    ledger_release_summary sum = {0};
    comem_ledger_session_end(&s->ledger, id, &sum);
    /* A death, for the counters: a session that had registered something and did not say
       GOODBYE, whose process was exiting or gone when the session ended (observers, which
       register nothing, never count; nor does a client that closed and exited at once). */
    s->counters.sessions_ended++;
    if ((sum.holders > 0 || sum.entries > 0 || sum.grants > 0) && !c->goodbye && process_gone(c))
        s->counters.sessions_died++;
    char g[32], r[32], p[32];
    comem_info("session %llx ('%s', pid %d) ended (%s): released %d grant(s) of %s, %d entr%s holding %s, %s pinned",
               (unsigned long long)id, name, (int)c->pid, why, sum.grants, comem_format_bytes(sum.grant_bytes, g, 32),
               sum.entries, sum.entries == 1 ? "y" : "ies", comem_format_bytes(sum.resident_bytes, r, 32),
               comem_format_bytes(sum.pinned_bytes, p, 32));
    if (id == s->host_base_session) { /* the host that set the base left: the next one sets it */
        s->host_base = s->cfg.reserve_base;
        s->host_base_session = 0;
    }
    for (int d = 0; d < s->ledger.n_devices; d++) {
        coord_publish_reserve(s, d, true); /* the session's death is the evidence for a shrink */
        coord_measure(s, d);
    }
    coord_jobs_boundary(s); /* what it held is free: an admission waiting for its node plans again */
}
