/*
 * tests/integration/test_trust_table.c - a full session table still lets a new process in (issue 40 item 5).
 *
 * Played against a real comemd (ledger checks after every mutation) by real
 * processes on raw connections: 17 processes each open as many sessions as
 * they are allowed, one after another, until refused. The table fills; a
 * newcomer is still sure of a few sessions, taken from the process holding the
 * most, which is told why; an honest worker gets in after that, and
 * `comem status` answers.
 */
#include "unit/cmocka_all.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "comem/comem.h"
#include "harness.h"
#include "raw.h"

/* What docs/protocol.md promises ("Sessions"). */
#define PEER_CONNS 64 /* connections one process may hold */
#define SURE 4        /* sessions every process is sure of */
#define PROCS 17      /* 17 x 64 > the 1024 sessions there may be */

static char g_out[1 << 20], g_err[1 << 16];

typedef struct filler_args {
    const harness *h;
    chan down, up;
} filler_args;

/* Sends a text up the pipe, whole. */
static void put_text(int fd, const char *text)
{
    char buf[COMEM_WIRE_TEXT_MAX] = "";
    snprintf(buf, sizeof buf, "%s", text);
    ssize_t w = write(fd, buf, sizeof buf);
    (void)w;
}

static bool get_text(int fd, char *buf)
{
    return read(fd, buf, COMEM_WIRE_TEXT_MAX) == COMEM_WIRE_TEXT_MAX;
}

/*
 * Opens worker sessions until one is refused (or one past its bound), says how many and why; then,
 * told to, says how many of them the coordinator closed since, and why (the first one's reply).
 */
static int filler_main(void *arg)
{
    filler_args *a = arg;
    int fds[PEER_CONNS + 1], n = 0, st = 0;
    char why[COMEM_WIRE_TEXT_MAX] = "";
    while (n < PEER_CONNS + 1) {
        int fd = raw_connect(a->h->sock);
        if (fd < 0) {
            snprintf(why, sizeof why, "connect failed");
            break;
        }
        comem_msg r;
        comem_msg m = {.type = COMEM_MSG_HELLO, .request_id = 1};
        m.u.hello.proto_version = COMEM_WIRE_VERSION;
        m.u.hello.role = COMEM_ROLE_WORKER;
        m.u.hello.reserve_base = -1;
        snprintf(m.u.hello.name, sizeof m.u.hello.name, "filler");
        raw_send(fd, &m); /* read on when it fails: a refusal at accept was written first */
        if (raw_recv(fd, &r, 5000) != 1) {
            snprintf(why, sizeof why, "no answer to HELLO");
            close(fd);
            break;
        }
        if (r.type != COMEM_MSG_HELLO_REPLY) {
            st = r.type == COMEM_MSG_REPLY ? r.u.reply.status : -1000;
            snprintf(why, sizeof why, "%s", r.type == COMEM_MSG_REPLY ? r.u.reply.message : "?");
            close(fd);
            break;
        }
        fds[n++] = fd;
    }
    ch_put(a->up.wr, n);
    ch_put(a->up.wr, st);
    put_text(a->up.wr, why);
    int64_t go;
    if (!ch_get(a->down.rd, &go, 120000))
        return 1;
    int closed = 0;
    char reason[COMEM_WIRE_TEXT_MAX] = "";
    for (int i = 0; i < n; i++) {
        comem_msg r;
        int got = raw_recv(fds[i], &r, 0); /* what was said is there by now: the parent saw its effect */
        if (got == 0 || (got == 1 && raw_wait_eof(fds[i], 5000))) {
            closed++;
            if (got == 1 && r.type == COMEM_MSG_REPLY && !reason[0])
                snprintf(reason, sizeof reason, "%s", r.u.reply.message);
        }
    }
    ch_put(a->up.wr, closed);
    put_text(a->up.wr, reason);
    ch_get(a->down.rd, &go, 120000); /* hold the rest until the parent is done */
    return 0;
}

/* A new process's ordinary client: it joins as a worker and its RESERVE is answered. 0 when both were. */
static int honest_main(void *arg)
{
    const harness *h = arg;
    comem_client *c = NULL;
    int rc = comem_client_open(h->sock, COMEM_CLIENT_WORKER, "honest", -1, COMEM_OPEN_NO_LOCAL, &c);
    if (rc != COMEM_OK) {
        fprintf(stderr, "honest: open: %s\n", comem_status_str(rc));
        return 10;
    }
    int64_t reserve = -1, headroom = -1;
    rc = comem_reserve(c, 0, &reserve, &headroom);
    comem_client_close(c);
    return rc == COMEM_OK && reserve >= 0 ? 0 : 20;
}

