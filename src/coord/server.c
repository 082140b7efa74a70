/*
 * coord/server.c - the coordinator's loop: create, run, stop, destroy, and the tick.
 *
 * One event loop (os/loop.h: epoll on Linux, a completion port on Windows)
 * watches the listener, every connection and every session's process; its
 * waits end by the 20 ms timer's next turn at the latest. Each turn hands what
 * is ready to its room and then frees the connections that were marked
 * closing during the turn (after one last flush of their error reply):
 *
 *   the listener       coord_accept           input.c
 *   a connection       coord_conn_readable    input.c   (frames -> handlers.c)
 *                      coord_flush            conn.c    (room again: what was queued goes)
 *   a process          coord_session_end      session.c (the process died)
 *   the timer          tick                   here: HELLO and ask deadlines every
 *                                             20 ms; every tick_ms the grant expiry,
 *                                             a reading of every device, idle release,
 *                                             the card's own pressure
 *   a wake-up          stop
 *
 * Everything runs on the loop thread; only comem_coord_request_stop is called
 * from elsewhere (it wakes the loop).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__ /* known once a libc header is in */
#include <malloc.h>
#endif

#include "base/log.h"
#include "base/size.h"
#include "base/token.h"
#include "comem/comem.h"
#include "comem/common.h"
#include "coord/coord_internal.h"
#include "os/env.h"

#define TIMER_PERIOD_MS 20 /* deadlines are checked this often; the tick runs every cfg.tick_ms */

int comem_coord_config_defaults(comem_coord_config *cfg, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->idle_release_s = 60.0;
    cfg->ask_deadline_ms = 2000;
    cfg->grant_ttl_ms = 60000;
    cfg->reading_max_age_ms = 20;
    cfg->tick_ms = 250;
    cfg->hello_timeout_ms = 5000;
    cfg->max_wait_ms = 60000;
    cfg->reserve_base = -1;
    const char *e;
    if ((e = comem_env("COMEM_DEVICE")) && *e)
        snprintf(cfg->device_spec, sizeof cfg->device_spec, "%s", e);
    if ((e = comem_env("COMEM_RAM")) && *e && strcmp(e, "off") != 0)
        snprintf(cfg->ram_spec, sizeof cfg->ram_spec, "%s", e);
    cfg->ram_off = e && !strcmp(e, "off");
    if ((e = comem_env("COMEM_CHECK")) && *e && strcmp(e, "0") != 0)
        cfg->check = true;
    int rc = comem_token_from_env(cfg->token, sizeof cfg->token, err, errlen);
    if (rc == COMEM_OK && (e = comem_env("COMEM_IDLE_SECONDS")) && *e)
        rc = comem_parse_seconds("COMEM_IDLE_SECONDS", e, &cfg->idle_release_s, err, errlen);
    return rc;
}

const char *comem_coord_socket(const comem_coord_srv *s) { return s->cfg.socket_path; }

/* ---- the tick ---- */

/*
 * With --exit-idle: stops the loop once no process has been connected for that long. Nothing is held
 * then (what a session holds ends with it), so exiting loses nothing; a client that comes later
 * starts a coordinator again (the autostart).
 */
static void exit_when_alone(comem_coord_srv *s, int64_t now)
{
    if (s->cfg.exit_idle_s <= 0)
        return;
    for (int i = 0; i < COORD_MAX_CONNS; i++)
        if (s->conns[i]) {
            s->alone_since_ns = 0;
            return;
        }
    if (!s->alone_since_ns)
        s->alone_since_ns = now;
    else if ((double)(now - s->alone_since_ns) >= s->cfg.exit_idle_s * 1e9) {
        comem_info("coordinator: no process connected for %g s (--exit-idle): exiting", s->cfg.exit_idle_s);
        comem_coord_request_stop(s);
    }
}

