/*
 * tests/unit/test_comemd_serves.c - comemd as a program serving processes, the same assertions on
 * Linux (a Unix socket) and on Windows (comemd.exe over a named pipe, under wine in CI: issue 26's
 * integration tests): every client is a process of its own or this test speaking the protocol
 * itself (unit/rawwire.h), on a simulated card of the test's own.
 *
 * A second daemon under the same address is refused (exit 3). A child (this test run again) admits
 * 2 GiB of the 4 GiB card and holds the grant: another admission of 2 GiB is refused while it lives;
 * the child is killed, and its bytes come back: the same admission is granted. Then a release across
 * processes: a child holds a 2 GiB model on the card (allocated there, registered with the
 * coordinator as a holder that answers asks); an admission of 1.5 GiB, which with the reserve needs
 * its room, asks it, the child frees the model and sends its receipt, and the admission is granted
 * with the bytes it freed. Whatever fails, teardown ends the processes a test started.
 *
 * The same through the client library (comem.h: libcomem on Linux, the same code on Windows over its
 * own port, client/port_win.c): a child's holder whose release callback frees its model, asked for an
 * admission of this process's; a child's grant given back when it is killed; a client that loses the
 * daemon decides locally, says so, and when a new daemon comes reconnects and registers its holder
 * again; and comem_probe's word on each.
 */
#include "unit/cmocka_all.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#include <windows.h>
#else
#include <unistd.h>
#endif

#include "comem/comem.h"
#include "probe/sim.h"
#include "os/stream.h"
#include "unit/endpoint.h"
#include "unit/rawwire.h"

#define GIB ((int64_t)1 << 30)

static char g_card[PATH_MAX + 64]; /* a simulated card of this test's own */
static char g_note[480];           /* where the child says it holds its grant */
static char g_comemd[PATH_MAX];    /* the daemon's program, beside this one */

/* The processes a test started, ended by teardown if the test did not get to it (pid 0: none). */
static struct started {
    int64_t pid;
    void *handle;
} g_started[4];

static int64_t track(int64_t pid, void *handle)
{
    for (int i = 0; i < 4; i++)
        if (!g_started[i].pid) {
            g_started[i] = (struct started){pid, handle};
            break;
        }
    return pid;
}

/* Ends a process the test started, and forgets it. */
static void end_started(int64_t pid)
{
    for (int i = 0; i < 4; i++)
        if (g_started[i].pid == pid) {
            end_child(pid, g_started[i].handle);
            wait_child(pid, g_started[i].handle);
            g_started[i].pid = 0;
        }
}

/* A child's argument: "SOCKET|NOTE", or "SOCKET|NOTE|CARD" when card is wanted (exit 2 when it is not that). */
static struct child_arg {
    char sock[400], note[480], card[PATH_MAX + 64];
} g_arg;

static void split_arg(const char *arg, bool card)
{
    const char *a = strchr(arg, '|'), *b = a ? strchr(a + 1, '|') : NULL;
    if (!a || (card && !b) || (!card && b))
        exit(2);
    snprintf(g_arg.sock, sizeof g_arg.sock, "%.*s", (int)(a - arg), arg);
    snprintf(g_arg.note, sizeof g_arg.note, "%.*s", (int)((b ? b : a + strlen(a)) - a - 1), a + 1);
    snprintf(g_arg.card, sizeof g_arg.card, "%s", b ? b + 1 : "");
}

/* The child has done its part: it says so in the note's file (exit 5 when it cannot). */
static void say_done(void)
{
    FILE *f = fopen(g_arg.note, "w");
    if (!f)
        exit(5);
    fclose(f);
}

/* The card of the child's argument with a 2 GiB model allocated on it (exit 3 when it cannot be). */
static comem_sim *card_with_model(void)
{
    comem_sim_spec spec;
    comem_sim *sim = NULL;
    if (comem_sim_spec_parse(g_arg.card, &spec, NULL, 0) != COMEM_OK || comem_sim_open(&spec, &sim) != COMEM_OK ||
        comem_sim_alloc(sim, 0, 2 * GIB) != COMEM_OK)
        exit(3);
    return sim;
}

