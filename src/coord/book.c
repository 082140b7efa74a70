/*
 * coord/book.c - the coordinator's side of the booking area (coord/book.h,
 * docs/booking.md): create it, give each session its slot, reconcile what
 * clients booked into the ledger, publish the limits, hand a finished
 * session's bookings back, and count `charged` again when a process died in
 * the middle of a booking.
 *
 * The order that keeps the room honest: a reconciled booking is first a
 * ledger grant, then the lower limit is published, and only then are its
 * bytes taken out of `charged` (for a moment they count twice: safe). A limit
 * is closed before the coordinator decides an admission itself, and the
 * decision subtracts what `charged` holds (coord_available), so a slow-path
 * grant and a booking never count the same bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arith/cross_reserve.h"
#include "base/bytes.h"
#include "base/log.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

_Static_assert(BOOK_SLOTS == COORD_MAX_CONNS, "one booking slot per connection slot");

#define BOOK_MAX_STRIKES 8       /* nonsense seen this often: the fast path stays off */
#define BOOK_ACTIVE_NS 100000000 /* after a booking, the loop looks every millisecond for this long */
#define BOOK_RECOUNT_WAIT_NS 500000000 /* a recount blocked this long by a record in transition: a strike */

void comem_book_path(const char *socket_path, char *buf, size_t len) { snprintf(buf, len, "%s.book", socket_path); }

static void close_all(coord_book *b)
{
    for (int d = 0; d < COMEM_MAX_DEVICES; d++) {
        atomic_store(&b->a->dev[d].limit, BOOK_CLOSED);
        b->limit[d] = BOOK_CLOSED;
    }
}

/* Something in the area made no sense: count it; too often and the fast path stays off. */
static void strike(comem_coord_srv *s, const char *what)
{
    coord_book *b = &s->book;
    if (b->off)
        return;
    b->strikes++;
    comem_warn("booking area: %s (%d of %d); counting it again", what, b->strikes, BOOK_MAX_STRIKES);
    b->recount = true;
    if (b->strikes >= BOOK_MAX_STRIKES) {
        b->off = true;
        close_all(b);
        comem_warn("booking area: turned off after repeated nonsense; every admission goes through the socket");
    }
}

int coord_book_open(comem_coord_srv *s)
{
    coord_book *b = &s->book;
    memset(b, 0, sizeof *b);
    b->fd = -1;
    b->off = true;
    if (getenv("COMEM_NO_FAST") && strcmp(getenv("COMEM_NO_FAST"), "0") != 0) {
        comem_info("booking area: off (COMEM_NO_FAST)");
        return COMEM_OK;
    }
    comem_book_path(s->cfg.socket_path, b->link, sizeof b->link);
    struct stat st;
    if (lstat(b->link, &st) == 0 && !S_ISLNK(st.st_mode)) {
        comem_warn("booking area: %s is in the way (not a link); admissions all go through the socket", b->link);
        b->link[0] = '\0';
        return COMEM_OK;
    }
    int fd = memfd_create("comem-book", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)sizeof(book_area)) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        comem_warn("booking area: cannot create it (%s); admissions all go through the socket", strerror(errno));
        if (fd >= 0)
            close(fd);
        b->link[0] = '\0';
        return COMEM_OK;
    }
    fchmod(fd, 0600);
    book_area *a = mmap(NULL, sizeof *a, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (a == MAP_FAILED) {
        close(fd);
        b->link[0] = '\0';
        return COMEM_OK;
    }
    a->magic = BOOK_MAGIC;
    a->version = BOOK_VERSION;
    a->n_devices = (uint32_t)s->ledger.n_devices;
    a->n_slots = BOOK_SLOTS;
    a->coord_pid = (int32_t)getpid();
    b->a = a;
    b->fd = fd;
    close_all(b);
    /* Slots are left as the memfd made them (zero: no session, every record FREE) and filled in at
       HELLO: touching all 1024 at start would fault in 3.5 MiB before the socket listens. */
    /* Clients open the memfd through /proc: a link replaced atomically, never half there. */
    char target[64], tmp[PATH_MAX + 32];
    snprintf(target, sizeof target, "/proc/%d/fd/%d", (int)getpid(), fd);
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", b->link, (int)getpid());
    unlink(tmp);
    if (symlink(target, tmp) != 0 || rename(tmp, b->link) != 0) {
        comem_warn("booking area: cannot link %s (%s); admissions all go through the socket", b->link, strerror(errno));
        unlink(tmp);
        munmap(a, sizeof *a);
        close(fd);
        b->a = NULL;
        b->fd = -1;
        b->link[0] = '\0';
        return COMEM_OK;
    }
    snprintf(b->target, sizeof b->target, "%s", target);
    b->off = false;
    return COMEM_OK;
}

