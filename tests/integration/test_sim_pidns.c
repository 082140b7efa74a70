/*
 * tests/integration/test_sim_pidns.c - a client in another pid namespace on the simulated card.
 *
 * comemd runs over a simulated card; a client process runs in a pid namespace
 * of its own (pid 2 there, or the next free one), as `unshare --pid --fork` makes one, and keeps
 * the host's /proc. Checked, in order: its 2 GiB on the card survive another
 * process's operation on the card (which reaps the slots of dead processes),
 * the card and the coordinator attribute them to its pid as the host numbers
 * it (the pid the coordinator's session has), its own operations leave the
 * host process's bytes alone, and once it is gone its bytes are reaped.
 *
 * The namespace needs CLONE_NEWPID: as root, or inside a new user namespace
 * where the kernel lets unprivileged users make one; the test skips, saying
 * why, when neither works.
 */
#include "unit/cmocka_all.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "harness.h"

#define GIB COMEM_GIB
#define MIB COMEM_MIB
#define CONTEXT (256 * MIB)

enum { GO_AGAIN = 1, GO_EXIT = 2 };

typedef struct nsargs {
    const harness *h;
    chan down, up;
} nsargs;

/* Writes text to a /proc file of this process; false when it cannot. */
static bool write_proc(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    close(fd);
    return ok;
}

/*
 * Puts this (single-threaded) process's next children in a new pid namespace:
 * CLONE_NEWPID alone (root), else with a new user namespace mapping this uid
 * and gid onto themselves. 0, or the errno of the last attempt.
 */
static int enter_pid_namespace(void)
{
    if (unshare(CLONE_NEWPID) == 0)
        return 0;
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0)
        return errno;
    char map[64];
    snprintf(map, sizeof map, "%d %d 1\n", (int)uid, (int)uid);
    if (!write_proc("/proc/self/setgroups", "deny") || !write_proc("/proc/self/uid_map", map))
        return errno ? errno : EPERM;
    snprintf(map, sizeof map, "%d %d 1\n", (int)gid, (int)gid);
    return write_proc("/proc/self/gid_map", map) ? 0 : (errno ? errno : EPERM);
}

/* The client, the namespace's second process: 2 GiB on the card and in the ledger; then what it is told. */
static int inner_client(nsargs *a)
{
    comem_client *c = NULL;
    comem_sim *sim = h_sim(a->h);
    uint64_t holder = 0, entry = 0;
    if (!sim || comem_client_open(a->h->sock, COMEM_CLIENT_WORKER, "inner", -1, COMEM_OPEN_NO_LOCAL, &c) != COMEM_OK ||
        comem_holder_add(c, "models", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder) != COMEM_OK ||
        comem_entry_add(c, holder, "model", 2 * GIB, 0, 0, &entry) != COMEM_OK ||
        comem_sim_alloc(sim, 0, 2 * GIB) != COMEM_OK || comem_entry_set_resident(c, entry, 2 * GIB) != COMEM_OK)
        return 10;
    ch_put(a->up.wr, getpid());
    int64_t go = 0;
    while (ch_get(a->down.rd, &go, 60000) && go == GO_AGAIN) /* an operation of its own: it reaps too */
        ch_put(a->up.wr, comem_sim_alloc(sim, 0, 64 * MIB));
    _exit(0); /* as a crash would: nothing freed, nothing said */
}

