/* base/name.c - the rule every name follows (base/name.h). */
#include "base/name.h"

#include <stdint.h>
#include <stdio.h>

#include "comem/comem.h"
#include "comem/common.h"

static int broke(char *why, size_t whylen, const char *rule, size_t at, uint32_t cp)
{
    if (why && whylen) {
        if (cp == UINT32_MAX)
            snprintf(why, whylen, "%s at byte %zu", rule, at);
        else
            snprintf(why, whylen, "%s (U+%04X) at byte %zu", rule, (unsigned)cp, at);
    }
    return COMEM_EINVAL;
}

int comem_name_check(const char *name, char *why, size_t whylen)
{
    if (!name)
        return broke(why, whylen, "no name", 0, UINT32_MAX);
    const unsigned char *s = (const unsigned char *)name;
    for (size_t i = 0; s[i];) {
        unsigned char b = s[i];
        uint32_t cp;
        size_t n;
        if (b < 0x80) {
            cp = b;
            n = 1;
        } else if (b >= 0xC2 && b <= 0xDF) {
            cp = b & 0x1Fu;
            n = 2;
        } else if (b >= 0xE0 && b <= 0xEF) {
            cp = b & 0x0Fu;
            n = 3;
        } else if (b >= 0xF0 && b <= 0xF4) {
            cp = b & 0x07u;
            n = 4;
        } else {
            return broke(why, whylen, "not UTF-8", i, UINT32_MAX);
        }
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) /* a NUL ends the loop here too: a cut sequence */
                return broke(why, whylen, "not UTF-8", i, UINT32_MAX);
            cp = (cp << 6) | (s[i + k] & 0x3Fu);
        }
        static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return broke(why, whylen, "not UTF-8", i, UINT32_MAX);
        if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F))
            return broke(why, whylen, "a control character", i, cp);
        i += n;
    }
    return COMEM_OK;
}
