/*
 * bench/bench_coord.c - what the coordinator costs, side by side with what it replaces.
 *
 *   bench_coord [--placement same|cross] [--quick] [--pm-qos]
 *
 * same:  every process on CPU 0 (a same-core ping-pong);
 * cross: the coordinator (or echo server) on CPU 1, clients on CPU 0 (a cross-core wake-up).
 *
 * In one run, with the same frame sizes: a raw Unix-socket ping-pong; an
 * admission round trip (no eviction) through a bare protocol client, and
 * through the library with 1, 16 and 64 client processes, both through the
 * coordinator (COMEM_NO_FAST) and on the booking area's fast path, with
 * admissions per second; an admission that needs one cross-process release;
 * the plan over 64 holders x 1000 entries; a read of the shared-memory view;
 * how soon a ledger change (and a booking) reaches the view, and whether a
 * reader tells an exited coordinator; one admission through the coordinator
 * in hops (base/hops.h), the bare client's and the library's side by side
 * (hop_<step>_bare_us, hop_<step>_library_us: where the library's extra
 * microseconds go); the comfy-env shape (a Python socket +
 * pickle server, bench/pickle_pingpong.py; COMEM_SOURCE_DIR says where bench/
 * is); and how soon a killed session's bytes are released. Figures are
 * printed, not asserted; name=value lines close the run.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/hops.h"
#include "base/spin.h"
#include "comem/comem.h"
#include "coord/plan.h"
#include "shm/view.h"
#include "ledger/ledger.h"
#include "probe/sim.h"
#include "wire/wire.h"

/* A bench that cannot make its pipes measures nothing: it says so and stops. */
static void must_pipe(int fds[2])
{
    if (pipe(fds) != 0) {
        perror("bench_coord: pipe");
        exit(1);
    }
}

#ifndef COMEM_SOURCE_DIR
#define COMEM_SOURCE_DIR "."
#endif

static int g_coord_cpu, g_client_cpu;
static bool g_quick;
static char g_dir[128];

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void pin_cpu(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v and prints p50/p99 in microseconds; returns p50. */
static double report(const char *what, double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_d);
    double p50 = v[n / 2], p99 = v[(size_t)((double)n * 0.99)];
    printf("  %-52s n=%6zu  p50 %9.2f us  p99 %9.2f us\n", what, n, p50, p99);
    return p50;
}

static bool read_all(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = read(fd, p, len);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            return false;
        }
        p += n;
        len -= (size_t)n;
    }
    return true;
}

