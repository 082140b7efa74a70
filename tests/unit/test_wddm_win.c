/*
 * tests/unit/test_wddm_win.c - the WDDM budget per adapter (probe/wddm.h), Windows only.
 *
 * Every adapter read is a hardware one with a name, a LUID and sane figures: a budget no larger
 * than the memory the process could ever have on it, a usage and a reservation within bounds; two
 * reads agree on which adapters there are. Under wine DXGI's adapters and numbers are its own
 * (synthetic): the test checks the shape of what is read, which is all wine can show; a machine
 * with no adapter DXGI will describe (headless wine) skips.
 */
#include "unit/cmocka_all.h"

#include <string.h>

#include "comem/common.h"
#include "probe/wddm.h"

static void test_adapters_read_with_sane_figures(void **s)
{
    (void)s;
    comem_wddm_adapter a[COMEM_WDDM_MAX_ADAPTERS];
    int n = -1;
    int rc = comem_wddm_adapters(a, COMEM_WDDM_MAX_ADAPTERS, &n);
    if (rc == COMEM_EIO || (rc == COMEM_OK && n == 0)) {
        print_message("no adapter DXGI describes here (%s, %d): skipped\n", comem_status_str(rc), n);
        skip();
    }
    assert_int_equal(rc, COMEM_OK);
    assert_true(n > 0 && n <= COMEM_WDDM_MAX_ADAPTERS);
    for (int i = 0; i < n; i++) {
        print_message("adapter %d: %s, vendor %04x, LUID %016llx, dedicated %lld, budget %lld, usage %lld\n", i,
                      a[i].name, (unsigned)a[i].vendor, (unsigned long long)a[i].luid, (long long)a[i].dedicated,
                      (long long)a[i].budget, (long long)a[i].usage);
        assert_true(a[i].name[0] != '\0');
        assert_true(a[i].luid != 0);
        assert_true(a[i].budget >= 0 && a[i].usage >= 0 && a[i].dedicated >= 0);
        assert_true(a[i].reservation >= 0 && a[i].reservable >= 0);
        assert_true(a[i].reservation <= a[i].reservable || a[i].reservable == 0);
    }
    comem_wddm_adapter b[COMEM_WDDM_MAX_ADAPTERS];
    int m = -1;
    assert_int_equal(comem_wddm_adapters(b, COMEM_WDDM_MAX_ADAPTERS, &m), COMEM_OK);
    assert_int_equal(m, n);
    for (int i = 0; i < n; i++) {
        assert_true(b[i].luid == a[i].luid); /* the same adapters in the same order */
        assert_string_equal(b[i].name, a[i].name);
    }
    /* At most max are read. */
    int one = -1;
    assert_int_equal(comem_wddm_adapters(b, 1, &one), COMEM_OK);
    assert_int_equal(one, 1);
    assert_true(b[0].luid == a[0].luid);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_adapters_read_with_sane_figures)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
