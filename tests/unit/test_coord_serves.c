/*
 * tests/unit/test_coord_serves.c - the coordinator serving a client over the transport, the same
 * assertions on Linux (a Unix socket) and on Windows (a named pipe, under wine in CI): the whole
 * coordinator (coord/), on a thread of this process (comem_coord_start), on a simulated card of its
 * own, and a client that speaks the wire protocol itself over os/stream.h.
 *
 * The client says HELLO and gets its session with the two shares the reply names: the sealed view,
 * which opens frozen and shows the card's capacity once the coordinator has published it, and the
 * booking area, which opens writable and carries the session's id and this process's pid. It asks
 * for the devices and gets the card; a second coordinator under the same address is refused while
 * the first runs; once stopped, the address takes a new one.
 */
#include "unit/cmocka_all.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#include <windows.h>
#else
#include <unistd.h>
#endif

#include "base/clock.h"
#include "comem/comem.h"
#include "comem/common.h"
#include "os/shm.h"
#include "os/stream.h"
#include "shm/book.h"
#include "shm/view.h"
#include "unit/endpoint.h"
#include "unit/rawwire.h"
#include "wire/wire.h"

#define GIB ((int64_t)1 << 30)

static char g_card[PATH_MAX + 64]; /* a simulated card of this test's own */

static int setup(void **s)
{
    (void)s;
    if (endpoint_make("coord") != 0)
        return -1;
    char card[sizeof g_card - 16];
    endpoint_file(card, sizeof card, "card");
    snprintf(g_card, sizeof g_card, "sim:4GiB:path=%s", card);
    return 0;
}


static int teardown(void **s)
{
    endpoint_remove_lock_file(); /* the rest goes with the endpoint's folder (Linux) or with its last handle (Windows) */
    return endpoint_teardown(s);
}

static void test_a_client_gets_its_session_and_its_shares(void **s)
{
    (void)s;
    comem_coord *coord = NULL;
    assert_int_equal(comem_coord_start(g_endpoint.name, g_card, &coord), COMEM_OK);
    comem_coord *second = NULL;
    assert_int_equal(comem_coord_start(g_endpoint.name, g_card, &second), COMEM_EEXIST); /* the lock says no */

    comem_stream *st = NULL;
    assert_int_equal(comem_connect(g_endpoint.name, 10000, &st), COMEM_OK);
    static comem_msg m;
    comem_shm_token beside[COMEM_STREAM_SHARES_MAX];
    int n_beside = 0;
    raw_hello(st, "serves-test", &m, beside, &n_beside);
    assert_int_equal(m.request_id, 1);
    assert_int_equal(m.u.hello_reply.proto_version, COMEM_WIRE_VERSION);
    assert_int_equal(m.u.hello_reply.n_devices, 1);
    uint64_t session = m.u.hello_reply.session_id;
    assert_true(session != 0);

    /* The sealed view: frozen, and showing the card once published. */
    comem_shm_token t;
    assert_int_equal(comem_shm_token_named(m.u.hello_reply.view_share, beside, n_beside, &t), COMEM_OK);
    comem_shm *view = comem_view_open_sealed(t);
    assert_non_null(view);
    const comem_view_shared *sh = comem_shm_addr(view);
    int64_t cap = 0;
    for (int i = 0; i < 1000 && (cap = atomic_load(&((comem_view_shared *)sh)->dev[0].capacity)) != 4 * GIB; i++)
        pause_ms(10);
    assert_int_equal(cap, 4 * GIB);

    /* The booking area: this session's and this process's. */
    assert_int_equal(comem_shm_token_named(m.u.hello_reply.area_share, beside, n_beside, &t), COMEM_OK);
    comem_shm *area = NULL;
    assert_int_equal(comem_shm_open(t, sizeof(book_area), COMEM_SHM_WRITABLE, &area), COMEM_OK);
    const book_area *a = comem_shm_addr(area);
    assert_int_equal(a->magic, BOOK_MAGIC);
    assert_int_equal(a->session, session);
    assert_int_equal(a->pid, (int32_t)own_pid());
    for (int i = 0; i < n_beside; i++)
        comem_shm_token_discard(beside[i]); /* none left: both were named */

    /* Its devices: the card. */
    memset(&m, 0, sizeof m);
    m.type = COMEM_MSG_DEVICES;
    m.request_id = 2;
    raw_send(st, &m);
    raw_read(st, &m, beside, &n_beside);
    assert_int_equal(n_beside, 0);
    assert_int_equal(m.type, COMEM_MSG_DEVICES_REPLY);
    assert_int_equal(m.request_id, 2);
    assert_int_equal(m.u.devices_reply.n, 1);
    assert_int_equal(m.u.devices_reply.devices[0].total, 4 * GIB);
    assert_non_null(strstr(m.u.devices_reply.devices[0].uuid, "SIM-"));

    comem_stream_close(st);
    comem_shm_close(area);
    comem_shm_close(view);
    comem_coord_stop(coord);
    assert_int_equal(comem_coord_start(g_endpoint.name, g_card, &coord), COMEM_OK); /* the address is free again */
    comem_coord_stop(coord);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_client_gets_its_session_and_its_shares, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