void coord_book_close(comem_coord_srv *s)
{
    coord_book *b = &s->book;
    if (b->a) {
        close_all(b);
        munmap(b->a, sizeof *b->a);
    }
    if (b->link[0]) {
        char now[128];
        ssize_t n = readlink(b->link, now, sizeof now - 1);
        if (n > 0) {
            now[n] = '\0';
            if (!strcmp(now, b->target)) /* still ours: a newer coordinator's link stays */
                unlink(b->link);
        }
    }
    if (b->fd >= 0)
        close(b->fd);
    b->a = NULL;
    b->fd = -1;
    b->off = true;
}

int64_t coord_fast_inflight(const comem_coord_srv *s, int device)
{
    const coord_book *b = &s->book;
    if (b->off || !b->a || device < 0 || device >= COMEM_MAX_DEVICES)
        return 0;
    int64_t v = atomic_load(&b->a->dev[device].charged);
    return v > 0 ? comem_min(v, s->ledger.devices[device].capacity) : 0; /* nonsense is bounded, then struck */
}

void coord_book_close_device(comem_coord_srv *s, int device)
{
    coord_book *b = &s->book;
    if (!b->a || device < 0 || device >= COMEM_MAX_DEVICES)
        return;
    atomic_store(&b->a->dev[device].limit, BOOK_CLOSED); /* seq_cst: then `charged` is read */
    b->limit[device] = BOOK_CLOSED;
}

void coord_book_session_start(comem_coord_srv *s, conn *c)
{
    coord_book *b = &s->book;
    if (!b->a || c->slot < 0 || c->slot >= BOOK_SLOTS)
        return;
    book_slot *sl = &b->a->slot[c->slot];
    for (int i = 0; i < BOOK_RECORDS; i++) {
        atomic_store(&sl->rec[i].state, BOOK_FREE);
        b->priv[c->slot][i] = (book_priv){0};
    }
    for (int d = 0; d < COMEM_MAX_DEVICES; d++) {
        atomic_store(&sl->reserve[d], BOOK_CLOSED);
        atomic_store(&sl->floor_add[d], 0);
    }
    atomic_store(&sl->pid, c->pid);
    b->seen[c->slot] = atomic_load(&sl->posted);
    b->seen_booked[c->slot] = atomic_load(&sl->booked);
    atomic_store(&sl->session, c->session); /* last: a client finds its slot by this */
}