static void tick(comem_coord_srv *s)
{
    int64_t now = comem_now_ns();
    comem_view_heartbeat(&s->view, now); /* readers tell a live coordinator from one that exited */
    coord_hello_deadlines(s, now);
    coord_asks_tick(s, now);
    coord_jobs_tick(s, now);
    coord_reclaim_tick(s, now);
    if (now - s->last_tick_ns < (int64_t)s->cfg.tick_ms * 1000000)
        return;
    s->last_tick_ns = now;
#ifdef __GLIBC__
    if (s->trim_due) { /* what an ended session's records and buffers took goes back to the system */
        malloc_trim(0);
        s->trim_due = false;
    }
#endif
    if (comem_ledger_grants_expire(&s->ledger, now) > 0)
        comem_info("expired unused grants");
    for (int d = 0; d < s->ledger.n_devices; d++)
        coord_measure(s, d);
    coord_idle_tick(s, now);
    coord_pressure_tick(s, now);
    exit_when_alone(s, now);
}

/*
 * After every turn: what clients booked is reconciled and the limits are
 * published again, and every ledger change the turn made reaches the view
 * (a turn lasts microseconds, so a change is in the view well within 1 ms).
 */
static void turn_end(comem_coord_srv *s)
{
    if (s->acks_due)
        coord_jobs_ack(s, comem_now_ns());
    coord_book_sync(s);
    for (int d = 0; d < s->ledger.n_devices; d++) {
        const ledger_device *ld = &s->ledger.devices[d];
        view_mark m = {ld->changes, comem_ledger_granted(&s->ledger, d), ld->published, s->meas[d].taken_ns,
                       s->meas[d].done_since, s->view_turns};
        if (memcmp(&m, &s->view_mark[d], sizeof m) != 0) {
            s->view_mark[d] = m;
            coord_publish_view(s, d);
        }
    }
}

/*
 * The loop's wait. While asks are out and the last went out less than the spin
 * budget ago, it polls first: a holder that answers at once sends its receipt
 * within microseconds, and a sleep would add the wake-up of an idle CPU to every
 * release round. Then, while clients book in shared memory, it looks at the area
 * every 250 us, so a booking is a ledger grant (and in the view) well within a
 * millisecond; else it sleeps until the timer's next turn (a millisecond when an
 * acknowledgement is due soon).
 */
static int wait_events(comem_coord_srv *s, comem_loop_event *evs, int max)
{
    while (s->asks.used > 0 && comem_now_ns() < s->spin_until_ns) {
        int n = comem_loop_wait(s->loop, evs, max, 0);
        if (n != 0)
            return n;
    }
    int64_t until_timer_us = (s->next_timer_ns - comem_now_ns()) / 1000;
    int64_t us = coord_book_active(s) ? 250 : s->acks_due ? 1000 : until_timer_us;
    if (us > until_timer_us)
        us = until_timer_us;
    return comem_loop_wait_us(s->loop, evs, max, us < 0 ? 0 : us);
}

/* The 20 ms timer: due when its turn has come; the next turn is a period on, or from now when far behind. */
static bool timer_due(comem_coord_srv *s, int64_t now)
{
    if (now < s->next_timer_ns)
        return false;
    s->next_timer_ns += TIMER_PERIOD_MS * 1000000LL;
    if (s->next_timer_ns <= now)
        s->next_timer_ns = now + TIMER_PERIOD_MS * 1000000LL;
    return true;
}

/* ---- lifecycle ---- */

