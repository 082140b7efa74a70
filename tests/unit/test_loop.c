/*
 * tests/unit/test_loop.c - the event loop (os/loop.h), the same assertions on Linux (epoll) and on
 * Windows (an I/O completion port, under wine in CI).
 *
 * A listener in the loop is reported when a client connects, and the stream accepted is reported
 * when bytes come: once per wait, again while bytes are left unread (level-triggered), not at all
 * once they are read (all read through the loop); a stream removed from the loop is reported no
 * more and reads on its own again; a peer gone is reported and its read says so. A wake-up from
 * another thread ends a wait that has no deadline, and a child process is reported when it is
 * ended, not before. A stream is sent to through the loop without waiting, and reports room only
 * once its peer has read; a wait may be given in microseconds.
 */
#include "unit/cmocka_all.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "comem/common.h"
#include "os/loop.h"
#include "os/proc.h"
#include "os/stream.h"
#include "unit/endpoint.h"

static int g_tag_listener, g_tag_stream, g_tag_child; /* their addresses are the tags */

static int setup(void **s)
{
    (void)s;
    return endpoint_make("loop");
}

/* Waits up to timeout_ms for the event of tag: its what, or 0 when it did not come. Other events fail. */
static unsigned wait_for(comem_loop *l, void *tag, int timeout_ms)
{
    comem_loop_event ev[8];
    int n = comem_loop_wait(l, ev, 8, timeout_ms);
    assert_true(n >= 0);
    unsigned what = 0;
    for (int i = 0; i < n; i++) {
        assert_ptr_equal(ev[i].tag, tag);
        assert_int_equal(what, 0); /* once per wait */
        what = ev[i].what;
    }
    return what;
}

/* Nothing is ready now. */
static void assert_quiet(comem_loop *l)
{
    comem_loop_event ev[8];
    assert_int_equal(comem_loop_wait(l, ev, 8, 0), 0);
}

typedef struct client {
    comem_stream *s;
    int rc;
} client;

static void *connect_main(void *arg)
{
    client *c = arg;
    c->rc = comem_connect(g_endpoint.name, 5000, &c->s);
    return NULL;
}

/* A listener in l with a client connected and accepted: *srv the server's end, the client's in *cl. */
static comem_listener *connected(comem_loop *l, comem_stream **srv, client *cl)
{
    comem_listener *ls = NULL;
    char why[200] = "";
    assert_int_equal(comem_listen(g_endpoint.name, &ls, why, sizeof why), COMEM_OK);
    assert_int_equal(comem_loop_add_listener(l, ls, &g_tag_listener), COMEM_OK);
    assert_quiet(l); /* nobody has connected */
    pthread_t t;
    *cl = (client){.rc = -1};
    assert_int_equal(pthread_create(&t, NULL, connect_main, cl), 0);
    assert_int_equal(wait_for(l, &g_tag_listener, 10000), COMEM_LOOP_ACCEPT);
    comem_peer peer;
    assert_int_equal(comem_accept(ls, 0, srv, &peer), COMEM_OK);
    assert_int_equal(peer.pid, own_pid());
    pthread_join(t, NULL);
    assert_int_equal(cl->rc, COMEM_OK);
    return ls;
}

