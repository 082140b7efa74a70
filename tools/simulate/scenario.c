/* tools/simulate/scenario.c - the scenario file format (docs/scenarios.md): one line, one statement. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/size.h"
#include "comem/common.h"
#include "simulate/scenario.h"

const char *const sc_policy_names[POL_COUNT] = {"comem", "comfy-env", "uncoordinated"};
const char *const sc_semantics_names[3] = {"linux", "wddm", "uma"};

const char *const sc_metric_names[M_COUNT] = {
    [M_FAILED] = "failed",           [M_REFUSED] = "refused",
    [M_SPILLED] = "spilled",         [M_OVER_S] = "over_budget_s",
    [M_EVICTIONS] = "evictions",     [M_EVICTED] = "evicted",
    [M_RELOADED] = "reloaded",       [M_WAIT50] = "wait_p50",
    [M_WAIT99] = "wait_p99",         [M_PEAK] = "peak",
    [M_PINNED_PEAK] = "pinned_peak", [M_PIN_BUDGET] = "pin_budget",
    [M_PINNED_OVER] = "pinned_over", [M_RAM_PEAK] = "ram_peak",
    [M_RAM_LIMIT] = "ram_limit",     [M_OOM_KILLED] = "oom_killed",
    [M_LEAKED] = "leaked",           [M_KILL_MS] = "kill_release_ms",
    [M_RESIDENT] = "resident",       [M_FOREIGN] = "foreign",
    [M_USED] = "used",               [M_FREE] = "free",
    [M_UNATTRIBUTED] = "unattributed", [M_DEGRADED] = "degraded",
    [M_CRASHED] = "crashed",         [M_RETRIES] = "fault_retries",
    [M_CLI_FREED] = "cli_freed",     [M_CAPACITY] = "capacity",
    [M_GRANTS_OVER] = "over_reserve", [M_STAGING_PEAK] = "staging_peak",
    [M_STREAMED] = "streamed",
};

const char *const sc_metric_help[M_COUNT] = {
    [M_FAILED] = "allocations that failed: device OOMs (linux, uma), failed page-locks, failed faults, "
                 "foreign apps' failed allocations, staging that could not grow",
    [M_REFUSED] = "admissions and pins refused after the admission wait",
    [M_SPILLED] = "most bytes ever past a card's physical memory (WDDM pages them to shared memory)",
    [M_OVER_S] = "scenario seconds during which some card's free fell below the headroom or it was overcommitted",
    [M_EVICTIONS] = "releases that took bytes from a process: asks, idle releases, a manager's evictions, pages taken",
    [M_EVICTED] = "bytes those releases took",
    [M_RELOADED] = "bytes loaded again after an eviction took them",
    [M_WAIT50] = "admission wait, median, scenario seconds",
    [M_WAIT99] = "admission wait, 99th percentile, scenario seconds",
    [M_PEAK] = "most bytes used on the card (NVML-style, driver slice included) [card N]",
    [M_PINNED_PEAK] = "most pinned host RAM at once, every process",
    [M_PIN_BUDGET] = "the machine's pin budget: ComfyUI's ceiling on the cgroup-clamped RAM",
    [M_PINNED_OVER] = "most pinned bytes past that budget",
    [M_RAM_PEAK] = "most host RAM (pinned + plain) at once",
    [M_RAM_LIMIT] = "the RAM the machine gives: min(RAM, cgroup limit)",
    [M_OOM_KILLED] = "processes the OOM killer took",
    [M_LEAKED] = "bytes the ledger still books at the end for nobody: unfinished grants, pins of no live process (comem)",
    [M_KILL_MS] = "worst real milliseconds from reaping a killed process to its bytes being out of the books",
    [M_RESIDENT] = "a process's bytes on its card, context and foreign bytes excluded: resident PROC [at T]",
    [M_FOREIGN] = "a process's bytes outside any manager: foreign PROC [at T]",
    [M_USED] = "bytes used on a card (NVML-style): used [card N] [at T]",
    [M_FREE] = "free bytes on a card (NVML-style): free [card N] [at T]",
    [M_UNATTRIBUTED] = "bytes of a process on the card the ledger cannot name, at the end (comem)",
    [M_DEGRADED] = "processes that found no coordinator and decided locally",
    [M_CRASHED] = "processes that died without a scripted kill",
    [M_RETRIES] = "page commits the pager retried after a transient error",
    [M_CLI_FREED] = "bytes the command-line releases got back",
    [M_CAPACITY] = "a card's capacity [card N]",
    [M_GRANTS_OVER] = "most bytes a card's use went past capacity minus ComfyUI's reserve",
    [M_STAGING_PEAK] = "the largest host staging buffer a process held",
    [M_STREAMED] = "weights computed from host RAM instead of the card (lowvram loads, refused pages), per node or pass",
};

#define MAX_TOK 24

typedef struct parser {
    const char *file;
    int line;
    char *err;
    size_t errlen;
    scenario *s;
    sc_proc *cur;  /* the process steps attach to */
    int replicas;  /* of cur */
    double stagger; /* replica k starts k * stagger later */
    bool failed;
} parser;

