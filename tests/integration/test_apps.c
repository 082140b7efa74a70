/*
 * tests/integration/test_apps.c - app holders: a holder whose memory is another process's (issue 42).
 *
 * An LLM server never joins the ledger; a process that speaks for it registers a holder naming the
 * server's pid (HOLDER_ADD's pid, comem_holder_add_app). comemd runs as its own process over a
 * simulated card. The "app" is a forked process that holds bytes on the card and never says HELLO;
 * it frees them when the test's pipe tells it to. The speaker is a forked process speaking raw
 * frames, so it can answer asks as an honest recipe does (tell the app to unload, then report) or
 * as a broken one does (report an unload that never happened). What holds:
 *   - status names the app's pid on the holder and no longer lists the app among other_processes;
 *   - an admission that needs the app's bytes asks the speaker, the app unloads, the admission is
 *     granted and the bytes count as freed;
 *   - a receipt for an unload the card does not show on the app's process counts nothing, though
 *     the speaker's own process never held those bytes either (the app's use is what is read);
 *   - refused: no such process (ENOENT), a process with a session of its own or one spoken for
 *     already (EEXIST), a process of another user (EPERM).
 */
#include "unit/cmocka_all.h"

#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "harness.h"
#include "raw.h"

#define GIB COMEM_GIB
#define SPEC "sim:8GiB:reserved=256MiB:ctx=300MiB"
#define WAIT_MS 30000 /* a bound that only a broken build reaches; no test asserts a speed */

static comem_msg g_m, g_r; /* large: kept off the stack */

/* Sends m with request id rid and waits for the frame answering it (asks and acknowledgements skipped). */
static int raw_call(int fd, comem_msg *m, uint32_t rid, comem_msg *reply)
{
    m->request_id = rid;
    if (!raw_send(fd, m))
        return -1;
    for (;;) {
        if (raw_recv(fd, reply, WAIT_MS) != 1)
            return -1;
        if (reply->request_id == rid && reply->type != COMEM_MSG_ADMIT_QUEUED)
            return reply->type;
    }
}

/* ---- the app: holds bytes on the card, never joins; frees them when told (1), exits when told (0) ---- */

typedef struct app_args {
    const harness *h;
    int64_t size;
    chan down, up;
} app_args;

static int app_main(void *arg)
{
    app_args *a = arg;
    comem_sim *sim = h_sim(a->h);
    if (!sim || comem_sim_touch(sim, 0) != COMEM_OK || comem_sim_alloc(sim, 0, a->size) != COMEM_OK)
        return 10;
    ch_put(a->up.wr, 1); /* loaded */
    for (int64_t cmd; ch_get(a->down.rd, &cmd, 3600 * 1000) && cmd != 0;) {
        if (cmd == 1 && comem_sim_free(sim, 0, a->size) != COMEM_OK)
            return 11;
        ch_put(a->up.wr, 2); /* unloaded */
    }
    return 0;
}

static pid_t start_app(app_args *a, const harness *h, int64_t size)
{
    *a = (app_args){.h = h, .size = size};
    ch_open(&a->down, &a->up);
    pid_t pid = h_child(app_main, a);
    int64_t v = 0;
    assert_true(ch_get(a->up.rd, &v, WAIT_MS));
    assert_int_equal(v, 1);
    return pid;
}

/* ---- the speaker: one app holder for the app, one entry of its bytes, answering asks ---- */

typedef struct speaker_args {
    const harness *h;
    app_args *app;
    pid_t app_pid;
    bool honest; /* tells the app to unload before it reports; else reports an unload that never happened */
    chan down, up;
} speaker_args;

/* HOLDER_ADD for pid on fd; the reply's type, the holder id or status in *out. */
static int add_app_holder(int fd, uint32_t pid, const char *name, uint32_t rid, int64_t *out)
{
    memset(&g_m, 0, sizeof g_m);
    g_m.type = COMEM_MSG_HOLDER_ADD;
    g_m.u.holder_add.kind = COMEM_HOLDER_MODELS;
    g_m.u.holder_add.flags = COMEM_CAP_RELEASE;
    g_m.u.holder_add.pid = pid;
    snprintf(g_m.u.holder_add.name, sizeof g_m.u.holder_add.name, "%s", name);
    int t = raw_call(fd, &g_m, rid, &g_r);
    *out = t == COMEM_MSG_ID_REPLY ? (int64_t)g_r.u.id.id : t == COMEM_MSG_REPLY ? g_r.u.reply.status : -1;
    return t;
}

