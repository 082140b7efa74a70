/*
 * tests/unit/test_sim.c - the simulated card, shared by real processes.
 *
 * Children are forked and open the card themselves (the file is the only thing
 * they share). Checked after every step: used = reserved + Σ per-process use,
 * free = total - used, and each process's use equals its own bookkeeping. One
 * churning child is SIGKILLed mid-run; another is killed holding the lock.
 */
#include "unit/cmocka_all.h"
#include "unit/tmpdir.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/common.h"
#include "probe/sim.h"

static char g_dir[256];

static int setup(void **s)
{
    (void)s;
    assert_int_equal(test_tmpdir_make(g_dir, sizeof g_dir, "sim"), 0);
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    return test_tmpdir_remove(g_dir);
}

/* Opens the card without cmocka asserts: children must never longjmp into the runner. */
static comem_sim *try_open(const char *text, const char *file)
{
    char full[512];
    snprintf(full, sizeof full, "%s:path=%s/%s", text, g_dir, file);
    comem_sim_spec spec;
    comem_sim *sim = NULL;
    if (comem_sim_spec_parse(full, &spec, NULL, 0) != 0 || comem_sim_open(&spec, &sim) != 0)
        return NULL;
    return sim;
}

static comem_sim *open_sim(const char *text, const char *file)
{
    comem_sim *sim = try_open(text, file);
    assert_non_null(sim);
    return sim;
}

/* Starts a child: it dies on its own if the parent fails and never answers. */
static pid_t child_fork(void)
{
    pid_t p = fork();
    if (p == 0)
        alarm(30);
    return p;
}

/* A child's open, or its exit with status 3. */
static comem_sim *child_open(const char *text, const char *file)
{
    comem_sim *sim = try_open(text, file);
    if (!sim)
        _exit(3);
    return sim;
}

/* The invariants every NVML-style reading must satisfy. Returns Σ per-process. */
static int64_t check_reading(comem_sim *sim, int card)
{
    comem_device_reading r;
    assert_int_equal(comem_sim_read(sim, card, &r), 0);
    int64_t sum = 0;
    for (size_t i = 0; i < r.n_procs; i++) {
        assert_true(r.procs[i].bytes >= 0);
        sum += r.procs[i].bytes;
    }
    assert_true(r.used == r.reserved + sum);
    assert_true(r.free == comem_clamp0(r.total - r.used));
    assert_true(r.overcommit == comem_clamp0(r.used - r.total));
    assert_int_equal(r.scope, COMEM_SCOPE_DEVICE_WIDE);
    return sum;
}

static void test_spec_parse(void **s)
{
    (void)s;
    comem_sim_spec sp;
    char err[200], canon[160];
    assert_int_equal(comem_sim_spec_parse("sim", &sp, err, sizeof err), 0);
    assert_int_equal(sp.n_cards, 1);
    assert_true(sp.capacity == 24 * COMEM_GIB);
    assert_int_equal(sp.semantics, COMEM_SIM_LINUX);
    assert_int_equal(comem_sim_spec_parse("sim:16GiB:wddm", &sp, err, sizeof err), 0);
    assert_true(sp.capacity == 16 * COMEM_GIB);
    assert_int_equal(sp.semantics, COMEM_SIM_WDDM);
    assert_int_equal(comem_sim_spec_parse("sim:2x80GiB:ctx=512MiB:reserved=0", &sp, err, sizeof err), 0);
    assert_int_equal(sp.n_cards, 2);
    assert_true(sp.capacity == 80 * COMEM_GIB && sp.context_cost == 512 * COMEM_MIB && sp.reserved == 0);
    comem_sim_spec_format(&sp, canon, sizeof canon);
    assert_string_equal(canon, "sim:2x80GiB:linux:reserved=0:ctx=512MiB");
    assert_int_equal(comem_sim_spec_parse("sim:1GiB:path=/tmp/a:b", &sp, err, sizeof err), 0);
    assert_string_equal(sp.path, "/tmp/a:b");
    const char *bad[] = {"gpu", "sim:", "sim:lots", "sim:0x8GiB", "sim:9x8GiB", "sim:8GB", "sim:1.5",
                         "sim:1MiB", "sim:linux:extra", "sim:ctx=-1", "simx", "sim:24GiB::wddm"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(comem_sim_spec_parse(bad[i], &sp, err, sizeof err), COMEM_EINVAL);
        assert_true(strlen(err) > 0);
    }
}

