/* tests/unit/test_base.c - saturating byte arithmetic, size parsing, round-trip printing, the spin budget. */
#include "unit/cmocka_all.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/size.h"
#include "base/sort.h"
#include "base/spin.h"
#include "comem/common.h"

static void test_saturation(void **s)
{
    (void)s;
    assert_true(comem_add(INT64_MAX, 1) == INT64_MAX);
    assert_true(comem_add(INT64_MIN, -1) == INT64_MIN);
    assert_true(comem_sub(INT64_MIN, 1) == INT64_MIN);
    assert_true(comem_sub(INT64_MAX, -1) == INT64_MAX);
    assert_true(comem_sub(0, INT64_MIN) == INT64_MAX);
    assert_true(comem_mul(INT64_MAX / 2, 3) == INT64_MAX);
    assert_true(comem_mul(-(INT64_MAX / 2), 3) == INT64_MIN);
    assert_int_equal(comem_add(5, -7), -2);
    assert_int_equal(comem_clamp0(-3), 0);
}

static void test_trunc_is_python_int(void **s)
{
    (void)s;
    assert_int_equal(comem_trunc(3435973836.8), 3435973836);
    assert_int_equal(comem_trunc(-2.9), -2);
    assert_true(comem_trunc(1e30) == INT64_MAX);
    assert_true(comem_trunc(-1e30) == INT64_MIN);
    assert_int_equal(comem_trunc(NAN), 0);
    /* int(8 GiB * 1.1) - int(4 GiB * 1.1) is not int(4 GiB * 1.1) */
    assert_int_equal(comem_trunc(8589934592.0 * 1.1) - comem_trunc(4294967296.0 * 1.1), 4724464026);
}

static void test_python_max_min_tie(void **s)
{
    (void)s;
    assert_true(comem_fmax(1.0, 1.0) == 1.0);
    assert_true(comem_fmax(-0.0, 0.0) == 0.0 && __builtin_signbit(comem_fmax(-0.0, 0.0))); /* first wins ties */
    assert_true(comem_fmin(2.0, 1.0) == 1.0);
}

static void test_parse_size(void **s)
{
    (void)s;
    double v;
    char err[128];
    assert_int_equal(comem_parse_size("6GiB", &v, err, sizeof err), 0);
    assert_true(v == 6442450944.0);
    assert_int_equal(comem_parse_size("  0.3 gib", &v, err, sizeof err), 0);
    assert_true(v == 0.3 * 1073741824.0);
    assert_int_equal(comem_parse_size("1e3", &v, err, sizeof err), 0);
    assert_true(v == 1000.0);
    assert_int_equal(comem_parse_size("512B", &v, err, sizeof err), 0);
    assert_true(v == 512.0);
    assert_int_equal(comem_parse_size("8579868262.400001", &v, err, sizeof err), 0);
    assert_true(v == 6442450944.0 * 1.1 + 1493172224.0);
    assert_int_equal(comem_parse_size("2TiB", &v, err, sizeof err), 0);
    assert_true(v == 2199023255552.0);
    assert_int_equal(comem_parse_size("-1", &v, err, sizeof err), COMEM_EINVAL);
    assert_non_null(strstr(err, "negative"));
    assert_int_equal(comem_parse_size("-0", &v, err, sizeof err), COMEM_EINVAL);
    assert_int_equal(comem_parse_size("6GB", &v, err, sizeof err), COMEM_EINVAL);
    assert_non_null(strstr(err, "ambiguous"));
    assert_int_equal(comem_parse_size("", &v, err, sizeof err), COMEM_EINVAL);
    assert_int_equal(comem_parse_size("nan", &v, err, sizeof err), COMEM_EINVAL);
    assert_int_equal(comem_parse_size("1e999", &v, err, sizeof err), COMEM_EINVAL);
    assert_int_equal(comem_parse_size("1e300TiB", &v, err, sizeof err), COMEM_EINVAL);
    assert_int_equal(comem_parse_size(".", &v, err, sizeof err), COMEM_EINVAL);
    assert_int_equal(comem_parse_size("5 5", &v, err, sizeof err), COMEM_EINVAL);
    assert_int_equal(comem_parse_size(NULL, &v, NULL, 0), COMEM_EINVAL);
}

static void round_trip(double x)
{
    char buf[40];
    comem_format_double(x, buf, sizeof buf);
    assert_true(strtod(buf, NULL) == x);
}

