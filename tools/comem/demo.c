/*
 * tools/comem/demo.c - `comem demo`: three processes share a simulated 24 GiB card.
 *
 * This process is the host (ComfyUI's place): it starts an embedded
 * coordinator on a simulated card in a temp directory, loads two models, and
 * answers release asks by freeing part of them. Two workers (this binary
 * re-executed as `comem demo-worker`, real processes using libcomem) join:
 *
 *   1. the host loads a 12 GiB UNet and a 5 GiB text encoder;
 *   2. worker "sam3" asks to load 6 GiB: the card is short, the coordinator
 *      asks the host for a sized release, the host frees part of a model, and
 *      the worker is granted;
 *   3. worker "depth" loads 2 GiB, works, goes idle, and is asked to release;
 *   4. "sam3" is killed with SIGKILL and its bytes come back.
 *
 * The ledger is printed after each step. Every figure comes from the
 * coordinator's status snapshot and the simulated card.
 */
#include <errno.h>
#include <json-c/json.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/size.h"
#include "cmds.h"
#include "comem/comem.h"
#include "probe/sim.h"
#include "simulate/tmpdir.h"

#define GIB COMEM_GIB
#define MIB COMEM_MIB

/* ---- a process's models on the simulated card ---- */

typedef struct model {
    const char *name;
    int64_t size, resident;
    uint64_t entry;
} model;

typedef struct holder_state {
    pthread_mutex_t lock;
    comem_sim *sim;
    comem_client *client;
    model models[4];
    int n;
    uint64_t holder;
    bool is_host; /* the host narrates the releases it is asked for */
} holder_state;

/* Loads a model: ask the coordinator, allocate what was granted, report it. */
static int load(holder_state *hs, const char *name, int64_t size, bool verbose)
{
    uint64_t grant = 0;
    int64_t short_by = 0;
    int rc = comem_admit(hs->client, 0, hs->holder, size, 1 * GIB, 0, NULL, 0, 20000, &grant, &short_by);
    int64_t need = 0, freed = 0;
    int asked = 0;
    comem_admit_details(hs->client, &need, NULL, NULL, &freed, &asked, NULL);
    char a[32], b[32], c[32];
    if (rc != COMEM_OK) {
        printf("    %s: admission for %s refused (%s short)\n", name, comem_format_bytes(size, a, 32),
               comem_format_bytes(short_by, b, 32));
        return rc;
    }
    if (verbose)
        printf("    %s: admission for %s granted (ask target %s; %d holder(s) asked, %s freed for it)\n", name,
               comem_format_bytes(size, a, 32), comem_format_bytes(need, b, 32), asked,
               comem_format_bytes(freed, c, 32));
    pthread_mutex_lock(&hs->lock);
    rc = comem_sim_alloc(hs->sim, 0, size);
    model *m = &hs->models[hs->n++];
    *m = (model){.name = name, .size = size, .resident = rc == COMEM_OK ? size : 0};
    comem_entry_add(hs->client, hs->holder, name, size, 0, 0, &m->entry);
    pthread_mutex_unlock(&hs->lock);
    comem_grant_done(hs->client, grant, m->entry, m->resident);
    return rc;
}

/* The release callback: free what the coordinator planned, in whole 64 MiB modules. */
static int on_release(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                      const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder;
    holder_state *hs = user;
    *freed = 0;
    pthread_mutex_lock(&hs->lock);
    for (int i = 0; i < hs->n; i++) {
        model *m = &hs->models[i];
        int64_t want = 0;
        if (kind == COMEM_RELEASE_IDLE)
            want = m->resident;
        for (size_t k = 0; k < n; k++)
            if (entries[k] == m->entry)
                want = amounts[k];
        if (n == 0 && kind == COMEM_RELEASE_BYTES)
            want = comem_min(m->resident, bytes - *freed);
        int64_t mod = 64 * MIB, give = comem_min(m->resident, (want + mod - 1) / mod * mod);
        if (give <= 0)
            continue;
        comem_sim_free(hs->sim, 0, give);
        m->resident -= give;
        *freed += give;
        comem_entry_set_resident(hs->client, m->entry, m->resident);
        if (hs->is_host) {
            char a[32], b[32];
            printf("    host: asked to release %s of %s; freed %s (64 MiB modules)\n",
                   comem_format_bytes(want, a, 32), m->name, comem_format_bytes(give, b, 32));
        }
    }
    pthread_mutex_unlock(&hs->lock);
    return COMEM_OK;
}

