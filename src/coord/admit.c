/*
 * coord/admit.c - admission and pressure requests across processes.
 *
 * An admission computes comfy-env's ask target for the requester (ComfyUI's
 * load_models_gpu shape: int(weights * 1.1) + max(minimum inference, working
 * memory + reserve), the reserve being what this requester must keep), reads
 * true free, and grants at once when it is enough. Otherwise it plans a release
 * across every other process's holders with ComfyUI's own eviction ladder
 * (most offloaded first, then fewest references, then smallest, then most
 * recently loaded; holders with no entries for the bytes they report; partial
 * release when it covers the shortfall, else the whole entry), sends the asks
 * concurrently, believes the receipts, re-measures, and grants or refuses with
 * the shortfall. A holder that answers busy is left out and the plan is made
 * again, at most COORD_MAX_ROUNDS times.
 *
 * Jobs on one device plan one at a time (a FIFO per device): the grant of one
 * is booked in the ledger before the next plans, so two requests are never told
 * yes for the same bytes. While the head waits on its asks, an admission behind
 * it that fits without asking anybody is decided at once (decide_fitting): it
 * may take only the room beyond what receipts have freed for the jobs ahead of
 * it and what their asks still out asked for, which stays theirs. One that needs asks keeps its place: first come,
 * first served, where a stuck holder would otherwise stall the whole card.
 *
 * AN ADMISSION JOB (job.state): every state, every transition and the function
 * that makes it. A pressure job walks the same path with one round of asks to
 * idle siblings (plan_pressure) and is answered with what came back.
 *
 *   JOB_QUEUED    in its device's FIFO behind the running job
 *   JOB_PLANNING  at the head: the target computed, true free read, a plan made
 *   JOB_ASKING    asks out (asks_out > 0), waiting for their receipts
 *   granted       answered yes, the grant booked in the ledger; the job is freed
 *   refused       answered no with the shortfall (busy at the grant bound); freed
 *
 *   from        to          when                                          by
 *   (request)   QUEUED      a valid ADMIT, within the bounds; not decided coord_admit, new_job
 *                           at once, it is acknowledged (ADMIT_QUEUED) if coord_jobs_ack
 *                           still unanswered 1 ms later
 *   QUEUED      PLANNING    it reaches the head of the FIFO                pump -> step
 *   QUEUED      granted     behind a job that waits on asks, it fits the   pump -> decide_fitting
 *                           room beyond what receipts freed for the jobs   -> finish
 *                           ahead, nobody asked
 *   PLANNING    granted     true free covers the target                    step -> finish
 *   PLANNING    ASKING      the plan sent at least one ask                 step -> plan_admit
 *   PLANNING    WAITING     nobody may be asked now, but a computing       step -> computing_holder
 *                           holder of another process holds bytes that
 *                           would be asked at its node boundary
 *   PLANNING    refused     COORD_MAX_ROUNDS planned, the deadline passed, step -> finish
 *                           or nobody may be asked, now or at a boundary
 *   WAITING     PLANNING    a holder's node ended (ACTIVITY idle), or a    coord_jobs_boundary -> pump
 *                           session ended: plan again, busy ones asked anew
 *   WAITING     refused     the requester's deadline: the reply counts the coord_jobs_tick -> finish
 *                           holder busy, the log names whose boundary
 *   ASKING      PLANNING    its last ask settled (receipt, busy, deadline, job_ask_done -> pump: the
 *                           the holder's end)                              next round reads the card again
 *   ASKING      granted or  the requester's deadline comes first: decided  coord_jobs_tick -> finish
 *               refused     with what came back so far
 *   any         (gone)      its session ended: dropped, nothing booked     coord_jobs_session_ended
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arith/planners.h"
#include "base/bytes.h"
#include "base/hops.h"
#include "base/log.h"
#include "base/size.h"
#include "comem/common.h"
#include "coord/coord_internal.h"
#include "coord/plan.h"

#define DEFAULT_TIMEOUT_MS 10000
/* How long a job keeps the room its asks are for, from the jobs behind it, on its holders' word alone:
   after this, only asks whose holder's process is seen giving bytes back keep theirs (keeps_room). */
