/* tests/integration/harness.c - comemd and client processes for multi-process tests. */
#include "harness.h"

#include "unit/tmpdir.h"

#include <errno.h>
#include <json-c/json.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "raw.h"

void h_init(harness *h, const char *spec_prefix)
{
    memset(h, 0, sizeof *h);
    snprintf(h->dir, sizeof h->dir, "/tmp/comem-test-mp-XXXXXX");
    if (!mkdtemp(h->dir))
        abort();
    snprintf(h->sock, sizeof h->sock, "%s/comem.sock", h->dir);
    snprintf(h->spec, sizeof h->spec, "%s:path=%s/card", spec_prefix, h->dir);
    signal(SIGPIPE, SIG_IGN);
}

void h_start(harness *h, const char *const *extra)
{
    char bin[512];
    const char *dir = getenv("COMEM_BIN_DIR");
    snprintf(bin, sizeof bin, "%s/comemd", dir ? dir : "build/bin");
    h->comemd = fork();
    if (h->comemd == 0) {
        const char *argv[32] = {"comemd", "--socket", h->sock, "--device", h->spec, "--check"};
        int n = 6;
        for (int i = 0; extra && extra[i] && n < 30; i++)
            argv[n++] = extra[i];
        argv[n] = NULL;
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 500; i++) { /* up to 5 s */
        int fd = raw_connect(h->sock);
        if (fd >= 0) {
            close(fd);
            return;
        }
        usleep(10000);
    }
    abort();
}

void h_stop(harness *h, bool hard)
{
    if (h->comemd > 0) {
        kill(h->comemd, hard ? SIGKILL : SIGTERM);
        waitpid(h->comemd, NULL, 0);
        h->comemd = 0;
    }
}

void h_fini(harness *h)
{
    h_stop(h, false);
    if (test_tmpdir_remove(h->dir) != 0)
        abort();
}

comem_sim *h_sim(const harness *h)
{
    comem_sim_spec sp;
    comem_sim *sim = NULL;
    if (comem_sim_spec_parse(h->spec, &sp, NULL, 0) != 0 || comem_sim_open(&sp, &sim) != 0)
        return NULL;
    return sim;
}

char *h_status(const harness *h)
{
    comem_client *c = NULL;
    if (comem_client_open(h->sock, COMEM_CLIENT_TOOL, "test-status", -1, COMEM_OPEN_NO_LOCAL, &c) != COMEM_OK)
        return NULL;
    char *text = NULL;
    if (comem_status_json(c, &text) != COMEM_OK)
        text = NULL;
    comem_client_close(c);
    return text;
}

static json_object *path_get(json_object *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save, *t = strtok_r(buf, ".", &save); t && o; t = strtok_r(NULL, ".", &save)) {
        if (json_object_is_type(o, json_type_array))
            o = json_object_array_get_idx(o, (size_t)atoi(t));
        else if (!json_object_object_get_ex(o, t, &o))
            o = NULL;
    }
    return o;
}

int64_t h_status_num(const harness *h, const char *path)
{
    char *text = h_status(h);
    json_object *root = text ? json_tokener_parse(text) : NULL;
    comem_free(text);
    json_object *v = root ? path_get(root, path) : NULL;
    int64_t r = v ? json_object_get_int64(v) : INT64_MIN;
    json_object_put(root);
    return r;
}

uint64_t h_entry_id(const harness *h, const char *name)
{
    char *text = h_status(h);
    json_object *root = text ? json_tokener_parse(text) : NULL;
    comem_free(text);
    json_object *ps = root ? path_get(root, "devices.0.processes") : NULL;
    uint64_t id = 0;
    for (size_t i = 0; ps && !id && i < json_object_array_length(ps); i++) {
        json_object *p = json_object_array_get_idx(ps, i), *n;
        if (!json_object_object_get_ex(p, "name", &n) || strcmp(json_object_get_string(n), name))
            continue;
        json_object *e = path_get(p, "holders.0.entries.0.id");
        if (e)
            id = strtoull(json_object_get_string(e), NULL, 16);
    }
    json_object_put(root);
    return id;
}

/* Walks device 0's processes named name: their count and Σ resident. */
static void processes(const harness *h, const char *name, int *count, int64_t *resident)
{
    *count = 0;
    *resident = 0;
    char *text = h_status(h);
    json_object *root = text ? json_tokener_parse(text) : NULL;
    comem_free(text);
    json_object *ps = root ? path_get(root, "devices.0.processes") : NULL;
    for (size_t i = 0; ps && i < json_object_array_length(ps); i++) {
        json_object *p = json_object_array_get_idx(ps, i), *n, *r;
        if (json_object_object_get_ex(p, "name", &n) && !strcmp(json_object_get_string(n), name)) {
            (*count)++;
            if (json_object_object_get_ex(p, "resident", &r))
                *resident += json_object_get_int64(r);
        }
    }
    json_object_put(root);
}

