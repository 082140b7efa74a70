/*
 * coord/book.c - the coordinator's side of the booking areas (shm/book.h,
 * docs/booking.md): give each admitting session an area of its own, reconcile
 * what it booked into the ledger, police what it wrote, take back what is
 * unspent. How much each stock holds is decided above, in stock.c, from the
 * room room.c defines; this file never reads the card.
 *
 * The one rule that keeps every other session's bytes safe: a booking becomes
 * a ledger grant only out of the stock this coordinator holds for the session
 * that booked it (`book_sess.stock`, never the area's word). The order that
 * keeps a session's own room honest: a reconciled booking is first a ledger
 * grant, then the lower limit is published, and only then are its bytes taken
 * out of `charged` (for a moment they count twice: safe).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/clock.h"
#include "base/log.h"
#include "comem/common.h"
#include "coord/coord_internal.h"
#include "os/env.h"

#define BOOK_ACTIVE_NS 100000000 /* after a booking, the loop looks every 250 us for this long */
#define BOOK_WANT_NS 100000000   /* a session keeps a stock on a device this long after it admitted there */
#define BOOK_OVER_NS 1000000000LL /* `charged` above the stock longer than this is not a booking rolling back */
/*
 * `charged` that no booking accounts for, held this long, is a stock kept out of everyone's room
 * (check_still). An honest booking is charged from its fetch_add until the coordinator's next turn
 * reconciles it: 250 us while bookings flow, 20 ms (the timer) at the slowest, at once on its
 * BOOKED. 5 s is 250 times that; only a process stopped inside a booking for as long looks the
 * same, and its fast path closing costs it round trips, nothing else.
 */
#define BOOK_STILL_NS 5000000000LL

void coord_book_open(comem_coord_srv *s)
{
    coord_book *b = &s->book;
    memset(b, 0, sizeof *b);
    const char *no = comem_env("COMEM_NO_FAST");
    b->off = no && *no && strcmp(no, "0") != 0;
    if (b->off)
        comem_info("booking areas: off (COMEM_NO_FAST)");
}

static book_sess *sess_of(comem_coord_srv *s, const conn *c)
{
    return c->slot >= 0 && c->slot < COORD_MAX_CONNS && s->book.sess[c->slot].a ? &s->book.sess[c->slot] : NULL;
}

/* Publishes a limit (seq_cst: a take-back reads `charged` after it). */
void coord_book_limit(book_sess *bs, int d, int64_t lim)
{
    if (lim != bs->limit[d] || atomic_load_explicit(&bs->a->dev[d].limit, memory_order_relaxed) != lim)
        atomic_store(&bs->a->dev[d].limit, lim);
    bs->limit[d] = lim;
}

/* What a session may have charged on d and not reconciled: its word, bounded by its stock. */
static int64_t charged_bound(const book_sess *bs, int d)
{
    int64_t c = atomic_load(&bs->a->dev[d].charged);
    return comem_min(comem_clamp0(c), bs->stock[d]);
}

/*
 * Takes a session's unspent stock on d back down to `to` (0: the limit closes). A booking racing
 * this either read the old limit before the store, and then its charge is seen by the load that
 * follows it, or reads the lower limit and rolls back: the stock never drops below it.
 */
void coord_book_take_back(book_sess *bs, int d, int64_t to)
{
    if (bs->stock[d] <= to && (to > 0 || bs->limit[d] == BOOK_CLOSED))
        return;
    coord_book_limit(bs, d, to > 0 ? to : BOOK_CLOSED);
    bs->stock[d] = comem_max(to, charged_bound(bs, d));
}

/* Something in a session's area made no sense: its fast path is off for its life, its stock returned. */
static void strike(comem_coord_srv *s, book_sess *bs, uint64_t session, const char *what)
{
    if (bs->off)
        return;
    coord_book *b = &s->book;
    b->strikes++;
    bs->off = true;
    const ledger_session *ss = comem_ledger_session(&s->ledger, session);
    comem_warn("booking area of '%s' (pid %d): %s; its fast path is off, its admissions go through the socket",
               ss ? ss->name : "?", ss ? (int)ss->pid : 0, what);
    for (int d = 0; d < COMEM_MAX_DEVICES; d++) {
        coord_book_limit(bs, d, BOOK_CLOSED);
        bs->stock[d] = 0; /* what it booked and the ledger does not hold is its own doing */
        bs->sub[d] = 0;
    }
}