static int speaker_main(void *arg)
{
    speaker_args *a = arg;
    int fd = raw_connect(a->h->sock), st = -1;
    if (fd < 0 || raw_hello(fd, COMEM_ROLE_WORKER, "llm-speaker", NULL, &st) != COMEM_MSG_HELLO_REPLY)
        return 10;
    int64_t holder = 0;
    if (add_app_holder(fd, (uint32_t)a->app_pid, "llm", 2, &holder) != COMEM_MSG_ID_REPLY)
        return 11;
    memset(&g_m, 0, sizeof g_m);
    g_m.type = COMEM_MSG_ENTRY_ADD;
    g_m.u.entry_add.holder_id = (uint64_t)holder;
    g_m.u.entry_add.size = g_m.u.entry_add.resident = a->app->size;
    snprintf(g_m.u.entry_add.name, sizeof g_m.u.entry_add.name, "model.gguf");
    if (raw_call(fd, &g_m, 3, &g_r) != COMEM_MSG_ID_REPLY)
        return 12;
    uint64_t entry = g_r.u.id.id;
    ch_put(a->up.wr, (int64_t)entry);
    for (bool loaded = true;;) { /* answers asks until the coordinator goes */
        if (raw_recv(fd, &g_m, 3600 * 1000) != 1)
            return 0;
        if (g_m.type != COMEM_MSG_ASK)
            continue;
        comem_msg_ask ask = g_m.u.ask;
        int64_t v = 0;
        if (a->honest && loaded) { /* the recipe's unload, and its word back */
            ch_put(a->app->down.wr, 1);
            if (!ch_get(a->app->up.rd, &v, WAIT_MS) || v != 2)
                return 13;
        }
        memset(&g_r, 0, sizeof g_r);
        g_r.type = COMEM_MSG_RECEIPT;
        g_r.u.receipt.ask_id = ask.ask_id;
        g_r.u.receipt.outcome = COMEM_RECEIPT_DONE;
        g_r.u.receipt.freed = loaded ? a->app->size : 0;
        if (loaded)
            g_r.u.receipt.items[g_r.u.receipt.n++] = (comem_wire_residency){entry, 1, 0, 0};
        loaded = false;
        if (!raw_send(fd, &g_r))
            return 0;
    }
}

static void start_speaker(speaker_args *a, const harness *h, app_args *app, pid_t app_pid, bool honest)
{
    *a = (speaker_args){.h = h, .app = app, .app_pid = app_pid, .honest = honest};
    ch_open(&a->down, &a->up);
    (void)h_child(speaker_main, a);
    int64_t entry = 0;
    assert_true(ch_get(a->up.rd, &entry, WAIT_MS));
    assert_true(entry > 0);
}

/* ---- reading the coordinator ---- */

/* The status's holder named name on device 0: its app_pid (0 when null), and whether other_processes lists pid. */
static void read_status(const harness *h, const char *name, pid_t pid, int64_t *app_pid, bool *listed_other)
{
    char *text = h_status(h);
    json_object *root = json_tokener_parse(text), *devs, *ps, *others, *v;
    comem_free(text);
    *app_pid = -1;
    *listed_other = false;
    assert_true(root && json_object_object_get_ex(root, "devices", &devs));
    json_object *d0 = json_object_array_get_idx(devs, 0);
    assert_true(json_object_object_get_ex(d0, "processes", &ps));
    for (size_t i = 0; i < json_object_array_length(ps); i++) {
        json_object *hs;
        if (!json_object_object_get_ex(json_object_array_get_idx(ps, i), "holders", &hs))
            continue;
        for (size_t k = 0; k < json_object_array_length(hs); k++) {
            json_object *ho = json_object_array_get_idx(hs, k);
            if (json_object_object_get_ex(ho, "name", &v) && !strcmp(json_object_get_string(v), name) &&
                json_object_object_get_ex(ho, "app_pid", &v))
                *app_pid = json_object_get_type(v) == json_type_null ? 0 : json_object_get_int64(v);
        }
    }
    assert_true(json_object_object_get_ex(d0, "other_processes", &others));
    for (size_t i = 0; i < json_object_array_length(others); i++)
        if (json_object_object_get_ex(json_object_array_get_idx(others, i), "pid", &v) &&
            json_object_get_int64(v) == pid)
            *listed_other = true;
    json_object_put(root);
}

