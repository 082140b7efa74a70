/*
 * tests/unit/test_sim_shared.c - the simulated card between processes, the same assertions on
 * Linux (a private file, a robust mutex, pidfds) and on Windows (a named section, a named mutex,
 * process handles; under wine in CI): what the card needs of each system (probe/sim_store.h,
 * os/xlock.h, os/proc.h). tests/unit/test_sim.c tests the card itself, on Linux.
 *
 * A child (this test run again) opens the card by the same spec, allocates a gigabyte and says so:
 * the parent sees its context and gigabyte on the card, under its pid. Ended, it holds nothing:
 * the parent's next reading has every byte back. A child ended while it holds the card's lock hands
 * the lock on: the parent's next allocation gets it, and the card counts one recovery.
 */
#include "unit/cmocka_all.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#include <windows.h>
#else
#include <unistd.h>
#endif

#include "comem/common.h"
#include "probe/device.h"
#include "probe/sim.h"
#include "unit/endpoint.h"

#define GIB ((int64_t)1 << 30)

static char g_spec[PATH_MAX + 64]; /* a card of this test process's own */
static char g_note[480];           /* where a child says it has done its part */

static comem_sim *open_card(void)
{
    comem_sim_spec spec;
    char err[160];
    if (comem_sim_spec_parse(g_spec, &spec, err, sizeof err) != COMEM_OK)
        return NULL;
    comem_sim *sim = NULL;
    return comem_sim_open(&spec, &sim) == COMEM_OK ? sim : NULL;
}

/*
 * The child's hook, given "WHAT|SPEC|NOTE": opens the card of SPEC, allocates a gigabyte and, for
 * "lock", takes the card's lock; then writes NOTE. It sleeps after, holding what it took.
 */
static void child_part(const char *arg)
{
    char what[16];
    const char *a = strchr(arg, '|'), *b = a ? strchr(a + 1, '|') : NULL;
    if (!b || (size_t)(a - arg) >= sizeof what || (size_t)(b - a - 1) >= sizeof g_spec)
        exit(6);
    snprintf(what, sizeof what, "%.*s", (int)(a - arg), arg);
    snprintf(g_spec, sizeof g_spec, "%.*s", (int)(b - a - 1), a + 1);
    snprintf(g_note, sizeof g_note, "%s", b + 1);
    comem_sim *sim = open_card();
    if (!sim)
        exit(2);
    if (comem_sim_alloc(sim, 0, GIB) != COMEM_OK)
        exit(3);
    if (strcmp(what, "lock") == 0 && comem_sim_debug_hold_lock(sim) != COMEM_OK)
        exit(4);
    FILE *f = fopen(g_note, "w");
    if (!f)
        exit(5);
    fclose(f);
}

/* Starts a child doing `what` and waits until it has done it. */
static int64_t start_part(const char *what, void **handle)
{
    remove(g_note);
    static char arg[sizeof g_spec + sizeof g_note + 32];
    snprintf(arg, sizeof arg, "%s|%s|%s", what, g_spec, g_note);
    int64_t pid = start_child_with(120000, arg, handle);
    assert_true(wait_for_file(g_note, 30000));
    return pid;
}

static int64_t used_by_others(comem_sim *sim)
{
    comem_device_reading r;
    assert_int_equal(comem_sim_read(sim, 0, &r), COMEM_OK);
    return r.used - r.reserved;
}

static void test_a_childs_bytes_show_and_go_with_it(void **s)
{
    (void)s;
    comem_sim *sim = open_card();
    assert_non_null(sim);
    assert_int_equal(used_by_others(sim), 0);
    void *handle;
    int64_t child = start_part("alloc", &handle);
    int64_t ctx = -1, alloc = -1;
    assert_int_equal(comem_sim_usage(sim, 0, (int32_t)child, &ctx, &alloc), COMEM_OK);
    assert_int_equal(alloc, GIB);
    assert_int_equal(ctx, comem_sim_settings(sim)->context_cost);
    assert_int_equal(used_by_others(sim), GIB + ctx);
    end_child(child, handle);
    wait_child(child, handle); /* it has ended (and, on Linux, is reaped) */
    assert_int_equal(used_by_others(sim), 0); /* its context and gigabyte are back */
    comem_sim_close(sim);
}

static void test_a_child_ended_holding_the_lock_hands_it_on(void **s)
{
    (void)s;
    comem_sim *sim = open_card();
    assert_non_null(sim);
    uint64_t before = comem_sim_recoveries(sim);
    void *handle;
    int64_t child = start_part("lock", &handle);
    end_child(child, handle);
    wait_child(child, handle);
    assert_int_equal(comem_sim_alloc(sim, 0, GIB), COMEM_OK); /* waits for the lock, and gets it */
    assert_int_equal(comem_sim_recoveries(sim), before + 1);
    assert_int_equal(used_by_others(sim), GIB + comem_sim_settings(sim)->context_cost); /* ours alone */
    assert_int_equal(comem_sim_free(sim, 0, GIB), COMEM_OK);
    comem_sim_close(sim);
}

static int setup(void **s)
{
    (void)s;
    if (endpoint_make("simshared") != 0)
        return -1;
    char card[sizeof g_spec - 16];
    endpoint_file(g_note, sizeof g_note, "note");
    endpoint_file(card, sizeof card, "card");
    snprintf(g_spec, sizeof g_spec, "sim:4GiB:path=%s", card);
    return 0;
}

static int teardown(void **s)
{
    remove(g_note);
    return endpoint_teardown(s);
}

int main(int argc, char **argv)
{
    if (child_main(argc, argv, child_part))
        return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_childs_bytes_show_and_go_with_it),
        cmocka_unit_test(test_a_child_ended_holding_the_lock_hands_it_on),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
