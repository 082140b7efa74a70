/*
 * tools/common/jsonout.h - JSON numbers that read back as the same double, and the
 * readers of a status snapshot the commands share.
 *
 * json-c prints doubles with %.17g; comem prints the shortest text that
 * round-trips (as Python's repr does), so 8579868262.400001 reads as written.
 */
#ifndef COMEM_TOOLS_JSONOUT_H
#define COMEM_TOOLS_JSONOUT_H

#include <json-c/json.h>
#include <stdint.h>

json_object *jnum(double v);
json_object *jint(int64_t v);
/* Reading a status snapshot: o's member k, or NULL (o NULL, k absent, or JSON null). */
json_object *jget(json_object *o, const char *k);
/* Member k as a string; "" when it is missing or null. */
const char *jget_str(json_object *o, const char *k);
/* Member k as an integer; unknown when it is missing or null. */
int64_t jget_int(json_object *o, const char *k, int64_t unknown);
/* The length of array a; 0 when a is NULL or not an array. */
size_t jlen(json_object *a);

/* Prints obj and a newline to stdout; pretty when pretty is non-zero. */
void jprint(json_object *obj, int pretty);

#endif
