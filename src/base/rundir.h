/*
 * base/rundir.h - the per-user directory where comem keeps its socket and simulated cards.
 *
 * $XDG_RUNTIME_DIR/comem when that variable names an existing directory, else
 * /tmp/comem-<uid>. The directory is created with mode 0700 and refused unless
 * it is a real directory (not a link) owned by this uid with no group or other
 * access: other users must not be able to reach the socket or the shared card.
 * COMEM_RUNTIME_DIR overrides the location (tests use it), with the same checks.
 *
 * The coordinator's socket lives there (comem.sock) unless a path is given:
 * the coordinator, its clients, the view reader and the tools all resolve it
 * here, the same way.
 */
#ifndef COMEM_BASE_RUNDIR_H
#define COMEM_BASE_RUNDIR_H

#include <stddef.h>

#include "comem/comem.h" /* comem_runtime_dir_why */

/* Writes the directory path into buf, creating it if needed. 0 or a negative status. */
int comem_runtime_dir(char *buf, size_t len);

/* Creates (if needed) and checks one private directory: 0, COMEM_EPERM or COMEM_EIO. */
int comem_private_dir(const char *path);

/*
 * The same, with the reason a refusal logs also written to why (whylen 0: not
 * written): what is wrong with the folder and how to put it right. (The
 * runtime folder's, comem_runtime_dir_why, is in the public API: comem/comem.h.)
 */
int comem_private_dir_why(const char *path, char *why, size_t whylen);

/*
 * comem_default_socket (public, comem/comem.h) writes the default socket path,
 * <runtime dir>/comem.sock, creating the directory.
 */

/*
 * The socket path a client uses: arg when non-empty, else $COMEM_SOCKET, else
 * the default. COMEM_OK, or COMEM_ERANGE when it does not fit len (a Unix
 * socket path must fit sun_path with its NUL: said, never cut short).
 */
int comem_socket_resolve(const char *arg, char *buf, size_t len);
/* The same, with why it failed written to why (whylen 0: not written). */
int comem_socket_resolve_why(const char *arg, char *buf, size_t len, char *why, size_t whylen);

/*
 * The platform's part (rundir.c, rundir_win.c; the choice is base/socket_name.c's): name, given by
 * the caller or $COMEM_SOCKET, copied into buf if it can be a coordinator's address here.
 * COMEM_OK, COMEM_ERANGE (too long), COMEM_EINVAL (Windows: not a pipe's name).
 */
int comem_socket_name_check(const char *name, char *buf, size_t len, char *why, size_t whylen);

/*
 * A file that belongs beside the coordinator's address (its lock): Linux, the socket's path with
 * suffix; Windows, where the address is a pipe's name, the runtime folder's file of that name with
 * suffix. COMEM_OK, COMEM_ERANGE, COMEM_EINVAL (Windows: a pipe's name no file may have), or the
 * runtime folder's refusal.
 */
int comem_socket_sidecar(const char *socket, const char *suffix, char *buf, size_t len);

#endif
