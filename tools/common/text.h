/*
 * tools/common/text.h - text built in memory, printf by printf, for the exposition format (prom.c):
 * what open_memstream gives on Linux, on every system. A failed allocation is remembered, and the
 * text then taken is NULL.
 */
#ifndef COMEM_TOOLS_TEXT_H
#define COMEM_TOOLS_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/log.h"

typedef struct comem_text {
    char *buf; /* NUL-terminated while not failed */
    size_t len, cap;
    bool failed;
} comem_text;

void text_printf(comem_text *t, const char *fmt, ...) COMEM_PRINTF(2, 3);
void text_puts(comem_text *t, const char *s);
void text_putc(comem_text *t, char c);

/* The text, the caller's to free (the builder is empty again); NULL when an allocation failed. */
char *text_take(comem_text *t);

#endif
