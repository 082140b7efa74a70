/*
 * tests/integration/test_embedded.c - every thread of the coordinator and the client at once.
 *
 * One process, so ThreadSanitizer sees all of it: an embedded coordinator
 * (its loop thread), four clients (each with its service and callback
 * threads), eight caller threads admitting, reporting and dropping models
 * concurrently while release asks run their callbacks, and a thread reading
 * the shared-memory view all along. Checked: no call fails unexpectedly, the
 * view always reads sane figures, the ledger checks after every mutation find
 * nothing, and everything is released at the end.
 */
#include "unit/cmocka_all.h"
#include "unit/tmpdir.h"

#include <json-c/json.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "probe/sim.h"

#define MIB COMEM_MIB
#define GIB COMEM_GIB
#define CLIENTS 4
#define CALLERS_PER_CLIENT 2
#define SECONDS 3

static char g_dir[128], g_sock[256], g_spec[320];
static comem_sim *g_sim; /* this process's handle: every client here allocates through it */
static atomic_int g_errors, g_granted, g_asks, g_view_reads;
static atomic_bool g_stop;

/* Count a failure and say where it happened, so a rare one can be diagnosed from the log. */
#define FAIL_AT(what)                                                                     \
    do {                                                                                  \
        atomic_fetch_add(&g_errors, 1);                                                   \
        fprintf(stderr, "test_embedded: %s failed (line %d)\n", (what), __LINE__);       \
    } while (0)

typedef struct model {
    uint64_t entry;
    int64_t resident;
} model;

typedef struct client_state {
    pthread_mutex_t lock;
    comem_client *c;
    uint64_t holder;
    model m[8];
    int n;
} client_state;

static int on_release(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                      const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder;
    (void)kind;
    (void)entries;
    (void)amounts;
    (void)n;
    client_state *cs = user;
    atomic_fetch_add(&g_asks, 1);
    *freed = 0;
    pthread_mutex_lock(&cs->lock); /* the callers hold this lock while they wait on replies */
    for (int i = 0; i < cs->n && *freed < bytes; i++) {
        int64_t give = comem_min(cs->m[i].resident, bytes - *freed);
        if (give <= 0)
            continue;
        comem_sim_free(g_sim, 0, give);
        cs->m[i].resident -= give;
        *freed += give;
        int src = comem_entry_set_resident(cs->c, cs->m[i].entry, cs->m[i].resident);
        if (src != COMEM_OK) {
            fprintf(stderr, "set_resident: %s\n", comem_status_str(src));
            FAIL_AT("entry_set_resident in release callback");
        }
    }
    pthread_mutex_unlock(&cs->lock);
    return COMEM_OK;
}

static void *caller(void *arg)
{
    client_state *cs = arg;
    unsigned seed = (unsigned)(uintptr_t)arg;
    while (!atomic_load(&g_stop)) {
        seed = seed * 1103515245u + 12345u;
        int64_t size = (int64_t)((seed >> 8) % 8 + 1) * 128 * MIB;
        pthread_mutex_lock(&cs->lock);
        bool load = cs->n < 8 && (seed >> 20) % 2;
        pthread_mutex_unlock(&cs->lock);
        if (load) {
            uint64_t grant;
            int rc = comem_admit(cs->c, 0, cs->holder, size, 0, 0, NULL, 0, 10000, &grant, NULL);
            /* entry_add waits for its reply while this lock is held; the release callback
               waiting for the same lock must not stop that reply from arriving */
            pthread_mutex_lock(&cs->lock);
            if (rc == COMEM_OK && cs->n < 8 && comem_sim_alloc(g_sim, 0, size) == COMEM_OK) {
                model *m = &cs->m[cs->n++];
                m->resident = size;
                int arc = comem_entry_add(cs->c, cs->holder, "m", size, 0, 0, &m->entry);
                int grc = arc == COMEM_OK ? comem_grant_done(cs->c, grant, m->entry, size) : 0;
                if (arc != COMEM_OK || grc != COMEM_OK) {
                    fprintf(stderr, "entry_add %s grant_done %s\n", comem_status_str(arc), comem_status_str(grc));
                    FAIL_AT("entry_add or grant_done");
                }
                atomic_fetch_add(&g_granted, 1);
            } else if (rc == COMEM_OK) {
                comem_grant_done(cs->c, grant, 0, 0); /* raced: another caller filled the slots */
            } else if (rc != COMEM_ENOSPC) {
                fprintf(stderr, "test_embedded: admit returned %s\n", comem_status_str(rc));
                FAIL_AT("admit");
            }
            pthread_mutex_unlock(&cs->lock);
        } else {
            pthread_mutex_lock(&cs->lock);
            if (cs->n > 0) {
                model *m = &cs->m[--cs->n];
                comem_sim_free(g_sim, 0, m->resident);
                if (comem_entry_remove(cs->c, m->entry) != COMEM_OK)
                    FAIL_AT("entry_remove");
            }
            pthread_mutex_unlock(&cs->lock);
        }
        usleep(1000);
    }
    return NULL;
}

