/*
 * tools/simulate/run.c - one run: a scenario replayed under one policy.
 *
 * Order matters, because agents are forked: the run directory, the shared
 * state and the card file first, then every agent (forked while this process
 * has no thread but its main one), then the coordinator or the model engine,
 * then the clock starts, the agents are let go and the main thread samples.
 * The run ends at the scenario's end (or 5 s after the last process finished
 * its timeline); the agents are told, close their clients and exit; the
 * events and samples are what the report is computed from.
 */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/clock.h"
#include "comem/comem.h"
#include "coord/coord.h"
#include "probe/sim.h"
#include "simulate/agent.h"
#include "simulate/clock.h"
#include "simulate/engine.h"
#include "simulate/report.h"
#include "simulate/run.h"
#include "simulate/tmpdir.h"

typedef struct run {
    const scenario *s;
    sc_policy pol;
    bool verbose;
    char dir[112], sock[128], spec[256], hostroot[128];
    sh_run *sh;
    comem_sim *sim;
    pid_t pids[SC_MAX_PROCS];
    int go[SC_MAX_PROCS], req[SC_MAX_PROCS], cmd[SC_MAX_PROCS];
    comem_coord_srv *coord;
    pthread_t coord_thread;
    bool coord_on;
    sim_engine *engine;
    comem_client *tool; /* reads the coordinator's status */
    run_result *out;
    int64_t led_granted, led_pins, led_pins_max;
    bool ledger_read;
} run;

static void *coord_loop(void *arg)
{
    comem_coord_run(((run *)arg)->coord);
    return NULL;
}

static int write_file(const char *dir, const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    for (char *c = path + strlen(dir) + 1; *c; c++) {
        if (*c == '/') {
            *c = '\0';
            mkdir(path, 0700);
            *c = '/';
        }
    }
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

/* The machine's RAM as a /proc + cgroup tree the coordinator reads (COMEM_HOSTMEM_ROOT). */
static int write_host_tree(run *r)
{
    const scenario *s = r->s;
    char buf[512];
    if (mkdir(r->hostroot, 0700) != 0)
        return -1;
    snprintf(buf, sizeof buf, "MemTotal: %lld kB\nMemFree: %lld kB\nMemAvailable: %lld kB\nSwapTotal: %lld kB\n",
             (long long)(s->ram >> 10), (long long)(s->ram >> 10), (long long)(s->ram >> 10),
             (long long)(s->swap >> 10));
    int rc = write_file(r->hostroot, "proc/meminfo", buf);
    snprintf(buf, sizeof buf, "Filename\tType\tSize\tUsed\tPriority\n%s", s->swap > 0 ? "" : "");
    if (s->swap > 0)
        snprintf(buf, sizeof buf, "Filename\tType\tSize\tUsed\tPriority\n/swapfile\tfile\t%lld\t0\t-2\n",
                 (long long)(s->swap >> 10));
    rc |= write_file(r->hostroot, "proc/swaps", buf);
    rc |= write_file(r->hostroot, "proc/self/cgroup", "0::/sim\n");
    if (s->cgroup > 0) {
        snprintf(buf, sizeof buf, "%lld\n", (long long)s->cgroup);
        rc |= write_file(r->hostroot, "sys/fs/cgroup/sim/memory.max", buf);
        rc |= write_file(r->hostroot, "sys/fs/cgroup/sim/memory.current", "0\n");
    } else {
        rc |= write_file(r->hostroot, "sys/fs/cgroup/sim/memory.max", "max\n");
    }
    return rc;
}

static json_object *jget(json_object *o, const char *k)
{
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, k, &v) ? v : NULL;
}

static int64_t jint(json_object *o, const char *k)
{
    json_object *v = jget(o, k);
    return v ? json_object_get_int64(v) : 0;
}

static json_object *status(run *r)
{
    char *text = NULL;
    if (!r->tool || comem_status_json(r->tool, &text) != COMEM_OK)
        return NULL;
    json_object *o = json_tokener_parse(text);
    comem_free(text);
    return o;
}

