/*
 * tools/simulate/agent_comem.c - the comem policy of a scenario process:
 * libcomem, used the way the ComfyUI adapter uses it.
 *
 * One client per process (a host passes ComfyUI's reserve as its base); a
 * `models` holder with an entry per whole model, whose release callback frees
 * the bytes the coordinator planned per entry (a worker's also answers idle
 * releases); an admission (comem_admit_record) before every load and
 * comem_grant_done after it; comem_holder_busy around every node; a `pins`
 * holder for pins and host staging; the pager attached, so it answers asks
 * while the process computes; a raw holder for a `custom` node; host RAM on
 * the ledger with `ram ... ledger`; `comem release` (the command line) for a
 * `release` step and comem_pressure for a `pressure` step. Without a client
 * (none could be opened) the process only holds bytes.
 *
 * The release callbacks run on libcomem's callback thread and take the
 * agent's lock for the model table; everything else runs on the main thread.
 */
#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arith/reserve.h"
#include "base/bytes.h"
#include "comem/comem.h"
#include "comem/pager.h"
#include "pager/pager_seam.h"
#include "probe/sim.h"
#include "simulate/agent_internal.h"

/* ---- the release callbacks ---- */

static int model_of_entry(agent *a, uint64_t entry)
{
    for (int i = 0; i < a->pr->n_models; i++)
        if (a->m[i].entry && a->m[i].entry == entry)
            return i;
    return -1;
}

/* The whole model with the most on the card that is not in done[] (-1: none has anything). Under the lock. */
static int largest_whole(agent *a, const bool *done)
{
    int best = -1;
    for (int i = 0; i < a->pr->n_models; i++)
        if (!done[i] && !a->pr->models[i].paged && a->m[i].resident > 0 &&
            (best < 0 || a->m[i].resident > a->m[best].resident))
            best = i;
    return best;
}

/*
 * The `models` holder's ask. An idle release frees every whole model; a
 * planned one (n entries) frees what the plan says of each; one with no plan
 * (comem_pressure's asks name no entry) frees the largest resident model
 * first, each for what is still missing, until `bytes` came off. An LLM
 * server unloads whole models whatever the plan says of them (comem-apps:
 * the server's unload call takes all of a model), the largest first when
 * there is no plan, and its receipt is what left its process.
 */
static int on_release_models(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                             const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder;
    agent *a = user;
    int64_t total = 0, changed[SC_MAX_MODELS] = {0};
    bool whole = agent_server(a);
    pthread_mutex_lock(&a->lock);
    if (kind == COMEM_RELEASE_IDLE) {
        for (int i = 0; i < a->pr->n_models; i++)
            if (!a->pr->models[i].paged) {
                changed[i] = agent_free_whole(a, i, -1, true);
                a->m[i].idle_taken = whole && changed[i] > 0; /* comem-apps: nobody needed it, so no reload when free */
            }
    } else if (n > 0) {
        for (size_t k = 0; k < n; k++) {
            int i = model_of_entry(a, entries[k]);
            if (i >= 0)
                changed[i] += agent_free_whole(a, i, whole ? -1 : amounts[k], true);
        }
    } else {
        bool done[SC_MAX_MODELS] = {false};
        int64_t got = 0;
        while (got < bytes) {
            int i = largest_whole(a, done);
            if (i < 0)
                break;
            done[i] = true;
            changed[i] = agent_free_whole(a, i, whole ? -1 : bytes - got, true);
            got += changed[i];
        }
    }
    uint64_t ents[SC_MAX_MODELS];
    int64_t res[SC_MAX_MODELS];
    int nr = 0;
    for (int i = 0; i < a->pr->n_models; i++) {
        total += changed[i];
        if (changed[i] && a->m[i].entry) {
            ents[nr] = a->m[i].entry;
            res[nr++] = a->m[i].resident;
        }
    }
    pthread_mutex_unlock(&a->lock);
    for (int k = 0; k < nr; k++)
        comem_entry_set_resident(a->c, ents[k], res[k]);
    if (kind == COMEM_RELEASE_IDLE)
        agent_ev(a, EV_IDLE_REL, -1, bytes, total);
    else
        agent_ev(a, EV_ASKED, -1, bytes, total);
    *freed = total;
    return COMEM_OK;
}

