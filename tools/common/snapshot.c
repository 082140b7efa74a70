/* tools/common/snapshot.c - probe, join as a tool, read and parse the status snapshot. */
#include "common/snapshot.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/size.h"
#include "comem/common.h"

int snapshot_connect(const char *sock, const char *name, int timeout_ms, comem_client **out, char *why, size_t len)
{
    *out = NULL;
    char reason[512];
    int rc = comem_probe(sock, timeout_ms, reason, sizeof reason);
    if (rc != COMEM_OK) {
        snprintf(why, len, "no coordinator answers: %s", reason);
        return rc;
    }
    rc = comem_client_open(sock, COMEM_CLIENT_TOOL, name, -1, COMEM_OPEN_NO_LOCAL, out);
    if (rc != COMEM_OK) {
        snprintf(why, len, "no coordinator answers: it answered once, then this client could not join (%s)",
                 comem_status_str(rc));
        return rc;
    }
    comem_client_set_timeout(*out, timeout_ms);
    return COMEM_OK;
}

/*
 * The reader is a session too, but nobody asked about it: its own process entry (a tool with
 * this pid) leaves every device's list, and the session count no longer counts it.
 */
static void drop_self(json_object *root)
{
    json_object *devs = NULL, *co = NULL, *n = NULL;
    bool seen = false;
    if (json_object_object_get_ex(root, "devices", &devs) && json_object_is_type(devs, json_type_array)) {
        for (size_t d = 0; d < json_object_array_length(devs); d++) {
            json_object *ps = NULL, *dv = json_object_array_get_idx(devs, d);
            if (!json_object_object_get_ex(dv, "processes", &ps) || !json_object_is_type(ps, json_type_array))
                continue;
            for (size_t i = json_object_array_length(ps); i-- > 0;) {
                json_object *p = json_object_array_get_idx(ps, i), *pid = NULL, *role = NULL;
                if (json_object_object_get_ex(p, "pid", &pid) && json_object_get_int64(pid) == (int64_t)getpid() &&
                    json_object_object_get_ex(p, "role", &role) && !strcmp(json_object_get_string(role), "tool")) {
                    json_object_array_del_idx(ps, i, 1);
                    seen = true;
                }
            }
        }
    }
    if (seen && json_object_object_get_ex(root, "coordinator", &co) && json_object_object_get_ex(co, "sessions", &n) &&
        json_object_get_int64(n) > 0)
        json_object_object_add(co, "sessions", json_object_new_int64(json_object_get_int64(n) - 1));
}

json_object *snapshot_read(comem_client *c, char *why, size_t len)
{
    char *text = NULL;
    int rc = comem_status_json(c, &text);
    if (rc != COMEM_OK || !text) {
        snprintf(why, len, "the coordinator sent no snapshot (%s)", comem_status_str(rc));
        comem_free(text);
        return NULL;
    }
    json_object *root = json_tokener_parse(text);
    comem_free(text);
    if (!root)
        snprintf(why, len, "the coordinator sent unreadable JSON");
    else
        drop_self(root);
    return root;
}

int snapshot_timeout_ms(const char *text, char *err, size_t len)
{
    double secs = 5;
    if (text && comem_parse_seconds("--timeout", text, &secs, err, len) != COMEM_OK)
        return -1;
    return secs * 1000 > 3600000 ? 3600000 : secs * 1000 < 1 ? 1 : (int)(secs * 1000);
}

json_object *snapshot_fetch(const char *sock, const char *name, int timeout_ms, char *why, size_t len)
{
    comem_client *c = NULL;
    json_object *st = NULL;
    if (snapshot_connect(sock, name, timeout_ms, &c, why, len) == 0)
        st = snapshot_read(c, why, len);
    if (c)
        comem_client_close(c);
    return st;
}
