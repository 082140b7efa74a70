/* tools/common/text.c - text built in memory (text.h). */
#include "common/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for more bytes and the NUL; false (and failed) when there is none to be had. */
static bool room(comem_text *t, size_t more)
{
    if (t->failed)
        return false;
    if (t->len + more + 1 <= t->cap)
        return true;
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->len + more + 1)
        cap *= 2;
    char *b = realloc(t->buf, cap);
    if (!b) {
        t->failed = true;
        return false;
    }
    t->buf = b;
    t->cap = cap;
    return true;
}

void text_printf(comem_text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        t->failed = true;
        return;
    }
    if (!room(t, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(t->buf + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

void text_puts(comem_text *t, const char *s)
{
    size_t n = strlen(s);
    if (!room(t, n))
        return;
    memcpy(t->buf + t->len, s, n + 1);
    t->len += n;
}

void text_putc(comem_text *t, char c)
{
    if (!room(t, 1))
        return;
    t->buf[t->len++] = c;
    t->buf[t->len] = '\0';
}

char *text_take(comem_text *t)
{
    char *out = t->failed ? NULL : t->buf ? t->buf : strdup("");
    if (t->failed)
        free(t->buf);
    *t = (comem_text){0};
    return out;
}