#define COORD_ASK_HOLD_NS (1000 * 1000000LL)

static job *job_get(comem_coord_srv *s, uint64_t id) { return id ? comem_slab_get(&s->jobs, id) : NULL; }

static const char *session_name(comem_coord_srv *s, uint64_t id)
{
    const ledger_session *ss = comem_ledger_session(&s->ledger, id);
    return ss ? ss->name : "?";
}

/* ---- the per-device FIFO ---- */

static void queue_push(comem_coord_srv *s, int dev, uint64_t id)
{
    coord_book_close_device(s, dev); /* decided here now: no booking beside it until the queue is empty */
    if (!s->queue_head[dev]) {
        s->queue_head[dev] = s->queue_tail[dev] = id;
        return;
    }
    job_get(s, s->queue_tail[dev])->next = id;
    s->queue_tail[dev] = id;
}

static void queue_remove(comem_coord_srv *s, int dev, uint64_t id)
{
    uint64_t prev = 0, cur = s->queue_head[dev];
    while (cur && cur != id) {
        prev = cur;
        cur = job_get(s, cur)->next;
    }
    if (!cur)
        return;
    uint64_t next = job_get(s, cur)->next;
    if (prev)
        job_get(s, prev)->next = next;
    else
        s->queue_head[dev] = next;
    if (s->queue_tail[dev] == id)
        s->queue_tail[dev] = prev;
}


/* ---- planning ---- */

static bool excluded(const job *j, uint64_t holder)
{
    for (int i = 0; i < j->n_excluded; i++)
        if (j->excluded[i] == holder)
            return true;
    return false;
}

/* An ask went out for job j: count it, and remember whom (the reply names the first few). */
static void note_asked(job *j, uint64_t holder)
{
    j->asks_out++;
    if (j->n_asked < COMEM_WIRE_MAX_ASKED)
        j->asked[j->n_asked] = holder;
    j->n_asked++;
}

/* Distinct holders among the asks remembered: one holder asked in three rounds is one holder. */
static int holders_asked(const job *j)
{
    int n = j->n_asked < COMEM_WIRE_MAX_ASKED ? j->n_asked : COMEM_WIRE_MAX_ASKED, distinct = 0;
    for (int i = 0; i < n; i++) {
        bool seen = false;
        for (int k = 0; k < i && !seen; k++)
            seen = j->asked[k] == j->asked[i];
        distinct += !seen;
    }
    return distinct;
}

static void job_ask_done(comem_coord_srv *s, const ask *a, uint8_t outcome, int64_t freed);

/* Plans (coord/plan.c) and sends the asks for an admission; returns the asks sent. */
static int plan_admit(comem_coord_srv *s, uint64_t jid, job *j, int64_t avail)
{
    coord_planned out[COMEM_WIRE_MAX_ITEMS];
    coord_plan_in in = {
        .device = j->device,
        .requester = j->session,
        .need = (double)j->need,
        .avail = (double)avail,
        .keep = j->keep,
        .n_keep = j->n_keep,
        .excluded = j->excluded,
        .n_excluded = (size_t)j->n_excluded,
        .now_ns = comem_now_ns(),
    };
    size_t n = coord_plan_release(&s->ledger, &in, out, sizeof out / sizeof out[0]);
    uint64_t asked[COMEM_WIRE_MAX_ITEMS];
    size_t sent = coord_ask_plan(s, out, n, job_ask_done, jid, asked, NULL);
    for (size_t i = 0; i < sent; i++)
        note_asked(j, asked[i]);
    return (int)sent;
}

