/*
 * tests/unit/test_view.c - the shared-memory view: what the writer publishes is what a
 * reader copies, an unfinished write is waited out and then reported, readers survive a
 * coordinator restart, and files that are not a view are refused.
 */
#include "unit/cmocka_all.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "shm/view.h"

static char g_dir[64], g_sock[128];

static int setup(void **s)
{
    (void)s;
    snprintf(g_dir, sizeof g_dir, "/tmp/comem-test-view-XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    snprintf(g_sock, sizeof g_sock, "%s/comem.sock", g_dir);
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    char path[PATH_MAX];
    comem_view_path(g_sock, path, sizeof path);
    unlink(path);
    rmdir(g_dir);
    return 0;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_publish_then_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unfinished_write_is_waited_out_then_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refuses_what_is_not_a_view, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