/* The child's hook, given "SOCKET|NOTE": admits 2 GiB, says so in NOTE, and holds the grant (it sleeps). */
static void hold(const char *arg)
{
    split_arg(arg, false);
    comem_stream *st = NULL;
    if (comem_connect(g_arg.sock, 10000, &st) != COMEM_OK)
        exit(3);
    static comem_msg m;
    raw_hello(st, "holder", &m, NULL, NULL);
    raw_admit(st, 2, 2 * GIB, 2000, &m);
    if (!m.u.admit_reply.granted)
        exit(4);
    say_done();
}

/* Sends m and reads the ID_REPLY it gets: the id. */
static uint64_t raw_id(comem_stream *st, comem_msg *m)
{
    raw_send(st, m);
    uint32_t req = m->request_id;
    raw_read(st, m, NULL, NULL);
    if (m->type != COMEM_MSG_ID_REPLY || m->request_id != req)
        exit(6);
    return m->u.id.id;
}

/*
 * The model holder's hook, given "SOCKET|NOTE|CARD": 2 GiB allocated on the card and registered as one
 * resident model of a holder that answers asks; NOTE written; then every ASK is answered by freeing
 * the model and sending the receipt, with the model's residency after it (a receipt counts what came
 * off in the ledger), until the coordinator goes.
 */
static void hold_model(const char *arg)
{
    split_arg(arg, true);
    comem_sim *sim = card_with_model();
    comem_stream *st = NULL;
    if (comem_connect(g_arg.sock, 10000, &st) != COMEM_OK)
        exit(4);
    static comem_msg m;
    raw_hello(st, "models", &m, NULL, NULL);
    memset(&m, 0, sizeof m);
    m.type = COMEM_MSG_HOLDER_ADD;
    m.request_id = 2;
    m.u.holder_add.kind = COMEM_HOLDER_MODELS;
    m.u.holder_add.flags = COMEM_CAP_RELEASE;
    snprintf(m.u.holder_add.name, sizeof m.u.holder_add.name, "models");
    uint64_t holder = raw_id(st, &m);
    memset(&m, 0, sizeof m);
    m.type = COMEM_MSG_ENTRY_ADD;
    m.request_id = 3;
    m.u.entry_add.holder_id = holder;
    m.u.entry_add.size = m.u.entry_add.resident = 2 * GIB;
    snprintf(m.u.entry_add.name, sizeof m.u.entry_add.name, "model");
    uint64_t entry = raw_id(st, &m);
    say_done();
    bool resident = true;
    for (;;) { /* answers asks until the coordinator goes (the read then fails the child: it is ended first) */
        raw_read(st, &m, NULL, NULL);
        if (m.type != COMEM_MSG_ASK)
            continue;
        uint64_t ask = m.u.ask.ask_id;
        int64_t freed = resident && comem_sim_free(sim, 0, 2 * GIB) == COMEM_OK ? 2 * GIB : 0;
        resident = false;
        memset(&m, 0, sizeof m);
        m.type = COMEM_MSG_RECEIPT;
        m.u.receipt.ask_id = ask;
        m.u.receipt.outcome = COMEM_RECEIPT_DONE;
        m.u.receipt.freed = freed;
        m.u.receipt.n = 1;
        m.u.receipt.items[0] = (comem_wire_residency){.entry_id = entry, .seq = 1, .resident = 0};
        raw_send(st, &m);
    }
}

/* ---- the same through the client library ---- */

/* A library client of the coordinator at sock, never deciding locally: NULL when none answers. */
static comem_client *lib_open(const char *sock, int role, const char *name)
{
    comem_client *c = NULL;
    return comem_client_open(sock, role, name, -1, COMEM_OPEN_NO_LOCAL, &c) == COMEM_OK ? c : NULL;
}

/* A child's model on the card, freed by its holder's release callback. */
static struct lib_model {
    comem_sim *sim;
    comem_client *c;
    uint64_t entry;
    bool resident;
} g_model;

