/*
 * tests/integration/test_fastpath.c - the booking area (docs/booking.md) with
 * a real comemd (--check) and real processes.
 *
 * An admission that fits is booked with no round trip (it succeeds while the
 * coordinator is stopped); racing processes never share bytes (each granted
 * load is allocated on the simulated card, which refuses an overcommit); a
 * process SIGKILLed or stopped inside a booking leaks nothing and stalls
 * nobody else's fast path. Hostile processes (issue 20 items 1-6) write
 * whatever they like into the only area they have, their own: no other
 * session's admission, grant or count moves, and the ledger never holds more
 * than the card.
 */
#include "unit/cmocka_all.h"

#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "shm/book.h"
#include "shm/view.h"
#include "harness.h"

#define GIB COMEM_GIB
#define MIB COMEM_MIB
#define SPEC "sim:16GiB:reserved=256MiB:ctx=300MiB"

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/*
 * This process's own booking area, found where any process finds its own mappings: the memfd the
 * coordinator sent with the HELLO_REPLY shows in /proc/self/maps as "/memfd:comem-stock". A
 * process that wants to cheat can do no more than this; nothing names another session's area.
 */
static book_area *own_area(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return NULL;
    char line[512];
    book_area *a = NULL;
    while (!a && fgets(line, sizeof line, f)) {
        unsigned long lo;
        if (strstr(line, "comem-stock") && sscanf(line, "%lx-", &lo) == 1)
            a = (book_area *)(uintptr_t)lo;
    }
    fclose(f);
    return a;
}

static bool status_has(const harness *h, const char *needle)
{
    char *t = h_status(h);
    bool yes = t && strstr(t, needle);
    comem_free(t);
    return yes;
}

/* Admissions and their cancels through the coordinator, so this session holds a stock (one follows an
   admission). In a child: no cmocka assertion there, the answer is returned. */
static int try_warm(comem_client *c, uint64_t holder)
{
    for (int i = 0; i < 3; i++) {
        uint64_t g;
        int rc = comem_admit(c, 0, holder, 64 * MIB, 0, 0, NULL, 0, 5000, &g, NULL);
        if (rc == COMEM_OK)
            rc = comem_grant_done(c, g, 0, 0);
        if (rc != COMEM_OK)
            return rc;
        usleep(5000);
    }
    return COMEM_OK;
}

static void warm(comem_client *c, uint64_t holder) { assert_int_equal(try_warm(c, holder), COMEM_OK); }

static void test_fits_without_round_trip(void **state)
{
    harness *h = *state;
    h_init(h, SPEC);
    h_start(h, NULL);
    comem_client *c;
    uint64_t holder, g;
    assert_int_equal(comem_client_open(h->sock, COMEM_CLIENT_WORKER, "fast", -1, COMEM_OPEN_NO_LOCAL, &c), COMEM_OK);
    assert_int_equal(comem_holder_add(c, "m", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder), COMEM_OK);
    warm(c, holder);
    /* The coordinator cannot answer anything now; an admission that fits needs no answer. */
    kill(h->comemd, SIGSTOP);
    comem_admission fig;
    int rc = comem_admit_record(c, 0, holder, GIB, 0, 0, NULL, 0, 300, &fig);
    kill(h->comemd, SIGCONT);
    assert_int_equal(rc, COMEM_OK);
    assert_true(fig.need > GIB);
    assert_true(fig.free_before >= fig.need);
    assert_int_equal(fig.n_asked, 0);
    /* The coordinator reconciles it: the ledger holds the grant, and the load turns it into residency. */
    int64_t t0 = now_ms();
    while (h_status_num(h, "devices.0.granted") != GIB && now_ms() - t0 < 3000)
        usleep(2000);
    assert_int_equal(h_status_num(h, "devices.0.granted"), GIB);
    assert_int_equal(h_status_num(h, "devices.0.booked"), 0);
    uint64_t e;
    assert_int_equal(comem_entry_add(c, holder, "model", 2 * GIB, 0, 0, &e), COMEM_OK);
    assert_int_equal(comem_grant_done(c, fig.grant, e, GIB), COMEM_OK);
    assert_int_equal(h_status_num(h, "devices.0.granted"), 0);
    assert_int_equal(h_process_resident(h, "fast"), GIB);
    /* A booking cancelled at once never reaches the ledger, and nothing stays charged. */
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(comem_admit(c, 0, holder, 256 * MIB, 0, 0, NULL, 0, 5000, &g, NULL), COMEM_OK);
        assert_int_equal(comem_grant_done(c, g, 0, 0), COMEM_OK);
    }
    t0 = now_ms();
    while ((h_status_num(h, "devices.0.granted") || h_status_num(h, "devices.0.booked")) && now_ms() - t0 < 3000)
        usleep(2000);
    assert_int_equal(h_status_num(h, "devices.0.granted"), 0);
    assert_int_equal(h_status_num(h, "devices.0.booked"), 0);
    /* What does not fit still goes to the coordinator, which refuses it with the shortfall. */
    int64_t short_by = 0;
    assert_int_equal(comem_admit(c, 0, holder, 40 * GIB, 0, 0, NULL, 0, 5000, &g, &short_by), COMEM_ENOSPC);
    assert_true(short_by > 20 * GIB);
    assert_true(status_has(h, "\"booking_area\":\"on\""));
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    comem_client_close(c);
}

