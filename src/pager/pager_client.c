/*
 * pager/pager_client.c - the pager as a holder in the machine-wide ledger:
 * registration, residency reports, and release asks answered on the
 * client's callback thread.
 *
 * attach registers one holder (COMEM_KIND_PAGER, answering sized and idle
 * releases, also while busy) and one paged entry per VBAR. A release ask runs
 * release() on the client's callback thread: it takes the pager lock, evicts lowest
 * priority first (a sized ask within watermark limits, an idle one everything
 * unpinned), drops the lock and reports the new residency; since a pager
 * never waits for its compute to finish, it answers while its process
 * computes, and pinned pages (in use) are never among what it frees.
 *
 * Reports. After a call that changed residency (fault, unpin, eviction,
 * release), the loaded bytes of each VBAR whose figure differs from what was
 * last sent go out with comem_entry_set_resident: one census per changed VBAR
 * per call, never per page, and never with the pager lock held (see the lock
 * order in pager_internal.h). Several threads may report at once (an owner
 * thread and the callback thread answering a release), so each figure is
 * read under the lock just before it is sent, and read again after: if it
 * moved meanwhile, it is sent again. Whichever census reaches the client
 * last was therefore followed by a check against the pager's state after it,
 * so the client cannot be left holding a stale figure. The release callback
 * always reports its own evictions before it returns (the census waits for
 * its reply like any call from the callback thread), so the receipt the client builds from its table
 * carries the residency after the release, which the coordinator books
 * grants against. The one exception: an owner thread that read a figure
 * before the eviction and hands it to the client after the callback's census
 * (a window of a few instructions, unless that thread is preempted in it);
 * its own check after the send corrects the figure a round trip later.
 *
 * Activity. The coordinator's idle release (coord/idle.c) asks a holder that
 * has not been busy for idle_release_s to release everything; for a pager
 * that is every unpinned page, with its watermarks lowered to 0, so every
 * later fault is OFFLOADED until the model is prioritized again. A process
 * running a model through a pager may never mark a node boundary (aimdo's
 * code does not), so between boundaries its faults are the only sign that it
 * works, and two things keep idle release off a pager in use:
 *   - touches: every fault notes its time (the clock its deficit already
 *     read, under the lock it already holds: no second reading); an attached
 *     pager whose last touch is COMEM_PAGER_TOUCH_MS old sends a TOUCH
 *     (comem_holder_touch: one frame, never a round trip), which restarts
 *     its idle clock in the coordinator.
 *     So the coordinator's idea of the pager's idle time is at most one touch
 *     interval (plus delivery) short, and a pager that stops faulting is
 *     idle from its last fault on.
 *   - the pager's own word: the coordinator may decide on stale news (a
 *     touch still unread when its tick ran, or an early release for a prompt
 *     that is over), so an idle ask to a pager that faulted less than
 *     COMEM_PAGER_TOUCH_MS ago is answered busy (COMEM_EBUSY, counted in
 *     COMEM_PAGER_STAT_IDLE_DECLINED); the busy receipt restarts the idle
 *     clock. A pager idle for longer is emptied as before: the bound is one
 *     touch interval, and idle_release_s is far longer in any real setup.
 * Sized asks (another process's admission) are answered as before, also
 * while the pager faults: they are pressure, not idleness.
 *
 * The kept pool (keep.c), when it has a bound, is one more entry of the
 * holder, "kept", reported like a VBAR's; every ask releases it first.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/bytes.h"
#include "base/log.h"
#include "comem/comem.h"
#include "comem/pager.h"
#include "pager/pager_internal.h"

#define REPORT_BATCH 32 /* VBARs per scan; a scan finding more leaves the rest to the next boundary */
#define REPORT_TRIES 4  /* sends of one figure per call while it keeps moving */

static comem_vbar *by_entry(comem_pager *p, uint64_t entry)
{
    for (comem_vbar *v = p->top; v; v = v->lower)
        if (v->entry == entry)
            return v;
    return NULL;
}

static int64_t loaded(const comem_vbar *v) { return v->resident_count * v->page_size; }