/* A valid device and size for a booking, copied once; false for nonsense. */
static bool sane(const comem_coord_srv *s, int32_t dev, int64_t bytes)
{
    return dev >= 0 && dev < s->ledger.n_devices && bytes > 0 && bytes <= s->ledger.devices[dev].capacity;
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

/*
 * A finished booking: its grant (booked now if it never was) turns into
 * residency in entry, or is cancelled (entry 0). Returns the ledger's answer.
 */
static int finish_done(comem_coord_srv *s, uint64_t session, const book_priv *p, book_record *r, uint64_t entry,
                       int64_t used, int64_t *sub)
{
    int64_t now = comem_now_ns();
    int rc = COMEM_OK;
    if (used < 0)
        used = 0;
    if (p->gid) {
        ledger_grant *gr = comem_ledger_grant(&s->ledger, p->gid);
        int64_t granted_ns = gr ? comem_sub(gr->expires_ns, comem_mul(s->cfg.grant_ttl_ms, 1000000)) : 0;
        rc = gr && gr->session == session ? comem_ledger_grant_done(&s->ledger, session, p->gid, entry, used)
                                          : COMEM_ENOENT;
        if (rc == COMEM_OK && entry) {
            coord_note_done(s, p->dev, comem_min(used, p->bytes), granted_ns);
            coord_publish_reserve(s, p->dev, false);
        }
        if (p->in_charged)
            sub[p->dev] = comem_add(sub[p->dev], p->bytes);
        return rc;
    }
    /* Never reconciled (or the ledger refused it): its bytes are still in `charged`. */
    int32_t dev = p->live ? p->dev : atomic_load(&r->device);
    int64_t bytes = p->live ? p->bytes : atomic_load(&r->bytes);
    if (!sane(s, dev, bytes)) {
        strike(s, "a finished booking names no device or size that exists");
        return COMEM_EINVAL;
    }
    sub[dev] = comem_add(sub[dev], bytes);
    if (entry) { /* the residency rule is the ledger's: book it and finish it at once */
        uint64_t gid = 0;
        uint64_t holder = own_holder(s, session, atomic_load(&r->holder));
        rc = comem_ledger_grant_add(&s->ledger, session, holder, dev, bytes,
                                    expiry_of(s, atomic_load(&r->booked_ns), now), &gid);
        if (rc == COMEM_OK)
            rc = comem_ledger_grant_done(&s->ledger, session, gid, entry, used);
        if (rc == COMEM_OK) {
            coord_note_done(s, dev, comem_min(used, bytes), now);
            coord_publish_reserve(s, dev, false);
        }
    }
    return rc;
}

/* Turns one session's new bookings into ledger grants and finishes its done ones. sub: bytes leaving `charged`. */
static void reconcile_slot(comem_coord_srv *s, int slot, uint64_t session, int64_t *sub)
{
    coord_book *b = &s->book;
    book_slot *sl = &b->a->slot[slot];
    int64_t now = comem_now_ns();
    for (int i = 0; i < BOOK_RECORDS && !b->off; i++) {
        book_record *r = &sl->rec[i];
        book_priv *p = &b->priv[slot][i];
        uint32_t st = atomic_load(&r->state);
        if (st == BOOK_BOOKED) {
            uint32_t seq = atomic_load(&r->seq);
            int32_t dev = atomic_load(&r->device);
            int64_t bytes = atomic_load(&r->bytes);
            if (!sane(s, dev, bytes)) {
                strike(s, "a booking names no device or size that exists");
                continue;
            }
            uint32_t want = BOOK_BOOKED;
            if (!atomic_compare_exchange_strong(&r->state, &want, BOOK_GRANTED))
                continue; /* the client moved it on (done, cancelling): seen next time */
            *p = (book_priv){.seq = seq, .dev = dev, .bytes = bytes, .live = true};
            uint64_t holder = own_holder(s, session, atomic_load(&r->holder));
            int rc = comem_ledger_grant_add(&s->ledger, session, holder, dev, bytes,
                                            expiry_of(s, atomic_load(&r->booked_ns), now), &p->gid);
            b->reconciled++;
            if (rc == COMEM_OK) {
                atomic_store(&r->grant, p->gid);
                sub[dev] = comem_add(sub[dev], bytes);
            } else {
                p->gid = 0; /* the ledger refused it (a bound): its bytes stay counted in `charged` */
                p->in_charged = true;
            }
        } else if (st == BOOK_DONE) {
            /* A cancel of a reconciled booking (a load goes through the socket, in order with censuses). */
            uint32_t seq = atomic_load(&r->seq);
            finish_done(s, session, p->live && p->seq == seq ? p : &(book_priv){0}, r, 0, 0, sub);
            *p = (book_priv){0};
            atomic_store(&r->state, BOOK_FREE);
            b->reconciled++;
        } else if (st > BOOK_CANCELLING) {
            strike(s, "a booking record is in no state that exists");
        }
    }
}

/* A session ends: what it booked goes back. Before the ledger drops its grants. */
void coord_book_session_end(comem_coord_srv *s, conn *c)
{
    coord_book *b = &s->book;
    if (!b->a || c->slot < 0 || c->slot >= BOOK_SLOTS)
        return;
    book_slot *sl = &b->a->slot[c->slot];
    atomic_store(&sl->session, 0);
    for (int d = 0; d < COMEM_MAX_DEVICES; d++)
        atomic_store(&sl->reserve[d], BOOK_CLOSED);
    int64_t sub[COMEM_MAX_DEVICES] = {0};
    for (int i = 0; i < BOOK_RECORDS; i++) {
        book_record *r = &sl->rec[i];
        book_priv *p = &b->priv[c->slot][i];
        uint32_t st = atomic_exchange(&r->state, BOOK_FREE);
        if (st == BOOK_CLAIMED || st == BOOK_CANCELLING) {
            b->recount = true; /* it may or may not have charged: count again */
        } else if (!b->off && (st == BOOK_BOOKED || (st == BOOK_DONE && !(p->live && p->seq == atomic_load(&r->seq))))) {
            int32_t dev = atomic_load(&r->device);
            int64_t bytes = atomic_load(&r->bytes);
            if (sane(s, dev, bytes))
                sub[dev] = comem_add(sub[dev], bytes);
            else
                b->recount = true;
        } else if (!b->off && p->live && p->in_charged) {
            sub[p->dev] = comem_add(sub[p->dev], p->bytes);
        }
        *p = (book_priv){0}; /* a ledger grant it held goes with the session */
    }
    /* Handing bytes back only adds room, which is there now the session is gone. */
    for (int d = 0; d < COMEM_MAX_DEVICES && !b->recount && !b->off; d++)
        if (sub[d])
            atomic_fetch_sub(&b->a->dev[d].charged, sub[d]);
}

/* No live record in a transition: `charged` is what the records say. False: try again later. */
static bool recount(comem_coord_srv *s)
{
    coord_book *b = &s->book;
    close_all(b); /* seq_cst stores, then the records are read: a client charging now sees them closed */
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        conn *c = s->conns[i];
        if (!c || !c->session || c->slot >= BOOK_SLOTS)
            continue;
        for (int k = 0; k < BOOK_RECORDS; k++) {
            uint32_t st = atomic_load(&b->a->slot[c->slot].rec[k].state);
            if (st == BOOK_CLAIMED || st == BOOK_CANCELLING)
                return false;
        }
    }
    int64_t sub[COMEM_MAX_DEVICES] = {0};
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        conn *c = s->conns[i];
        if (c && c->session && c->slot < BOOK_SLOTS)
            reconcile_slot(s, c->slot, c->session, sub);
    }
    if (b->off)
        return true;
    int64_t held[COMEM_MAX_DEVICES] = {0};
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        conn *c = s->conns[i];
        if (!c || !c->session || c->slot >= BOOK_SLOTS)
            continue;
        for (int k = 0; k < BOOK_RECORDS; k++) {
            const book_priv *p = &b->priv[c->slot][k];
            uint32_t st = atomic_load(&b->a->slot[c->slot].rec[k].state);
            if (p->live && p->in_charged)
                held[p->dev] = comem_add(held[p->dev], p->bytes);
            else if (st == BOOK_BOOKED) { /* booked after the sweep above: still charged */
                int32_t dev = atomic_load(&b->a->slot[c->slot].rec[k].device);
                int64_t bytes = atomic_load(&b->a->slot[c->slot].rec[k].bytes);
                if (sane(s, dev, bytes))
                    held[dev] = comem_add(held[dev], bytes);
            }
        }
    }
    for (int d = 0; d < COMEM_MAX_DEVICES; d++) {
        atomic_store(&b->a->dev[d].charged, held[d]);
        b->sub[d] = 0; /* counted from the records: nothing is owed any more */
    }
    b->recount = false;
    comem_info("booking area: counted again");
    return true;
}

