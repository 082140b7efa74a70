/*
 * tests/unit/test_pager_client.c - the pager as a holder in the ledger, in
 * one process: a coordinator started on a thread (comem_coord_start) over a
 * simulated card in a temporary directory, the pager's client, and a second
 * client (another session) that asks for memory.
 *
 * Checked through the coordinator's own status: the holder's kind and
 * answers, one paged entry per VBAR (also for VBARs created after attach and
 * none for destroyed ones), residency reported after faults and evictions;
 * a pressure ask from the other session answered by evicting lowest priority
 * first within watermark limits, with the receipt's bytes; detach removes
 * the holder. The release semantics (sized within limits, idle everything
 * unpinned) are also checked directly, without a client.
 */
#include "unit/cmocka_all.h"
#include "unit/tmpdir.h"

#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "comem/pager.h"
#include "pager/pager_seam.h"

#define MIB COMEM_MIB
#define PS (64 * MIB)

static char g_dir[64], g_sock[100], g_spec[320];

static int setup(void **s)
{
    (void)s;
    signal(SIGPIPE, SIG_IGN);
    assert_int_equal(test_tmpdir_make(g_dir, sizeof g_dir, "pager-client"), 0);
    snprintf(g_sock, sizeof g_sock, "%s/s", g_dir);
    snprintf(g_spec, sizeof g_spec, "sim:4GiB:reserved=0:ctx=0:path=%s/card", g_dir);
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    return test_tmpdir_remove(g_dir);
}

static void load(comem_vbar *v, int64_t first, int64_t count)
{
    uint32_t sig[4];
    for (int64_t i = first; i < first + count; i++) {
        assert_int_equal(comem_vbar_fault(v, i * PS, PS, sig, 4), COMEM_VBAR_RESIDENT);
        assert_int_equal(comem_vbar_unpin(v, i * PS, PS), COMEM_OK);
    }
}

/* ---- the coordinator's view of holder "weights" ---- */

typedef struct view {
    bool found;
    char kind[32];
    int answers; /* bits: 1 release, 2 idle, 4 while-busy */
    int entries;
    char names[8][32];
    int64_t size[8], resident[8];
    bool paged[8];
    int64_t total;
} view;

static json_object *get(json_object *o, const char *k)
{
    json_object *x = NULL;
    return o && json_object_object_get_ex(o, k, &x) ? x : NULL;
}

static view look(comem_client *c)
{
    view w;
    memset(&w, 0, sizeof w);
    char *text = NULL;
    assert_int_equal(comem_status_json(c, &text), COMEM_OK);
    json_object *root = json_tokener_parse(text);
    comem_free(text);
    assert_non_null(root);
    json_object *ps = get(json_object_array_get_idx(get(root, "devices"), 0), "processes");
    for (size_t i = 0; ps && i < json_object_array_length(ps); i++) {
        json_object *hs = get(json_object_array_get_idx(ps, i), "holders");
        for (size_t j = 0; hs && j < json_object_array_length(hs); j++) {
            json_object *h = json_object_array_get_idx(hs, j);
            if (strcmp(json_object_get_string(get(h, "name")), "weights") != 0)
                continue;
            w.found = true;
            snprintf(w.kind, sizeof w.kind, "%s", json_object_get_string(get(h, "kind")));
            json_object *an = get(h, "answers");
            for (size_t k = 0; an && k < json_object_array_length(an); k++) {
                const char *a = json_object_get_string(json_object_array_get_idx(an, k));
                w.answers |= !strcmp(a, "release") ? 1 : !strcmp(a, "idle") ? 2 : !strcmp(a, "while-busy") ? 4 : 0;
            }
            json_object *es = get(h, "entries");
            for (size_t k = 0; es && k < json_object_array_length(es) && w.entries < 8; k++) {
                json_object *e = json_object_array_get_idx(es, k);
                int n = w.entries++;
                snprintf(w.names[n], sizeof w.names[n], "%s", json_object_get_string(get(e, "name")));
                w.size[n] = json_object_get_int64(get(e, "size"));
                w.resident[n] = json_object_get_int64(get(e, "resident"));
                w.paged[n] = get(e, "paged") && json_object_get_boolean(get(e, "paged"));
                w.total += w.resident[n];
            }
        }
    }
    json_object_put(root);
    return w;
}

static int64_t resident_of(const view *w, const char *name)
{
    for (int i = 0; i < w->entries; i++)
        if (!strcmp(w->names[i], name))
            return w->resident[i];
    return -1;
}

/* ---- tests ---- */

