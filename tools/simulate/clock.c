/*
 * tools/simulate/clock.c - the shared clock, the event log, and a reading of the cards, for every process of a run.
 */
#include "simulate/clock.h"

#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/clock.h"
#include "comem/common.h"
#include "probe/sim.h"

double sh_now(const sh_run *r)
{
    if (!r->t0_ns)
        return 0;
    return (double)(comem_now_ns() - r->t0_ns) / 1e9 * r->speed;
}

void sh_event_add(sh_run *r, int proc, sh_kind kind, int model, int card, int64_t a, int64_t b)
{
    uint32_t i = atomic_fetch_add(&r->n_events, 1);
    if (i >= SH_MAX_EVENTS) {
        atomic_fetch_add(&r->dropped, 1);
        return;
    }
    r->ev[i] = (sh_event){sh_now(r), proc, (int32_t)kind, model, card, a, b};
}

/*
 * Whether every process that starts before scenario time t has started or is
 * gone. A start (the client's open, CUDA initialisation: a policy's open, agent_*.c) takes real
 * time that grows with the machine's load and with how many processes start at
 * once; scenario time does not wait for it, so without this a step written
 * seconds after another process's start could still come before it (F14: a
 * context created after loads were admitted on the card without it).
 */
static bool started_before(const sh_run *r, double t)
{
    for (int i = 0; i < r->n_procs; i++)
        if (r->p[i].start < t && !atomic_load(&r->p[i].started) && atomic_load(&r->p[i].state) != 3)
            return false;
    return true;
}

void sh_sleep_until(sh_run *r, double t)
{
    for (;;) {
        if (atomic_load(&r->end))
            return;
        double left = t - sh_now(r);
        if (left <= 0) {
            if (started_before(r, t))
                return;
            usleep(1000); /* a start still under way: it is ordered first */
            continue;
        }
        double real = left / r->speed;
        usleep((useconds_t)(comem_min((int64_t)(real * 1e6), 20000) + 1));
    }
}

void sh_sleep(sh_run *r, double secs) { sh_sleep_until(r, sh_now(r) + secs); }

void sh_read_cards(sh_run *r, const scenario *s, comem_sim *sim, comem_device_reading *rd, run_sample *x)
{
    memset(x, 0, sizeof *x);
    x->t = sh_now(r);
    for (int c = 0; c < s->n_cards; c++) {
        if (comem_sim_read(sim, c, rd) != COMEM_OK)
            continue;
        x->used[c] = rd->used;
        x->free[c] = rd->free;
        x->over[c] = rd->overcommit;
        for (size_t k = 0; k < rd->n_procs; k++)
            for (int i = 0; i < s->n_procs; i++)
                if (s->procs[i].card == c && atomic_load(&r->p[i].pid) == rd->procs[k].pid)
                    x->dev[i] = rd->procs[k].bytes;
    }
    for (int i = 0; i < s->n_procs; i++) {
        x->pinned[i] = atomic_load(&r->p[i].pinned) + atomic_load(&r->p[i].staging);
        x->foreign[i] = atomic_load(&r->p[i].foreign[s->procs[i].card]);
        x->ram += x->pinned[i] + atomic_load(&r->p[i].ram);
    }
}