static bool fail(parser *p, const char *fmt, ...)
{
    if (p->failed)
        return false;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "%s:%d: %s", p->file, p->line, msg);
    p->failed = true;
    return false;
}

/* Splits a line into words; "quoted text" is one word; # starts a comment. */
static int tokenize(parser *p, char *line, char *tok[MAX_TOK])
{
    int n = 0;
    char *c = line;
    for (;;) {
        while (*c && isspace((unsigned char)*c))
            c++;
        if (!*c || *c == '#')
            break;
        if (n == MAX_TOK) {
            fail(p, "too many words on one line (at most %d)", MAX_TOK);
            return -1;
        }
        if (*c == '"') {
            char *end = strchr(c + 1, '"');
            if (!end) {
                fail(p, "a quoted text is not closed");
                return -1;
            }
            *end = '\0';
            tok[n++] = c; /* keeps the opening quote so callers can tell text from words */
            c = end + 1;
            continue;
        }
        tok[n++] = c;
        while (*c && !isspace((unsigned char)*c))
            c++;
        if (*c)
            *c++ = '\0';
    }
    return n;
}

static bool is_text(const char *t) { return t[0] == '"'; }

static bool parse_bytes(parser *p, const char *what, const char *t, int64_t *out)
{
    double v;
    char why[160];
    if (is_text(t) || comem_parse_size(t, &v, why, sizeof why) != 0)
        return fail(p, "%s: %s", what, is_text(t) ? "a size, not a quoted text" : why);
    if (v > 9.0e18)
        return fail(p, "%s: '%s' is too large", what, t);
    *out = (int64_t)v;
    return true;
}

static bool parse_secs(parser *p, const char *what, const char *t, double *out)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", t);
    size_t n = strlen(buf);
    if (n > 1 && buf[n - 1] == 's' && isdigit((unsigned char)buf[n - 2]))
        buf[n - 1] = '\0'; /* "90s" reads as 90 */
    char why[160];
    if (is_text(t) || comem_parse_number(buf, out, why, sizeof why) != 0)
        return fail(p, "%s: '%s' is not a number of seconds", what, t);
    return true;
}

static bool parse_int(parser *p, const char *what, const char *t, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(t, &end, 10);
    if (*t == '\0' || *end || errno || v < lo || v > hi)
        return fail(p, "%s: '%s' is not a whole number from %d to %d", what, t, lo, hi);
    *out = (int)v;
    return true;
}

static bool need_args(parser *p, const char *kw, int n, int have, const char *usage)
{
    if (have - 1 < n)
        return fail(p, "'%s' needs %s", kw, usage);
    return true;
}

static bool copy_name(parser *p, const char *what, const char *t, char *out)
{
    if (is_text(t) || strlen(t) >= SC_NAME || !(isalpha((unsigned char)t[0]) || t[0] == '_'))
        return fail(p, "%s: '%s' is not a name (a letter first, at most %d characters)", what, t, SC_NAME - 1);
    for (const char *c = t; *c; c++)
        if (!(isalnum((unsigned char)*c) || *c == '-' || *c == '_' || *c == '.'))
            return fail(p, "%s: '%s' has a character a name cannot have ('%c')", what, t, *c);
    strcpy(out, t);
    return true;
}

static int model_index(const sc_proc *pr, const char *name)
{
    for (int i = 0; i < pr->n_models; i++)
        if (!strcmp(pr->models[i].name, name))
            return i;
    return -1;
}

int sc_proc_index(const scenario *s, const char *name)
{
    for (int i = 0; i < s->n_procs; i++)
        if (!strcmp(s->procs[i].name, name))
            return i;
    return -1;
}

/* ---- processes ---- */

/* Turns the current process into `replicas` processes NAME-1..NAME-N. */
static bool expand_replicas(parser *p)
{
    if (!p->cur || p->replicas <= 1)
        return true;
    scenario *s = p->s;
    sc_proc base = *p->cur;
    int first = (int)(p->cur - s->procs);
    if (first + p->replicas > SC_MAX_PROCS)
        return fail(p, "'%s x %d' makes more than %d processes", base.name, p->replicas, SC_MAX_PROCS);
    for (int i = 0; i < p->replicas; i++) {
        sc_proc *q = &s->procs[first + i];
        *q = base;
        char name[SC_NAME + 16];
        snprintf(name, sizeof name, "%s-%d", base.name, i + 1);
        if (strlen(name) >= SC_NAME)
            return fail(p, "'%s' with its replica number is too long a name", base.name);
        strcpy(q->name, name);
        q->start = base.start + p->stagger * i;
    }
    s->n_procs = first + p->replicas;
    p->replicas = 1;
    p->stagger = 0;
    return true;
}

