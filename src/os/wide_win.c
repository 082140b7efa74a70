/* os/wide_win.c - UTF-8 and UTF-16 at the Windows API (os/wide_win.h). */
#include "os/wide_win.h"

#include <stdint.h>
#include <stdlib.h>
#include <windows.h>

wchar_t *comem_wide(const char *utf8)
{
    if (!utf8)
        return NULL;
    int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, utf8, -1, NULL, 0);
    wchar_t *wide = n > 0 ? malloc((size_t)n * sizeof *wide) : NULL;
    if (wide && MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, utf8, -1, wide, n) != n) {
        free(wide);
        return NULL;
    }
    return wide;
}

bool comem_narrow(const wchar_t *wide, char *buf, size_t len)
{
    if (!wide || !buf || len == 0 || len > INT32_MAX)
        return false;
    int n = WideCharToMultiByte(CP_UTF8, WC_ERR_INVALID_CHARS, wide, -1, buf, (int)len, NULL, NULL);
    return n > 0;
}
