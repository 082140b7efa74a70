/*
 * tools/comem/watch.c - `comem watch`: the machine as the ledger sees it, live, like watch or nvtop.
 *
 *   comem watch [--socket PATH] [--interval SECONDS] [--status-every SECONDS] [--count N] [--plain]
 *
 * Two sources at two rates. Every --interval (1 s) the per-card figures come
 * from the coordinator's shared-memory view (comem_view_read: a few atomic
 * loads, no round trip): capacity, true free, the reserve, what others could
 * release now. Every --status-every (2 s) a status snapshot adds what only the
 * ledger knows: each process and holder, busy or idle, grants, unattributed
 * bytes, asks in flight, and the counters whose changes become "recent events".
 *
 * On a terminal it draws full screen with plain ANSI escapes (the alternate
 * screen, cursor home, erase to end of line), redraws at once on a resize
 * (SIGWINCH), and quits on q (or Ctrl-C). When stdout is not a terminal, or
 * with --plain, it prints one plain frame per interval, escape-free, for a log
 * or a pipe. --count N stops after N frames. Exit status: 0 when quit or done,
 * 1 when no coordinator answers at the start, 2 for bad arguments.
 */
#include <errno.h>
#include <json-c/json.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/size.h"
#include "cmds.h"
#include "comem/comem.h"
#include "common/args.h"
#include "common/jsonout.h"
#include "common/snapshot.h"

enum { F_SOCKET, F_INTERVAL, F_STATUS_EVERY, F_COUNT, F_PLAIN, N_SPECS };
static const arg_spec k_specs[N_SPECS] = {
    [F_SOCKET] = {"socket", ARG_STRING, false},
    [F_INTERVAL] = {"interval", ARG_STRING, false},
    [F_STATUS_EVERY] = {"status-every", ARG_STRING, false},
    [F_COUNT] = {"count", ARG_NUMBER, false},
    [F_PLAIN] = {"plain", ARG_FLAG, false},
};
static const arg_command k_cmd = {
    "comem watch",
    "usage: comem watch [--socket PATH] [--interval SECONDS] [--status-every SECONDS] [--count N] [--plain]\n"
    "  A live view of the machine as the coordinator's ledger sees it: per card free, reserve,\n"
    "  reclaimable (from the shared-memory view, every --interval, default 1 s), and per process\n"
    "  and holder, busy/idle, grants, asks in flight and recent events (from status, every\n"
    "  --status-every, default 2 s). q quits. Not on a terminal, or with --plain: one plain\n"
    "  frame per interval. --count N: stop after N frames.\n",
    k_specs, N_SPECS,
};

#define MAX_EVENTS 8
#define LINE_MAX_CHARS 512

static volatile sig_atomic_t g_resized, g_quit;
static void on_winch(int sig) { (void)sig; g_resized = 1; }
static void on_quit(int sig) { (void)sig; g_quit = 1; }

typedef struct screen {
    bool tty;
    int cols, rows, line;
    FILE *out;
} screen;

typedef struct watch_state {
    const char *socket;
    comem_client *client;
    comem_view *view;
    json_object *last;       /* the latest snapshot, NULL when none */
    char note[600];          /* why the snapshot is missing or old */
    char events[MAX_EVENTS][160];
    int n_events;
} watch_state;

static const char *sz(int64_t v, char *b) { return v < 0 ? "-" : comem_format_bytes(v, b, 32); }

/* One line of the frame, cut at the terminal's width; lines past the last row are dropped. */
static void put(screen *s, const char *fmt, ...)
{
    char buf[LINE_MAX_CHARS];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (s->tty) {
        if (s->line >= s->rows)
            return;
        if ((int)strlen(buf) > s->cols)
            buf[s->cols > 0 ? s->cols : 0] = '\0';
        /* The line break goes before a line, not after: one after the bottom row would scroll the
           header away. Raw output needs \r\n; \033[K erases what the last frame left. */
        fprintf(s->out, "%s%s\033[K", s->line ? "\r\n" : "", buf);
    } else {
        fprintf(s->out, "%s\n", buf);
    }
    s->line++;
}