static int release_model(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                         const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder, (void)kind, (void)bytes, (void)entries, (void)amounts, (void)n;
    struct lib_model *m = user;
    *freed = 0;
    if (m->resident && comem_sim_free(m->sim, 0, 2 * GIB) == COMEM_OK) {
        m->resident = false;
        *freed = 2 * GIB;
        comem_entry_set_resident(m->c, m->entry, 0); /* rides on the receipt */
    }
    return COMEM_OK;
}

/*
 * The library model holder's hook, given "SOCKET|NOTE|CARD": 2 GiB allocated on the card and
 * registered through the library as a model of a holder whose callback frees it; NOTE written; the
 * library's callback thread answers asks while the child sleeps.
 */
static void lib_hold_model(const char *arg)
{
    split_arg(arg, true);
    g_model.sim = card_with_model();
    g_model.resident = true;
    if (!(g_model.c = lib_open(g_arg.sock, COMEM_CLIENT_WORKER, "models")))
        exit(4);
    uint64_t holder = 0;
    if (comem_holder_add(g_model.c, "models", 0, COMEM_KIND_MODELS, COMEM_ANSWERS_RELEASE, release_model, &g_model,
                         &holder) != COMEM_OK ||
        comem_entry_add(g_model.c, holder, "model", 2 * GIB, 2 * GIB, 0, &g_model.entry) != COMEM_OK)
        exit(6);
    say_done();
}

/* The library grant holder's hook, given "SOCKET|NOTE": admits 2 GiB through the library, says so, holds it. */
static void lib_hold(const char *arg)
{
    split_arg(arg, false);
    comem_client *c = lib_open(g_arg.sock, COMEM_CLIENT_WORKER, "holder");
    uint64_t grant = 0;
    if (!c || comem_admit(c, 0, 0, 2 * GIB, 0, 0, NULL, 0, 10000, &grant, NULL) != COMEM_OK || !grant)
        exit(3);
    say_done();
}

/* The child's hook: a grant holder ("admit|...", "libadmit|...") or a model holder ("model|...", "libmodel|..."). */
static void child_part(const char *arg)
{
    if (strncmp(arg, "model|", 6) == 0)
        hold_model(arg + 6);
    else if (strncmp(arg, "admit|", 6) == 0)
        hold(arg + 6);
    else if (strncmp(arg, "libmodel|", 9) == 0)
        lib_hold_model(arg + 9);
    else if (strncmp(arg, "libadmit|", 9) == 0)
        lib_hold(arg + 9);
    else
        exit(7);
}

/*
 * Starts a child of kind ("admit", "model", "libadmit", "libmodel": child_part) on this test's daemon
 * and card, and waits for its word that it holds what it holds: its pid.
 */
static int64_t start_holder(const char *kind)
{
    static char arg[PATH_MAX + 1000];
    bool card = strstr(kind, "model") != NULL;
    snprintf(arg, sizeof arg, "%s|%s|%s%s%s", kind, g_endpoint.name, g_note, card ? "|" : "", card ? g_card : "");
    remove(g_note);
    void *handle;
    int64_t pid = start_child_with(120000, arg, &handle);
    track(pid, handle);
    assert_true(wait_for_file(g_note, 30000));
    return pid;
}

static int64_t start_comemd(void **handle)
{
    char *argv[] = {g_comemd, "--socket", g_endpoint.name, "--device", g_card, NULL};
    int64_t pid = start_program(argv, handle);
    return track(pid, *handle);
}

/* Starts comemd and connects once it listens: its pid. */
static int64_t start_comemd_connected(comem_stream **st)
{
    void *daemon;
    int64_t pid = start_comemd(&daemon);
    int rc = COMEM_ENOENT;
    for (int i = 0; i < 300 && (rc = comem_connect(g_endpoint.name, 100, st)) != COMEM_OK; i++)
        pause_ms(100); /* it is starting */
    assert_int_equal(rc, COMEM_OK);
    return pid;
}

