/* tools/common/jsonout.c - shortest round-trip doubles for json-c output. */
#include "common/jsonout.h"

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

json_object *jget(json_object *o, const char *k)
{
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, k, &v) ? v : NULL;
}

const char *jget_str(json_object *o, const char *k)
{
    json_object *v = jget(o, k);
    return v ? json_object_get_string(v) : "";
}

int64_t jget_int(json_object *o, const char *k, int64_t unknown)
{
    json_object *v = jget(o, k);
    return v ? json_object_get_int64(v) : unknown;
}

size_t jlen(json_object *a) { return a && json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0; }