/* A process whose ordinal 0 is the coordinator's device 1 (CUDA_VISIBLE_DEVICES=1,0) books on that card. */
static void test_a_mapped_ordinal_books_its_own_card(void **state)
{
    harness *h = *state;
    h_init(h, "sim:2x8GiB:reserved=256MiB:ctx=300MiB");
    h_start(h, NULL);
    char *t = h_status(h);
    const char *p = t ? strstr(t, "\"index\":1,\"uuid\":\"") : NULL;
    assert_non_null(p);
    char uuid[80] = "";
    sscanf(p + strlen("\"index\":1,\"uuid\":\""), "%79[^\"]", uuid);
    comem_free(t);
    comem_client *c;
    uint64_t holder;
    assert_int_equal(comem_client_open(h->sock, COMEM_CLIENT_WORKER, "mapped", -1, COMEM_OPEN_NO_LOCAL, &c), COMEM_OK);
    assert_int_equal(comem_client_map_device(c, 0, uuid), COMEM_OK);
    assert_int_equal(comem_holder_add(c, "m", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder), COMEM_OK);
    int rc = COMEM_ETIMEDOUT;
    comem_admission fig;
    for (int attempt = 0; attempt < 20 && rc != COMEM_OK; attempt++) {
        warm(c, holder); /* on its ordinal 0: the coordinator's device 1 */
        kill(h->comemd, SIGSTOP);
        rc = comem_admit_record(c, 0, holder, GIB, 0, 0, NULL, 0, 300, &fig);
        kill(h->comemd, SIGCONT);
    }
    assert_int_equal(rc, COMEM_OK); /* booked in its area: its stock on the card its ordinal names */
    int64_t t0 = now_ms();
    while (h_status_num(h, "devices.1.granted") != GIB && now_ms() - t0 < 3000)
        usleep(2000);
    assert_int_equal(h_status_num(h, "devices.1.granted"), GIB);
    assert_int_equal(h_status_num(h, "devices.0.granted"), 0);
    assert_int_equal(comem_grant_done(c, fig.grant, 0, 0), COMEM_OK);
    assert_int_equal(h_status_num(h, "coordinator.booking_strikes"), 0);
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    comem_client_close(c);
}

/*
 * The view file beside the socket is the user's to write; the copy each session gets with its
 * HELLO_REPLY is sealed: a process that forges the file moves what the file's readers see, not
 * what a session's own view says, and nobody can make the sealed copy writable.
 */
