/*
 * client/client_internal.h - what the client wing offers the rest of the
 * build beyond the public API (include/comem/comem.h): today one call, the
 * preload's acked admission (client/admit.h; tools/preload/link.c). It is the
 * only client header a file outside src/client/ may include, and no file of
 * the wing includes it: the wing's own rooms and floors are drawn in
 * client/state.h.
 */
#ifndef COMEM_CLIENT_CLIENT_INTERNAL_H
#define COMEM_CLIENT_CLIENT_INTERNAL_H

#include "client/admit.h"

#endif
