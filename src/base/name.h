/*
 * base/name.h - the rule every name follows: process, holder and entry names, prompt ids.
 *
 * Names reach every output (status and its JSON, metrics labels, comem watch's
 * screen, the coordinator's log), so one rule holds them at the protocol's
 * boundary, in the coordinator and in the library alike: well-formed UTF-8
 * (no overlong forms, no surrogates, nothing past U+10FFFF) with no control
 * character (C0, DEL, C1): no escape sequence, no line break, no bell can ride
 * in a name. Length is the caller's rule (the wire's field).
 */
#ifndef COMEM_BASE_NAME_H
#define COMEM_BASE_NAME_H

#include <stddef.h>

#define COMEM_NAME_MAX 64 /* bytes a name may take, its NUL included: the protocol's field and the ledger's */

/*
 * COMEM_OK for a name that follows the rule; COMEM_EINVAL with the rule it broke
 * and where ("not UTF-8 at byte 3", "a control character (U+001B) at byte 0")
 * in why (whylen 0: not written). The name itself is never copied into why.
 */
int comem_name_check(const char *name, char *why, size_t whylen);

#endif