/* Pressure: ask idle siblings, largest first, for the bytes requested. */
static int plan_pressure(comem_coord_srv *s, uint64_t jid, job *j)
{
    coord_roster r;
    if (!coord_roster_init(&r, &s->ledger, sizeof(comem_release_holder)))
        return 0;
    int64_t now = comem_now_ns();
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.holders); i++) {
        uint64_t hid;
        const ledger_holder *h = comem_slab_at(&s->ledger.holders, i, &hid);
        if (!h || h->session == j->session || h->device != j->device || !coord_may_ask(h, now))
            continue;
        const char *key;
        comem_release_holder *row = coord_roster_add(&r, hid, &key);
        if (!row)
            break;
        *row = (comem_release_holder){.key = key, .alive = true, .advertises = true,
                                      .in_flight = excluded(j, hid), /* it said busy to this request */
                                      .held = comem_ledger_session_resident(&s->ledger, h->session, hid, j->device)};
    }
    comem_release_ask *asks = r.out;
    size_t k = comem_plan_pressure_release(r.rows, r.n, j->need, SIZE_MAX, asks);
    int sent = 0;
    for (size_t a = 0; a < k; a++) {
        if (coord_ask(s, r.ids[asks[a].holder], COMEM_ASK_RELEASE, asks[a].bytes, NULL, 0, job_ask_done, jid)) {
            sent++;
            note_asked(j, r.ids[asks[a].holder]);
        }
    }
    coord_roster_free(&r);
    return sent;
}

/* ---- finishing ---- */

/* Forgets a job: its queue place, its keep list, its record. */
static void job_free(comem_coord_srv *s, uint64_t jid, job *j)
{
    if (j->requester)
        j->requester->jobs--;
    if (j->ack_due_ns)
        s->acks_due--; /* answered (or dropped) first: no acknowledgement goes out */
    queue_remove(s, j->device, jid);
    free(j->keep);
    comem_slab_free(&s->jobs, jid);
}

