/*
 * base/log.h - one line per decision a user might ask about.
 *
 * Lines go to stderr as "comem[pid] LEVEL: text". The level comes from the
 * COMEM_LOG environment variable (error, warn, info, debug; default info),
 * read once. comem_log_set_sink() redirects lines (the Python binding uses it).
 */
#ifndef COMEM_BASE_LOG_H
#define COMEM_BASE_LOG_H

#include <stdbool.h>

typedef enum comem_log_level {
    COMEM_LOG_ERROR = 0,
    COMEM_LOG_WARN = 1,
    COMEM_LOG_INFO = 2,
    COMEM_LOG_DEBUG = 3
} comem_log_level;

typedef void (*comem_log_sink)(int level, const char *line, void *user);

/* The formats are C99's everywhere (MinGW builds with __USE_MINGW_ANSI_STDIO), so GCC checks them as GNU's
   (on MinGW plain `printf` would mean msvcrt's); clang, which knows no gnu_printf, only builds for Linux here. */
#if defined(__clang__)
#define COMEM_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define COMEM_PRINTF(fmt, args) __attribute__((format(gnu_printf, fmt, args)))
#endif

void comem_log(comem_log_level level, const char *fmt, ...) COMEM_PRINTF(2, 3);
bool comem_log_enabled(comem_log_level level);
void comem_log_set_level(comem_log_level level);
void comem_log_set_sink(comem_log_sink sink, void *user);

#define comem_error(...) comem_log(COMEM_LOG_ERROR, __VA_ARGS__)
#define comem_warn(...) comem_log(COMEM_LOG_WARN, __VA_ARGS__)
#define comem_info(...) comem_log(COMEM_LOG_INFO, __VA_ARGS__)
#define comem_debug(...) comem_log(COMEM_LOG_DEBUG, __VA_ARGS__)

#endif