static int on_release_pins(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                           const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder;
    (void)entries;
    (void)amounts;
    (void)n;
    agent *a = user;
    *freed = 0;
    if (kind != COMEM_RELEASE_PINS)
        return COMEM_OK;
    int64_t give = comem_min(comem_clamp0(bytes), atomic_load(&a->sh->p[a->idx].pinned));
    if (give > 0) {
        comem_pin_release(a->c, a->h_pins, give);
        agent_ram_give(a, give);
        atomic_fetch_sub(&a->sh->p[a->idx].pinned, give);
        agent_ev(a, EV_UNPIN, -1, give, 1);
    }
    *freed = give;
    return COMEM_OK;
}

static int on_release_custom(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                             const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder;
    (void)entries;
    (void)amounts;
    (void)n;
    agent *a = user;
    pthread_mutex_lock(&a->lock);
    int64_t give = kind == COMEM_RELEASE_IDLE || bytes < 0 ? a->custom : comem_min(bytes, a->custom);
    if (give > 0 && comem_sim_free(a->sim, a->card, give) == COMEM_OK)
        a->custom -= give;
    else
        give = 0;
    int64_t left = a->custom;
    pthread_mutex_unlock(&a->lock);
    if (give > 0) {
        comem_entry_set_resident(a->c, a->e_custom, left);
        agent_ev(a, EV_ASKED, -1, bytes, give);
        agent_ev(a, EV_CUSTOM, -1, left, 0);
    }
    *freed = give;
    return COMEM_OK;
}

/* The `pins` holder, registered at the first pin or staging growth. */
static void ensure_pins_holder(agent *a)
{
    if (!a->h_pins)
        comem_holder_add(a->c, "pins", a->card, COMEM_KIND_PINS, COMEM_ANSWERS_PINS, on_release_pins, a, &a->h_pins);
}

/* ---- admission ---- */

/*
 * The coordinator never asks the requester itself, so when it is short the
 * process's own manager (ComfyUI's free_memory, in the real adapter) makes
 * room among its own other models, least recently loaded first. Returns the
 * bytes freed.
 */
static int64_t evict_own(agent *a, int keep, int64_t bytes)
{
    int64_t total = 0;
    uint64_t ents[SC_MAX_MODELS];
    int64_t res[SC_MAX_MODELS];
    int nr = 0;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        int i = -1;
        for (int k = 0; k < a->pr->n_models; k++)
            if (k != keep && !a->pr->models[k].paged && a->m[k].resident > 0 &&
                (i < 0 || a->m[k].last_use < a->m[i].last_use))
                i = k;
        if (i < 0 || total >= bytes)
            break;
        int64_t got = agent_free_whole(a, i, bytes - total, true);
        total += got;
        if (got > 0 && a->m[i].entry) {
            ents[nr] = a->m[i].entry;
            res[nr++] = a->m[i].resident;
        }
    }
    pthread_mutex_unlock(&a->lock);
    for (int k = 0; k < nr; k++)
        comem_entry_set_resident(a->c, ents[k], res[k]);
    if (total > 0)
        agent_ev(a, EV_EVICT, -1, bytes, total);
    return total;
}

/*
 * Asks before loading bytes of model i; retries while refused, for the
 * admission wait. A paged model asks once: refused, it pages in what is free
 * and streams the rest (F15: "admission refuses or pages during load").
 */