static bool write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            return false;
        }
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* CPU seconds (user + system) a process has used so far, from /proc/<pid>/stat. */
static double cpu_seconds(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return NAN;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return NAN;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double g_echo_cpu_us = NAN; /* the echo server's CPU per round trip */
static double g_ping_idle_us = NAN; /* the ping-pong after 25 ms idle, as each release round starts */

/* ---- 1. raw ping-pong with the admission's frame sizes ---- */

static int frame_size(uint16_t type)
{
    static uint8_t buf[COMEM_WIRE_MAX_FRAME];
    comem_msg m = {.type = type, .request_id = 1};
    return comem_wire_encode(&m, buf, sizeof buf);
}

static double bench_ping(void)
{
    int req = frame_size(COMEM_MSG_ADMIT), rep = frame_size(COMEM_MSG_ADMIT_REPLY);
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    int n = g_quick ? 5000 : 20000;
    pid_t echo = fork();
    if (echo == 0) {
        pin_cpu(g_coord_cpu);
        close(sv[0]);
        uint8_t in[256], out[256] = {0};
        while (read_all(sv[1], in, (size_t)req) && write_all(sv[1], out, (size_t)rep))
            ;
        _exit(0);
    }
    close(sv[1]);
    uint8_t in[256] = {0}, out[256];
    double *lat = malloc(sizeof *lat * (size_t)n);
    for (int i = 0; i < n + 1000; i++) {
        int64_t t0 = now_ns();
        write_all(sv[0], in, (size_t)req);
        read_all(sv[0], out, (size_t)rep);
        if (i >= 1000)
            lat[i - 1000] = (double)(now_ns() - t0) / 1e3;
    }
    double cpu0 = cpu_seconds(echo); /* after the warm-up the loop above ran: measure a second pass */
    for (int i = 0; i < n; i++) {
        write_all(sv[0], in, (size_t)req);
        read_all(sv[0], out, (size_t)rep);
    }
    g_echo_cpu_us = (cpu_seconds(echo) - cpu0) / n * 1e6;
    /* The same exchange after the idle gap each release round starts from (below): what the
       machine's wake-ups cost when the CPUs have gone idle, not the protocol. */
    int idle_n = g_quick ? 100 : 300;
    double *idle = malloc(sizeof *idle * (size_t)idle_n);
    for (int i = 0; i < idle_n; i++) {
        usleep(25000);
        int64_t t0 = now_ns();
        write_all(sv[0], in, (size_t)req);
        read_all(sv[0], out, (size_t)rep);
        idle[i] = (double)(now_ns() - t0) / 1e3;
    }
    close(sv[0]);
    waitpid(echo, NULL, 0);
    char what[96];
    snprintf(what, sizeof what, "raw Unix-socket ping-pong (%d B out, %d B back)", req, rep);
    double p50 = report(what, lat, (size_t)n);
    g_ping_idle_us = report("the same ping-pong, each after 25 ms idle", idle, (size_t)idle_n);
    free(lat);
    free(idle);
    return p50;
}

/* ---- a comemd process for the coordinator benches ---- */

static pid_t start_comemd(const char *sock, const char *spec)
{
    char bin[512];
    const char *dir = getenv("COMEM_BIN_DIR");
    if (dir)
        snprintf(bin, sizeof bin, "%s/comemd", dir);
    else {
        ssize_t k = readlink("/proc/self/exe", bin, sizeof bin - 8);
        bin[k > 0 ? k : 0] = '\0';
        char *slash = strrchr(bin, '/');
        snprintf(slash ? slash + 1 : bin, 8, "comemd");
    }
    pid_t p = fork();
    if (p == 0) {
        pin_cpu(g_coord_cpu);
        setenv("COMEM_LOG", "error", 1);
        execl(bin, "comemd", "--socket", sock, "--device", spec, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 500; i++) {
        comem_client *c;
        if (comem_client_open(sock, COMEM_CLIENT_TOOL, "probe", -1, COMEM_OPEN_NO_LOCAL, &c) == COMEM_OK) {
            comem_client_close(c);
            return p;
        }
        usleep(10000);
    }
    fprintf(stderr, "bench_coord: comemd did not start (%s)\n", bin);
    exit(1);
}

static void stop_comemd(pid_t p)
{
    kill(p, SIGTERM);
    waitpid(p, NULL, 0);
}

/* ---- 2a. admission round trip through a bare protocol client: the coordinator's own cost ---- */

static double g_coord_cpu_us = NAN; /* comemd's CPU per admission (with its GRANT_DONE) */

/* One frame out, one frame back, as a bare protocol client does: exactly what the ping-pong does. */
static void raw_exchange(int fd, const comem_msg *m, comem_msg *r)
{
    static uint8_t buf[COMEM_WIRE_MAX_FRAME];
    int k = comem_wire_encode(m, buf, sizeof buf);
    write_all(fd, buf, (size_t)k);
    comem_wire_header hh;
    read_all(fd, buf, COMEM_WIRE_HEADER_SIZE);
    comem_wire_decode_header(buf, COMEM_WIRE_HEADER_SIZE, &hh);
    read_all(fd, buf + COMEM_WIRE_HEADER_SIZE, hh.length);
    comem_wire_decode(&hh, buf + COMEM_WIRE_HEADER_SIZE, r);
}

/* A bare protocol client's connection, said hello to; -1 when it cannot connect. */
static int raw_connect(const char *sock)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        return -1;
    comem_msg m = {.type = COMEM_MSG_HELLO, .request_id = 1}, r;
    m.u.hello.proto_version = COMEM_WIRE_VERSION;
    m.u.hello.role = COMEM_ROLE_WORKER;
    m.u.hello.reserve_base = -1;
    snprintf(m.u.hello.name, sizeof m.u.hello.name, "raw");
    raw_exchange(fd, &m, &r);
    return fd;
}

static double bench_admit_raw(const char *sock, pid_t comemd)
{
    double cpu0 = cpu_seconds(comemd);
    int n = g_quick ? 5000 : 20000;
    int sv[2];
    must_pipe(sv);
    pid_t p = fork();
    if (p == 0) {
        pin_cpu(g_client_cpu);
        int fd = raw_connect(sock);
        if (fd < 0)
            _exit(1);
        comem_msg m, r;
        double *lat = malloc(sizeof *lat * (size_t)n);
        for (int i = 0; i < n + 1000; i++) {
            m = (comem_msg){.type = COMEM_MSG_ADMIT, .request_id = (uint32_t)i + 2};
            m.u.admit.weights = COMEM_MIB;
            m.u.admit.timeout_ms = 10000;
            int64_t t0 = now_ns();
            raw_exchange(fd, &m, &r);
            if (i >= 1000)
                lat[i - 1000] = (double)(now_ns() - t0) / 1e3;
            uint64_t gid = r.u.admit_reply.grant_id; /* give it back, outside the timing */
            m = (comem_msg){.type = COMEM_MSG_GRANT_DONE, .request_id = (uint32_t)i + 2};
            m.u.grant_done.grant_id = gid;
            raw_exchange(fd, &m, &r);
        }
        write_all(sv[1], lat, sizeof *lat * (size_t)n);
        _exit(0);
    }
    double *lat = malloc(sizeof *lat * (size_t)n);
    read_all(sv[0], lat, sizeof *lat * (size_t)n);
    waitpid(p, NULL, 0);
    /* two requests per admission (ADMIT, GRANT_DONE): half of the CPU is the admission's */
    g_coord_cpu_us = (cpu_seconds(comemd) - cpu0) / (2.0 * (n + 1001)) * 1e6;
    close(sv[0]);
    close(sv[1]);
    double p50 = report("admission round trip, bare protocol client, 1 client", lat, (size_t)n);
    free(lat);
    return p50;
}

/* ---- 2. admission round trip, no eviction, K clients ---- */

typedef struct admit_result {
    double p50;
    double per_s; /* admissions (each with its cancel) per second, all clients together */
} admit_result;

/*
 * K client processes, each admitting 1 MiB and cancelling it. fast: as the
 * library does by default (the booking area when the admission fits); else
 * with COMEM_NO_FAST, every admission a round trip to the coordinator.
 */
static admit_result bench_admit(const char *sock, int clients, bool fast)
{
    int total = g_quick ? 4000 : 20000, each = total / clients;
    if (fast)
        each *= 10; /* a booking takes a fraction of a microsecond: more of them for a steady figure */
    int go[2], res[2];
    must_pipe(go);
    must_pipe(res);
    pid_t *pids = calloc((size_t)clients, sizeof *pids);
    for (int k = 0; k < clients; k++) {
        pids[k] = fork();
        if (pids[k] == 0) {
            pin_cpu(g_client_cpu);
            close(go[1]);
            if (!fast)
                setenv("COMEM_NO_FAST", "1", 1);
            comem_client *c;
            uint64_t h, g;
            if (comem_client_open(sock, COMEM_CLIENT_WORKER, "bench", -1, COMEM_OPEN_NO_LOCAL, &c) ||
                comem_holder_add(c, "m", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &h))
                _exit(1);
            for (int w = 0; w < 200; w++) { /* warm up, then wait for everyone */
                if (comem_admit(c, 0, h, COMEM_MIB, 0, 0, NULL, 0, 10000, &g, NULL) == COMEM_OK)
                    comem_grant_done(c, g, 0, 0);
            }
            char b;
            if (read(go[0], &b, 1) != 1)
                _exit(2);
            double *lat = malloc(sizeof *lat * (size_t)each);
            for (int i = 0; i < each; i++) {
                int64_t t0 = now_ns();
                int rc = comem_admit(c, 0, h, COMEM_MIB, 0, 0, NULL, 0, 10000, &g, NULL);
                lat[i] = (double)(now_ns() - t0) / 1e3;
                if (rc == COMEM_OK)
                    comem_grant_done(c, g, 0, 0);
            }
            write_all(res[1], lat, sizeof *lat * (size_t)each);
            comem_client_close(c);
            _exit(0);
        }
    }
    close(go[0]);
    usleep(300000 + 5000 * clients); /* every client connected and warmed up */
    char ones[64];
    memset(ones, 1, sizeof ones);
    int64_t t0 = now_ns();
    for (int k = 0; k < clients; k++)
        write_all(go[1], ones, 1);
    double *all = malloc(sizeof *all * (size_t)(each * clients));
    for (int k = 0; k < clients; k++)
        read_all(res[0], all + (size_t)k * (size_t)each, sizeof *all * (size_t)each);
    double wall = (double)(now_ns() - t0) / 1e9;
    for (int k = 0; k < clients; k++)
        waitpid(pids[k], NULL, 0);
    char what[96];
    snprintf(what, sizeof what, "admission %s, no eviction, %d client%s", fast ? "(fast path)" : "through the coordinator",
             clients, clients > 1 ? "s" : "");
    admit_result r = {.p50 = report(what, all, (size_t)(each * clients))};
    r.per_s = (double)(each * clients) / wall;
    printf("  %-52s %.0f admissions/s (each with its cancel; wall %.3f s)\n", "", r.per_s, wall);
    free(all);
    free(pids);
    close(go[1]);
    close(res[0]);
    close(res[1]);
    return r;
}

/* ---- 3. admission that needs one cross-process release ---- */

typedef struct holder_ctx {
    comem_client *c;
    comem_sim *sim;
    uint64_t entry;
    atomic_llong resident;
} holder_ctx;

static int on_release(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                      const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder;
    (void)kind;
    (void)entries;
    holder_ctx *h = user;
    int64_t want = n ? amounts[0] : bytes, have = atomic_load(&h->resident);
    int64_t give = comem_min(have, want);
    comem_sim_free(h->sim, 0, give);
    atomic_store(&h->resident, have - give);
    comem_entry_set_resident(h->c, h->entry, have - give);
    *freed = give;
    return COMEM_OK;
}

/*
 * Where an admission's time goes: each step's stamp (base/hops.h, COMEM_HOPS) less the one
 * before it, in the order the path takes ("sent": about to be written). "send" starts at the
 * caller's call and "wake" ends at its return; "plan" includes the round's first reading of the
 * card, "reread" is the reading after the receipt.
 */
static const struct {
    const char *name;
    int from, to; /* -1: the caller's call (from) or its return (to) */
} g_hops[] = {
    {"send", -1, COMEM_HOP_ADMIT_SENT},
    {"admit_read", COMEM_HOP_ADMIT_SENT, COMEM_HOP_ADMIT_READ},
    {"plan", COMEM_HOP_ADMIT_READ, COMEM_HOP_ASK_SENT},
    {"ask", COMEM_HOP_ASK_SENT, COMEM_HOP_ASK_READ},
    {"handoff", COMEM_HOP_ASK_READ, COMEM_HOP_CALLBACK_START},
    {"callback", COMEM_HOP_CALLBACK_START, COMEM_HOP_CALLBACK_END},
    {"receipt_send", COMEM_HOP_CALLBACK_END, COMEM_HOP_RECEIPT_SENT},
    {"receipt", COMEM_HOP_RECEIPT_SENT, COMEM_HOP_RECEIPT_READ},
    {"to_reread", COMEM_HOP_RECEIPT_READ, COMEM_HOP_CARD_READ_START},
    {"reread", COMEM_HOP_CARD_READ_START, COMEM_HOP_CARD_READ},
    {"decide", COMEM_HOP_CARD_READ, COMEM_HOP_REPLY_SENT},
    {"reply", COMEM_HOP_REPLY_SENT, COMEM_HOP_REPLY_READ},
    {"wake", COMEM_HOP_REPLY_READ, -1},
};
#define N_HOPS (sizeof g_hops / sizeof g_hops[0])

typedef struct release_result {
    double p50, p99;
    double hop_p50[N_HOPS];
    double card_reads; /* readings of the card in the median round */
    int asked_once, n;
} release_result;

/* The stamps' file at path (base/hops.h), mapped, and COMEM_HOPS naming it for every process started
   from here on; MAP_FAILED (and COMEM_HOPS left unset) when it cannot be made. */
static int64_t *hops_open(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    int64_t *slots = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, COMEM_HOPS * sizeof(int64_t)) == 0)
        slots = mmap(NULL, COMEM_HOPS * sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0)
        close(fd);
    if (slots != MAP_FAILED)
        setenv("COMEM_HOPS", path, 1);
    return slots;
}

