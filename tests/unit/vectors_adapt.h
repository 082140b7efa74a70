/*
 * tests/unit/vectors_adapt.h - run one conformance vector through the C functions.
 *
 * Each adapter reads a case's "input" (keys named like the CLI flags) and
 * returns a JSON object with the rule's outputs, computed by calling the
 * arith/ functions directly. The checker compares it with "expect".
 */
#ifndef COMEM_TESTS_VECTORS_ADAPT_H
#define COMEM_TESTS_VECTORS_ADAPT_H

#include <json-c/json.h>

/* Returns a new object (caller puts it), or NULL for an unknown rule. */
json_object *vector_run(const char *rule, json_object *input);

#endif