/* The most sessions one pid holds, and the sessions in all, from a status text; false when unreadable. */
static bool sessions_in_status(const char *text, int *most, int *all)
{
    json_object *root = text ? json_tokener_parse(text) : NULL, *devs, *ps;
    if (!root || !json_object_object_get_ex(root, "devices", &devs) ||
        !json_object_object_get_ex(json_object_array_get_idx(devs, 0), "processes", &ps)) {
        json_object_put(root);
        return false;
    }
    int pids[2048], counts[2048], n = 0;
    *most = *all = 0;
    for (size_t i = 0; i < json_object_array_length(ps); i++) {
        json_object *v;
        if (!json_object_object_get_ex(json_object_array_get_idx(ps, i), "pid", &v))
            continue;
        int pid = json_object_get_int(v), k = 0;
        while (k < n && pids[k] != pid)
            k++;
        if (k == n && n < 2048) {
            pids[n] = pid;
            counts[n++] = 0;
        }
        if (k < n && ++counts[k] > *most)
            *most = counts[k];
        (*all)++;
    }
    json_object_put(root);
    return true;
}

static void test_a_full_table_lets_a_new_process_in(void **s)
{
    harness *h = *s;
    h_init(h, "sim:16GiB:ctx=300MiB");
    h_start(h, NULL);
    static filler_args kids[PROCS];
    pid_t pids[PROCS];
    int64_t n[PROCS], st[PROCS], total = 0;
    char why[PROCS][COMEM_WIRE_TEXT_MAX];
    for (int i = 0; i < PROCS; i++) { /* one after another: who is refused where is then known */
        kids[i].h = h;
        ch_open(&kids[i].down, &kids[i].up);
        pids[i] = h_child(filler_main, &kids[i]);
        assert_true(ch_get(kids[i].up.rd, &n[i], 60000) && ch_get(kids[i].up.rd, &st[i], 5000));
        assert_true(get_text(kids[i].up.rd, why[i]));
        total += n[i];
        print_message("process %2d (pid %d): %2lld sessions, then %lld '%s'\n", i + 1, (int)pids[i], (long long)n[i],
                      (long long)st[i], why[i]);
    }
    /* The table filled, and the last process is still sure of its share. */
    assert_int_equal(n[PROCS - 1], SURE);
    assert_int_equal(st[PROCS - 1], COMEM_EBUSY);
    assert_non_null(strstr(why[PROCS - 1], "full")); /* it names the bound, and whose */
    assert_non_null(strstr(why[PROCS - 1], "filler"));
    for (int i = 0; i < PROCS - 2; i++) /* the first ones took what one process may */
        assert_int_equal(n[i], PEER_CONNS);
    assert_true(n[PROCS - 2] < PEER_CONNS); /* the one that filled it was told so */
    assert_int_equal(st[PROCS - 2], COMEM_EBUSY);
    assert_non_null(strstr(why[PROCS - 2], "full"));

    /* A new process's ordinary client gets in. */
    assert_int_equal(h_wait(h_child(honest_main, h)), 0);

    /* comem status answers, listing the fillers. */
    const char *argv[] = {"comem", "status", "--socket", h->sock, NULL};
    int rc = h_run(argv, NULL, 20000, g_out, sizeof g_out, g_err, sizeof g_err);
    if (rc != 0)
        print_message("comem status: %d: %s\n", rc, g_err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(g_out, "filler"));

    /* Who made room was told why: sessions of the processes holding the most, one each for the
       newcomer's share and the honest worker. */
    int64_t closed = 0, c;
    char reason[COMEM_WIRE_TEXT_MAX] = "", r[COMEM_WIRE_TEXT_MAX];
    for (int i = 0; i < PROCS; i++) {
        ch_put(kids[i].down.wr, 1);
        assert_true(ch_get(kids[i].up.rd, &c, 30000) && get_text(kids[i].up.rd, r));
        closed += c;
        if (c && !reason[0])
            snprintf(reason, sizeof reason, "%s", r);
        if (c)
            assert_true(n[i] - c >= SURE); /* never below what every process is sure of */
    }
    print_message("%lld sessions closed to make room; one was told '%s'\n", (long long)closed, reason);
    assert_int_equal(closed, SURE + 1);
    assert_non_null(strstr(reason, "full"));

    /* The books agree: no violation, nobody above its bound, no more sessions than the table holds. */
    char *text = h_status(h);
    int most = 0, all = 0;
    assert_true(sessions_in_status(text, &most, &all));
    comem_free(text);
    print_message("%d sessions listed, the most of one process %d\n", all, most);
    assert_true(most <= PEER_CONNS);
    assert_int_equal(all, total - closed + 1); /* the fillers', and the status's own */
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    for (int i = 0; i < PROCS; i++) {
        ch_put(kids[i].down.wr, 1);
        assert_int_equal(h_wait(pids[i]), 0);
    }
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
}

static harness g_h;

static int setup(void **s)
{
    *s = &g_h;
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *only = getenv("COMEM_TEST_FILTER");
    if (only && *only)
        cmocka_set_test_filter(only);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_full_table_lets_a_new_process_in, setup, h_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
