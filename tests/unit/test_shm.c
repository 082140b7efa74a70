/*
 * tests/unit/test_shm.c - shared memory (os/shm.h), the same assertions on Linux (memfds) and on
 * Windows (sections, under wine in CI).
 *
 * A region made here is shared read-only and opened as its receiver would: it shows what the maker
 * writes, cannot be opened writable, and is refused at another size; a writable share writes
 * through; a frozen region shares nothing writable. Then another process (this test run again)
 * receives a read-only share as the transport would carry it (Linux: the descriptor, here taken
 * from /proc/PID/fd; Windows: the handle value the maker duplicated into it), reads what the maker
 * wrote, and is refused a writable mapping. A frame's numbers resolve to the shares they name, and
 * what is not a region of fixed size (an unsealed memfd; a handle that is not a section's) is refused.
 */
#include "unit/cmocka_all.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#include <windows.h>
#else
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "comem/common.h"
#include "os/shm.h"
#include "unit/endpoint.h"

#define SIZE 8192
static const char k_text[] = "what the maker wrote";

static int64_t self_pid(void) { return own_pid(); }

static void test_shares_read_only_writable_and_frozen(void **s)
{
    (void)s;
    comem_shm *m = NULL;
    assert_int_equal(comem_shm_create("comem-test", SIZE, &m), COMEM_OK);
    assert_int_equal(comem_shm_size(m), SIZE);
    char *w = comem_shm_addr(m);
    for (size_t i = 0; i < SIZE; i++)
        assert_int_equal(w[i], 0); /* zeroed */
    memcpy(w, k_text, sizeof k_text);

    comem_shm_token t;
    comem_shm *r = NULL;
    assert_int_equal(comem_shm_share(m, self_pid(), false, &t), COMEM_OK);
    assert_int_equal(comem_shm_open(t, SIZE, 0, &r), COMEM_OK);
    const char *rd = comem_shm_addr(r);
    assert_string_equal(rd, k_text); /* the same memory */
    w[SIZE - 1] = 'z';
    assert_int_equal(rd[SIZE - 1], 'z'); /* and what is written later shows */
    comem_shm_close(r);

    assert_int_equal(comem_shm_share(m, self_pid(), false, &t), COMEM_OK);
    assert_int_equal(comem_shm_open(t, SIZE, COMEM_SHM_WRITABLE, &r), COMEM_EPERM); /* read-only stays read-only */
    assert_null(r);
    assert_int_equal(comem_shm_share(m, self_pid(), false, &t), COMEM_OK);
    assert_int_equal(comem_shm_open(t, 2 * SIZE, 0, &r), COMEM_EINVAL); /* not its size */
    assert_null(r);

    assert_int_equal(comem_shm_share(m, self_pid(), true, &t), COMEM_OK);
    assert_int_equal(comem_shm_open(t, SIZE, COMEM_SHM_WRITABLE, &r), COMEM_OK);
    ((char *)comem_shm_addr(r))[1] = 'H'; /* a writable share writes through */
    assert_int_equal(w[1], 'H');
    comem_shm_close(r);

    /* Frozen is demanded of what may still be written: refused. What each system can see differs:
       Linux the region's seals, so a read-only share of it is refused too; Windows the handle. */
    assert_int_equal(comem_shm_share(m, self_pid(), true, &t), COMEM_OK);
    assert_int_equal(comem_shm_open(t, SIZE, COMEM_SHM_FROZEN, &r), COMEM_EPERM);
    assert_null(r);
#ifndef _WIN32
    assert_int_equal(comem_shm_share(m, self_pid(), false, &t), COMEM_OK);
    assert_int_equal(comem_shm_open(t, SIZE, COMEM_SHM_FROZEN, &r), COMEM_EPERM);
#endif

    assert_int_equal(comem_shm_freeze(m), COMEM_OK);
    assert_int_equal(comem_shm_share(m, self_pid(), true, &t), COMEM_EPERM);
    w[0] = 'W'; /* the maker's own mapping still writes */
    assert_int_equal(comem_shm_share(m, self_pid(), false, &t), COMEM_OK);
    assert_int_equal(comem_shm_open(t, SIZE, COMEM_SHM_FROZEN, &r), COMEM_OK);
    assert_int_equal(((const char *)comem_shm_addr(r))[0], 'W');
    comem_shm_close(r);

    comem_shm_stop_sharing(m); /* no more shares; the maker's mapping stays */
    assert_int_equal(comem_shm_share(m, self_pid(), false, &t), COMEM_EINVAL);
    w[2] = 'S';
    assert_int_equal(w[2], 'S');
    comem_shm_close(m);
}