static void finish(comem_coord_srv *s, uint64_t jid, job *j, bool grant, int64_t avail)
{
    conn *c = j->requester;
    char need[32] = "", fb[32] = "", fr[32] = "";
    int holders = 0;
    if (comem_log_enabled(COMEM_LOG_INFO)) { /* formatting costs more than the decision itself */
        comem_format_bytes(j->need, need, 32);
        comem_format_bytes(j->free_before, fb, 32);
        comem_format_bytes(j->freed, fr, 32);
        holders = holders_asked(j);
    }
    if (j->kind == JOB_PRESSURE) {
        comem_info("pressure: '%s' asked %s on device %d; %d ask(s) to %d holder(s) (%d busy), got %s back",
                   session_name(s, j->session), need, j->device, j->n_asked, holders, j->n_busy, fr);
        comem_msg m = {.type = COMEM_MSG_PRESSURE_REPLY, .request_id = j->request_id};
        m.u.pressure_reply.freed = j->freed;
        m.u.pressure_reply.free_after = avail;
        m.u.pressure_reply.n_asked = (uint16_t)j->n_asked;
        m.u.pressure_reply.n_busy = (uint16_t)j->n_busy;
        coord_send(s, c, &m);
    } else {
        comem_msg m = {.type = COMEM_MSG_ADMIT_REPLY, .request_id = j->request_id};
        comem_msg_admit_reply *r = &m.u.admit_reply;
        uint64_t gid = 0;
        int rc = COMEM_ENOSPC;
        if (grant) {
            int64_t expires = comem_add(comem_now_ns(), comem_mul(s->cfg.grant_ttl_ms, 1000000));
            rc = j->weights > 0 ? comem_ledger_grant_add(&s->ledger, j->session, j->holder, j->device, j->weights,
                                                         expires, &gid)
                                : COMEM_OK;
        }
        if (rc == COMEM_ERANGE) { /* a grant bound: say which and whose, not "short by" */
            char why[COMEM_WIRE_TEXT_MAX];
            if (!comem_ledger_bound_why(&s->ledger, j->session, LEDGER_GRANTS, why, sizeof why))
                snprintf(why, sizeof why, "too many unfinished grants");
            comem_warn("admission: '%s' refused: %s", session_name(s, j->session), why);
            coord_reply(s, c, j->request_id, COMEM_EBUSY, why);
            coord_count_admission(s, false, j->created_ns);
            job_free(s, jid, j);
            return;
        }
        r->granted = rc == COMEM_OK;
        if (r->granted)
            coord_book_wants(s, j->session, j->device); /* it admits here: its next ones may fit a stock */
        r->grant_id = gid;
        r->bytes = r->granted ? j->weights : 0;
        r->need = j->need;
        r->free_before = j->free_before;
        r->free_after = avail;
        r->short_by = r->granted ? 0 : comem_clamp0(comem_sub(j->need, avail));
        r->freed = j->freed;
        r->reserve = coord_reserve_for(s, j->session, j->device, &r->pager_headroom);
        r->n_asked = (uint16_t)j->n_asked;
        r->n_busy = (uint16_t)j->n_busy;
        r->n_ids = (uint16_t)(j->n_asked < COMEM_WIRE_MAX_ASKED ? j->n_asked : COMEM_WIRE_MAX_ASKED);
        memcpy(r->asked, j->asked, r->n_ids * sizeof r->asked[0]);
        char sb[32] = "";
        if (!r->granted)
            comem_format_bytes(r->short_by, sb, 32);
        comem_info("admission: '%s' needs %s on device %d, free %s; %d ask(s) to %d holder(s) (%d busy), got %s; "
                   "%s%s%s",
                   session_name(s, j->session), need, j->device, fb, j->n_asked, holders, j->n_busy, fr,
                   r->granted ? "granted" : "refused, short by ", sb,
                   s->meas[j->device].valid ? "" : " (the device cannot be read now)");
        comem_hop(COMEM_HOP_REPLY_SENT);
        coord_send(s, c, &m);
        coord_count_admission(s, r->granted, j->created_ns);
        if (j->freed > 0)
            coord_publish_reserve(s, j->device, true);
    }
    job_free(s, jid, j);
}

/*
 * The card's room for an admission, bounded by the ledger's books: a grant is
 * booked only while everything the ledger names plus the grant fits the
 * device's capacity, and on a unified device (UMA) the books carry the
 * machine's pinned RAM, which no card reading shows. Where the books are the
 * tighter bound, the room is lowered so that need - room is their shortfall:
 * that is what the holders are asked for and what a refusal's short_by says
 * (else a card with room would refuse short by 0 and nobody would be asked).
 */
static int64_t book_room(const comem_coord_srv *s, const job *j, int64_t avail)
{
    if (j->kind != JOB_ADMIT || j->weights <= 0)
        return avail;
    int64_t books = comem_sub(comem_sub(s->ledger.devices[j->device].capacity,
                                        comem_ledger_attributed(&s->ledger, j->device)),
                              coord_fast_inflight(s, j->device)); /* stocks are booked for their sessions */
    int64_t short_in_books = comem_sub(j->weights, books);
    return short_in_books > 0 ? comem_min(avail, comem_sub(j->need, short_in_books)) : avail;
}

/*
 * Everything other processes hold on the job's device that an ask could bring
 * back: their entries' residency and their generic holders' overhead (what the
 * release plan draws on; the requester's own models are its own to unload).
 */
static int64_t releasable_by_others(const comem_coord_srv *s, const job *j)
{
    int64_t sum = 0;
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.entries); i++) {
        const ledger_entry *e = comem_slab_at(&s->ledger.entries, i, NULL);
        if (e && e->device == j->device && e->session != j->session)
            sum = comem_add(sum, e->resident);
    }
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.holders); i++) {
        const ledger_holder *h = comem_slab_at(&s->ledger.holders, i, NULL);
        if (h && h->device == j->device && h->session != j->session && h->overhead > 0)
            sum = comem_add(sum, h->overhead);
    }
    return sum;
}