/* Whether the ledger still has a session for pid. */
static bool ledger_has(run *r, int32_t pid)
{
    json_object *st = status(r);
    if (!st)
        return false;
    bool found = false;
    json_object *devs = jget(st, "devices");
    for (size_t d = 0; devs && d < json_object_array_length(devs) && !found; d++) {
        json_object *ps = jget(json_object_array_get_idx(devs, d), "processes");
        for (size_t i = 0; ps && i < json_object_array_length(ps); i++)
            if (jint(json_object_array_get_idx(ps, i), "pid") == pid)
                found = true;
    }
    json_object_put(st);
    return found;
}

/* Whether the card still charges pid (the driver's side of a process's death). */
static bool card_has(run *r, int card, int32_t pid)
{
    int64_t ctx = 0, alloc = 0;
    comem_sim_usage(r->sim, card, pid, &ctx, &alloc);
    return ctx + alloc > 0;
}

static void reap(run *r)
{
    for (int i = 0; i < r->s->n_procs; i++) {
        if (r->pids[i] <= 0)
            continue;
        int st;
        pid_t p = waitpid(r->pids[i], &st, WNOHANG);
        if (p != r->pids[i])
            continue;
        int64_t t0 = comem_now_ns();
        bool signalled = WIFSIGNALED(st);
        atomic_store(&r->sh->p[i].state, 3);
        /* the kernel takes back a dead process's RAM, pinned or not (uma: the card reaps it) */
        sh_proc *sp = &r->sh->p[i];
        int64_t ram = atomic_exchange(&sp->pinned, 0) + atomic_exchange(&sp->ram, 0) + atomic_exchange(&sp->staging, 0);
        if (r->s->card.semantics != SC_UMA)
            atomic_fetch_sub(&r->sh->ram_total, ram);
        for (int c = 0; c < SC_MAX_CARDS; c++)
            atomic_store(&sp->foreign[c], 0);
        sh_event_add(r->sh, i, EV_DEATH, -1, r->s->procs[i].card, signalled, 0);
        r->pids[i] = -1;
        if (!signalled || atomic_load(&r->sh->end))
            continue;
        /* A death mid-run: how long until its bytes are back in the books. */
        int32_t pid = atomic_load(&r->sh->p[i].pid);
        bool back = false;
        for (int k = 0; k < 2000 && !back; k++) {
            back = r->pol == POL_COMEM && r->tool ? !ledger_has(r, pid) : !card_has(r, r->s->procs[i].card, pid);
            if (!back)
                usleep(250);
        }
        sh_event_add(r->sh, i, EV_RELEASED, -1, r->s->procs[i].card, (comem_now_ns() - t0) / 1000, back);
    }
}

static bool all_done(run *r, double *last)
{
    bool done = true;
    for (int i = 0; i < r->s->n_procs; i++) {
        int st = atomic_load(&r->sh->p[i].state);
        if (st < 2)
            done = false;
    }
    if (!done)
        *last = -1;
    else if (*last < 0)
        *last = sh_now(r->sh);
    return done;
}

/* Samples the cards every step of scenario time until the end; returns when the run is over. */
static void sample_loop(run *r)
{
    const scenario *s = r->s;
    run_result *o = r->out;
    double step = 0.25, next = 0, done_at = -1;
    comem_device_reading *rd = malloc(sizeof *rd);
    if (!rd)
        return;
    for (;;) {
        double t = sh_now(r->sh);
        reap(r);
        if (t >= next && o->n_samples < RUN_MAX_SAMPLES) {
            sh_read_cards(r->sh, s, r->sim, rd, &o->samples[o->n_samples++]);
            next = t + step;
        }
        bool done = all_done(r, &done_at);
        if ((s->end > 0 && t >= s->end) || (s->end <= 0 && done && t >= done_at + 5))
            break;
        bool any = false;
        for (int i = 0; i < s->n_procs; i++)
            any |= r->pids[i] > 0;
        if (!any && t > 1)
            break;
        usleep(2000);
    }
    free(rd);
}