bool coord_book_session_start(comem_coord_srv *s, conn *c, int role, comem_shm_token *share)
{
    coord_book *b = &s->book;
    if (b->off || role == COMEM_ROLE_TOOL || c->slot < 0 || c->slot >= COORD_MAX_CONNS || c->out_len != 0)
        return false; /* a tool admits nothing; the area must ride on the first bytes the client reads */
    book_sess *bs = &b->sess[c->slot];
    *bs = (book_sess){0};
    comem_shm *m = NULL;
    int rc = comem_shm_create("comem-stock", sizeof(book_area), &m);
    if (rc == COMEM_OK && (rc = comem_shm_share(m, c->pid, true, share)) != COMEM_OK)
        comem_shm_close(m);
    if (rc != COMEM_OK) {
        if (!b->warned)
            comem_warn("booking areas: cannot create one (%s); admissions go through the socket", comem_status_str(rc));
        b->warned = true;
        return false;
    }
    comem_shm_stop_sharing(m); /* the share is the only way in now: it goes to the client alone */
    book_area *a = comem_shm_addr(m);
    a->magic = BOOK_MAGIC;
    a->version = BOOK_VERSION;
    a->n_devices = (uint32_t)s->ledger.n_devices;
    a->session = c->session;
    a->coord_pid = (int32_t)getpid();
    a->pid = c->pid;
    bs->m = m;
    bs->a = a;
    for (int d = 0; d < COMEM_MAX_DEVICES; d++) {
        atomic_store(&a->dev[d].limit, BOOK_CLOSED);
        bs->limit[d] = BOOK_CLOSED;
        bs->map[d] = -1;
        atomic_store(&a->map[d], -1);
    }
    b->live[b->n_live++] = c->slot;
    return true;
}

void coord_book_session_end(comem_coord_srv *s, conn *c)
{
    coord_book *b = &s->book;
    book_sess *bs = sess_of(s, c);
    if (!bs)
        return;
    comem_shm_close(bs->m);
    *bs = (book_sess){0}; /* its stock goes with it; the ledger drops its grants next */
    for (int i = 0; i < b->n_live; i++)
        if (b->live[i] == c->slot) {
            b->live[i] = b->live[--b->n_live];
            break;
        }
}

void coord_book_wants(comem_coord_srv *s, uint64_t session, int device)
{
    if (device == s->ram_index)
        return; /* host RAM admits by its own rule (arith/ram_cache.h), never the card's one the areas book by */
    conn *c = coord_conn_of(s, session);
    book_sess *bs = c ? sess_of(s, c) : NULL;
    if (bs && device >= 0 && device < COMEM_MAX_DEVICES)
        bs->wants_until_ns[device] = comem_now_ns() + BOOK_WANT_NS;
}

int64_t coord_fast_inflight(const comem_coord_srv *s, int device)
{
    const coord_book *b = &s->book;
    int64_t sum = 0;
    for (int i = 0; i < b->n_live; i++)
        sum = comem_add(sum, b->sess[b->live[i]].stock[device]);
    return sum;
}

int64_t coord_fast_booked(comem_coord_srv *s, int device)
{
    coord_book *b = &s->book;
    int64_t sum = 0;
    for (int i = 0; i < b->n_live; i++)
        if (!b->sess[b->live[i]].off)
            sum = comem_add(sum, charged_bound(&b->sess[b->live[i]], device));
    return sum;
}

int64_t coord_fast_limit(const comem_coord_srv *s, int device)
{
    const coord_book *b = &s->book;
    int64_t most = BOOK_CLOSED;
    for (int i = 0; i < b->n_live; i++)
        most = comem_max(most, b->sess[b->live[i]].limit[device]);
    return most;
}

void coord_book_close_device(comem_coord_srv *s, int device)
{
    coord_book *b = &s->book;
    if (device < 0 || device >= COMEM_MAX_DEVICES)
        return;
    for (int i = 0; i < b->n_live; i++)
        coord_book_take_back(&b->sess[b->live[i]], device, 0);
}

/* A booking's grant expiry: from when it was booked (clamped: the client's clock is its word). */
static int64_t expiry_of(const comem_coord_srv *s, int64_t booked_ns, int64_t now)
{
    int64_t ttl = comem_mul(s->cfg.grant_ttl_ms, 1000000);
    if (booked_ns > now || booked_ns < comem_sub(now, ttl))
        booked_ns = now;
    return comem_add(booked_ns, ttl);
}