static void test_a_sessions_view_cannot_be_forged(void **state)
{
    harness *h = *state;
    h_init(h, SPEC);
    h_start(h, NULL);
    comem_client *c;
    assert_int_equal(comem_client_open(h->sock, COMEM_CLIENT_WORKER, "reader", -1, COMEM_OPEN_NO_LOCAL, &c), COMEM_OK);
    comem_view *mine, *file;
    assert_int_equal(comem_client_view(c, &mine), COMEM_OK);
    assert_int_equal(comem_view_open(h->sock, &file), COMEM_OK);
    int64_t free_mine = -1, free_file = -1, cap = -1;
    assert_int_equal(comem_view_read(mine, 0, &cap, &free_mine, NULL, NULL), COMEM_OK);
    assert_int_equal(comem_view_read(file, 0, NULL, &free_file, NULL, NULL), COMEM_OK);
    assert_int_equal(cap, 16 * GIB);
    assert_int_equal(free_mine, free_file);
    assert_int_equal(comem_view_state(mine, NULL), COMEM_OK);
    /* Forge the file as any process of the user can: the card looks empty and nothing granted. */
    char path[300];
    comem_view_path(h->sock, path, sizeof path);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    comem_view_shared *forged = mmap(NULL, sizeof *forged, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    assert_true(forged != MAP_FAILED);
    kill(h->comemd, SIGSTOP); /* so its next publication does not undo the forgery while we look */
    atomic_store(&forged->dev[0].free, 100 * GIB);
    int64_t after_file = -1, after_mine = -1;
    assert_int_equal(comem_view_read(file, 0, NULL, &after_file, NULL, NULL), COMEM_OK);
    assert_int_equal(comem_view_read(mine, 0, NULL, &after_mine, NULL, NULL), COMEM_OK);
    kill(h->comemd, SIGCONT);
    assert_int_equal(after_file, 100 * GIB); /* the file's readers are lied to */
    assert_int_equal(after_mine, free_mine);  /* the session's own view is not */
    /* The sealed copy in this process cannot be made writable, nor mapped writable again. */
    FILE *maps = fopen("/proc/self/maps", "r");
    assert_non_null(maps);
    char line[512];
    void *at = NULL;
    while (!at && fgets(line, sizeof line, maps)) {
        unsigned long lo;
        if (strstr(line, "comem-view") && sscanf(line, "%lx-", &lo) == 1)
            at = (void *)(uintptr_t)lo;
    }
    fclose(maps);
    assert_non_null(at);
    assert_int_not_equal(mprotect(at, sizeof(comem_view_shared), PROT_READ | PROT_WRITE), 0);
    munmap(forged, sizeof *forged);
    comem_view_close(file);
    comem_view_close(mine);
    comem_client_close(c);
}

/* ---- racing processes ---- */

typedef struct racer {
    const harness *h;
    int out; /* writes: granted, overcommits */
} racer;

static int racer_main(void *arg)
{
    racer *r = arg;
    comem_client *c;
    uint64_t holder, g;
    comem_sim *sim = h_sim(r->h);
    if (!sim || comem_client_open(r->h->sock, COMEM_CLIENT_WORKER, "racer", -1, COMEM_OPEN_NO_LOCAL, &c) ||
        comem_holder_add(c, "m", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder))
        return 1;
    int64_t granted = 0, over = 0;
    for (int i = 0; i < 400; i++) {
        int rc = comem_admit(c, 0, holder, 256 * MIB, 0, 0, NULL, 0, 5000, &g, NULL);
        if (rc == COMEM_ENOSPC)
            break;
        if (rc != COMEM_OK)
            return 2;
        int arc = comem_sim_alloc(sim, 0, 256 * MIB);
        if (arc != COMEM_OK) {
            if (arc != COMEM_ENOSPC)
                fprintf(stderr, "sim_alloc: %s\n", comem_status_str(arc));
            over++; /* granted bytes that are not on the card: two grants shared them */
            comem_grant_done(c, g, 0, 0);
            continue;
        }
        granted++;
        uint64_t e;
        if (comem_entry_add(c, holder, "m", 256 * MIB, 0, 0, &e) || comem_grant_done(c, g, e, 256 * MIB))
            return 3;
    }
    ch_put(r->out, granted | over << 32); /* one write: racers share the pipe */
    pause(); /* keep the memory until the parent has looked */
    return 0;
}

static void test_racing_processes_never_share_bytes(void **state)
{
    harness *h = *state;
    h_init(h, SPEC);
    h_start(h, NULL);
    enum { N = 8 };
    chan down, up;
    ch_open(&down, &up);
    static racer rs[N];
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        rs[i] = (racer){h, up.wr};
        pids[i] = h_child(racer_main, &rs[i]);
    }
    int64_t granted = 0, over = 0;
    for (int i = 0; i < N; i++) {
        int64_t v = 0;
        assert_true(ch_get(up.rd, &v, 60000));
        granted += v & 0xffffffff;
        over += v >> 32;
    }
    print_message("%lld loads of 256 MiB granted, %lld overcommitted (%lld strikes, %lld reconciled)\n",
                  (long long)granted, (long long)over, (long long)h_status_num(h, "coordinator.booking_strikes"),
                  (long long)h_status_num(h, "coordinator.bookings_reconciled"));
    assert_int_equal(over, 0);
    assert_true(granted >= 30); /* the card really filled up */
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    for (int i = 0; i < N; i++) {
        kill(pids[i], SIGKILL);
        h_wait(pids[i]);
    }
}

/* ---- a process stopped or killed inside a booking (issue 20 item 5) ---- */

static int g_stalled_fd = -1; /* a victim's channel to the test: told when it stops in the seam */

/* The library's seam inside a booking (client/fast.c; this strong definition replaces its weak no-op):
   stops where COMEM_TEST_FAST_STALL says, charged (1) or booked (2), so a test can SIGKILL it there,
   and says so first. */