/* The namespace's init (pid 1): runs the client as pid 2 and passes its exit status on. */
static int ns_init(nsargs *a)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test kills the helper: its namespace dies with it */
    alarm(90);
    pid_t kid = fork();
    if (kid == 0) {
        alarm(90);
        _exit(inner_client(a));
    }
    int st = 0;
    while (waitpid(kid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 20;
}

/* Forked by the test: makes the namespace and its init; reports -errno when it cannot. */
static int ns_parent(void *arg)
{
    nsargs *a = arg;
    int err = enter_pid_namespace();
    if (err) {
        ch_put(a->up.wr, -err);
        return 0;
    }
    pid_t init = fork();
    if (init == 0)
        _exit(ns_init(a));
    int st = 0;
    while (waitpid(init, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 30;
}

/* The coordinator's view of the card: the pid of session `name` and the card bytes no session accounts for. */
static void coordinator_view(const harness *h, const char *name, int64_t *pid, int64_t *others)
{
    *pid = 0;
    *others = 0;
    char *text = h_status(h);
    json_object *root = text ? json_tokener_parse(text) : NULL;
    comem_free(text);
    json_object *devs, *dev, *ps, *os, *v;
    if (root && json_object_object_get_ex(root, "devices", &devs) && (dev = json_object_array_get_idx(devs, 0))) {
        if (json_object_object_get_ex(dev, "processes", &ps))
            for (size_t i = 0; i < json_object_array_length(ps); i++) {
                json_object *p = json_object_array_get_idx(ps, i);
                if (json_object_object_get_ex(p, "name", &v) && !strcmp(json_object_get_string(v), name) &&
                    json_object_object_get_ex(p, "pid", &v))
                    *pid = json_object_get_int64(v);
            }
        if (json_object_object_get_ex(dev, "other_processes", &os) && json_object_is_type(os, json_type_array))
            for (size_t i = 0; i < json_object_array_length(os); i++)
                if (json_object_object_get_ex(json_object_array_get_idx(os, i), "bytes", &v))
                    *others += json_object_get_int64(v);
    }
    json_object_put(root);
}

/* True when the card reading lists pid with bytes. */
static bool card_lists(comem_sim *sim, int32_t pid, int64_t bytes)
{
    comem_device_reading r;
    assert_int_equal(comem_sim_read(sim, 0, &r), COMEM_OK);
    for (size_t i = 0; i < r.n_procs; i++)
        if (r.procs[i].pid == pid)
            return r.procs[i].bytes == bytes;
    return false;
}

static void test_client_in_another_pid_namespace(void **s)
{
    harness *h = *s;
    h_init(h, "sim:8GiB:ctx=256MiB");
    h_start(h, NULL);
    nsargs a = {.h = h};
    ch_open(&a.down, &a.up);
    pid_t helper = h_child(ns_parent, &a);
    int64_t ns_pid = 0;
    assert_true(ch_get(a.up.rd, &ns_pid, 30000));
    if (ns_pid < 0) {
        print_message("cannot make a pid namespace here (unshare: %s, as uid %d, and with a user namespace): "
                      "not exercised\n", strerror((int)-ns_pid), (int)getuid());
        h_wait(helper);
        skip();
    }
    /* It numbers itself in its own namespace: 2, or the next (a sanitizer's thread may take 2). */
    assert_true(ns_pid >= 2 && ns_pid < 10);

    /* The coordinator numbers it as the host does (SO_PEERCRED): the pid its card bytes go by. */
    int64_t host_pid = 0, others = 0;
    coordinator_view(h, "inner", &host_pid, &others);
    assert_true(host_pid > 2);
    assert_int_not_equal(host_pid, ns_pid);

    /* Another process's operation reaps the dead: the client's 2 GiB stay, under its host pid. */
    comem_sim *sim = h_sim(h);
    assert_non_null(sim);
    assert_int_equal(comem_sim_alloc(sim, 0, 256 * MIB), COMEM_OK);
    int64_t context = 0, allocated = 0;
    assert_int_equal(comem_sim_usage(sim, 0, (int32_t)host_pid, &context, &allocated), COMEM_OK);
    assert_int_equal(allocated, 2 * GIB);
    assert_int_equal(context, CONTEXT);
    assert_true(card_lists(sim, (int32_t)host_pid, 2 * GIB + CONTEXT));
    comem_device_reading r;
    assert_int_equal(comem_sim_read(sim, 0, &r), COMEM_OK);
    assert_int_equal(r.used, r.reserved + 2 * GIB + 256 * MIB + 2 * CONTEXT);

    /* The coordinator reads the same card: nothing on it belongs to a process it does not know. */
    for (int i = 0; i < 200; i++) {
        coordinator_view(h, "inner", &host_pid, &others);
        if (others == 0)
            break;
        usleep(20000);
    }
    assert_int_equal(others, 0);
    assert_int_equal(h_process_resident(h, "inner"), 2 * GIB);

    /* The client's own operation reaps too: this process's bytes stay. */
    ch_put(a.down.wr, GO_AGAIN);
    int64_t rc = -1;
    assert_true(ch_get(a.up.rd, &rc, 30000));
    assert_int_equal(rc, COMEM_OK);
    assert_int_equal(comem_sim_usage(sim, 0, getpid(), &context, &allocated), COMEM_OK);
    assert_int_equal(allocated, 256 * MIB);
    assert_int_equal(comem_sim_usage(sim, 0, (int32_t)host_pid, &context, &allocated), COMEM_OK);
    assert_int_equal(allocated, 2 * GIB + 64 * MIB);

    /* Once it is gone, its bytes are reaped like any dead process's. */
    ch_put(a.down.wr, GO_EXIT);
    assert_int_equal(h_wait(helper), 0);
    assert_int_equal(comem_sim_free(sim, 0, 256 * MIB), COMEM_OK); /* an operation: it reaps */
    assert_int_equal(comem_sim_usage(sim, 0, (int32_t)host_pid, &context, &allocated), COMEM_OK);
    assert_int_equal(allocated, 0);
    assert_int_equal(context, 0);
    assert_int_equal(comem_sim_read(sim, 0, &r), COMEM_OK);
    assert_int_equal(r.used, r.reserved + CONTEXT); /* this process's context alone */
    comem_sim_close(sim);
}

static int setup(void **s)
{
    static harness h;
    *s = &h;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_client_in_another_pid_namespace, setup, h_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
