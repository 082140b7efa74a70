/*
 * tools/common/prom.h - the coordinator's status snapshot in the Prometheus text exposition format.
 *
 * One function, shared by `comem metrics` (prints it) and `comemd --metrics PATH`
 * (writes it atomically for node_exporter's textfile collector). The metric
 * names, their labels and units are listed in docs/json.md and comem(1).
 */
#ifndef COMEM_TOOLS_PROM_H
#define COMEM_TOOLS_PROM_H

#include <json-c/json.h>

/* The exposition text for a status snapshot (malloc'd, the caller frees), or NULL without memory. */
char *comem_prom_text(json_object *status);

/* The text written when no snapshot can be had: comem_up 0, so a scrape tells "down" from "absent". */
char *comem_prom_down(void);

/*
 * Writes text to path atomically: a new temporary file in the same directory (created
 * exclusively, so a link planted there is never followed), mode 0640, fsync'ed, then
 * renamed over path, so a reader sees the old file or the new one, never half. A path
 * that holds something not this user's regular file (a link, a folder, another user's
 * file) is left alone: -1 with errno EEXIST (not a regular file) or EPERM (not ours).
 * 0, or -1 with errno set.
 */
int comem_prom_write_atomic(const char *path, const char *text);

#endif