void comem_fast_stall_point(int where);
void comem_fast_stall_point(int where)
{
    const char *e = getenv("COMEM_TEST_FAST_STALL");
    int at = !e ? 0 : !strcmp(e, "charged") ? 1 : !strcmp(e, "booked") ? 2 : 0;
    if (at != where)
        return;
    if (g_stalled_fd >= 0)
        ch_put(g_stalled_fd, 2);
    for (;;)
        pause();
}

typedef struct victim {
    const harness *h;
    const char *stall;
    int64_t bytes;
    int ready;
} victim;

static int victim_main(void *arg)
{
    victim *v = arg;
    setenv("COMEM_TEST_FAST_STALL", v->stall, 1);
    comem_client *c;
    uint64_t holder, g;
    if (comem_client_open(v->h->sock, COMEM_CLIENT_WORKER, "victim", -1, COMEM_OPEN_NO_LOCAL, &c) ||
        comem_holder_add(c, "m", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder))
        return 1;
    /* The first admission goes to the coordinator (a stock follows an admission); the stall hook
       only stops a booking in shared memory. Keep asking until one is booked there: it stops. */
    ch_put(v->ready, 1);
    g_stalled_fd = v->ready;
    for (int i = 0; i < 2000; i++) {
        if (comem_admit(c, 0, holder, v->bytes, 0, 0, NULL, 0, 5000, &g, NULL) == COMEM_OK)
            comem_grant_done(c, g, 0, 0);
        usleep(1000);
    }
    return 4; /* never booked in shared memory */
}

/* An honest process admits with comemd stopped: only its own stock can answer that. */
static int books_while_comemd_is_stopped(const harness *h, const char *name)
{
    comem_client *c;
    uint64_t holder, g;
    assert_int_equal(comem_client_open(h->sock, COMEM_CLIENT_WORKER, name, -1, COMEM_OPEN_NO_LOCAL, &c), COMEM_OK);
    assert_int_equal(comem_holder_add(c, "m", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder), COMEM_OK);
    int rc = COMEM_ETIMEDOUT;
    for (int attempt = 0; attempt < 20 && rc != COMEM_OK; attempt++) {
        warm(c, holder);
        kill(h->comemd, SIGSTOP);
        rc = comem_admit(c, 0, holder, 512 * MIB, 0, 0, NULL, 0, 300, &g, NULL);
        kill(h->comemd, SIGCONT);
    }
    if (rc == COMEM_OK)
        assert_int_equal(comem_grant_done(c, g, 0, 0), COMEM_OK);
    comem_client_close(c);
    return rc;
}

static void killed_inside(harness *h, const char *stall)
{
    h_init(h, SPEC);
    h_start(h, NULL);
    chan down, up;
    ch_open(&down, &up);
    static victim v;
    v = (victim){h, stall, 6 * GIB, up.wr};
    pid_t p = h_child(victim_main, &v);
    int64_t one, stalled = 0;
    assert_true(ch_get(up.rd, &one, 20000));
    /* Its loop's own admissions through the coordinator show as grants for a moment: only once it
       says it stopped in the seam does the state below hold still. */
    assert_true(ch_get(up.rd, &stalled, 60000));
    assert_int_equal(stalled, 2);
    /* It stops with 6 GiB charged in its own area (and, for "booked", recorded). Where it stopped on
       a charge its stock could not hold (an earlier cancel not yet reconciled: that booking would have
       been rolled back), the charge stays above its stock and the coordinator strikes the session
       after a second, taking its stock back: a stopped process keeps nothing either way. */
    int64_t t0 = now_ms();
    while (h_status_num(h, "devices.0.booked") < v.bytes && h_status_num(h, "devices.0.granted") < v.bytes &&
           h_status_num(h, "coordinator.booking_strikes") < 1 && now_ms() - t0 < 10000)
        usleep(2000);
    assert_true(h_status_num(h, "devices.0.booked") >= v.bytes || h_status_num(h, "devices.0.granted") >= v.bytes ||
                h_status_num(h, "coordinator.booking_strikes") >= 1);
    /* Stopped inside a booking, it stalls nobody: another process books in its own area. */
    assert_int_equal(books_while_comemd_is_stopped(h, "bystander"), COMEM_OK);
    assert_true(status_has(h, "\"booking_area\":\"on\""));
    kill(p, SIGKILL);
    h_wait(p);
    /* Its session's end takes its stock and bookings with it: all the room is there again. */
    t0 = now_ms();
    while ((h_status_num(h, "devices.0.booked") || h_status_num(h, "devices.0.granted")) && now_ms() - t0 < 5000)
        usleep(2000);
    assert_int_equal(h_status_num(h, "devices.0.booked"), 0);
    assert_int_equal(h_status_num(h, "devices.0.granted"), 0);
    comem_client *c;
    uint64_t holder, g;
    assert_int_equal(comem_client_open(h->sock, COMEM_CLIENT_WORKER, "after", -1, COMEM_OPEN_NO_LOCAL, &c), COMEM_OK);
    assert_int_equal(comem_holder_add(c, "m", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder), COMEM_OK);
    assert_int_equal(comem_admit(c, 0, holder, 10 * GIB, 0, 0, NULL, 0, 5000, &g, NULL), COMEM_OK);
    assert_int_equal(comem_grant_done(c, g, 0, 0), COMEM_OK);
    comem_client_close(c);
    /* And the fast path is still on for everyone after the kill. */
    assert_int_equal(books_while_comemd_is_stopped(h, "later"), COMEM_OK);
    assert_int_equal(h_status_num(h, "coordinator.booking_strikes"), 0);
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
}

