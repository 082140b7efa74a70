/*
 * tests/unit/test_lock.c - the lock file (os/lock.h), the same assertions on Linux (flock) and on
 * Windows (LockFileEx, under wine in CI).
 *
 * A lock is held by one opening at a time (a second take, in this process or another, is refused
 * with COMEM_EEXIST) and is free again once it is released, or once the process holding it ends,
 * killed, without releasing anything. A folder where the file should be is refused, untouched, as
 * (on Linux) is a symbolic link.
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
#include "unit/tmpdir.h"
#endif

#include "comem/common.h"
#include "os/lock.h"
#include "unit/child.h"

static char g_dir[400];
static char g_path[480];

static int setup(void **s)
{
    (void)s;
#ifdef _WIN32
    char tmp[MAX_PATH];
    assert_true(GetTempPathA(sizeof tmp, tmp) > 0);
    snprintf(g_dir, sizeof g_dir, "%scomem-test-lock-%lld", tmp, (long long)own_pid());
    assert_true(CreateDirectoryA(g_dir, NULL));
    snprintf(g_path, sizeof g_path, "%s\\coord.lock", g_dir);
#else
    assert_int_equal(test_tmpdir_make(g_dir, sizeof g_dir, "lock"), 0);
    snprintf(g_path, sizeof g_path, "%s/coord.lock", g_dir);
#endif
    return 0;
}

static int teardown(void **s)
{
    (void)s;
#ifdef _WIN32
    char sub[520];
    snprintf(sub, sizeof sub, "%s\\a-folder", g_dir);
    RemoveDirectoryA(sub);
    DeleteFileA(g_path);
    return RemoveDirectoryA(g_dir) ? 0 : -1;
#else
    return test_tmpdir_remove(g_dir);
#endif
}

static void test_one_holder_at_a_time(void **s)
{
    (void)s;
    comem_lockfile *a = NULL, *b = (comem_lockfile *)&b;
    assert_int_equal(comem_lockfile_take(g_path, &a), COMEM_OK);
    assert_non_null(a);
    assert_int_equal(comem_lockfile_take(g_path, &b), COMEM_EEXIST); /* another opening: refused */
    assert_null(b);
    comem_lockfile_release(a);
    assert_int_equal(comem_lockfile_take(g_path, &b), COMEM_OK); /* released: free again */
    comem_lockfile_release(b);
    assert_int_equal(comem_lockfile_take(g_path, &a), COMEM_OK); /* the file left in place takes again */
    comem_lockfile_release(a);
}

/* The child's hook: take the lock at path and keep it (the child then sleeps until it is ended).
   The parent looks by taking and releasing it, so a take may meet the parent's: it tries again. */
static void hold(const char *path)
{
    comem_lockfile *l;
    for (int i = 0; comem_lockfile_take(path, &l) != COMEM_OK; i++) {
        if (i == 1000)
            exit(3);
        pause_ms(10);
    }
}

static void test_a_killed_holder_lets_go(void **s)
{
    (void)s;
    void *handle;
    int64_t pid = start_child_with(120000, g_path, &handle);
    comem_lockfile *l = NULL;
    int rc = COMEM_OK;
    for (int i = 0; i < 1000 && (rc = comem_lockfile_take(g_path, &l)) == COMEM_OK; i++) {
        comem_lockfile_release(l); /* the child has not taken it yet */
        pause_ms(10);
    }
    assert_int_equal(rc, COMEM_EEXIST); /* the child holds it */
    end_child(pid, handle);             /* killed: nothing released by it */
    for (int i = 0; i < 1000 && (rc = comem_lockfile_take(g_path, &l)) == COMEM_EEXIST; i++)
        pause_ms(10);
    assert_int_equal(rc, COMEM_OK); /* the system let it go with the process */
    comem_lockfile_release(l);
    release_child(pid, handle);
}

static void test_not_a_file_refused(void **s)
{
    (void)s;
    char sub[520];
    comem_lockfile *l = NULL;
#ifdef _WIN32
    snprintf(sub, sizeof sub, "%s\\a-folder", g_dir);
    assert_true(CreateDirectoryA(sub, NULL));
#else
    snprintf(sub, sizeof sub, "%s/a-folder", g_dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    char link[540];
    snprintf(link, sizeof link, "%s/a-link", g_dir);
    assert_int_equal(symlink(g_path, link), 0);
    assert_int_equal(comem_lockfile_take(link, &l), COMEM_EPERM); /* not followed */
    assert_null(l);
#endif
    assert_int_equal(comem_lockfile_take(sub, &l), COMEM_EPERM);
    assert_null(l);
}

int main(int argc, char **argv)
{
    if (child_main(argc, argv, hold))
        return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_one_holder_at_a_time, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_killed_holder_lets_go, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_a_file_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
