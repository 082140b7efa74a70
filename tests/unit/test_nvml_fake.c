/*
 * tests/unit/test_nvml_fake.c - the NVML device source against a scripted NVML, the same
 * assertions on Linux and on Windows (the fakes built as DLLs, under wine in CI).
 *
 * The fakes (tests/fakes/fake_nvml.c) sit next to this binary in
 * COMEM_BIN_DIR (on Windows, without it, the executable's folder): libfake_nvml
 * with every entry point, and libfake_nvml_legacy with only the unversioned ones. The NVML source loads
 * the library per open, so each case sets COMEM_NVML_LIBRARY and
 * FAKE_NVML_MODE and opens its own source in this process. The test keeps its
 * own handle on each fake, so the fake stays loaded between opens and its call
 * counters show which fallback ran.
 */
#include "unit/cmocka_all.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#include <windows.h>
#endif

#include "base/bytes.h"
#include "base/log.h"
#include "comem/common.h"
#include "probe/device.h"
#include "os/dl.h"
#include "probe/nvml.h"
#include "unit/child.h"

#ifdef _WIN32
#define LIB_SUFFIX ".dll"
static void set_env(const char *name, const char *value) { _putenv_s(name, value); }
#else
#define LIB_SUFFIX ".so"
static void set_env(const char *name, const char *value) { setenv(name, value, 1); }
#endif


#define MIB COMEM_MIB

typedef struct fake {
    char path[4096];
    comem_dl *handle;
    int (*calls)(const char *fn);
    void (*reset)(void);
} fake;

static fake g_full, g_legacy;

static void load_fake(fake *f, const char *file)
{
    const char *bin = test_bin_dir();
    assert_non_null(bin);
    snprintf(f->path, sizeof f->path, "%s/%s" LIB_SUFFIX, bin, file);
    char why[512] = "";
    f->handle = comem_dl_open(f->path, false, why, sizeof why);
    if (!f->handle)
        fail_msg("cannot load the fake %s: %s", f->path, why);
    void *c = comem_dl_sym(f->handle, "fake_nvml_calls");
    void *r = comem_dl_sym(f->handle, "fake_nvml_reset");
    assert_non_null(c);
    assert_non_null(r);
    memcpy(&f->calls, &c, sizeof c);
    memcpy(&f->reset, &r, sizeof r);
}

static int group_setup(void **state)
{
    (void)state;
    load_fake(&g_full, "libfake_nvml");
    load_fake(&g_legacy, "libfake_nvml_legacy");
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    comem_dl_close(g_full.handle);
    comem_dl_close(g_legacy.handle);
    return 0;
}

/* Opens the source over fake f in mode; expect is the status comem_nvml_open must return. */
static comem_device_source *open_mode(fake *f, const char *mode, int expect, char *why,
                                      size_t whylen)
{
    set_env(COMEM_NVML_LIBRARY_ENV, f->path);
    set_env("FAKE_NVML_MODE", mode);
    f->reset();
    comem_device_source *src = (comem_device_source *)0x1;
    char local[256];
    if (!why) {
        why = local;
        whylen = sizeof local;
    }
    int rc = comem_nvml_open(&src, why, whylen);
    if (rc != expect)
        fail_msg("open in mode %s: got %d (%s), expected %d", mode, rc, why, expect);
    if (rc != COMEM_OK)
        assert_null(src);
    return rc == COMEM_OK ? src : NULL;
}

static comem_device_reading g_r; /* large (procs[]); kept off the stack */

static void read_ok(comem_device_source *src, int index)
{
    assert_int_equal(comem_device_read(src, index, &g_r), COMEM_OK);
}