static release_result bench_release(const char *dir)
{
    release_result res = {.p50 = NAN, .card_reads = NAN};
    for (size_t k = 0; k < N_HOPS; k++)
        res.hop_p50[k] = NAN;
    char sock[256], spec[320], hops[256];
    snprintf(sock, sizeof sock, "%s/rel.sock", dir);
    snprintf(spec, sizeof spec, "sim:8GiB:reserved=0:ctx=0:path=%s/relcard", dir);
    snprintf(hops, sizeof hops, "%s/hops", dir);
    int64_t *slots = hops_open(hops); /* comemd, the holder and the requester stamp their steps */
    pid_t d = start_comemd(sock, spec);
    int to_h[2], to_r[2], out[2];
    must_pipe(to_h);
    must_pipe(to_r);
    must_pipe(out);
    int n = g_quick ? 100 : 300;
    const int64_t load = 7 * COMEM_GIB;
    pid_t hp = fork();
    if (hp == 0) { /* the holder: 7 GiB resident, answers asks, regrows on request */
        pin_cpu(g_client_cpu);
        holder_ctx h = {0};
        comem_sim_spec sp;
        uint64_t hid;
        if (comem_sim_spec_parse(spec, &sp, NULL, 0) || comem_sim_open(&sp, &h.sim) ||
            comem_client_open(sock, COMEM_CLIENT_WORKER, "holder", -1, COMEM_OPEN_NO_LOCAL, &h.c) ||
            comem_holder_add(h.c, "m", 0, COMEM_KIND_MODELS, COMEM_ANSWERS_RELEASE, on_release, &h, &hid))
            _exit(1);
        comem_sim_alloc(h.sim, 0, load);
        atomic_store(&h.resident, load);
        comem_entry_add(h.c, hid, "model", load, load, 0, &h.entry);
        write_all(to_r[1], "k", 1);
        char b;
        while (read(to_h[0], &b, 1) == 1) {
            int64_t back = load - atomic_load(&h.resident);
            comem_sim_alloc(h.sim, 0, back);
            atomic_store(&h.resident, load);
            comem_entry_set_resident(h.c, h.entry, load);
            write_all(to_r[1], "k", 1);
        }
        comem_client_close(h.c);
        _exit(0);
    }
    pid_t rp = fork();
    if (rp == 0) { /* the requester */
        pin_cpu(g_client_cpu);
        comem_client *c;
        uint64_t g;
        char b;
        if (read(to_r[0], &b, 1) != 1 ||
            comem_client_open(sock, COMEM_CLIENT_WORKER, "requester", -1, COMEM_OPEN_NO_LOCAL, &c))
            _exit(1);
        double *lat = malloc(sizeof *lat * (size_t)n), *hop = malloc(sizeof *hop * (size_t)n * N_HOPS),
               *reads = malloc(sizeof *reads * (size_t)n);
        int asked_once = 0, stamped = 0;
        for (int i = 0; i < n; i++) {
            if (slots != MAP_FAILED)
                memset(slots, 0, COMEM_HOPS * sizeof(int64_t));
            int64_t t0 = now_ns();
            int rc = comem_admit(c, 0, 0, COMEM_GIB, 0, 0, NULL, 0, 10000, &g, NULL);
            int64_t t1 = now_ns();
            lat[i] = (double)(t1 - t0) / 1e3;
            int asked = 0;
            comem_admit_details(c, NULL, NULL, NULL, NULL, &asked, NULL);
            asked_once += rc == COMEM_OK && asked == 1;
            bool whole = slots != MAP_FAILED && rc == COMEM_OK && asked == 1;
            for (size_t k = 0; whole && k < N_HOPS; k++)
                whole = (g_hops[k].from < 0 || slots[g_hops[k].from]) && (g_hops[k].to < 0 || slots[g_hops[k].to]);
            for (size_t k = 0; whole && k < N_HOPS; k++) { /* every step stamped: this round's hops */
                int64_t from = g_hops[k].from < 0 ? t0 : slots[g_hops[k].from];
                int64_t to = g_hops[k].to < 0 ? t1 : slots[g_hops[k].to];
                hop[k * (size_t)n + (size_t)stamped] = (double)(to - from) / 1e3;
            }
            if (whole)
                reads[stamped] = (double)slots[COMEM_HOP_CARD_READS];
            stamped += whole;
            if (rc == COMEM_OK)
                comem_grant_done(c, g, 0, 0);
            write_all(to_h[1], "r", 1); /* the holder grows back for the next round */
            if (read(to_r[0], &b, 1) != 1)
                break;
            usleep(25000); /* past the reading's reuse window: each round starts from a fresh reading */
        }
        close(to_h[1]);
        release_result r = {.asked_once = asked_once, .n = n};
        r.p50 = report("admission needing one cross-process release", lat, (size_t)n);
        r.p99 = lat[(size_t)((double)n * 0.99)];
        printf("  (%d of %d admissions were granted after asking exactly one holder)\n", asked_once, n);
        if (stamped) {
            qsort(reads, (size_t)stamped, sizeof *reads, cmp_d);
            r.card_reads = reads[stamped / 2];
            printf("  (%d rounds stamped at every step; the coordinator read the card %.0f times in the median one)\n",
                   stamped, r.card_reads);
        }
        for (size_t k = 0; k < N_HOPS; k++) {
            if (!stamped) {
                r.hop_p50[k] = NAN;
                continue;
            }
            char what[96];
            snprintf(what, sizeof what, "  hop %s", g_hops[k].name);
            r.hop_p50[k] = report(what, hop + k * (size_t)n, (size_t)stamped);
        }
        fflush(stdout);
        write_all(out[1], &r, sizeof r);
        comem_client_close(c);
        _exit(0);
    }
    unsetenv("COMEM_HOPS");
    close(to_h[0]);
    close(to_h[1]);
    close(out[1]);
    if (!read_all(out[0], &res, sizeof res))
        res.p50 = NAN;
    close(out[0]);
    waitpid(rp, NULL, 0);
    close(to_r[1]);
    kill(hp, SIGTERM);
    waitpid(hp, NULL, 0);
    stop_comemd(d);
    if (slots != MAP_FAILED)
        munmap(slots, COMEM_HOPS * sizeof(int64_t));
    return res;
}

