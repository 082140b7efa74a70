/*
 * tests/unit/test_hostmem.c - the host RAM probe against fixture trees.
 *
 * Each tree under tests/fixtures/hostmem/ stands in for /proc and
 * /sys/fs/cgroup: cgroup v2 (own, parent and namespaced limits), v1, the v1
 * "unlimited" sentinel, a limit above RAM, garbage files, swap with zram.
 */
#include "unit/cmocka_all.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/bytes.h"
#include "comem/common.h"
#include "probe/hostmem.h"

static comem_hostmem read_tree(const char *name, int expect_rc)
{
    char root[4096];
    snprintf(root, sizeof root, "%s/tests/fixtures/hostmem/%s", getenv("COMEM_SOURCE_DIR"), name);
    comem_hostmem h;
    assert_int_equal(comem_hostmem_read(root, &h), expect_rc);
    return h;
}

static void test_v2_own_limit_v15(void **s)
{
    (void)s;
    comem_hostmem h = read_tree("v2", COMEM_OK);
    assert_int_equal(h.mem_total, 128 * COMEM_GIB);
    assert_int_equal(h.mem_available, 100 * COMEM_GIB);
    assert_true(h.cgroup_limited);
    assert_int_equal(h.cgroup_limit, 24 * COMEM_GIB);
    assert_true(h.cgroup_usage_known);
    assert_int_equal(h.cgroup_usage, 8 * COMEM_GIB); /* 10 GiB current - 2 GiB inactive_file */
    assert_int_equal(h.total, 24 * COMEM_GIB);
    assert_int_equal(h.available, 16 * COMEM_GIB); /* V15 */
    assert_string_equal(h.cgroup_dir, "/sys/fs/cgroup/user.slice/app.scope");
    assert_int_equal(h.swap_total, 8 * COMEM_GIB);
    assert_int_equal(h.disk_swap, 0);
}

static void test_v2_parent_limit_wins_and_usage_read_there(void **s)
{
    (void)s;
    comem_hostmem h = read_tree("v2-parent", COMEM_OK);
    assert_int_equal(h.cgroup_limit, 16 * COMEM_GIB);
    assert_string_equal(h.cgroup_dir, "/sys/fs/cgroup/kubepods/pod1");
    assert_int_equal(h.cgroup_usage, 11 * COMEM_GIB); /* 12 GiB - 1 GiB, from the parent */
    assert_int_equal(h.total, 16 * COMEM_GIB);
    assert_int_equal(h.available, 5 * COMEM_GIB);
}

static void test_v2_namespaced_root(void **s)
{
    (void)s;
    comem_hostmem h = read_tree("v2-ns", COMEM_OK);
    assert_true(h.cgroup_limited);
    assert_string_equal(h.cgroup_dir, "/sys/fs/cgroup");
    assert_int_equal(h.cgroup_usage, 1 * COMEM_GIB); /* no memory.stat: inactive counts as 0 */
    assert_int_equal(h.total, 8 * COMEM_GIB);
    assert_int_equal(h.available, 7 * COMEM_GIB);
}

static void test_limit_above_ram_ignored(void **s)
{
    (void)s;
    comem_hostmem h = read_tree("v2-above", COMEM_OK);
    assert_false(h.cgroup_limited);
    assert_int_equal(h.cgroup_limit, -1);
    assert_int_equal(h.total, 128 * COMEM_GIB);
    assert_int_equal(h.available, 100 * COMEM_GIB);
}

static void test_v1(void **s)
{
    (void)s;
    comem_hostmem h = read_tree("v1", COMEM_OK);
    assert_true(h.cgroup_limited);
    assert_int_equal(h.cgroup_limit, 4 * COMEM_GIB);
    assert_string_equal(h.cgroup_dir, "/sys/fs/cgroup/memory/docker/abc");
    assert_int_equal(h.cgroup_usage, 2 * COMEM_GIB);
    assert_int_equal(h.total, 4 * COMEM_GIB);
    assert_int_equal(h.available, 2 * COMEM_GIB);
}

static void test_v1_unlimited_sentinel(void **s)
{
    (void)s;
    comem_hostmem h = read_tree("v1-unlimited", COMEM_OK);
    assert_false(h.cgroup_limited);
    assert_int_equal(h.total, 32 * COMEM_GIB);
    assert_int_equal(h.available, 24 * COMEM_GIB);
}

static void test_bare_swaps_skip_zram(void **s)
{
    (void)s;
    comem_hostmem h = read_tree("bare", COMEM_OK);
    assert_false(h.cgroup_limited);
    /* zram0, and the by-label link that resolves to zram1, are skipped */
    assert_int_equal(h.disk_swap, (16777212LL + 4194304LL) * 1024);
    assert_int_equal(h.swap_total, 33554428LL * 1024);
}

static void test_old_kernel_without_memavailable(void **s)
{
    (void)s;
    comem_hostmem h = read_tree("old", COMEM_OK);
    assert_int_equal(h.total, 8 * COMEM_GIB);
    assert_int_equal(h.available, 8 * COMEM_GIB);
}

static void test_garbage_files_are_absent(void **s)
{
    (void)s;
    comem_hostmem h = read_tree("garbage", COMEM_OK);
    assert_false(h.cgroup_limited);
}

static void test_missing_tree_is_an_error(void **s)
{
    (void)s;
    read_tree("does-not-exist", COMEM_EIO);
}

static void test_real_machine_is_sane(void **s)
{
    (void)s;
    comem_hostmem h;
    assert_int_equal(comem_hostmem_read(NULL, &h), COMEM_OK);
    assert_true(h.mem_total > 0);
    assert_true(h.total > 0 && h.total <= h.mem_total);
    assert_true(h.available >= 0 && h.available <= h.total);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v2_own_limit_v15),
        cmocka_unit_test(test_v2_parent_limit_wins_and_usage_read_there),
        cmocka_unit_test(test_v2_namespaced_root),
        cmocka_unit_test(test_limit_above_ram_ignored),
        cmocka_unit_test(test_v1),
        cmocka_unit_test(test_v1_unlimited_sentinel),
        cmocka_unit_test(test_bare_swaps_skip_zram),
        cmocka_unit_test(test_old_kernel_without_memavailable),
        cmocka_unit_test(test_garbage_files_are_absent),
        cmocka_unit_test(test_missing_tree_is_an_error),
        cmocka_unit_test(test_real_machine_is_sane),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