#ifndef _WIN32
/* Once the maker stops sharing, the seals are settled: a receiver of a writable share adds none. */
static void test_a_receiver_adds_no_seal(void **s)
{
    (void)s;
    comem_shm *m = NULL;
    assert_int_equal(comem_shm_create("comem-test", SIZE, &m), COMEM_OK);
    comem_shm_token t;
    assert_int_equal(comem_shm_share(m, self_pid(), true, &t), COMEM_OK);
    comem_shm_stop_sharing(m);
    assert_int_equal(fcntl((int)t, F_ADD_SEALS, F_SEAL_FUTURE_WRITE), -1); /* it could shut the maker out */
    assert_int_equal(errno, EPERM);
    comem_shm_token_drop(t);
    comem_shm_close(m);
}
#endif

/* A frame names its shares by number: what the sender writes, the receiver resolves to the same share. */
static void test_numbers_name_shares(void **s)
{
    (void)s;
    comem_shm *m = NULL;
    assert_int_equal(comem_shm_create("comem-test", SIZE, &m), COMEM_OK);
    memcpy(comem_shm_addr(m), k_text, sizeof k_text);
    comem_shm_token sent[2];
    assert_int_equal(comem_shm_share(m, self_pid(), false, &sent[0]), COMEM_OK);
    assert_int_equal(comem_shm_share(m, self_pid(), true, &sent[1]), COMEM_OK);
    uint64_t number[2] = {comem_shm_token_number(sent[0], 0), comem_shm_token_number(sent[1], 1)};
    assert_true(number[0] != 0 && number[1] != 0 && number[0] != number[1]);

    /* What came beside the frame: Linux, the descriptors in their places; Windows, nothing. */
#ifdef _WIN32
    comem_shm_token beside[2] = {0, 0};
    int n = 0;
#else
    comem_shm_token beside[2] = {sent[0], sent[1]};
    int n = 2;
#endif
    comem_shm_token got;
    assert_int_equal(comem_shm_token_named(0, beside, n, &got), COMEM_ENOENT);
    assert_int_equal(comem_shm_token_named(number[1], beside, n, &got), COMEM_OK);
    comem_shm *r = NULL;
    assert_int_equal(comem_shm_open(got, SIZE, COMEM_SHM_WRITABLE, &r), COMEM_OK); /* the writable one */
    ((char *)comem_shm_addr(r))[0] = 'N';
    assert_int_equal(((char *)comem_shm_addr(m))[0], 'N');
    comem_shm_close(r);
#ifndef _WIN32
    assert_int_equal(comem_shm_token_named(number[1], beside, n, &got), COMEM_EINVAL); /* taken already */
    assert_int_equal(comem_shm_token_named(3, beside, n, &got), COMEM_EINVAL);        /* nothing came there */
#else
    assert_int_equal(comem_shm_token_named(number[0] | 1, beside, n, &got), COMEM_EINVAL); /* no handle's value */
#endif
    assert_int_equal(comem_shm_token_named(number[0], beside, n, &got), COMEM_OK);
    assert_int_equal(comem_shm_open(got, SIZE, COMEM_SHM_WRITABLE, &r), COMEM_EPERM); /* the read-only one */
    comem_shm_close(m);
}

/*
 * What is not a region of a fixed size is refused before anything is mapped: on Linux a file that
 * could shrink under the mapping (an unsealed memfd); on Windows a handle of this process that names
 * something else, which is left open (a number from a frame may name any handle here).
 */
static void test_what_is_not_a_region_is_refused(void **s)
{
    (void)s;
    comem_shm *r = NULL;
#ifdef _WIN32
    HANDLE ev = CreateEventW(NULL, TRUE, FALSE, NULL);
    assert_non_null(ev);
    assert_int_equal(comem_shm_open((comem_shm_token)ev, SIZE, 0, &r), COMEM_EINVAL);
    assert_null(r);
    assert_true(SetEvent(ev)); /* still this process's, still open */
    assert_int_equal(WaitForSingleObject(ev, 0), WAIT_OBJECT_0);
    comem_shm_token_discard((comem_shm_token)ev); /* not a section's: left alone too */
    assert_true(ResetEvent(ev));
    CloseHandle(ev);
#else
    int fd = memfd_create("comem-test-unsealed", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, SIZE), 0);
    assert_int_equal(comem_shm_open(fd, SIZE, 0, &r), COMEM_EINVAL); /* it takes the descriptor */
    assert_null(r);
    assert_int_equal(comem_shm_open(-1, SIZE, 0, &r), COMEM_EINVAL);