static int admit_for(agent *a, int i, int64_t bytes, uint64_t *grant)
{
    const sc_model *sm = &a->pr->models[i];
    double t0 = agent_now(a);
    uint64_t keep[1] = {a->m[i].entry};
    uint64_t holder = sm->paged ? comem_pager_holder(a->pager) : a->h_models;
    int64_t inference = sm->inference;
    if (agent_server(a)) { /* comem-apps admits the bytes the model held, for no holder, with nothing kept */
        holder = 0;
        inference = 0;
        keep[0] = 0;
    }
    double wait = a->s->admit_wait;
    int timeout_ms = 20000;
    if (a->when_free) { /* comem-apps' reload when free waits 5 s (holder.py's load), and a miss is no failure */
        wait = 5;
        timeout_ms = (int)comem_max(1, (int64_t)(5000 / a->s->speed));
    }
    for (;;) {
        comem_admission ad;
        int rc =
            comem_admit_record(a->c, a->card, holder, bytes, inference, 0, keep, keep[0] ? 1 : 0, timeout_ms, &ad);
        if (rc == COMEM_OK) {
            *grant = ad.grant;
            agent_ev(a, EV_GRANT, i, (int64_t)(agent_waited(a, t0) * 1e6), ad.freed);
            return COMEM_OK;
        }
        int64_t short_by = rc == COMEM_ENOSPC ? ad.short_by : 0;
        if (rc == COMEM_ENOSPC && short_by > 0 && evict_own(a, i, short_by) > 0)
            continue; /* this process's own manager made room among its own models: ask again */
        if (sm->paged)
            return rc; /* the pager takes what is free: no refusal, no wait */
        if (rc != COMEM_ENOSPC || agent_waited(a, t0) >= wait || atomic_load(&a->sh->end)) {
            agent_ev(a, a->when_free ? EV_NO_ROOM_YET : EV_REFUSE, i, bytes, short_by);
            return rc;
        }
        sh_sleep(a->sh, 1.0); /* queued: try again when someone may have let go */
    }
}

/* ---- host RAM on the ledger (`ram ... ledger`): growth admitted, copies dropped on ask ---- */

static bool ram_on_ledger(const agent *a) { return a->c && a->s->ram_ledger && !agent_uma(a) && a->h_ram; }

/*
 * Under a->lock. The coordinator reads this process's host RAM as its RSS; the
 * simulated bytes are not resident, so the run's stand-in /proc
 * (COMEM_HOSTMEM_ROOT) carries them: <root>/proc/PID/status, replaced whole.
 */
static void publish_rss(agent *a)
{
    const char *root = getenv("COMEM_HOSTMEM_ROOT");
    if (!a->s->ram_ledger || !root)
        return;
    const sh_proc *p = &a->sh->p[a->idx];
    int64_t rss = atomic_load(&p->ram) + atomic_load(&p->pinned) + atomic_load(&p->staging);
    char dir[4096], path[4200], tmp[4200];
    snprintf(dir, sizeof dir, "%s/proc/%d", root, (int)getpid());
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return;
    snprintf(path, sizeof path, "%s/status", dir);
    snprintf(tmp, sizeof tmp, "%s/status.new", dir);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fprintf(f, "Name:\t%s\nVmRSS:\t%lld kB\n", a->pr->name, (long long)(rss >> 10));
    if (fclose(f) == 0)
        rename(tmp, path);
}

/* Under a->lock: drops the i-th RAM copy (its bytes back to the machine, its entry out of the ledger). */
static int64_t ram_drop(agent *a, int i)
{
    int64_t bytes = a->ram_held[i].bytes;
    comem_entry_remove(a->c, a->ram_held[i].entry);
    memmove(&a->ram_held[i], &a->ram_held[i + 1], (size_t)(a->n_ram - i - 1) * sizeof a->ram_held[0]);
    a->n_ram--;
    agent_ram_give(a, bytes);
    atomic_fetch_sub(&a->sh->p[a->idx].ram, bytes);
    return bytes;
}

/* Under a->lock: drops the oldest RAM copies until `want` bytes are gone (or none is left); what went. */
static int64_t ram_drop_oldest(agent *a, int64_t want)
{
    int64_t total = 0;
    while (a->n_ram > 0 && total < want)
        total += ram_drop(a, 0);
    return total;
}

