/* tests/unit/test_os.c - the platform layer (src/os/), the same assertions on every platform it builds for. */
#include "unit/cmocka_all.h"

#include <string.h>

#include "os/dl.h"

/* A library every system of its kind has, and a function in it. */
#ifdef _WIN32
#define SOME_LIBRARY "kernel32.dll"
#define SOME_FUNCTION "GetTickCount"
#else
#define SOME_LIBRARY "libm.so.6"
#define SOME_FUNCTION "cos"
#endif

static void test_dl_loads_and_finds(void **s)
{
    (void)s;
    char why[160] = "untouched";
    comem_dl *dl = comem_dl_open(SOME_LIBRARY, false, why, sizeof why);
    assert_non_null(dl);
    assert_non_null(comem_dl_sym(dl, SOME_FUNCTION));
    assert_null(comem_dl_sym(dl, "comem_no_such_symbol"));
    comem_dl *again = comem_dl_open(SOME_LIBRARY, true, why, sizeof why); /* the loaded copy */
    assert_non_null(again);
    assert_ptr_equal(comem_dl_sym(again, SOME_FUNCTION), comem_dl_sym(dl, SOME_FUNCTION));
    comem_dl_close(again);
    comem_dl_close(dl);
}

static void test_dl_says_why_it_cannot(void **s)
{
    (void)s;
    char why[160] = "";
    assert_null(comem_dl_open("comem-no-such-library-0", false, why, sizeof why));
    assert_true(strlen(why) > 0); /* the system's reason, for the caller's message */
    assert_null(comem_dl_open("comem-no-such-library-0", true, NULL, 0));
    assert_null(comem_dl_sym(NULL, SOME_FUNCTION));
    comem_dl_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dl_loads_and_finds),
        cmocka_unit_test(test_dl_says_why_it_cannot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
