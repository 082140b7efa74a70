/* os/wide_win.h - UTF-8 and UTF-16 (Windows): comem's strings are UTF-8, the Windows API's are UTF-16. */
#ifndef COMEM_OS_WIDE_WIN_H
#define COMEM_OS_WIDE_WIN_H

#include <stdbool.h>
#include <stddef.h>
#include <wchar.h>

/* A UTF-16 copy of a UTF-8 string (free it), or NULL when it is not UTF-8 or memory ran out. */
wchar_t *comem_wide(const char *utf8);

/* The UTF-8 form of a UTF-16 string into buf; false when it does not fit or cannot be converted. */
bool comem_narrow(const wchar_t *wide, char *buf, size_t len);

#endif