/* Sends one entry's figure until it holds still (or gives up and leaves it for the next boundary). */
static void send_entry(comem_pager *p, comem_client *c, uint64_t entry)
{
    for (int tries = 0;; tries++) {
        pthread_mutex_lock(&p->lock);
        comem_vbar *v = by_entry(p, entry);
        if (!v || p->client != c) {
            pthread_mutex_unlock(&p->lock);
            return; /* destroyed, or detaching */
        }
        int64_t value = loaded(v);
        pthread_mutex_unlock(&p->lock);

        int rc = comem_entry_set_resident(c, entry, value);
        if (rc != COMEM_OK && rc != COMEM_ENOENT) {
            /* Refused (the ledger counts this process's outstanding grant as well) or lost: not
               reported, so the next boundary sends it again; the ledger must not keep a stale figure. */
            comem_debug("pager: residency report failed: %s", comem_status_str(rc));
            pthread_mutex_lock(&p->lock);
            p->stats[COMEM_PAGER_STAT_REPORTS]++;
            v = by_entry(p, entry);
            if (v)
                v->reported = -1;
            pthread_mutex_unlock(&p->lock);
            return;
        }

        pthread_mutex_lock(&p->lock);
        p->stats[COMEM_PAGER_STAT_REPORTS]++;
        v = by_entry(p, entry);
        bool still = !v || loaded(v) == value;
        if (v && still)
            v->reported = value; /* the client keeps it, and resends it after a reconnect */
        else if (v && tries + 1 == REPORT_TRIES)
            v->reported = -1; /* still moving: whatever was sent last, the next boundary sends again */
        pthread_mutex_unlock(&p->lock);
        if (still || tries + 1 == REPORT_TRIES)
            return;
    }
}

/* Sends the kept pool's figure until it holds still, as send_entry does for a VBAR's. */
static void send_kept(comem_pager *p, comem_client *c)
{
    for (int tries = 0; tries < REPORT_TRIES; tries++) {
        pthread_mutex_lock(&p->lock);
        uint64_t entry = p->kept_entry;
        int64_t value = p->kept_bytes;
        bool todo = entry && p->client == c && value != p->kept_reported;
        pthread_mutex_unlock(&p->lock);
        if (!todo)
            return;
        int rc = comem_entry_set_resident(c, entry, value);
        pthread_mutex_lock(&p->lock);
        p->stats[COMEM_PAGER_STAT_REPORTS]++;
        if (p->kept_entry == entry)
            p->kept_reported = rc == COMEM_OK ? value : -1;
        pthread_mutex_unlock(&p->lock);
        if (rc != COMEM_OK)
            return; /* the next boundary sends it again */
    }
}

void comem_pager_report(comem_pager *p)
{
    uint64_t entries[REPORT_BATCH];
    int k = 0;
    pthread_mutex_lock(&p->lock);
    comem_client *c = p->client;
    bool kept = c && p->kept_entry && p->kept_bytes != p->kept_reported;
    if (c) {
        for (const comem_vbar *v = p->top; v && k < REPORT_BATCH; v = v->lower)
            if (v->entry && loaded(v) != v->reported)
                entries[k++] = v->entry;
        if (k || kept)
            p->reporters++;
    }
    pthread_mutex_unlock(&p->lock);
    if (!k && !kept)
        return;
    for (int i = 0; i < k; i++)
        send_entry(p, c, entries[i]);
    if (kept)
        send_kept(p, c);
    pthread_mutex_lock(&p->lock);
    if (--p->reporters == 0 && p->callbacks == 0)
        pthread_cond_broadcast(&p->idle_cv);
    pthread_mutex_unlock(&p->lock);
}

bool comem_pager_activity_locked(comem_pager *p, comem_client **c, uint64_t *holder)
{
    int64_t now = p->clock_ms; /* read by the fault's deficit, under this lock hold */
    p->faulted = true;
    p->last_fault_ms = now;
    if (!p->client || (p->touched && comem_sub(now, p->touch_ms) < COMEM_PAGER_TOUCH_MS))
        return false;
    p->touched = true;
    p->touch_ms = now;
    p->reporters++; /* detach waits for the send, as for a report */
    p->stats[COMEM_PAGER_STAT_TOUCHES]++;
    *c = p->client;
    *holder = p->holder;
    return true;
}

void comem_pager_touch_send(comem_pager *p, comem_client *c, uint64_t holder)
{
    int rc = comem_holder_touch(c, holder);
    if (rc != COMEM_OK)
        comem_debug("pager: activity report failed: %s", comem_status_str(rc));
    pthread_mutex_lock(&p->lock);
    if (--p->reporters == 0 && p->callbacks == 0)
        pthread_cond_broadcast(&p->idle_cv);
    pthread_mutex_unlock(&p->lock);
}