static void test_basic_reading(void **s)
{
    (void)s;
    comem_device_source *src = open_mode(&g_full, "basic", COMEM_OK, NULL, 0);
    assert_string_equal(src->name, "nvml");
    int n = 0;
    assert_int_equal(comem_device_count(src, &n), COMEM_OK);
    assert_int_equal(n, 2);

    read_ok(src, 0);
    assert_int_equal(g_r.index, 0);
    assert_string_equal(g_r.source, "nvml");
    assert_int_equal(g_r.scope, COMEM_SCOPE_DEVICE_WIDE);
    assert_string_equal(g_r.name, "NVIDIA H200");
    assert_string_equal(g_r.uuid, "GPU-aaaaaaaa-1111-2222-3333-444444444444");
    assert_string_equal(g_r.pci_bus_id, "00000000:3B:00.0");
    assert_int_equal(g_r.total, 143771 * MIB);
    assert_int_equal(g_r.reserved, 615 * MIB); /* from GetMemoryInfo_v2 */
    assert_int_equal(g_r.free, (143771 - 615 - 2064) * MIB);
    assert_int_equal(g_r.used, (2064 + 615) * MIB); /* used includes reserved, as v1's does */
    assert_int_equal(g_r.used, g_r.total - g_r.free);
    assert_int_equal(g_r.overcommit, 0);
    assert_true(g_r.procs_known);
    assert_int_equal(g_r.n_procs, 2);
    assert_int_equal(g_r.procs[0].pid, 4242);
    assert_int_equal(g_r.procs[0].bytes, 520 * MIB);
    assert_int_equal(g_r.procs[1].pid, 4343);
    assert_int_equal(g_r.procs[1].bytes, 1544 * MIB);
    assert_int_equal(g_r.pcie_gen, 5);
    assert_int_equal(g_r.pcie_width, 16);
    assert_true(g_r.timestamp_ns > 0);

    /* the newest call of each family, and nothing older */
    assert_int_equal(g_full.calls("nvmlInit_v2"), 1);
    assert_int_equal(g_full.calls("nvmlInit"), 0);
    assert_int_equal(g_full.calls("nvmlDeviceGetCount_v2"), 1);
    assert_int_equal(g_full.calls("nvmlDeviceGetHandleByIndex"), 0);
    assert_int_equal(g_full.calls("nvmlDeviceGetPciInfo_v3"), 1);
    assert_int_equal(g_full.calls("nvmlDeviceGetPciInfo_v2"), 0);
    assert_int_equal(g_full.calls("nvmlDeviceGetMemoryInfo_v2"), 1);
    assert_int_equal(g_full.calls("nvmlDeviceGetMemoryInfo"), 0);
    assert_int_equal(g_full.calls("nvmlDeviceGetComputeRunningProcesses_v3"), 1);
    assert_int_equal(g_full.calls("nvmlDeviceGetComputeRunningProcesses_v2"), 0);
    assert_int_equal(g_full.calls("nvmlDeviceGetComputeRunningProcesses"), 0);

    read_ok(src, 1);
    assert_string_equal(g_r.name, "NVIDIA L4");
    assert_string_equal(g_r.uuid, "GPU-bbbbbbbb-1111-2222-3333-444444444444");
    assert_string_equal(g_r.pci_bus_id, "00000000:5C:00.0");
    assert_int_equal(g_r.total, 23034 * MIB);
    assert_int_equal(g_r.reserved, 300 * MIB);
    assert_true(g_r.procs_known); /* known, and empty */
    assert_int_equal(g_r.n_procs, 0);
    assert_int_equal(g_r.pcie_gen, -1); /* NOT_SUPPORTED */
    assert_int_equal(g_r.pcie_width, -1);

    assert_int_equal(comem_device_read(src, 2, &g_r), COMEM_EINVAL);
    assert_int_equal(comem_device_read(src, -1, &g_r), COMEM_EINVAL);

    comem_device_close(src);
    assert_int_equal(g_full.calls("nvmlShutdown"), 1);
}

static void test_no_v3_falls_back_to_v2_once(void **s)
{
    (void)s;
    comem_device_source *src = open_mode(&g_full, "no_v3", COMEM_OK, NULL, 0);
    read_ok(src, 0);
    assert_true(g_r.procs_known);
    assert_int_equal(g_r.n_procs, 2);
    assert_int_equal(g_r.procs[0].pid, 4242);
    assert_int_equal(g_r.procs[0].bytes, 520 * MIB);
    assert_int_equal(g_r.procs[1].pid, 4343);
    assert_int_equal(g_r.procs[1].bytes, 1544 * MIB);
    /* the old PCI layout leaves junk where busId is: the id is rebuilt from the numbers */
    assert_string_equal(g_r.pci_bus_id, "00000000:3B:00.0");

    read_ok(src, 0); /* _v3 is not asked again for this device */
    assert_int_equal(g_r.n_procs, 2);
    assert_int_equal(g_full.calls("nvmlDeviceGetComputeRunningProcesses_v3"), 1);
    assert_int_equal(g_full.calls("nvmlDeviceGetComputeRunningProcesses_v2"), 2);
    assert_int_equal(g_full.calls("nvmlDeviceGetPciInfo_v3"), 1);
    assert_int_equal(g_full.calls("nvmlDeviceGetPciInfo_v2"), 2);
    comem_device_close(src);
}

