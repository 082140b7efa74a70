/*
 * tests/unit/test_hostram_probe.c - the host RAM device source: its spec, RSS, a bounded budget, the machine's RAM.
 *
 * The bounded source is read against this process's own resident set, which
 * the test grows by a known amount (every page written), so the figures are
 * real readings with a known lower bound, never guesses.
 */
#include "unit/cmocka_all.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arith/ram_cache.h"
#include "base/bytes.h"
#include "comem/comem.h"
#include "comem/common.h"
#include "probe/hostram.h"
#include "unit/tmpdir.h"

static void test_parse(void **s)
{
    (void)s;
    int64_t b = 0;
    char err[256];
    assert_int_equal(comem_hostram_parse("4GiB", &b, err, sizeof err), COMEM_OK);
    assert_int_equal(b, 4 * COMEM_GIB);
    assert_int_equal(comem_hostram_parse("ram:512MiB", &b, err, sizeof err), COMEM_OK);
    assert_int_equal(b, 512 * COMEM_MIB);
    assert_int_equal(comem_hostram_parse("machine", &b, err, sizeof err), COMEM_OK);
    assert_int_equal(b, -1);
    assert_int_equal(comem_hostram_parse("1MiB", &b, err, sizeof err), COMEM_EINVAL); /* below 64 MiB */
    assert_non_null(strstr(err, "64MiB"));
    assert_int_equal(comem_hostram_parse("lots", &b, err, sizeof err), COMEM_EINVAL);
    assert_int_equal(comem_hostram_parse("", &b, err, sizeof err), COMEM_EINVAL);
    assert_int_equal(comem_hostram_parse("-4GiB", &b, err, sizeof err), COMEM_EINVAL);
}

static void test_rss_from_a_tree(void **s)
{
    (void)s;
    char dir[256], path[512];
    assert_int_equal(test_tmpdir_make(dir, sizeof dir, "hostram"), 0);
    snprintf(path, sizeof path, "%s/proc", dir);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/proc/4242", dir);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/proc/4242/status", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("Name:\tpython3\nVmPeak:\t 9999999 kB\nVmRSS:\t  2097152 kB\nRssAnon:\t 1 kB\n", f);
    fclose(f);
    int64_t rss = 0;
    assert_int_equal(comem_hostram_rss(dir, 4242, &rss), COMEM_OK);
    assert_int_equal(rss, 2 * COMEM_GIB);
    assert_int_equal(comem_hostram_rss(dir, 4243, &rss), COMEM_ENOENT); /* gone */
    /* NULL: the stand-in tree COMEM_HOSTMEM_ROOT names (comem simulate's machine), as for meminfo */
    rss = 0;
    assert_int_equal(setenv("COMEM_HOSTMEM_ROOT", dir, 1), 0);
    assert_int_equal(comem_hostram_rss(NULL, 4242, &rss), COMEM_OK);
    assert_int_equal(rss, 2 * COMEM_GIB);
    assert_int_equal(unsetenv("COMEM_HOSTMEM_ROOT"), 0);
    assert_int_equal(test_tmpdir_remove(dir), 0);
}

static void test_bounded_budget_tracks_rss(void **s)
{
    (void)s;
    comem_device_source *src = NULL;
    char note[256];
    assert_int_equal(comem_hostram_open("ram:2GiB", &src, note, sizeof note), COMEM_OK);
    int n = 0;
    assert_int_equal(comem_device_count(src, &n), COMEM_OK);
    assert_int_equal(n, 1);
    assert_int_equal(comem_hostram_budget(src), 2 * COMEM_GIB);
    comem_device_reading r;
    assert_int_equal(comem_device_read(src, 0, &r), COMEM_OK); /* nobody tracked: all of it free */
    assert_int_equal(r.total, 2 * COMEM_GIB);
    assert_int_equal(r.free, 2 * COMEM_GIB);
    assert_string_equal(r.name, COMEM_HOSTRAM_NAME);
    assert_string_equal(r.uuid, COMEM_HOSTRAM_UUID);
    assert_true(r.procs_known);
    assert_int_equal((int)r.n_procs, 0);
    int32_t me[2] = {(int32_t)getpid(), (int32_t)getpid()}; /* one process named twice is read once */
    comem_hostram_track(src, me, 2);
    size_t grow = (size_t)(256 * COMEM_MIB);
    char *buf = malloc(grow);
    assert_non_null(buf);
    memset(buf, 1, grow); /* resident */
    assert_int_equal(comem_device_read(src, 0, &r), COMEM_OK);
    assert_int_equal((int)r.n_procs, 1);
    assert_int_equal(r.procs[0].pid, getpid());
    assert_true(r.procs[0].bytes >= (int64_t)grow);
    assert_int_equal(r.free, 2 * COMEM_GIB - r.procs[0].bytes);
    assert_int_equal(r.used, r.procs[0].bytes);
    assert_int_equal(comem_device_read(src, 1, &r), COMEM_ENODEV);
    free(buf);
    comem_device_close(src);
}

static void test_machine_reads_hostmem(void **s)
{
    (void)s;
    char root[4096];
    snprintf(root, sizeof root, "%s/tests/fixtures/hostmem/v2", getenv("COMEM_SOURCE_DIR"));
    setenv("COMEM_HOSTMEM_ROOT", root, 1);
    comem_device_source *src = NULL;
    char note[256];
    assert_int_equal(comem_hostram_open("machine", &src, note, sizeof note), COMEM_OK);
    comem_device_reading r;
    assert_int_equal(comem_device_read(src, 0, &r), COMEM_OK);
    assert_int_equal(r.total, 24 * COMEM_GIB); /* the cgroup's limit, not the 128 GiB machine */
    assert_int_equal(r.free, 16 * COMEM_GIB);
    assert_int_equal(comem_hostram_budget(src), -1);
    assert_true(comem_hostram_last(src)->cgroup_limited);
    comem_device_close(src);
    unsetenv("COMEM_HOSTMEM_ROOT");
}

static void test_ram_admit_target(void **s)
{
    (void)s;
    assert_int_equal(comem_ram_admit_target(COMEM_GIB, 0, 0), COMEM_GIB); /* no card's 1.1 slack */
    assert_int_equal(comem_ram_admit_target(COMEM_GIB, 100, 2 * COMEM_GIB), 3 * COMEM_GIB + 100);
    assert_int_equal(comem_ram_admit_target(-5, -5, -5), 0);
    assert_int_equal(comem_ram_admit_target(INT64_MAX, 1, 1), INT64_MAX);
    assert_int_equal(comem_ram_reserve(4 * COMEM_GIB, 64 * COMEM_GIB), 0); /* a bounded budget keeps none */
    assert_int_equal(comem_ram_reserve(-1, 32 * COMEM_GIB), 3435973836);   /* V8: 3.2 GB of a 32 GiB box */
    assert_int_equal(comem_ram_reserve(-1, 8 * COMEM_GIB), 2 * COMEM_GIB);  /* the 2 GB floor */
    assert_int_equal(comem_ram_reserve(-1, 1024 * COMEM_GIB), 10 * COMEM_GIB);
    assert_int_equal(comem_device_host_ram(), COMEM_DEVICE_HOST_RAM);
    assert_int_equal(COMEM_DEVICE_HOST_RAM, COMEM_MAX_DEVICES - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_rss_from_a_tree),
        cmocka_unit_test(test_bounded_budget_tracks_rss),
        cmocka_unit_test(test_machine_reads_hostmem),
        cmocka_unit_test(test_ram_admit_target),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
