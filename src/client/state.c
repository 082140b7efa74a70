/*
 * client/state.c - what every floor of the client asks of its state: the
 * effective timeout, a fresh request id, the service thread's wake-up, and
 * which of the client's own threads the caller is (client/state.h).
 */
#include "client/port.h"
#include "client/state.h"

/* The thread's role, marked once as it starts: a thread serves one client. */
static _Thread_local struct {
    const comem_client *c;
    client_thread which;
} tl_thread;

int comem_client_timeout(comem_client *c, int timeout_ms)
{
    return timeout_ms >= 0 ? timeout_ms : atomic_load(&c->timeout_ms);
}

void comem_client_wake(comem_client *c)
{
    comem_waits_wake(c->svc);
}

void comem_client_want_sync(comem_client *c)
{
    c->need_sync = true;
    comem_client_wake(c); /* the service loop looks at need_sync when woken */
}

uint32_t comem_client_next_req(comem_client *c)
{
    unsigned id;
    do
        id = atomic_fetch_add(&c->next_req, 1u);
    while (id == 0);
    return id;
}

void comem_client_thread_mark(const comem_client *c, client_thread which)
{
    tl_thread.c = c;
    tl_thread.which = which;
}

bool comem_on_service_thread(const comem_client *c)
{
    return c && tl_thread.c == c && tl_thread.which == CLIENT_THREAD_SERVICE;
}

bool comem_on_callback_thread(const comem_client *c)
{
    return c && tl_thread.c == c && tl_thread.which == CLIENT_THREAD_CALLBACKS;
}