static void test_only_v1_procs(void **s)
{
    (void)s;
    comem_device_source *src = open_mode(&g_full, "only_v1_procs", COMEM_OK, NULL, 0);
    read_ok(src, 0);
    assert_true(g_r.procs_known);
    assert_int_equal(g_r.n_procs, 2); /* 16-byte records decoded as such */
    assert_int_equal(g_r.procs[0].pid, 4242);
    assert_int_equal(g_r.procs[0].bytes, 520 * MIB);
    assert_int_equal(g_r.procs[1].pid, 4343);
    assert_int_equal(g_r.procs[1].bytes, 1544 * MIB);
    assert_int_equal(g_full.calls("nvmlDeviceGetComputeRunningProcesses"), 1);
    comem_device_close(src);
}

static void test_no_v2_memory_gives_unknown_reserved(void **s)
{
    (void)s;
    comem_device_source *src = open_mode(&g_full, "no_v2_mem", COMEM_OK, NULL, 0);
    read_ok(src, 0);
    assert_int_equal(g_r.reserved, -1);
    assert_int_equal(g_r.total, 143771 * MIB);
    assert_int_equal(g_r.free, (143771 - 615 - 2064) * MIB);
    assert_int_equal(g_r.used, (2064 + 615) * MIB);
    read_ok(src, 0);
    assert_int_equal(g_full.calls("nvmlDeviceGetMemoryInfo_v2"), 1);
    assert_int_equal(g_full.calls("nvmlDeviceGetMemoryInfo"), 2);
    comem_device_close(src);
}

static void test_legacy_library_uses_unversioned_calls(void **s)
{
    (void)s;
    comem_device_source *src = open_mode(&g_legacy, "basic", COMEM_OK, NULL, 0);
    int n = 0;
    assert_int_equal(comem_device_count(src, &n), COMEM_OK);
    assert_int_equal(n, 2);
    read_ok(src, 0);
    assert_string_equal(g_r.name, "NVIDIA H200");
    assert_string_equal(g_r.uuid, "GPU-aaaaaaaa-1111-2222-3333-444444444444");
    assert_string_equal(g_r.pci_bus_id, "00000000:3B:00.0");
    assert_int_equal(g_r.reserved, -1);
    assert_int_equal(g_r.used, (2064 + 615) * MIB);
    assert_true(g_r.procs_known);
    assert_int_equal(g_r.n_procs, 2);
    assert_int_equal(g_r.procs[1].pid, 4343);
    assert_int_equal(g_r.procs[1].bytes, 1544 * MIB);
    assert_int_equal(g_legacy.calls("nvmlInit"), 1);
    assert_int_equal(g_legacy.calls("nvmlDeviceGetCount"), 1);
    assert_int_equal(g_legacy.calls("nvmlDeviceGetHandleByIndex"), 1);
    assert_int_equal(g_legacy.calls("nvmlDeviceGetPciInfo"), 1);
    assert_int_equal(g_legacy.calls("nvmlDeviceGetMemoryInfo"), 1);
    assert_int_equal(g_legacy.calls("nvmlDeviceGetComputeRunningProcesses"), 1);
    comem_device_close(src);
    assert_int_equal(g_legacy.calls("nvmlShutdown"), 1);
}

static void test_missing_library_names_it(void **s)
{
    (void)s;
    set_env(COMEM_NVML_LIBRARY_ENV, "/nonexistent/dir/" COMEM_DL_NVML);
    comem_device_source *src = (comem_device_source *)0x1;
    char why[512];
    assert_int_equal(comem_nvml_open(&src, why, sizeof why), COMEM_ENODEV);
    assert_null(src);
    assert_non_null(strstr(why, "cannot load"));
    assert_non_null(strstr(why, COMEM_DL_NVML));
    assert_null(strchr(why, '\n'));
    /* a NULL reason buffer is allowed */
    assert_int_equal(comem_nvml_open(&src, NULL, 0), COMEM_ENODEV);
    /* a library that is not NVML at all */
    char other[4096];
    snprintf(other, sizeof other, "%s/libfake_cuda" LIB_SUFFIX, test_bin_dir());
    set_env(COMEM_NVML_LIBRARY_ENV, other);
    assert_int_equal(comem_nvml_open(&src, why, sizeof why), COMEM_ENODEV);
    assert_non_null(strstr(why, "has no nvmlInit"));
}

