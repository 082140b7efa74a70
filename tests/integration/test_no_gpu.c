/*
 * tests/integration/test_no_gpu.c - a machine without a GPU: comem manages host RAM only, never an imaginary card.
 *
 * NVML is made unavailable whatever the machine (COMEM_NVML_LIBRARY names a
 * file that does not exist; auto tries nothing else), and COMEM_DEVICE and
 * COMEM_RAM are unset, as on a CPU-only ComfyUI's machine. Covered: comemd
 * --device auto --ram 4GiB serves host RAM as its only device and says so
 * (status's source, `comem status`, metrics, watch); a card ordinal is
 * refused with COMEM_ENODEV while host RAM admits; without --ram host RAM is
 * on ("machine"); with host RAM switched off it refuses to start, saying why;
 * a client with no coordinator decides locally over no card; `comem devices`
 * lists no card and notes why. Before, auto fell back to a simulated 24 GiB
 * card and every one of these admitted against it.
 */
#include "unit/cmocka_all.h"

#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "comem/comem.h"
#include "harness.h"
#include "probe/hostram.h"

static harness g_h;
static char g_out[1 << 16], g_err[1 << 16];

/* A harness directory, and this process's environment (inherited by comemd and the tools) without a GPU. */
static int setup(void **s)
{
    harness *h = &g_h;
    h_init(h, "sim:1GiB"); /* the spec is never served: every test asks for --device auto */
    char lib[1024];
    snprintf(lib, sizeof lib, "%s/no-libnvidia-ml.so.1", h->dir);
    setenv("COMEM_NVML_LIBRARY", lib, 1); /* no GPU, whatever the machine */
    setenv("COMEM_RUNTIME_DIR", h->dir, 1);
    unsetenv("COMEM_DEVICE");
    unsetenv("COMEM_RAM");
    *s = h;
    return 0;
}

static json_object *status_json(const harness *h)
{
    char *text = h_status(h);
    assert_non_null(text);
    json_object *root = json_tokener_parse(text);
    comem_free(text);
    assert_non_null(root);
    return root;
}

