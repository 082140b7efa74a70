/*
 * tests/integration/test_protocol.c - the coordinator at the protocol's edges.
 *
 * A real coordinator listens on a Unix socket in a temp directory; bare
 * clients (raw.c) send exact bytes. Malformed frames get an error reply and a
 * closed connection while other clients keep working; the first frame must be
 * HELLO; a bad token is refused; a peer with another uid is refused.
 */
#include "unit/cmocka_all.h"
#include "unit/tmpdir.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "raw.h"

static char g_dir[128], g_sock[256], g_spec[300];
static comem_coord *g_coord;

static void start(const char *token)
{
    if (token)
        setenv("COMEM_TOKEN", token, 1);
    else
        unsetenv("COMEM_TOKEN");
    assert_int_equal(comem_coord_start(g_sock, g_spec, &g_coord), 0);
    unsetenv("COMEM_TOKEN");
}

static int setup(void **s)
{
    (void)s;
    assert_int_equal(test_tmpdir_make(g_dir, sizeof g_dir, "proto"), 0);
    snprintf(g_sock, sizeof g_sock, "%s/comem.sock", g_dir);
    snprintf(g_spec, sizeof g_spec, "sim:8GiB:path=%s/card", g_dir);
    start(NULL);
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    comem_coord_stop(g_coord);
    return test_tmpdir_remove(g_dir);
}

static int hello_client(const char *name)
{
    int fd = raw_connect(g_sock);
    assert_true(fd >= 0);
    int status = -99;
    assert_int_equal(raw_hello(fd, COMEM_ROLE_WORKER, name, NULL, &status), COMEM_MSG_HELLO_REPLY);
    return fd;
}

/* DEVICES round trip: the connection is alive and answered. */
static void assert_alive(int fd)
{
    comem_msg m = {.type = COMEM_MSG_DEVICES, .request_id = 77};
    assert_true(raw_send(fd, &m));
    comem_msg r;
    assert_int_equal(raw_recv(fd, &r, 5000), 1);
    assert_int_equal(r.type, COMEM_MSG_DEVICES_REPLY);
    assert_int_equal(r.request_id, 77);
    assert_int_equal(r.u.devices_reply.n, 1);
    assert_true(r.u.devices_reply.devices[0].total == 8 * COMEM_GIB);
}

/* The coordinator's answer to garbage: one error reply, then the connection closes. */
static void assert_refused_and_closed(int fd, int want_status)
{
    comem_msg r;
    assert_int_equal(raw_recv(fd, &r, 5000), 1);
    assert_int_equal(r.type, COMEM_MSG_REPLY);
    assert_int_equal(r.u.reply.status, want_status);
    assert_true(raw_wait_eof(fd, 5000));
}

static void test_hello_and_devices(void **s)
{
    (void)s;
    int fd = hello_client("w");
    assert_alive(fd);
    close(fd);
}

static void test_first_frame_must_be_hello(void **s)
{
    (void)s;
    int fd = raw_connect(g_sock);
    comem_msg m = {.type = COMEM_MSG_DEVICES, .request_id = 5};
    assert_true(raw_send(fd, &m));
    assert_refused_and_closed(fd, COMEM_EPROTO);
    close(fd);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void test_malformed_frames_close_only_that_connection(void **s)
{
    (void)s;
    int good = hello_client("good");
    /* A valid HELLO frame, then variations of it. */
    comem_msg h = {.type = COMEM_MSG_HELLO, .request_id = 9};
    h.u.hello.proto_version = COMEM_WIRE_VERSION;
    h.u.hello.role = COMEM_ROLE_WORKER;
    snprintf(h.u.hello.name, sizeof h.u.hello.name, "x");
    uint8_t frame[COMEM_WIRE_MAX_FRAME];
    int n = comem_wire_encode(&h, frame, sizeof frame);
    assert_true(n > COMEM_WIRE_HEADER_SIZE);
    for (int kind = 0; kind < 6; kind++) {
        uint8_t bad[COMEM_WIRE_MAX_FRAME];
        memcpy(bad, frame, (size_t)n);
        size_t len = (size_t)n;
        switch (kind) {
        case 0: bad[0] ^= 0xff; break;                       /* bad magic */
        case 1: bad[4] = 99; break;                          /* unknown version */
        case 2: bad[6] = 200; break;                         /* unknown type */
        case 3: put32(bad + 12, COMEM_WIRE_MAX_PAYLOAD + 1); break; /* oversize */
        case 4: bad[len++] = 0; put32(bad + 12, (uint32_t)(len - COMEM_WIRE_HEADER_SIZE)); break; /* trailing */
        case 5: bad[COMEM_WIRE_HEADER_SIZE] = 0xff; break;   /* garbage payload */
        }
        int fd = raw_connect(g_sock);
        assert_true(fd >= 0);
        assert_true(raw_send_bytes(fd, bad, len));
        assert_refused_and_closed(fd, COMEM_EPROTO);
        close(fd);
        assert_alive(good); /* the others keep working */
    }
    /* a client that is already in, then sends a coordinator-side message type */
    int fd = hello_client("confused");
    comem_msg wrong = {.type = COMEM_MSG_ID_REPLY, .request_id = 3};
    assert_true(raw_send(fd, &wrong));
    assert_refused_and_closed(fd, COMEM_EPROTO);
    close(fd);
    assert_alive(good);
    close(good);
}

static void test_bad_token_refused(void **s)
{
    (void)s;
    comem_coord_stop(g_coord);
    start("s3cret");
    const char *bad[] = {"wrong", "", "s3cret!", "s3cre"};
    for (size_t i = 0; i < 4; i++) {
        int fd = raw_connect(g_sock);
        int status = 0;
        assert_int_equal(raw_hello(fd, COMEM_ROLE_WORKER, "w", bad[i], &status), COMEM_MSG_REPLY);
        assert_int_equal(status, COMEM_EPERM);
        assert_true(raw_wait_eof(fd, 5000));
        close(fd);
    }
    int fd = raw_connect(g_sock);
    int status = -1;
    assert_int_equal(raw_hello(fd, COMEM_ROLE_WORKER, "w", "s3cret", &status), COMEM_MSG_HELLO_REPLY);
    assert_alive(fd);
    close(fd);
    comem_coord_stop(g_coord);
    start(NULL);
}

static void test_other_uid_refused(void **s)
{
    (void)s;
    if (getuid() != 0) {
        print_message("not root: cannot become another user; the SO_PEERCRED check is not exercised\n");
        skip();
    }
    /* Let another user reach the socket, so that only the uid check stands in the way. */
    assert_int_equal(chmod(g_dir, 0755), 0);
    assert_int_equal(chmod(g_sock, 0777), 0);
    pid_t child = fork();
    if (child == 0) {
        alarm(20);
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(3);
        int fd = raw_connect(g_sock);
        if (fd < 0)
            _exit(4);
        comem_msg r;
        int got = raw_recv(fd, &r, 5000); /* refused before it even says HELLO */
        if (got != 1 || r.type != COMEM_MSG_REPLY || r.u.reply.status != COMEM_EPERM)
            _exit(5);
        _exit(raw_wait_eof(fd, 5000) ? 0 : 6);
    }
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(chmod(g_dir, 0700), 0);
    int fd = hello_client("still-fine");
    assert_alive(fd);
    close(fd);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello_and_devices),
        cmocka_unit_test(test_first_frame_must_be_hello),
        cmocka_unit_test(test_malformed_frames_close_only_that_connection),
        cmocka_unit_test(test_bad_token_refused),
        cmocka_unit_test(test_other_uid_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