static void test_accept_read_level_triggered_and_removed(void **s)
{
    (void)s;
    comem_loop *l = NULL;
    assert_int_equal(comem_loop_open(&l), COMEM_OK);
    comem_stream *srv = NULL;
    client cl;
    comem_listener *ls = connected(l, &srv, &cl);
    assert_int_equal(comem_loop_add_stream(l, srv, &g_tag_stream), COMEM_OK);

    char buf[256];
    /* A wait with nothing sent ends at its deadline; the stream's read says "nothing yet". */
    assert_int_equal(wait_for(l, &g_tag_stream, 0), 0);
    assert_int_equal(comem_loop_read(l, srv, buf, sizeof buf), COMEM_ETIMEDOUT);

    assert_int_equal(comem_stream_write(cl.s, "hello, loop", 11, 5000), COMEM_OK);
    assert_int_equal(wait_for(l, &g_tag_stream, 10000), COMEM_LOOP_READ);
    /* Read a part: the rest keeps it ready at the next wait. */
    assert_int_equal(comem_loop_read(l, srv, buf, 5), 5);
    assert_memory_equal(buf, "hello", 5);
    assert_int_equal(wait_for(l, &g_tag_stream, 0), COMEM_LOOP_READ);
    assert_int_equal(comem_loop_read(l, srv, buf, sizeof buf), 6);
    assert_memory_equal(buf, ", loop", 6);
    assert_int_equal(comem_loop_read(l, srv, buf, sizeof buf), COMEM_ETIMEDOUT);
    /* All read: quiet (a packet posted while bytes were left may make one more report, never bytes). */
    if (wait_for(l, &g_tag_stream, 0) == COMEM_LOOP_READ)
        assert_int_equal(comem_loop_read(l, srv, buf, sizeof buf), COMEM_ETIMEDOUT);
    assert_quiet(l);

    /* The other way: writes of a stream in a loop are as without one. */
    assert_int_equal(comem_stream_write(srv, "back", 4, 5000), COMEM_OK);
    assert_int_equal(comem_stream_read(cl.s, buf, sizeof buf, 5000), 4);
    assert_memory_equal(buf, "back", 4);
    assert_quiet(l);

    /* Removed, it is reported no more, though bytes come; out of the loop it reads as before. */
    comem_loop_remove_stream(l, srv);
    assert_int_equal(comem_stream_write(cl.s, "late", 4, 5000), COMEM_OK);
    assert_int_equal(wait_for(l, NULL, 200), 0);
    assert_int_equal(comem_stream_read(srv, buf, sizeof buf, 5000), 4);
    assert_memory_equal(buf, "late", 4);

    /* Added again, and then the peer goes: reported, and the read says closed. */
    assert_int_equal(comem_loop_add_stream(l, srv, &g_tag_stream), COMEM_OK);
    assert_int_equal(comem_stream_write(cl.s, "bye", 3, 5000), COMEM_OK);
    comem_stream_close(cl.s);
    assert_int_equal(wait_for(l, &g_tag_stream, 10000), COMEM_LOOP_READ);
    int n = comem_loop_read(l, srv, buf, sizeof buf);
    if (n == 3) { /* the bytes first, then the end */
        assert_memory_equal(buf, "bye", 3);
        for (int i = 0; i < 100 && (n = comem_loop_read(l, srv, buf, sizeof buf)) == COMEM_ETIMEDOUT; i++)
            wait_for(l, &g_tag_stream, 100);
    }
    assert_int_equal(n, COMEM_ECLOSED);

    /* Removed and closed with its read pending (the completion port's packet still due), then the loop. */
    comem_loop_remove_stream(l, srv);
    comem_stream_close(srv);
    comem_loop_remove_listener(l, ls);
    comem_listener_close(ls);
    assert_quiet(l);
    comem_loop_close(l);
}

/* ---- sending through the loop ---- */

#define CHUNK (64 * 1024)
#define PERIOD 251 /* the stream's byte k is k % PERIOD: any run of it starts somewhere in one buffer */
static uint8_t g_pattern[CHUNK + PERIOD];

/* Reads n bytes of the pattern from s, starting at stream offset at; false at the first that differs. */
static bool read_pattern(comem_stream *s, size_t at, size_t n)
{
    static uint8_t buf[CHUNK];
    while (n > 0) {
        int got = comem_stream_read(s, buf, n < sizeof buf ? n : sizeof buf, 10000);
        if (got <= 0)
            return false;
        for (int i = 0; i < got; i++)
            if (buf[i] != (uint8_t)((at + (size_t)i) % PERIOD))
                return false;
        at += (size_t)got;
        n -= (size_t)got;
    }
    return true;
}

/*
 * A stream in the loop is sent to without waiting: it takes bytes until it has no room (the peer
 * reads nothing), says so, and once asked reports room only when the peer has read; then it takes
 * bytes again, and every byte arrives in order. Room is reported no more once not wanted, and a
 * send to a peer that has gone says closed.
 */