static void test_attached_holder(void **s)
{
    (void)s;
    comem_coord *coord = NULL;
    assert_int_equal(comem_coord_start(g_sock, g_spec, &coord), COMEM_OK);
    comem_client *c = NULL, *other = NULL;
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_WORKER, "pager", -1, COMEM_OPEN_NO_LOCAL, &c), COMEM_OK);
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_WORKER, "other", -1, COMEM_OPEN_NO_LOCAL, &other),
                     COMEM_OK);
    comem_client_set_timeout(c, 5000);
    comem_client_set_timeout(other, 5000);

    comem_pager *p = NULL;
    assert_int_equal(comem_pager_open(COMEM_PAGER_SIM, 0, g_spec, &p), COMEM_OK);
    comem_vbar *a = NULL, *b = NULL, *d = NULL;
    assert_int_equal(comem_vbar_create(p, 8 * PS, PS, &a), COMEM_OK); /* vbar-1, before attaching */
    load(a, 0, 3);
    assert_false(look(c).found);
    assert_int_equal(comem_pager_holder(p), 0);

    assert_int_equal(comem_pager_attach(p, c, "weights"), COMEM_OK);
    assert_int_equal(comem_pager_attach(p, c, "weights"), COMEM_EEXIST);
    assert_true(comem_pager_holder(p) != 0);
    view w = look(c);
    assert_true(w.found);
    assert_string_equal(w.kind, "pager");
    assert_int_equal(w.answers, 1 | 2 | 4);
    assert_int_equal(w.entries, 1);
    assert_string_equal(w.names[0], "vbar-1");
    assert_int_equal(w.size[0], 8 * PS);
    assert_int_equal(w.resident[0], 3 * PS);
    assert_true(w.paged[0]);

    /* Created after attach: registered; faults are reported. */
    assert_int_equal(comem_vbar_create(p, 4 * PS, PS, &b), COMEM_OK); /* vbar-2 */
    assert_int_equal(comem_vbar_create(p, 2 * PS, PS, &d), COMEM_OK); /* vbar-3 */
    w = look(c);
    assert_int_equal(w.entries, 3);
    assert_int_equal(resident_of(&w, "vbar-2"), 0);
    load(b, 0, 4);
    load(a, 3, 2);
    w = look(c);
    assert_int_equal(resident_of(&w, "vbar-1"), 5 * PS);
    assert_int_equal(resident_of(&w, "vbar-2"), 4 * PS);
    /* Destroyed: gone from the ledger. */
    comem_vbar_destroy(d);
    w = look(c);
    assert_int_equal(w.entries, 2);
    assert_int_equal(resident_of(&w, "vbar-3"), -1);
    /* Evictions are reported too. */
    int64_t freed = 0;
    assert_int_equal(comem_pager_free_memory(p, PS, &freed), COMEM_OK);
    w = look(c);
    assert_int_equal(resident_of(&w, "vbar-1"), 4 * PS);

    /*
     * Another session asks for 3 pages' worth: answered on this client's
     * service thread, lowest priority first (a is the oldest), within a's
     * limit of 2 pages, so the rest comes from b.
     */
    assert_int_equal(comem_vbar_set_watermark_limit(a, 2 * PS), COMEM_OK);
    assert_int_equal(comem_holder_busy(c, comem_pager_holder(p), 1, "computing"), COMEM_OK);
    freed = 0;
    assert_int_equal(comem_pressure(other, 0, 3 * PS, 5000, &freed), COMEM_OK);
    assert_int_equal(freed, 3 * PS);
    assert_int_equal(comem_pager_stat(p, COMEM_PAGER_STAT_RELEASE_ASKS), 1);
    assert_int_equal(comem_vbar_loaded_size(a), 2 * PS);
    assert_int_equal(comem_vbar_loaded_size(b), 3 * PS);
    w = look(c);
    assert_int_equal(resident_of(&w, "vbar-1"), 2 * PS);
    assert_int_equal(resident_of(&w, "vbar-2"), 3 * PS);
    assert_int_equal(comem_pager_check(p), COMEM_OK);

    /* Detached: the holder and its entries are gone; the pager works on alone. */
    assert_int_equal(comem_pager_detach(p), COMEM_OK);
    assert_int_equal(comem_pager_detach(p), COMEM_ENOENT);
    assert_false(look(c).found);
    assert_int_equal(comem_pager_holder(p), 0);
    assert_int_equal(comem_vbar_prioritize(b), COMEM_OK);
    load(b, 3, 1);
    /* Attached again, to the same client: entries come back with what is resident. */
    assert_int_equal(comem_pager_attach(p, c, "weights"), COMEM_OK);
    w = look(c);
    assert_int_equal(w.entries, 2);
    assert_int_equal(w.total, 6 * PS);
    comem_pager_close(p); /* detaches */
    assert_false(look(c).found);

    comem_client_close(other);
    comem_client_close(c);
    comem_coord_stop(coord);
}

