/*
 * client/fast.c - admissions that fit, booked in the coordinator's booking
 * area without a round trip (coord/book.h has the layout and the rules,
 * docs/booking.md the whole story).
 *
 * After every accepted HELLO the service thread maps the area the coordinator
 * links next to its socket and finds this session's slot (the coordinator
 * writes the session id there before it replies). A booking is charged
 * first, compared with the limit, and rolled back when it does not fit, so
 * racing clients never share bytes; a booking that does not fit, or any
 * doubt (no area, a closed limit, no free record), goes to the coordinator
 * as before, which may ask holders for room. A mapping is never unmapped
 * while the client lives (a caller may still be inside it); a new
 * connection maps the new coordinator's area beside it.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arith/cross_reserve.h"
#include "base/bytes.h"
#include "base/clock.h"
#include "base/log.h"
#include "client/client_internal.h"

struct client_fast {
    book_area *a;
    book_slot *slot;
    uint64_t gen;
    int n_devices;
    _Atomic uint32_t hint; /* where the next claim starts looking */
    int stall;             /* COMEM_TEST_FAST_STALL, read when mapped */
    struct client_fast *next;
};

static int stall_mode(void)
{
    const char *e = getenv("COMEM_TEST_FAST_STALL");
    return !e ? 0 : !strcmp(e, "charged") ? 1 : !strcmp(e, "booked") ? 2 : 0;
}