/* A holder the booking may name: the session's own, else none. */
static uint64_t own_holder(comem_coord_srv *s, uint64_t session, uint64_t holder)
{
    const ledger_holder *h = holder ? comem_ledger_holder(&s->ledger, holder) : NULL;
    return h && h->session == session ? holder : 0;
}

/* A booking spends its stock: the ledger holds it now (or the refusal leaves it charged). */
static void spend(book_sess *bs, int d, int64_t bytes)
{
    bs->stock[d] = comem_clamp0(comem_sub(bs->stock[d], bytes));
    bs->sub[d] = comem_add(bs->sub[d], bytes); /* out of `charged` after the next publish */
}

/*
 * A finished booking: its grant (booked now if the ledger refused it at first) turns into
 * residency in entry, or is cancelled (entry 0). Returns the ledger's answer; *filled says what
 * became residency (device -1: nothing), for the caller to tell the reading and the reserve.
 */
static int finish_done(comem_coord_srv *s, book_sess *bs, uint64_t session, book_priv *p, uint64_t entry,
                       int64_t used, int64_t booked_ns, coord_filled *filled)
{
    int64_t now = comem_now_ns();
    used = comem_clamp0(used);
    *filled = (coord_filled){.device = -1};
    if (p->gid) {
        ledger_grant *gr = comem_ledger_grant(&s->ledger, p->gid);
        int64_t granted_ns = gr ? comem_sub(gr->expires_ns, comem_mul(s->cfg.grant_ttl_ms, 1000000)) : 0;
        int rc = gr && gr->session == session ? comem_ledger_grant_done(&s->ledger, session, p->gid, entry, used)
                                              : COMEM_ENOENT;
        if (rc == COMEM_OK && entry)
            *filled = (coord_filled){.device = p->dev, .bytes = comem_min(used, p->bytes), .granted_ns = granted_ns};
        return rc;
    }
    /* The ledger refused it when it was reconciled: its bytes are still charged, in the stock. */
    if (!entry) {
        bs->sub[p->dev] = comem_add(bs->sub[p->dev], p->bytes);
        return COMEM_OK;
    }
    uint64_t gid = 0;
    int rc = comem_ledger_grant_add(&s->ledger, session, p->holder, p->dev, p->bytes, expiry_of(s, booked_ns, now),
                                    &gid);
    if (rc == COMEM_OK)
        rc = comem_ledger_grant_done(&s->ledger, session, gid, entry, used);
    if (rc == COMEM_OK) {
        spend(bs, p->dev, p->bytes);
        *filled = (coord_filled){.device = p->dev, .bytes = comem_min(used, p->bytes), .granted_ns = now};
    } else {
        bs->sub[p->dev] = comem_add(bs->sub[p->dev], p->bytes);
    }
    return rc;
}

/* One BOOKED record becomes a ledger grant, out of the session's stock and nothing else. */
static void reconcile_booked(comem_coord_srv *s, book_sess *bs, uint64_t session, book_record *r, book_priv *p,
                             int64_t now)
{
    uint32_t seq = atomic_load(&r->seq);
    int32_t dev = atomic_load(&r->device);
    int64_t bytes = atomic_load(&r->bytes);
    if (dev < 0 || dev >= s->ledger.n_devices || bytes <= 0) {
        strike(s, bs, session, "a booking names no device or size that exists");
        return;
    }
    if (bytes > bs->stock[dev]) {
        strike(s, bs, session, "it booked more than the stock held for it");
        return;
    }
    uint32_t want = BOOK_BOOKED;
    if (!atomic_compare_exchange_strong(&r->state, &want, BOOK_GRANTED))
        return; /* the client moved it on (cancelling): seen next time */
    *p = (book_priv){.seq = seq, .dev = dev, .bytes = bytes, .live = true,
                     .holder = own_holder(s, session, atomic_load(&r->holder)),
                     .booked_ns = atomic_load(&r->booked_ns)};
    int rc = comem_ledger_grant_add(&s->ledger, session, p->holder, dev, bytes, expiry_of(s, p->booked_ns, now),
                                    &p->gid);
    s->book.reconciled++;
    coord_count_admission(s, true, now); /* seen and decided by the coordinator now: the first latency bucket */
    bs->wants_until_ns[dev] = comem_add(now, BOOK_WANT_NS);
    bs->still_done[dev] = comem_add(bs->still_done[dev], bytes); /* what stood behind its charge (check_still) */
    if (rc == COMEM_OK) {
        atomic_store(&r->grant, p->gid);
        spend(bs, dev, bytes);
    } else {
        p->gid = 0; /* the ledger refused it (a bound): it stays charged, in the stock, until finished */
    }
}