static void test_killed_between_charge_and_record(void **state) { killed_inside(*state, "charged"); }
static void test_killed_between_record_and_report(void **state) { killed_inside(*state, "booked"); }

/* ---- hostile processes: each can reach its own area and nothing else (issue 20 items 1-4) ---- */

enum hostile_act {
    HOSTILE_FILL_CHARGED = 1, /* item 1: its `charged` := the card's capacity */
    HOSTILE_DONE_EVERYWHERE,  /* item 2: DONE written into every record */
    HOSTILE_RAISE_LIMIT,      /* item 3: the limit raised and `charged` zeroed in a loop while it books */
    HOSTILE_FORGE_RECORDS,    /* item 4: records forged as BOOKED, the margin and the count rewritten */
    HOSTILE_SCRIBBLE,         /* random words over the whole area while it admits */
};

typedef struct hostile {
    const harness *h;
    int act;
    int out; /* writes: 1 when it has done its worst */
    int64_t granted_fast; /* out: bytes it loaded that the card took (HOSTILE_RAISE_LIMIT) */
} hostile;

static void scribble(book_area *a, uint64_t *seed)
{
    uint8_t *bytes = (uint8_t *)a + offsetof(book_area, looking_until_ns);
    size_t len = sizeof *a - offsetof(book_area, looking_until_ns);
    for (int k = 0; k < 4096; k++) {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        size_t at = (size_t)(*seed % (len / 8)) * 8;
        memcpy(bytes + at, seed, 8);
    }
}

static int hostile_main(void *arg)
{
    hostile *x = arg;
    comem_client *c;
    uint64_t holder, g;
    if (comem_client_open(x->h->sock, COMEM_CLIENT_WORKER, "hostile", -1, COMEM_OPEN_NO_LOCAL, &c) ||
        comem_holder_add(c, "m", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder))
        return 1;
    if (try_warm(c, holder) != COMEM_OK) /* it has a stock now: the most a cheat can spend */
        return 2;
    book_area *a = own_area();
    if (!a)
        return 2;
    ch_put(x->out, 0); /* ready: doing its worst next */
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    int64_t t0 = now_ms();
    switch (x->act) {
    case HOSTILE_FILL_CHARGED:
        atomic_store(&a->dev[0].charged, 16 * GIB);
        atomic_fetch_add(&a->posted, 1);
        break;
    case HOSTILE_DONE_EVERYWHERE:
        for (int i = 0; i < BOOK_RECORDS; i++) {
            atomic_store(&a->rec[i].seq, 1);
            atomic_store(&a->rec[i].state, BOOK_DONE);
        }
        atomic_fetch_add(&a->posted, 1);
        break;
    case HOSTILE_RAISE_LIMIT:
        /* Books what it likes while lying to itself (and gives each grant back, so the honest
           racers fill the card meanwhile). */
        while (now_ms() - t0 < 1500) {
            atomic_store(&a->dev[0].limit, INT64_MAX / 4);
            atomic_store(&a->dev[0].charged, 0);
            atomic_store(&a->confirmed_ns, INT64_MAX / 2);
            if (comem_admit(c, 0, holder, 512 * MIB, 0, 0, NULL, 0, 2000, &g, NULL) == COMEM_OK) {
                x->granted_fast += 512 * MIB;
                comem_grant_done(c, g, 0, 0);
            }
        }
        break;
    case HOSTILE_FORGE_RECORDS:
        for (int i = 0; i < BOOK_RECORDS; i++) {
            atomic_store(&a->rec[i].device, 0);
            atomic_store(&a->rec[i].bytes, 4 * GIB);
            atomic_store(&a->rec[i].holder, 1); /* somebody's holder id, perhaps */
            atomic_store(&a->rec[i].state, BOOK_BOOKED);
        }
        atomic_store(&a->dev[0].reserve, 0);
        atomic_store(&a->booked, 16000000u);
        atomic_fetch_add(&a->posted, 1);
        break;
    case HOSTILE_SCRIBBLE:
        while (now_ms() - t0 < 1500) {
            scribble(a, &seed);
            atomic_fetch_add(&a->posted, 1);
            if (comem_admit(c, 0, holder, 64 * MIB, 0, 0, NULL, 0, 2000, &g, NULL) == COMEM_OK)
                comem_grant_done(c, g, 0, 0);
        }
        break;
    }
    ch_put(x->out, 1 + (x->granted_fast >> 20));
    pause();
    return 0;
}

