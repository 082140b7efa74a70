/*
 * base/token.h - the shared secret (COMEM_TOKEN), read the same way by the coordinator and its clients.
 *
 * A HELLO carries the token as text of at most COMEM_TOKEN_MAX bytes. A value
 * longer than that cannot be sent whole, so it is refused where it is read,
 * with one message in both programs, rather than cut short in one of them
 * (the coordinator once kept its first 127 bytes and then accepted any HELLO
 * that carried only those).
 */
#ifndef COMEM_BASE_TOKEN_H
#define COMEM_BASE_TOKEN_H

#include <stddef.h>

#define COMEM_TOKEN_MAX 127 /* bytes; the protocol's text<128> */

/*
 * Copies COMEM_TOKEN ("" when unset) into buf (at least COMEM_TOKEN_MAX + 1
 * bytes). COMEM_OK, or COMEM_EINVAL with the one-line refusal in err.
 */
int comem_token_from_env(char *buf, size_t len, char *err, size_t errlen);

#endif