/* The ledger's figures at the end (comem): grants still booked, pins booked. */
static void read_ledger_end(run *r)
{
    json_object *st = status(r);
    if (!st)
        return;
    json_object *devs = jget(st, "devices");
    r->led_granted = 0;
    for (size_t d = 0; devs && d < json_object_array_length(devs); d++) {
        json_object *dev = json_object_array_get_idx(devs, d);
        r->led_granted += jint(dev, "granted");
        json_object *ps = jget(dev, "processes");
        for (size_t i = 0; ps && i < json_object_array_length(ps); i++) {
            json_object *p = json_object_array_get_idx(ps, i);
            int idx = sc_proc_index(r->s, json_object_get_string(jget(p, "name")));
            if (idx < 0 || r->s->procs[idx].card != (int)d)
                continue;
            int64_t ctx = 0, alloc = 0;
            comem_sim_usage(r->sim, (int)d, (int32_t)jint(p, "pid"), &ctx, &alloc);
            if (getenv("COMEM_SIM_DEBUG"))
                fprintf(stderr, "ledger end: %s pid %lld ctx %lld alloc %lld floor %lld resident %lld\n",
                        r->s->procs[idx].name, (long long)jint(p, "pid"), (long long)ctx, (long long)alloc,
                        (long long)jint(p, "context_floor"), (long long)jint(p, "resident"));
            /* what the process holds beyond its context that no entry names (status shows it as the
               process's own "unregistered" bytes, not as the card's "unattributed") */
            r->out->unattributed[idx] = comem_clamp0(alloc - jint(p, "resident"));
        }
    }
    r->led_pins = jint(jget(st, "pins"), "total");
    r->led_pins_max = jint(jget(st, "pins"), "max");
    r->ledger_read = true;
    json_object_put(st);
}

static int cmp_ev(const void *x, const void *y)
{
    const sh_event *a = x, *b = y;
    return a->t < b->t ? -1 : a->t > b->t ? 1 : 0;
}

static void spec_text(const scenario *s, const char *dir, char *out, size_t len)
{
    snprintf(out, len, "sim:%dx%lld:%s:reserved=%lld:ctx=%lld:path=%s/card", s->n_cards, (long long)s->card.size,
             sc_semantics_names[s->card.semantics], (long long)s->card.reserved, (long long)s->card.ctx, dir);
}

static int start_services(run *r)
{
    const scenario *s = r->s;
    if (r->pol == POL_COMEM) {
        if (!s->coordinator)
            return COMEM_OK;
        comem_coord_config cfg;
        char err[160];
        if (comem_coord_config_defaults(&cfg, err, sizeof err) != COMEM_OK) {
            fprintf(stderr, "comem simulate: %s\n", err);
            return COMEM_EINVAL;
        }
        snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s", r->sock);
        snprintf(cfg.device_spec, sizeof cfg.device_spec, "%s", r->spec);
        cfg.idle_release_s = s->idle_release / s->speed; /* the scenario's clock */
        cfg.tick_ms = (int)comem_max(1, (int64_t)(250 / s->speed));
        if (s->ram_ledger) /* host RAM on a budget of the machine's limit; agents publish their RAM as RSS files */
            snprintf(cfg.ram_spec, sizeof cfg.ram_spec, "%lldMiB",
                     (long long)((s->cgroup > 0 ? comem_min(s->ram, s->cgroup) : s->ram) >> 20));
        int rc = comem_coord_create(&cfg, &r->coord);
        if (rc != COMEM_OK)
            return rc;
        if (pthread_create(&r->coord_thread, NULL, coord_loop, r) != 0)
            return COMEM_ENOMEM;
        r->coord_on = true;
        if (comem_client_open(r->sock, COMEM_CLIENT_TOOL, "simulate", -1, COMEM_OPEN_NO_LOCAL, &r->tool) != COMEM_OK)
            r->tool = NULL;
        return COMEM_OK;
    }
    return sim_engine_start(s, r->pol, r->sh, r->spec, r->req, r->cmd, &r->engine);
}