static void test_release_semantics(void **s)
{
    (void)s;
    comem_pager *p = NULL;
    assert_int_equal(comem_pager_open(COMEM_PAGER_SIM, 0, g_spec, &p), COMEM_OK);
    comem_vbar *a = NULL, *b = NULL;
    assert_int_equal(comem_vbar_create(p, 4 * PS, PS, &a), COMEM_OK);
    assert_int_equal(comem_vbar_create(p, 4 * PS, PS, &b), COMEM_OK);
    load(a, 0, 4);
    load(b, 0, 4);
    uint32_t sig[4];
    assert_int_equal(comem_vbar_fault(b, 0, PS, sig, 4), COMEM_VBAR_RESIDENT); /* pinned */
    assert_int_equal(comem_vbar_set_watermark_limit(a, 2 * PS), COMEM_OK);
    /* Sized: lowest first, within limits. */
    assert_int_equal(comem_pager_answer_release(p, COMEM_RELEASE_BYTES, PS), PS);
    assert_int_equal(comem_vbar_loaded_size(a), 3 * PS);
    assert_int_equal(comem_pager_answer_release(p, COMEM_RELEASE_BYTES, 100 * PS), 4 * PS);
    assert_int_equal(comem_vbar_loaded_size(a), 2 * PS); /* the limit held */
    assert_int_equal(comem_vbar_loaded_size(b), PS);     /* the pin held */
    assert_int_equal(comem_pager_answer_release(p, COMEM_RELEASE_PINS, PS), 0);
    /* Idle: everything unpinned, limits included; pins still hold. */
    assert_int_equal(comem_pager_answer_release(p, COMEM_RELEASE_IDLE, 0), 2 * PS);
    assert_int_equal(comem_vbar_loaded_size(a), 0);
    assert_int_equal(comem_vbar_loaded_size(b), PS);
    assert_int_equal(comem_vbar_unpin(b, 0, PS), COMEM_OK);
    assert_int_equal(comem_pager_usage(p), 0);
    assert_int_equal(comem_pager_check(p), COMEM_OK);
    comem_pager_close(p);
}

/* ---- the kept pool in the ledger ---- */

static void test_kept_pool_is_in_the_ledger_and_asked_first(void **s)
{
    (void)s;
    comem_coord *coord = NULL;
    assert_int_equal(comem_coord_start(g_sock, g_spec, &coord), COMEM_OK);
    comem_client *c = NULL, *other = NULL;
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_WORKER, "pager", -1, COMEM_OPEN_NO_LOCAL, &c), COMEM_OK);
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_WORKER, "other", -1, COMEM_OPEN_NO_LOCAL, &other),
                     COMEM_OK);
    comem_client_set_timeout(c, 5000);
    comem_client_set_timeout(other, 5000);
    comem_pager *p = NULL;
    assert_int_equal(comem_pager_open(COMEM_PAGER_SIM, 0, g_spec, &p), COMEM_OK);
    assert_int_equal(comem_pager_set_keep(p, 4 * PS), COMEM_OK);
    comem_vbar *a = NULL;
    assert_int_equal(comem_vbar_create(p, 8 * PS, PS, &a), COMEM_OK);
    load(a, 0, 6);
    assert_int_equal(comem_pager_attach(p, c, "weights"), COMEM_OK);
    assert_int_equal(comem_pager_set_keep(p, 2 * PS), COMEM_EBUSY); /* the entry was sized at attach */
    assert_int_equal(comem_pager_set_keep(p, 4 * PS), COMEM_OK);    /* no change: fine */
    view w = look(c);
    assert_int_equal(w.entries, 2);
    assert_int_equal(resident_of(&w, "kept"), 0);
    /* Three pages evicted for the pager's own use: kept, and the ledger says so. */
    int64_t freed = 0;
    assert_int_equal(comem_pager_free_memory(p, 3 * PS, &freed), COMEM_OK);
    w = look(c);
    assert_int_equal(resident_of(&w, "kept"), 3 * PS);
    assert_int_equal(resident_of(&w, "vbar-1"), 3 * PS);
    assert_int_equal(w.total, 6 * PS); /* what the card charges this process */
    /* Another session's ask for two pages takes them from the pool: nothing loaded is lost. */
    assert_int_equal(comem_pressure(other, 0, 2 * PS, 5000, &freed), COMEM_OK);
    assert_int_equal(freed, 2 * PS);
    assert_int_equal(comem_vbar_loaded_size(a), 3 * PS);
    assert_int_equal(comem_pager_kept(p), PS);
    w = look(c);
    assert_int_equal(resident_of(&w, "kept"), PS);
    assert_int_equal(resident_of(&w, "vbar-1"), 3 * PS);
    assert_int_equal(comem_pager_check(p), COMEM_OK);
    /* Detached: the pool's entry goes with the holder. */
    assert_int_equal(comem_pager_detach(p), COMEM_OK);
    assert_false(look(c).found);
    comem_pager_close(p);
    comem_client_close(other);
    comem_client_close(c);
    comem_coord_stop(coord);
}