/*
 * A holder of another process on the job's device that holds bytes, answers release asks, and is
 * not asked only because it is computing: the admission may wait for its node boundary. 0: none.
 */
static uint64_t computing_holder(comem_coord_srv *s, const job *j)
{
    int64_t now = comem_now_ns();
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.holders); i++) {
        uint64_t id;
        const ledger_holder *h = comem_slab_at(&s->ledger.holders, i, &id);
        if (!h || h->device != j->device || h->session == j->session || !h->busy ||
            !(h->flags & COMEM_CAP_RELEASE) || now < h->unanswered_until_ns)
            continue;
        if (comem_add(comem_ledger_session_resident(&s->ledger, h->session, id, j->device), comem_clamp0(h->overhead)) > 0)
            return id;
    }
    return 0;
}

/* Advances a job at the head of its queue. True when it finished. */
static bool step(comem_coord_srv *s, uint64_t jid)
{
    job *j = job_get(s, jid);
    j->state = JOB_PLANNING;
    int64_t avail = coord_available(s, j->device, j->round > 0);
    if (j->round == 0)
        j->free_before = avail;
    if (j->kind == JOB_ADMIT) { /* a context measured since the last round changes the target */
        j->need = coord_need(s, j->session, j->device, j->weights, j->working);
        avail = book_room(s, j, avail);
        if (j->round == 0)
            j->free_before = avail;
    }
    if (j->kind == JOB_PRESSURE) {
        if (j->round == 0 && plan_pressure(s, jid, j) > 0) {
            j->state = JOB_ASKING;
            j->held_since_ns = comem_now_ns();
            return false;
        }
        finish(s, jid, j, false, avail);
        return true;
    }
    if (avail >= j->need) {
        finish(s, jid, j, true, avail);
        return true;
    }
    if (j->kind == JOB_ADMIT && j->round == 0 && comem_add(avail, releasable_by_others(s, j)) < j->need) {
        /* It cannot fit even if every other process gave back all it holds: say so now rather than
           empty them first (ComfyUI's own loop would unload them and then load what fits). */
        comem_info("admission: '%s' needs more than the card has free plus all other processes hold; "
                   "refused without asking anyone", session_name(s, j->session));
        finish(s, jid, j, false, avail);
        return true;
    }
    if (j->round >= COORD_MAX_ROUNDS || comem_now_ns() >= j->deadline_ns) {
        finish(s, jid, j, false, avail);
        return true;
    }
    if (plan_admit(s, jid, j, avail) == 0) {
        /* Nobody to ask now. A computing holder's bytes can be asked at its node boundary: wait for
           it, within the requester's timeout, rather than refuse (and never ask again). */
        j->waiting_for = j->kind == JOB_ADMIT ? computing_holder(s, j) : 0;
        if (!j->waiting_for) {
            finish(s, jid, j, false, avail);
            return true;
        }
        const ledger_holder *h = comem_ledger_holder(&s->ledger, j->waiting_for);
        comem_info("admission: '%s' waits for '%s' of '%s' to end its node (it computes; its bytes are asked then)",
                   session_name(s, j->session), h ? h->name : "?", h ? session_name(s, h->session) : "?");
        j->state = JOB_WAITING;
        j->held_since_ns = comem_now_ns();
        return false;
    }
    j->state = JOB_ASKING; /* waiting for receipts */
    j->held_since_ns = comem_now_ns();
    return false;
}

/*
 * Whether an ask's holder is seen giving bytes back: its process uses less of the card than when it
 * was asked. Where the card does not say per process, it is believed to be, as every ask was before.
 */