/* Another process's admission asked for this process's RAM copies: the planned ones, then the oldest. */
static int on_release_ram(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                          const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder;
    (void)amounts;
    agent *a = user;
    int64_t want = kind == COMEM_RELEASE_IDLE ? INT64_MAX : bytes, total = 0;
    pthread_mutex_lock(&a->lock);
    for (size_t k = 0; k < n && total < want; k++)
        for (int i = 0; i < a->n_ram; i++)
            if (a->ram_held[i].entry == entries[k]) {
                total += ram_drop(a, i);
                break;
            }
    total += ram_drop_oldest(a, want - total);
    publish_rss(a);
    pthread_mutex_unlock(&a->lock);
    if (total > 0)
        agent_ev(a, EV_RAM_DROP, -1, total, 1);
    *freed = total;
    return COMEM_OK;
}

/* A host RAM admission of grow bytes: *grant when granted, *short_by when decided (granted or refused). */
static int admit_ram(agent *a, int64_t grow, uint64_t *grant, int64_t *short_by)
{
    comem_admission ad;
    int rc = comem_admit_record(a->c, COMEM_DEVICE_HOST_RAM, a->h_ram, grow, 0, 0, NULL, 0, 20000, &ad);
    if (rc == COMEM_OK)
        *grant = ad.grant;
    if (rc == COMEM_OK || rc == COMEM_ENOSPC)
        *short_by = ad.short_by;
    return rc;
}

/*
 * A `ram` step with host RAM on the ledger: growth is admitted before it is
 * held (a copy of weights kept in RAM, re-readable from its file); refused,
 * the process drops its own oldest copies for the shortfall, as ComfyUI's own
 * RAM release would, and asks again (every half second, up to the scenario's
 * admit wait, until the coordinator reads its RSS without them). Still
 * refused, it does not grow.
 */
static void ledger_ram(agent *a, int64_t target)
{
    _Atomic int64_t *ram = &a->sh->p[a->idx].ram;
    int64_t grow = target - a->ram_nominal;
    a->ram_nominal = target;
    if (grow <= 0) { /* the process lets go of copies: the newest first */
        int64_t give = -grow;
        pthread_mutex_lock(&a->lock);
        while (give > 0 && a->n_ram > 0) {
            int last = a->n_ram - 1;
            int64_t part = comem_min(give, a->ram_held[last].bytes);
            if (part == a->ram_held[last].bytes) {
                ram_drop(a, last);
            } else {
                a->ram_held[last].bytes -= part;
                comem_entry_set_resident(a->c, a->ram_held[last].entry, a->ram_held[last].bytes);
                agent_ram_give(a, part);
                atomic_fetch_sub(ram, part);
            }
            give -= part;
        }
        publish_rss(a);
        pthread_mutex_unlock(&a->lock);
        agent_ev(a, EV_RAM, -1, atomic_load(ram), 0);
        return;
    }
    uint64_t grant = 0;
    int64_t short_by = 0;
    int rc = admit_ram(a, grow, &grant, &short_by);
    if (rc == COMEM_ENOSPC && short_by > 0) {
        pthread_mutex_lock(&a->lock);
        int64_t dropped = ram_drop_oldest(a, short_by);
        publish_rss(a);
        pthread_mutex_unlock(&a->lock);
        if (dropped > 0)
            agent_ev(a, EV_RAM_DROP, -1, dropped, 0);
        /* asked again until the coordinator's reading of this process shows the copies gone */
        double t0 = agent_now(a);
        do {
            sh_sleep(a->sh, 0.5);
            rc = admit_ram(a, grow, &grant, &short_by);
        } while (rc == COMEM_ENOSPC && dropped > 0 && agent_waited(a, t0) < a->s->admit_wait &&
                 !atomic_load(&a->sh->end));
    }
    if (rc != COMEM_OK || a->n_ram >= SC_MAX_STEPS) {
        if (rc == COMEM_OK)
            comem_grant_done(a->c, grant, 0, 0);
        agent_ev(a, EV_RAM_REFUSED, -1, grow, 0);
        return;
    }
    if (!agent_ram_take(a, grow)) { /* something the ledger does not see (an app) holds it: the kernel's turn */
        comem_grant_done(a->c, grant, 0, 0);
        atomic_fetch_add(&a->sh->ram_total, grow);
        atomic_fetch_add(ram, grow);
        agent_ev(a, EV_RAM, -1, atomic_load(ram), 1);
        agent_oom_kill(a);
        return;
    }
    char name[32];
    snprintf(name, sizeof name, "ram-copy-%d", a->n_ram);
    uint64_t entry = 0;
    pthread_mutex_lock(&a->lock);
    atomic_fetch_add(ram, grow);
    /* the grant becomes the entry's residency (an entry added resident would count the bytes twice until then) */
    if (comem_entry_add(a->c, a->h_ram, name, grow, 0, COMEM_ENTRY_RAM_FILE, &entry) == COMEM_OK) {
        a->ram_held[a->n_ram].entry = entry;
        a->ram_held[a->n_ram].bytes = grow;
        a->n_ram++;
    }
    comem_grant_done(a->c, grant, entry, grow);
    publish_rss(a);
    pthread_mutex_unlock(&a->lock);
    agent_ev(a, EV_RAM, -1, atomic_load(ram), 0);
}

