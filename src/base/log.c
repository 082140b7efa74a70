/* base/log.c - leveled, line-atomic logging to stderr or a sink. */
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "os/env.h"

static atomic_int g_level = -1;
static pthread_mutex_t g_sink_lock = PTHREAD_MUTEX_INITIALIZER;
static comem_log_sink g_sink;
static void *g_sink_user;

static int level_from_env(void)
{
    const char *e = comem_env("COMEM_LOG");
    if (!e || !*e)
        return COMEM_LOG_INFO;
    if (!strcasecmp(e, "error") || !strcmp(e, "0"))
        return COMEM_LOG_ERROR;
    if (!strcasecmp(e, "warn") || !strcasecmp(e, "warning") || !strcmp(e, "1"))
        return COMEM_LOG_WARN;
    if (!strcasecmp(e, "debug") || !strcmp(e, "3"))
        return COMEM_LOG_DEBUG;
    return COMEM_LOG_INFO;
}

bool comem_log_enabled(comem_log_level level)
{
    int cur = atomic_load_explicit(&g_level, memory_order_relaxed);
    if (cur < 0) {
        cur = level_from_env();
        atomic_store(&g_level, cur);
    }
    return (int)level <= cur;
}

void comem_log_set_level(comem_log_level level) { atomic_store(&g_level, (int)level); }

void comem_log_set_sink(comem_log_sink sink, void *user)
{
    pthread_mutex_lock(&g_sink_lock);
    g_sink = sink;
    g_sink_user = user;
    pthread_mutex_unlock(&g_sink_lock);
}

void comem_log(comem_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    if (!comem_log_enabled(level))
        return;
    char line[1024];
    int n = snprintf(line, sizeof line, "comem[%d] %s: ", (int)getpid(), names[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&g_sink_lock);
    if (g_sink) {
        g_sink((int)level, line, g_sink_user);
    } else {
        /* One write() per line so lines from several processes never interleave. */
        size_t len = strlen(line);
        if (len < sizeof line - 1) {
            line[len++] = '\n';
        } else {
            line[sizeof line - 2] = '\n';
            len = sizeof line - 1;
        }
        ssize_t w = write(STDERR_FILENO, line, (unsigned)len); /* len < sizeof line: fits every platform's count type */
        (void)w;
    }
    pthread_mutex_unlock(&g_sink_lock);
}
