/*
 * coord/stock.c - how much each booking area may spend: at the end of every
 * loop turn the bookings are reconciled and policed (book.c), then each
 * device's room (room.c) is shared among the sessions that admitted there
 * lately, each stock sized so that spending all of it still leaves the
 * largest reserve and context floor free, and the new limits published before
 * the reconciled bytes are taken out of `charged` (book.c).
 */
#include <stdatomic.h>

#include "base/bytes.h"
#include "base/clock.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

/* The room device d's stocks may take now, or BOOK_CLOSED (coordinator's own reading, never the areas'). */
static int64_t room_of(comem_coord_srv *s, int d, bool wanted)
{
    const measurement *m = &s->meas[d];
    if (s->queue_head[d])
        return BOOK_CLOSED; /* the coordinator decides one itself: first come, first served */
    bool reusable = m->valid && !m->stale && m->changes == s->ledger.devices[d].changes &&
                    comem_now_ns() - m->taken_ns <= (int64_t)s->cfg.reading_max_age_ms * 1000000;
    if (!reusable) {
        /* Read again to keep stocks while sessions admit (at most every millisecond). A quiet card is
           not read for it: the next admission goes to the coordinator, which reads it. */
        if (!wanted || comem_now_ns() - m->taken_ns < 1000000 || coord_measure(s, d) != COMEM_OK)
            return BOOK_CLOSED;
    }
    int64_t room = coord_stock_room(s, d); /* never more than the ledger itself would book */
    return room > 0 ? room : BOOK_CLOSED;
}

/*
 * Device d's stocks for this turn: sessions that admitted there lately share the room equally,
 * each stock sized so that spending all of it still leaves the largest reserve and context floor
 * free (so a booking never takes what the socket path would refuse); the others' is taken back.
 */
static void restock(comem_coord_srv *s, int d, int64_t now)
{
    coord_book *b = &s->book;
    int n_want = 0;
    int64_t margin = 0;
    for (int i = 0; i < b->n_live; i++) {
        book_sess *bs = &b->sess[b->live[i]];
        conn *c = s->conns[b->live[i]];
        bool wants = !bs->off && c && c->session && now < bs->wants_until_ns[d];
        if (!wants) {
            coord_book_take_back(bs, d, 0);
            continue;
        }
        int64_t reserve, floor_add;
        coord_target_terms(s, c->session, d, &reserve, &floor_add);
        bs->margin[d] = comem_add(reserve, floor_add);
        margin = comem_max(margin, bs->margin[d]);
        n_want++;
    }
    if (!n_want)
        return;
    int64_t room = room_of(s, d, true);
    if (room < 0) { /* closed: nobody books on d this turn */
        for (int i = 0; i < b->n_live; i++)
            coord_book_take_back(&b->sess[b->live[i]], d, 0);
        return;
    }
    int64_t share = comem_clamp0(comem_sub(room, margin)) / n_want;
    /* Shrink first, then grow within what is left: the sum of stocks never passes room - margin. */
    for (int i = 0; i < b->n_live; i++) {
        book_sess *bs = &b->sess[b->live[i]];
        if (!bs->off && now < bs->wants_until_ns[d] && bs->stock[d] > share)
            coord_book_take_back(bs, d, share);
    }
    int64_t left = comem_sub(comem_sub(room, margin), coord_fast_inflight(s, d));
    for (int i = 0; i < b->n_live; i++) {
        book_sess *bs = &b->sess[b->live[i]];
        if (bs->off || now >= bs->wants_until_ns[d])
            continue;
        int64_t grow = comem_min(comem_sub(share, bs->stock[d]), left);
        if (grow > 0) {
            bs->stock[d] = comem_add(bs->stock[d], grow);
            left = comem_sub(left, grow);
        }
        coord_book_limit(bs, d, bs->stock[d] > 0 ? bs->stock[d] : BOOK_CLOSED);
        if (atomic_load_explicit(&bs->a->dev[d].reserve, memory_order_relaxed) != bs->margin[d])
            atomic_store_explicit(&bs->a->dev[d].reserve, bs->margin[d], memory_order_relaxed);
    }
}

void coord_book_sync(comem_coord_srv *s)
{
    if (!s->book.n_live)
        return;
    int64_t now = comem_now_ns();
    coord_book_police(s);
    coord_book_reconcile(s);
    coord_book_publish_maps(s);
    for (int d = 0; d < s->ledger.n_devices; d++)
        restock(s, d, now);
    coord_book_confirm(s, now);
}
