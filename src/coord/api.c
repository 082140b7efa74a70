/* coord/api.c - comem_coord_start/stop: a coordinator on a thread of this process. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "comem/comem.h"
#include "comem/common.h"
#include "coord/coord.h"

struct comem_coord {
    comem_coord_srv *srv;
    pthread_t thread;
};

static void *loop_thread(void *arg)
{
    comem_coord_run(((struct comem_coord *)arg)->srv);
    return NULL;
}

int comem_coord_start(const char *socket_path, const char *device_spec, comem_coord **out)
{
    if (!out)
        return COMEM_EINVAL;
    comem_coord_config cfg;
    char err[256];
    int rc = comem_coord_config_defaults(&cfg, err, sizeof err);
    if (rc != COMEM_OK) {
        comem_error("cannot start a coordinator: %s", err);
        return rc;
    }
    if (socket_path)
        snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s", socket_path);
    if (device_spec)
        snprintf(cfg.device_spec, sizeof cfg.device_spec, "%s", device_spec);
    struct comem_coord *c = calloc(1, sizeof *c);
    if (!c)
        return COMEM_ENOMEM;
    rc = comem_coord_create(&cfg, &c->srv);
    if (rc != COMEM_OK) {
        free(c);
        return rc;
    }
    if (pthread_create(&c->thread, NULL, loop_thread, c) != 0) {
        comem_coord_destroy(c->srv);
        free(c);
        return COMEM_ENOMEM;
    }
    *out = c;
    return COMEM_OK;
}

void comem_coord_stop(comem_coord *c)
{
    if (!c)
        return;
    comem_coord_request_stop(c->srv);
    pthread_join(c->thread, NULL);
    comem_coord_destroy(c->srv);
    free(c);
}
