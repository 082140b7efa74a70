/*
 * client/fork.c - a client serves the process that opened it, and no other.
 *
 * A child forked after comem_client_open has a copy of the client (its tables,
 * its socket, its booking area) but none of its threads, and the coordinator
 * knows the connection as its parent's session. Its calls would book
 * admissions in the parent's session, overwrite the parent's residency and
 * spend the parent's grants. So every call from another process than the
 * opener fails with COMEM_EFORKED and a reason naming both pids; the child
 * opens a client of its own. Closing the copy in the child releases only the
 * child's descriptors (client.c).
 *
 * The check compares the opener's pid with this process's pid, which a
 * handler run in every forked child keeps current (os/proc.h), so a call costs
 * a load, not a getpid() system call.
 */
#include <stdatomic.h>
#include <stdio.h>

#include "base/log.h"
#include "client/state.h"
#include "os/proc.h"

static atomic_int g_this_process;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void after_fork_in_child(void) { atomic_store(&g_this_process, (int)comem_proc_id()); }

static void watch_forks(void)
{
    atomic_store(&g_this_process, (int)comem_proc_id());
    if (comem_proc_on_fork(after_fork_in_child) != COMEM_OK)
        comem_warn("cannot watch for forks; a forked child's calls on its parent's client are not refused");
}

int32_t comem_client_this_process(void)
{
    pthread_once(&g_once, watch_forks);
    return (int32_t)atomic_load(&g_this_process);
}

int comem_client_owned(comem_client *c)
{
    if (!c)
        return COMEM_EINVAL;
    int32_t self = comem_client_this_process();
    if (c->opener == self)
        return COMEM_OK;
    char why[COMEM_REASON_MAX];
    snprintf(why, sizeof why, "this client was opened by pid %d; a forked child (pid %d) must open its own",
             (int)c->opener, (int)self);
    comem_client_set_reason(why);
    if (!atomic_exchange(&c->fork_told, true))
        comem_error("%s", why);
    return COMEM_EFORKED;
}