static bool proc_header(parser *p, sc_role role, char **tok, int n)
{
    scenario *s = p->s;
    if (!expand_replicas(p) || !need_args(p, tok[0], 1, n, "a name"))
        return false;
    if (s->n_procs == SC_MAX_PROCS)
        return fail(p, "more than %d processes", SC_MAX_PROCS);
    sc_proc *pr = &s->procs[s->n_procs];
    memset(pr, 0, sizeof *pr);
    pr->role = role;
    pr->line = p->line;
    if (!copy_name(p, "process name", tok[1], pr->name))
        return false;
    if (sc_proc_index(s, pr->name) >= 0)
        return fail(p, "a process named '%s' already exists", pr->name);
    int replicas = 1;
    p->stagger = 0;
    for (int i = 2; i < n; i++) {
        if (!strcmp(tok[i], "start") && i + 1 < n) {
            if (!parse_secs(p, "start", tok[++i], &pr->start))
                return false;
        } else if (!strcmp(tok[i], "card") && i + 1 < n) {
            if (!parse_int(p, "card", tok[++i], 0, SC_MAX_CARDS - 1, &pr->card))
                return false;
        } else if (!strcmp(tok[i], "x") && i + 1 < n) {
            if (!parse_int(p, "x (replicas)", tok[++i], 1, SC_MAX_PROCS, &replicas))
                return false;
        } else if (!strcmp(tok[i], "stagger") && i + 1 < n) {
            if (!parse_secs(p, "stagger", tok[++i], &p->stagger))
                return false;
        } else if (tok[i][0] == 'x' && isdigit((unsigned char)tok[i][1])) {
            if (!parse_int(p, "x (replicas)", tok[i] + 1, 1, SC_MAX_PROCS, &replicas))
                return false;
        } else {
            return fail(p, "unknown or incomplete '%s' after '%s %s' (start T, card N, xCOUNT, stagger S)", tok[i], tok[0],
                        tok[1]);
        }
    }
    s->n_procs++;
    p->cur = pr;
    p->replicas = replicas;
    return true;
}

static bool model_line(parser *p, char **tok, int n)
{
    sc_proc *pr = p->cur;
    if (!pr)
        return fail(p, "'model' must follow a process (host, worker or app NAME)");
    if (pr->role == ROLE_APP && pr->n_steps > 0)
        return fail(p, "an app's models come before its steps (an app with models is an LLM server)");
    if (!need_args(p, "model", 2, n, "a name and a size: model NAME SIZE [paged|whole] [inference SIZE]"))
        return false;
    if (pr->n_models == SC_MAX_MODELS)
        return fail(p, "more than %d models in process '%s'", SC_MAX_MODELS, pr->name);
    sc_model *m = &pr->models[pr->n_models];
    memset(m, 0, sizeof *m);
    m->line = p->line;
    m->inference = COMEM_GIB; /* memory_required of a typical sampling step */
    if (!copy_name(p, "model name", tok[1], m->name))
        return false;
    if (model_index(pr, m->name) >= 0)
        return fail(p, "process '%s' already has a model '%s'", pr->name, m->name);
    if (!parse_bytes(p, "model size", tok[2], &m->size))
        return false;
    if (m->size <= 0)
        return fail(p, "a model needs a size above 0");
    for (int i = 3; i < n; i++) {
        if (!strcmp(tok[i], "paged") && pr->role == ROLE_APP)
            return fail(p, "an LLM server (an app with models) holds whole models: 'paged' is ComfyUI's");
        else if (!strcmp(tok[i], "paged"))
            m->paged = true;
        else if (!strcmp(tok[i], "whole"))
            m->paged = false;
        else if (!strcmp(tok[i], "inference") && i + 1 < n) {
            if (!parse_bytes(p, "inference", tok[++i], &m->inference))
                return false;
        } else
            return fail(p, "unknown or incomplete '%s' in a model (paged, whole, inference SIZE)", tok[i]);
    }
    pr->n_models++;
    return true;
}

/* ---- timeline steps ---- */

