/*
 * tools/common/snapshot.h - one status snapshot from the coordinator, for the commands that read it.
 *
 * Probes first (comem_probe), so that "nobody answers" comes with the reason
 * (nothing at the path, a stale socket, refused, frozen), then joins as a tool,
 * asks for the snapshot and parses it.
 */
#ifndef COMEM_TOOLS_SNAPSHOT_H
#define COMEM_TOOLS_SNAPSHOT_H

#include <json-c/json.h>
#include <stddef.h>

#include "comem/comem.h"

/*
 * Joins the coordinator at sock (NULL: the default) as a tool named name. On failure
 * writes "no coordinator answers: WHY" to why and returns a negative status.
 */
int snapshot_connect(const char *sock, const char *name, int timeout_ms, comem_client **out, char *why, size_t len);

/* The snapshot from a joined client (json_object_put it), or NULL with why filled. */
json_object *snapshot_read(comem_client *c, char *why, size_t len);

/* Joins, reads one snapshot and leaves: the snapshot (json_object_put it), or NULL with why filled. */
json_object *snapshot_fetch(const char *sock, const char *name, int timeout_ms, char *why, size_t len);

/* "--timeout SECONDS" to milliseconds (default 5 s, at most an hour); -1 with err on a bad value. */
int snapshot_timeout_ms(const char *text, char *err, size_t len);

#endif