static void stop_services(run *r)
{
    if (r->tool)
        comem_client_close(r->tool);
    if (r->coord_on) {
        comem_coord_request_stop(r->coord);
        pthread_join(r->coord_thread, NULL);
    }
    if (r->coord)
        comem_coord_destroy(r->coord);
    if (r->engine)
        sim_engine_stop(r->engine);
}

int sim_run(const scenario *s, sc_policy policy, bool verbose, run_result *out)
{
    memset(out, 0, sizeof *out);
    out->policy = policy;
    out->semantics = s->card.semantics;
    out->samples = calloc(RUN_MAX_SAMPLES, sizeof *out->samples);
    if (!out->samples)
        return COMEM_ENOMEM;
    run r = {.s = s, .pol = policy, .verbose = verbose, .out = out};
    for (int i = 0; i < SC_MAX_PROCS; i++)
        r.go[i] = r.req[i] = r.cmd[i] = -1;
    if (cli_mkdtemp(r.dir, sizeof r.dir, "comem-sim") != 0) {
        snprintf(out->error, sizeof out->error, "cannot make its folder %s: %s", r.dir, strerror(errno));
        return COMEM_EIO;
    }
    snprintf(r.sock, sizeof r.sock, "%s/comem.sock", r.dir);
    snprintf(r.hostroot, sizeof r.hostroot, "%s/host", r.dir);
    spec_text(s, r.dir, r.spec, sizeof r.spec);
    int64_t t_wall = comem_now_ns();
    int rc = COMEM_OK;
    r.sh = mmap(NULL, sizeof *r.sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (r.sh == MAP_FAILED) {
        r.sh = NULL;
        rc = COMEM_ENOMEM;
        goto done;
    }
    r.sh->speed = s->speed;
    r.sh->n_procs = s->n_procs;
    for (int i = 0; i < s->n_procs; i++)
        r.sh->p[i].start = s->procs[i].start;
    comem_sim_spec sp;
    if (write_host_tree(&r) != 0 || comem_sim_spec_parse(r.spec, &sp, NULL, 0) != COMEM_OK ||
        comem_sim_open(&sp, &r.sim) != COMEM_OK) {
        snprintf(out->error, sizeof out->error, "cannot set up the run directory %s", r.dir);
        rc = COMEM_EIO;
        goto done;
    }
    setenv("COMEM_DEVICE", r.spec, 1); /* what a client without a coordinator reads */
    setenv("COMEM_HOSTMEM_ROOT", r.hostroot, 1);
    if (!verbose)
        setenv("COMEM_LOG", "error", 1);
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < s->n_procs; i++) {
        int go[2], req[2] = {-1, -1}, cmd[2] = {-1, -1};
        if (pipe(go) != 0 || (policy != POL_COMEM && (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, req) != 0 ||
                                                      socketpair(AF_UNIX, SOCK_SEQPACKET, 0, cmd) != 0))) {
            rc = COMEM_EIO;
            goto done;
        }
        pid_t pid = fork();
        if (pid < 0) {
            rc = COMEM_EIO;
            goto done;
        }
        if (pid == 0) {
            close(go[1]);
            if (req[0] >= 0) {
                close(req[0]);
                close(cmd[0]);
            }
            for (int k = 0; k < i; k++) {
                close(r.go[k]);
                if (r.req[k] >= 0) {
                    close(r.req[k]);
                    close(r.cmd[k]);
                }
            }
            comem_sim_close(r.sim);
            sim_agent_main(s, policy, i, r.sh, r.dir, r.sock, r.spec, go[0], req[1], cmd[1]);
        }
        close(go[0]);
        if (req[1] >= 0) {
            close(req[1]);
            close(cmd[1]);
        }
        r.pids[i] = pid;
        atomic_store(&r.sh->p[i].pid, pid);
        r.go[i] = go[1];
        r.req[i] = req[0];
        r.cmd[i] = cmd[0];
    }
    if ((rc = start_services(&r)) != COMEM_OK) {
        snprintf(out->error, sizeof out->error, "cannot start the %s side: %s", sc_policy_names[policy],
                 comem_status_str(rc));
        goto done;
    }
    r.sh->t0_ns = comem_now_ns();
    for (int i = 0; i < s->n_procs; i++) {
        char g = 'g';
        if (write(r.go[i], &g, 1) != 1)
            rc = COMEM_EIO;
        close(r.go[i]);
        r.go[i] = -1;
    }
    sample_loop(&r);
    if (policy == POL_COMEM && r.tool)
        read_ledger_end(&r);
    atomic_store(&r.sh->end, 1);
    int64_t deadline = comem_now_ns() + 10 * (int64_t)1000000000;
    for (;;) {
        reap(&r);
        bool any = false;
        for (int i = 0; i < s->n_procs; i++)
            any |= r.pids[i] > 0;
        if (!any || comem_now_ns() > deadline)
            break;
        usleep(2000);
    }
    out->ran = true;