static void test_sends_take_what_there_is_room_for(void **s)
{
    (void)s;
    for (size_t i = 0; i < sizeof g_pattern; i++)
        g_pattern[i] = (uint8_t)(i % PERIOD);
    comem_loop *l = NULL;
    assert_int_equal(comem_loop_open(&l), COMEM_OK);
    comem_stream *srv = NULL;
    client cl;
    comem_listener *ls = connected(l, &srv, &cl);
    assert_int_equal(comem_loop_add_stream(l, srv, &g_tag_stream), COMEM_OK);

    /* Fill it: send until it takes nothing and no room comes while the peer reads nothing (on
       Windows a write in flight may still complete into the pipe's buffer: room again). */
    size_t sent = 0;
    int rc = 0;
    bool full = false;
    while (!full && sent < ((size_t)64 << 20)) {
        rc = comem_loop_send(l, srv, g_pattern + sent % PERIOD, CHUNK, NULL, 0);
        if (rc > 0) {
            assert_true(rc <= CHUNK);
            sent += (size_t)rc;
            continue;
        }
        assert_int_equal(rc, COMEM_ETIMEDOUT); /* it takes nothing now */
        assert_int_equal(comem_loop_want_write(l, srv, true), COMEM_OK);
        full = wait_for(l, &g_tag_stream, 200) == 0; /* else room came: go on */
    }
    assert_true(full);
    assert_true(sent > 0);
    assert_true(read_pattern(cl.s, 0, sent));
    assert_int_equal(wait_for(l, &g_tag_stream, 10000), COMEM_LOOP_WRITE); /* room, and nothing to read */
    rc = comem_loop_send(l, srv, g_pattern + sent % PERIOD, 1000, NULL, 0);
    assert_int_equal(rc, 1000);
    assert_true(read_pattern(cl.s, sent, 1000));
    sent += 1000;

    assert_int_equal(comem_loop_want_write(l, srv, false), COMEM_OK);
    comem_loop_event ev[8]; /* a write's completion may still be due: it reports nothing now */
    assert_int_equal(comem_loop_wait(l, ev, 8, 200), 0);
    assert_quiet(l);

    comem_stream_close(cl.s); /* the peer goes: sending says so, at once or after what was in flight */
    for (int i = 0; i < 100 && (rc = comem_loop_send(l, srv, g_pattern, 100, NULL, 0)) != COMEM_ECLOSED; i++) {
        assert_true(rc > 0 || rc == COMEM_ETIMEDOUT);
        comem_loop_wait(l, ev, 8, 50);
    }
    assert_int_equal(rc, COMEM_ECLOSED);

    comem_loop_remove_stream(l, srv);
    comem_stream_close(srv);
    comem_loop_remove_listener(l, ls);
    comem_listener_close(ls);
    comem_loop_close(l);
}

/* A wait in microseconds ends at its deadline when nothing is ready (rounded up to a millisecond where the system waits in those). */
static void test_a_wait_in_microseconds(void **s)
{
    (void)s;
    comem_loop *l = NULL;
    assert_int_equal(comem_loop_open(&l), COMEM_OK);
    comem_loop_event ev[4];
    assert_int_equal(comem_loop_wait_us(l, ev, 4, 250), 0);
    assert_int_equal(comem_loop_wait_us(l, ev, 4, 0), 0);
    comem_loop_wake(l);
    assert_int_equal(comem_loop_wait_us(l, ev, 4, 250000), 1);
    assert_int_equal(ev[0].what, COMEM_LOOP_WOKEN);
    comem_loop_close(l);
}

typedef struct waker {
    comem_loop *l;
} waker;

static void *wake_main(void *arg)
{
    waker *w = arg;
#ifdef _WIN32
    Sleep(50);
#else
    usleep(50000);
#endif
    comem_loop_wake(w->l);
    return NULL;
}

static void test_wake_from_another_thread(void **s)
{
    (void)s;
    comem_loop *l = NULL;
    assert_int_equal(comem_loop_open(&l), COMEM_OK);
    waker w = {l};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wake_main, &w), 0);
    comem_loop_event ev[4];
    int n = comem_loop_wait(l, ev, 4, -1); /* no deadline: only the wake-up ends it */
    assert_int_equal(n, 1);
    assert_null(ev[0].tag);
    assert_int_equal(ev[0].what, COMEM_LOOP_WOKEN);
    pthread_join(t, NULL);
    assert_quiet(l); /* taken once */
    comem_loop_close(l);
}

static void test_a_child_reported_when_it_is_ended(void **s)
{
    (void)s;
    comem_loop *l = NULL;
    assert_int_equal(comem_loop_open(&l), COMEM_OK);
    void *handle;
    int64_t pid = start_child(120000, &handle);
    comem_proc_watch *w;
    assert_int_equal(comem_proc_watch_open(pid, &w), COMEM_OK);
    assert_int_equal(comem_loop_add_process(l, w, &g_tag_child), COMEM_OK);
    assert_int_equal(wait_for(l, &g_tag_child, 100), 0); /* it sleeps */
    end_child(pid, handle);
    assert_int_equal(wait_for(l, &g_tag_child, 30000), COMEM_LOOP_EXITED);
    assert_int_equal(wait_for(l, &g_tag_child, 10000), COMEM_LOOP_EXITED); /* until it is removed */
    comem_loop_remove_process(l, w);
    comem_proc_watch_close(w);
    release_child(pid, handle);
    assert_int_equal(wait_for(l, NULL, 100), 0);
    comem_loop_close(l);
}

int main(int argc, char **argv)
{
    if (child_main(argc, argv, NULL))
        return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_accept_read_level_triggered_and_removed, setup, endpoint_teardown),
        cmocka_unit_test(test_wake_from_another_thread),
        cmocka_unit_test_setup_teardown(test_sends_take_what_there_is_room_for, setup, endpoint_teardown),
        cmocka_unit_test(test_a_wait_in_microseconds),
        cmocka_unit_test(test_a_child_reported_when_it_is_ended),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
