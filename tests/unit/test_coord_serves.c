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
 *
 * WDDM readings (Windows' per-process budgets): two processes' reports on one adapter are added up
 * in the status, a new report replaces a session's last, a session gone takes its figures with it;
 * a library client's own reading is sent at a node's end (under wine, of wine's adapter; on Linux
 * there is none to send, and it says so). A report that names the card by its CUDA UUID gives the
 * process's context floor where the card has no figure for it; under wine, a process running the
 * scripted CUDA driver names its adapter's card itself, and the coordinator on that driver knows it.
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

#include <json-c/json.h>

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
#ifdef _WIN32
#include "probe/cuda_driver.h"
#include "probe/wddm.h"
#endif

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

/* Says WDDM with n adapters, (luid, usage) pairs, budget 8 GiB each; the first named by CUDA uuid
   where one is given. */
static void raw_wddm_named(comem_stream *st, int n, const uint64_t *luid, const int64_t *usage, const char *uuid)
{
    static comem_msg m;
    memset(&m, 0, sizeof m);
    m.type = COMEM_MSG_WDDM;
    m.u.wddm.n = (uint16_t)n;
    for (int i = 0; i < n; i++)
        m.u.wddm.items[i] = (comem_wire_wddm){.luid = luid[i], .budget = 8 * GIB, .usage = usage[i]};
    if (uuid)
        snprintf(m.u.wddm.items[0].uuid, sizeof m.u.wddm.items[0].uuid, "%s", uuid);
    raw_send(st, &m);
}

static void raw_wddm(comem_stream *st, int n, const uint64_t *luid, const int64_t *usage)
{
    raw_wddm_named(st, n, luid, usage, NULL);
}

/* The status's "wddm" through a library client (a tool); the caller puts the root. */
static json_object *status_wddm(comem_client *tool, json_object **root)
{
    char *text = NULL;
    assert_int_equal(comem_status_json(tool, &text), COMEM_OK);
    *root = json_tokener_parse(text);
    comem_free(text);
    assert_non_null(*root);
    json_object *w = NULL;
    assert_true(json_object_object_get_ex(*root, "wddm", &w));
    assert_true(json_object_is_type(w, json_type_array));
    return w;
}

static int64_t get_i(json_object *o, const char *k)
{
    json_object *v = NULL;
    assert_true(json_object_object_get_ex(o, k, &v));
    return json_object_get_int64(v);
}

static const char *get_s(json_object *o, const char *k)
{
    json_object *v = NULL;
    assert_true(json_object_object_get_ex(o, k, &v));
    return json_object_get_string(v);
}

/*
 * Waits until the status's "wddm" has n adapters, the one at `at` using `usage` (reports are not
 * replied to; n 0: none): its root, to put, and the list in *w.
 */
static json_object *wddm_when(comem_client *tool, size_t n, size_t at, int64_t usage, json_object **w)
{
    json_object *root = NULL;
    for (int i = 0; i < 500; i++) {
        *w = status_wddm(tool, &root);
        if (json_object_array_length(*w) == n && (n == 0 || get_i(json_object_array_get_idx(*w, at), "usage") == usage))
            return root;
        json_object_put(root);
        pause_ms(10);
    }
    *w = status_wddm(tool, &root);
    assert_int_equal(json_object_array_length(*w), n);
    if (n > 0)
        assert_int_equal(get_i(json_object_array_get_idx(*w, at), "usage"), usage);
    return root;
}

/* A coordinator on this test's card, and a library client (a tool) of it that reads its status. */
static comem_client *coordinator_and_tool(comem_coord **coord)
{
    assert_int_equal(comem_coord_start(g_endpoint.name, g_card, coord), COMEM_OK);
    comem_client *tool = NULL;
    assert_int_equal(comem_client_open(g_endpoint.name, COMEM_CLIENT_TOOL, "look", -1, COMEM_OPEN_NO_LOCAL, &tool),
                     COMEM_OK);
    return tool;
}

static void test_wddm_readings_are_added_up_per_adapter(void **s)
{
    (void)s;
    comem_coord *coord = NULL;
    comem_client *tool = coordinator_and_tool(&coord);
    comem_stream *a = NULL, *b = NULL;
    static comem_msg m;
    assert_int_equal(comem_connect(g_endpoint.name, 10000, &a), COMEM_OK);
    raw_hello(a, "alpha", &m, NULL, NULL);
    assert_int_equal(comem_connect(g_endpoint.name, 10000, &b), COMEM_OK);
    raw_hello(b, "beta", &m, NULL, NULL);
    const uint64_t card = 0x00000001000012abull, other = 0x0000000000000777ull;

    raw_wddm(a, 2, (uint64_t[]){card, other}, (int64_t[]){1 * GIB, 5 * GIB});
    raw_wddm(b, 1, (uint64_t[]){card}, (int64_t[]){2 * GIB});
    json_object *w, *root = wddm_when(tool, 2, 1, 3 * GIB, &w); /* until both reports are in */
    json_object *first = json_object_array_get_idx(w, 0), *second = json_object_array_get_idx(w, 1);
    assert_string_equal(get_s(first, "luid"), "0x0000000000000777"); /* in LUID order */
    assert_int_equal(get_i(first, "usage"), 5 * GIB);
    assert_string_equal(get_s(second, "luid"), "0x00000001000012ab");
    assert_int_equal(get_i(second, "usage"), 3 * GIB); /* 1 + 2: the two processes' own readings */
    json_object *procs = NULL;
    assert_true(json_object_object_get_ex(second, "processes", &procs));
    assert_int_equal(json_object_array_length(procs), 2);
    assert_string_equal(get_s(json_object_array_get_idx(procs, 0), "name"), "alpha");
    assert_int_equal(get_i(json_object_array_get_idx(procs, 0), "budget"), 8 * GIB);
    assert_int_equal(get_i(json_object_array_get_idx(procs, 0), "pid"), own_pid());
    json_object_put(root);

    /* A new report replaces the last: alpha now uses 4 GiB of the card and nothing of the other. */
    raw_wddm(a, 1, (uint64_t[]){card}, (int64_t[]){4 * GIB});
    json_object_put(wddm_when(tool, 1, 0, 6 * GIB, &w));
    /* A session gone takes its reading with it. */
    comem_stream_close(b);
    json_object_put(wddm_when(tool, 1, 0, 4 * GIB, &w));

    comem_stream_close(a);
    comem_client_close(tool);
    comem_coord_stop(coord);
}

/* Σ context_floor on device 0 of this process's sessions (tests run one process: every session is ours). */
static int64_t own_floors(comem_client *tool)
{
    char *text = NULL;
    assert_int_equal(comem_status_json(tool, &text), COMEM_OK);
    json_object *root = json_tokener_parse(text), *devs = NULL, *procs = NULL;
    comem_free(text);
    assert_true(json_object_object_get_ex(root, "devices", &devs));
    assert_true(json_object_object_get_ex(json_object_array_get_idx(devs, 0), "processes", &procs));
    int64_t sum = 0;
    for (size_t i = 0; i < json_object_array_length(procs); i++) {
        json_object *p = json_object_array_get_idx(procs, i);
        if (get_i(p, "pid") == own_pid())
            sum += get_i(p, "context_floor");
    }
    json_object_put(root);
    return sum;
}

/* Waits until this process's floors on the card add up to want (the card is read again after a report). */
static void floors_become(comem_client *tool, int64_t want)
{
    int64_t got = -1;
    for (int i = 0; i < 500 && (got = own_floors(tool)) != want; i++)
        pause_ms(10);
    assert_int_equal(got, want);
}

/*
 * A report that names the card by its CUDA UUID is about that card: where the card has no figure for a
 * process (here the simulated card, which this process never touched; on Windows NVML, which lists
 * none under WDDM), the process's context floor is what it used beyond what the ledger saw it hold
 * when it reported, shared by its sessions. A registration of bytes it had allocated before is not
 * counted twice once it reports again; its floor goes with its report.
 */
static void test_a_wddm_reading_naming_the_card_gives_the_floor(void **s)
{
    (void)s;
    comem_coord *coord = NULL;
    comem_client *tool = coordinator_and_tool(&coord);
    comem_stream *a = NULL;
    static comem_msg m;
    assert_int_equal(comem_connect(g_endpoint.name, 10000, &a), COMEM_OK);
    raw_hello(a, "alpha", &m, NULL, NULL);
    m.type = COMEM_MSG_DEVICES;
    m.request_id = 2;
    raw_send(a, &m);
    raw_read(a, &m, NULL, NULL);
    char uuid[COMEM_WIRE_TEXT_MAX];
    snprintf(uuid, sizeof uuid, "%s", m.u.devices_reply.devices[0].uuid);
    const uint64_t card = 0x00000001000012abull, other = 0x0000000000000777ull;
    assert_int_equal(own_floors(tool), 0);

    /* The card's adapter, named, using 1.5 GiB; another adapter, not a card of ours, 5 GiB. */
    raw_wddm_named(a, 2, (uint64_t[]){card, other}, (int64_t[]){3 * GIB / 2, 5 * GIB}, uuid);
    floors_become(tool, 3 * GIB / 2);
    json_object *w, *root = wddm_when(tool, 2, 1, 3 * GIB / 2, &w);
    json_object *named = json_object_array_get_idx(w, 1), *unnamed = json_object_array_get_idx(w, 0), *procs = NULL;
    assert_int_equal(get_i(named, "device"), 0);
    assert_true(json_object_object_get_ex(named, "processes", &procs));
    assert_int_equal(get_i(json_object_array_get_idx(procs, 0), "beyond_ledger"), 3 * GIB / 2);
    json_object *v = NULL;
    assert_true(json_object_object_get_ex(unnamed, "device", &v) && v == NULL); /* null: no card of ours */
    json_object_put(root);

    /* A worker of the same process registers a model of 1 GiB it had loaded: part of the 1.5 GiB. */
    comem_client *worker = NULL;
    assert_int_equal(comem_client_open(g_endpoint.name, COMEM_CLIENT_WORKER, "w", -1, COMEM_OPEN_NO_LOCAL, &worker),
                     COMEM_OK);
    uint64_t models = 0, entry = 0;
    assert_int_equal(comem_holder_add(worker, "models", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &models), COMEM_OK);
    assert_int_equal(comem_entry_add(worker, models, "unet", 1 * GIB, 1 * GIB, 0, &entry), COMEM_OK);
    /* Its 1 GiB comes off what the process used beyond the ledger (a context's worth would stay): 0.5 GiB,
       shared by the process's three sessions (the tool, alpha, the worker). */
    floors_become(tool, 3 * (GIB / 2 / 3));
    /* The next report, 2.5 GiB with the model, 1 GiB of it registered: 1.5 GiB beyond, counted once. */
    raw_wddm_named(a, 1, (uint64_t[]){card}, (int64_t[]){5 * GIB / 2}, uuid);
    json_object_put(wddm_when(tool, 1, 0, 5 * GIB / 2, &w));
    floors_become(tool, 3 * GIB / 2);

    /* The session that reported goes: nothing says what the process uses beyond the ledger now. */
    comem_stream_close(a);
    json_object_put(wddm_when(tool, 0, 0, 0, &w));
    floors_become(tool, 0);

    comem_client_close(worker);
    comem_client_close(tool);
    comem_coord_stop(coord);
}

static void test_a_library_client_sends_its_own_wddm_reading(void **s)
{
    (void)s;
    comem_coord *coord = NULL;
    assert_int_equal(comem_coord_start(g_endpoint.name, g_card, &coord), COMEM_OK);
    comem_client *c = NULL;
    assert_int_equal(comem_client_open(g_endpoint.name, COMEM_CLIENT_WORKER, "dxgi", -1, COMEM_OPEN_NO_LOCAL, &c),
                     COMEM_OK);
    /* A node's end sends it by itself. */
    assert_int_equal(comem_holder_busy(c, 0, 1, "p"), COMEM_OK);
    assert_int_equal(comem_holder_busy(c, 0, 0, NULL), COMEM_OK);
    int rc = comem_wddm_report(c);
    json_object *w, *root = NULL;
#ifdef _WIN32
    if (rc == COMEM_ENOENT) { /* wine's DXGI describes no adapter without a display */
        comem_client_close(c);
        comem_coord_stop(coord);
        skip();
    }
    assert_int_equal(rc, COMEM_OK);
    for (int i = 0; i < 500; i++) { /* not replied to: until it is in */
        w = status_wddm(c, &root);
        if (json_object_array_length(w) > 0)
            break;
        json_object_put(root);
        pause_ms(10);
    }
    assert_true(json_object_array_length(w) > 0);
    json_object *procs = NULL;
    assert_true(json_object_object_get_ex(json_object_array_get_idx(w, 0), "processes", &procs));
    json_object *p = json_object_array_get_idx(procs, 0);
    assert_string_equal(get_s(p, "name"), "dxgi");
    assert_int_equal(get_i(p, "pid"), own_pid());
    assert_true(get_i(p, "budget") > 0); /* wine's adapter: the host's RAM as its budget */
#else
    assert_int_equal(rc, COMEM_ENOTSUP); /* no WDDM: nothing was sent at the node's end either */
    w = status_wddm(c, &root);
    assert_int_equal(json_object_array_length(w), 0);
#endif
    json_object_put(root);
    comem_client_close(c);
    comem_coord_stop(coord);
}

#ifdef _WIN32
/*
 * A process that runs CUDA (here the scripted driver, whose device 0 has the adapter's LUID) names the
 * card of each adapter it reports, and the coordinator, reading the same driver, knows it as its
 * device 0. Under WDDM the driver's free figure is the process's own (process-local scope).
 */
static void test_a_cuda_process_names_its_adapters_card(void **s)
{
    (void)s;
    comem_wddm_adapter ad[COMEM_WDDM_MAX_ADAPTERS];
    int n = 0;
    if (comem_wddm_adapters(ad, COMEM_WDDM_MAX_ADAPTERS, &n) != COMEM_OK || n == 0)
        skip(); /* wine's DXGI describes no adapter without a display */
    char lib[MAX_PATH + 32], luid[24];
    snprintf(lib, sizeof lib, "%s/libfake_cuda.dll", test_bin_dir());
    snprintf(luid, sizeof luid, "%llx", (unsigned long long)ad[0].luid);
    _putenv_s("COMEM_CUDA_LIBRARY", lib);
    _putenv_s("FAKE_CUDA_LUID", luid);
    assert_int_equal(comem_cuda_load(NULL), COMEM_OK); /* the process runs CUDA, as PyTorch would have it */
    comem_coord *coord = NULL;
    assert_int_equal(comem_coord_start(g_endpoint.name, "cuda", &coord), COMEM_OK);
    comem_client *c = NULL;
    assert_int_equal(comem_client_open(g_endpoint.name, COMEM_CLIENT_WORKER, "cuda", -1, COMEM_OPEN_NO_LOCAL, &c),
                     COMEM_OK);
    assert_int_equal(comem_wddm_report(c), COMEM_OK);
    json_object *w = NULL, *root = NULL, *named = NULL;
    for (int i = 0; i < 500 && !named; i++) { /* not replied to: until it is in */
        w = status_wddm(c, &root);
        for (size_t k = 0; k < json_object_array_length(w); k++) {
            json_object *a = json_object_array_get_idx(w, k);
            if (strtoull(get_s(a, "luid"), NULL, 16) == ad[0].luid) /* "0x...": strtoull takes the prefix */
                named = a;
        }
        if (!named) {
            json_object_put(root);
            pause_ms(10);
        }
    }
    assert_non_null(named);
    assert_int_equal(get_i(named, "device"), 0);
    json_object *procs = NULL, *devs = NULL;
    assert_true(json_object_object_get_ex(named, "processes", &procs));
    assert_int_equal(get_i(json_object_array_get_idx(procs, 0), "device"), 0);
    assert_true(json_object_object_get_ex(root, "devices", &devs));
    json_object *dev = json_object_array_get_idx(devs, 0);
    assert_string_equal(get_s(dev, "uuid"), "GPU-00112233-4455-6677-8899-aabbccddeeff");
    assert_string_equal(get_s(dev, "scope"), "process-local"); /* WDDM: not a TCC card */
    json_object_put(root);
    comem_client_close(c);
    comem_coord_stop(coord);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_client_gets_its_session_and_its_shares, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wddm_readings_are_added_up_per_adapter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_wddm_reading_naming_the_card_gives_the_floor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_library_client_sends_its_own_wddm_reading, setup, teardown),
#ifdef _WIN32
        cmocka_unit_test_setup_teardown(test_a_cuda_process_names_its_adapters_card, setup, teardown),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