void comem_fast_attach(comem_client *c, uint64_t gen, uint64_t session)
{
    const char *off = getenv("COMEM_NO_FAST");
    if (off && *off && strcmp(off, "0") != 0)
        return;
    char link[COMEM_CLIENT_PATH_MAX + 8];
    comem_book_path(c->path, link, sizeof link);
    int fd = open(link, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return; /* an older coordinator, or none: every admission goes through the socket */
    struct stat st;
    book_area *a = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == getuid() && st.st_size == (off_t)sizeof(book_area))
        a = mmap(NULL, sizeof *a, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (a == MAP_FAILED)
        return;
    book_slot *slot = NULL;
    if (a->magic == BOOK_MAGIC && a->version == BOOK_VERSION && a->n_devices <= COMEM_MAX_DEVICES) {
        for (int i = 0; i < BOOK_SLOTS && !slot; i++)
            if (atomic_load(&a->slot[i].session) == session && atomic_load(&a->slot[i].pid) == (int32_t)getpid())
                slot = &a->slot[i];
    }
    client_fast *f = slot ? calloc(1, sizeof *f) : NULL;
    if (!f) {
        munmap(a, sizeof *a);
        return;
    }
    f->a = a;
    f->slot = slot;
    f->gen = gen;
    f->n_devices = (int)a->n_devices;
    f->stall = stall_mode();
    pthread_mutex_lock(&c->lock);
    f->next = c->fast_all;
    c->fast_all = f;
    atomic_store(&c->fast, f);
    pthread_mutex_unlock(&c->lock);
    comem_debug("booking area mapped: admissions that fit take no round trip");
}

void comem_fast_detach(comem_client *c) { atomic_store(&c->fast, NULL); }

void comem_fast_free(comem_client *c)
{
    client_fast *f = c->fast_all;
    while (f) {
        client_fast *next = f->next;
        munmap(f->a, sizeof *f->a);
        free(f);
        f = next;
    }
    c->fast_all = NULL;
    atomic_store(&c->fast, NULL);
}

bool comem_fast_coordinator_dozing(const client_fast *f, int64_t now_ns)
{
    int64_t until = atomic_load_explicit(&f->a->looking_until_ns, memory_order_relaxed);
    return now_ns >= until - BOOK_NUDGE_EARLY_NS;
}

client_fast *comem_fast_for(comem_client *c, uint64_t gen)
{
    client_fast *f = atomic_load_explicit(&c->fast, memory_order_acquire);
    return f && f->gen == gen ? f : NULL;
}

/*
 * A test hook: COMEM_TEST_FAST_STALL=charged stops a booking between its charge
 * and its record, =booked between its record and telling the coordinator, so a
 * test can SIGKILL a process exactly there.
 */
static void test_stall(const client_fast *f, int where)
{
    if (f->stall == where)
        for (;;)
            pause();
}

bool comem_fast_book(client_fast *f, int device, uint64_t holder, int64_t weights, int64_t working,
                     client_grant *g, client_admission *fig)
{
    if (!f || device < 0 || device >= f->n_devices || weights <= 0)
        return false;
    book_slot *sl = f->slot;
    book_device *d = &f->a->dev[device];
    int64_t reserve = atomic_load_explicit(&sl->reserve[device], memory_order_acquire);
    if (reserve < 0)
        return false;
    /* The coordinator's target (coord/admit.c need_of), with the reserve it keeps for this session. */
    int64_t need = comem_add(comem_admit_target(weights, working, reserve),
                             comem_clamp0(atomic_load_explicit(&sl->floor_add[device], memory_order_relaxed)));
    if (atomic_load_explicit(&d->limit, memory_order_relaxed) < need)
        return false; /* closed, or plainly too small: the coordinator may make room */
    int64_t now = comem_now_ns(); /* one reading: the limit's age, the booking's time, the doze check */
    if (now - atomic_load_explicit(&d->confirmed_ns, memory_order_relaxed) > BOOK_STALE_NS)
        return false; /* not confirmed lately: the coordinator is stopped or stuck */
    /* Claim a record of this session's slot. */
    uint32_t start = atomic_fetch_add_explicit(&f->hint, 1, memory_order_relaxed);
    book_record *r = NULL;
    int idx = -1;
    for (int k = 0; k < BOOK_RECORDS; k++) {
        int i = (int)((start + (uint32_t)k) % BOOK_RECORDS);
        uint32_t want = BOOK_FREE;
        if (atomic_compare_exchange_strong(&sl->rec[i].state, &want, BOOK_CLAIMED)) {
            r = &sl->rec[i];
            idx = i;
            break;
        }
    }
    if (!r)
        return false;
    uint32_t seq = atomic_load_explicit(&r->seq, memory_order_relaxed) + 1;
    atomic_store_explicit(&r->seq, seq, memory_order_relaxed);
    atomic_store_explicit(&r->device, device, memory_order_relaxed);
    atomic_store_explicit(&r->holder, holder, memory_order_relaxed);
    atomic_store_explicit(&r->bytes, weights, memory_order_relaxed);
    atomic_store_explicit(&r->booked_ns, now, memory_order_relaxed);
    atomic_store_explicit(&r->entry, 0, memory_order_relaxed);
    atomic_store_explicit(&r->used, 0, memory_order_relaxed);
    /* The claim (seq_cst) comes before this look at the limit: a coordinator closing it to count
       `charged` again either sees the claim or is seen here. */
    if (atomic_load(&d->limit) < 0) {
        atomic_store(&r->state, BOOK_FREE);
        return false;
    }
    /* page_counter_try_charge: charge first, compare, roll back. */
    int64_t old = atomic_fetch_add(&d->charged, weights);
    test_stall(f, 1);
    int64_t lim = atomic_load(&d->limit);
    if (lim < 0 || old < 0 || comem_add(old, need) > lim) {
        atomic_fetch_sub(&d->charged, weights);
        atomic_store(&r->state, BOOK_FREE);
        return false;
    }
    atomic_store(&r->state, BOOK_BOOKED);
    test_stall(f, 2);
    atomic_fetch_add_explicit(&sl->booked, 1, memory_order_relaxed);
    atomic_fetch_add(&sl->posted, 1); /* the coordinator reconciles it at its next turn */
    g->fast = true;
    g->fast_idx = idx;
    g->fast_seq = seq;
    g->fast_dev = device;
    g->bytes = weights;
    g->wake = comem_fast_coordinator_dozing(f, now);
    int64_t room = comem_sub(lim, old);
    *fig = (client_admission){.decided = true, .need = need, .free_before = room, .free_after = room};
    return true;
}

void comem_fast_cancel(client_fast *f, const client_grant *g)
{
    book_record *r = &f->slot->rec[g->fast_idx];
    if (atomic_load(&r->seq) != g->fast_seq)
        return; /* not this booking any more (the area was reset): nothing of it is booked */
    /* Not reconciled yet: take the charge back here (CANCELLING says so if this process dies now). */
    uint32_t want = BOOK_BOOKED;
    if (atomic_compare_exchange_strong(&r->state, &want, BOOK_CANCELLING)) {
        atomic_fetch_sub(&f->a->dev[g->fast_dev].charged, g->bytes);
        atomic_store(&r->state, BOOK_FREE);
        return;
    }
    /* A ledger grant holds it: the coordinator cancels that at its next turn. */
    want = BOOK_GRANTED;
    if (atomic_compare_exchange_strong(&r->state, &want, BOOK_DONE))
        atomic_fetch_add(&f->slot->posted, 1);
}
