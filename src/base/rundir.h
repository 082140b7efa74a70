/*
 * base/rundir.h - the per-user directory where comem keeps its socket and simulated cards.
 *
 * $XDG_RUNTIME_DIR/comem when that variable names an existing directory, else
 * /tmp/comem-<uid>. The directory is created with mode 0700 and refused unless
 * it is a real directory (not a link) owned by this uid with no group or other
 * access: other users must not be able to reach the socket or the shared card.
 * COMEM_RUNTIME_DIR overrides the location (tests use it), with the same checks.
 */
#ifndef COMEM_BASE_RUNDIR_H
#define COMEM_BASE_RUNDIR_H

#include <stddef.h>

/* Writes the directory path into buf, creating it if needed. 0 or a negative status. */
int comem_runtime_dir(char *buf, size_t len);

/* Creates (if needed) and checks one private directory: 0, COMEM_EPERM or COMEM_EIO. */
int comem_private_dir(const char *path);

#endif
