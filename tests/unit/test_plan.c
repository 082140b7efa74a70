/*
 * tests/unit/test_plan.c - whom an admission asks: the ladder over the ledger's
 * order, with generic holders (a release callback, no entries, reported bytes)
 * standing in it as fully loaded entries of their bytes.
 */
#include "unit/cmocka_all.h"

#include <string.h>

#include "base/bytes.h"
#include "comem/common.h"
#include "coord/plan.h"
#include "ledger/ledger.h"
#include "wire/wire.h" /* the roles, capabilities and holder kinds the coordinator passes through */

#define GIB COMEM_GIB
#define MIB COMEM_MIB

static comem_ledger g_l;

static int setup(void **s)
{
    (void)s;
    ledger_device d[1] = {{.index = 0, .capacity = 24 * GIB}};
    assert_int_equal(comem_ledger_init(&g_l, d, 1, 16 * GIB), 0);
    comem_ledger_set_checking(&g_l, true);
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    assert_int_equal(g_l.violations, 0);
    comem_ledger_fini(&g_l);
    return 0;
}

static uint64_t session(const char *name)
{
    uint64_t id;
    assert_int_equal(comem_ledger_session_add(&g_l, 100, 0, COMEM_ROLE_WORKER, 0, COMEM_CAP_RELEASE, name, 0, &id), 0);
    return id;
}

static uint64_t holder(uint64_t s, uint8_t kind, uint32_t flags)
{
    uint64_t id;
    assert_int_equal(comem_ledger_holder_add(&g_l, s, 0, kind, flags, "h", 0, &id), 0);
    return id;
}

/* A holder's census of its own bytes (overhead), with a newer holder sequence. */
static void report(uint64_t s, uint64_t h, int64_t overhead)
{
    static uint64_t seq = 1;
    assert_int_equal(comem_ledger_census(&g_l, s, h, seq++, -1, overhead, NULL, 0, 0, NULL), 0);
}

static size_t plan(uint64_t requester, double need, double avail, coord_planned *out)
{
    coord_plan_in in = {.device = 0, .requester = requester, .need = need, .avail = avail, .now_ns = 1};
    return coord_plan_release(&g_l, &in, out, 16);
}

static void test_generic_holder_is_asked_for_its_bytes(void **st)
{
    (void)st;
    uint64_t req = session("host"), w = session("w");
    uint64_t raw = holder(w, COMEM_HOLDER_RAW, COMEM_CAP_RELEASE);
    coord_planned out[16];
    assert_int_equal(plan(req, 16.0 * GIB, 6.0 * GIB, out), 0); /* no bytes reported: nothing to ask */
    report(w, raw, 10 * GIB);
    int64_t bytes = 0;
    assert_true(coord_generic_holder(&g_l, raw, comem_ledger_holder(&g_l, raw), &bytes));
    assert_int_equal(bytes, 10 * GIB);
    assert_int_equal(plan(req, 16.0 * GIB, 6.0 * GIB, out), 1);
    assert_int_equal(out[0].holder, raw);
    assert_int_equal(out[0].entry, 0);
    assert_int_equal(out[0].bytes, 10 * GIB);
    assert_int_equal(plan(req, 8.0 * GIB, 6.0 * GIB, out), 1); /* a partial ask: the shortfall */
    assert_int_equal(out[0].bytes, 2 * GIB);
    /* Never the requester's own, nor one without a release callback. */
    assert_int_equal(plan(w, 16.0 * GIB, 6.0 * GIB, out), 0);
    uint64_t deaf = holder(w, COMEM_HOLDER_RAW, 0);
    report(w, deaf, GIB);
    assert_false(coord_generic_holder(&g_l, deaf, comem_ledger_holder(&g_l, deaf), &bytes));
    /* A holder with entries is asked for them, not for its overhead. */
    uint64_t models = holder(w, COMEM_HOLDER_MODELS, COMEM_CAP_RELEASE), e;
    assert_int_equal(comem_ledger_entry_add(&g_l, w, models, "m", GIB, GIB, false, 0, &e), 0);
    report(w, models, 3 * GIB);
    assert_false(coord_generic_holder(&g_l, models, comem_ledger_holder(&g_l, models), &bytes));
}

/*
 * Its place in ComfyUI's order: as a fully loaded entry of its bytes with no
 * references and the oldest load, so after partly offloaded entries, before
 * entries holding references, by size among the rest.
 */
static void test_generic_holder_takes_its_place_in_the_order(void **st)
{
    (void)st;
    uint64_t req = session("host"), w = session("w");
    uint64_t models = holder(w, COMEM_HOLDER_MODELS, COMEM_CAP_RELEASE);
    uint64_t raw = holder(w, COMEM_HOLDER_RAW, COMEM_CAP_RELEASE);
    uint64_t part, small, refd, big;
    assert_int_equal(comem_ledger_entry_add(&g_l, w, models, "part", 4 * GIB, 3 * GIB, false, 1, &part), 0);
    assert_int_equal(comem_ledger_entry_add(&g_l, w, models, "small", GIB, GIB, false, 2, &small), 0);
    assert_int_equal(comem_ledger_entry_add(&g_l, w, models, "refd", 512 * MIB, 512 * MIB, false, 3, &refd), 0);
    assert_int_equal(comem_ledger_entry_set_refs(&g_l, w, refd, 2), 0);
    assert_int_equal(comem_ledger_entry_add(&g_l, w, models, "big", 6 * GIB, 6 * GIB, false, 4, &big), 0);
    report(w, raw, 2 * GIB);
    coord_planned out[16];
    /* Enough need to walk everything: part (offloaded), small (1 GiB), raw (2 GiB), big (6 GiB), refd (refs). */
    size_t n = plan(req, 100.0 * GIB, 0, out);
    uint64_t want_entry[5] = {part, small, 0, big, refd};
    assert_int_equal(n, 5);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(out[i].entry, want_entry[i]);
        assert_int_equal(out[i].holder, want_entry[i] ? models : raw);
    }
    /* Equal size with an entry: the entry (loaded more recently) goes first. */
    report(w, raw, GIB);
    n = plan(req, 100.0 * GIB, 0, out);
    assert_int_equal(n, 5);
    assert_int_equal(out[1].entry, small);
    assert_int_equal(out[2].entry, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_generic_holder_is_asked_for_its_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_generic_holder_takes_its_place_in_the_order, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