static int open_state(holder_state *hs, const char *sock, const char *spec, int role, const char *name)
{
    memset(hs, 0, sizeof *hs);
    pthread_mutex_init(&hs->lock, NULL);
    comem_sim_spec sp;
    if (comem_sim_spec_parse(spec, &sp, NULL, 0) != COMEM_OK || comem_sim_open(&sp, &hs->sim) != COMEM_OK)
        return COMEM_EIO;
    int rc = comem_client_open(sock, role, name, role == COMEM_CLIENT_HOST ? 400 * MIB : -1, COMEM_OPEN_NO_LOCAL,
                               &hs->client);
    if (rc != COMEM_OK)
        return rc;
    comem_sim_touch(hs->sim, 0); /* CUDA initialisation: the context exists from now on */
    /* ComfyUI's own list answers sized releases; a worker also gives everything back when idle. */
    unsigned flags = COMEM_ANSWERS_RELEASE | (role == COMEM_CLIENT_WORKER ? COMEM_ANSWERS_IDLE : 0);
    hs->is_host = role == COMEM_CLIENT_HOST;
    return comem_holder_add(hs->client, "models", 0, COMEM_KIND_MODELS, flags, on_release, hs, &hs->holder);
}

/* ---- the worker side: `comem demo-worker SOCKET SPEC NAME BYTES` ---- */

int cmd_demo_worker(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    holder_state hs;
    if (open_state(&hs, argv[0], argv[1], COMEM_CLIENT_WORKER, argv[2]) != COMEM_OK)
        return 1;
    int64_t bytes = strtoll(argv[3], NULL, 10);
    int rc = load(&hs, "model", bytes, false);
    printf("%s\n", rc == COMEM_OK ? "loaded" : "refused");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) { /* the demo drives node boundaries */
        if (!strncmp(line, "busy", 4))
            comem_holder_busy(hs.client, 0, 1, "prompt-1");
        else if (!strncmp(line, "idle", 4))
            comem_holder_busy(hs.client, 0, 0, "prompt-1");
        printf("ok\n");
        fflush(stdout);
    }
    comem_client_close(hs.client);
    return 0;
}

typedef struct worker {
    pid_t pid;
    FILE *to, *from;
} worker;