static void test_init_failure(void **s)
{
    (void)s;
    char why[512];
    open_mode(&g_full, "init_fails", COMEM_ENODEV, why, sizeof why);
    assert_non_null(strstr(why, "nvmlInit_v2"));
    assert_non_null(strstr(why, "Driver Not Loaded"));
    assert_int_equal(g_full.calls("nvmlShutdown"), 0); /* nothing to shut down */

    open_mode(&g_legacy, "init_fails", COMEM_ENODEV, why, sizeof why);
    assert_non_null(strstr(why, "nvmlInit "));
}

static void test_no_devices(void **s)
{
    (void)s;
    char why[512];
    open_mode(&g_full, "no_devices", COMEM_ENODEV, why, sizeof why);
    assert_non_null(strstr(why, "no NVIDIA device"));
    assert_int_equal(g_full.calls("nvmlShutdown"), 1); /* init balanced */
}

static void test_insufficient_size_grows_the_buffer(void **s)
{
    (void)s;
    comem_device_source *src = open_mode(&g_full, "insufficient", COMEM_OK, NULL, 0);
    read_ok(src, 0);
    assert_true(g_r.procs_known);
    assert_int_equal(g_r.n_procs, 40);
    for (int i = 0; i < 40; i++) {
        assert_int_equal(g_r.procs[i].pid, 5000 + i);
        assert_int_equal(g_r.procs[i].bytes, (i + 1) * MIB);
    }
    assert_int_equal(g_full.calls("nvmlDeviceGetComputeRunningProcesses_v3"), 2);
    comem_device_close(src);
}

static void test_too_many_processes_is_unknown_not_partial(void **s)
{
    (void)s;
    comem_device_source *src = open_mode(&g_full, "too_many", COMEM_OK, NULL, 0);
    read_ok(src, 0);
    assert_false(g_r.procs_known);
    assert_int_equal(g_r.n_procs, 0);
    assert_int_equal(g_r.total, 143771 * MIB); /* the rest of the reading stands */
    /* it is not mistaken for a missing call: _v3 stays in use */
    read_ok(src, 0);
    assert_int_equal(g_full.calls("nvmlDeviceGetComputeRunningProcesses_v2"), 0);
    comem_device_close(src);
}

static void test_not_available_bytes_are_minus_one(void **s)
{
    (void)s;
    comem_device_source *src = open_mode(&g_full, "not_available", COMEM_OK, NULL, 0);
    read_ok(src, 0);
    assert_true(g_r.procs_known);
    assert_int_equal(g_r.n_procs, 2);
    assert_int_equal(g_r.procs[0].pid, 4242);
    assert_int_equal(g_r.procs[0].bytes, 520 * MIB);
    assert_int_equal(g_r.procs[1].pid, 4343); /* still listed */
    assert_int_equal(g_r.procs[1].bytes, -1);
    comem_device_close(src);
}

static int g_warns_lost;
static void count_sink(int level, const char *line, void *user)
{
    (void)user;
    if (level == COMEM_LOG_WARN && strstr(line, "GPU is lost"))
        g_warns_lost++;
}

static void test_driver_error_fails_the_read_and_warns_once(void **s)
{
    (void)s;
    comem_device_source *src = open_mode(&g_full, "mem_lost", COMEM_OK, NULL, 0);
    g_warns_lost = 0;
    comem_log_set_sink(count_sink, NULL);
    assert_int_equal(comem_device_read(src, 0, &g_r), COMEM_ENODEV);
    assert_int_equal(comem_device_read(src, 0, &g_r), COMEM_ENODEV);
    comem_log_set_sink(NULL, NULL);
    assert_int_equal(g_warns_lost, 1);
    comem_device_close(src);
}

static int other_count(comem_device_source *src, int *n)
{
    (void)src;
    *n = 0;
    return 0;
}