/* Turns one session's new bookings into ledger grants and finishes its cancelled ones. */
static void reconcile_sess(comem_coord_srv *s, book_sess *bs, uint64_t session)
{
    int64_t now = comem_now_ns();
    for (int i = 0; i < BOOK_RECORDS && !bs->off; i++) {
        book_record *r = &bs->a->rec[i];
        book_priv *p = &bs->priv[i];
        uint32_t st = atomic_load(&r->state);
        if (st == BOOK_BOOKED) {
            reconcile_booked(s, bs, session, r, p, now);
        } else if (st == BOOK_DONE) {
            /* A cancel of a reconciled booking (a load goes through the socket, in order with censuses). */
            if (!p->live || p->seq != atomic_load(&r->seq)) {
                strike(s, bs, session, "a record reads done that was never granted");
                return;
            }
            coord_filled none;
            finish_done(s, bs, session, p, 0, 0, p->booked_ns, &none); /* a cancel: nothing is filled */
            *p = (book_priv){0};
            atomic_store(&r->state, BOOK_FREE);
            s->book.reconciled++;
        } else if (st > BOOK_CANCELLING) {
            strike(s, bs, session, "a booking record is in no state that exists");
        }
    }
}

void coord_book_reconcile(comem_coord_srv *s)
{
    coord_book *b = &s->book;
    for (int i = 0; i < b->n_live; i++) {
        conn *c = s->conns[b->live[i]];
        book_sess *bs = &b->sess[b->live[i]];
        if (bs->off || !c || !c->session)
            continue;
        uint32_t posted = atomic_load(&bs->a->posted);
        if (posted == bs->seen)
            continue;
        bs->seen = posted;
        b->active_until_ns = comem_now_ns() + BOOK_ACTIVE_NS;
        reconcile_sess(s, bs, c->session);
    }
}

/* Bytes of d's bookings reconciled that the ledger refused: they stay charged, honestly, until finished. */
static int64_t refused_on(const book_sess *bs, int d)
{
    int64_t sum = 0;
    for (int i = 0; i < BOOK_RECORDS; i++)
        if (bs->priv[i].live && !bs->priv[i].gid && bs->priv[i].dev == d)
            sum = comem_add(sum, bs->priv[i].bytes);
    return sum;
}

/*
 * A quiet stock: `charged` held at or under the stock with nothing behind it keeps the stock out of
 * everyone's room for good (a take-back leaves a stock of what is charged). Behind a charge the
 * coordinator knows bytes reconciled and being taken out (sub), and bookings the ledger refused;
 * the rest are bookings in flight, each reconciled at the coordinator's next turn. So over any
 * BOOK_STILL_NS in which the rest never fell to zero, its least must be covered by the bookings
 * reconciled meanwhile; a charge that stood still, or moved without bookings, is not. That is the
 * offence BOOK_OVER_NS strikes above the stock (a stock taken back from under the charge would be
 * struck by it a second later), so it is a strike here too: stock returned, fast path off.
 */
static void check_still(comem_coord_srv *s, book_sess *bs, uint64_t session, int d, int64_t charged, int64_t now)
{
    int64_t rest = comem_sub(charged, bs->sub[d]);
    if (rest > 0)
        rest = comem_sub(rest, refused_on(bs, d)); /* only read when something is charged: rare, and short */
    if (rest <= 0) {
        bs->still_since_ns[d] = 0;
        return;
    }
    if (bs->still_since_ns[d] && now - bs->still_since_ns[d] <= BOOK_STILL_NS) {
        bs->still_least[d] = comem_min(bs->still_least[d], rest);
        return;
    }
    if (bs->still_since_ns[d] && comem_min(bs->still_least[d], rest) > bs->still_done[d]) {
        strike(s, bs, session, "its charged bytes stood with no booking behind them");
        return;
    }
    bs->still_since_ns[d] = now; /* a new span: the first, or the last one was covered by bookings */
    bs->still_least[d] = rest;
    bs->still_done[d] = 0;
}