static int spawn(worker *w, const char *sock, const char *spec, const char *name, int64_t bytes)
{
    int in[2], out[2];
    if (pipe(in) || pipe(out))
        return -1;
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)bytes);
    w->pid = fork();
    if (w->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execl("/proc/self/exe", "comem", "demo-worker", sock, spec, name, b, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    w->to = fdopen(in[1], "w");
    w->from = fdopen(out[0], "r");
    return 0;
}

static bool expect(worker *w, const char *what)
{
    char line[64];
    struct pollfd p = {.fd = fileno(w->from), .events = POLLIN};
    if (poll(&p, 1, 30000) <= 0 || !fgets(line, sizeof line, w->from))
        return false;
    return strncmp(line, what, strlen(what)) == 0;
}

static void say(worker *w, const char *line)
{
    fprintf(w->to, "%s\n", line);
    fflush(w->to);
}

/* ---- printing the ledger ---- */

static json_object *get(json_object *o, const char *k)
{
    json_object *v = NULL;
    json_object_object_get_ex(o, k, &v);
    return v;
}
static int64_t geti(json_object *o, const char *k) { return get(o, k) ? json_object_get_int64(get(o, k)) : -1; }

static json_object *snapshot(comem_client *c)
{
    char *text = NULL;
    if (comem_status_json(c, &text) != COMEM_OK)
        return NULL;
    json_object *root = json_tokener_parse(text);
    comem_free(text);
    return root;
}

static void print_ledger(comem_client *c)
{
    json_object *root = snapshot(c);
    if (!root) {
        printf("    (no status)\n");
        return;
    }
    char b[5][32];
    json_object *d = json_object_array_get_idx(get(root, "devices"), 0);
    printf("    card %s: free %s, reserve %s, attributed %s, unattributed %s\n",
           comem_format_bytes(geti(d, "capacity"), b[0], 32), comem_format_bytes(geti(d, "free"), b[1], 32),
           comem_format_bytes(geti(get(d, "reserve"), "published"), b[2], 32),
           comem_format_bytes(geti(d, "attributed"), b[3], 32), comem_format_bytes(geti(d, "unattributed"), b[4], 32));
    json_object *ps = get(d, "processes");
    for (size_t i = 0; ps && i < json_object_array_length(ps); i++) {
        json_object *p = json_object_array_get_idx(ps, i);
        if (!strcmp(json_object_get_string(get(p, "role")), "tool"))
            continue;
        printf("    %-6s %-14s pid %-7lld context %-10s resident %-10s %s\n", json_object_get_string(get(p, "role")),
               json_object_get_string(get(p, "name")), (long long)geti(p, "pid"),
               comem_format_bytes(geti(p, "context_floor"), b[0], 32), comem_format_bytes(geti(p, "resident"), b[1], 32),
               json_object_get_boolean(get(p, "busy")) ? "busy" : "idle");
        json_object *hs = get(p, "holders");
        for (size_t k = 0; hs && k < json_object_array_length(hs); k++) {
            json_object *es = get(json_object_array_get_idx(hs, k), "entries");
            for (size_t e = 0; es && e < json_object_array_length(es); e++) {
                json_object *x = json_object_array_get_idx(es, e);
                printf("             %-20s %10s of %s\n", json_object_get_string(get(x, "name")),
                       comem_format_bytes(geti(x, "resident"), b[0], 32), comem_format_bytes(geti(x, "size"), b[1], 32));
            }
        }
    }
    json_object_put(root);
}

/* Waits until the named worker's residency (or its whole session) satisfies pred. */
static bool wait_for(comem_client *c, const char *name, bool gone, int64_t max_resident, int timeout_ms)
{
    for (int t = 0; t < timeout_ms; t += 50) {
        json_object *root = snapshot(c);
        bool found = false, ok = false;
        json_object *d = root ? json_object_array_get_idx(get(root, "devices"), 0) : NULL;
        json_object *ps = d ? get(d, "processes") : NULL;
        for (size_t i = 0; ps && i < json_object_array_length(ps); i++) {
            json_object *p = json_object_array_get_idx(ps, i);
            if (!strcmp(json_object_get_string(get(p, "name")), name)) {
                found = true;
                ok = geti(p, "resident") <= max_resident;
            }
        }
        if (root)
            json_object_put(root);
        if (gone ? !found : ok)
            return true;
        usleep(50000);
    }
    return false;
}

int cmd_demo(int argc, char **argv)
{
    if (argc > 0) {
        bool help = !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h");
        fprintf(help ? stdout : stderr,
                "usage: comem demo\n"
                "  Three real processes share a simulated 24 GiB card: a host loads two models, a worker's\n"
                "  admission makes the host release part of one, an idle worker is asked to release, and a\n"
                "  killed worker's bytes come back. Takes no flags.\n");
        if (!help)
            fprintf(stderr, "comem demo: unexpected argument '%s'\n", argv[0]);
        return help ? 0 : 2;
    }
    char dir[112], sock[128], spec[192];
    if (cli_mkdtemp(dir, sizeof dir, "comem-demo") != 0) {
        fprintf(stderr, "comem demo: cannot make its folder %s: %s\n", dir, strerror(errno));
        return 1;
    }
    snprintf(sock, sizeof sock, "%s/comem.sock", dir);
    snprintf(spec, sizeof spec, "sim:24GiB:path=%s/card", dir);
    setenv("COMEM_IDLE_SECONDS", "2", 1); /* short, so the idle release shows within the demo */
    if (!getenv("COMEM_LOG"))
        setenv("COMEM_LOG", "warn", 1);
    signal(SIGPIPE, SIG_IGN);

    printf("comem demo: one simulated 24 GiB card (linux semantics), shared by three real processes\n");
    printf("  coordinator: embedded in this process, socket %s\n\n", sock);
    comem_coord *coord = NULL;
    int rc = comem_coord_start(sock, spec, &coord);
    holder_state host;
    if (rc == COMEM_OK)
        rc = open_state(&host, sock, spec, COMEM_CLIENT_HOST, "comfyui-host");
    if (rc != COMEM_OK) {
        fprintf(stderr, "comem demo: cannot start: %s\n", comem_status_str(rc));
        return 1;
    }
    int status = 0;
    worker sam = {0}, depth = {0};

    printf("1. The host loads a 12 GiB UNet and a 5 GiB text encoder.\n");
    if (load(&host, "flux-unet", 12 * GIB, true) || load(&host, "t5-encoder", 5 * GIB, true))
        status = 1;
    print_ledger(host.client);

    printf("\n2. Worker 'sam3' asks to load 6 GiB: the card is short, so the coordinator asks the host\n"
           "   for a sized release (ComfyUI's order: the smallest model first), then grants.\n");
    if (spawn(&sam, sock, spec, "sam3", 6 * GIB) || !expect(&sam, "loaded"))
        status = 1;
    print_ledger(host.client);

    say(&sam, "busy"); /* sam3 now runs a node: a busy worker is never asked to release */
    expect(&sam, "ok");
    printf("\n3. Worker 'depth' loads 2 GiB (the host makes room again), runs a node, and goes idle;\n"
           "   after 2 s idle the coordinator asks it to release (sam3 is busy, so it is left alone).\n");
    if (spawn(&depth, sock, spec, "depth", 2 * GIB) || !expect(&depth, "loaded"))
        status = 1;
    say(&depth, "busy");
    expect(&depth, "ok");
    say(&depth, "idle");
    expect(&depth, "ok");
    if (!wait_for(host.client, "depth", false, 0, 10000)) {
        printf("    (depth was not released in time)\n");
        status = 1;
    }
    print_ledger(host.client);

    printf("\n4. 'sam3' is killed with SIGKILL: its session ends and its bytes come back.\n");
    kill(sam.pid, SIGKILL);
    waitpid(sam.pid, NULL, 0);
    if (!wait_for(host.client, "sam3", true, 0, 5000)) {
        printf("    (sam3's session did not end in time)\n");
        status = 1;
    }
    print_ledger(host.client);

    if (depth.to)
        fclose(depth.to); /* its stdin closes: it exits */
    if (depth.pid > 0)
        waitpid(depth.pid, NULL, 0);
    if (sam.to)
        fclose(sam.to);
    comem_client_close(host.client);
    comem_sim_close(host.sim);
    comem_coord_stop(coord);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        status = 1;
    printf("\n%s\n", status == 0 ? "demo finished." : "demo FAILED: a step did not happen as described.");
    return status;
}
