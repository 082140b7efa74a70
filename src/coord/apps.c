/*
 * coord/apps.c - app holders: a holder whose memory is another process's.
 *
 * An LLM server (llama.cpp's, Ollama, vLLM) never joins the ledger itself. A process that speaks
 * for it (comem.apps, docs/apps.md) registers a holder naming the server's pid (HOLDER_ADD's pid),
 * and from then on that holder's asks and receipts are held up against the server's use of the card
 * (or its RSS on host RAM), host RAM tracks the server, and status lists it as attributed instead of
 * among other_processes. What is checked once, when the holder is added: the process exists, runs
 * as the coordinator's user (the only user whose sessions it takes), and nobody speaks for it yet
 * (a session of its own, or another app holder): two recipes naming one server would count it twice.
 */
#include <stdio.h>
#include <string.h>

#include "comem/common.h"
#include "coord/coord_internal.h"
#include "os/proc.h"

int32_t coord_holder_process(const ledger_holder *h, const conn *c) { return h->app_pid ? h->app_pid : c->pid; }

int coord_app_claim(comem_coord_srv *s, const conn *c, uint32_t pid, int32_t *app_pid, char *why, size_t len)
{
    *app_pid = 0;
    if (pid == 0 || (int64_t)pid == (int64_t)c->pid)
        return COMEM_OK; /* the sender's own memory: an ordinary holder */
    if (c->pid <= 0) {
        snprintf(why, len, "a process in another pid namespace cannot speak for pid %u", (unsigned)pid);
        return COMEM_EPERM;
    }
    if (pid > INT32_MAX || (int64_t)pid == comem_proc_id()) {
        snprintf(why, len, "pid %u cannot be an app", (unsigned)pid);
        return COMEM_EINVAL;
    }
    char user[192] = "", me[192] = "";
    int rc = comem_proc_user(pid, user, sizeof user);
    if (rc != COMEM_OK) {
        snprintf(why, len, "pid %u: %s", (unsigned)pid, rc == COMEM_ENOENT ? "no such process" : comem_status_str(rc));
        return rc == COMEM_ENOENT ? COMEM_ENOENT : COMEM_EPERM;
    }
    comem_proc_self_user(me, sizeof me);
    if (strcmp(user, me) != 0) {
        snprintf(why, len, "pid %u runs as user %s, not as the coordinator's %s", (unsigned)pid, user, me);
        return COMEM_EPERM;
    }
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.sessions); i++) {
        const ledger_session *ss = comem_slab_at(&s->ledger.sessions, i, NULL);
        if (ss && ss->pid == (int32_t)pid) {
            snprintf(why, len, "pid %u has a session of its own ('%s')", (unsigned)pid, ss->name);
            return COMEM_EEXIST;
        }
    }
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.holders); i++) {
        const ledger_holder *h = comem_slab_at(&s->ledger.holders, i, NULL);
        if (h && h->app_pid == (int32_t)pid) {
            snprintf(why, len, "holder '%s' already speaks for pid %u", h->name, (unsigned)pid);
            return COMEM_EEXIST;
        }
    }
    *app_pid = (int32_t)pid;
    return COMEM_OK;
}

size_t coord_app_pids(const comem_coord_srv *s, int device, int32_t *pids, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.holders) && n < max; i++) {
        const ledger_holder *h = comem_slab_at(&s->ledger.holders, i, NULL);
        if (h && h->app_pid > 0 && (device < 0 || h->device == device))
            pids[n++] = h->app_pid;
    }
    return n;
}
