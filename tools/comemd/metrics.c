/* tools/comemd/metrics.c - the metrics file writer thread (see metrics.h). */
#include "metrics.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "comem/comem.h"
#include "common/prom.h"
#include "common/snapshot.h"

struct metrics_writer {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop; /* under lock */
    char *socket, *path;
    double interval_s;
};

static void write_file(metrics_writer *m, const char *text, bool *failing)
{
    if (comem_prom_write_atomic(m->path, text) != 0) {
        bool foreign = errno == EEXIST || errno == EPERM;
        if (!*failing)
            comem_warn("metrics: cannot write %s: %s (trying again every %.1f s)", m->path,
                       foreign ? "something is there that is not this user's regular file (a link, a folder or "
                                 "another user's file); it is left alone"
                               : strerror(errno),
                       m->interval_s);
        *failing = true;
    } else if (*failing) {
        comem_info("metrics: writing %s again", m->path);
        *failing = false;
    }
}

/* Sleeps for the interval, or until stopped; true when stopped. */
static bool nap(metrics_writer *m)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long long ns = (long long)(m->interval_s * 1e9) + until.tv_nsec;
    until.tv_sec += (time_t)(ns / 1000000000LL);
    until.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&m->lock);
    while (!m->stop && pthread_cond_timedwait(&m->wake, &m->lock, &until) != ETIMEDOUT) {
    }
    bool stop = m->stop;
    pthread_mutex_unlock(&m->lock);
    return stop;
}

static void *run(void *arg)
{
    metrics_writer *m = arg;
    comem_client *c = NULL;
    bool failing = false, joined_warned = false;
    char why[512];
    do {
        if (!c && snapshot_connect(m->socket, "comemd-metrics", 2000, &c, why, sizeof why) != COMEM_OK) {
            if (!joined_warned)
                comem_warn("metrics: %s", why);
            joined_warned = true;
            c = NULL;
        }
        json_object *st = c ? snapshot_read(c, why, sizeof why) : NULL;
        char *text = st ? comem_prom_text(st) : comem_prom_down();
        if (st)
            json_object_put(st);
        else if (c) { /* join again next time */
            comem_client_close(c);
            c = NULL;
        }
        if (text)
            write_file(m, text, &failing);
        free(text);
    } while (!nap(m));
    if (c)
        comem_client_close(c);
    return NULL;
}

metrics_writer *metrics_writer_start(const char *socket_path, const char *path, double interval_s)
{
    metrics_writer *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->socket = strdup(socket_path);
    m->path = strdup(path);
    m->interval_s = interval_s;
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->wake, NULL);
    if (!m->socket || !m->path || pthread_create(&m->thread, NULL, run, m) != 0) {
        comem_error("metrics: cannot start the writer thread");
        free(m->socket);
        free(m->path);
        free(m);
        return NULL;
    }
    comem_info("metrics: writing %s every %.1f s", path, interval_s);
    return m;
}

void metrics_writer_stop(metrics_writer *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    m->stop = true;
    pthread_cond_signal(&m->wake);
    pthread_mutex_unlock(&m->lock);
    pthread_join(m->thread, NULL);
    char *down = comem_prom_down();
    bool failing = true; /* say nothing more */
    if (down)
        write_file(m, down, &failing);
    free(down);
    pthread_cond_destroy(&m->wake);
    pthread_mutex_destroy(&m->lock);
    free(m->socket);
    free(m->path);
    free(m);
}