static void event(watch_state *w, const char *fmt, ...)
{
    char when[16];
    time_t t = time(NULL);
    strftime(when, sizeof when, "%H:%M:%S", localtime(&t));
    if (w->n_events == MAX_EVENTS) {
        memmove(w->events[0], w->events[1], sizeof w->events[0] * (MAX_EVENTS - 1));
        w->n_events--;
    }
    char text[140];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    snprintf(w->events[w->n_events++], sizeof w->events[0], "%s  %s", when, text);
}

/* The sessions in a snapshot (any device lists every process), for joins and leaves. */
static bool has_session(json_object *st, const char *sid)
{
    json_object *devs = jget(st, "devices");
    json_object *ps = jlen(devs) ? jget(json_object_array_get_idx(devs, 0), "processes") : NULL;
    for (size_t i = 0; i < jlen(ps); i++)
        if (!strcmp(jget_str(json_object_array_get_idx(ps, i), "session"), sid))
            return true;
    return false;
}

static void session_events(watch_state *w, json_object *from, json_object *to, const char *verb)
{
    json_object *devs = jget(from, "devices");
    json_object *ps = jlen(devs) ? jget(json_object_array_get_idx(devs, 0), "processes") : NULL;
    for (size_t i = 0; i < jlen(ps); i++) {
        json_object *p = json_object_array_get_idx(ps, i);
        if (!strcmp(jget_str(p, "role"), "tool"))
            continue; /* observers come and go: status, metrics, this command */
        if (!has_session(to, jget_str(p, "session")))
            event(w, "%s '%s' (pid %lld) %s", jget_str(p, "role"), jget_str(p, "name"), (long long)jget_int(p, "pid", -1), verb);
    }
}

/* What changed between two snapshots, as lines for "recent events". */
static void diff(watch_state *w, json_object *old, json_object *cur)
{
    session_events(w, cur, old, "joined");
    session_events(w, old, cur, "left");
    json_object *a = jget(old, "counters"), *b = jget(cur, "counters");
    char x[32];
    int64_t d;
    if ((d = jget_int(b, "admissions", -1) - jget_int(a, "admissions", -1)) > 0)
        event(w, "%lld admission(s) granted", (long long)d);
    if ((d = jget_int(b, "refusals", -1) - jget_int(a, "refusals", -1)) > 0)
        event(w, "%lld admission(s) refused", (long long)d);
    if ((d = jget_int(b, "asks", -1) - jget_int(a, "asks", -1)) > 0)
        event(w, "%lld release ask(s) sent, %s freed", (long long)d,
              sz(jget_int(b, "bytes_freed", -1) - jget_int(a, "bytes_freed", -1), x));
    if ((d = jget_int(b, "idle_releases", -1) - jget_int(a, "idle_releases", -1)) > 0)
        event(w, "%lld idle release(s)", (long long)d);
    if ((d = jget_int(b, "sessions_died", -1) - jget_int(a, "sessions_died", -1)) > 0)
        event(w, "%lld process(es) died holding memory; their bytes came back", (long long)d);
}

static void refresh_status(watch_state *w)
{
    char why[512];
    if (!w->client &&
        snapshot_connect(w->socket, "comem-watch", 2000, &w->client, why, sizeof why) != COMEM_OK) {
        snprintf(w->note, sizeof w->note, "%s", why);
        return;
    }
    json_object *cur = snapshot_read(w->client, why, sizeof why);
    if (!cur) {
        snprintf(w->note, sizeof w->note, "%s", why);
        comem_client_close(w->client); /* join again next time: the coordinator may have restarted */
        w->client = NULL;
        return;
    }
    if (w->last) {
        diff(w, w->last, cur);
        json_object_put(w->last);
    }
    w->last = cur;
    w->note[0] = '\0';
}

static json_object *device_of(json_object *st, int d)
{
    json_object *devs = jget(st, "devices");
    for (size_t i = 0; i < jlen(devs); i++)
        if (jget_int(json_object_array_get_idx(devs, i), "index", -1) == d)
            return json_object_array_get_idx(devs, i);
    return NULL;
}