/* An honest process that loads 4 GiB and then answers whether a 6 GiB admission needed anybody. */
typedef struct honest {
    const harness *h;
    int out;
    int in;
} honest;

static int honest_main(void *arg)
{
    honest *o = arg;
    comem_client *c;
    uint64_t holder, e;
    comem_sim *sim = h_sim(o->h);
    if (!sim || comem_client_open(o->h->sock, COMEM_CLIENT_WORKER, "honest", -1, COMEM_OPEN_NO_LOCAL, &c) ||
        comem_holder_add(c, "m", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder))
        return 1;
    if (try_warm(c, holder) != COMEM_OK)
        return 1;
    /* A grant it holds across the attack: nobody may cancel it or take its bytes. */
    comem_admission fig;
    if (comem_admit_record(c, 0, holder, 4 * GIB, 0, 0, NULL, 0, 5000, &fig) != COMEM_OK)
        return 2;
    ch_put(o->out, 1);
    int64_t go;
    if (!ch_get(o->in, &go, 30000))
        return 3;
    if (comem_sim_alloc(sim, 0, 4 * GIB) != COMEM_OK)
        return 4; /* its granted bytes were not on the card any more */
    if (comem_entry_add(c, holder, "model", 4 * GIB, 0, 0, &e) ||
        comem_grant_done(c, fig.grant, e, 4 * GIB))
        return 5;
    /* A second load that fits what is free, with nobody to ask: granted, nobody asked. */
    if (comem_admit_record(c, 0, holder, 4 * GIB, 0, 0, NULL, 0, 5000, &fig) != COMEM_OK)
        return 6;
    if (fig.n_asked != 0)
        return 7;
    comem_grant_done(c, fig.grant, 0, 0);
    ch_put(o->out, 2);
    pause();
    return 0;
}

static void hostile_beside_honest(harness *h, int act)
{
    h_init(h, SPEC);
    h_start(h, NULL);
    chan to_honest, up;
    ch_open(&to_honest, &up);
    static honest o;
    o = (honest){h, up.wr, to_honest.rd};
    pid_t po = h_child(honest_main, &o);
    int64_t v;
    assert_true(ch_get(up.rd, &v, 30000));
    int64_t t0 = now_ms();
    while (h_status_num(h, "devices.0.granted") < 4 * GIB && now_ms() - t0 < 5000)
        usleep(2000);
    assert_true(h_status_num(h, "devices.0.granted") >= 4 * GIB); /* the honest grant is in the ledger */
    int64_t admissions = h_status_num(h, "counters.admissions");
    chan hdown, hup;
    ch_open(&hdown, &hup);
    static hostile x;
    x = (hostile){h, act, hup.wr, 0};
    pid_t px = h_child(hostile_main, &x);
    assert_true(ch_get(hup.rd, &v, 30000)); /* ready */
    assert_true(ch_get(hup.rd, &v, 30000)); /* done */
    usleep(50000); /* a few of the coordinator's turns look at what it wrote */
    if (act == HOSTILE_FILL_CHARGED) { /* charged held above its stock: struck (after a second), stock returned */
        t0 = now_ms();
        while (h_status_num(h, "coordinator.booking_strikes") < 1 && now_ms() - t0 < 20000)
            usleep(10000);
        assert_true(h_status_num(h, "coordinator.booking_strikes") >= 1);
    }
    /* The honest grant is untouched, and the honest process loads into it and admits again. */
    assert_true(h_status_num(h, "devices.0.granted") >= 4 * GIB);
    ch_put(to_honest.wr, 1);
    assert_true(ch_get(up.rd, &v, 30000));
    assert_int_equal(v, 2);
    assert_int_equal(h_process_resident(h, "honest"), 4 * GIB);
    if (act == HOSTILE_FORGE_RECORDS) /* a forged count moves no counter but its own */
        assert_true(h_status_num(h, "counters.admissions") < admissions + 1000);
    /* Whatever it wrote, the ledger holds no more than the card. */
    assert_true(h_status_num(h, "devices.0.granted") + h_status_num(h, "devices.0.resident") <= 16 * GIB);
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    char why[128];
    assert_int_equal(comem_probe(h->sock, 2000, why, sizeof why), COMEM_OK);
    /* Everyone else's fast path is still on. */
    assert_int_equal(books_while_comemd_is_stopped(h, "bystander"), COMEM_OK);
    print_message("hostile act %d: %lld strike(s)\n", act, (long long)h_status_num(h, "coordinator.booking_strikes"));
    kill(px, SIGKILL);
    h_wait(px);
    kill(po, SIGKILL);
    h_wait(po);
}