static void test_admission_a_killed_clients_bytes_and_a_second_daemon(void **s)
{
    (void)s;
    comem_stream *st = NULL;
    int64_t pid = start_comemd_connected(&st);

    void *second_h;
    char *argv[] = {g_comemd, "--socket", g_endpoint.name, "--device", g_card, NULL};
    int64_t second = start_program(argv, &second_h);
    assert_int_equal(wait_child(second, second_h), 3); /* another runs there: refused, not to be retried */

    int64_t holder = start_holder("admit"); /* the child holds 2 GiB */

    static comem_msg m;
    raw_hello(st, "asker", &m, NULL, NULL);
    raw_admit(st, 2, 2 * GIB, 100, &m);
    assert_int_equal(m.u.admit_reply.granted, 0); /* 4 GiB, 2 held: no room for 2 more */
    assert_true(m.u.admit_reply.short_by > 0);

    end_started(holder); /* killed: nothing is said */
    bool granted = false;
    for (uint32_t req = 3; req < 300 && !granted; req++) { /* once its end is seen, its bytes are back */
        raw_admit(st, req, 2 * GIB, 100, &m);
        granted = m.u.admit_reply.granted;
        if (!granted)
            pause_ms(20);
    }
    assert_true(granted);
    assert_int_equal(m.u.admit_reply.bytes, 2 * GIB);

    comem_stream_close(st);
    end_started(pid);
}

static void test_a_holder_in_another_process_is_asked_and_frees(void **s)
{
    (void)s;
    comem_stream *st = NULL;
    int64_t pid = start_comemd_connected(&st);

    int64_t holder = start_holder("model"); /* its 2 GiB model is on the card and in the books */

    static comem_msg m;
    raw_hello(st, "asker", &m, NULL, NULL);
    /* 1.5 GiB and the reserve fit what is free and what the model holds, not what is free alone. */
    raw_admit(st, 2, 3 * GIB / 2, 10000, &m);
    assert_int_equal(m.u.admit_reply.granted, 1); /* room made by the other process */
    assert_true(m.u.admit_reply.n_asked >= 1);
    assert_int_equal(m.u.admit_reply.freed, 2 * GIB);
    assert_int_equal(m.u.admit_reply.bytes, 3 * GIB / 2);

    comem_stream_close(st);
    end_started(holder);
    end_started(pid);
}

static void test_library_clients_release_across_processes(void **s)
{
    (void)s;
    comem_stream *st = NULL;
    int64_t pid = start_comemd_connected(&st);
    comem_stream_close(st);

    int64_t holder = start_holder("libmodel"); /* its 2 GiB model is on the card and in the books */

    comem_client *c = lib_open(g_endpoint.name, COMEM_CLIENT_HOST, "asker");
    assert_non_null(c);
    assert_int_equal(comem_client_connected(c), 1);
    comem_admission a;
    /* 1.5 GiB and the reserve fit what is free and what the model holds, not what is free alone. */
    assert_int_equal(comem_admit_record(c, 0, 0, 3 * GIB / 2, 0, 0, NULL, 0, 10000, &a), COMEM_OK);
    assert_true(a.grant != 0);
    assert_int_equal(a.decided, 1);
    assert_true(a.n_asked >= 1);
    assert_int_equal(a.freed, 2 * GIB); /* the child's callback freed its model */
    assert_true(a.free_after >= a.free_before + 2 * GIB);

    comem_client_close(c);
    end_started(holder);
    end_started(pid);
}