static void test_index_lookups(void **s)
{
    (void)s;
    comem_device_source *src = open_mode(&g_full, "basic", COMEM_OK, NULL, 0);
    int i = -1;
    assert_int_equal(comem_nvml_index_by_uuid(src, "GPU-bbbbbbbb-1111-2222-3333-444444444444", &i),
                     COMEM_OK);
    assert_int_equal(i, 1);
    assert_int_equal(comem_nvml_index_by_uuid(src, "GPU-aaaaaaaa-1111-2222-3333-444444444444", &i),
                     COMEM_OK);
    assert_int_equal(i, 0);
    assert_int_equal(comem_nvml_index_by_uuid(src, "GPU-nope", &i), COMEM_ENOENT);
    assert_int_equal(comem_nvml_index_by_pci_bus_id(src, "0000:5c:00.0", &i), COMEM_OK);
    assert_int_equal(i, 1); /* the CUDA driver's spelling */
    assert_int_equal(comem_nvml_index_by_pci_bus_id(src, "00000000:3B:00.0", &i), COMEM_OK);
    assert_int_equal(i, 0);
    assert_int_equal(comem_nvml_index_by_pci_bus_id(src, "0000:3B:00.1", &i), COMEM_ENOENT);
    assert_int_equal(comem_nvml_index_by_pci_bus_id(src, "junk", &i), COMEM_ENOENT);

    /* only an NVML source will do */
    static const comem_device_source_ops ops = {.count = other_count};
    comem_device_source other = {.ops = &ops, .name = "sim"};
    assert_int_equal(comem_nvml_index_by_uuid(&other, "GPU-x", &i), COMEM_EINVAL);
    assert_int_equal(comem_nvml_index_by_pci_bus_id(&other, "0000:3b:00.0", &i), COMEM_EINVAL);
    assert_int_equal(comem_nvml_index_by_uuid(NULL, "GPU-x", &i), COMEM_EINVAL);
    comem_device_close(src);
}

static void test_pci_bus_id_equal(void **s)
{
    (void)s;
    assert_true(comem_pci_bus_id_equal("00000000:3B:00.0", "0000:3b:00.0"));
    assert_true(comem_pci_bus_id_equal("3b:00.0", "00000000:3B:00.0"));
    assert_true(comem_pci_bus_id_equal("00000001:3B:1F.0", "0001:3b:1f.0"));
    assert_false(comem_pci_bus_id_equal("00000001:3B:00.0", "0000:3b:00.0"));
    assert_false(comem_pci_bus_id_equal("0000:3b:00.0", "0000:3b:00.1"));
    assert_false(comem_pci_bus_id_equal("0000:3b:00.0x", "0000:3b:00.0"));
    assert_false(comem_pci_bus_id_equal("", ""));
    assert_false(comem_pci_bus_id_equal(NULL, "0000:3b:00.0"));
}

static void test_two_sources_at_once(void **s)
{
    (void)s;
    comem_device_source *a = open_mode(&g_full, "basic", COMEM_OK, NULL, 0);
    char why[256];
    comem_device_source *b = NULL;
    assert_int_equal(comem_nvml_open(&b, why, sizeof why), COMEM_OK);
    comem_device_close(a);
    read_ok(b, 0); /* NVML counts inits: b still works after a's shutdown */
    assert_int_equal(g_r.n_procs, 2);
    comem_device_close(b);
    assert_int_equal(g_full.calls("nvmlInit_v2"), 2);
    assert_int_equal(g_full.calls("nvmlShutdown"), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_reading),
        cmocka_unit_test(test_no_v3_falls_back_to_v2_once),
        cmocka_unit_test(test_only_v1_procs),
        cmocka_unit_test(test_no_v2_memory_gives_unknown_reserved),
        cmocka_unit_test(test_legacy_library_uses_unversioned_calls),
        cmocka_unit_test(test_missing_library_names_it),
        cmocka_unit_test(test_init_failure),
        cmocka_unit_test(test_no_devices),
        cmocka_unit_test(test_insufficient_size_grows_the_buffer),
        cmocka_unit_test(test_too_many_processes_is_unknown_not_partial),
        cmocka_unit_test(test_not_available_bytes_are_minus_one),
        cmocka_unit_test(test_driver_error_fails_the_read_and_warns_once),
        cmocka_unit_test(test_index_lookups),
        cmocka_unit_test(test_pci_bus_id_equal),
        cmocka_unit_test(test_two_sources_at_once),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