/* A bar of the card: used (#), reserve kept free (r), free (.). */
static void bar(char *out, int width, int64_t cap, int64_t free_b, int64_t reserve)
{
    if (width < 4 || cap <= 0) {
        out[0] = '\0';
        return;
    }
    int used = (int)((double)(cap - free_b) / (double)cap * width + 0.5);
    int res = (int)((double)reserve / (double)cap * width + 0.5);
    used = used < 0 ? 0 : used > width ? width : used;
    res = res > width - used ? width - used : res;
    out[0] = '[';
    for (int i = 0; i < width; i++)
        out[1 + i] = i < used ? '#' : i >= width - res ? 'r' : '.';
    out[1 + width] = ']';
    out[2 + width] = '\0';
}

static void draw_device(screen *s, watch_state *w, int d)
{
    char b[8][32], line[LINE_MAX_CHARS];
    int64_t cap = -1, free_b = -1, reserve = -1, reclaim = -1;
    bool live = w->view && comem_view_read(w->view, d, &cap, &free_b, &reserve, &reclaim) == COMEM_OK;
    json_object *dv = device_of(w->last, d);
    if (!live && dv) { /* no view (another user's, or not yet written): the snapshot's figures */
        cap = jget_int(dv, "capacity", -1);
        free_b = jget_int(dv, "free", -1);
        reserve = jget_int(jget(dv, "reserve"), "published", -1);
    }
    put(s, "");
    put(s, "device %d  %s  %s%s", d, dv ? jget_str(dv, "name") : "?", dv ? jget_str(dv, "scope") : "",
        live ? "" : "  (no shared view: figures from status)");
    put(s, "  capacity %s  free %s  reserve %s", sz(cap, b[0]), sz(free_b, b[1]), sz(reserve, b[2]));
    put(s, "  reclaimable %s  granted %s  unattributed %s", sz(reclaim, b[3]), sz(dv ? jget_int(dv, "granted", -1) : -1, b[4]),
        sz(dv ? jget_int(dv, "unattributed", -1) : -1, b[5]));
    json_object *hr = jget(dv, "host_ram"); /* null for a card */
    if (hr) {
        char budget[48] = "no budget of its own:"; /* --ram machine: the machine's available RAM is the room */
        if (jget(hr, "budget"))
            snprintf(budget, sizeof budget, "budget %s ", sz(jget_int(hr, "budget", -1), b[0]));
        put(s, "  %s machine %s available of %s  cgroup %s  asks %lld (%s freed)", budget,
            sz(jget_int(hr, "mem_available", -1), b[1]), sz(jget_int(hr, "mem_total", -1), b[2]),
            jget(hr, "cgroup_limit") ? sz(jget_int(hr, "cgroup_limit", -1), b[3]) : "none",
            (long long)jget_int(hr, "asks", 0), sz(jget_int(hr, "bytes_freed", 0), b[4]));
    }
    int width = (s->tty ? s->cols : 80) - 4;
    bar(line, width > 100 ? 100 : width, cap, free_b, reserve);
    put(s, "  %s", line);
    json_object *ps = jget(dv, "processes");
    put(s, "  %-8s %-18s %-7s %-5s %11s %11s %11s", "PID", "PROCESS / HOLDER", "ROLE", "STATE", "RESIDENT", "FLOOR",
        "GRANTED");
    for (size_t i = 0; i < jlen(ps); i++) {
        json_object *p = json_object_array_get_idx(ps, i), *hs = jget(p, "holders");
        if (!strcmp(jget_str(p, "role"), "tool") && jlen(hs) == 0)
            continue;
        int64_t granted = 0;
        json_object *gs = jget(dv, "grants");
        for (size_t g = 0; g < jlen(gs); g++)
            if (!strcmp(jget_str(json_object_array_get_idx(gs, g), "session"), jget_str(p, "session")))
                granted += jget_int(json_object_array_get_idx(gs, g), "bytes", -1);
        put(s, "  %-8lld %-18.18s %-7s %-5s %11s %11s %11s", (long long)jget_int(p, "pid", -1), jget_str(p, "name"),
            jget_str(p, "role"), json_object_get_boolean(jget(p, "busy")) ? "busy" : "idle", sz(jget_int(p, "resident", -1), b[0]),
            sz(jget_int(p, "context_floor", -1), b[1]), sz(granted, b[2]));
        for (size_t k = 0; k < jlen(hs); k++) {
            json_object *h = json_object_array_get_idx(hs, k);
            put(s, "  %-8s   %-16.16s %-7s %-5s %11s", "", jget_str(h, "name"), jget_str(h, "kind"),
                json_object_get_boolean(jget(h, "busy")) ? "busy" : "idle", sz(jget_int(h, "resident", -1), b[0]));
        }
    }
    json_object *os = jget(dv, "other_processes");
    for (size_t i = 0; i < jlen(os); i++) {
        json_object *o = json_object_array_get_idx(os, i);
        put(s, "  %-8lld %-18s %-7s %-5s %11s", (long long)jget_int(o, "pid", -1), "(not in the ledger)", "-", "-",
            sz(jget_int(o, "bytes", -1), b[0]));
    }
}

