/*
 * tests/unit/test_pager_cuda_fake.c - the pager's CUDA backend against the
 * scripted fake driver (tests/fakes/fake_cuda.c, libfake_cuda.so in
 * COMEM_BIN_DIR), so the backend's calls, context handling and accounting run
 * on machines without a GPU. The fake keeps no bytes (copies to the device
 * are dropped, copies back read zeros), so data integrity is the GPU test's
 * (tests/gpu/test_gpu_pager.c); here: granularity from the driver, commits
 * and evictions moving the driver's free memory, the device term reading
 * cuMemGetInfo, eviction from a thread with no context current (the client's
 * service thread), the caller's own current context left as it was, and the
 * primary context released at close. Skipped without the fake.
 */
#include "unit/cmocka_all.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/common.h"
#include "comem/pager.h"
#include "fakes/fake_cuda.h"
#include "pager/pager_seam.h"
#include "probe/cuda_driver.h"

#define MIB COMEM_MIB
#define PS (32 * MIB)

static char g_lib[4096];

static fake_cuda_stats *stats(void)
{
    static fake_cuda_stats st;
    void *h = dlopen(g_lib, RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    void *sym = dlsym(h, "fake_cuda_get_stats");
    assert_non_null(sym);
    fake_cuda_get_stats_fn fn;
    memcpy(&fn, &sym, sizeof sym);
    fn(&st);
    dlclose(h);
    return &st;
}

typedef struct evict_job {
    comem_pager *p;
    int64_t freed;
    int rc;
} evict_job;

static void *evict_elsewhere(void *arg)
{
    evict_job *j = arg;
    j->rc = comem_pager_free_memory(j->p, INT64_MAX, &j->freed);
    return NULL;
}

static void test_cuda_backend(void **s)
{
    (void)s;
    if (access(g_lib, R_OK) != 0) {
        printf("skipped: no fake CUDA driver at %s\n", g_lib);
        skip();
    }
    setenv(COMEM_CUDA_LIBRARY_ENV, g_lib, 1);
    setenv("FAKE_CUDA_MODE", "basic", 1);
    comem_pager *p = NULL;
    assert_int_equal(comem_pager_open(COMEM_PAGER_CUDA, 0, NULL, &p), COMEM_OK);
    assert_int_equal(stats()->primary_refs[0], 1);
    assert_int_equal(comem_pager_granularity(p), 2 * MIB);
    assert_int_equal(comem_pager_open(COMEM_PAGER_CUDA, 7, NULL, &(comem_pager *){NULL}), COMEM_ENODEV);
    comem_vbar *v = NULL;
    assert_int_equal(comem_vbar_create(p, 8 * PS, 3 * MIB, &v), COMEM_EINVAL);
    assert_int_equal(comem_vbar_create(p, 8 * PS, PS, &v), COMEM_OK);
    assert_true(comem_vbar_base(v) != 0);

    unsigned long long free0 = stats()->free_bytes[0];
    /* A device reading: the margin against cuMemGetInfo's free. */
    assert_int_equal(comem_pager_set_device_poll(p, 256 * MIB, 0), COMEM_OK);
    assert_int_equal(comem_pager_budget_deficit(p, 0), 256 * MIB - (int64_t)free0);
    uint32_t sig[8];
    assert_int_equal(comem_vbar_fault(v, 0, 8 * PS, sig, 8), COMEM_VBAR_RESIDENT);
    for (int i = 0; i < 8; i++)
        assert_int_equal(sig[i], 1);
    assert_int_equal(comem_pager_usage(p), 8 * PS);
    assert_int_equal((int64_t)(free0 - stats()->free_bytes[0]), 8 * PS); /* charged at cuMemCreate */
    assert_int_equal(comem_pager_budget_deficit(p, 0), 256 * MIB - ((int64_t)free0 - 8 * PS));
    uint8_t buf[64] = {1, 2, 3};
    assert_int_equal(comem_vbar_write(v, PS - 8, buf, sizeof buf), COMEM_OK);
    assert_int_equal(comem_vbar_read(v, PS - 8, buf, sizeof buf), COMEM_OK);
    assert_int_equal(comem_vbar_unpin(v, 0, 8 * PS), COMEM_OK);

    /* The caller's thread has another context current: it is current again afterwards. */
    const comem_cuda *cu = NULL;
    assert_int_equal(comem_cuda_load(&cu), COMEM_OK);
    CUcontext other = NULL, cur = NULL;
    assert_int_equal(cu->DevicePrimaryCtxRetain(&other, 1), CUDA_SUCCESS);
    assert_int_equal(cu->CtxSetCurrent(other), CUDA_SUCCESS);
    int64_t freed = 0;
    assert_int_equal(comem_vbar_free_memory(v, PS, &freed), COMEM_OK);
    assert_int_equal(freed, PS);
    assert_int_equal(cu->CtxGetCurrent(&cur), CUDA_SUCCESS);
    assert_true(cur == other);
    assert_int_equal(cu->CtxSetCurrent(NULL), CUDA_SUCCESS);
    assert_int_equal(cu->DevicePrimaryCtxRelease(1), CUDA_SUCCESS);

    /* Eviction from a thread that never touched CUDA, as a release ask runs. */
    evict_job j = {p, 0, -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, evict_elsewhere, &j), 0);
    pthread_join(t, NULL);
    assert_int_equal(j.rc, COMEM_OK);
    assert_int_equal(j.freed, 7 * PS);
    assert_int_equal(comem_pager_usage(p), 0);
    assert_int_equal(stats()->free_bytes[0], free0); /* every handle released */
    assert_int_equal(comem_pager_check(p), COMEM_OK);

    /* Re-fault after prioritize: new serials. */
    assert_int_equal(comem_vbar_prioritize(v), COMEM_OK);
    assert_int_equal(comem_vbar_fault(v, PS, 2 * PS, sig, 8), COMEM_VBAR_RESIDENT);
    assert_int_equal(sig[0], 2);
    assert_int_equal(sig[1], 2);
    assert_int_equal(comem_vbar_read(v, 0, buf, 8), COMEM_ENOENT);
    comem_vbar_destroy(v); /* pinned pages too */
    assert_int_equal(stats()->free_bytes[0], free0);
    comem_pager_close(p);
    assert_int_equal(stats()->primary_refs[0], 0);
}

int main(void)
{
    const char *bin = getenv("COMEM_BIN_DIR");
    snprintf(g_lib, sizeof g_lib, "%s/libfake_cuda.so", bin ? bin : ".");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
