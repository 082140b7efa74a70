/*
 * tests/unit/test_vectors.c - every conformance vector, bit-exact, through the C functions.
 *
 * Loads tests/vectors/{comfyui,comfy_env,derived}.json, runs each case through
 * vectors_adapt.c and compares each expected output exactly: numbers as
 * doubles with ==, strings, booleans, and arrays/objects element by element.
 */
#include "unit/cmocka_all.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vectors_adapt.h"

static bool same(json_object *want, json_object *got, char *why, size_t len)
{
    if (!got) {
        snprintf(why, len, "missing");
        return false;
    }
    json_type wt = json_object_get_type(want);
    if (wt == json_type_int || wt == json_type_double) {
        json_type gt = json_object_get_type(got);
        if (gt != json_type_int && gt != json_type_double) {
            snprintf(why, len, "not a number");
            return false;
        }
        double w = json_object_get_double(want), g = json_object_get_double(got);
        if (w != g) {
            snprintf(why, len, "want %.17g got %.17g", w, g);
            return false;
        }
        return true;
    }
    if (wt == json_type_boolean || wt == json_type_string) {
        if (json_object_get_type(got) != wt || strcmp(json_object_get_string(want), json_object_get_string(got)) != 0) {
            snprintf(why, len, "want %s got %s", json_object_get_string(want), json_object_get_string(got));
            return false;
        }
        return true;
    }
    if (wt == json_type_array) {
        if (!json_object_is_type(got, json_type_array) ||
            json_object_array_length(want) != json_object_array_length(got)) {
            snprintf(why, len, "want %s got %s", json_object_to_json_string(want), json_object_to_json_string(got));
            return false;
        }
        for (size_t i = 0; i < json_object_array_length(want); i++)
            if (!same(json_object_array_get_idx(want, i), json_object_array_get_idx(got, i), why, len))
                return false;
        return true;
    }
    if (wt == json_type_object) {
        json_object_object_foreach(want, k, v)
        {
            json_object *g = NULL;
            if (!json_object_object_get_ex(got, k, &g) || !same(v, g, why, len)) {
                size_t used = strlen(why);
                snprintf(why + used, len - used, " (at %s)", k);
                return false;
            }
        }
        return true;
    }
    snprintf(why, len, "unsupported expected type");
    return false;
}

static size_t g_total;

static void run_file(const char *name, size_t min_cases)
{
    const char *src = getenv("COMEM_SOURCE_DIR");
    assert_non_null(src);
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/vectors/%s", src, name);
    json_object *cases = json_object_from_file(path);
    if (!cases)
        fail_msg("cannot read %s", path);
    size_t n = json_object_array_length(cases), failures = 0;
    assert_true(n >= min_cases);
    for (size_t i = 0; i < n; i++) {
        json_object *c = json_object_array_get_idx(cases, i), *id, *rule, *input, *expect;
        assert_true(json_object_object_get_ex(c, "id", &id));
        assert_true(json_object_object_get_ex(c, "rule", &rule));
        assert_true(json_object_object_get_ex(c, "input", &input));
        assert_true(json_object_object_get_ex(c, "expect", &expect));
        assert_true(json_object_object_length(expect) > 0);
        json_object *got = vector_run(json_object_get_string(rule), input);
        char why[512] = "";
        if (!got) {
            print_error("%s: unknown rule %s\n", json_object_get_string(id), json_object_get_string(rule));
            failures++;
            continue;
        }
        if (!same(expect, got, why, sizeof why)) {
            print_error("%s (%s): %s\n", json_object_get_string(id), json_object_get_string(rule), why);
            failures++;
        }
        json_object_put(got);
    }
    print_message("%s: %zu cases, %zu failures\n", name, n, failures);
    g_total += n;
    json_object_put(cases);
    assert_int_equal(failures, 0);
}

static void test_comfyui_vectors(void **state)
{
    (void)state;
    run_file("comfyui.json", 50);
}
static void test_comfy_env_vectors(void **state)
{
    (void)state;
    run_file("comfy_env.json", 50);
}
static void test_derived_vectors(void **state)
{
    (void)state;
    run_file("derived.json", 200);
}
static void test_at_least_80(void **state)
{
    (void)state;
    assert_true(g_total >= 80);
}

/* The checker itself must be able to fail: a wrong expectation is caught. */
static void test_checker_detects_mismatch(void **state)
{
    (void)state;
    json_object *in = json_tokener_parse("{\"weights\": 6442450944, \"memory-required\": 1073741824}");
    json_object *bad = json_tokener_parse("{\"free_target\": 8579868262.4}"); /* not the exact double */
    json_object *got = vector_run("admission", in);
    char why[256] = "";
    assert_false(same(bad, got, why, sizeof why));
    json_object_put(in);
    json_object_put(bad);
    json_object_put(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_comfyui_vectors),
        cmocka_unit_test(test_comfy_env_vectors),
        cmocka_unit_test(test_derived_vectors),
        cmocka_unit_test(test_at_least_80),
        cmocka_unit_test(test_checker_detects_mismatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