int comem_coord_create(const comem_coord_config *cfg, comem_coord_srv **out)
{
    comem_coord_srv *s = calloc(1, sizeof *s);
    if (!s)
        return COMEM_ENOMEM;
    s->cfg = *cfg;
    s->ram_index = -1;
    s->host_base = cfg->reserve_base >= 0 ? cfg->reserve_base : -1;
    s->started_ns = s->last_tick_ns = comem_now_ns();
    comem_slab_init(&s->asks, sizeof(ask));
    comem_slab_init(&s->jobs, sizeof(job));
    s->frame = malloc(COMEM_WIRE_MAX_FRAME);
    int rc = s->frame ? COMEM_OK : COMEM_ENOMEM;
    if (rc == COMEM_OK && !s->cfg.socket_path[0])
        rc = comem_default_socket(s->cfg.socket_path, sizeof s->cfg.socket_path);
    if (rc == COMEM_OK)
        rc = coord_socket_claim(s);
    if (rc == COMEM_OK)
        rc = coord_devices_open(s);
    if (rc == COMEM_OK)
        rc = comem_view_writer_open(&s->view, s->cfg.socket_path, s->ledger.n_devices);
    if (rc == COMEM_OK) {
        coord_reclaim_inherit(s); /* before anything of ours is published over it */
        coord_book_open(s);
    }
    if (rc == COMEM_OK)
        rc = coord_socket_bind(s);
    if (rc == COMEM_OK) {
        s->listen_tag = (ep_tag){EP_LISTEN, NULL};
        rc = comem_loop_open(&s->loop);
        if (rc == COMEM_OK)
            rc = comem_loop_add_listener(s->loop, s->listener, &s->listen_tag);
        s->next_timer_ns = comem_now_ns() + TIMER_PERIOD_MS * 1000000LL;
    }
    if (rc == COMEM_OK) {
        for (int d = 0; d < s->ledger.n_devices; d++) {
            coord_publish_reserve(s, d, false);
            coord_measure(s, d);
        }
        char rb[32] = "";
        if (s->cfg.reserve_base >= 0)
            comem_format_bytes(s->cfg.reserve_base, rb, sizeof rb);
        comem_info("coordinator: listening on %s, %d device(s)%s%s%s", s->cfg.socket_path, s->ledger.n_devices,
                   s->cfg.token[0] ? ", token required" : "", rb[0] ? ", reserve base fixed at " : "", rb);
        *out = s;
        return COMEM_OK;
    }
    comem_coord_destroy(s);
    return rc;
}

int comem_coord_run(comem_coord_srv *s)
{
    comem_loop_event evs[64];
    while (!s->stop) {
        int n = wait_events(s, evs, 64);
        if (n < 0) {
            comem_error("coordinator: the event loop failed: %s", comem_status_str(n));
            return COMEM_EIO;
        }
        for (int i = 0; i < n; i++) {
            ep_tag *t = evs[i].tag;
            if (!t) { /* woken: comem_coord_request_stop */
                s->stop = 1;
                continue;
            }
            switch (t->kind) {
            case EP_LISTEN:
                coord_accept(s);
                break;
            case EP_PIDFD:
                /* The process died: its session ends at once, even if its socket lingers. */
                if (t->conn->session)
                    coord_session_end(s, t->conn, "process exited");
                t->conn->closing = true;
                break;
            case EP_CONN:
                if (evs[i].what & COMEM_LOOP_READ)
                    coord_conn_readable(s, t->conn);
                if (!t->conn->closing && (evs[i].what & COMEM_LOOP_WRITE) && !coord_flush(s, t->conn))
                    t->conn->closing = true;
                break;
            }
        }
        if (timer_due(s, comem_now_ns()))
            tick(s);
        for (int i = 0; i < COORD_MAX_CONNS; i++) {
            conn *c = s->conns[i];
            if (c && c->closing) {
                coord_flush(s, c); /* best effort: the error reply */
                coord_conn_close(s, c);
            }
        }
        turn_end(s);
    }
    return COMEM_OK;
}

void comem_coord_request_stop(comem_coord_srv *s) { comem_loop_wake(s->loop); }

void comem_coord_destroy(comem_coord_srv *s)
{
    if (!s)
        return;
    for (int i = 0; i < COORD_MAX_CONNS; i++)
        if (s->conns[i])
            coord_conn_close(s, s->conns[i]);
    if (s->listener && s->loop)
        comem_loop_remove_listener(s->loop, s->listener);
    coord_socket_release(s);
    comem_loop_close(s->loop);
    for (size_t i = 0; i < comem_slab_slots(&s->jobs); i++) { /* jobs still waiting at shutdown */
        job *j = comem_slab_at(&s->jobs, i, NULL);
        if (j)
            free(j->keep);
    }
    comem_view_writer_close(&s->view);
    comem_device_close(s->src);
    comem_device_close(s->ram_src);
    comem_ledger_fini(&s->ledger);
    comem_slab_fini(&s->asks);
    comem_slab_fini(&s->jobs);
    free(s->frame);
    free(s);
}
