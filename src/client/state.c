/*
 * client/state.c - what every floor of the client asks of its state: the
 * effective timeout, a fresh request id, the service thread's wake-up, and
 * which of the client's own threads the caller is (client/state.h), which the
 * client records: no thread-local state.
 */
#include "client/port.h"
#include "client/state.h"

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

/*
 * Which thread is which is the client's to know: each of its threads writes
 * its own id into the client as it starts (svc_self, cb_self) and publishes
 * it with a release store, so a thread that reads the flag set (acquire)
 * reads the id whole. A thread that reads it unset is not that thread: the
 * thread itself marks before it does anything else.
 */
static client_self *self_of(comem_client *c, client_thread which)
{
    return which == CLIENT_THREAD_SERVICE ? &c->svc_self : &c->cb_self;
}

void comem_client_thread_mark(comem_client *c, client_thread which)
{
    client_self *t = self_of(c, which);
    t->id = pthread_self();
    atomic_store_explicit(&t->marked, true, memory_order_release);
}

void comem_client_thread_unmark(comem_client *c, client_thread which)
{
    atomic_store_explicit(&self_of(c, which)->marked, false, memory_order_release);
}

static bool is_self(const client_self *t)
{
    return atomic_load_explicit(&t->marked, memory_order_acquire) && pthread_equal(t->id, pthread_self());
}

bool comem_on_service_thread(const comem_client *c)
{
    return c && is_self(&c->svc_self);
}

bool comem_on_callback_thread(const comem_client *c)
{
    return c && is_self(&c->cb_self);
}
