/*
 * tests/unit/test_view.c - the shared-memory view, the same assertions on Linux (a file beside the
 * socket and its lock) and on Windows (a named section and a named event, under wine in CI): what
 * the writer publishes is what a reader copies, an unfinished write is waited out and then
 * reported, readers survive a coordinator restart, a reader tells a running writer from one that
 * closed or was killed, and (Linux) files that are not a view are refused.
 */
#include "unit/cmocka_all.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#include <windows.h>
#else
#include <sys/stat.h>
#include <unistd.h>
#endif

#include "base/bytes.h"
#include "base/clock.h"
#include "comem/comem.h"
#include "shm/view.h"
#include "unit/endpoint.h"

static const char *g_sock; /* the endpoint's name: the view is named after it */
static char g_note[480];   /* where a child writer says it has opened the view */

static int setup(void **s)
{
    (void)s;
    if (endpoint_make("view") != 0)
        return -1;
    g_sock = g_endpoint.name;
    endpoint_file(g_note, sizeof g_note, "note");
    return 0;
}

static int teardown(void **s)
{
#ifndef _WIN32
    char path[PATH_MAX];
    comem_view_path(g_sock, path, sizeof path);
    unlink(path);
#endif
    remove(g_note);
    return endpoint_teardown(s);
}

static int64_t mono_ms(void) { return comem_now_ns() / 1000000; }

static void test_publish_then_read(void **s)
{
    (void)s;
    comem_view_writer w;
    assert_int_equal(comem_view_writer_open(&w, g_sock, 2), COMEM_OK);
    comem_view *v = NULL;
    assert_int_equal(comem_view_open(g_sock, &v), COMEM_OK);
    comem_view_values a = {.capacity = 80 * COMEM_GIB, .free = 12345, .reserve = 777, .reclaimable = 4096};
    comem_view_values b = {.capacity = 24 * COMEM_GIB, .free = 1, .reserve = 2, .reclaimable = 3};
    comem_view_publish(&w, 0, &a);
    comem_view_publish(&w, 1, &b);
    int64_t cap, fr, res, rec;
    assert_int_equal(comem_view_read(v, 0, &cap, &fr, &res, &rec), COMEM_OK);
    assert_int_equal(cap, a.capacity);
    assert_int_equal(fr, a.free);
    assert_int_equal(res, a.reserve);
    assert_int_equal(rec, a.reclaimable);
    assert_int_equal(comem_view_read(v, 1, &cap, NULL, NULL, &rec), COMEM_OK);
    assert_int_equal(cap, b.capacity);
    assert_int_equal(rec, b.reclaimable);
    assert_int_equal(comem_view_read(v, 2, &cap, NULL, NULL, NULL), COMEM_ENODEV);
    assert_int_equal(comem_view_read(v, -1, &cap, NULL, NULL, NULL), COMEM_EINVAL);
    assert_int_equal(comem_view_read(NULL, 0, &cap, NULL, NULL, NULL), COMEM_EINVAL);

    /* A new coordinator reuses the file in place: the old mapping sees its figures. */
    comem_view_writer_close(&w);
    assert_int_equal(comem_view_writer_open(&w, g_sock, 1), COMEM_OK);
    a.free = 999;
    comem_view_publish(&w, 0, &a);
    assert_int_equal(comem_view_read(v, 0, NULL, &fr, NULL, NULL), COMEM_OK);
    assert_int_equal(fr, 999);
    assert_int_equal(comem_view_read(v, 1, &cap, NULL, NULL, NULL), COMEM_ENODEV);
    comem_view_close(v);
    comem_view_writer_close(&w);
}