/* The limits and the map are the coordinator's word and `charged` never goes below zero: else it is scribbling. */
static void check_words(comem_coord_srv *s, book_sess *bs, uint64_t session)
{
    int64_t now = comem_now_ns();
    for (int d = 0; d < s->ledger.n_devices && !bs->off; d++) {
        int64_t charged = atomic_load(&bs->a->dev[d].charged);
        if (atomic_load(&bs->a->dev[d].limit) != bs->limit[d])
            strike(s, bs, session, "its limit was changed by someone other than the coordinator");
        else if (charged < 0)
            strike(s, bs, session, "its charged bytes went below zero");
        else if (comem_sub(charged, bs->sub[d]) <= bs->stock[d])
            bs->over_since_ns[d] = 0;
        else if (!bs->over_since_ns[d]) /* a booking that does not fit is above for a moment, then rolled back */
            bs->over_since_ns[d] = now;
        else if (now - bs->over_since_ns[d] > BOOK_OVER_NS) /* held there: it would keep its stock for good */
            strike(s, bs, session, "its charged bytes stayed above its stock");
        if (!bs->off)
            check_still(s, bs, session, d, charged, now);
    }
    for (int o = 0; o < COMEM_MAX_DEVICES && !bs->off; o++)
        if (atomic_load_explicit(&bs->a->map[o], memory_order_relaxed) != bs->map[o])
            strike(s, bs, session, "its device map was changed by someone other than the coordinator");
}

/* Which of the coordinator's devices each of the process's ordinals names (its DEVICE_MAP). */
static void publish_map(comem_coord_srv *s, book_sess *bs, const conn *c)
{
    for (int o = 0; o < COMEM_MAX_DEVICES; o++) {
        int d = coord_device_in(c, (uint16_t)o);
        int8_t m = (int8_t)(d < s->ledger.n_devices && d != s->ram_index ? d : -1); /* host RAM: never booked here */
        if (m != bs->map[o]) {
            bs->map[o] = m;
            atomic_store(&bs->a->map[o], m);
        }
    }
}

void coord_book_police(comem_coord_srv *s)
{
    coord_book *b = &s->book;
    for (int i = 0; i < b->n_live; i++) {
        conn *c = s->conns[b->live[i]];
        if (c && c->session)
            check_words(s, &b->sess[b->live[i]], c->session);
    }
}

void coord_book_publish_maps(comem_coord_srv *s)
{
    coord_book *b = &s->book;
    for (int i = 0; i < b->n_live; i++) {
        conn *c = s->conns[b->live[i]];
        if (c && c->session && !b->sess[b->live[i]].off)
            publish_map(s, &b->sess[b->live[i]], c);
    }
}

void coord_book_confirm(comem_coord_srv *s, int64_t now)
{
    coord_book *b = &s->book;
    /* Published first, taken out second: for a moment the bytes count twice, never zero times. */
    int64_t looking = b->active_until_ns;
    for (int i = 0; i < b->n_live; i++) {
        book_sess *bs = &b->sess[b->live[i]];
        for (int d = 0; d < s->ledger.n_devices; d++) {
            if (bs->sub[d])
                atomic_fetch_sub(&bs->a->dev[d].charged, bs->sub[d]);
            bs->sub[d] = 0;
        }
        atomic_store_explicit(&bs->a->looking_until_ns, looking, memory_order_relaxed);
        atomic_store_explicit(&bs->a->confirmed_ns, now, memory_order_relaxed);
    }
}

int coord_book_grant_done(comem_coord_srv *s, conn *c, uint64_t ref, uint64_t entry, int64_t used,
                          coord_filled *filled)
{
    *filled = (coord_filled){.device = -1};
    book_sess *bs = sess_of(s, c);
    uint32_t idx = (uint32_t)(ref >> 32) & 0x7fffffffu, seq = (uint32_t)ref;
    if (!bs || idx >= BOOK_RECORDS)
        return COMEM_ENOENT;
    if (!bs->off)
        reconcile_sess(s, bs, c->session); /* it may still be only BOOKED */
    book_record *r = &bs->a->rec[idx];
    book_priv *p = &bs->priv[idx];
    if (!p->live || p->seq != seq)
        return COMEM_ENOENT; /* not a booking of this session now (never booked, or scribbled) */
    int rc = finish_done(s, bs, c->session, p, entry, used, p->booked_ns, filled);
    *p = (book_priv){0};
    atomic_store(&r->state, BOOK_FREE);
    s->book.reconciled++;
    return rc;
}

bool coord_book_active(const comem_coord_srv *s)
{
    const coord_book *b = &s->book;
    return b->n_live > 0 && comem_now_ns() < b->active_until_ns;
}