/* The room device d's admissions may take now, or BOOK_CLOSED. */
static int64_t limit_of(comem_coord_srv *s, int d, bool active)
{
    const measurement *m = &s->meas[d];
    if (s->queue_head[d])
        return BOOK_CLOSED; /* the coordinator decides one itself: first come, first served */
    bool reusable = m->valid && !m->stale && m->changes == s->ledger.devices[d].changes &&
                    comem_now_ns() - m->taken_ns <= (int64_t)s->cfg.reading_max_age_ms * 1000000;
    if (!reusable) {
        /* Read again to keep the limit open while bookings flow (at most every millisecond). A quiet
           card is not read for it: the next admission goes to the coordinator, which reads it. */
        if (!active || comem_now_ns() - m->taken_ns < 1000000 || coord_measure(s, d) != COMEM_OK)
            return BOOK_CLOSED;
    }
    /* Never more than the ledger itself would book: a grant that does not fit its capacity is refused. */
    int64_t room = comem_min(coord_ledger_room(s, d),
                             comem_sub(s->ledger.devices[d].capacity, comem_ledger_attributed(&s->ledger, d)));
    return room > 0 ? room : BOOK_CLOSED;
}

/* What each session's admission target keeps on each device (coord_target_terms, as admissions use). */
static void publish_targets(comem_coord_srv *s)
{
    coord_book *b = &s->book;
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        conn *c = s->conns[i];
        if (!c || !c->session || c->slot >= BOOK_SLOTS)
            continue;
        book_slot *sl = &b->a->slot[c->slot];
        for (int d = 0; d < s->ledger.n_devices; d++) {
            int64_t reserve, floor_add;
            coord_target_terms(s, c->session, d, &reserve, &floor_add);
            if (atomic_load_explicit(&sl->reserve[d], memory_order_relaxed) != reserve)
                atomic_store(&sl->reserve[d], reserve);
            if (atomic_load_explicit(&sl->floor_add[d], memory_order_relaxed) != floor_add)
                atomic_store(&sl->floor_add[d], floor_add);
        }
    }
}

