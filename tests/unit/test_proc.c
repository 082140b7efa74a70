/*
 * tests/unit/test_proc.c - other processes (os/proc.h), the same assertions on Linux (/proc and
 * pidfds) and on Windows (process handles, under wine in CI).
 *
 * This process describes itself as running, with a start time that tells it from any other: the
 * same pid with another start time is not it. A child (this test run again with --child MS: it
 * sleeps MS milliseconds and exits) reads as stopped while SIGSTOPped (Linux), and is watched: the
 * watch does not fire while it sleeps, fires
 * once it exits, the child then reads as ended, and after it is let go its pid is not alive under
 * its start time; a pid that names no process is refused. This process is numbered as others
 * number it, and several watches are looked at at once (one fired, one quiet, one whose descriptor
 * was closed behind it: unsure, not fired).
 */
#include "unit/cmocka_all.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comem/common.h"
#include "os/proc.h"
#include "unit/child.h"

static void test_self_is_running_with_its_start_time(void **s)
{
    (void)s;
    comem_proc_info in = {.start = 12345, .ended = true, .exiting = true};
    assert_int_equal(comem_proc_look(own_pid(), &in), COMEM_OK);
    assert_false(in.ended);
    assert_false(in.exiting);
    assert_false(in.stopped);
    comem_proc_info again;
    assert_int_equal(comem_proc_look(own_pid(), &again), COMEM_OK);
    assert_true(again.start == in.start); /* one process, one start time */
    assert_true(comem_proc_alive(own_pid(), in.start));
    assert_false(comem_proc_alive(own_pid(), in.start + 1)); /* the pid, but a later process */
}

static void test_watch_fires_when_the_child_exits(void **s)
{
    (void)s;
    void *handle;
    int64_t pid = start_child(120000, &handle); /* it sleeps until it is ended below */
    comem_proc_info in;
    assert_int_equal(comem_proc_look(pid, &in), COMEM_OK);
    assert_false(in.ended);
    uint64_t start = in.start;
    assert_true(comem_proc_alive(pid, start));
    comem_proc_info me;
    assert_int_equal(comem_proc_look(own_pid(), &me), COMEM_OK);
    assert_true(me.start <= start); /* the child started after its parent */

#ifndef _WIN32
    /* Stopped by a signal, it says so (the kernel marks it as the signal is taken), and not when continued. */
    assert_int_equal(kill((pid_t)pid, SIGSTOP), 0);
    for (int i = 0; i < 5000 && comem_proc_look(pid, &in) == COMEM_OK && !in.stopped; i++)
        usleep(1000);
    assert_true(in.stopped);
    assert_true(comem_proc_alive(pid, start)); /* stopped is not ended */
    assert_int_equal(kill((pid_t)pid, SIGCONT), 0);
    for (int i = 0; i < 5000 && comem_proc_look(pid, &in) == COMEM_OK && in.stopped; i++)
        usleep(1000);
    assert_false(in.stopped);
#endif
    comem_proc_watch *w;
    assert_int_equal(comem_proc_watch_open(pid, &w), COMEM_OK);
    assert_true(comem_proc_watch_handle(w) != -1);
    assert_int_equal(comem_proc_watch_wait(w, 0), COMEM_ETIMEDOUT); /* it sleeps */
    end_child(pid, handle);
    assert_int_equal(comem_proc_watch_wait(w, 30000), COMEM_OK); /* it exited */
    assert_int_equal(comem_proc_watch_wait(w, 0), COMEM_OK);       /* and stays exited */
    /* Not yet reaped (Linux: a zombie; Windows: a handle keeps it): described, and ended. */
    int rc = comem_proc_look(pid, &in);
    assert_true(rc == COMEM_OK || rc == COMEM_ENOENT);
    if (rc == COMEM_OK) {
        assert_true(in.ended);
        assert_true(in.start == start);
    }
    assert_false(comem_proc_alive(pid, start));
    comem_proc_watch_close(w);
    release_child(pid, handle);
    assert_false(comem_proc_alive(pid, start));
}

/* This process numbered as others number it: here (no pid namespace of its own) its own pid. */
static void test_self_as_others_number_it(void **s)
{
    (void)s;
    int64_t pid = 0;
    uint64_t numbering = 1;
    assert_int_equal(comem_proc_self(&pid, &numbering), COMEM_OK);
    assert_int_equal(pid, own_pid());
#ifdef _WIN32
    assert_int_equal(numbering, 0); /* one numbering for the whole system */
#else
    assert_true(numbering != 0); /* the device of the /proc that numbers it */
#endif
}

/*
 * Several watches looked at at once: the one whose child was ended fires, the other stays quiet;
 * a watch whose descriptor the program closed behind it (Linux) is not taken for fired.
 */
static void test_many_watches_looked_at_once(void **s)
{
    (void)s;
    void *h[2];
    int64_t pid[2] = {start_child(120000, &h[0]), start_child(120000, &h[1])};
    comem_proc_watch *w[2];
    assert_int_equal(comem_proc_watch_open(pid[0], &w[0]), COMEM_OK);
    assert_int_equal(comem_proc_watch_open(pid[1], &w[1]), COMEM_OK);
    uint8_t seen[2] = {9, 9};
    assert_int_equal(comem_proc_watch_look(w, 2, seen), 0);
    assert_int_equal(seen[0], COMEM_PROC_WATCH_QUIET);
    assert_int_equal(seen[1], COMEM_PROC_WATCH_QUIET);
    end_child(pid[1], h[1]);
    assert_int_equal(comem_proc_watch_wait(w[1], 30000), COMEM_OK);
    assert_int_equal(comem_proc_watch_look(w, 2, seen), 1);
    assert_int_equal(seen[0], COMEM_PROC_WATCH_QUIET);
    assert_int_equal(seen[1], COMEM_PROC_WATCH_FIRED);
#ifndef _WIN32
    close((int)comem_proc_watch_handle(w[0])); /* as a program that closes every descriptor might */
    assert_int_equal(comem_proc_watch_look(w, 1, seen), 1);
    assert_int_equal(seen[0], COMEM_PROC_WATCH_UNSURE); /* not fired: its child still runs */
    comem_proc_info in;
    assert_int_equal(comem_proc_look(pid[0], &in), COMEM_OK);
    assert_false(in.ended);
    comem_proc_watch_forget(w[0]); /* its descriptor is not its own any more */
#else
    comem_proc_watch_close(w[0]);
#endif
    comem_proc_watch_close(w[1]);
    end_child(pid[0], h[0]);
    release_child(pid[0], h[0]);
    release_child(pid[1], h[1]);
}

static void test_no_such_process(void **s)
{
    (void)s;
    comem_proc_info in;
    comem_proc_watch *w = (comem_proc_watch *)&in; /* set to NULL by a refusal */
    const int64_t none[] = {0, -5, (int64_t)1 << 40};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        assert_int_equal(comem_proc_look(none[i], &in), COMEM_ENOENT);
        assert_false(comem_proc_alive(none[i], 0));
        assert_int_equal(comem_proc_watch_open(none[i], &w), COMEM_ENOENT);
        assert_null(w);
        w = (comem_proc_watch *)&in;
    }
}

int main(int argc, char **argv)
{
    if (child_main(argc, argv, NULL)) /* the child of the tests above */
        return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_self_is_running_with_its_start_time),
        cmocka_unit_test(test_watch_fires_when_the_child_exits),
        cmocka_unit_test(test_self_as_others_number_it),
        cmocka_unit_test(test_many_watches_looked_at_once),
        cmocka_unit_test(test_no_such_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
