/*
 * tools/simulate/tmpdir.h - a private scratch folder where the user keeps temporary files.
 */
#ifndef COMEM_TOOLS_SIMULATE_TMPDIR_H
#define COMEM_TOOLS_SIMULATE_TMPDIR_H

#include <stddef.h>

/*
 * Makes a new 0700 folder "PREFIX-XXXXXX" under $TMPDIR (else /tmp) and writes its
 * path to buf. A $TMPDIR that is not absolute, or so long that the folder's
 * "comem.sock" would not fit a Unix socket path, is passed over for /tmp (the
 * socket must fit). Returns 0, or -1 with errno set and buf naming the folder it tried.
 */
int cli_mkdtemp(char *buf, size_t len, const char *prefix);

#endif