static bool step_line(parser *p, char **tok, int n)
{
    sc_proc *pr = p->cur;
    const char *kw = tok[0];
    if (!pr)
        return fail(p, "'%s' must follow a process (host, worker or app NAME)", kw);
    if (pr->n_steps == SC_MAX_STEPS)
        return fail(p, "more than %d steps in process '%s'", SC_MAX_STEPS, pr->name);
    sc_step *st = &pr->steps[pr->n_steps];
    memset(st, 0, sizeof *st);
    st->line = p->line;
    st->model = -1;
    st->target = -1;
    /* an app: a program that registers nothing; one with models (an LLM server) also loads, serves (run) and
       unloads them */
    static const char *const app_steps[] = {"at", "idle", "wait", "foreign", "ram", "kill", "release"};
    static const char *const server_steps[] = {"load", "unload", "run"};
    bool app_ok = false, server_ok = false;
    for (size_t k = 0; k < sizeof app_steps / sizeof app_steps[0]; k++)
        app_ok |= !strcmp(kw, app_steps[k]);
    for (size_t k = 0; k < sizeof server_steps / sizeof server_steps[0]; k++)
        server_ok |= !strcmp(kw, server_steps[k]);
    if (pr->role == ROLE_APP && !app_ok && !(server_ok && pr->n_models > 0))
        return fail(p, "an app (an unregistered program) cannot '%s'%s", kw,
                    server_ok ? ": declare its models first (an app with models is an LLM server)"
                              : ": it holds outside bytes and, an LLM server, whole models");
    if (!strcmp(kw, "at") || !strcmp(kw, "idle") || !strcmp(kw, "wait")) {
        st->kind = kw[0] == 'a' ? ST_AT : ST_IDLE;
        if (!need_args(p, kw, 1, n, "a number of seconds") || !parse_secs(p, kw, tok[1], &st->secs))
            return false;
        st->until_released = st->kind == ST_IDLE && n == 4 && !strcmp(tok[2], "until") && !strcmp(tok[3], "released");
        if (n > 2 && !st->until_released)
            return fail(p, "'%s' takes one number of seconds%s", kw,
                        st->kind == ST_IDLE ? ", optionally followed by 'until released'" : "");
        if (st->until_released && pr->role == ROLE_APP && pr->n_models == 0)
            return fail(p, "an app holds no models: 'until released' waits for models to leave the card");
    } else if (!strcmp(kw, "load") || !strcmp(kw, "unload")) {
        st->kind = kw[0] == 'l' ? ST_LOAD : ST_UNLOAD;
        if (!need_args(p, kw, 1, n, "a model name"))
            return false;
        if ((st->model = model_index(pr, tok[1])) < 0)
            return fail(p, "process '%s' has no model '%s' (declare it with 'model %s SIZE' first)", pr->name,
                        tok[1], tok[1]);
        int i = 2;
        if (st->kind == ST_LOAD && i + 1 < n && !strcmp(tok[i], "cancel")) {
            double f;
            char buf[32];
            snprintf(buf, sizeof buf, "%s", tok[i + 1]);
            size_t l = strlen(buf);
            bool pct = l > 0 && buf[l - 1] == '%';
            if (pct)
                buf[l - 1] = '\0';
            bool num = comem_parse_number(buf, &f, NULL, 0) == 0;
            if (num && pct)
                f /= 100.0;
            if (!num || !(f > 0 && f < 1))
                return fail(p, "cancel: '%s' is not a fraction between 0 and 1 (or a percentage)", tok[i + 1]);
            st->cancel = f;
            i += 2;
        }
        if (i < n)
            return fail(p, "unexpected '%s' after '%s %s'", tok[i], kw, tok[1]);
    } else if (!strcmp(kw, "run")) {
        st->kind = ST_RUN;
        if (!need_args(p, kw, 1, n, "a number of seconds: run SECONDS [MODEL...]") ||
            !parse_secs(p, "run", tok[1], &st->secs))
            return false;
        for (int i = 2; i < n; i++) {
            int m = model_index(pr, tok[i]);
            if (m < 0)
                return fail(p, "process '%s' has no model '%s'", pr->name, tok[i]);
            st->models |= 1u << m;
        }
    } else if (!strcmp(kw, "foreign")) {
        st->kind = ST_FOREIGN;
        if (!need_args(p, kw, 1, n, "a size: foreign SIZE [over SECONDS]") ||
            !parse_bytes(p, "foreign", tok[1], &st->bytes))
            return false;
        if (n == 4 && !strcmp(tok[2], "over")) {
            if (!parse_secs(p, "over", tok[3], &st->secs))
                return false;
        } else if (n != 2) {
            return fail(p, "'foreign' is written foreign SIZE [over SECONDS]");
        }
    } else if (!strcmp(kw, "custom") || !strcmp(kw, "pin") || !strcmp(kw, "unpin") || !strcmp(kw, "ram")) {
        st->kind = !strcmp(kw, "custom") ? ST_CUSTOM : !strcmp(kw, "pin") ? ST_PIN : !strcmp(kw, "unpin") ? ST_UNPIN : ST_RAM;
        if (!need_args(p, kw, 1, n, "a size") || !parse_bytes(p, kw, tok[1], &st->bytes))
            return false;
        if (n > 2)
            return fail(p, "'%s' takes one size", kw);
    } else if (!strcmp(kw, "kill")) {
        st->kind = ST_KILL;
        if (n > 1)
            return fail(p, "'kill' takes nothing");
    } else if (!strcmp(kw, "release")) {
        st->kind = ST_RELEASE;
        st->bytes = -1;
        if (!need_args(p, kw, 1, n, "a process: release PROCESS [SIZE]") ||
            !copy_name(p, "release", tok[1], st->tname))
            return false;
        if (n == 3 && !parse_bytes(p, "release", tok[2], &st->bytes))
            return false;
        if (n > 3)
            return fail(p, "'release' is written release PROCESS [SIZE]");
    } else if (!strcmp(kw, "inject-faults")) {
        st->kind = ST_INJECT;
        if (!need_args(p, kw, 1, n, "a count") || !parse_int(p, kw, tok[1], 1, 1000, &st->count))
            return false;
    } else if (!strcmp(kw, "pressure")) {
        st->kind = ST_PRESSURE;
        if (!need_args(p, kw, 1, n, "a size") || !parse_bytes(p, kw, tok[1], &st->bytes))
            return false;
        if (n > 2)
            return fail(p, "'pressure' takes one size");
    } else {
        return fail(p, "unknown statement '%s' (see docs/scenarios.md)", kw);
    }
    pr->n_steps++;
    return true;
}