/* 42 s, 12m05s, 3h07m. */
static void uptime(double secs, char *out, size_t len)
{
    long t = secs < 0 ? 0 : (long)secs;
    if (t < 120)
        snprintf(out, len, "%ld s", t);
    else if (t < 7200)
        snprintf(out, len, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(out, len, "%ldh%02ldm", t / 3600, (t / 60) % 60);
}

static void draw(screen *s, watch_state *w)
{
    s->line = 0;
    if (s->tty) {
        struct winsize ws;
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
            s->cols = ws.ws_col;
            s->rows = ws.ws_row;
        }
        fputs("\033[H", s->out);
    }
    char when[16], b[2][32];
    time_t t = time(NULL);
    strftime(when, sizeof when, "%H:%M:%S", localtime(&t));
    json_object *co = jget(w->last, "coordinator"), *ctr = jget(w->last, "counters");
    char up[32];
    uptime(co ? json_object_get_double(jget(co, "uptime_s")) : 0.0, up, sizeof up);
    put(s, "comem watch  %s  coordinator pid %lld  up %s  %lld session(s)%s", when, (long long)jget_int(co, "pid", -1), up,
        (long long)jget_int(co, "sessions", -1), s->tty ? "   (q quits)" : "");
    if (w->note[0])
        put(s, "! %s", w->note);
    put(s, "asks in flight %lld  requests in flight %lld  pinned host %s", (long long)jget_int(co, "asks_in_flight", -1),
        (long long)jget_int(co, "requests_in_flight", -1), sz(jget_int(jget(w->last, "pins"), "total", -1), b[1]));
    put(s, "admissions %lld, refused %lld  release asks %lld, %s freed  deaths %lld", (long long)jget_int(ctr, "admissions", -1),
        (long long)jget_int(ctr, "refusals", -1), (long long)jget_int(ctr, "asks", -1), sz(jget_int(ctr, "bytes_freed", -1), b[0]),
        (long long)jget_int(ctr, "sessions_died", -1));
    size_t n = jlen(jget(w->last, "devices"));
    for (size_t d = 0; d < n; d++)
        draw_device(s, w, (int)jget_int(json_object_array_get_idx(jget(w->last, "devices"), d), "index", -1));
    put(s, "");
    put(s, "recent events");
    if (w->n_events == 0)
        put(s, "  (none since the watch started)");
    for (int i = w->n_events - 1; i >= 0; i--)
        put(s, "  %s", w->events[i]);
    if (s->tty)
        fputs("\033[J", s->out); /* erase what a longer frame left below */
    else
        fputs("\n", s->out);
    cli_flush(); /* s->out is stdout: a failed write is kept for main to report */
}

static struct termios g_saved;
static bool g_raw;

static void terminal_enter(void)
{
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &g_saved) == 0) {
        struct termios t = g_saved;
        t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        t.c_oflag &= ~(tcflag_t)OPOST;
        t.c_cc[VMIN] = 0;
        t.c_cc[VTIME] = 0;
        g_raw = tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0;
    }
    fputs("\033[?1049h\033[?25l\033[H\033[2J", stdout); /* the alternate screen, cursor hidden */
    cli_flush();
}