/* An idle ask reached a pager that faulted within the last touch interval: it is in use. Lock held. */
static bool in_use_locked(comem_pager *p)
{
    return p->faulted && comem_sub(p->clock(p->clock_user), p->last_fault_ms) < COMEM_PAGER_TOUCH_MS;
}

int64_t comem_pager_release_locked(comem_pager *p, int kind, int64_t bytes)
{
    switch (kind) {
    case COMEM_RELEASE_BYTES: return comem_pager_free_lowest(p, bytes, PAGER_GIVE_BACK, NULL, 0);
    case COMEM_RELEASE_IDLE: return comem_pager_free_lowest(p, INT64_MAX, PAGER_GIVE_BACK | PAGER_IGNORE_LIMITS, NULL, 0);
    default: return 0; /* a pager pins no host RAM */
    }
}

/* The holder's release callback, on the client's callback thread. */
static int release(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                   const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)entries, (void)amounts, (void)n;
    comem_pager *p = user;
    *freed = 0;
    pthread_mutex_lock(&p->lock);
    if (!p->client || p->holder != holder) {
        pthread_mutex_unlock(&p->lock);
        return COMEM_OK; /* detaching, or not yet attached: nothing to give through this holder */
    }
    p->stats[COMEM_PAGER_STAT_RELEASE_ASKS]++;
    if (kind == COMEM_RELEASE_IDLE && in_use_locked(p)) {
        p->stats[COMEM_PAGER_STAT_IDLE_DECLINED]++;
        pthread_mutex_unlock(&p->lock);
        comem_debug("pager: idle release ask declined: it faulted less than %d ms ago", COMEM_PAGER_TOUCH_MS);
        return COMEM_EBUSY; /* the coordinator's news is stale; its idle clock restarts on the receipt */
    }
    p->callbacks++;
    int64_t got = comem_pager_release_locked(p, kind, bytes);
    pthread_mutex_unlock(&p->lock);
    comem_pager_report(p);
    pthread_mutex_lock(&p->lock);
    if (--p->callbacks == 0 && p->reporters == 0)
        pthread_cond_broadcast(&p->idle_cv);
    pthread_mutex_unlock(&p->lock);
    *freed = got;
    comem_debug("pager: release ask (kind %d, %lld bytes): freed %lld", kind, (long long)bytes, (long long)got);
    return COMEM_OK;
}

void comem_pager_register_vbar(comem_pager *p, comem_vbar *v)
{
    pthread_mutex_lock(&p->lock);
    comem_client *c = p->client;
    uint64_t holder = p->holder;
    bool todo = c && !v->entry;
    int64_t loaded = v->resident_count * v->page_size;
    pthread_mutex_unlock(&p->lock);
    if (!todo)
        return;
    char name[32];
    snprintf(name, sizeof name, "vbar-%llu", (unsigned long long)v->id);
    uint64_t entry = 0;
    int rc = comem_entry_add(c, holder, name, v->size, loaded, COMEM_ENTRY_PAGED, &entry);
    if (rc != COMEM_OK) {
        comem_warn("pager: cannot register %s: %s", name, comem_status_str(rc));
        return;
    }
    pthread_mutex_lock(&p->lock);
    v->entry = entry;
    v->reported = loaded;
    pthread_mutex_unlock(&p->lock);
    comem_pager_report(p); /* in case it changed since the snapshot */
}

void comem_pager_unregister_vbar(comem_pager *p, comem_vbar *v)
{
    pthread_mutex_lock(&p->lock);
    comem_client *c = p->client;
    uint64_t entry = v->entry;
    v->entry = 0;
    pthread_mutex_unlock(&p->lock);
    if (c && entry)
        (void)comem_entry_remove(c, entry);
}