/* ---- expectations ---- */

static bool parse_term(parser *p, char **tok, int n, int *i, sc_term *t)
{
    memset(t, 0, sizeof *t);
    t->proc = -1;
    t->at = -1;
    t->mark = -1;
    if (*i >= n)
        return fail(p, "an expectation ends too early");
    const char *w = tok[*i];
    for (int m = 0; m < M_COUNT; m++) {
        if (!strcmp(w, sc_metric_names[m])) {
            t->is_metric = true;
            t->metric = (sc_metric)m;
            (*i)++;
            while (*i < n) {
                const char *a = tok[*i];
                if (!strcmp(a, "card") && *i + 1 < n) {
                    if (!parse_int(p, "card", tok[*i + 1], 0, SC_MAX_CARDS - 1, &t->card))
                        return false;
                    t->card_set = true;
                    *i += 2;
                } else if (!strcmp(a, "at") && *i + 1 < n) {
                    if (!parse_secs(p, "at", tok[*i + 1], &t->at))
                        return false;
                    *i += 2;
                } else if ((!strcmp(a, "before") || !strcmp(a, "after")) && *i + 2 < n && !strcmp(tok[*i + 1], "line")) {
                    if (!parse_int(p, a, tok[*i + 2], 1, INT_MAX, &t->mark_line))
                        return false;
                    t->mark_after = a[0] == 'a';
                    *i += 3;
                } else if (isalpha((unsigned char)a[0]) && !t->pname[0] && strcmp(a, "card") && strcmp(a, "at") &&
                           strcmp(a, "before") && strcmp(a, "after")) {
                    if (!copy_name(p, "process", a, t->pname))
                        return false;
                    (*i)++;
                } else {
                    break;
                }
            }
            bool reading = m == M_RESIDENT || m == M_FOREIGN || m == M_USED || m == M_FREE;
            if ((t->at >= 0 || t->mark_line) && !reading)
                return fail(p, "'%s' is not a reading at one moment: only resident, foreign, used and free take "
                               "'at T', 'before line N' or 'after line N'", w);
            if (t->at >= 0 && t->mark_line)
                return fail(p, "'%s': either 'at T' or '%s line N', not both", w, t->mark_after ? "after" : "before");
            bool wants_proc = m == M_RESIDENT || m == M_FOREIGN || m == M_UNATTRIBUTED;
            if (wants_proc && !t->pname[0])
                return fail(p, "'%s' needs a process: %s PROCESS [at T]", w, w);
            if (!wants_proc && t->pname[0])
                return fail(p, "'%s' is not a figure of one process ('%s')", w, t->pname);
            return true;
        }
    }
    double v;
    char why[160];
    if (comem_parse_size(w, &v, why, sizeof why) != 0)
        return fail(p, "'%s' is neither a figure (%s, ...) nor a number: %s", w, sc_metric_names[0], why);
    t->value = v;
    (*i)++;
    return true;
}