/* ---- 3b. where the library's microseconds go: one admission through the coordinator, in hops ---- */

/* An admission that fits, through the coordinator: the steps a bare client and the library share. */
static const struct {
    const char *name;
    int from, to; /* -1: the caller's call (from) or its return (to) */
} g_admit_hops[] = {
    {"send", -1, COMEM_HOP_ADMIT_SENT},                      /* the library's own work before the write */
    {"admit_read", COMEM_HOP_ADMIT_SENT, COMEM_HOP_ADMIT_READ}, /* the socket and the coordinator's wake-up */
    {"decide", COMEM_HOP_ADMIT_READ, COMEM_HOP_REPLY_SENT},     /* the coordinator's work */
    {"reply", COMEM_HOP_REPLY_SENT, COMEM_HOP_REPLY_READ},      /* the socket and the caller's wake-up */
    {"wake", COMEM_HOP_REPLY_READ, -1},                         /* the library's work after the read */
};
#define N_ADMIT_HOPS (sizeof g_admit_hops / sizeof g_admit_hops[0])

typedef struct admit_hops {
    double p50;
    double hop_p50[N_ADMIT_HOPS];
} admit_hops;

/*
 * One client process admitting 1 MiB through the coordinator and cancelling it, n times, with
 * every step stamped: the bare protocol client (which stamps its own write and read, the
 * coordinator stamping its read and its reply) or the library (COMEM_NO_FAST, stamping its
 * steps itself). Writes the medians to out.
 */