static void test_library_a_killed_clients_grant_and_a_lost_daemon(void **s)
{
    (void)s;
    comem_stream *st = NULL;
    void *daemon_h = NULL;
    int64_t pid = start_comemd_connected(&st);
    comem_stream_close(st);
    char why[300];
    /* A probe says "busy" at once when no pipe instance waits (Windows: the coordinator makes the next one
       in its loop's turn after an accept; under wine that turn can come late), as a client's open
       retries it for a second: so does this one. */
    int probed = COMEM_EBUSY;
    for (int i = 0; i < 200 && (probed = comem_probe(g_endpoint.name, 5000, why, sizeof why)) == COMEM_EBUSY; i++)
        pause_ms(5);
    assert_int_equal(probed, COMEM_OK);
    assert_non_null(strstr(why, "answers"));

    int64_t holder = start_holder("libadmit"); /* the child holds 2 GiB */

    comem_client *c = lib_open(g_endpoint.name, COMEM_CLIENT_HOST, "asker");
    assert_non_null(c);
    uint64_t models = 0;
    assert_int_equal(comem_holder_add(c, "models", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &models), COMEM_OK);
    uint64_t grant = 0;
    int64_t short_by = 0;
    assert_int_equal(comem_admit(c, 0, models, 2 * GIB, 0, 0, NULL, 0, 1000, &grant, &short_by), COMEM_ENOSPC);
    assert_true(short_by > 0); /* 4 GiB, 2 held: no room for 2 more */

    end_started(holder); /* killed: nothing is said */
    int rc = COMEM_ENOSPC;
    for (int i = 0; i < 300 && rc == COMEM_ENOSPC; i++) { /* once its end is seen, its bytes are back */
        rc = comem_admit(c, 0, models, 2 * GIB, 0, 0, NULL, 0, 1000, &grant, &short_by);
        if (rc == COMEM_ENOSPC)
            pause_ms(20);
    }
    assert_int_equal(rc, COMEM_OK);
    assert_true(grant != 0);
    assert_int_equal(comem_grant_done(c, grant, 0, 0), COMEM_OK);

    /* The daemon goes: the client says so and decides locally (never here: COMEM_OPEN_NO_LOCAL refuses). */
    end_started(pid);
    for (int i = 0; i < 300 && comem_client_connected(c); i++)
        pause_ms(20);
    assert_int_equal(comem_client_connected(c), 0);
    assert_int_not_equal(comem_probe(g_endpoint.name, 2000, why, sizeof why), COMEM_OK);
    endpoint_remove_lock_file();

    /* A new daemon: the client connects again by itself and registers its holder there again. */
    pid = start_comemd(&daemon_h);
    for (int i = 0; i < 300 && !comem_client_connected(c); i++)
        pause_ms(50);
    assert_int_equal(comem_client_connected(c), 1);
    char *json = NULL;
    for (int i = 0; i < 100; i++) { /* the resync replays the mirror just after the HELLO */
        comem_free(json);
        json = NULL;
        assert_int_equal(comem_status_json(c, &json), COMEM_OK);
        if (strstr(json, "\"models\""))
            break;
        pause_ms(20);
    }
    assert_non_null(strstr(json, "\"models\""));
    assert_non_null(strstr(json, "\"asker\""));
    comem_free(json);

    comem_client_close(c);
    end_started(pid);
}

static int setup(void **s)
{
    (void)s;
    if (endpoint_make("comemd") != 0)
        return -1;
    char card[sizeof g_card - 16];
    endpoint_file(card, sizeof card, "card");
    snprintf(g_card, sizeof g_card, "sim:4GiB:path=%s", card);
    endpoint_file(g_note, sizeof g_note, "note");
#ifdef _WIN32
    snprintf(g_comemd, sizeof g_comemd, "%s\\comemd.exe", test_bin_dir());
#else
    snprintf(g_comemd, sizeof g_comemd, "%s/comemd", test_bin_dir());
#endif
    return 0;
}


static int teardown(void **s)
{
    for (int i = 0; i < 4; i++)
        if (g_started[i].pid)
            end_started(g_started[i].pid); /* a test that failed midway */
    remove(g_note);
    endpoint_remove_lock_file(); /* the rest goes with the endpoint's folder (Linux) or with its last handle (Windows) */
    return endpoint_teardown(s);
}

int main(int argc, char **argv)
{
    if (child_main(argc, argv, child_part))
        return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_admission_a_killed_clients_bytes_and_a_second_daemon, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_holder_in_another_process_is_asked_and_frees, setup, teardown),
        cmocka_unit_test_setup_teardown(test_library_clients_release_across_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_library_a_killed_clients_grant_and_a_lost_daemon, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
