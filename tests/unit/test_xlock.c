/*
 * tests/unit/test_xlock.c - the lock between processes (os/xlock.h), the same assertions on Linux
 * (a robust mutex in shared memory) and on Windows (a named mutex, under wine in CI).
 *
 * Held by one holder at a time: another thread's take finds it held, at once and after a wait, and
 * has it once it is given. A holder that dies holding it (another process, this test run again,
 * ended while it holds it) hands it on: the next take gets it and is told, and the take after that
 * is an ordinary one.
 */
#include "unit/cmocka_all.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#include <windows.h>
#else
#include <fcntl.h>
#include <unistd.h>
#endif

#include "comem/common.h"
#include "os/shm.h"
#include "os/xlock.h"
#include "unit/endpoint.h"

static char g_name[64]; /* the lock's name: this test process's own */

typedef struct other {
    comem_xlock *l;
    int at_once, after_wait, after_give;
    int tried; /* set by the other thread once both takes are over (atomic) */
    int given; /* set by the main thread once it has given the lock (atomic) */
} other;

static void *other_thread(void *arg)
{
    other *o = arg;
    o->at_once = comem_xlock_take(o->l, 0, NULL);
    o->after_wait = comem_xlock_take(o->l, 30 * 1000000LL, NULL);
    __atomic_store_n(&o->tried, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&o->given, __ATOMIC_ACQUIRE))
        pause_ms(1);
    bool recovered = true;
    o->after_give = comem_xlock_take(o->l, 5000 * 1000000LL, &recovered);
    if (o->after_give == COMEM_OK) {
        o->after_give = recovered ? COMEM_EIO : COMEM_OK; /* nobody died */
        comem_xlock_give(o->l);
    }
    return NULL;
}

static void test_one_holder_at_a_time(void **s)
{
    (void)s;
    comem_shm *m = NULL;
    assert_int_equal(comem_shm_create("comem-test-xlock", 4096, &m), COMEM_OK);
    assert_int_equal(comem_xlock_init(comem_shm_addr(m)), COMEM_OK);
    comem_xlock *mine = NULL, *theirs = NULL;
    assert_int_equal(comem_xlock_attach(comem_shm_addr(m), g_name, &mine), COMEM_OK);
    assert_int_equal(comem_xlock_attach(comem_shm_addr(m), g_name, &theirs), COMEM_OK);
    bool recovered = true;
    assert_int_equal(comem_xlock_take(mine, 0, &recovered), COMEM_OK);
    assert_false(recovered);
    other o = {.l = theirs};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, other_thread, &o), 0);
    while (!__atomic_load_n(&o.tried, __ATOMIC_ACQUIRE))
        pause_ms(1);
    comem_xlock_give(mine);
    __atomic_store_n(&o.given, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    assert_int_equal(o.at_once, COMEM_ETIMEDOUT);
    assert_int_equal(o.after_wait, COMEM_ETIMEDOUT);
    assert_int_equal(o.after_give, COMEM_OK);
    comem_xlock_detach(theirs);
    comem_xlock_detach(mine);
    comem_shm_close(m);
}

/* ---- a holder that dies ---- */

static char g_note[480]; /* the maker's pid, the share's token and the lock's name, for the child */

/* The child's hook: takes the lock in the maker's region and says so (g_note.held); then sleeps holding it. */
static void hold(const char *note)
{
    long long maker = 0, token = -1;
    char name[64] = "";
    for (int i = 0; i < 2000 && token < 0; i++) {
        FILE *f = fopen(note, "r");
        if (f) {
            if (fscanf(f, "%lld %lld %63s", &maker, &token, name) != 3)
                token = -1;
            fclose(f);
        }
        if (token < 0)
            pause_ms(10);
    }
    if (token < 0)
        exit(2);
#ifdef _WIN32
    comem_shm_token t = (comem_shm_token)token;
#else
    char path[64]; /* the descriptor, as SCM_RIGHTS would bring it */
    snprintf(path, sizeof path, "/proc/%lld/fd/%lld", maker, token);
    comem_shm_token t = open(path, O_RDWR | O_CLOEXEC);
#endif
    comem_shm *m = NULL;
    comem_xlock *l = NULL;
    if (comem_shm_open(t, 4096, COMEM_SHM_WRITABLE, &m) != COMEM_OK ||
        comem_xlock_attach(comem_shm_addr(m), name, &l) != COMEM_OK || comem_xlock_take(l, 0, NULL) != COMEM_OK)
        exit(3);
    char held[500];
    snprintf(held, sizeof held, "%s.held", note);
    FILE *f = fopen(held, "w");
    if (!f)
        exit(4);
    fclose(f);
    /* child_main sleeps now, holding the lock, until it is ended */
}

static void test_a_dead_holder_hands_it_on(void **s)
{
    (void)s;
    comem_shm *m = NULL;
    assert_int_equal(comem_shm_create("comem-test-xlock", 4096, &m), COMEM_OK);
    assert_int_equal(comem_xlock_init(comem_shm_addr(m)), COMEM_OK);
    comem_xlock *mine = NULL;
    assert_int_equal(comem_xlock_attach(comem_shm_addr(m), g_name, &mine), COMEM_OK);
    void *handle;
    int64_t child = start_child_with(60000, g_note, &handle);
    comem_shm_token t;
    assert_int_equal(comem_shm_share(m, child, true, &t), COMEM_OK);
    char tmp[520], held[520];
    snprintf(tmp, sizeof tmp, "%s.tmp", g_note);
    snprintf(held, sizeof held, "%s.held", g_note);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fprintf(f, "%lld %lld %s\n", (long long)own_pid(), (long long)t, g_name);
    fclose(f);
#ifdef _WIN32
    assert_true(MoveFileExA(tmp, g_note, MOVEFILE_REPLACE_EXISTING));
#else
    assert_int_equal(rename(tmp, g_note), 0); /* whole, or not there */
#endif
    assert_true(wait_for_file(held, 30000)); /* the child holds the lock */
    assert_int_equal(comem_xlock_take(mine, 20 * 1000000LL, NULL), COMEM_ETIMEDOUT);
    end_child(child, handle);
    bool recovered = false;
    assert_int_equal(comem_xlock_take(mine, 10000 * 1000000LL, &recovered), COMEM_OK);
    assert_true(recovered); /* handed on, and said so */
    comem_xlock_give(mine);
    assert_int_equal(comem_xlock_take(mine, 0, &recovered), COMEM_OK);
    assert_false(recovered); /* an ordinary take now */
    comem_xlock_give(mine);
    release_child(child, handle);
    comem_shm_token_drop(t);
    comem_xlock_detach(mine);
    comem_shm_close(m);
    remove(held);
}

static int setup(void **s)
{
    (void)s;
    snprintf(g_name, sizeof g_name, "comem-test-xlock-%lld", (long long)own_pid());
    if (endpoint_make("xlock") != 0)
        return -1;
    endpoint_file(g_note, sizeof g_note, "note");
    return 0;
}

static int teardown(void **s)
{
    remove(g_note);
    return endpoint_teardown(s);
}

int main(int argc, char **argv)
{
    if (child_main(argc, argv, hold))
        return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_holder_at_a_time),
        cmocka_unit_test(test_a_dead_holder_hands_it_on),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