static void admit_hops_child(const char *sock, bool library, int64_t *slots, int n, int out)
{
    pin_cpu(g_client_cpu);
    double *lat = malloc(sizeof *lat * (size_t)n), *hop = malloc(sizeof *hop * (size_t)n * N_ADMIT_HOPS);
    comem_client *c = NULL;
    uint64_t h = 0, g = 0;
    int fd = -1;
    if (library) {
        setenv("COMEM_NO_FAST", "1", 1);
        if (comem_client_open(sock, COMEM_CLIENT_WORKER, "bench", -1, COMEM_OPEN_NO_LOCAL, &c) ||
            comem_holder_add(c, "m", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &h))
            _exit(1);
    } else if ((fd = raw_connect(sock)) < 0) {
        _exit(1);
    }
    int stamped = 0;
    for (int i = 0; i < n + 500; i++) { /* 500 to warm up */
        memset(slots, 0, COMEM_HOPS * sizeof(int64_t));
        int64_t t0 = now_ns(), t1;
        if (library) {
            int rc = comem_admit(c, 0, h, COMEM_MIB, 0, 0, NULL, 0, 10000, &g, NULL);
            t1 = now_ns();
            if (rc == COMEM_OK)
                comem_grant_done(c, g, 0, 0);
        } else {
            comem_msg m = {.type = COMEM_MSG_ADMIT, .request_id = (uint32_t)i + 2}, r;
            m.u.admit.weights = COMEM_MIB;
            m.u.admit.timeout_ms = 10000;
            slots[COMEM_HOP_ADMIT_SENT] = t0;
            raw_exchange(fd, &m, &r);
            t1 = now_ns();
            slots[COMEM_HOP_REPLY_READ] = t1;
            m = (comem_msg){.type = COMEM_MSG_GRANT_DONE, .request_id = (uint32_t)i + 2};
            m.u.grant_done.grant_id = r.u.admit_reply.grant_id;
            raw_exchange(fd, &m, &r);
        }
        if (i < 500)
            continue;
        bool whole = true;
        for (size_t k = 0; k < N_ADMIT_HOPS; k++)
            whole = whole && (g_admit_hops[k].from < 0 || slots[g_admit_hops[k].from]) &&
                    (g_admit_hops[k].to < 0 || slots[g_admit_hops[k].to]);
        if (!whole)
            continue;
        lat[stamped] = (double)(t1 - t0) / 1e3;
        for (size_t k = 0; k < N_ADMIT_HOPS; k++) {
            int64_t from = g_admit_hops[k].from < 0 ? t0 : slots[g_admit_hops[k].from];
            int64_t to = g_admit_hops[k].to < 0 ? t1 : slots[g_admit_hops[k].to];
            hop[k * (size_t)n + (size_t)stamped] = (double)(to - from) / 1e3;
        }
        stamped++;
    }
    admit_hops r = {.p50 = NAN};
    for (size_t k = 0; k < N_ADMIT_HOPS; k++)
        r.hop_p50[k] = NAN;
    if (stamped) {
        char what[96];
        snprintf(what, sizeof what, "admission in hops, %s", library ? "the library" : "bare protocol client");
        r.p50 = report(what, lat, (size_t)stamped);
        for (size_t k = 0; k < N_ADMIT_HOPS; k++) {
            snprintf(what, sizeof what, "  hop %s", g_admit_hops[k].name);
            r.hop_p50[k] = report(what, hop + k * (size_t)n, (size_t)stamped);
        }
    }
    fflush(stdout);
    write_all(out, &r, sizeof r);
    if (c)
        comem_client_close(c);
    _exit(0);
}

/* The bare client and the library side by side, hop by hop (issue 24 item 2). */
static void bench_admit_hops(const char *dir, admit_hops *bare, admit_hops *lib)
{
    char sock[256], spec[320], hops[256];
    snprintf(sock, sizeof sock, "%s/hops.sock", dir);
    snprintf(spec, sizeof spec, "sim:8GiB:reserved=0:ctx=0:path=%s/hopscard", dir);
    snprintf(hops, sizeof hops, "%s/admit-hops", dir);
    *bare = *lib = (admit_hops){.p50 = NAN};
    int64_t *slots = hops_open(hops);
    if (slots == MAP_FAILED)
        return;
    pid_t d = start_comemd(sock, spec);
    int n = g_quick ? 3000 : 10000;
    for (int variant = 0; variant < 2; variant++) {
        int out[2];
        must_pipe(out);
        pid_t p = fork();
        if (p == 0) {
            close(out[0]);
            admit_hops_child(sock, variant == 1, slots, n, out[1]);
        }
        close(out[1]);
        admit_hops *r = variant ? lib : bare;
        if (!read_all(out[0], r, sizeof *r))
            *r = (admit_hops){.p50 = NAN};
        close(out[0]);
        waitpid(p, NULL, 0);
    }
    unsetenv("COMEM_HOPS");
    stop_comemd(d);
    munmap(slots, COMEM_HOPS * sizeof(int64_t));
}

