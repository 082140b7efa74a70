/*
 * tests/unit/test_pager_mp.c - a pager steered from another process.
 *
 * A real coordinator (comemd from COMEM_BIN_DIR, with ledger checks) runs
 * over a simulated 8 GiB card in a temporary directory. Process A attaches a
 * pager, loads two 3 GiB models into VBARs, marks itself busy and keeps
 * computing: faulting, touching and unpinning every layer in a loop. Process
 * B asks for admission of a 3 GiB model, more than is free. B must be
 * granted, and its 3 GiB must really fit on the card, because A's pager
 * answered the release ask on A's service thread, evicting unpinned pages
 * while A's loop kept running. A's faults keep working afterwards (offloaded
 * layers are fine, errors are not). Children report through pipes and never
 * use cmocka; an alarm bounds each of them.
 */
#include "unit/cmocka_all.h"
#include "unit/tmpdir.h"

#include <json-c/json.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "comem/pager.h"
#include "probe/sim.h"

#define MIB COMEM_MIB
#define GIB COMEM_GIB
#define LAYER (64 * MIB)
#define MODEL (3 * GIB)
#define LAYERS (MODEL / LAYER)

enum { MSG_STOP = 0, MSG_MARK = 1 };

static char g_dir[64], g_sock[100], g_spec[320];
static pid_t g_comemd;

/* ---------------------------------------------------------------- pipes */

static void put(int fd, int64_t v)
{
    if (write(fd, &v, sizeof v) != (ssize_t)sizeof v)
        _exit(90);
}

static bool get(int fd, int64_t *v, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) <= 0)
        return false;
    return read(fd, v, sizeof *v) == (ssize_t)sizeof *v;
}

typedef struct chan {
    int down[2]; /* parent -> child */
    int up[2];   /* child -> parent */
} chan;

static pid_t spawn(int (*fn)(chan *), chan *ch)
{
    if (pipe(ch->down) || pipe(ch->up))
        abort();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        _exit(fn(ch));
    }
    return pid;
}