static void test_format_double(void **s)
{
    (void)s;
    char buf[40];
    assert_string_equal(comem_format_double(8579868262.400001, buf, sizeof buf), "8579868262.400001");
    assert_string_equal(comem_format_double(1278423859.2, buf, sizeof buf), "1278423859.2");
    assert_string_equal(comem_format_double(419430400.0, buf, sizeof buf), "419430400");
    assert_string_equal(comem_format_double(-956301312.0, buf, sizeof buf), "-956301312");
    assert_string_equal(comem_format_double(0.1, buf, sizeof buf), "0.1");
    assert_string_equal(comem_format_double(1e32, buf, sizeof buf), "1e+32");
    srand(7);
    for (int i = 0; i < 20000; i++) {
        double x = ((double)rand() / RAND_MAX) * pow(10, rand() % 30 - 5) * (rand() % 2 ? 1 : -1);
        round_trip(x);
    }
    round_trip(161061273.59999847);
    round_trip(5e-324);
}

static void test_format_bytes(void **s)
{
    (void)s;
    char buf[32];
    assert_string_equal(comem_format_bytes(512, buf, sizeof buf), "512 B");
    assert_string_equal(comem_format_bytes(300 * COMEM_MIB, buf, sizeof buf), "300.00 MiB");
    assert_string_equal(comem_format_bytes(-3 * COMEM_GIB / 2, buf, sizeof buf), "-1.50 GiB");
}

/* Records sorted by key only: the tag says where each came from, so stability can be seen. */
typedef struct keyed {
    int key;
    int tag;
    char pad[20]; /* a size no word copy covers */
} keyed;

static int by_key(const void *a, const void *b, void *ctx)
{
    (*(int *)ctx)++; /* the context reaches every comparison */
    int x = ((const keyed *)a)->key, y = ((const keyed *)b)->key;
    return (x > y) - (x < y);
}

static void test_sort_is_stable_and_ordered(void **s)
{
    (void)s;
    unsigned seed = 12345;
    for (size_t n = 0; n <= 300; n = n < 20 ? n + 1 : n * 2 + 1) {
        keyed *v = calloc(n + 1, sizeof *v);
        assert_non_null(v);
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            v[i] = (keyed){.key = (int)(seed >> 16) % 7, .tag = (int)i}; /* few keys: many ties */
        }
        int calls = 0;
        comem_sort(v, n, sizeof *v, by_key, &calls);
        for (size_t i = 1; i < n; i++) {
            assert_true(v[i - 1].key <= v[i].key);
            if (v[i - 1].key == v[i].key)
                assert_true(v[i - 1].tag < v[i].tag); /* equal keys keep their order */
        }
        int seen[300 * 2 + 2] = {0};
        for (size_t i = 0; i < n; i++)
            seen[v[i].tag]++;
        for (size_t i = 0; i < n; i++)
            assert_int_equal(seen[i], 1); /* a permutation: nothing lost or doubled */
        if (n > 1)
            assert_true(calls > 0);
        free(v);
    }
}

static void test_status_strings(void **s)
{
    (void)s;
    assert_string_equal(comem_status_str(COMEM_OK), "ok");
    assert_string_equal(comem_status_str(COMEM_EBUSY), "busy");
    assert_string_equal(comem_status_str(COMEM_EVERSION), "another protocol version");
    assert_string_equal(comem_status_str(12345), "unknown status");
}

/* Sets (or with NULL removes) a variable of this process's environment, as getenv sees it. */
static void set_env(const char *name, const char *value)
{
#ifdef _WIN32
    _putenv_s(name, value ? value : "");
#else
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
#endif
}

/* COMEM_SPIN_US: microseconds from 0 to the bound; nothing else is taken, and the budget is read once. */
static void test_spin_budget(void **s)
{
    (void)s;
    int64_t ns = -1;
    assert_true(comem_spin_parse("0", &ns));
    assert_int_equal(ns, 0);
    assert_true(comem_spin_parse("50", &ns));
    assert_int_equal(ns, 50000);
    assert_true(comem_spin_parse("10000", &ns));
    assert_int_equal(ns, (int64_t)COMEM_SPIN_MAX_US * 1000);
    const char *bad[] = {"", "-1", "10001", "5us", " 5", "1e3", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ns = -1;
        assert_false(comem_spin_parse(bad[i], &ns));
        assert_int_equal(ns, -1); /* untouched */
    }
    assert_false(comem_spin_parse(NULL, &ns));
    set_env("COMEM_SPIN_US", "7");
    assert_int_equal(comem_spin_ns(), 7000);
    set_env("COMEM_SPIN_US", "900"); /* read once: a later change is not seen */
    assert_int_equal(comem_spin_ns(), 7000);
    set_env("COMEM_SPIN_US", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_saturation),   cmocka_unit_test(test_trunc_is_python_int),
        cmocka_unit_test(test_python_max_min_tie), cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_format_double), cmocka_unit_test(test_format_bytes),
        cmocka_unit_test(test_status_strings), cmocka_unit_test(test_sort_is_stable_and_ordered),
        cmocka_unit_test(test_spin_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