/* ---- 4. the plan over 64 holders x 1000 entries ---- */

static void bench_plan(void)
{
    ledger_device dev = {.index = 0, .capacity = (int64_t)1 << 50};
    comem_ledger l;
    comem_ledger_init(&l, &dev, 1, 0);
    unsigned seed = 42;
    uint64_t first_entry = 0, any_holder = 0;
    for (int s = 0; s < 64; s++) {
        uint64_t sid, hid;
        comem_ledger_session_add(&l, 1000 + s, 0, COMEM_ROLE_WORKER, 0, COMEM_CAP_RELEASE, "w", 0, &sid);
        comem_ledger_holder_add(&l, sid, 0, COMEM_HOLDER_MODELS, COMEM_CAP_RELEASE, "m", 0, &hid);
        any_holder = hid;
        for (int e = 0; e < 1000; e++) {
            seed = seed * 1103515245u + 12345u;
            int64_t size = (int64_t)((seed >> 8) % 256 + 1) * COMEM_MIB;
            int64_t resident = (seed >> 20) % 4 ? size : size / 2;
            uint64_t eid;
            comem_ledger_entry_add(&l, sid, hid, "e", size, resident, false, (int64_t)(s * 1000 + e), &eid);
            if (!first_entry)
                first_entry = eid;
        }
    }
    coord_planned out[512];
    int runs = g_quick ? 2000 : 10000;
    double *lat = malloc(sizeof *lat * (size_t)runs);
    size_t victims = 0;
    for (int i = 0; i < runs; i++) {
        /* a shortfall of ~2 GiB: some partial and some whole victims */
        coord_plan_in in = {.device = 0, .requester = 0, .need = 4.0 * (double)COMEM_GIB, .avail = 2.0 * (double)COMEM_GIB};
        int64_t t0 = now_ns();
        victims = coord_plan_release(&l, &in, out, 512);
        lat[i] = (double)(now_ns() - t0) / 1e3;
    }
    char what[96];
    snprintf(what, sizeof what, "plan, 64 holders x 1000 entries (%zu victims)", victims);
    report(what, lat, (size_t)runs);
    /* what keeping the order costs: one entry's residency changes */
    for (int i = 0; i < runs; i++) {
        ledger_residency it = {first_entry, (uint64_t)i + 1, (int64_t)(i % 2 ? 64 : 32) * COMEM_MIB, 0};
        const ledger_entry *e = comem_ledger_entry(&l, first_entry);
        const ledger_holder *h = comem_ledger_holder(&l, e->holder);
        (void)h;
        int64_t t0 = now_ns();
        comem_ledger_census(&l, e->session, e->holder, 0, -1, -1, &it, 1, i, NULL);
        lat[i] = (double)(now_ns() - t0) / 1e3;
    }
    (void)any_holder;
    report("census of one entry (eviction order kept), 64000 entries", lat, (size_t)runs);
    free(lat);
    comem_ledger_fini(&l);
}

/* ---- 5. a read of the shared-memory view ---- */

static void bench_view(const char *sock)
{
    comem_view *v;
    if (comem_view_open(sock, &v) != COMEM_OK) {
        printf("  view: cannot open\n");
        return;
    }
    int batches = g_quick ? 2000 : 10000, per = 100;
    double *lat = malloc(sizeof *lat * (size_t)batches);
    int64_t cap, fr, rs, rc;
    for (int b = 0; b < batches; b++) {
        int64_t t0 = now_ns();
        for (int i = 0; i < per; i++)
            comem_view_read(v, 0, &cap, &fr, &rs, &rc);
        lat[b] = (double)(now_ns() - t0) / 1e3 / per;
    }
    report("shared-memory view read (mean of 100 per sample)", lat, (size_t)batches);
    free(lat);
    comem_view_close(v);
}

/* ---- 6. how fresh the view is: a ledger change -> a reader sees it ---- */

static double g_fresh_p99_us = NAN, g_fresh_max_us = NAN, g_book_fresh_p99_us = NAN;

/*
 * A child changes the ledger (a grant through the coordinator, then its
 * cancel; or a booking in shared memory, which the coordinator reconciles);
 * this process spins on the view's granted figure and notes when it moved,
 * against the child's CLOCK_MONOTONIC stamp taken just before the call.
 */