static void test_unfinished_write_is_waited_out_then_reported(void **s)
{
    (void)s;
    comem_view_writer w;
    assert_int_equal(comem_view_writer_open(&w, g_sock, 1), COMEM_OK);
    comem_view *v = NULL;
    assert_int_equal(comem_view_open(g_sock, &v), COMEM_OK);
    comem_view_values a = {.capacity = 1000, .free = 500};
    comem_view_publish(&w, 0, &a);
    /* what a writer that died between its two sequence stores leaves behind */
    uint64_t seq = atomic_load(&w.sh->seq);
    atomic_store(&w.sh->seq, seq + 1);
    int64_t t0 = mono_ms(), fr = -1;
    assert_int_equal(comem_view_read(v, 0, NULL, &fr, NULL, NULL), COMEM_EBUSY);
    int64_t waited = mono_ms() - t0;
    assert_in_range(waited, 150, 2000);
    assert_int_equal(fr, -1); /* nothing half-written was handed out */
    atomic_store(&w.sh->seq, seq + 2);
    assert_int_equal(comem_view_read(v, 0, NULL, &fr, NULL, NULL), COMEM_OK);
    assert_int_equal(fr, 500);
    comem_view_close(v);
    comem_view_writer_close(&w);
}

/* ---- a writer that closes, and one that is killed ---- */

/* The child's hook, given "SOCK|NOTE": opens the view as a coordinator would, then says so; it sleeps after. */
static void child_writer(const char *arg)
{
    const char *bar = strchr(arg, '|');
    if (!bar)
        exit(2);
    static char sock[400];
    snprintf(sock, sizeof sock, "%.*s", (int)(bar - arg), arg);
    static comem_view_writer w;
    if (comem_view_writer_open(&w, sock, 1) != COMEM_OK)
        exit(3);
    FILE *f = fopen(bar + 1, "w");
    if (!f)
        exit(4);
    fclose(f);
}

static void test_a_reader_tells_a_running_writer_from_a_gone_one(void **s)
{
    (void)s;
    comem_view_writer w;
    assert_int_equal(comem_view_writer_open(&w, g_sock, 1), COMEM_OK);
    comem_view *v = NULL;
    assert_int_equal(comem_view_open(g_sock, &v), COMEM_OK);
    assert_int_equal(comem_view_state(v, NULL), COMEM_OK); /* running, its heartbeat fresh */
    comem_view_writer_close(&w);
    assert_int_equal(comem_view_state(v, NULL), COMEM_ECLOSED); /* closed: gone */
    comem_view_close(v);

    /* Killed: nothing is zeroed, yet the reader knows (Linux: the kernel drops its lock; Windows: the
       system destroys its event with its last handle). */
    remove(g_note);
    static char arg[900];
    snprintf(arg, sizeof arg, "%s|%s", g_sock, g_note);
    void *handle;
    int64_t child = start_child_with(120000, arg, &handle);
    assert_true(wait_for_file(g_note, 30000));
    assert_int_equal(comem_view_open(g_sock, &v), COMEM_OK);
    int before = comem_view_state(v, NULL);
    assert_true(before == COMEM_OK || before == COMEM_ETIMEDOUT); /* held: running (if slow, its heartbeat aged) */
    end_child(child, handle);
    wait_child(child, handle);
    assert_int_equal(comem_view_state(v, NULL), COMEM_ECLOSED);
    comem_view_close(v);
}

#ifndef _WIN32
static void test_refuses_what_is_not_a_view(void **s)
{
    (void)s;
    comem_view *v = NULL;
    assert_int_equal(comem_view_open(g_sock, &v), COMEM_ENOENT);
    assert_int_equal(comem_view_open(g_sock, NULL), COMEM_EINVAL);
    char path[PATH_MAX];
    comem_view_path(g_sock, path, sizeof path);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("short", f);
    fclose(f);
    assert_int_equal(comem_view_open(g_sock, &v), COMEM_EPERM); /* too small to be one */
    assert_int_equal(truncate(path, (off_t)sizeof(comem_view_shared)), 0);
    assert_int_equal(comem_view_open(g_sock, &v), COMEM_EPROTO); /* right size, no magic */
    assert_null(v);
}
#endif

int main(int argc, char **argv)
{
    if (child_main(argc, argv, child_writer))
        return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_publish_then_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unfinished_write_is_waited_out_then_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_reader_tells_a_running_writer_from_a_gone_one, setup, teardown),
#ifndef _WIN32
        cmocka_unit_test_setup_teardown(test_refuses_what_is_not_a_view, setup, teardown),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
