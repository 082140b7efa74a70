/* tools/comem/jsonout.c - shortest round-trip doubles for json-c output. */
#include "jsonout.h"

#include <stdio.h>

#include "base/size.h"

json_object *jnum(double v)
{
    char buf[40];
    comem_format_double(v, buf, sizeof buf);
    return json_object_new_double_s(v, buf);
}

json_object *jint(int64_t v) { return json_object_new_int64(v); }

void jprint(json_object *obj, int pretty)
{
    int flags = pretty ? (JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED) : JSON_C_TO_STRING_PLAIN;
    flags |= JSON_C_TO_STRING_NOSLASHESCAPE;
    puts(json_object_to_json_string_ext(obj, flags));
}