static void bench_fresh(const char *sock, bool booking)
{
    char path[512];
    comem_view_path(sock, path, sizeof path);
    int fd = open(path, O_RDONLY);
    comem_view_shared *sh = fd >= 0 ? mmap(NULL, sizeof *sh, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (sh == MAP_FAILED) {
        printf("  view freshness: cannot map the view\n");
        return;
    }
    int n = g_quick ? 100 : 300;
    int cmd[2], stamp[2];
    must_pipe(cmd);
    must_pipe(stamp);
    pid_t p = fork();
    if (p == 0) {
        pin_cpu(g_client_cpu);
        close(cmd[1]);
        close(stamp[0]);
        if (!booking)
            setenv("COMEM_NO_FAST", "1", 1);
        comem_client *c;
        uint64_t h, g;
        if (comem_client_open(sock, COMEM_CLIENT_WORKER, "fresh", -1, COMEM_OPEN_NO_LOCAL, &c) ||
            comem_holder_add(c, "m", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &h))
            _exit(1);
        for (int w = 0; w < 50; w++) /* the booking area opens with activity */
            if (comem_admit(c, 0, h, COMEM_MIB, 0, 0, NULL, 0, 10000, &g, NULL) == COMEM_OK)
                comem_grant_done(c, g, 0, 0);
        char b;
        while (read(cmd[0], &b, 1) == 1) {
            int64_t t0 = now_ns();
            if (b == 'a')
                comem_admit(c, 0, h, 512 * COMEM_MIB, 0, 0, NULL, 0, 10000, &g, NULL);
            else
                comem_grant_done(c, g, 0, 0);
            write_all(stamp[1], &t0, sizeof t0);
        }
        _exit(0);
    }
    close(cmd[0]);
    close(stamp[1]);
    double *lat = malloc(sizeof *lat * (size_t)(2 * n));
    int got = 0;
    for (int i = 0; i < n; i++) {
        for (int step = 0; step < 2; step++) {
            int64_t before = atomic_load(&sh->dev[0].granted);
            write_all(cmd[1], step == 0 ? "a" : "d", 1);
            int64_t spin0 = now_ns();
            while (atomic_load(&sh->dev[0].granted) == before && now_ns() - spin0 < 2000000000)
                sched_yield();
            int64_t seen = now_ns(), t0;
            if (!read_all(stamp[0], &t0, sizeof t0))
                break;
            if (!booking || step == 0) /* a cancelled booking may never reach the ledger: not timed */
                lat[got++] = (double)(seen - t0) / 1e3;
            if (booking && step == 0)
                usleep(2000); /* let it be reconciled before it is cancelled */
        }
    }
    close(cmd[1]);
    waitpid(p, NULL, 0);
    close(stamp[0]);
    double *v = lat;
    if (got == 0) {
        printf("  view freshness: no sample\n");
    } else if (booking) {
        report("booking in shared memory -> the view's granted shows it", v, (size_t)got);
        g_book_fresh_p99_us = v[(size_t)((double)got * 0.99)];
    } else {
        report("ledger change (grant, cancel) -> a view reader sees it", v, (size_t)got);
        g_fresh_p99_us = v[(size_t)((double)got * 0.99)];
        g_fresh_max_us = v[got - 1];
        printf("  %-52s max %.2f us over %d changes\n", "", g_fresh_max_us, got);
    }
    free(lat);
    munmap(sh, sizeof *sh);
    close(fd);
}

/* ---- 7. a killed session's bytes ---- */

static void bench_dead(const char *sock)
{
    char path[512];
    comem_view_path(sock, path, sizeof path);
    int fd = open(path, O_RDONLY);
    comem_view_shared *sh = fd >= 0 ? mmap(NULL, sizeof *sh, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (sh == MAP_FAILED) {
        printf("  dead session: cannot map the view\n");
        return;
    }
    int n = g_quick ? 20 : 50;
    double *lat = malloc(sizeof *lat * (size_t)n);
    int got = 0;
    for (int i = 0; i < n; i++) {
        int ready[2];
        must_pipe(ready);
        pid_t p = fork();
        if (p == 0) {
            pin_cpu(g_client_cpu);
            comem_client *c;
            uint64_t h, g;
            if (comem_client_open(sock, COMEM_CLIENT_WORKER, "victim", -1, COMEM_OPEN_NO_LOCAL, &c) ||
                comem_holder_add(c, "m", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &h) ||
                comem_admit(c, 0, h, COMEM_GIB, 0, 0, NULL, 0, 10000, &g, NULL))
                _exit(1);
            write_all(ready[1], "k", 1);
            pause();
            _exit(0);
        }
        char b;
        if (read(ready[0], &b, 1) != 1) {
            waitpid(p, NULL, 0);
            continue;
        }
        while (atomic_load(&sh->dev[0].granted) < COMEM_GIB) /* the view caught up with the grant */
            usleep(100);
        int64_t t0 = now_ns();
        kill(p, SIGKILL);
        /* yield while waiting: with --placement same this process shares the coordinator's
           CPU, and a bare spin would make it wait for a scheduler tick */
        while (atomic_load(&sh->dev[0].granted) >= COMEM_GIB && now_ns() - t0 < 2000000000)
            sched_yield();
        lat[got++] = (double)(now_ns() - t0) / 1e3;
        waitpid(p, NULL, 0);
        close(ready[0]);
        close(ready[1]);
    }
    report("killed session's grant released (kill -> view shows it)", lat, (size_t)got);
    free(lat);
    munmap(sh, sizeof *sh);
    close(fd);
}

/*
 * --pm-qos: asks the kernel to keep every CPU out of deep idle states for the run (a PM QoS request
 * of 0 us on /dev/cpu_dma_latency, held while the file is open; root, usually). With it, a wake-up
 * after idle costs what a hot one does: the run then shows how much of a figure is the machine's
 * idle states and how much the protocol's. 1 when held, 0 when it could not be (said why).
 */
static int hold_pm_qos(void)
{
    int fd = open("/dev/cpu_dma_latency", O_WRONLY | O_CLOEXEC);
    int32_t zero = 0;
    if (fd < 0 || write(fd, &zero, sizeof zero) != (ssize_t)sizeof zero) {
        fprintf(stderr, "bench_coord: --pm-qos: /dev/cpu_dma_latency: %s; the CPUs keep their idle states\n",
                strerror(errno));
        if (fd >= 0)
            close(fd);
        return 0;
    }
    return 1; /* the fd stays open until the process exits (forked children share it) */
}

int main(int argc, char **argv)
{
    const char *placement = "cross";
    bool pm_qos = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--placement") && i + 1 < argc)
            placement = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            g_quick = true;
        else if (!strcmp(argv[i], "--pm-qos"))
            pm_qos = true;
        else {
            fprintf(stderr, "usage: bench_coord [--placement same|cross] [--quick] [--pm-qos]\n");
            return 2;
        }
    }
    int pm_qos_held = pm_qos ? hold_pm_qos() : 0;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    g_client_cpu = 0;
    g_coord_cpu = (!strcmp(placement, "same") || cpus < 2) ? 0 : 1;
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0); /* forked children must not inherit unflushed lines */
    setenv("COMEM_LOG", "error", 0);
    snprintf(g_dir, sizeof g_dir, "/tmp/comem-bench-XXXXXX");
    if (!mkdtemp(g_dir))
        return 1;
    printf("bench_coord: placement %s (clients on CPU %d, coordinator/server on CPU %d), %ld CPUs\n", placement,
           g_client_cpu, g_coord_cpu, cpus);
    pin_cpu(g_client_cpu);

    double ping = bench_ping();
    char sock[256], spec[320];
    snprintf(sock, sizeof sock, "%s/comem.sock", g_dir);
    snprintf(spec, sizeof spec, "sim:80GiB:reserved=0:ctx=0:path=%s/card", g_dir);
    pid_t d = start_comemd(sock, spec);
    double raw = bench_admit_raw(sock, d);
    admit_result s1 = bench_admit(sock, 1, false), s16 = bench_admit(sock, 16, false),
                 s64 = bench_admit(sock, 64, false);
    admit_result f1 = bench_admit(sock, 1, true), f16 = bench_admit(sock, 16, true), f64 = bench_admit(sock, 64, true);
    double a1 = s1.p50;
    bench_view(sock);
    bench_fresh(sock, false);
    bench_fresh(sock, true);
    bench_dead(sock);
    comem_view *lv = NULL;
    int live_before = comem_view_open(sock, &lv) == COMEM_OK ? comem_view_state(lv, NULL) : COMEM_ENOENT;
    stop_comemd(d);
    int live_after = lv ? comem_view_state(lv, NULL) : COMEM_ENOENT;
    printf("  view liveness: %s while comemd runs, %s after it exited\n", comem_status_str(live_before),
           comem_status_str(live_after));
    if (lv)
        comem_view_close(lv);
    release_result rel = bench_release(g_dir);
    admit_hops hb, hl;
    bench_admit_hops(g_dir, &hb, &hl);
    bench_plan();

    char cmd[1024], line[512] = "";
    const char *src = getenv("COMEM_SOURCE_DIR"); /* where bench/ is, when the binary was built elsewhere */
    snprintf(cmd, sizeof cmd, "python3 %s/bench/pickle_pingpong.py --placement %s --n %d", src ? src : COMEM_SOURCE_DIR,
             placement,
             g_quick ? 5000 : 20000);
    FILE *p = popen(cmd, "r");
    double py = NAN;
    if (p && fgets(line, sizeof line, p)) {
        char *q = strstr(line, "p50=");
        if (q)
            py = atof(q + 4);
        printf("  %s", line);
    }
    if (p)
        pclose(p);
    printf("\n  the coordinator adds %.2f us (p50) to the raw ping-pong (bare client); the client library adds "
           "%.2f us more\n", raw - ping, a1 - raw);
    printf("  CPU per request: echo server %.2f us, coordinator %.2f us (mean over the run; noise-free)\n",
           g_echo_cpu_us, g_coord_cpu_us);
    printf("  admission is %.1fx faster than the Python exchange (bare client), %.1fx through the library, "
           "%.1fx on the fast path\n", py / raw, py / a1, py / f1.p50);
    printf("\n");
    printf("placement=%s\n", placement);
    printf("pm_qos=%d\nspin_us=%lld\n", pm_qos_held, (long long)(comem_spin_ns() / 1000));
    printf("ping_us=%.2f\n", ping);
    printf("bare_admit_us=%.2f\n", raw);
    printf("coord_over_ping_us=%.2f\n", raw - ping);
    printf("library_admit_us=%.2f\n", a1);
    printf("library_over_bare_us=%.2f\n", a1 - raw);
    printf("fast_admit_us=%.3f\n", f1.p50);
    printf("python_exchange_us=%.2f\n", py);
    printf("fast_admit_vs_python=%.1f\n", py / f1.p50);
    printf("library_admit_vs_python=%.2f\n", py / a1);
    printf("admits_per_s_1=%.0f\nadmits_per_s_16=%.0f\nadmits_per_s_64=%.0f\n", f1.per_s, f16.per_s, f64.per_s);
    printf("coord_admits_per_s_1=%.0f\ncoord_admits_per_s_16=%.0f\ncoord_admits_per_s_64=%.0f\n", s1.per_s, s16.per_s,
           s64.per_s);
    printf("coord_admit_64_p50_us=%.1f\nfast_admit_16_p50_us=%.3f\nfast_admit_64_p50_us=%.3f\n", s64.p50, f16.p50,
           f64.p50);
    printf("view_fresh_p99_us=%.1f\nview_fresh_max_us=%.1f\nbooking_to_view_p99_us=%.1f\n", g_fresh_p99_us,
           g_fresh_max_us, g_book_fresh_p99_us);
    printf("view_exited_detected=%d\n", live_before == COMEM_OK && live_after == COMEM_ECLOSED);
    printf("release_admit_p50_us=%.1f\nrelease_admit_p99_us=%.1f\nrelease_admit_vs_ping=%.1f\n", rel.p50, rel.p99,
           rel.p50 / ping);
    printf("ping_idle_us=%.2f\nrelease_admit_vs_idle_ping=%.1f\n", g_ping_idle_us, rel.p50 / g_ping_idle_us);
    for (size_t k = 0; k < N_HOPS; k++)
        printf("release_hop_%s_us=%.1f\n", g_hops[k].name, rel.hop_p50[k]);
    printf("release_card_reads=%.0f\n", rel.card_reads);
    printf("hops_bare_admit_us=%.2f\nhops_library_admit_us=%.2f\nhops_library_over_bare_us=%.2f\n", hb.p50, hl.p50,
           hl.p50 - hb.p50);
    for (size_t k = 0; k < N_ADMIT_HOPS; k++)
        printf("hop_%s_bare_us=%.2f\nhop_%s_library_us=%.2f\n", g_admit_hops[k].name, hb.hop_p50[k],
               g_admit_hops[k].name, hl.hop_p50[k]);
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : 1;
}