static bool expect_line(parser *p, bool gap, char **tok, int n, const char *raw)
{
    scenario *s = p->s;
    if (!expand_replicas(p))
        return false;
    p->cur = NULL; /* steps after an expectation would be ambiguous */
    if (s->n_expect == SC_MAX_EXPECT)
        return fail(p, "more than %d expectations", SC_MAX_EXPECT);
    sc_expect *e = &s->expects[s->n_expect];
    memset(e, 0, sizeof *e);
    e->line = p->line;
    e->gap = gap;
    const char *start = raw;
    while (isspace((unsigned char)*start))
        start++;
    snprintf(e->text, sizeof e->text, "%s", start);
    char *hash = strchr(e->text, '#');
    if (hash)
        *hash = '\0';
    char *quote = gap ? strchr(e->text, '"') : NULL; /* the reason is shown apart */
    if (quote)
        *quote = '\0';
    for (size_t l = strlen(e->text); l > 0 && isspace((unsigned char)e->text[l - 1]); l--)
        e->text[l - 1] = '\0';
    if (gap) {
        if (n < 2 || !is_text(tok[n - 1]))
            return fail(p, "'expect-gap' ends with the reason in quotes: expect-gap FIGURE OP VALUE \"why\"");
        snprintf(e->why, sizeof e->why, "%s", tok[n - 1] + 1);
        n--;
    }
    int i = 1;
    if (!parse_term(p, tok, n, &i, &e->lhs))
        return false;
    if (i >= n)
        return fail(p, "an expectation needs a comparison: FIGURE (<|<=|==|!=|>=|>) VALUE");
    static const char *ops[] = {"<", "<=", "==", "!=", ">=", ">"};
    int op = -1;
    for (int k = 0; k < 6; k++)
        if (!strcmp(tok[i], ops[k]))
            op = k;
    if (op < 0)
        return fail(p, "'%s' is not a comparison (<, <=, ==, !=, >=, >)", tok[i]);
    e->op = (sc_op)op;
    i++;
    if (!parse_term(p, tok, n, &i, &e->rhs))
        return false;
    if (i < n && (!strcmp(tok[i], "+") || !strcmp(tok[i], "-"))) {
        e->rhs_sign = tok[i][0] == '+' ? 1 : -1;
        i++;
        if (!parse_term(p, tok, n, &i, &e->rhs2))
            return false;
    }
    if (i < n)
        return fail(p, "unexpected '%s' at the end of the expectation", tok[i]);
    if (!e->lhs.is_metric && !e->rhs.is_metric)
        return fail(p, "an expectation compares at least one figure");
    s->n_expect++;
    return true;
}

/* ---- the machine ---- */

static bool setting(parser *p, char **tok, int n)
{
    scenario *s = p->s;
    const char *kw = tok[0];
    if (!expand_replicas(p))
        return false;
    p->cur = NULL;
    if (!strcmp(kw, "scenario")) {
        if (!need_args(p, kw, 1, n, "an id and a title: scenario ID \"title\"") ||
            !copy_name(p, "scenario id", tok[1], s->id))
            return false;
        if (n == 3 && is_text(tok[2]))
            snprintf(s->title, sizeof s->title, "%s", tok[2] + 1);
        else if (n != 2)
            return fail(p, "'scenario' is written scenario ID \"title\"");
        return true;
    }
    if (!strcmp(kw, "speed")) {
        if (!need_args(p, kw, 1, n, "a number") || !parse_secs(p, kw, tok[1], &s->speed))
            return false;
        if (!(s->speed >= 1 && s->speed <= 1000))
            return fail(p, "speed must be from 1 to 1000 scenario seconds per second");
        return true;
    }
    if (!strcmp(kw, "end") || !strcmp(kw, "idle-release") || !strcmp(kw, "admit-wait")) {
        double v;
        if (!need_args(p, kw, 1, n, "a number of seconds") || !parse_secs(p, kw, tok[1], &v))
            return false;
        if (!(v > 0))
            return fail(p, "'%s' must be above 0", kw);
        *(kw[0] == 'e' ? &s->end : kw[0] == 'i' ? &s->idle_release : &s->admit_wait) = v;
        return true;
    }
    if (!strcmp(kw, "load-rate") || !strcmp(kw, "headroom") || !strcmp(kw, "reserve")) {
        int64_t v;
        if (!need_args(p, kw, 1, n, "a size") || !parse_bytes(p, kw, tok[1], &v))
            return false;
        if (kw[0] == 'l') {
            if (v <= 0)
                return fail(p, "load-rate must be above 0 (bytes per second)");
            s->load_rate = (double)v;
        } else if (kw[0] == 'h') {
            s->headroom = v;
        } else {
            s->reserve = v;
        }
        return true;
    }
    if (!strcmp(kw, "card")) {
        if (s->n_cards)
            return fail(p, "one 'card' line per scenario (write 'x N' for N identical cards)");
        if (!need_args(p, kw, 1, n, "a size: card SIZE [linux|wddm|uma] [x N] [reserved=SIZE] [ctx=SIZE]"))
            return false;
        s->n_cards = 1;
        if (!parse_bytes(p, "card size", tok[1], &s->card.size))
            return false;
        for (int i = 2; i < n; i++) {
            if (!strcmp(tok[i], "linux") || !strcmp(tok[i], "wddm") || !strcmp(tok[i], "uma")) {
                sc_set_semantics(s, tok[i]);
            } else if (!strcmp(tok[i], "x") && i + 1 < n) {
                if (!parse_int(p, "x (cards)", tok[++i], 1, SC_MAX_CARDS, &s->n_cards))
                    return false;
            } else if (!strncmp(tok[i], "reserved=", 9)) {
                if (!parse_bytes(p, "reserved", tok[i] + 9, &s->card.reserved))
                    return false;
            } else if (!strncmp(tok[i], "ctx=", 4)) {
                if (!parse_bytes(p, "ctx", tok[i] + 4, &s->card.ctx))
                    return false;
            } else {
                return fail(p, "unknown '%s' in card (linux, wddm, uma, x N, reserved=SIZE, ctx=SIZE)", tok[i]);
            }
        }
        if (s->card.size <= comem_add(s->card.reserved, s->card.ctx))
            return fail(p, "a card needs a size above its reserved slice plus one context");
        return true;
    }
    if (!strcmp(kw, "on")) {
        if (!need_args(p, kw, 1, n, "semantics: on linux wddm"))
            return false;
        memset(s->on, 0, sizeof s->on);
        for (int i = 1; i < n; i++) {
            int k = -1;
            for (int j = 0; j < 3; j++)
                if (!strcmp(tok[i], sc_semantics_names[j]))
                    k = j;
            if (k < 0)
                return fail(p, "'%s' is not linux, wddm or uma", tok[i]);
            s->on[k] = true;
        }
        return true;
    }
    if (!strcmp(kw, "ram")) {
        if (!need_args(p, kw, 1, n, "a size: ram SIZE [swap SIZE] [cgroup SIZE] [ledger]") ||
            !parse_bytes(p, "ram", tok[1], &s->ram))
            return false;
        if (s->ram < COMEM_GIB)
            return fail(p, "ram must be at least 1GiB");
        for (int i = 2; i < n; i += 2) {
            if (!strcmp(tok[i], "ledger")) { /* a flag: no value follows */
                s->ram_ledger = true;
                i--;
                continue;
            }
            if (i + 1 >= n || (strcmp(tok[i], "swap") && strcmp(tok[i], "cgroup")))
                return fail(p, "unknown or incomplete '%s' in ram (swap SIZE, cgroup SIZE, ledger)", tok[i]);
            if (!parse_bytes(p, tok[i], tok[i + 1], tok[i][0] == 's' ? &s->swap : &s->cgroup))
                return false;
        }
        return true;
    }
    if (!strcmp(kw, "coordinator")) {
        if (n != 2 || (strcmp(tok[1], "on") && strcmp(tok[1], "off")))
            return fail(p, "'coordinator' is on or off");
        s->coordinator = !strcmp(tok[1], "on");
        return true;
    }
    return fail(p, "unknown statement '%s' (see docs/scenarios.md)", kw);
}