/* An admission of weights on device 0 from a raw session named name; its reply in g_r. */
static comem_msg_admit_reply admit(const harness *h, const char *name, int64_t weights)
{
    int fd = raw_connect(h->sock), st = -1;
    assert_true(fd >= 0);
    assert_int_equal(raw_hello(fd, COMEM_ROLE_HOST, name, NULL, &st), COMEM_MSG_HELLO_REPLY);
    memset(&g_m, 0, sizeof g_m);
    g_m.type = COMEM_MSG_ADMIT;
    g_m.u.admit.weights = weights;
    g_m.u.admit.timeout_ms = 10000;
    assert_int_equal(raw_call(fd, &g_m, 9, &g_r), COMEM_MSG_ADMIT_REPLY);
    comem_msg_admit_reply r = g_r.u.admit_reply;
    close(fd);
    return r;
}

static void assert_ledger_clean(const harness *h)
{
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    assert_true(h_status_num(h, "coordinator.checks") > 0);
}

static const char *const g_check[] = {"--check", "--reserve", "400MiB", NULL};

/* ---- 1. the app is attributed, asked, unloads, and the admission gets its bytes ---- */

static void test_an_app_is_asked_and_its_unload_counts(void **s)
{
    harness *h = *s;
    h_init(h, SPEC);
    h_start(h, g_check);
    app_args app;
    pid_t app_pid = start_app(&app, h, 4 * GIB);
    int64_t seen = 0;
    bool other = false;
    for (int i = 0; i < 300 && !other; i++) { /* the card lists the app once the coordinator reads it again */
        read_status(h, "llm", app_pid, &seen, &other);
        if (!other)
            usleep(10000);
    }
    assert_true(other); /* before anyone speaks for it: another process on the card */
    speaker_args sp;
    start_speaker(&sp, h, &app, app_pid, true);
    read_status(h, "llm", app_pid, &seen, &other);
    assert_int_equal(seen, app_pid);
    assert_false(other); /* spoken for: attributed */
    /* 8 GiB - 256 MiB driver - 4.3 GiB app - 300 MiB context - 400 MiB reserve < 4 GiB: the app is asked */
    comem_msg_admit_reply r = admit(h, "comfyui", 4 * GIB);
    print_message("granted %d, asked %d, freed %lld\n", r.granted, r.n_asked, (long long)r.freed);
    assert_true(r.granted);
    assert_int_equal(r.n_asked, 1);
    assert_int_equal(r.freed, 4 * GIB);
    assert_int_equal(h_status_num(h, "counters.bytes_freed"), 4 * GIB);
    assert_ledger_clean(h);
}

/* ---- 2. an unload the card does not show on the app is worth nothing ---- */

static void test_an_unload_the_app_did_not_do_counts_nothing(void **s)
{
    harness *h = *s;
    h_init(h, SPEC);
    h_start(h, g_check);
    app_args app;
    pid_t app_pid = start_app(&app, h, 4 * GIB);
    speaker_args sp;
    start_speaker(&sp, h, &app, app_pid, false);
    comem_msg_admit_reply r = admit(h, "comfyui", 4 * GIB);
    print_message("granted %d, asked %d, freed %lld\n", r.granted, r.n_asked, (long long)r.freed);
    assert_false(r.granted);
    assert_true(r.n_asked >= 1);
    assert_int_equal(r.freed, 0); /* the speaker said 4 GiB; the app's use never moved */
    assert_int_equal(h_status_num(h, "counters.bytes_freed"), 0);
    assert_ledger_clean(h);
}

/* ---- 3. who may be spoken for ---- */