static void test_single_process(void **s)
{
    (void)s;
    comem_sim *sim = open_sim("sim:4GiB:reserved=256MiB:ctx=300MiB", "single");
    int32_t me = (int32_t)getpid();
    assert_int_equal(check_reading(sim, 0), 0);
    assert_int_equal(comem_sim_alloc(sim, 0, 1 * COMEM_GIB), 0);
    int64_t ctx, alloc;
    assert_int_equal(comem_sim_usage(sim, 0, me, &ctx, &alloc), 0);
    assert_true(ctx == 300 * COMEM_MIB && alloc == 1 * COMEM_GIB); /* context charged at first allocation */
    assert_true(check_reading(sim, 0) == 300 * COMEM_MIB + COMEM_GIB);
    comem_device_reading r;
    assert_int_equal(comem_sim_read(sim, 0, &r), 0);
    assert_true(r.total == 4 * COMEM_GIB && r.reserved == 256 * COMEM_MIB);
    assert_int_equal(r.n_procs, 1);
    assert_int_equal(r.procs[0].pid, me);
    assert_string_equal(r.source, "sim");
    assert_true(strncmp(r.uuid, "SIM-", 4) == 0);
    /* the cuMemGetInfo-style view leaves the reserved slice out of its total */
    comem_device_reading l;
    assert_int_equal(comem_sim_read_local(sim, 0, &l), 0);
    assert_true(l.total == 4 * COMEM_GIB - 256 * COMEM_MIB);
    assert_true(l.free == r.free);
    /* physical memory bounds a Linux card */
    int64_t left = r.free;
    assert_int_equal(comem_sim_alloc(sim, 0, left + 1), COMEM_ENOSPC);
    assert_int_equal(comem_sim_alloc(sim, 0, left), 0);
    assert_int_equal(check_reading(sim, 0), 4 * COMEM_GIB - 256 * COMEM_MIB);
    assert_int_equal(comem_sim_free(sim, 0, left + 1 * COMEM_GIB + 1), COMEM_EINVAL);
    assert_int_equal(comem_sim_free(sim, 0, left + 1 * COMEM_GIB), 0);
    assert_true(check_reading(sim, 0) == 300 * COMEM_MIB); /* the context stays until exit */
    assert_int_equal(comem_sim_release_self(sim), 0);
    assert_int_equal(check_reading(sim, 0), 0);
    assert_int_equal(comem_sim_alloc(sim, 1, 1), COMEM_ENODEV);
    assert_int_equal(comem_sim_alloc(sim, 0, -1), COMEM_EINVAL);
    comem_sim_close(sim);
}