static bool statement(parser *p, char **tok, int n, const char *raw)
{
    const char *kw = tok[0];
    if (is_text(kw))
        return fail(p, "a line starts with a word, not a quoted text");
    if (!strcmp(kw, "host"))
        return proc_header(p, ROLE_HOST, tok, n);
    if (!strcmp(kw, "worker"))
        return proc_header(p, ROLE_WORKER, tok, n);
    if (!strcmp(kw, "app"))
        return proc_header(p, ROLE_APP, tok, n);
    if (!strcmp(kw, "model"))
        return model_line(p, tok, n);
    if (!strcmp(kw, "expect"))
        return expect_line(p, false, tok, n, raw);
    if (!strcmp(kw, "expect-gap"))
        return expect_line(p, true, tok, n, raw);
    static const char *const steps[] = {"at", "idle", "wait", "load", "unload", "run", "foreign", "custom",
                                        "pin", "unpin", "ram", "kill", "release", "inject-faults",
                                        "pressure"};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (!strcmp(kw, steps[i]) && (p->cur || strcmp(kw, "ram")))
            return step_line(p, tok, n);
    return setting(p, tok, n);
}

/* Checks that need the whole file: names, cards, steps that refer to other processes. */
/* The step written on line t->mark_line: it must be one process's (a replicated one is many). */
static bool resolve_mark(parser *p, sc_term *t)
{
    scenario *s = p->s;
    int proc = -1, step = -1, found = 0;
    for (int i = 0; i < s->n_procs; i++)
        for (int k = 0; k < s->procs[i].n_steps; k++)
            if (s->procs[i].steps[k].line == t->mark_line && found++ == 0) {
                proc = i;
                step = k;
            }
    const char *w = t->mark_after ? "after" : "before";
    if (!found)
        return fail(p, "%s line %d: no step is written on line %d", w, t->mark_line, t->mark_line);
    if (found > 1)
        return fail(p, "%s line %d: that step is %d processes' ('%s' is replicated); a reading needs one", w,
                    t->mark_line, found, s->procs[proc].name);
    for (int m = 0; m < s->n_marks; m++)
        if (s->marks[m].proc == proc && s->marks[m].step == step && s->marks[m].after == t->mark_after) {
            t->mark = m;
            return true;
        }
    if (s->n_marks >= SC_MAX_MARKS)
        return fail(p, "more than %d readings before or after a line", SC_MAX_MARKS);
    t->mark = s->n_marks;
    s->marks[s->n_marks++] = (sc_mark){.proc = proc, .step = step, .line = t->mark_line, .after = t->mark_after};
    return true;
}

