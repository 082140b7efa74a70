/* tools/comem/snapshot.c - probe, join as a tool, read and parse the status snapshot. */
#include "snapshot.h"

#include <stdio.h>

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
    return root;
}

int snapshot_timeout_ms(const char *text, char *err, size_t len)
{
    double secs = 5;
    if (text && comem_parse_seconds("--timeout", text, &secs, err, len) != COMEM_OK)
        return -1;
    return secs * 1000 > 3600000 ? 3600000 : secs * 1000 < 1 ? 1 : (int)(secs * 1000);
}