static void *view_reader(void *arg)
{
    (void)arg;
    comem_view *v = NULL;
    if (comem_view_open(g_sock, &v) != COMEM_OK) {
        FAIL_AT("view_open");
        return NULL;
    }
    while (!atomic_load(&g_stop)) {
        int64_t cap = 0, free_b = 0, reserve = 0, reclaimable = 0;
        int rc = comem_view_read(v, 0, &cap, &free_b, &reserve, &reclaimable);
        if (rc != COMEM_OK || cap != 6 * GIB || free_b < 0 || free_b > cap || reserve < 0 || reclaimable < 0) {
            fprintf(stderr, "test_embedded: view_read %s cap=%lld free=%lld reserve=%lld reclaimable=%lld\n",
                    comem_status_str(rc), (long long)cap, (long long)free_b, (long long)reserve,
                    (long long)reclaimable);
            FAIL_AT("view_read");
        }
        atomic_fetch_add(&g_view_reads, 1);
        usleep(100);
    }
    int64_t dummy;
    if (comem_view_read(v, 5, &dummy, NULL, NULL, NULL) != COMEM_ENODEV)
        FAIL_AT("view_read of a missing device");
    comem_view_close(v);
    return NULL;
}

static int64_t status_num(comem_client *c, const char *a, const char *b)
{
    char *text = NULL;
    if (comem_status_json(c, &text) != COMEM_OK)
        return INT64_MIN;
    json_object *root = json_tokener_parse(text), *x = root;
    comem_free(text);
    json_object_object_get_ex(x, a, &x);
    if (json_object_is_type(x, json_type_array))
        x = json_object_array_get_idx(x, 0);
    json_object_object_get_ex(x, b, &x);
    int64_t v = x ? json_object_get_int64(x) : INT64_MIN;
    json_object_put(root);
    return v;
}

static void test_all_threads(void **s)
{
    (void)s;
    assert_int_equal(test_tmpdir_make(g_dir, sizeof g_dir, "emb"), 0);
    snprintf(g_sock, sizeof g_sock, "%s/comem.sock", g_dir);
    snprintf(g_spec, sizeof g_spec, "sim:6GiB:ctx=0:path=%s/card", g_dir);
    comem_sim_spec sp;
    assert_int_equal(comem_sim_spec_parse(g_spec, &sp, NULL, 0), 0);
    assert_int_equal(comem_sim_open(&sp, &g_sim), 0);
    setenv("COMEM_CHECK", "1", 1);
    comem_coord *coord;
    assert_int_equal(comem_coord_start(g_sock, g_spec, &coord), 0);
    static client_state cs[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        char name[16];
        snprintf(name, sizeof name, "c%d", i);
        pthread_mutex_init(&cs[i].lock, NULL);
        assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_WORKER, name, -1, COMEM_OPEN_NO_LOCAL, &cs[i].c), 0);
        assert_int_equal(comem_holder_add(cs[i].c, "models", 0, COMEM_KIND_MODELS, COMEM_ANSWERS_RELEASE, on_release,
                                          &cs[i], &cs[i].holder),
                         0);
    }
    pthread_t callers[CLIENTS * CALLERS_PER_CLIENT], reader;
    assert_int_equal(pthread_create(&reader, NULL, view_reader, NULL), 0);
    for (int i = 0; i < CLIENTS * CALLERS_PER_CLIENT; i++)
        assert_int_equal(pthread_create(&callers[i], NULL, caller, &cs[i % CLIENTS]), 0);
    sleep(SECONDS);
    atomic_store(&g_stop, true);
    for (int i = 0; i < CLIENTS * CALLERS_PER_CLIENT; i++)
        pthread_join(callers[i], NULL);
    pthread_join(reader, NULL);
    print_message("%d granted, %d asks answered, %d view reads, %d errors\n", atomic_load(&g_granted),
                  atomic_load(&g_asks), atomic_load(&g_view_reads), atomic_load(&g_errors));
    assert_int_equal(atomic_load(&g_errors), 0);
    assert_true(atomic_load(&g_granted) > 20);
    assert_true(atomic_load(&g_asks) > 0); /* the card was contended: releases really ran */
    assert_true(atomic_load(&g_view_reads) > 100);
    assert_int_equal(status_num(cs[0].c, "coordinator", "violations"), 0);
    assert_true(status_num(cs[0].c, "coordinator", "checks") > 0);
    for (int i = 0; i < CLIENTS; i++)
        comem_client_close(cs[i].c);
    comem_coord_stop(coord);
    comem_sim_close(g_sim);
    unsetenv("COMEM_CHECK");
    assert_int_equal(test_tmpdir_remove(g_dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_all_threads)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