/* The kept pool's entry, when the pool has a bound: its bytes are this process's on the card. */
static void register_kept(comem_pager *p, comem_client *c, uint64_t holder)
{
    pthread_mutex_lock(&p->lock);
    int64_t bound = p->keep_limit, now = p->kept_bytes;
    pthread_mutex_unlock(&p->lock);
    if (bound <= 0)
        return;
    uint64_t entry = 0;
    int rc = comem_entry_add(c, holder, "kept", bound, now, COMEM_ENTRY_PAGED, &entry);
    if (rc != COMEM_OK) {
        comem_warn("pager: cannot register its kept pool: %s; nothing is kept while attached", comem_status_str(rc));
        pthread_mutex_lock(&p->lock);
        p->keep_limit = 0; /* memory the ledger does not know of must not be held */
        (void)comem_pager_drain_kept(p, INT64_MAX);
        pthread_mutex_unlock(&p->lock);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->kept_entry = entry;
    p->kept_reported = now;
    pthread_mutex_unlock(&p->lock);
    comem_pager_report(p); /* in case it changed since the snapshot */
}

int comem_pager_attach(comem_pager *p, comem_client *c, const char *name)
{
    if (!p || !c || !name)
        return COMEM_EINVAL;
    pthread_mutex_lock(&p->attach_mu);
    pthread_mutex_lock(&p->lock);
    bool attached = p->client != NULL;
    pthread_mutex_unlock(&p->lock);
    if (attached) {
        pthread_mutex_unlock(&p->attach_mu);
        return COMEM_EEXIST;
    }
    /* The pager's device is its own CUDA ordinal: say which card that is, so the coordinator
       charges the right one whatever CUDA_VISIBLE_DEVICES this process runs under. */
    if (p->vmm->uuid[0]) {
        int mrc = comem_client_map_device(c, p->device, p->vmm->uuid);
        if (mrc != COMEM_OK)
            comem_info("pager: the coordinator does not know card %s (ordinal %d here): %s; its index %d is used",
                       p->vmm->uuid, p->device, comem_status_str(mrc), p->device);
    }
    uint64_t holder = 0;
    int rc = comem_holder_add(c, name, p->device, COMEM_KIND_PAGER,
                              COMEM_ANSWERS_RELEASE | COMEM_ANSWERS_IDLE | COMEM_RELEASES_WHILE_BUSY, release, p,
                              &holder);
    if (rc != COMEM_OK) {
        pthread_mutex_unlock(&p->attach_mu);
        return rc;
    }
    pthread_mutex_lock(&p->lock);
    p->client = c;
    p->holder = holder;
    p->touched = false; /* the holder's idle clock starts now; the first fault tells it again */
    size_t n = (size_t)p->n_vbars, k = 0;
    comem_vbar **all = n ? malloc(n * sizeof *all) : NULL;
    for (comem_vbar *v = p->top; v && all; v = v->lower)
        all[k++] = v;
    pthread_mutex_unlock(&p->lock);
    if (n && !all) {
        pthread_mutex_unlock(&p->attach_mu);
        (void)comem_pager_detach(p);
        return COMEM_ENOMEM;
    }
    /* VBAR pointers stay valid: destroy needs attach_mu, which this holds. */
    for (size_t i = 0; i < k; i++)
        comem_pager_register_vbar(p, all[i]);
    free(all);
    register_kept(p, c, holder);
    pthread_mutex_unlock(&p->attach_mu);
    comem_info("pager: attached as holder '%s' on device %d with %zu vbar(s)", name, p->device, k);
    return COMEM_OK;
}

uint64_t comem_pager_holder(comem_pager *p)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->lock);
    uint64_t h = p->holder;
    pthread_mutex_unlock(&p->lock);
    return h;
}

int comem_pager_detach(comem_pager *p)
{
    if (!p)
        return COMEM_EINVAL;
    pthread_mutex_lock(&p->attach_mu);
    pthread_mutex_lock(&p->lock);
    comem_client *c = p->client;
    uint64_t holder = p->holder;
    if (!c) {
        pthread_mutex_unlock(&p->lock);
        pthread_mutex_unlock(&p->attach_mu);
        return COMEM_ENOENT;
    }
    p->client = NULL; /* no new report or release starts from here */
    p->holder = 0;
    while (p->reporters > 0 || p->callbacks > 0)
        pthread_cond_wait(&p->idle_cv, &p->lock);
    size_t n = (size_t)p->n_vbars, k = 0;
    uint64_t *entries = n ? malloc(n * sizeof *entries) : NULL;
    for (comem_vbar *v = p->top; v; v = v->lower) {
        if (v->entry && entries)
            entries[k++] = v->entry;
        v->entry = 0;
        v->reported = 0;
    }
    uint64_t kept_entry = p->kept_entry;
    p->kept_entry = 0;
    p->kept_reported = 0;
    pthread_mutex_unlock(&p->lock);
    for (size_t i = 0; i < k; i++)
        (void)comem_entry_remove(c, entries[i]);
    if (kept_entry)
        (void)comem_entry_remove(c, kept_entry);
    free(entries);
    /*
     * Removing the holder waits for the coordinator's reply, which the service
     * thread reads only after any release callback it had already fetched for
     * this holder has returned: after this, no callback can start on p.
     */
    (void)comem_holder_remove(c, holder);
    pthread_mutex_unlock(&p->attach_mu);
    return COMEM_OK;
}