static void test_hostile_fills_its_charged(void **state)
{
    harness *h = *state;
    hostile_beside_honest(h, HOSTILE_FILL_CHARGED);
    /* Nobody was asked to release for it: idle holders keep what they hold. */
    assert_int_equal(h_status_num(h, "counters.asks"), 0);
}

static void test_hostile_marks_records_done(void **state)
{
    harness *h = *state;
    hostile_beside_honest(h, HOSTILE_DONE_EVERYWHERE);
    assert_true(h_status_num(h, "coordinator.booking_strikes") >= 1);
}

static void test_hostile_forges_records(void **state)
{
    harness *h = *state;
    hostile_beside_honest(h, HOSTILE_FORGE_RECORDS);
    assert_true(h_status_num(h, "coordinator.booking_strikes") >= 1);
}

static void test_hostile_scribbles_its_area(void **state) { hostile_beside_honest(*state, HOSTILE_SCRIBBLE); }

/* ---- item 3: a cheat raising its limit while honest processes race ---- */

static void test_raised_limit_never_overbooks(void **state)
{
    harness *h = *state;
    h_init(h, SPEC);
    h_start(h, NULL);
    enum { N = 6 };
    chan down, up, hdown, hup;
    ch_open(&down, &up);
    ch_open(&hdown, &hup);
    static hostile x;
    x = (hostile){h, HOSTILE_RAISE_LIMIT, hup.wr, 0};
    pid_t px = h_child(hostile_main, &x);
    int64_t v;
    assert_true(ch_get(hup.rd, &v, 30000)); /* it holds a stock and starts cheating: the racers start */
    static racer rs[N];
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        rs[i] = (racer){h, up.wr};
        pids[i] = h_child(racer_main, &rs[i]);
    }
    int64_t over = 0, granted = 0;
    for (int i = 0; i < N; i++) {
        assert_true(ch_get(up.rd, &v, 60000));
        granted += v & 0xffffffff;
        over += v >> 32;
    }
    assert_true(ch_get(hup.rd, &v, 60000));
    print_message("%lld honest loads, %lld overcommitted; the cheat was told of %lld MiB; %lld strike(s)\n",
                  (long long)granted, (long long)over, (long long)(v - 1),
                  (long long)h_status_num(h, "coordinator.booking_strikes"));
    /* No honest grant was short on the card, and the ledger never held more than the card. */
    assert_int_equal(over, 0);
    assert_true(granted >= 20); /* the card really filled up */
    assert_true(h_status_num(h, "coordinator.booking_strikes") >= 1); /* its lie was seen */
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    assert_true(h_status_num(h, "devices.0.granted") + h_status_num(h, "devices.0.resident") <= 16 * GIB);
    for (int i = 0; i < N; i++) {
        kill(pids[i], SIGKILL);
        h_wait(pids[i]);
    }
    kill(px, SIGKILL);
    h_wait(px);
}

/* ---- item 6: room cancelled in shared memory is room for the next process at once ---- */

typedef struct canceller {
    const harness *h;
    int in, out;
} canceller;

static int canceller_main(void *arg)
{
    canceller *k = arg;
    comem_client *c;
    uint64_t holder, g;
    if (comem_client_open(k->h->sock, COMEM_CLIENT_WORKER, "canceller", -1, COMEM_OPEN_NO_LOCAL, &c) ||
        comem_holder_add(c, "m", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder))
        return 1;
    int64_t round;
    while (ch_get(k->in, &round, 30000) && round > 0) {
        if (try_warm(c, holder) != COMEM_OK)
            return 2;
        int rc = comem_admit(c, 0, holder, 8 * GIB, 0, 0, NULL, 0, 5000, &g, NULL);
        if (rc == COMEM_OK)
            rc = comem_grant_done(c, g, 0, 0);
        ch_put(k->out, rc == COMEM_OK ? 1 : 100 + (int64_t)-rc);
    }
    return 0;
}