static int sleeper_main(void *arg)
{
    (void)arg;
    if (getuid() == 0 && setuid(65534) != 0) /* as root: become another user */
        return 20;
    pause();
    return 0;
}

/* A process with a session of its own (it says HELLO, then waits to be killed). */
static int joined_main(void *arg)
{
    const harness *h = arg;
    int fd = raw_connect(h->sock), st = -1;
    if (fd < 0 || raw_hello(fd, COMEM_ROLE_WORKER, "joined", NULL, &st) != COMEM_MSG_HELLO_REPLY)
        return 10;
    pause();
    return 0;
}

/* The uid /proc says process pid runs as; -1 when it cannot be read. */
static long proc_uid(pid_t pid)
{
    char path[64];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%d", (int)pid);
    return stat(path, &st) == 0 ? (long)st.st_uid : -1;
}

static void test_who_an_app_holder_may_speak_for(void **s)
{
    harness *h = *s;
    h_init(h, SPEC);
    h_start(h, g_check);
    app_args app;
    pid_t app_pid = start_app(&app, h, GIB);
    pid_t joined = h_child(joined_main, h);
    int fd = raw_connect(h->sock), st = -1, fd2 = raw_connect(h->sock);
    assert_true(fd >= 0 && fd2 >= 0);
    assert_int_equal(raw_hello(fd, COMEM_ROLE_WORKER, "speaker", NULL, &st), COMEM_MSG_HELLO_REPLY);
    assert_int_equal(raw_hello(fd2, COMEM_ROLE_WORKER, "second", NULL, &st), COMEM_MSG_HELLO_REPLY);
    for (int i = 0; i < 500 && h_process_count(h, "joined") == 0; i++)
        usleep(10000);
    assert_int_equal(h_process_count(h, "joined"), 1);
    int64_t v = 0;
    /* a pid nobody has any more */
    pid_t gone = h_child(sleeper_main, NULL);
    kill(gone, SIGKILL);
    assert_int_equal(h_wait(gone), -1);
    h_forget(gone);
    assert_int_equal(add_app_holder(fd, (uint32_t)gone, "gone", 2, &v), COMEM_MSG_REPLY);
    assert_int_equal(v, COMEM_ENOENT);
    /* a process that joined the ledger itself */
    assert_int_equal(add_app_holder(fd, (uint32_t)joined, "joined-app", 3, &v), COMEM_MSG_REPLY);
    assert_int_equal(v, COMEM_EEXIST);
    /* one speaker per app: two recipes naming one server are refused */
    assert_int_equal(add_app_holder(fd, (uint32_t)app_pid, "llm", 4, &v), COMEM_MSG_ID_REPLY);
    assert_int_equal(add_app_holder(fd2, (uint32_t)app_pid, "llm-again", 5, &v), COMEM_MSG_REPLY);
    assert_int_equal(v, COMEM_EEXIST);
    /* a process of another user: a child that became nobody (as root), else init */
    pid_t other = getuid() == 0 ? h_child(sleeper_main, NULL) : 1;
    for (int i = 0; getuid() == 0 && i < 500 && proc_uid(other) != 65534; i++)
        usleep(10000);
    if (proc_uid(other) == (long)getuid()) {
        print_message("skipped the other-user case: pid %d runs as this user\n", (int)other);
    } else {
        assert_int_equal(add_app_holder(fd, (uint32_t)other, "another-user", 6, &v), COMEM_MSG_REPLY);
        assert_int_equal(v, COMEM_EPERM);
    }
    close(fd);
    close(fd2);
    assert_ledger_clean(h);
}

static harness g_h;

static int setup(void **s)
{
    *s = &g_h;
    return 0;
}

#define MP_TEST(f) cmocka_unit_test_setup_teardown(f, setup, h_teardown)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *only = getenv("COMEM_TEST_FILTER");
    if (only && *only)
        cmocka_set_test_filter(only);
    const struct CMUnitTest tests[] = {
        MP_TEST(test_an_app_is_asked_and_its_unload_counts),
        MP_TEST(test_an_unload_the_app_did_not_do_counts_nothing),
        MP_TEST(test_who_an_app_holder_may_speak_for),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