static void test_settings_mismatch_and_permissions(void **s)
{
    (void)s;
    comem_sim *a = open_sim("sim:4GiB", "mm");
    comem_sim_spec sp;
    char text[512];
    snprintf(text, sizeof text, "sim:8GiB:path=%s/mm", g_dir);
    assert_int_equal(comem_sim_spec_parse(text, &sp, NULL, 0), 0);
    comem_sim *b = NULL;
    assert_int_equal(comem_sim_open(&sp, &b), COMEM_EEXIST);
    struct stat st;
    assert_int_equal(stat(comem_sim_path(a), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(chmod(comem_sim_path(a), 0644), 0);
    snprintf(text, sizeof text, "sim:4GiB:path=%s/mm", g_dir);
    assert_int_equal(comem_sim_spec_parse(text, &sp, NULL, 0), 0);
    assert_int_equal(comem_sim_open(&sp, &b), COMEM_EPERM);
    comem_sim_close(a);
}

/* Blocks until the child writes one byte (its "ready"). */
static void wait_byte(int fd)
{
    char c;
    assert_int_equal(read(fd, &c, 1), 1);
}

static void test_wddm_views(void **s)
{
    (void)s;
    comem_sim *sim = open_sim("sim:16GiB:wddm:reserved=0:ctx=300MiB", "wddm");
    assert_int_equal(comem_sim_alloc(sim, 0, 2 * COMEM_GIB), 0);
    comem_device_reading before_local, before_dev, after_local, after_dev;
    assert_int_equal(comem_sim_read_local(sim, 0, &before_local), 0);
    assert_int_equal(before_local.scope, COMEM_SCOPE_PROCESS_LOCAL);
    assert_int_equal(comem_sim_read(sim, 0, &before_dev), 0);
    int ready[2], done[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(done), 0);
    pid_t child = child_fork();
    if (child == 0) {
        comem_sim *mine = child_open("sim:16GiB:wddm:reserved=0:ctx=300MiB", "wddm");
        int ok = comem_sim_alloc(mine, 0, 8 * COMEM_GIB) == 0;
        /* the sibling's budget is its own: 13 GiB more fits in its budget, though not in the card */
        ok &= comem_sim_alloc(mine, 0, 7 * COMEM_GIB) == 0;
        char c = ok ? 'y' : 'n';
        ssize_t w = write(ready[1], &c, 1);
        (void)w;
        char d;
        _exit(read(done[0], &d, 1) == 1 ? 0 : 4);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    assert_int_equal(c, 'y');
    assert_int_equal(comem_sim_read_local(sim, 0, &after_local), 0);
    assert_int_equal(comem_sim_read(sim, 0, &after_dev), 0);
    /* the sibling moved the NVML-style reading and not our own view */
    assert_true(after_local.free == before_local.free);
    assert_true(before_dev.free - after_dev.free == (int64_t)(15 * COMEM_GIB + 300 * COMEM_MIB) ||
                after_dev.free == 0);
    assert_true(after_dev.overcommit == 300 * COMEM_MIB + 2 * COMEM_GIB + 300 * COMEM_MIB + 15 * COMEM_GIB -
                                            16 * COMEM_GIB);
    check_reading(sim, 0);
    assert_int_equal(write(done[1], "x", 1), 1);
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_int_equal(check_reading(sim, 0), 300 * COMEM_MIB + 2 * COMEM_GIB); /* the child's bytes came back */
    comem_sim_close(sim);
}

/* ---- many processes churning, one killed mid-run ---- */

#define CHURNERS 8
#define CHURN_SECONDS 2

/* Allocates and frees at random for CHURN_SECONDS, or until killed (report false). */
static void churn(const char *file, int wfd, unsigned seed, bool report)
{
    comem_sim *sim = child_open("sim:2x8GiB:reserved=128MiB:ctx=64MiB", file);
    int64_t mine[2] = {0, 0};
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int bad = 0;
    for (long i = 0;; i++) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (report && t.tv_sec - t0.tv_sec >= CHURN_SECONDS)
            break; /* the one that does not report runs until it is killed */
        seed = seed * 1103515245u + 12345u;
        int card = (int)((seed >> 8) & 1);
        int64_t sz = (int64_t)((seed >> 12) % 64 + 1) * COMEM_MIB;
        int rc;
        if ((seed >> 20) % 3 != 0 || mine[card] < sz) {
            rc = comem_sim_alloc(sim, card, sz);
            if (rc == 0)
                mine[card] += sz;
            else if (rc != COMEM_ENOSPC && bad++ < 3)
                fprintf(stderr, "churn %d: alloc of %lld on card %d: %s\n", (int)getpid(), (long long)sz, card,
                        comem_status_str(rc));
        } else {
            if ((rc = comem_sim_free(sim, card, sz)) != 0 && bad++ < 3)
                fprintf(stderr, "churn %d: free: %s\n", (int)getpid(), comem_status_str(rc));
            mine[card] -= sz;
        }
        int64_t ctx = -1, alloc = -1;
        rc = comem_sim_usage(sim, card, (int32_t)getpid(), &ctx, &alloc);
        if ((rc != 0 || alloc != mine[card]) && bad++ < 3) /* the card agrees with this process's own books */
            fprintf(stderr, "churn %d: usage %s: card %d says %lld allocated, my books %lld\n", (int)getpid(),
                    comem_status_str(rc), card, (long long)alloc, (long long)mine[card]);
    }
    if (report) {
        int64_t msg[3] = {mine[0], mine[1], bad};
        ssize_t w = write(wfd, msg, sizeof msg);
        (void)w;
    }
    comem_sim_close(sim);
}

static void test_many_processes_and_a_kill(void **s)
{
    (void)s;
    comem_sim *sim = open_sim("sim:2x8GiB:reserved=128MiB:ctx=64MiB", "churn");
    int fds[CHURNERS][2];
    pid_t pids[CHURNERS];
    for (int i = 0; i < CHURNERS; i++) {
        assert_int_equal(pipe(fds[i]), 0);
        pids[i] = child_fork();
        if (pids[i] == 0) {
            churn("churn", fds[i][1], 77u + (unsigned)i * 7919u, i != 0);
            _exit(0);
        }
        close(fds[i][1]);
    }
    /* Check the invariants continuously while they churn; kill one half way. */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool killed = false;
    long checks = 0;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        double el = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9;
        if (!killed && el > CHURN_SECONDS / 2.0) {
            assert_int_equal(kill(pids[0], SIGKILL), 0);
            killed = true;
        }
        if (el > CHURN_SECONDS + 0.5)
            break;
        check_reading(sim, 0);
        check_reading(sim, 1);
        checks++;
    }
    assert_true(checks > 10);
    /* The killed process is a zombie until reaped; its bytes must already be gone. */
    int64_t ctx, alloc;
    assert_int_equal(comem_sim_usage(sim, 0, pids[0], &ctx, &alloc), 0);
    assert_true(ctx == 0 && alloc == 0);
    for (int i = 0; i < CHURNERS; i++) {
        int st;
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        if (WIFSIGNALED(st) != (i == 0))
            fprintf(stderr, "churner %d: %s %d\n", i, WIFSIGNALED(st) ? "killed by signal" : "exited with",
                    WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        if (i == 0) {
            assert_true(WIFSIGNALED(st));
            continue;
        }
        int64_t msg[3];
        assert_int_equal(read(fds[i][0], msg, sizeof msg), (ssize_t)sizeof msg);
        assert_int_equal(msg[2], 0); /* every step agreed with the child's own books */
        close(fds[i][0]);
    }
    close(fds[0][0]);
    /* All exited now: every byte is back. */
    assert_int_equal(check_reading(sim, 0), 0);
    assert_int_equal(check_reading(sim, 1), 0);
    comem_sim_close(sim);
}

static void test_killed_while_holding_the_lock(void **s)
{
    (void)s;
    comem_sim *sim = open_sim("sim:4GiB", "lock");
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t child = child_fork();
    if (child == 0) {
        comem_sim *mine = child_open("sim:4GiB", "lock");
        comem_sim_alloc(mine, 0, 1 * COMEM_GIB);
        comem_sim_debug_hold_lock(mine);
        ssize_t w = write(ready[1], "x", 1);
        (void)w;
        pause();
        _exit(0);
    }
    wait_byte(ready[0]);
    assert_int_equal(kill(child, SIGKILL), 0);
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    uint64_t before = comem_sim_recoveries(sim); /* this lock recovers it */
    assert_true(before >= 1);
    assert_int_equal(check_reading(sim, 0), 0); /* its gigabyte was released */
    assert_int_equal(comem_sim_alloc(sim, 0, 1 * COMEM_GIB), 0);
    assert_true(comem_sim_recoveries(sim) == before);
    comem_sim_close(sim);
}

/* Every descriptor of this process that is a pidfd (the card handle's watches), up to max. */
static int pidfds(int *out, int max)
{
    int n = 0;
    for (int fd = 3; fd < 1024 && n < max; fd++) {
        char path[64], target[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len > 0) {
            target[len] = '\0';
            if (strcmp(target, "anon_inode:[pidfd]") == 0)
                out[n++] = fd;
        }
    }
    return n;
}

/*
 * A reader watches the card's other processes by pidfd after its first lock:
 * a watched process that dies is reaped at the next lock while still a zombie,
 * and a watch whose descriptor the program replaced with another file (always
 * readable) never reaps a live process; /proc decides then.
 */
static void test_watched_processes(void **s)
{
    (void)s;
    comem_sim *sim = open_sim("sim:4GiB", "watch");
    int ready[2], go[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = child_fork();
        if (kids[k] == 0) {
            comem_sim *mine = child_open("sim:4GiB", "watch");
            if (comem_sim_alloc(mine, 0, (k + 1) * 256 * COMEM_MIB) != 0)
                _exit(4);
            ssize_t w = write(ready[1], "x", 1);
            (void)w;
            char c;
            ssize_t r = read(go[0], &c, 1); /* until the parent says, or dies */
            (void)r;
            _exit(0);
        }
    }
    wait_byte(ready[0]);
    wait_byte(ready[0]);
    int64_t both = check_reading(sim, 0); /* the first lock: both watched from now on */
    int64_t ctx = (both - 768 * COMEM_MIB) / 2; /* each child's context beside its allocation */
    assert_true(ctx >= 0);
    int64_t second = 512 * COMEM_MIB + ctx;
    int fds[8];
    if (pidfds(fds, 8) < 2) {
        comem_sim_close(sim);
        skip(); /* a kernel without pidfd_open: the /proc path, which the other tests cover */
    }
    assert_int_equal(pidfds(fds, 8), 2);

    /* The first child dies: a zombie (not waited for), its bytes gone at the next reading. */
    assert_int_equal(kill(kids[0], SIGKILL), 0);
    siginfo_t info;
    assert_int_equal(waitid(P_PID, (id_t)kids[0], &info, WEXITED | WNOWAIT), 0); /* dead, left a zombie */
    assert_int_equal(check_reading(sim, 0), second);
    assert_int_equal(pidfds(fds, 8), 1); /* its watch was closed with its slot */

    /* The program puts another file where the live child's watch was: it reads as ready, and /proc says alive. */
    int other = open("/dev/null", O_RDONLY);
    assert_true(other >= 0);
    assert_int_equal(dup2(other, fds[0]), fds[0]);
    close(other);
    assert_int_equal(check_reading(sim, 0), second); /* not reaped */
    assert_int_equal(check_reading(sim, 0), second); /* watched again by a new pidfd, still alive */
    assert_int_equal(pidfds(fds, 8), 1);

    close(go[1]); /* the live child exits */
    int st;
    assert_int_equal(waitpid(kids[1], &st, 0), kids[1]);
    assert_int_equal(waitpid(kids[0], &st, 0), kids[0]);
    assert_int_equal(check_reading(sim, 0), 0);
    assert_int_equal(pidfds(fds, 8), 0);
    comem_sim_close(sim);
    close(fds[0]); /* the /dev/null the handle forgot (not its own to close) */
    close(ready[0]);
    close(ready[1]);
    close(go[0]);
}

static void test_concurrent_creation(void **s)
{
    (void)s;
    pid_t pids[6];
    for (int i = 0; i < 6; i++) {
        pids[i] = child_fork();
        if (pids[i] == 0) {
            comem_sim *sim = child_open("sim:4GiB", "race");
            int rc = comem_sim_alloc(sim, 0, 100 * COMEM_MIB);
            comem_sim_close(sim);
            _exit(rc == 0 ? 0 : 1);
        }
    }
    for (int i = 0; i < 6; i++) {
        int st;
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
}

static void test_handle_refused_after_fork(void **s)
{
    (void)s;
    comem_sim *sim = open_sim("sim:4GiB", "fork");
    pid_t child = child_fork();
    if (child == 0)
        _exit(comem_sim_alloc(sim, 0, 1) == COMEM_EINVAL ? 0 : 1);
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    comem_sim_close(sim);
}

/* uma: device and host allocations draw on one pool; linux counts host bytes without touching the card. */
static void test_uma_one_pool(void **s)
{
    (void)s;
    comem_sim_spec sp;
    char canon[160];
    assert_int_equal(comem_sim_spec_parse("sim:8GiB:uma:reserved=0:ctx=256MiB", &sp, NULL, 0), 0);
    assert_int_equal(sp.semantics, COMEM_SIM_UMA);
    comem_sim_spec_format(&sp, canon, sizeof canon);
    assert_string_equal(canon, "sim:1x8GiB:uma:reserved=0:ctx=256MiB");
    comem_sim *sim = open_sim("sim:8GiB:uma:reserved=0:ctx=256MiB", "uma");
    int32_t me = (int32_t)getpid();
    assert_int_equal(comem_sim_alloc(sim, 0, 4 * COMEM_GIB), 0); /* ctx 256 MiB + 4 GiB */
    int ready[2], go[2], done[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(done), 0);
    pid_t child = child_fork();
    if (child == 0) {
        comem_sim *c = child_open("sim:8GiB:uma:reserved=0:ctx=256MiB", "uma");
        char b = 0;
        /* 3 GiB of pinned RAM fits; one more GiB would pass the pool's end */
        if (comem_sim_host_alloc(c, 0, 3 * COMEM_GIB) != 0 || comem_sim_host_alloc(c, 0, COMEM_GIB) != COMEM_ENOSPC)
            _exit(4);
        if (write(ready[1], &b, 1) != 1 || read(go[0], &b, 1) != 1)
            _exit(5);
        if (comem_sim_host_free(c, 0, 2 * COMEM_GIB) != 0 || comem_sim_host_free(c, 0, 2 * COMEM_GIB) != COMEM_EINVAL)
            _exit(6);
        if (write(done[1], &b, 1) != 1)
            _exit(7);
        pause(); /* killed holding 1 GiB of host RAM */
        _exit(0);
    }
    wait_byte(ready[0]);
    comem_device_reading r, l;
    assert_int_equal(comem_sim_read(sim, 0, &r), 0);
    assert_true(r.used == 256 * COMEM_MIB + 4 * COMEM_GIB + 3 * COMEM_GIB); /* the RAM share is used pool */
    assert_true(r.free == 768 * COMEM_MIB);
    assert_int_equal(r.scope, COMEM_SCOPE_DEVICE_WIDE);
    assert_string_equal(r.name, "comem simulated card (uma)");
    assert_int_equal(comem_sim_read_local(sim, 0, &l), 0);
    assert_true(l.free == r.free && l.scope == COMEM_SCOPE_DEVICE_WIDE);
    int64_t host = -1;
    assert_int_equal(comem_sim_host_usage(sim, 0, child, &host), 0);
    assert_true(host == 3 * COMEM_GIB);
    assert_int_equal(comem_sim_alloc(sim, 0, COMEM_GIB), COMEM_ENOSPC); /* VRAM cannot take the RAM's share */
    char b = 0;
    assert_int_equal(write(go[1], &b, 1), 1);
    wait_byte(done[0]);
    assert_int_equal(comem_sim_alloc(sim, 0, COMEM_GIB), 0);
    assert_int_equal(comem_sim_read(sim, 0, &r), 0);
    assert_true(r.free == 1792 * COMEM_MIB); /* 8 GiB - ctx - 5 GiB of VRAM - the child's 1 GiB of RAM */
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    assert_int_equal(comem_sim_read(sim, 0, &r), 0); /* the dead process's RAM is back in the pool */
    assert_true(r.used == 256 * COMEM_MIB + 5 * COMEM_GIB && r.free == 3 * COMEM_GIB - 256 * COMEM_MIB);
    assert_int_equal(comem_sim_host_alloc(sim, 0, -1), COMEM_EINVAL);
    assert_int_equal(comem_sim_host_alloc(sim, 0, COMEM_GIB), 0);
    assert_int_equal(comem_sim_host_usage(sim, 0, me, &host), 0);
    assert_true(host == COMEM_GIB);
    assert_int_equal(comem_sim_release_self(sim), 0);
    assert_int_equal(comem_sim_read(sim, 0, &r), 0);
    assert_true(r.used == 0);
    comem_sim_close(sim);
    for (int i = 0; i < 2; i++) {
        close(ready[i]);
        close(go[i]);
        close(done[i]);
    }

    /* linux: host bytes are counted, the card is untouched */
    comem_sim *lx = open_sim("sim:4GiB:reserved=0:ctx=256MiB", "lx-host");
    assert_int_equal(comem_sim_host_alloc(lx, 0, 64 * COMEM_GIB), 0);
    assert_int_equal(check_reading(lx, 0), 0);
    assert_int_equal(comem_sim_host_usage(lx, 0, me, &host), 0);
    assert_true(host == 64 * COMEM_GIB);
    assert_int_equal(comem_sim_alloc(lx, 0, 3 * COMEM_GIB), 0);
    assert_int_equal(comem_sim_host_free(lx, 0, 64 * COMEM_GIB), 0);
    assert_int_equal(comem_sim_host_alloc(lx, 1, 1), COMEM_ENODEV);
    comem_sim_close(lx);
}

/* A card file of another layout: replaced where comem chose the path, refused where the user did. */
static void test_stale_layout(void **s)
{
    (void)s;
    char path[600];
    snprintf(path, sizeof path, "%s/old", g_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "an older layout", 15), 15);
    close(fd);
    assert_null(try_open("sim:4GiB", "old"));

    setenv("COMEM_RUNTIME_DIR", g_dir, 1);
    comem_sim_spec sp;
    assert_int_equal(comem_sim_spec_parse("sim:4GiB", &sp, NULL, 0), 0);
    comem_sim *first = NULL;
    assert_int_equal(comem_sim_open(&sp, &first), 0);
    char auto_path[600];
    snprintf(auto_path, sizeof auto_path, "%s", comem_sim_path(first));
    comem_sim_close(first);
    fd = open(auto_path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "an older layout", 15), 15);
    close(fd);
    comem_sim *fresh = NULL;
    assert_int_equal(comem_sim_open(&sp, &fresh), 0);
    assert_int_equal(check_reading(fresh, 0), 0);
    comem_sim_close(fresh);
    unsetenv("COMEM_RUNTIME_DIR");
}

static void test_as_source(void **s)
{
    (void)s;
    char text[512], err[200];
    snprintf(text, sizeof text, "sim:2x8GiB:path=%s/src", g_dir);
    comem_device_source *src;
    assert_int_equal(comem_sim_open_source(text, &src, err, sizeof err), 0);
    int n;
    assert_int_equal(comem_device_count(src, &n), 0);
    assert_int_equal(n, 2);
    comem_device_reading r;
    assert_int_equal(comem_device_read(src, 1, &r), 0);
    assert_int_equal(r.index, 1);
    assert_true(r.total == 8 * COMEM_GIB);
    assert_int_equal(comem_device_read(src, 2, &r), COMEM_ENODEV);
    comem_device_close(src);
    assert_int_equal(comem_sim_open_source("sim:nope", &src, err, sizeof err), COMEM_EINVAL);
    assert_non_null(strstr(err, "nope"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_parse),
        cmocka_unit_test(test_single_process),
        cmocka_unit_test(test_settings_mismatch_and_permissions),
        cmocka_unit_test(test_wddm_views),
        cmocka_unit_test(test_many_processes_and_a_kill),
        cmocka_unit_test(test_killed_while_holding_the_lock),
        cmocka_unit_test(test_watched_processes),
        cmocka_unit_test(test_concurrent_creation),
        cmocka_unit_test(test_handle_refused_after_fork),
        cmocka_unit_test(test_uma_one_pool),
        cmocka_unit_test(test_stale_layout),
        cmocka_unit_test(test_as_source),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