static bool ask_acting(comem_coord_srv *s, const ask *a)
{
    if (a->card_before < 0)
        return true;
    int64_t now = coord_card_use_at_ask(s, a->device, a->pid);
    return now >= 0 && now < a->card_before;
}

/*
 * The room job jid keeps from the jobs behind it: what receipts freed for it and what its asks still
 * out asked for (a holder may have freed those bytes already, its receipt on its way). An ask's bytes
 * are kept for COORD_ASK_HOLD_NS after the asks went out, and after that only while its holder's
 * process is seen giving bytes back: a stopped holder, or one whose callback never reads, holds nobody
 * back past the hold (issue 40 item 4). What receipts freed stays the job's while it asks; a job that
 * waits for a computing holder's node to end keeps it only for the hold (item 3): that wait may last
 * the node, and those behind it that fit the card pass meanwhile (it plans anew at the boundary).
 */
static int64_t keeps_room(comem_coord_srv *s, uint64_t jid, const job *j, int64_t now)
{
    bool young = now - j->held_since_ns < COORD_ASK_HOLD_NS;
    int64_t out = 0;
    for (size_t i = 0; i < comem_slab_slots(&s->asks); i++) {
        const ask *a = comem_slab_at(&s->asks, i, NULL);
        if (a && a->done == job_ask_done && a->owner == jid && (young || ask_acting(s, a)))
            out = comem_add(out, comem_clamp0(a->bytes));
    }
    bool keeps_freed = j->state != JOB_WAITING || young;
    int64_t kept = comem_add(out, keeps_freed ? comem_clamp0(j->freed) : 0);
    /* During the hold an admission counts on all of its need, not only on what its asks bring back: the
       room that was free when it planned is its too (a later one fitting in that room would leave it
       short by what it took, its receipts notwithstanding). After the hold, as above. */
    if (j->kind == JOB_ADMIT && young)
        kept = comem_max(kept, comem_clamp0(j->need));
    return kept;
}

/*
 * Behind a head that waits on its asks: grants, in FIFO order, each queued
 * admission that fits without asking anybody. The room it may take is the
 * card's less the room the jobs ahead of it keep (keeps_room: not yet booked,
 * but no later admission takes bytes a release freed for an earlier one, even
 * before its receipt is read, while that release is under way).
 * Those that do not fit keep their place and plan their asks at the head.
 */
static void decide_fitting(comem_coord_srv *s, int dev)
{
    job *head = job_get(s, s->queue_head[dev]);
    if (!head || !head->next)
        return; /* nobody behind it: nothing to decide, and no card reading for keeps_room */
    int64_t now = comem_now_ns();
    int64_t theirs = keeps_room(s, s->queue_head[dev], head, now);
    for (uint64_t id = head->next, next; id; id = next) {
        job *j = job_get(s, id);
        next = j->next;
        if (j->kind != JOB_ADMIT || j->state != JOB_QUEUED) {
            theirs = comem_add(theirs, keeps_room(s, id, j, now));
            continue;
        }
        j->need = coord_need(s, j->session, dev, j->weights, j->working);
        int64_t room = comem_sub(book_room(s, j, coord_available(s, dev, false)), theirs);
        if (room < j->need)
            continue;
        j->free_before = room;
        comem_debug("admission: '%s' fits without asking anyone; decided while '%s' waits on its asks",
                    session_name(s, j->session), session_name(s, head->session));
        finish(s, id, j, true, room);
    }
}

static void pump(comem_coord_srv *s, int dev)
{
    while (s->queue_head[dev]) {
        job *j = job_get(s, s->queue_head[dev]);
        if (j->state == JOB_ASKING || j->state == JOB_WAITING)
            break;
        if (!step(s, s->queue_head[dev]))
            break;
    }
    decide_fitting(s, dev);
}

/*
 * A new job for c's request, or 0 after answering it: COMEM_EBUSY when the
 * session already has COORD_SESSION_JOBS in flight or the coordinator
 * COORD_MAX_JOBS (each waits in a FIFO and holds its keep list).
 */