static void terminal_leave(void)
{
    fputs("\033[?25h\033[?1049l", stdout);
    cli_flush();
    if (g_raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &g_saved);
}

/* Waits up to ms for a key or a signal; true when q (or Ctrl-C's signal) says to quit. */
static bool wait_input(int ms, bool keys)
{
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    int rc = poll(&p, keys ? 1 : 0, ms);
    if (rc > 0 && (p.revents & POLLIN)) {
        char c[16];
        ssize_t n = read(STDIN_FILENO, c, sizeof c);
        for (ssize_t i = 0; i < n; i++)
            if (c[i] == 'q' || c[i] == 'Q' || c[i] == 3)
                return true;
        if (n == 0)
            return false; /* stdin closed: keep watching until a signal or --count */
    }
    return g_quit != 0;
}

static int seconds_ms(const char *flag, const char *text, int dflt, char *err, size_t len)
{
    double secs;
    if (!text)
        return dflt;
    if (comem_parse_seconds(flag, text, &secs, err, len) != COMEM_OK || secs < 0.05 || secs > 3600) {
        if (!err[0] || secs < 0.05 || secs > 3600)
            snprintf(err, len, "%s: 0.05 to 3600 seconds, not '%s'", flag, text);
        return -1;
    }
    return (int)(secs * 1000);
}

int cmd_watch(int argc, char **argv)
{
    arg_value v[N_SPECS];
    int rc = args_begin(&k_cmd, argc, argv, v);
    if (rc != ARGS_GO)
        return rc;
    char err[512] = "";
    int interval = seconds_ms("--interval", v[F_INTERVAL].set ? v[F_INTERVAL].str : NULL, 1000, err, sizeof err);
    int every = interval < 0 ? -1
                             : seconds_ms("--status-every", v[F_STATUS_EVERY].set ? v[F_STATUS_EVERY].str : NULL, 2000,
                                          err, sizeof err);
    long count = v[F_COUNT].set ? (long)v[F_COUNT].num : -1;
    if (interval < 0 || every < 0 || count == 0)
        return args_fail(&k_cmd, v, 2, "%s", count == 0 ? "--count: at least 1 frame" : err);
    watch_state w = {.socket = v[F_SOCKET].set ? v[F_SOCKET].str : NULL};
    refresh_status(&w);
    if (!w.last)
        return args_fail(&k_cmd, v, 1, "%s", w.note);
    comem_view_open(w.socket, &w.view); /* without it the figures come from status */
    screen s = {.tty = isatty(STDOUT_FILENO) && !v[F_PLAIN].set, .cols = 80, .rows = 24, .out = stdout};
    struct sigaction sa = {.sa_handler = on_winch};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGWINCH, &sa, NULL);
    sa.sa_handler = on_quit;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (s.tty)
        terminal_enter();
    int64_t next_status = comem_now_ns() + (int64_t)every * 1000000;
    for (long frame = 0; !g_quit; frame++) {
        draw(&s, &w);
        if (ferror(s.out)) /* the reader went away (comem watch | head), or the disk is full: main says which */
            break;
        if (count > 0 && frame + 1 >= count)
            break;
        int64_t due = comem_now_ns() + (int64_t)interval * 1000000;
        bool quit = false;
        while (!quit) { /* sleep until the next frame; a key or a resize wakes it */
            int64_t left = due - comem_now_ns();
            if (left <= 0)
                break;
            quit = wait_input((int)(left / 1000000) + 1, s.tty);
            if (g_resized) {
                g_resized = 0;
                if (s.tty) {
                    fputs("\033[2J", s.out);
                    draw(&s, &w);
                }
            }
        }
        if (quit)
            break;
        if (comem_now_ns() >= next_status) {
            refresh_status(&w);
            next_status = comem_now_ns() + (int64_t)every * 1000000;
        }
    }
    if (s.tty)
        terminal_leave();
    if (w.view)
        comem_view_close(w.view);
    if (w.client)
        comem_client_close(w.client);
    json_object_put(w.last);
    args_free(v, N_SPECS);
    return 0;
}