static bool resolve(parser *p)
{
    scenario *s = p->s;
    if (!s->n_cards)
        return fail(p, "no 'card' line: a scenario needs a card (card 24GiB linux)");
    if (!s->n_procs)
        return fail(p, "no processes (host, worker or app NAME)");
    for (int i = 0; i < s->n_procs; i++) {
        sc_proc *pr = &s->procs[i];
        p->line = pr->line;
        if (pr->card >= s->n_cards)
            return fail(p, "process '%s' is on card %d, but the scenario has %d card(s)", pr->name, pr->card,
                        s->n_cards);
        for (int k = 0; k < pr->n_steps; k++) {
            sc_step *st = &pr->steps[k];
            if (st->kind != ST_RELEASE)
                continue;
            p->line = st->line;
            if ((st->target = sc_proc_index(s, st->tname)) < 0)
                return fail(p, "release: no process named '%s'", st->tname);
            if (st->target == i)
                return fail(p, "release: a process asks others, not itself");
            if (s->procs[st->target].role == ROLE_APP && !sc_proc_server(&s->procs[st->target]))
                return fail(p, "release: '%s' is an app with no models; it answers no one", st->tname);
        }
    }
    for (int i = 0; i < s->n_expect; i++) {
        sc_expect *e = &s->expects[i];
        p->line = e->line;
        sc_term *ts[3] = {&e->lhs, &e->rhs, &e->rhs2};
        for (int k = 0; k < 3; k++) {
            if (!ts[k]->pname[0])
                continue;
            if ((ts[k]->proc = sc_proc_index(s, ts[k]->pname)) < 0)
                return fail(p, "no process named '%s'", ts[k]->pname);
        }
        if ((e->lhs.is_metric && e->lhs.card >= s->n_cards) || (e->rhs.is_metric && e->rhs.card >= s->n_cards))
            return fail(p, "card %d: the scenario has %d card(s)", e->lhs.card, s->n_cards);
        for (int k = 0; k < 3; k++)
            if (ts[k]->mark_line && !resolve_mark(p, ts[k]))
                return false;
    }
    return true;
}

bool sc_set_semantics(scenario *s, const char *name)
{
    for (int j = 0; j < 3; j++) {
        if (!strcmp(name, sc_semantics_names[j])) {
            s->card.semantics = j;
            return true;
        }
    }
    return false;
}

int sc_parse_file(const char *path, scenario *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    snprintf(s->file, sizeof s->file, "%s", path);
    s->speed = 100;
    s->idle_release = 60;
    s->load_rate = 4.0 * (double)COMEM_GIB;
    s->admit_wait = 30;
    s->headroom = 256 * COMEM_MIB;
    s->reserve = -1;
    s->card = (sc_card){.size = 24 * COMEM_GIB, .reserved = 256 * COMEM_MIB, .ctx = 300 * COMEM_MIB};
    s->on[SC_LINUX] = s->on[SC_WDDM] = true;
    s->ram = 64 * COMEM_GIB;
    s->cgroup = -1;
    s->coordinator = true;
    parser p = {.file = path, .err = err, .errlen = errlen, .s = s, .replicas = 1};
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return COMEM_EIO;
    }
    char line[1024];
    bool ok = true;
    while (ok && fgets(line, sizeof line, f)) {
        p.line++;
        size_t l = strlen(line);
        if (l == sizeof line - 1 && line[l - 1] != '\n') {
            ok = fail(&p, "line longer than %zu characters", sizeof line - 2);
            break;
        }
        char raw[1024];
        snprintf(raw, sizeof raw, "%s", line);
        char *tok[MAX_TOK];
        int n = tokenize(&p, line, tok);
        if (n < 0)
            ok = false;
        else if (n > 0)
            ok = statement(&p, tok, n, raw);
    }
    fclose(f);
    if (ok)
        ok = expand_replicas(&p);
    if (ok) {
        p.line = p.line ? p.line : 1;
        ok = resolve(&p);
    }
    if (ok && !s->id[0]) {
        const char *b = strrchr(path, '/');
        snprintf(s->id, sizeof s->id, "%.*s", (int)(SC_NAME - 1), b ? b + 1 : path);
        char *dot = strrchr(s->id, '.');
        if (dot)
            *dot = '\0';
    }
    return ok ? COMEM_OK : COMEM_EINVAL;
}