static uint64_t new_job(comem_coord_srv *s, conn *c, uint32_t rid, job_kind kind, int dev, uint32_t timeout_ms)
{
    if (c->jobs >= COORD_SESSION_JOBS) {
        coord_reply(s, c, rid, COMEM_EBUSY,
                    "too many requests in flight (" COORD_STR(COORD_SESSION_JOBS) " a process); wait for answers");
        return 0;
    }
    if (s->jobs.used >= COORD_MAX_JOBS) {
        coord_reply(s, c, rid, COMEM_EBUSY, "the coordinator has " COORD_STR(COORD_MAX_JOBS) " requests in flight; try later");
        return 0;
    }
    uint64_t id;
    job *j = comem_slab_alloc(&s->jobs, &id);
    if (!j) {
        coord_reply(s, c, rid, COMEM_ENOMEM, NULL);
        return 0;
    }
    c->jobs++;
    j->kind = kind;
    j->session = c->session;
    j->requester = c;
    j->request_id = rid;
    j->device = dev;
    j->created_ns = comem_now_ns();
    /* Whatever a request asks, it is answered by max_wait_ms with what came back: no parked request keeps
       the card from the ones behind it longer (issue 40 item 3). */
    uint32_t cap = s->cfg.max_wait_ms > 0 ? (uint32_t)s->cfg.max_wait_ms : DEFAULT_TIMEOUT_MS;
    uint32_t t = !timeout_ms ? DEFAULT_TIMEOUT_MS : timeout_ms < cap ? timeout_ms : cap;
    /* answer a little before the requester gives up waiting */
    j->deadline_ns = comem_now_ns() + (int64_t)t * 900000;
    return id;
}

void coord_admit(comem_coord_srv *s, conn *c, uint32_t rid, const comem_msg_admit *a)
{
    if (a->device >= s->ledger.n_devices) {
        coord_reply(s, c, rid, COMEM_ENODEV, "no such device");
        return;
    }
    if (a->weights < 0 || a->inference < 0 || a->cast_forward < 0) {
        coord_reply(s, c, rid, COMEM_EINVAL, "negative size");
        return;
    }
    if (a->holder_id) {
        const ledger_holder *h = comem_ledger_holder(&s->ledger, a->holder_id);
        if (!h || h->session != c->session) {
            coord_reply(s, c, rid, COMEM_ENOENT, "no such holder");
            return;
        }
    }
    comem_hop(COMEM_HOP_ADMIT_READ);
    uint64_t id = new_job(s, c, rid, JOB_ADMIT, a->device, a->timeout_ms);
    if (!id)
        return;
    job *j = job_get(s, id);
    j->holder = a->holder_id;
    j->weights = a->weights;
    j->working = comem_add(a->inference, a->cast_forward);
    if (a->n_keep) {
        j->keep = malloc(a->n_keep * sizeof a->keep[0]);
        if (!j->keep) {
            job_free(s, id, j);
            coord_reply(s, c, rid, COMEM_ENOMEM, NULL);
            return;
        }
        memcpy(j->keep, a->keep, a->n_keep * sizeof a->keep[0]);
        j->n_keep = a->n_keep;
    }
    queue_push(s, a->device, id);
    pump(s, a->device);
    job *left = job_get(s, id);
    if (left) { /* not decided at once (it waits for receipts, or behind a job that does): acknowledged
                   if still unanswered COORD_ACK_DEFER_NS from now (coord_jobs_ack) */
        left->ack_due_ns = comem_add(comem_now_ns(), COORD_ACK_DEFER_NS);
        s->acks_due++;
    }
}

