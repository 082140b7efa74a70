/*
 * tests/unit/test_cuda_fake.c - the CUDA loader and the "cuda" source against a scripted driver.
 *
 * The loader is process-global (pthread_once), so every case that loads runs
 * in a fork()ed child with its own COMEM_CUDA_LIBRARY and FAKE_CUDA_MODE: one
 * load per process, as in production. A child checks with CHECK (which prints
 * the failing line and makes the child exit non-zero) rather than cmocka's
 * asserts, whose longjmp belongs to the parent's runner; the parent asserts
 * the child's exit status. The fakes (libfake_cuda.so, and
 * libfake_cuda_legacy.so without cuGetProcAddress_v2) sit in COMEM_BIN_DIR.
 */
#include "unit/cmocka_all.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/common.h"
#include "fakes/fake_cuda.h"
#include "probe/cuda_driver.h"
#include "probe/cuda_luid.h"
#include "probe/cuda_view.h"
#include "probe/device.h"

#define MIB COMEM_MIB
#define N_ENTRY_POINTS ((int)(sizeof(comem_cuda) / sizeof(void *)))

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_) {                                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n", __FILE__, __LINE__,  \
                    #a, #b, a_, b_);                                                               \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!a_ || strcmp(a_, b_) != 0) {                                                          \
            fprintf(stderr, "%s:%d: CHECK failed: %s is '%s', expected '%s'\n", __FILE__,          \
                    __LINE__, #a, a_ ? a_ : "(null)", b_);                                         \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static char g_lib_path[4096];

static const char *fake_path(const char *file)
{
    const char *bin = getenv("COMEM_BIN_DIR");
    snprintf(g_lib_path, sizeof g_lib_path, "%s/%s", bin ? bin : ".", file);
    return g_lib_path;
}

/* The fake's counters, through our own handle on the library the loader opened. */
static int stats(fake_cuda_stats *out)
{
    void *h = dlopen(getenv(COMEM_CUDA_LIBRARY_ENV), RTLD_NOW | RTLD_NOLOAD);
    CHECK(h != NULL);
    void *sym = dlsym(h, "fake_cuda_get_stats");
    CHECK(sym != NULL);
    fake_cuda_get_stats_fn fn;
    memcpy(&fn, &sym, sizeof sym);
    fn(out);
    dlclose(h);
    return 0;
}

/* Runs fn in a child with the given library and mode; the child's status is the verdict. */
static void in_child(int (*fn)(void), const char *lib, const char *mode)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv(COMEM_CUDA_LIBRARY_ENV, lib, 1);
        setenv("FAKE_CUDA_MODE", mode, 1);
        int rc = fn();
        fflush(stderr);
        exit(rc); /* exit, not _exit: LeakSanitizer checks the child too */
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- loading ---- */

static int check_pinned_lookups(const fake_cuda_stats *st)
{
    CHECK_EQ(st->lookups, N_ENTRY_POINTS);
    for (int i = 0; i < st->lookups; i++) {
        if (st->versions[i] != COMEM_CUDA_ABI_VERSION) {
            fprintf(stderr, "%s requested at ABI %d\n", st->names[i], st->versions[i]);
            return 1;
        }
        CHECK_EQ(st->flags[i], COMEM_CUDA_PROC_FLAGS);
        CHECK(strncmp(st->names[i], "cu", 2) == 0);
        CHECK(strstr(st->names[i], "_v") == NULL); /* base names: the version picks the revision */
    }
    return 0;
}

static int child_loads_with_pinned_version(void)
{
    const comem_cuda *cu = NULL;
    CHECK_EQ(comem_cuda_load(&cu), COMEM_OK);
    CHECK(cu != NULL);
    CHECK_STR(comem_cuda_load_error(), "");
    fake_cuda_stats st;
    CHECK_EQ(stats(&st), 0);
    CHECK_EQ(st.lookups_v1, 0); /* cuGetProcAddress_v2 preferred */
    if (check_pinned_lookups(&st))
        return 1;
    CHECK_EQ(st.init_calls, 1);
    CHECK_EQ(st.init_flags, 0);
    /* every slot is filled */
    const void *const *slots = (const void *const *)(const void *)cu;
    for (int i = 0; i < N_ENTRY_POINTS; i++)
        CHECK(slots[i] != NULL);
    /* once per process */
    const comem_cuda *again = NULL;
    CHECK_EQ(comem_cuda_load(&again), COMEM_OK);
    CHECK(again == cu);
    CHECK_EQ(stats(&st), 0);
    CHECK_EQ(st.lookups, N_ENTRY_POINTS);
    CHECK_EQ(st.init_calls, 1);
    /* with the driver loaded, error text comes from it */
    CHECK_STR(comem_cuda_errstr(CUDA_ERROR_OUT_OF_MEMORY), "out of memory");
    CHECK_STR(comem_cuda_errstr(CUDA_ERROR_NOT_READY), "CUDA_ERROR_NOT_READY");
    return 0;
}

static void test_loads_with_pinned_version(void **s)
{
    (void)s;
    in_child(child_loads_with_pinned_version, fake_path("libfake_cuda.so"), "basic");
}

static int child_legacy_proc_address(void)
{
    CHECK_EQ(comem_cuda_load(NULL), COMEM_OK);
    fake_cuda_stats st;
    CHECK_EQ(stats(&st), 0);
    CHECK_EQ(st.lookups_v1, N_ENTRY_POINTS); /* the original cuGetProcAddress */
    return check_pinned_lookups(&st);
}

static void test_falls_back_to_cuGetProcAddress(void **s)
{
    (void)s;
    in_child(child_legacy_proc_address, fake_path("libfake_cuda_legacy.so"), "basic");
}

static int child_missing_library(void)
{
    CHECK_EQ(comem_cuda_load(NULL), COMEM_ENODEV);
    const char *e = comem_cuda_load_error();
    CHECK(strstr(e, "cannot load") != NULL);
    CHECK(strstr(e, "libcuda.so.1") != NULL);
    CHECK(strchr(e, '\n') == NULL);
    CHECK_EQ(comem_cuda_load(NULL), COMEM_ENODEV); /* the verdict sticks */
    comem_device_source *v = (comem_device_source *)0x1;
    CHECK_EQ(comem_cuda_view_open(false, &v), COMEM_ENODEV);
    CHECK(v == NULL);
    int64_t g = -7;
    CHECK_EQ(comem_cuda_granularity(0, &g, NULL), COMEM_ENODEV);
    CHECK_EQ(g, -7);
    CHECK_STR(comem_cuda_errstr(CUDA_ERROR_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY");
    return 0;
}

static void test_missing_library(void **s)
{
    (void)s;
    in_child(child_missing_library, "/nonexistent/dir/libcuda.so.1", "basic");
}

static int child_init_fails(void)
{
    CHECK_EQ(comem_cuda_load(NULL), COMEM_ENODEV);
    const char *e = comem_cuda_load_error();
    CHECK(strstr(e, "cuInit(0) failed") != NULL);
    CHECK(strstr(e, "no CUDA-capable device") != NULL); /* the driver's own words */
    CHECK(strstr(e, "CUresult 100") != NULL);
    return 0;
}

static void test_init_failure(void **s)
{
    (void)s;
    in_child(child_init_fails, fake_path("libfake_cuda.so"), "init_fails");
}

static int child_missing_symbol(void)
{
    CHECK_EQ(comem_cuda_load(NULL), COMEM_ENODEV);
    const char *e = comem_cuda_load_error();
    CHECK(strstr(e, "cuMemSetAccess") != NULL);
    CHECK(strstr(e, "12000") != NULL);
    CHECK(strstr(e, "too old") != NULL);
    /* nothing was initialised with a half-filled table, and the library was let go */
    CHECK(dlopen(getenv(COMEM_CUDA_LIBRARY_ENV), RTLD_NOW | RTLD_NOLOAD) == NULL);
    return 0;
}

static void test_missing_entry_point(void **s)
{
    (void)s;
    in_child(child_missing_symbol, fake_path("libfake_cuda.so"), "missing_symbol");
}

static int child_no_devices(void)
{
    CHECK_EQ(comem_cuda_load(NULL), COMEM_OK);
    comem_device_source *v = (comem_device_source *)0x1;
    CHECK_EQ(comem_cuda_view_open(true, &v), COMEM_ENODEV);
    CHECK(v == NULL);
    return 0;
}

static void test_no_devices(void **s)
{
    (void)s;
    in_child(child_no_devices, fake_path("libfake_cuda.so"), "no_devices");
}

/* ---- the view ---- */

static comem_device_reading g_r;

static int child_view_without_context(void)
{
    comem_device_source *v = NULL;
    CHECK_EQ(comem_cuda_view_open(false, &v), COMEM_OK);
    CHECK_STR(v->name, "cuda");
    int n = 0;
    CHECK_EQ(comem_device_count(v, &n), COMEM_OK);
    CHECK_EQ(n, 2);

    /* no context current: identity and total, but no cuMemGetInfo */
    CHECK_EQ(comem_device_read(v, 0, &g_r), COMEM_OK);
    CHECK_STR(g_r.source, "cuda");
    CHECK_EQ(g_r.index, 0);
    CHECK_EQ(g_r.scope, COMEM_SCOPE_DEVICE_WIDE);
    CHECK_STR(g_r.name, "Fake H200");
    CHECK_STR(g_r.uuid, "GPU-00112233-4455-6677-8899-aabbccddeeff");
    CHECK_STR(g_r.pci_bus_id, "0000:3B:00.0");
    CHECK_EQ(g_r.total, 143771 * MIB);
    CHECK_EQ(g_r.free, -1);
    CHECK_EQ(g_r.used, -1);
    CHECK_EQ(g_r.reserved, -1);
    CHECK(!g_r.procs_known);
    CHECK_EQ(g_r.pcie_gen, -1);
    fake_cuda_stats st;
    CHECK_EQ(stats(&st), 0);
    CHECK_EQ(st.memgetinfo_calls, 0);
    CHECK_EQ(st.primary_refs[0], 0); /* and no context was created for it */

    /* the caller makes device 0's context current: now free is read, for device 0 only */
    const comem_cuda *cu;
    CHECK_EQ(comem_cuda_load(&cu), COMEM_OK);
    CUcontext ctx = NULL;
    CHECK_EQ(cu->DevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    CHECK_EQ(cu->CtxSetCurrent(ctx), CUDA_SUCCESS);
    CHECK_EQ(comem_device_read(v, 0, &g_r), COMEM_OK);
    CHECK_EQ(g_r.free, (143771 - 1143) * MIB);
    CHECK_EQ(g_r.used, 1143 * MIB);
    CHECK_EQ(comem_device_read(v, 1, &g_r), COMEM_OK);
    CHECK_STR(g_r.name, "Fake L4");
    CHECK_STR(g_r.uuid, "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
    CHECK_EQ(g_r.free, -1);
    CHECK_EQ(stats(&st), 0);
    CHECK_EQ(st.memgetinfo_calls, 1);
    CHECK_EQ(st.memgetinfo_without_ctx, 0);

    /* allocations move it; out of memory maps to COMEM_ENOSPC */
    CUdeviceptr p = 0;
    CHECK_EQ(cu->MemAlloc(&p, (size_t)(1024 * MIB)), CUDA_SUCCESS);
    CHECK_EQ(cu->MemsetD8(p, 0, (size_t)(1024 * MIB)), CUDA_SUCCESS);
    CHECK_EQ(comem_device_read(v, 0, &g_r), COMEM_OK);
    CHECK_EQ(g_r.free, (143771 - 1143 - 1024) * MIB);
    CHECK_EQ(g_r.used, (1143 + 1024) * MIB);
    CUdeviceptr q = 0;
    CUresult r = cu->MemAlloc(&q, (size_t)(200000 * MIB));
    CHECK_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(comem_cuda_status((int)r), COMEM_ENOSPC);
    CHECK_EQ(cu->MemFree(p), CUDA_SUCCESS);
    CHECK_EQ(comem_device_read(v, 0, &g_r), COMEM_OK);
    CHECK_EQ(g_r.free, (143771 - 1143) * MIB);

    CHECK_EQ(cu->CtxSetCurrent(NULL), CUDA_SUCCESS);
    CHECK_EQ(cu->DevicePrimaryCtxRelease(0), CUDA_SUCCESS);
    CHECK_EQ(comem_device_read(v, 0, &g_r), COMEM_OK);
    CHECK_EQ(g_r.free, -1);
    CHECK_EQ(comem_device_read(v, 2, &g_r), COMEM_ENODEV); /* past the last device */
    CHECK_EQ(comem_device_read(v, -1, &g_r), COMEM_EINVAL);
    comem_device_close(v);
    CHECK_EQ(stats(&st), 0);
    CHECK_EQ(st.memgetinfo_without_ctx, 0);
    CHECK_EQ(st.primary_refs[0], 0);
    return 0;
}

static void test_view_reads_free_only_with_a_current_context(void **s)
{
    (void)s;
    in_child(child_view_without_context, fake_path("libfake_cuda.so"), "basic");
}

static int child_view_retains(void)
{
    const comem_cuda *cu;
    CHECK_EQ(comem_cuda_load(&cu), COMEM_OK);
    /* the thread has device 1's context current; the view must give it back */
    CUcontext mine = NULL;
    CHECK_EQ(cu->DevicePrimaryCtxRetain(&mine, 1), CUDA_SUCCESS);
    CHECK_EQ(cu->CtxSetCurrent(mine), CUDA_SUCCESS);

    comem_device_source *v = NULL;
    CHECK_EQ(comem_cuda_view_open(true, &v), COMEM_OK);
    CHECK_EQ(comem_device_read(v, 0, &g_r), COMEM_OK);
    CHECK_EQ(g_r.free, (143771 - 1143) * MIB);
    CHECK_EQ(g_r.used, 1143 * MIB);
    CUcontext cur = NULL;
    CHECK_EQ(cu->CtxGetCurrent(&cur), CUDA_SUCCESS);
    CHECK(cur == mine);
    CHECK_EQ(comem_device_read(v, 1, &g_r), COMEM_OK);
    CHECK_EQ(g_r.free, (23034 - 300) * MIB);
    CHECK_EQ(comem_device_read(v, 0, &g_r), COMEM_OK); /* retained once, not per read */

    fake_cuda_stats st;
    CHECK_EQ(stats(&st), 0);
    CHECK_EQ(st.primary_refs[0], 1);
    CHECK_EQ(st.primary_refs[1], 2); /* ours and the view's */
    CHECK_EQ(st.memgetinfo_without_ctx, 0);
    comem_device_close(v);
    CHECK_EQ(stats(&st), 0);
    CHECK_EQ(st.primary_refs[0], 0);
    CHECK_EQ(st.primary_refs[1], 1);

    /* with nothing current, the view still reads, and leaves nothing current */
    CHECK_EQ(cu->CtxSetCurrent(NULL), CUDA_SUCCESS);
    CHECK_EQ(comem_cuda_view_open(true, &v), COMEM_OK);
    CHECK_EQ(comem_device_read(v, 1, &g_r), COMEM_OK);
    CHECK_EQ(g_r.free, (23034 - 300) * MIB);
    CHECK_EQ(cu->CtxGetCurrent(&cur), CUDA_SUCCESS);
    CHECK(cur == NULL);
    comem_device_close(v);
    CHECK_EQ(cu->DevicePrimaryCtxRelease(1), CUDA_SUCCESS);
    CHECK_EQ(stats(&st), 0);
    CHECK_EQ(st.primary_refs[1], 0);
    return 0;
}

/* An integrated GPU (CU_DEVICE_ATTRIBUTE_INTEGRATED) reads as unified; a discrete one does not. */
static int child_view_integrated(void)
{
    comem_device_source *v = NULL;
    CHECK_EQ(comem_cuda_view_open(false, &v), COMEM_OK);
    CHECK_EQ(comem_device_read(v, 0, &g_r), COMEM_OK);
    CHECK(!g_r.unified);
    CHECK_EQ(comem_device_read(v, 1, &g_r), COMEM_OK);
    CHECK(g_r.unified);
    comem_device_close(v);
    return 0;
}

static int child_view_discrete(void)
{
    comem_device_source *v = NULL;
    CHECK_EQ(comem_cuda_view_open(false, &v), COMEM_OK);
    CHECK_EQ(comem_device_read(v, 1, &g_r), COMEM_OK);
    CHECK(!g_r.unified);
    comem_device_close(v);
    return 0;
}

static void test_view_detects_an_integrated_gpu(void **s)
{
    (void)s;
    in_child(child_view_integrated, fake_path("libfake_cuda.so"), "integrated");
    in_child(child_view_discrete, fake_path("libfake_cuda.so"), "basic");
}

static void test_view_with_retained_context(void **s)
{
    (void)s;
    in_child(child_view_retains, fake_path("libfake_cuda.so"), "basic");
}

/* ---- LUIDs (which CUDA device a WDDM adapter is) ---- */

/*
 * Nothing is loaded to answer while the process runs no CUDA; once it does (dlopen here, as PyTorch
 * would), each device's LUID comes with its UUID, and a driver that gives none says so.
 */
static int child_luids(void)
{
    comem_cuda_luid l[4];
    int n = -1;
    CHECK(!comem_cuda_in_process());
    CHECK_EQ(comem_cuda_luids(l, 4, &n), COMEM_ENODEV);
    CHECK_EQ(n, 0);
    CHECK(dlopen(getenv(COMEM_CUDA_LIBRARY_ENV), RTLD_NOW | RTLD_NOLOAD) == NULL); /* asking loaded nothing */
    void *h = dlopen(getenv(COMEM_CUDA_LIBRARY_ENV), RTLD_NOW);
    CHECK(h != NULL);
    CHECK(comem_cuda_in_process());
    unsetenv("FAKE_CUDA_LUID");
    CHECK_EQ(comem_cuda_luids(l, 4, &n), COMEM_ENOTSUP); /* Linux: the driver has no LUID to give */
    setenv("FAKE_CUDA_LUID", "100000abc", 1);
    CHECK_EQ(comem_cuda_luids(l, 4, &n), COMEM_OK);
    CHECK_EQ(n, 2);
    CHECK_EQ(l[0].luid, 0x100000abcull); /* HighPart 1, LowPart 0xabc */
    CHECK_STR(l[0].uuid, "GPU-00112233-4455-6677-8899-aabbccddeeff");
    CHECK_EQ(l[1].luid, 0x100000abdull);
    CHECK_STR(l[1].uuid, "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
    CHECK_EQ(comem_cuda_luids(l, 1, &n), COMEM_OK); /* at most max */
    CHECK_EQ(n, 1);
    dlclose(h);
    return 0;
}

static int child_luids_not_handed_out(void)
{
    void *h = dlopen(getenv(COMEM_CUDA_LIBRARY_ENV), RTLD_NOW);
    CHECK(h != NULL);
    const comem_cuda *cu = NULL;
    CHECK_EQ(comem_cuda_load(&cu), COMEM_OK); /* an optional entry point missing: the load goes on */
    CHECK(cu->DeviceGetLuid == NULL);
    setenv("FAKE_CUDA_LUID", "100000abc", 1);
    comem_cuda_luid l[4];
    int n = -1;
    CHECK_EQ(comem_cuda_luids(l, 4, &n), COMEM_ENOTSUP);
    CHECK_EQ(n, 0);
    dlclose(h);
    return 0;
}

static void test_luids_name_the_cuda_devices(void **s)
{
    (void)s;
    in_child(child_luids, fake_path("libfake_cuda.so"), "basic");
    in_child(child_luids_not_handed_out, fake_path("libfake_cuda.so"), "no_luid");
}

static int child_granularity(void)
{
    int64_t mn = 0, rec = 0;
    CHECK_EQ(comem_cuda_granularity(0, &mn, &rec), COMEM_OK);
    CHECK_EQ(mn, 2 * MIB);
    CHECK_EQ(rec, 2 * MIB);
    CHECK_EQ(comem_cuda_granularity(1, NULL, &rec), COMEM_OK);
    CHECK_EQ(comem_cuda_granularity(7, &mn, NULL), COMEM_EDRIVER); /* no such device */
    return 0;
}

static void test_granularity(void **s)
{
    (void)s;
    in_child(child_granularity, fake_path("libfake_cuda.so"), "basic");
}

/* ---- pure helpers (no load: the parent never loads) ---- */

static void test_status_mapping(void **s)
{
    (void)s;
    assert_int_equal(comem_cuda_status(CUDA_SUCCESS), COMEM_OK);
    assert_int_equal(comem_cuda_status(CUDA_ERROR_OUT_OF_MEMORY), COMEM_ENOSPC);
    assert_int_equal(comem_cuda_status(CUDA_ERROR_NO_DEVICE), COMEM_ENODEV);
    assert_int_equal(comem_cuda_status(CUDA_ERROR_NOT_INITIALIZED), COMEM_ENODEV);
    assert_int_equal(comem_cuda_status(CUDA_ERROR_DEINITIALIZED), COMEM_ENODEV);
    assert_int_equal(comem_cuda_status(CUDA_ERROR_INVALID_DEVICE), COMEM_ENODEV);
    assert_int_equal(comem_cuda_status(CUDA_ERROR_INVALID_CONTEXT), COMEM_EDRIVER);
    assert_int_equal(comem_cuda_status(CUDA_ERROR_NOT_READY), COMEM_EDRIVER);
    assert_int_equal(comem_cuda_status(12345), COMEM_EDRIVER);
    assert_string_equal(comem_cuda_errstr(CUDA_ERROR_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY");
    assert_string_equal(comem_cuda_errstr(CUDA_ERROR_INVALID_CONTEXT),
                        "CUDA_ERROR_INVALID_CONTEXT");
    assert_string_equal(comem_cuda_errstr(12345), "unrecognised CUDA error");
    assert_string_equal(comem_cuda_load_error(), "");
}

static void test_uuid_format(void **s)
{
    (void)s;
    unsigned char b[16];
    for (int i = 0; i < 16; i++)
        b[i] = (unsigned char)(0xf0 - i * 0x0f);
    char buf[41];
    assert_string_equal(comem_cuda_format_uuid(b, buf, sizeof buf),
                        "GPU-f0e1d2c3-b4a5-9687-7869-5a4b3c2d1e0f");
    assert_int_equal(strlen(buf), 40);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loads_with_pinned_version),
        cmocka_unit_test(test_falls_back_to_cuGetProcAddress),
        cmocka_unit_test(test_missing_library),
        cmocka_unit_test(test_init_failure),
        cmocka_unit_test(test_missing_entry_point),
        cmocka_unit_test(test_no_devices),
        cmocka_unit_test(test_view_reads_free_only_with_a_current_context),
        cmocka_unit_test(test_view_with_retained_context),
        cmocka_unit_test(test_view_detects_an_integrated_gpu),
        cmocka_unit_test(test_luids_name_the_cuda_devices),
        cmocka_unit_test(test_granularity),
        cmocka_unit_test(test_status_mapping),
        cmocka_unit_test(test_uuid_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