int64_t h_process_resident(const harness *h, const char *name)
{
    int n;
    int64_t r;
    processes(h, name, &n, &r);
    return n ? r : -1;
}

int h_process_count(const harness *h, const char *name)
{
    int n;
    int64_t r;
    processes(h, name, &n, &r);
    return n;
}

/* Reads what fd has now into buf at *len (keeping one byte for the NUL); false at EOF. */
static bool drain(int fd, char *buf, size_t cap, size_t *len)
{
    char tmp[4096];
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n <= 0)
        return n < 0 && errno == EINTR;
    size_t take = *len + (size_t)n < cap ? (size_t)n : cap - 1 - *len;
    memcpy(buf + *len, tmp, take);
    *len += take;
    buf[*len] = '\0';
    return true;
}

int h_run(const char *const *argv, const char *const *envs, int timeout_ms, char *out, size_t outlen, char *err,
          size_t errlen)
{
    char bin[512];
    const char *dir = getenv("COMEM_BIN_DIR");
    snprintf(bin, sizeof bin, "%s/%s", dir ? dir : "build/bin", argv[0]);
    int po[2], pe[2];
    if (pipe(po) || pipe(pe))
        abort();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]);
        close(pe[0]);
        for (int i = 0; envs && envs[i]; i++) {
            const char *eq = strchr(envs[i], '=');
            if (eq) {
                char name[128];
                snprintf(name, sizeof name, "%.*s", (int)(eq - envs[i]), envs[i]);
                setenv(name, eq + 1, 1);
            } else {
                unsetenv(envs[i]);
            }
        }
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    size_t lo = 0, le = 0;
    if (outlen)
        out[0] = '\0';
    if (errlen)
        err[0] = '\0';
    bool open_o = true, open_e = true;
    int64_t deadline = comem_now_ns() + (int64_t)timeout_ms * 1000000;
    bool timed_out = false;
    while (open_o || open_e) {
        struct pollfd p[2] = {{.fd = open_o ? po[0] : -1, .events = POLLIN}, {.fd = open_e ? pe[0] : -1, .events = POLLIN}};
        int left = (int)((deadline - comem_now_ns()) / 1000000);
        if (left <= 0 || poll(p, 2, left) == 0) {
            timed_out = true;
            break;
        }
        if (p[0].revents && !drain(po[0], out, outlen, &lo))
            open_o = false;
        if (p[1].revents && !drain(pe[0], err, errlen, &le))
            open_e = false;
    }
    if (timed_out)
        kill(pid, SIGKILL);
    close(po[0]);
    close(pe[0]);
    int st;
    waitpid(pid, &st, 0);
    if (timed_out)
        return -2;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void ch_open(chan *a, chan *b)
{
    int p[2], q[2];
    if (pipe(p) || pipe(q))
        abort();
    *a = (chan){p[0], p[1]};
    *b = (chan){q[0], q[1]};
}

void ch_put(int fd, int64_t v)
{
    if (write(fd, &v, sizeof v) != (ssize_t)sizeof v)
        return;
}

bool ch_get(int fd, int64_t *v, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) <= 0)
        return false;
    return read(fd, v, sizeof *v) == (ssize_t)sizeof *v;
}

static pid_t g_kids[256];
static int g_n_kids;

pid_t h_child(int (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) {
        alarm(90);
        _exit(fn(arg));
    }
    if (p > 0 && g_n_kids < 256)
        g_kids[g_n_kids++] = p;
    return p;
}

void h_track(pid_t pid)
{
    if (pid > 0 && g_n_kids < 256)
        g_kids[g_n_kids++] = pid;
}

void h_forget(pid_t pid)
{
    for (int i = 0; i < g_n_kids; i++)
        if (g_kids[i] == pid)
            g_kids[i] = g_kids[--g_n_kids];
}

int h_wait(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -2;
    h_forget(pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void h_kill_children(void)
{
    for (int i = 0; i < g_n_kids; i++) {
        kill(g_kids[i], SIGKILL);
        waitpid(g_kids[i], NULL, 0);
    }
    g_n_kids = 0;
}

int h_teardown(void **state)
{
    harness *h = *state;
    h_kill_children();
    if (h && h->dir[0])
        h_fini(h);
    if (h)
        h->dir[0] = '\0';
    return 0;
}