void coord_jobs_ack(comem_coord_srv *s, int64_t now_ns)
{
    for (size_t i = 0; s->acks_due > 0 && i < comem_slab_slots(&s->jobs); i++) {
        job *j = comem_slab_at(&s->jobs, i, NULL);
        if (!j || !j->ack_due_ns || now_ns < j->ack_due_ns)
            continue;
        j->ack_due_ns = 0;
        s->acks_due--;
        if (j->requester) {
            comem_msg m = {.type = COMEM_MSG_ADMIT_QUEUED, .request_id = j->request_id};
            coord_send(s, j->requester, &m);
        }
    }
}

void coord_pressure(comem_coord_srv *s, conn *c, uint32_t rid, const comem_msg_pressure *p)
{
    if (p->device >= s->ledger.n_devices || p->bytes < 0) {
        coord_reply(s, c, rid, p->bytes < 0 ? COMEM_EINVAL : COMEM_ENODEV, NULL);
        return;
    }
    uint64_t id = new_job(s, c, rid, JOB_PRESSURE, p->device, p->timeout_ms);
    if (!id)
        return;
    job_get(s, id)->need = p->bytes;
    queue_push(s, p->device, id);
    pump(s, p->device);
}

/* One of a job's asks settled: its freed bytes count, a busy holder is not asked again by it. */
static void job_ask_done(comem_coord_srv *s, const ask *a, uint8_t outcome, int64_t freed)
{
    job *j = job_get(s, a->owner);
    if (!j)
        return; /* the job already finished (deadline) or its requester left */
    j->asks_out--;
    j->freed = comem_add(j->freed, comem_clamp0(freed));
    if (outcome != COMEM_RECEIPT_DONE) {
        j->n_busy++;
        if (j->n_excluded < (int)(sizeof j->excluded / sizeof j->excluded[0]))
            j->excluded[j->n_excluded++] = a->holder;
    }
    if (j->asks_out > 0)
        return;
    j->round++;
    j->state = JOB_PLANNING; /* the next round plans when pump steps it */
    pump(s, j->device);
}

void coord_jobs_session_ended(comem_coord_srv *s, uint64_t session)
{
    for (size_t i = 0; i < comem_slab_slots(&s->jobs); i++) {
        uint64_t id;
        job *j = comem_slab_at(&s->jobs, i, &id);
        if (!j || j->session != session)
            continue;
        int dev = j->device;
        /* No one is waiting for the answer: drop it, and no grant is ever booked. */
        job_free(s, id, j);
        pump(s, dev);
    }
}

void coord_jobs_boundary(comem_coord_srv *s)
{
    for (int d = 0; d < s->ledger.n_devices; d++) {
        job *j = job_get(s, s->queue_head[d]);
        if (!j || j->state != JOB_WAITING)
            continue;
        j->state = JOB_PLANNING;
        j->waiting_for = 0;
        j->n_excluded = 0; /* those that said busy may be asked again now */
        pump(s, d);
    }
}

void coord_jobs_tick(comem_coord_srv *s, int64_t now_ns)
{
    for (int d = 0; d < s->ledger.n_devices; d++) {
        uint64_t id = s->queue_head[d];
        job *j = job_get(s, id);
        if (j && (j->state == JOB_ASKING || j->state == JOB_WAITING) && now_ns >= j->deadline_ns) {
            /* The requester stops waiting soon: decide with what came back so far. */
            int64_t avail = coord_available(s, d, true);
            if (j->state == JOB_WAITING) {
                const ledger_holder *h = comem_ledger_holder(&s->ledger, j->waiting_for);
                comem_info("admission: '%s' waited for '%s' of '%s' to end its node until its timeout",
                           session_name(s, j->session), h ? h->name : "?", h ? session_name(s, h->session) : "?");
                j->n_busy++; /* the reply says a holder was busy: the one it waited for */
            }
            finish(s, id, j, j->kind == JOB_ADMIT && avail >= j->need, avail);
            pump(s, d);
        } else if (j) {
            decide_fitting(s, d); /* room may have come free without a receipt (a process ended) */
        }
    }
}