static void test_cancelled_booking_is_room_at_once(void **state)
{
    harness *h = *state;
    h_init(h, SPEC);
    h_start(h, NULL);
    chan down, up;
    ch_open(&down, &up);
    static canceller k;
    k = (canceller){h, down.rd, up.wr};
    pid_t p = h_child(canceller_main, &k);
    comem_client *c;
    uint64_t holder;
    assert_int_equal(comem_client_open(h->sock, COMEM_CLIENT_WORKER, "next", -1, COMEM_OPEN_NO_LOCAL, &c), COMEM_OK);
    assert_int_equal(comem_holder_add(c, "m", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder), COMEM_OK);
    int refused = 0;
    for (int round = 1; round <= 60; round++) {
        ch_put(down.wr, round);
        int64_t v;
        assert_true(ch_get(up.rd, &v, 30000));
        assert_int_equal(v, 1); /* it booked 8 GiB and cancelled it */
        /* At once, another process wants 12 GiB of the 16: it fits only if the 8 came back. */
        comem_admission fig;
        int rc = comem_admit_record(c, 0, holder, 12 * GIB, 0, 0, NULL, 0, 5000, &fig);
        if (rc != COMEM_OK)
            refused++;
        else
            assert_int_equal(comem_grant_done(c, fig.grant, 0, 0), COMEM_OK);
    }
    ch_put(down.wr, 0);
    h_wait(p);
    assert_int_equal(refused, 0);
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    comem_client_close(c);
}

/* ---- a booking after a quiet spell reaches the view ---- */

/*
 * Bookings made when the coordinator has stopped looking at the areas often (100 ms after the last
 * one) but the stock is still there: each client's booking wakes it (BOOKED), so the booking
 * reaches the view's granted figure without a tick. How soon is printed, not asserted (bench/).
 */
static void test_booking_after_a_quiet_spell_reaches_the_view(void **state)
{
    harness *h = *state;
    h_init(h, SPEC);
    h_start(h, NULL);
    char path[300];
    comem_view_path(h->sock, path, sizeof path);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    comem_view_shared *view = mmap(NULL, sizeof *view, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    assert_true(view != MAP_FAILED);
    comem_client *c;
    uint64_t holder, g;
    assert_int_equal(comem_client_open(h->sock, COMEM_CLIENT_WORKER, "quiet", -1, COMEM_OPEN_NO_LOCAL, &c), COMEM_OK);
    assert_int_equal(comem_holder_add(c, "m", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder), COMEM_OK);
    book_area *a = own_area();
    assert_non_null(a);
    int booked = 0;
    int64_t worst_ns = 0;
    for (int i = 0; i < 12; i++) {
        warm(c, holder);
        uint32_t before = atomic_load(&a->booked);
        int64_t t0 = now_ms();
        assert_int_equal(comem_admit(c, 0, holder, 512 * MIB, 0, 0, NULL, 0, 5000, &g, NULL), COMEM_OK);
        bool fast = atomic_load(&a->booked) != before;
        while (atomic_load(&view->dev[0].granted) < 512 * MIB && now_ms() - t0 < 5000)
            usleep(50);
        assert_true(atomic_load(&view->dev[0].granted) >= 512 * MIB);
        if (fast) {
            booked++;
            worst_ns = comem_max(worst_ns, (now_ms() - t0) * 1000000);
        }
        assert_int_equal(comem_grant_done(c, g, 0, 0), COMEM_OK);
    }
    print_message("quiet bookings: %d of 12 booked in shared memory; in the view after at most %.0f ms\n", booked,
                  (double)worst_ns / 1e6);
    assert_true(booked >= 3); /* the case this test is about happened */
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    comem_client_close(c);
    munmap(view, sizeof *view);
}

static int setup(void **state)
{
    static harness h;
    *state = &h;
    return 0;
}

int main(void)
{
    setenv("COMEM_LOG", "error", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fits_without_round_trip, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_a_mapped_ordinal_books_its_own_card, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_a_sessions_view_cannot_be_forged, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_racing_processes_never_share_bytes, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_killed_between_charge_and_record, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_killed_between_record_and_report, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_hostile_fills_its_charged, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_hostile_marks_records_done, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_hostile_forges_records, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_hostile_scribbles_its_area, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_raised_limit_never_overbooks, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_cancelled_booking_is_room_at_once, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_booking_after_a_quiet_spell_reaches_the_view, setup, h_teardown),
    };
    const char *only = getenv("FP_ONLY"); /* FP_ONLY=racing runs the one test whose name has it */
    if (only) {
        for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
            if (strstr(tests[i].name, only))
                return _cmocka_run_group_tests("fastpath", &tests[i], 1, NULL, NULL);
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
