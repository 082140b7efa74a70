/*
 * tests/integration/test_load.c - 64 processes hammer one coordinator.
 *
 * comemd runs with --check (ledger_check after every mutation). 64 forked
 * client processes share one simulated card for COMEM_LOAD_SECONDS (default
 * 30): each admits random loads, allocates exactly what it was granted on the
 * card, reports residency, shrinks and drops models, and answers the
 * coordinator's release asks. Overcommit is detected physically: a granted
 * allocation that does not fit on the card means two grants shared bytes.
 * Passes with zero invariant violations and zero overcommit, after real work.
 */
#include "unit/cmocka_all.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "harness.h"

#define CLIENTS 64
#define MIB COMEM_MIB
#define MAX_MODELS 4

typedef struct model {
    uint64_t entry;
    int64_t size, resident;
} model;

typedef struct worker {
    pthread_mutex_t lock;
    comem_client *c;
    comem_sim *sim;
    uint64_t holder;
    model m[MAX_MODELS];
    int n;
    int64_t asks, asked_freed;
} worker;

typedef struct result {
    int64_t granted, refused, overcommit, errors, censuses, removals, asks, freed;
} result;

static int on_release(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                      const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder;
    worker *w = user;
    *freed = 0;
    pthread_mutex_lock(&w->lock);
    w->asks++;
    for (int i = 0; i < w->n; i++) {
        model *m = &w->m[i];
        int64_t want = 0;
        for (size_t k = 0; k < n; k++)
            if (entries[k] == m->entry)
                want = amounts[k];
        if (kind == COMEM_RELEASE_IDLE || (n == 0 && *freed < bytes))
            want = kind == COMEM_RELEASE_IDLE ? m->resident : bytes - *freed;
        int64_t give = comem_min(m->resident, want);
        if (give <= 0)
            continue;
        comem_sim_free(w->sim, 0, give);
        m->resident -= give;
        *freed += give;
        comem_entry_set_resident(w->c, m->entry, m->resident);
    }
    w->asked_freed += *freed;
    pthread_mutex_unlock(&w->lock);
    return COMEM_OK;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

typedef struct load_args {
    const harness *h;
    int index;
    double seconds;
    chan up;
} load_args;

static int load_main(void *arg)
{
    load_args *a = arg;
    worker w = {0};
    result r = {0};
    pthread_mutex_init(&w.lock, NULL);
    char name[32];
    snprintf(name, sizeof name, "load-%02d", a->index);
    w.sim = h_sim(a->h);
    if (!w.sim || comem_client_open(a->h->sock, COMEM_CLIENT_WORKER, name, -1, COMEM_OPEN_NO_LOCAL, &w.c))
        return 10;
    comem_sim_touch(w.sim, 0);
    if (comem_holder_add(w.c, "models", 0, COMEM_KIND_MODELS, COMEM_ANSWERS_RELEASE, on_release, &w, &w.holder))
        return 11;
    unsigned seed = 1000u + (unsigned)a->index * 7919u;
    double end = now_s() + a->seconds;
    while (now_s() < end) {
        seed = seed * 1103515245u + 12345u;
        unsigned op = (seed >> 16) % 10;
        pthread_mutex_lock(&w.lock);
        int n = w.n;
        pthread_mutex_unlock(&w.lock);
        if (op < 5 && n < MAX_MODELS) {
            int64_t size = (int64_t)((seed >> 8) % 16 + 1) * 64 * MIB; /* 64 MiB .. 1 GiB */
            uint64_t grant;
            int rc = comem_admit(w.c, 0, w.holder, size, 128 * MIB, 0, NULL, 0, 10000, &grant, NULL);
            if (rc == COMEM_ENOSPC) {
                r.refused++;
            } else if (rc != COMEM_OK) {
                r.errors++;
            } else {
                pthread_mutex_lock(&w.lock);
                if (comem_sim_alloc(w.sim, 0, size) != COMEM_OK) {
                    r.overcommit++; /* granted bytes that are not there */
                    pthread_mutex_unlock(&w.lock);
                    comem_grant_done(w.c, grant, 0, 0);
                } else {
                    model *m = &w.m[w.n++];
                    *m = (model){0, size, size};
                    if (comem_entry_add(w.c, w.holder, "m", size, 0, 0, &m->entry) != COMEM_OK)
                        r.errors++;
                    pthread_mutex_unlock(&w.lock);
                    comem_grant_done(w.c, grant, m->entry, size);
                    r.granted++;
                }
            }
        } else if (op < 8 && n > 0) { /* shrink one model: a census */
            pthread_mutex_lock(&w.lock);
            model *m = &w.m[(seed >> 4) % (unsigned)w.n];
            int64_t give = comem_min(m->resident, 64 * MIB);
            if (give > 0) {
                comem_sim_free(w.sim, 0, give);
                m->resident -= give;
                comem_entry_set_resident(w.c, m->entry, m->resident);
                r.censuses++;
            }
            pthread_mutex_unlock(&w.lock);
        } else if (n > 0) { /* drop a model */
            pthread_mutex_lock(&w.lock);
            int i = (int)((seed >> 4) % (unsigned)w.n);
            comem_sim_free(w.sim, 0, w.m[i].resident);
            comem_entry_remove(w.c, w.m[i].entry);
            w.m[i] = w.m[--w.n];
            r.removals++;
            pthread_mutex_unlock(&w.lock);
        }
        usleep(2000 + (seed >> 20) % 3000);
    }
    pthread_mutex_lock(&w.lock);
    r.asks = w.asks;
    r.freed = w.asked_freed;
    pthread_mutex_unlock(&w.lock);
    comem_client_close(w.c);
    int64_t *v = (int64_t *)&r;
    for (size_t i = 0; i < sizeof r / sizeof(int64_t); i++)
        ch_put(a->up.wr, v[i]);
    return 0;
}

static void test_64_clients(void **s)
{
    harness *h = *s;
    const char *env = getenv("COMEM_LOAD_SECONDS");
    double seconds = env ? atof(env) : 30.0;
    h_init(h, "sim:24GiB:reserved=256MiB:ctx=64MiB");
    h_start(h, NULL);
    static load_args args[CLIENTS];
    pid_t pids[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        chan unused;
        args[i] = (load_args){h, i, seconds, {0, 0}};
        ch_open(&unused, &args[i].up);
        pids[i] = h_child(load_main, &args[i]);
    }
    result total = {0};
    for (int i = 0; i < CLIENTS; i++) {
        result r;
        int64_t *v = (int64_t *)&r;
        for (size_t k = 0; k < sizeof r / sizeof(int64_t); k++)
            assert_true(ch_get(args[i].up.rd, &v[k], (int)(seconds * 1000) + 60000));
        assert_int_equal(h_wait(pids[i]), 0);
        int64_t *t = (int64_t *)&total;
        for (size_t k = 0; k < sizeof r / sizeof(int64_t); k++)
            t[k] += v[k];
    }
    print_message("64 clients, %.0f s: %lld granted, %lld refused, %lld censuses, %lld removals, %lld asks answered "
                  "(%lld MiB freed), %lld errors, %lld overcommits\n",
                  seconds, (long long)total.granted, (long long)total.refused, (long long)total.censuses,
                  (long long)total.removals, (long long)total.asks, (long long)(total.freed / MIB),
                  (long long)total.errors, (long long)total.overcommit);
    int64_t checks = h_status_num(h, "coordinator.checks");
    print_message("coordinator: %lld ledger checks, %lld violations\n", (long long)checks,
                  (long long)h_status_num(h, "coordinator.violations"));
    assert_int_equal(total.overcommit, 0);
    assert_int_equal(total.errors, 0);
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
    assert_true(checks > 1000);
    assert_true(total.granted > 500);
    assert_true(total.refused > 0 || total.asks > 0); /* the card was really contended */
    /* Everyone left: nothing is booked, nothing is attributed. */
    assert_int_equal(h_status_num(h, "devices.0.granted"), 0);
    assert_int_equal(h_status_num(h, "devices.0.resident"), 0);
}

static harness g_h;

static int setup(void **s)
{
    *s = &g_h;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test_setup_teardown(test_64_clients, setup, h_teardown)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
