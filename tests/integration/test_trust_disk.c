/*
 * tests/integration/test_trust_disk.c - a full disk is an error, never a signal (issue 40, finding 7).
 *
 * comemd makes the view beside its socket (<socket>.view) whole under a temporary name before it
 * is seen. On a filesystem with no room left the file's pages cannot be allocated: comemd must
 * say so and exit non-zero, not die of SIGBUS when it writes the mapped view, and must leave no
 * <socket>.view.PID.tmp behind. The full filesystem is a 64 KiB tmpfs, filled; mounting one
 * needs root (the tests run as root here), and elsewhere the test skips and says so.
 */
#include "unit/cmocka_all.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "unit/tmpdir.h"

typedef struct fixture {
    char dir[128];  /* the small filesystem, mounted here */
    char card[128]; /* the simulated card's directory: elsewhere, with room */
    bool mounted;
} fixture;

/* Writes zeros into dir/fill until the filesystem refuses: the errno that stopped it. */
static int fill(const char *dir)
{
    char path[256];
    snprintf(path, sizeof path, "%s/fill", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno;
    static const char zeros[4096];
    int err = 0;
    for (;;) {
        ssize_t w = write(fd, zeros, sizeof zeros);
        if (w < 0) {
            err = errno;
            break;
        }
    }
    close(fd);
    return err;
}

/*
 * Runs comemd with argv (argv[0] "comemd") until it ends, its stderr into err: its wait status, or -1
 * when it still ran after timeout_ms (then killed): a comemd that started would serve forever.
 */
static int run_comemd(const char *const *argv, char *err, size_t errlen, int timeout_ms)
{
    char bin[512];
    const char *dir = getenv("COMEM_BIN_DIR");
    snprintf(bin, sizeof bin, "%s/comemd", dir ? dir : "build/bin");
    int pe[2];
    assert_int_equal(pipe(pe), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pe[1], 2);
        close(pe[0]);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(pe[1]);
    size_t got = 0;
    err[0] = '\0';
    int64_t deadline = comem_now_ns() + (int64_t)timeout_ms * 1000000;
    bool late = false;
    for (;;) {
        struct pollfd p = {.fd = pe[0], .events = POLLIN};
        int left = (int)((deadline - comem_now_ns()) / 1000000);
        if (left <= 0 || poll(&p, 1, left) == 0) {
            late = true;
            break;
        }
        char buf[512];
        ssize_t r = read(pe[0], buf, sizeof buf);
        if (r <= 0)
            break; /* its stderr closed: it ended */
        size_t n = (size_t)r < errlen - 1 - got ? (size_t)r : errlen - 1 - got;
        memcpy(err + got, buf, n);
        got += n;
        err[got] = '\0';
    }
    close(pe[0]);
    if (late)
        kill(pid, SIGKILL);
    int st = 0;
    waitpid(pid, &st, 0);
    return late ? -1 : st;
}

/* The names in dir that end in suffix, comma-separated, into buf; how many. */
static int names_ending(const char *dir, const char *suffix, char *buf, size_t len)
{
    buf[0] = '\0';
    int n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t sl = strlen(suffix);
    for (struct dirent *e; (e = readdir(d));) {
        size_t nl = strlen(e->d_name);
        if (nl >= sl && !strcmp(e->d_name + nl - sl, suffix)) {
            size_t used = strlen(buf);
            snprintf(buf + used, len - used, "%s%s", n ? ", " : "", e->d_name);
            n++;
        }
    }
    closedir(d);
    return n;
}

static void test_full_disk_is_an_error_not_a_signal(void **s)
{
    fixture *f = *s;
    if (mount("tmpfs", f->dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0700") != 0) {
        print_message("cannot mount a small tmpfs at %s (%s, as uid %d): not exercised\n", f->dir, strerror(errno),
                      (int)getuid());
        skip();
    }
    f->mounted = true;
    assert_int_equal(fill(f->dir), ENOSPC);

    char sock[192], spec[256], err[8192], names[1024];
    snprintf(sock, sizeof sock, "%s/comem.sock", f->dir);
    snprintf(spec, sizeof spec, "sim:4GiB:path=%s/card", f->card);
    const char *argv[] = {"comemd", "--socket", sock, "--device", spec, NULL};
    int st = run_comemd(argv, err, sizeof err, 30000);
    print_message("comemd: %s %d; stderr:\n%s",
                  st < 0 ? "still running after 30 s, killed"
                  : WIFSIGNALED(st) ? "killed by signal"
                                    : "exited with",
                  st < 0 ? 0 : WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), err);
    int tmps = names_ending(f->dir, ".tmp", names, sizeof names);
    print_message("temporary files left: %d (%s)\n", tmps, names);
    char lock[256];
    snprintf(lock, sizeof lock, "%s.lock", sock);
    print_message("%s: %s (kept by design: the next coordinator takes the same file)\n", lock,
                  access(lock, F_OK) == 0 ? "left" : "absent");

    assert_true(st >= 0);         /* it ended by itself... */
    assert_false(WIFSIGNALED(st)); /* ...not of a signal (SIGBUS) */
    assert_true(WIFEXITED(st));
    assert_int_not_equal(WEXITSTATUS(st), 0);
    assert_non_null(strstr(err, strerror(ENOSPC))); /* "No space left on device" */
    assert_int_equal(tmps, 0);
    assert_int_equal(access(sock, F_OK) == 0 ? 1 : 0, 0); /* nothing listens: no socket left either */
}

static int setup(void **s)
{
    static fixture f;
    memset(&f, 0, sizeof f);
    if (test_tmpdir_make(f.dir, sizeof f.dir, "disk") != 0 || test_tmpdir_make(f.card, sizeof f.card, "card") != 0)
        return -1;
    *s = &f;
    return 0;
}

static int teardown(void **s)
{
    fixture *f = *s;
    if (f->mounted && umount(f->dir) != 0)
        return -1;
    f->mounted = false;
    rmdir(f->dir);
    return test_tmpdir_remove(f->card);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_full_disk_is_an_error_not_a_signal, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
