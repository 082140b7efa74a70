/*
 * tools/comem/calc_explain.h - the words behind a `comem calc` rule (--explain).
 */
#ifndef COMEM_TOOLS_CALC_EXPLAIN_H
#define COMEM_TOOLS_CALC_EXPLAIN_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>

#include "comem/calc.h" /* comem_comfyui_rules: whose rules a `comem calc` rule followed (--comfyui) */

/*
 * Writes to f which function the rule follows (and its version), the formula,
 * and the formula with `inputs` (flag name -> value, as given) put in, ending
 * in the figures of `result` (what calc prints). -1 for a rule it does not know.
 */
int calc_explain(FILE *f, const char *rule, const char *summary, json_object *inputs, json_object *result,
                 comem_comfyui_rules era);

#endif