#endif
}

/* ---- another process ---- */

static char g_note[480]; /* where the maker writes its pid and the token for the child */

/*
 * The child's hook: waits for the note, opens the share and checks it; exits 0 when all is as it
 * should be, else the number of the first thing that was not.
 */
static void receive(const char *note)
{
    long long maker = 0, token = -1;
    for (int i = 0; i < 2000; i++) {
        FILE *f = fopen(note, "r");
        int got = f ? fscanf(f, "%lld %lld", &maker, &token) : 0;
        if (f)
            fclose(f);
        if (got == 2)
            break;
#ifdef _WIN32
        Sleep(10);
#else
        usleep(10000);
#endif
    }
    if (token < 0)
        exit(2);
#ifdef _WIN32
    comem_shm_token t = (comem_shm_token)token;
#else
    char path[64]; /* the descriptor, as SCM_RIGHTS would bring it */
    snprintf(path, sizeof path, "/proc/%lld/fd/%lld", maker, token);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        exit(3);
    int again = dup(fd);
    comem_shm_token t = fd;
#endif
    comem_shm *r = NULL;
#ifdef _WIN32
    /* First the writable open, which must fail and must not use the handle up: ask it of a copy. */
    HANDLE copy = NULL;
    if (!DuplicateHandle(GetCurrentProcess(), (HANDLE)t, GetCurrentProcess(), &copy, 0, FALSE, DUPLICATE_SAME_ACCESS))
        exit(4);
    if (comem_shm_open((comem_shm_token)copy, SIZE, COMEM_SHM_WRITABLE, &r) != COMEM_EPERM)
        exit(5);
#else
    if (comem_shm_open(again, SIZE, COMEM_SHM_WRITABLE, &r) != COMEM_EPERM)
        exit(5);
#endif
    if (comem_shm_open(t, SIZE, 0, &r) != COMEM_OK)
        exit(6);
    if (strcmp(comem_shm_addr(r), k_text) != 0)
        exit(7);
    comem_shm_close(r);
    exit(0);
}

static void test_another_process_reads_and_cannot_write(void **s)
{
    (void)s;
    comem_shm *m = NULL;
    assert_int_equal(comem_shm_create("comem-test", SIZE, &m), COMEM_OK);
    memcpy(comem_shm_addr(m), k_text, sizeof k_text);
    void *handle;
    int64_t child = start_child_with(60000, g_note, &handle);
    comem_shm_token t;
    assert_int_equal(comem_shm_share(m, child, false, &t), COMEM_OK);
    char tmp[520];
    snprintf(tmp, sizeof tmp, "%s.tmp", g_note);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fprintf(f, "%lld %lld\n", (long long)own_pid(), (long long)t);
    fclose(f);
#ifdef _WIN32
    assert_true(MoveFileExA(tmp, g_note, MOVEFILE_REPLACE_EXISTING));
#else
    assert_int_equal(rename(tmp, g_note), 0); /* whole, or not there */
#endif
    assert_int_equal(wait_child(child, handle), 0);
    comem_shm_token_drop(t);
    comem_shm_close(m);
}

static int setup_note(void **s)
{
    (void)s;
    if (endpoint_make("shm") != 0)
        return -1;
    endpoint_file(g_note, sizeof g_note, "note");
    return 0;
}

static int teardown_note(void **s)
{
    remove(g_note);
    return endpoint_teardown(s);
}

int main(int argc, char **argv)
{
    if (child_main(argc, argv, receive))
        return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shares_read_only_writable_and_frozen),
        cmocka_unit_test(test_numbers_name_shares),
#ifndef _WIN32
        cmocka_unit_test(test_a_receiver_adds_no_seal),
#endif
        cmocka_unit_test(test_what_is_not_a_region_is_refused),
        cmocka_unit_test_setup_teardown(test_another_process_reads_and_cannot_write, setup_note, teardown_note),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