static json_object *get(json_object *o, const char *key)
{
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

/* The coordinator's devices: exactly one, host RAM; its source is the empty one. Returns its capacity. */
static int64_t only_host_ram(const harness *h)
{
    json_object *root = status_json(h);
    json_object *devs = get(root, "devices");
    assert_non_null(devs);
    assert_int_equal(json_object_array_length(devs), 1);
    json_object *d0 = json_object_array_get_idx(devs, 0);
    assert_non_null(get(d0, "host_ram")); /* null for a card */
    assert_string_equal(json_object_get_string(get(d0, "uuid")), COMEM_HOSTRAM_UUID);
    assert_string_equal(json_object_get_string(get(get(root, "coordinator"), "source")), "none");
    assert_null(get(get(root, "coordinator"), "card_spec")); /* no simulated card for a client to share */
    int64_t cap = json_object_get_int64(get(d0, "capacity"));
    json_object_put(root);
    return cap;
}

static void test_auto_without_gpu_serves_host_ram_only(void **s)
{
    harness *h = *s;
    const char *extra[] = {"--device", "auto", "--ram", "4GiB", NULL};
    h_start(h, extra);
    assert_int_equal(only_host_ram(h), 4 * COMEM_GIB);

    /* `comem status` says it where a person looks, before the device */
    const char *st[] = {"comem", "status", "--socket", h->sock, NULL};
    assert_int_equal(h_run(st, NULL, 10000, g_out, sizeof g_out, g_err, sizeof g_err), 0);
    print_message("%s", g_out);
    const char *said = strstr(g_out, "no GPU: managing host RAM only\n");
    assert_non_null(said);
    assert_true(said < strstr(g_out, "device 0  host RAM"));

    /* a card ordinal is no device; host RAM's ordinal admits */
    comem_client *c = NULL;
    assert_int_equal(comem_client_open(h->sock, COMEM_CLIENT_WORKER, "cpu-only", -1, COMEM_OPEN_NO_LOCAL, &c),
                     COMEM_OK);
    uint64_t holder = 0, grant = 0;
    assert_int_equal(comem_holder_add(c, "card", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder), COMEM_ENODEV);
    assert_int_equal(comem_admit(c, 0, 0, 64 * COMEM_MIB, 0, 0, NULL, 0, 5000, &grant, NULL), COMEM_ENODEV);
    assert_int_equal(grant, 0);
    assert_int_equal(comem_holder_add(c, "ram", COMEM_DEVICE_HOST_RAM, COMEM_KIND_MODELS, 0, NULL, NULL, &holder),
                     COMEM_OK);
    assert_int_equal(comem_admit(c, COMEM_DEVICE_HOST_RAM, holder, 64 * COMEM_MIB, 0, 0, NULL, 0, 5000, &grant, NULL),
                     COMEM_OK);
    assert_true(grant != 0);
    assert_int_equal(h_status_num(h, "devices.0.granted"), 64 * COMEM_MIB);
    assert_int_equal(comem_grant_done(c, grant, 0, 0), COMEM_OK);
    comem_client_close(c);

    /* metrics and watch take a ledger whose only device is host RAM */
    const char *met[] = {"comem", "metrics", "--socket", h->sock, NULL};
    assert_int_equal(h_run(met, NULL, 10000, g_out, sizeof g_out, g_err, sizeof g_err), 0);
    assert_non_null(strstr(g_out, "comem_device_capacity_bytes{device=\"0\",uuid=\"" COMEM_HOSTRAM_UUID "\""));
    const char *watch[] = {"comem", "watch", "--socket", h->sock, "--plain", "--count", "1", NULL};
    assert_int_equal(h_run(watch, NULL, 10000, g_out, sizeof g_out, g_err, sizeof g_err), 0);
    assert_non_null(strstr(g_out, "device 0  host RAM"));
    assert_int_equal(h_status_num(h, "coordinator.violations"), 0);
}

static void test_host_ram_is_on_without_ram_flag(void **s)
{
    harness *h = *s;
    const char *extra[] = {"--device", "auto", NULL};
    h_start(h, extra);
    assert_true(only_host_ram(h) > 0); /* the machine's RAM (cgroup-clamped) */
    json_object *root = status_json(h);
    json_object *d0 = json_object_array_get_idx(get(root, "devices"), 0);
    assert_non_null(get(get(d0, "host_ram"), "mem_total"));
    assert_null(get(get(d0, "host_ram"), "budget")); /* "machine": no bounded budget */
    json_object_put(root);
}

static void test_no_card_and_ram_off_refuses_to_start(void **s)
{
    harness *h = *s;
    const char *argv[] = {"comemd", "--socket", h->sock, "--device", "auto", NULL};
    const char *envs[] = {"COMEM_RAM=off", NULL};
    assert_int_equal(h_run(argv, envs, 10000, g_out, sizeof g_out, g_err, sizeof g_err), 1);
    print_message("%s", g_err);
    assert_non_null(strstr(g_err, "no card to coordinate (no GPU found) and host RAM is off"));
    assert_non_null(strstr(g_err, "nothing to serve"));
}

static void test_local_decisions_have_no_card(void **s)
{
    harness *h = *s;
    comem_client *c = NULL;
    assert_int_equal(comem_client_open(h->sock, COMEM_CLIENT_WORKER, "alone", -1, 0, &c), COMEM_OK); /* nobody there */
    uint64_t holder = 0, grant = 0;
    assert_int_equal(comem_holder_add(c, "card", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &holder), COMEM_OK);
    assert_int_equal(comem_admit(c, 0, holder, 64 * COMEM_MIB, 0, 0, NULL, 0, 1000, &grant, NULL), COMEM_ENODEV);
    assert_int_equal(grant, 0);
    comem_client_close(c);
}

static void test_devices_lists_no_card(void **s)
{
    (void)s;
    const char *argv[] = {"comem", "devices", "--json", NULL};
    assert_int_equal(h_run(argv, NULL, 10000, g_out, sizeof g_out, g_err, sizeof g_err), 0);
    json_object *root = json_tokener_parse(g_out);
    assert_non_null(root);
    assert_int_equal(json_object_array_length(get(root, "devices")), 0);
    assert_non_null(strstr(json_object_get_string(get(root, "note")), "no GPU found"));
    assert_non_null(get(root, "host"));
    json_object_put(root);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_auto_without_gpu_serves_host_ram_only, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_host_ram_is_on_without_ram_flag, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_no_card_and_ram_off_refuses_to_start, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_local_decisions_have_no_card, setup, h_teardown),
        cmocka_unit_test_setup_teardown(test_devices_lists_no_card, setup, h_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