/* ---- an idle ask to a pager that has just faulted ---- */

static _Atomic int64_t g_clock_ms = 100000; /* the pager's clock: moves only when the test moves it */

static int64_t fake_clock(void *user)
{
    (void)user;
    return g_clock_ms;
}

static int64_t stat_when(comem_pager *p, int which, int64_t at_least)
{
    int64_t v = comem_pager_stat(p, which);
    for (int i = 0; v < at_least && i < 3000; i++) { /* a hang guard only: 60 s */
        usleep(20 * 1000);
        v = comem_pager_stat(p, which);
    }
    return v;
}

/*
 * The pager's own word against stale news: with its clock held still, every
 * fault was "just now", so however many idle periods the coordinator counts
 * (its clock runs; the pager's touch went out once and its interval never
 * passes), each idle ask is declined and nothing is evicted. Once the clock
 * passes one touch interval after the last fault, the next idle ask empties it.
 */
static void test_idle_ask_declined_while_in_use(void **s)
{
    (void)s;
    setenv("COMEM_IDLE_SECONDS", "1", 1);
    comem_coord *coord = NULL;
    int rc = comem_coord_start(g_sock, g_spec, &coord);
    unsetenv("COMEM_IDLE_SECONDS");
    assert_int_equal(rc, COMEM_OK);
    comem_client *c = NULL;
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_WORKER, "pager", -1, COMEM_OPEN_NO_LOCAL, &c), COMEM_OK);
    comem_client_set_timeout(c, 5000);
    comem_pager *p = NULL;
    assert_int_equal(comem_pager_open(COMEM_PAGER_SIM, 0, g_spec, &p), COMEM_OK);
    comem_pager_set_clock(p, fake_clock, NULL);
    assert_int_equal(comem_pager_attach(p, c, "weights"), COMEM_OK);
    comem_vbar *v = NULL;
    assert_int_equal(comem_vbar_create(p, 4 * PS, PS, &v), COMEM_OK);
    load(v, 0, 4);
    assert_int_equal(comem_pager_stat(p, COMEM_PAGER_STAT_TOUCHES), 1); /* the first fault; then none */

    assert_true(stat_when(p, COMEM_PAGER_STAT_IDLE_DECLINED, 2) >= 2); /* two idle periods, two asks */
    assert_int_equal(comem_pager_usage(p), 4 * PS);
    assert_int_equal(comem_pager_stat(p, COMEM_PAGER_STAT_EVICTIONS), 0);
    assert_int_equal(comem_pager_stat(p, COMEM_PAGER_STAT_TOUCHES), 1);
    view w = look(c);
    assert_int_equal(w.total, 4 * PS);

    g_clock_ms += COMEM_PAGER_TOUCH_MS; /* a touch interval without a fault */
    int64_t declined = comem_pager_stat(p, COMEM_PAGER_STAT_IDLE_DECLINED);
    int64_t asks = comem_pager_stat(p, COMEM_PAGER_STAT_RELEASE_ASKS);
    assert_true(stat_when(p, COMEM_PAGER_STAT_EVICTIONS, 4) == 4);
    assert_int_equal(comem_pager_usage(p), 0);
    assert_true(comem_pager_stat(p, COMEM_PAGER_STAT_RELEASE_ASKS) > asks);
    /* An ask is settled before the next is planned, and the clock has not moved back: no decline since. */
    assert_int_equal(comem_pager_stat(p, COMEM_PAGER_STAT_IDLE_DECLINED), declined);
    w = look(c);
    for (int i = 0; i < 3000 && w.total != 0; i++) { /* the receipt's residency reaches the ledger */
        usleep(20 * 1000);
        w = look(c);
    }
    assert_int_equal(w.total, 0);
    assert_int_equal(comem_pager_check(p), COMEM_OK);
    comem_pager_close(p);
    comem_client_close(c);
    comem_coord_stop(coord);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attached_holder),
        cmocka_unit_test(test_release_semantics),
        cmocka_unit_test(test_kept_pool_is_in_the_ledger_and_asked_first),
        cmocka_unit_test(test_idle_ask_declined_while_in_use),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