/* ---- the command line ---- */

/* `comem release --process NAME [--bytes N]`, the command line a user would type; the bytes it got back. */
static int64_t cli_release(agent *a, const sc_step *st)
{
    int out[2];
    if (pipe(out) != 0)
        return -1;
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%lld", (long long)st->bytes);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        if (st->bytes >= 0)
            execl("/proc/self/exe", "comem", "release", "--socket", a->sock, "--process",
                  a->s->procs[st->target].name, "--bytes", bytes, "--json", (char *)NULL);
        else
            execl("/proc/self/exe", "comem", "release", "--socket", a->sock, "--process",
                  a->s->procs[st->target].name, "--json", (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    char buf[4096];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(out[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    close(out[0]);
    waitpid(pid, NULL, 0);
    json_object *o = json_tokener_parse(buf), *v = NULL;
    int64_t freed = o && json_object_object_get_ex(o, "freed", &v) ? json_object_get_int64(v) : 0;
    if (o)
        json_object_put(o);
    return freed;
}

/* ---- an LLM server: comem-apps' look ---- */

/*
 * comem-apps' reload = "when-free" (python/comem/apps/holder.py, reload_when_free): once a second, the
 * largest model comem unloaded for another process (not by an idle release) is loaded again when the coordinator's room (free, less what is granted
 * and the reserve: the view's) covers what it held, through an admission (agent_bring_in) that waits at
 * most 5 s; refused, it is looked at again a second later (EV_NO_ROOM_YET, no failure). A request that
 * comes first loads it itself, through the proxy's admission (the scenario's admit-wait).
 */
static void *apps_look(void *arg)
{
    agent *a = arg;
    while (!atomic_load(&a->sh->end)) {
        sh_sleep(a->sh, 1.0);
        int best = -1;
        int64_t need = 0;
        pthread_mutex_lock(&a->lock);
        for (int i = 0; i < a->pr->n_models; i++)
            if (a->m[i].evicted_pending > need && a->m[i].resident == 0 && !a->m[i].idle_taken) {
                best = i;
                need = a->m[i].evicted_pending;
            }
        pthread_mutex_unlock(&a->lock);
        int64_t room = -1;
        if (best < 0 || atomic_load(&a->sh->end) || comem_view_room(a->view, a->card, &room) != COMEM_OK ||
            room < need)
            continue;
        pthread_mutex_lock(&a->load_lock); /* the timeline's loads wait, so when_free is this thread's */
        a->when_free = true;
        agent_bring_in(a, best);
        a->when_free = false;
        pthread_mutex_unlock(&a->load_lock);
    }
    return NULL;
}

/* ---- the policy ---- */

static void open_comem(agent *a)
{
    const sc_proc *pr = a->pr;
    int role = pr->role == ROLE_HOST ? COMEM_CLIENT_HOST : COMEM_CLIENT_WORKER;
    comem_reserve_opts ro = {.windows = a->s->card.semantics == SC_WDDM,
                             .total_vram_mib = (double)(a->s->card.size - a->s->card.reserved) / (double)COMEM_MIB,
                             .reserve_vram_set = a->s->reserve >= 0,
                             .reserve_vram_gb = (double)a->s->reserve / (double)COMEM_GIB};
    int64_t base = role == COMEM_CLIENT_HOST ? (int64_t)comem_extra_reserved_vram(&ro) : -1;
    unsigned flags = a->s->coordinator ? COMEM_OPEN_NO_LOCAL : 0;
    if (comem_client_open(a->sock, role, pr->name, base, flags, &a->c) != COMEM_OK) {
        a->c = NULL;
        agent_ev(a, EV_LOCAL, -1, 0, 0);
        return;
    }
    comem_client_set_timeout(a->c, 20000);
    if (!comem_client_connected(a->c))
        agent_ev(a, EV_LOCAL, -1, 0, 0);
    comem_sim_touch(a->sim, a->card); /* CUDA initialisation */
    /* a server's holder answers idle releases as a worker's does (comem-apps: answers release and idle) */
    unsigned hflags = COMEM_ANSWERS_RELEASE | (pr->role != ROLE_HOST ? COMEM_ANSWERS_IDLE : 0);
    comem_holder_add(a->c, "models", a->card, COMEM_KIND_MODELS, hflags, on_release_models, a, &a->h_models);
    if (agent_server(a) && comem_client_connected(a->c) && comem_client_view(a->c, &a->view) == COMEM_OK &&
        pthread_create(&a->look, NULL, apps_look, a) == 0)
        a->look_on = true;
    if (a->s->ram_ledger && !agent_uma(a) && !agent_server(a)) { /* a server's RAM stays plain RAM */
        comem_holder_add(a->c, "ram-copies", COMEM_DEVICE_HOST_RAM, COMEM_KIND_MODELS,
                         COMEM_ANSWERS_RELEASE | COMEM_ANSWERS_IDLE, on_release_ram, a, &a->h_ram);
        pthread_mutex_lock(&a->lock);
        publish_rss(a);
        pthread_mutex_unlock(&a->lock);
    }
}

static void close_comem(agent *a)
{
    if (a->look_on) /* the run is over (sh->end): the look ends within its second */
        pthread_join(a->look, NULL);
    if (a->view)
        comem_view_close(a->view);
    if (a->pager)
        comem_pager_close(a->pager); /* detaches first */
    if (a->c)
        comem_client_close(a->c);
}

static void busy_comem(agent *a, bool on, const char *prompt)
{
    if (a->c)
        comem_holder_busy(a->c, 0, on ? 1 : 0, prompt);
}

static void admit_paged_comem(agent *a, int i, uint64_t *grant)
{
    if (a->c)
        admit_for(a, i, a->pr->models[i].size, grant);
}

static void paged_loaded_comem(agent *a, int i, uint64_t grant)
{
    if (!grant)
        return;
    comem_grant_done(a->c, grant, 0, 0);    /* the pager reports what it holds itself: */
    comem_vbar_unpin(a->m[i].vbar, 0, 0); /* a boundary, so it sends what the ledger refused while
                                             the grant still counted the same bytes */
}

static bool admit_whole_comem(agent *a, int i, int64_t *need, uint64_t *grant)
{
    if (*need > 0 && agent_server(a) && !a->m[i].evicted_pending)
        return true; /* a model comem did not unload: the server loads it by itself, admitted by nobody */
    return *need > 0 && admit_for(a, i, *need, grant) == COMEM_OK;
}

static void whole_loaded_comem(agent *a, int i, uint64_t grant, int64_t got)
{
    amodel *m = &a->m[i];
    if (!m->entry && (m->resident > 0 || !agent_server(a))) /* comem-apps lists a server's loaded models only */
        comem_entry_add(a->c, a->h_models, a->pr->models[i].name, a->pr->models[i].size, 0, 0, &m->entry);
    if (grant) /* cancelled or short: what did load is re-attributed */
        comem_grant_done(a->c, grant, m->entry, m->entry ? got : 0);
    if (m->entry)
        comem_entry_set_resident(a->c, m->entry, m->resident);
}

static void whole_unloaded_comem(agent *a, int i)
{
    if (a->m[i].entry) {
        comem_entry_remove(a->c, a->m[i].entry);
        a->m[i].entry = 0;
    }
}

static void census_comem(agent *a, int i)
{
    (void)a; /* the entries' residency and the attached pager tell the coordinator */
    (void)i;
}

static void pager_opened_comem(agent *a)
{
    if (a->c && comem_client_connected(a->c))
        comem_pager_attach(a->pager, a->c, "weights");
}

static void inject_faults_comem(agent *a, int i, int count)
{
    (void)i;
    comem_pager_inject_commit_failures(a->pager, 0, count, 0); /* the pager retries them (F13) */
}

/* A fixed ring of three 64 MiB buffers, booked against the machine's pin budget. */
static int64_t staging_target_comem(agent *a, int64_t staging, int64_t streamed)
{
    (void)a;
    (void)staging;
    return comem_min(streamed, 3 * 64 * COMEM_MIB);
}

static bool book_staging_comem(agent *a, int64_t bytes)
{
    if (!a->c)
        return true;
    ensure_pins_holder(a);
    return comem_pin_acquire(a->c, a->h_pins, bytes, NULL) == COMEM_OK;
}

static bool pin_comem(agent *a, int64_t bytes)
{
    if (!a->c)
        return true;
    ensure_pins_holder(a);
    double t0 = agent_now(a);
    for (;;) {
        int64_t short_by = 0;
        int rc = comem_pin_acquire(a->c, a->h_pins, bytes, &short_by);
        if (rc == COMEM_OK)
            return true;
        if (rc != COMEM_ENOSPC || agent_waited(a, t0) >= a->s->admit_wait || atomic_load(&a->sh->end)) {
            agent_ev(a, EV_PIN_REFUSED, -1, bytes, short_by);
            return false;
        }
        sh_sleep(a->sh, 1.0); /* queued; the coordinator asks other pin holders meanwhile */
    }
}

static void unpin_comem(agent *a, int64_t bytes)
{
    if (a->c)
        comem_pin_release(a->c, a->h_pins, bytes);
}

static void custom_changed_comem(agent *a, int64_t bytes)
{
    if (!a->c)
        return;
    if (!a->h_custom) {
        comem_holder_add(a->c, "custom-node", a->card, COMEM_KIND_RAW, COMEM_ANSWERS_RELEASE, on_release_custom, a,
                         &a->h_custom);
        comem_entry_add(a->c, a->h_custom, "raw-vram", bytes, bytes, 0, &a->e_custom);
    } else {
        comem_entry_set_resident(a->c, a->e_custom, bytes);
    }
}

static bool ram_comem(agent *a, int64_t target)
{
    if (!ram_on_ledger(a))
        return false;
    ledger_ram(a, target);
    return true;
}

static int64_t pressure_comem(agent *a, int64_t bytes)
{
    int64_t freed = 0;
    if (a->c)
        comem_pressure(a->c, a->card, bytes, 20000, &freed);
    return freed;
}

const agent_policy agent_policy_comem = {
    .open = open_comem,
    .close = close_comem,
    .busy = busy_comem,
    .busy_covers_loads = true,
    .admit_paged = admit_paged_comem,
    .paged_loaded = paged_loaded_comem,
    .admit_whole = admit_whole_comem,
    .whole_loaded = whole_loaded_comem,
    .whole_unloaded = whole_unloaded_comem,
    .census = census_comem,
    .pager_opened = pager_opened_comem,
    .inject_faults = inject_faults_comem,
    .staging_target = staging_target_comem,
    .book_staging = book_staging_comem,
    .pin = pin_comem,
    .unpin = unpin_comem,
    .custom_changed = custom_changed_comem,
    .ram = ram_comem,
    .ram_changed = publish_rss,
    .release = cli_release,
    .pressure = pressure_comem,
};
