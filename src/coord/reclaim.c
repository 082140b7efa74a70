/*
 * coord/reclaim.c - grants that outlive their coordinator (issue 40 item 1).
 *
 * A grant is booked when an admission is answered and becomes residency when
 * its process has loaded (GRANT_DONE). A coordinator killed in between takes
 * the booking with it: a new one, started by systemd or the autostart, would
 * give the same bytes to the next admission while the first process loads.
 * So a grant outlives its coordinator in two ways:
 *
 *   - every coordinator publishes its outstanding grants per device in the
 *     status view at the end of the turn that booked them (server.c); one that
 *     starts where another ran reads that figure before it publishes its own
 *     and keeps it booked, as inherited grants, for COORD_RECLAIM_MS: longer
 *     than a client takes to reconnect (its backoff tops out at 1 s);
 *   - a client that reconnects replays every grant it still holds (RECLAIM)
 *     after its holders. It is booked to that client again out of the
 *     inherited bytes, and its new id returned; one they no longer cover is
 *     refused, and the client's GRANT_DONE then fails instead of claiming
 *     bytes nobody kept. Never out of the room: a RECLAIM skips the admission
 *     queue and its arithmetic, so it may take only what was granted before.
 *
 * What nobody reclaims is room again when the window closes. The view file is
 * the user's to write: a forged figure keeps at most the card's capacity, and
 * only for the window.
 */
#include <stdio.h>

#include "base/bytes.h"
#include "base/log.h"
#include "base/size.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

void coord_reclaim_inherit(comem_coord_srv *s)
{
    comem_view_shared *sh = s->view.sh;
    if (!sh)
        return;
    bool any = false;
    for (int d = 0; d < s->ledger.n_devices && d < COMEM_MAX_DEVICES; d++) {
        int64_t g = atomic_load(&sh->dev[d].granted); /* the previous coordinator's last word */
        s->inherited[d] = comem_min(comem_clamp0(g), s->ledger.devices[d].capacity);
        if (s->inherited[d] > 0) {
            char b[32];
            comem_format_bytes(s->inherited[d], b, sizeof b);
            comem_info("coordinator: the previous coordinator left %s granted on device %d; kept for its clients "
                       "to reclaim for %d ms",
                       b, d, COORD_RECLAIM_MS);
            any = true;
        }
    }
    s->inherited_until_ns = any ? comem_add(comem_now_ns(), (int64_t)COORD_RECLAIM_MS * 1000000) : 0;
}

int64_t coord_inherited(const comem_coord_srv *s, int device)
{
    return device >= 0 && device < COMEM_MAX_DEVICES ? s->inherited[device] : 0;
}

void coord_reclaim_tick(comem_coord_srv *s, int64_t now_ns)
{
    if (!s->inherited_until_ns || now_ns < s->inherited_until_ns)
        return;
    s->inherited_until_ns = 0;
    for (int d = 0; d < s->ledger.n_devices && d < COMEM_MAX_DEVICES; d++) {
        if (!s->inherited[d])
            continue;
        char b[32];
        comem_format_bytes(s->inherited[d], b, sizeof b);
        comem_info("coordinator: %s inherited on device %d went unreclaimed; it is room again", b, d);
        s->inherited[d] = 0;
        coord_publish_view(s, d);
    }
}

void coord_reclaim(comem_coord_srv *s, conn *c, uint32_t rid, const comem_msg_reclaim *m)
{
    int d = m->device;
    if (d >= s->ledger.n_devices) {
        coord_reply(s, c, rid, COMEM_ENODEV, "no such device");
        return;
    }
    if (m->holder_id) {
        const ledger_holder *h = comem_ledger_holder(&s->ledger, m->holder_id);
        if (!h || h->session != c->session || h->device != d) {
            coord_reply(s, c, rid, COMEM_ENOENT, "no such holder on that device");
            return;
        }
    }
    /* Only out of what the previous coordinator granted: a RECLAIM skips the queue, so it never takes
       room an admission waits for, nor bytes a release freed for one. */
    int rc = m->bytes > s->inherited[d] ? COMEM_ENOSPC : COMEM_OK;
    uint64_t id = 0;
    if (rc == COMEM_OK) {
        int64_t expires = comem_add(comem_now_ns(), comem_mul(s->cfg.grant_ttl_ms, 1000000));
        rc = comem_ledger_grant_add(&s->ledger, c->session, m->holder_id, d, m->bytes, expires, &id);
    }
    if (rc == COMEM_OK)
        s->inherited[d] -= m->bytes;
    char b[32];
    comem_format_bytes(m->bytes, b, sizeof b);
    const ledger_session *ss = comem_ledger_session(&s->ledger, c->session);
    if (rc != COMEM_OK) {
        comem_warn("coordinator: '%s' reclaims a grant of %s on device %d from the previous coordinator: refused "
                   "(%s)",
                   ss ? ss->name : "?", b, d, comem_status_str(rc));
        coord_reply(s, c, rid, rc, rc == COMEM_ENOSPC ? "no grant of the previous coordinator is left to cover it" : NULL);
        return;
    }
    comem_info("coordinator: '%s' reclaimed a grant of %s on device %d from the previous coordinator", ss ? ss->name : "?",
               b, d);
    comem_msg r = {.type = COMEM_MSG_ID_REPLY, .request_id = rid};
    r.u.id.id = id;
    coord_send(s, c, &r);
}
