/*
 * tools/comem/jsonout.h - JSON numbers that read back as the same double.
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
/* Prints obj and a newline to stdout; pretty when pretty is non-zero. */
void jprint(json_object *obj, int pretty);

#endif