done:
    for (int i = 0; i < s->n_procs; i++) {
        if (r.pids[i] > 0) {
            kill(r.pids[i], SIGKILL);
            waitpid(r.pids[i], NULL, 0);
        }
        if (r.go[i] >= 0)
            close(r.go[i]);
    }
    stop_services(&r);
    for (int i = 0; i < s->n_procs; i++) {
        if (r.req[i] >= 0)
            close(r.req[i]);
        if (r.cmd[i] >= 0)
            close(r.cmd[i]);
    }
    if (r.sh) {
        uint32_t n = (uint32_t)comem_min(atomic_load(&r.sh->n_events), SH_MAX_EVENTS);
        out->events = malloc((n ? n : 1) * sizeof *out->events);
        if (out->events) {
            memcpy(out->events, r.sh->ev, n * sizeof *out->events);
            out->n_events = (int)n;
            qsort(out->events, n, sizeof *out->events, cmp_ev);
        }
        out->marks = calloc(SC_MAX_MARKS, sizeof *out->marks);
        for (int m = 0; out->marks && m < s->n_marks; m++) {
            out->mark_taken[m] = atomic_load(&r.sh->mark_taken[m]);
            out->marks[m] = r.sh->marks[m];
        }
        if (atomic_load(&r.sh->dropped))
            fprintf(stderr, "comem simulate: %u events did not fit the log and were dropped\n",
                    atomic_load(&r.sh->dropped));
        /* the ledger's leftovers: grants never finished, pins of no live process */
        int64_t live_pins = 0;
        for (int i = 0; i < s->n_procs; i++)
            if (policy == POL_COMEM && atomic_load(&r.sh->p[i].state) != 3)
                live_pins += atomic_load(&r.sh->p[i].pinned) + atomic_load(&r.sh->p[i].staging);
        out->values[M_LEAKED] = r.ledger_read ? (double)(r.led_granted + comem_clamp0(r.led_pins - live_pins)) : 0;
        munmap(r.sh, sizeof *r.sh);
    }
    if (r.sim)
        comem_sim_close(r.sim);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", r.dir);
    if (system(cmd) != 0)
        fprintf(stderr, "comem simulate: could not remove %s\n", r.dir);
    unsetenv("COMEM_HOSTMEM_ROOT");
    out->wall_s = (double)(comem_now_ns() - t_wall) / 1e9;
    if (out->ran)
        sim_compute(s, out);
    return rc;
}

void sim_result_free(run_result *r)
{
    free(r->samples);
    free(r->events);
    free(r->marks);
    r->marks = NULL;
    r->samples = NULL;
    r->events = NULL;
}