static int reap(pid_t pid)
{
    int st = 0;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---------------------------------------------------------------- process A: the pager */

static int child_pager(chan *ch)
{
    comem_client *c = NULL;
    if (comem_client_open(g_sock, COMEM_CLIENT_WORKER, "pager-a", -1, COMEM_OPEN_NO_LOCAL, &c) != COMEM_OK)
        return 10;
    comem_client_set_timeout(c, 10000);
    comem_pager *p = NULL;
    if (comem_pager_open(COMEM_PAGER_SIM, 0, g_spec, &p) != COMEM_OK)
        return 11;
    if (comem_pager_attach(p, c, "weights") != COMEM_OK)
        return 12;
    comem_vbar *v[2];
    uint32_t sig[4];
    for (int m = 0; m < 2; m++) {
        if (comem_vbar_create(p, MODEL, LAYER, &v[m]) != COMEM_OK)
            return 13;
        for (int64_t k = 0; k < LAYERS; k++) {
            if (comem_vbar_fault(v[m], k * LAYER, LAYER, sig, 4) != COMEM_VBAR_RESIDENT)
                return 14;
            comem_vbar_unpin(v[m], k * LAYER, LAYER);
        }
    }
    if (comem_holder_busy(c, comem_pager_holder(p), 1, "prompt-1") != COMEM_OK ||
        comem_holder_busy(c, 0, 1, "prompt-1") != COMEM_OK)
        return 15;
    put(ch->up[1], comem_pager_usage(p));

    /* Compute: every layer of both models, over and over, until told to stop. */
    int64_t loops = 0, resident = 0, offloaded = 0, errors = 0, after = -1, after_ok = 0;
    uint8_t tag[4096];
    memset(tag, 0x5a, sizeof tag);
    for (bool stop = false; !stop; loops++) {
        for (int m = 0; m < 2; m++) {
            for (int64_t k = 0; k < LAYERS; k++) {
                int rc = comem_vbar_fault(v[m], k * LAYER, LAYER, sig, 4);
                if (rc == COMEM_VBAR_RESIDENT) {
                    if (comem_vbar_write(v[m], k * LAYER, tag, sizeof tag) != COMEM_OK)
                        errors++;
                    comem_vbar_unpin(v[m], k * LAYER, LAYER);
                    resident++;
                } else if (rc == COMEM_VBAR_OFFLOADED) {
                    offloaded++;
                } else {
                    errors++;
                }
                if (after >= 0 && rc >= 0)
                    after_ok++;
            }
        }
        int64_t msg;
        while (get(ch->down[0], &msg, 0)) {
            if (msg == MSG_MARK)
                after = loops;
            else
                stop = true;
        }
    }
    put(ch->up[1], loops);
    put(ch->up[1], after < 0 ? -1 : loops - after);
    put(ch->up[1], after_ok);
    put(ch->up[1], resident);
    put(ch->up[1], offloaded);
    put(ch->up[1], errors);
    put(ch->up[1], comem_pager_stat(p, COMEM_PAGER_STAT_RELEASE_ASKS));
    put(ch->up[1], comem_pager_stat(p, COMEM_PAGER_STAT_EVICTIONS));
    put(ch->up[1], comem_pager_usage(p));
    comem_holder_busy(c, 0, 0, NULL);
    int rc = comem_pager_detach(p);
    comem_pager_close(p);
    comem_client_close(c);
    return rc == COMEM_OK ? 0 : 16;
}

/* ---------------------------------------------------------------- process B: the newcomer */

static int child_requester(chan *ch)
{
    comem_sim_spec spec;
    comem_sim *sim = NULL;
    if (comem_sim_spec_parse(g_spec, &spec, NULL, 0) != COMEM_OK || comem_sim_open(&spec, &sim) != COMEM_OK)
        return 20;
    comem_client *c = NULL;
    if (comem_client_open(g_sock, COMEM_CLIENT_WORKER, "requester", -1, COMEM_OPEN_NO_LOCAL, &c) != COMEM_OK)
        return 21;
    comem_sim_touch(sim, 0); /* its context exists before it asks */
    comem_device_reading *r = malloc(sizeof *r);
    if (!r || comem_sim_read(sim, 0, r) != COMEM_OK)
        return 22;
    int64_t free_before = r->free;
    free(r);
    uint64_t grant = 0;
    int64_t short_by = 0, freed = 0;
    int asked = 0, busy = 0;
    int rc = comem_admit(c, 0, 0, MODEL, 0, 0, NULL, 0, 20000, &grant, &short_by);
    comem_admit_details(c, NULL, NULL, NULL, &freed, &asked, &busy);
    int arc = rc == COMEM_OK ? comem_sim_alloc(sim, 0, MODEL) : -1000;
    put(ch->up[1], free_before);
    put(ch->up[1], rc);
    put(ch->up[1], arc);
    put(ch->up[1], freed);
    put(ch->up[1], asked);
    put(ch->up[1], short_by);
    if (rc == COMEM_OK)
        comem_grant_done(c, grant, 0, 0);
    int64_t msg;
    (void)get(ch->down[0], &msg, 30000); /* holds the memory while A keeps computing */
    comem_client_close(c);
    comem_sim_close(sim);
    return 0;
}

/* ---------------------------------------------------------------- the coordinator */

static bool connectable(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", g_sock);
    bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static int setup(void **s)
{
    (void)s;
    signal(SIGPIPE, SIG_IGN);
    assert_int_equal(test_tmpdir_make(g_dir, sizeof g_dir, "pager-mp"), 0);
    snprintf(g_sock, sizeof g_sock, "%s/s", g_dir);
    snprintf(g_spec, sizeof g_spec, "sim:8GiB:reserved=0:ctx=256MiB:path=%s/card", g_dir);
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    if (g_comemd > 0) {
        kill(g_comemd, SIGTERM);
        waitpid(g_comemd, NULL, 0);
        g_comemd = 0;
    }
    return test_tmpdir_remove(g_dir);
}

static void start_comemd(void)
{
    char bin[600];
    const char *dir = getenv("COMEM_BIN_DIR");
    snprintf(bin, sizeof bin, "%s/comemd", dir ? dir : "build/bin");
    if (access(bin, X_OK) != 0) {
        printf("skipped: no comemd at %s\n", bin);
        skip();
    }
    fflush(NULL);
    g_comemd = fork();
    assert_true(g_comemd >= 0);
    if (g_comemd == 0) {
        execl(bin, "comemd", "--socket", g_sock, "--device", g_spec, "--check", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 500 && !connectable(); i++)
        usleep(10000);
    assert_true(connectable());
}

static int64_t status_num(json_object *root, const char *a, const char *b)
{
    json_object *x = NULL, *y = NULL;
    if (!json_object_object_get_ex(root, a, &x) || !json_object_object_get_ex(x, b, &y))
        return INT64_MIN;
    return json_object_get_int64(y);
}

/* ---------------------------------------------------------------- the test */

static void test_release_while_computing(void **s)
{
    (void)s;
    start_comemd();
    chan a, b;
    pid_t pa = spawn(child_pager, &a);
    int64_t usage = 0;
    assert_true(get(a.up[0], &usage, 30000));
    assert_int_equal(usage, 2 * MODEL);

    pid_t pb = spawn(child_requester, &b);
    int64_t r[6];
    for (int i = 0; i < 6; i++)
        assert_true(get(b.up[0], &r[i], 40000));
    printf("B: free before %lld MiB; admit %s (short by %lld MiB), alloc %s; %lld MiB freed by others, %lld holder(s) "
           "asked\n",
           (long long)(r[0] / MIB), comem_status_str((int)r[1]), (long long)(r[5] / MIB),
           comem_status_str((int)r[2]), (long long)(r[3] / MIB), (long long)r[4]);
    assert_true(r[0] < MODEL);          /* it did not fit without a release */
    assert_int_equal(r[1], COMEM_OK);   /* granted */
    assert_int_equal(r[2], COMEM_OK);   /* and the 3 GiB really fit on the card */
    assert_true(r[3] > 0);              /* because A gave bytes back */
    assert_true(r[4] >= 1);

    put(a.down[1], MSG_MARK);
    usleep(300 * 1000); /* A keeps computing next to B's model */
    put(a.down[1], MSG_STOP);
    int64_t x[9];
    for (int i = 0; i < 9; i++)
        assert_true(get(a.up[0], &x[i], 30000));
    printf("A: %lld loops (%lld after the grant, %lld faults answered there); faults resident %lld, offloaded "
           "%lld, errors %lld; %lld release ask(s), %lld pages evicted; usage %lld MiB\n",
           (long long)x[0], (long long)x[1], (long long)x[2], (long long)x[3], (long long)x[4], (long long)x[5],
           (long long)x[6], (long long)x[7], (long long)(x[8] / MIB));
    assert_int_equal(x[5], 0);                    /* no fault failed, before or after */
    assert_true(x[1] >= 1 && x[2] >= 2 * LAYERS); /* it kept computing after the grant */
    assert_true(x[6] >= 1);                       /* asked, and answered on its service thread */
    assert_true(x[7] * LAYER >= r[3]);            /* what it reported freed was evicted */
    assert_true(x[8] <= 2 * MODEL - r[3]);        /* and stayed given back */
    assert_true(x[3] > 0);
    assert_int_equal(reap(pa), 0);

    put(b.down[1], 0);
    assert_int_equal(reap(pb), 0);

    /* The coordinator's ledger stayed consistent throughout. */
    comem_client *c = NULL;
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_TOOL, "test", -1, COMEM_OPEN_NO_LOCAL, &c), COMEM_OK);
    char *text = NULL;
    assert_int_equal(comem_status_json(c, &text), COMEM_OK);
    json_object *root = json_tokener_parse(text);
    comem_free(text);
    assert_non_null(root);
    assert_int_equal(status_num(root, "coordinator", "violations"), 0);
    assert_true(status_num(root, "coordinator", "checks") > 0);
    json_object_put(root);
    comem_client_close(c);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_release_while_computing, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