void coord_book_reconcile(comem_coord_srv *s)
{
    coord_book *b = &s->book;
    if (b->off || !b->a || b->recount)
        return;
    for (int i = 0; i < COORD_MAX_CONNS; i++) {
        conn *c = s->conns[i];
        if (!c || !c->session || c->slot >= BOOK_SLOTS)
            continue;
        uint32_t posted = atomic_load(&b->a->slot[c->slot].posted);
        if (posted == b->seen[c->slot])
            continue;
        b->seen[c->slot] = posted;
        b->active_until_ns = comem_now_ns() + BOOK_ACTIVE_NS;
        /* Bookings count as admissions granted (decided in well under a microsecond: the first
           latency bucket); a count that jumps absurdly is somebody's scribbling, not counted. */
        uint32_t booked = atomic_load(&b->a->slot[c->slot].booked), n = booked - b->seen_booked[c->slot];
        b->seen_booked[c->slot] = booked;
        if (n < (1u << 24)) {
            s->counters.admissions += n;
            s->counters.latency_counts[0] += n;
        }
        reconcile_slot(s, c->slot, c->session, b->sub); /* taken out of `charged` after the next publish */
    }
}

/* Tells clients until when the loop looks at the area often (coord/book.h looking_until_ns). */
static void publish_looking(coord_book *b)
{
    atomic_store_explicit(&b->a->looking_until_ns, b->recount ? INT64_MAX : b->active_until_ns,
                          memory_order_relaxed);
}

void coord_book_sync(comem_coord_srv *s)
{
    coord_book *b = &s->book;
    if (b->off || !b->a)
        return;
    int64_t now = comem_now_ns();
    /* The limits are the coordinator's word, never read back. */
    for (int d = 0; d < COMEM_MAX_DEVICES; d++) {
        if (atomic_load(&b->a->dev[d].limit) != b->limit[d]) {
            atomic_store(&b->a->dev[d].limit, b->limit[d]);
            strike(s, "a limit was changed by someone else");
        }
        if (atomic_load(&b->a->dev[d].charged) < 0)
            strike(s, "charged bytes went below zero");
    }
    if (b->recount && !recount(s)) {
        b->active_until_ns = now + BOOK_ACTIVE_NS; /* look again soon */
        publish_looking(b);
        if (!b->recount_since_ns)
            b->recount_since_ns = now;
        else if (now - b->recount_since_ns > BOOK_RECOUNT_WAIT_NS) {
            b->recount_since_ns = now;
            strike(s, "a record stayed half-written (a stopped process, or scribbling)");
        }
        return;
    }
    b->recount_since_ns = 0;
    if (b->off)
        return;
    int64_t sub[COMEM_MAX_DEVICES] = {0};
    coord_book_reconcile(s);
    if (b->off || (b->recount && !recount(s)))
        return;
    bool active = now < b->active_until_ns;
    publish_looking(b);
    publish_targets(s);
    for (int d = 0; d < s->ledger.n_devices; d++) {
        int64_t lim = limit_of(s, d, active);
        if (lim != b->limit[d]) {
            atomic_store(&b->a->dev[d].limit, lim);
            b->limit[d] = lim;
        }
        atomic_store_explicit(&b->a->dev[d].confirmed_ns, now, memory_order_relaxed);
    }
    /* Published first, taken out second: for a moment the bytes count twice, never zero times. */
    for (int d = 0; d < s->ledger.n_devices; d++) {
        int64_t out = comem_add(sub[d], b->sub[d]);
        b->sub[d] = 0;
        if (out)
            atomic_fetch_sub(&b->a->dev[d].charged, out);
    }
}

int coord_book_grant_done(comem_coord_srv *s, conn *c, uint64_t ref, uint64_t entry, int64_t used)
{
    coord_book *b = &s->book;
    uint32_t idx = (uint32_t)(ref >> 32) & 0x7fffffffu, seq = (uint32_t)ref;
    if (b->off || !b->a || c->slot < 0 || c->slot >= BOOK_SLOTS || idx >= BOOK_RECORDS)
        return COMEM_ENOENT;
    reconcile_slot(s, c->slot, c->session, b->sub); /* it may still be only BOOKED */
    book_record *r = &b->a->slot[c->slot].rec[idx];
    book_priv *p = &b->priv[c->slot][idx];
    if (b->off || atomic_load(&r->state) != BOOK_GRANTED || !p->live || p->seq != seq)
        return COMEM_ENOENT; /* not a booking of this session now (expired and reset, or scribbled) */
    int rc = finish_done(s, c->session, p, r, entry, used, b->sub);
    *p = (book_priv){0};
    atomic_store(&r->state, BOOK_FREE);
    b->reconciled++;
    return rc;
}

bool coord_book_active(const comem_coord_srv *s)
{
    const coord_book *b = &s->book;
    return !b->off && b->a && (b->recount || comem_now_ns() < b->active_until_ns);
}
