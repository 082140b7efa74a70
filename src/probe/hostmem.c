/* probe/hostmem.c - /proc/meminfo, /proc/swaps and the cgroup memory limit. */
#include "probe/hostmem.h"
#include "probe/hostram.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arith/cgroup.h"
#include "arith/pinned.h"
#include "base/bytes.h"
#include "comem/common.h"
#include "os/env.h"

#define MAX_DIRS 64

static void join(char *out, size_t len, const char *root, const char *path)
{
    snprintf(out, len, "%s%s", root ? root : "", path);
}

/* Reads a whole small file, stripped of surrounding whitespace. */
static bool read_text(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\t' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    char *s = buf;
    while (*s == ' ' || *s == '\t' || *s == '\n')
        s++;
    if (s != buf)
        memmove(buf, s, strlen(s) + 1);
    return true;
}

/* Python int(text) for a whole-file integer: optional sign, digits, nothing else. */
static bool parse_int(const char *s, int64_t *out)
{
    if (!*s)
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end != '\0')
        return false;
    *out = v;
    return true;
}

static bool read_int(const char *path, int64_t *out)
{
    char buf[64];
    return read_text(path, buf, sizeof buf) && parse_int(buf, out);
}

/* One "key value" line from a memory.stat style file; missing gives false. */
static bool read_stat_field(const char *path, const char *field, int64_t *out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[256];
    bool found = false;
    size_t flen = strlen(field);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, field, flen) == 0 && line[flen] == ' ') {
            char *v = line + flen + 1;
            v[strcspn(v, "\n")] = '\0';
            found = parse_int(v, out);
            break;
        }
    }
    fclose(f);
    return found;
}

static int read_meminfo(const char *root, comem_hostmem *out)
{
    char path[PATH_MAX];
    join(path, sizeof path, root, "/proc/meminfo");
    FILE *f = fopen(path, "r");
    if (!f)
        return COMEM_EIO;
    char line[256];
    bool have_total = false, have_avail = false;
    while (fgets(line, sizeof line, f)) {
        long long kib;
        if (sscanf(line, "MemTotal: %lld kB", &kib) == 1) {
            out->mem_total = comem_mul(kib, 1024);
            have_total = true;
        } else if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1) {
            out->mem_available = comem_mul(kib, 1024);
            have_avail = true;
        } else if (sscanf(line, "SwapTotal: %lld kB", &kib) == 1) {
            out->swap_total = comem_mul(kib, 1024);
        }
    }
    fclose(f);
    if (!have_total)
        return COMEM_EIO;
    if (!have_avail)
        out->mem_available = out->mem_total; /* pre-3.14 kernels: no better estimate */
    return COMEM_OK;
}

static void read_swaps(const char *root, comem_hostmem *out)
{
    char path[PATH_MAX];
    join(path, sizeof path, root, "/proc/swaps");
    FILE *f = fopen(path, "r");
    out->disk_swap = 0;
    if (!f)
        return;
    char line[512];
    if (!fgets(line, sizeof line, f)) { /* header */
        fclose(f);
        return;
    }
    comem_swap_entry rows[32];
    char names[32][256];
    size_t n = 0;
    while (n < 32 && fgets(line, sizeof line, f)) {
        char file[256], type[64];
        long long size;
        if (sscanf(line, "%255s %63s %lld", file, type, &size) != 3)
            continue;
        /* Resolve links (by-id names) the way os.path.realpath does, inside root. */
        char full[PATH_MAX], resolved[PATH_MAX];
        join(full, sizeof full, root, file);
        const char *use = realpath(full, resolved) ? resolved : full;
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof tmp, "%s", use);
        snprintf(names[n], sizeof names[n], "%s", basename(tmp));
        rows[n] = (comem_swap_entry){.basename = names[n], .size_kib = size};
        n++;
    }
    fclose(f);
    out->disk_swap = comem_disk_swap_total(rows, n);
}

static bool dir_listed(char dirs[][PATH_MAX], size_t n, const char *d)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(dirs[i], d) == 0)
            return true;
    return false;
}

/* Adds dir and its parents up to mount_root (both relative to the real root). */
static void add_ancestors(char dirs[][PATH_MAX], size_t *n, const char *mount_root, const char *dir)
{
    char cur[PATH_MAX];
    snprintf(cur, sizeof cur, "%s", dir);
    size_t rlen = strlen(mount_root);
    for (;;) {
        size_t len = strlen(cur);
        while (len > 1 && cur[len - 1] == '/')
            cur[--len] = '\0';
        if (*n < MAX_DIRS && !dir_listed(dirs, *n, cur))
            snprintf(dirs[(*n)++], PATH_MAX, "%s", cur);
        if (strcmp(cur, mount_root) == 0)
            break;
        char *slash = strrchr(cur, '/');
        if (!slash || slash == cur)
            break;
        *slash = '\0';
        if (strncmp(cur, mount_root, rlen) != 0)
            break;
    }
}

static size_t hierarchy_dirs(const char *root, char dirs[][PATH_MAX])
{
    static const char *v2_root = "/sys/fs/cgroup";
    static const char *v1_root = "/sys/fs/cgroup/memory";
    size_t n = 0;
    char path[PATH_MAX];
    join(path, sizeof path, root, "/proc/self/cgroup");
    FILE *f = fopen(path, "r");
    if (f) {
        char line[1024];
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\n")] = '\0';
            char *c1 = strchr(line, ':');
            if (!c1)
                continue;
            char *c2 = strchr(c1 + 1, ':');
            if (!c2)
                continue;
            *c2 = '\0';
            const char *controllers = c1 + 1, *cpath = c2 + 1;
            while (*cpath == '/')
                cpath++;
            const char *mount;
            if (*controllers == '\0') {
                mount = v2_root;
            } else {
                bool memory = false;
                char ctl[256];
                snprintf(ctl, sizeof ctl, "%s", controllers);
                for (char *save, *t = strtok_r(ctl, ",", &save); t; t = strtok_r(NULL, ",", &save))
                    memory |= strcmp(t, "memory") == 0;
                if (!memory)
                    continue;
                mount = v1_root;
            }
            char own[PATH_MAX];
            if (*cpath)
                snprintf(own, sizeof own, "%s/%s", mount, cpath);
            else
                snprintf(own, sizeof own, "%s", mount);
            add_ancestors(dirs, &n, mount, own);
        }
        fclose(f);
    }
    /* /proc/self/cgroup unreadable or without memory: the well-known roots still work. */
    if (n < MAX_DIRS && !dir_listed(dirs, n, v2_root))
        snprintf(dirs[n++], PATH_MAX, "%s", v2_root);
    if (n < MAX_DIRS && !dir_listed(dirs, n, v1_root))
        snprintf(dirs[n++], PATH_MAX, "%s", v1_root);
    return n;
}

static bool limit_from_dir(const char *root, const char *dir, int64_t *limit)
{
    char path[PATH_MAX], buf[64];
    snprintf(path, sizeof path, "%s%s/memory.max", root, dir);
    if (read_text(path, buf, sizeof buf) && strcmp(buf, "max") != 0) {
        int64_t v;
        if (parse_int(buf, &v) && v >= 0) {
            *limit = v;
            return true;
        }
    }
    snprintf(path, sizeof path, "%s%s/memory.limit_in_bytes", root, dir);
    int64_t v;
    if (read_int(path, &v) && v >= 0 && v < ((int64_t)1 << 62)) {
        *limit = v;
        return true;
    }
    return false;
}

static bool usage_from_dir(const char *root, const char *dir, int64_t *usage)
{
    char path[PATH_MAX], stat[PATH_MAX];
    int64_t current, inactive = 0;
    snprintf(stat, sizeof stat, "%s%s/memory.stat", root, dir);
    snprintf(path, sizeof path, "%s%s/memory.current", root, dir);
    if (read_int(path, &current)) {
        if (!read_stat_field(stat, "inactive_file", &inactive))
            inactive = 0;
        *usage = comem_cgroup_usage(current, inactive);
        return true;
    }
    snprintf(path, sizeof path, "%s%s/memory.usage_in_bytes", root, dir);
    if (read_int(path, &current)) {
        if (!read_stat_field(stat, "total_inactive_file", &inactive))
            inactive = 0;
        *usage = comem_cgroup_usage(current, inactive);
        return true;
    }
    return false;
}

const char *comem_hostmem_root(const char *root)
{
    if (root)
        return root;
    const char *env = comem_env("COMEM_HOSTMEM_ROOT");
    return env ? env : "";
}

int comem_hostmem_read(const char *root, comem_hostmem *out)
{
    root = comem_hostmem_root(root);
    memset(out, 0, sizeof *out);
    int rc = read_meminfo(root, out);
    if (rc != COMEM_OK)
        return rc;
    read_swaps(root, out);

    char(*d)[PATH_MAX] = malloc(MAX_DIRS * sizeof *d); /* 256 KiB: too big for a stack frame */
    if (!d)
        return COMEM_ENOMEM;
    size_t n = hierarchy_dirs(root, d);
    comem_cgroup_in in = {.host_total = out->mem_total, .host_available = out->mem_available};
    size_t where = n;
    for (size_t i = 0; i < n; i++) {
        int64_t lim;
        if (limit_from_dir(root, d[i], &lim) && (!in.limit_found || lim < in.limit)) {
            in.limit_found = true;
            in.limit = lim;
            where = i;
        }
    }
    comem_cgroup_out co;
    if (in.limit_found && in.limit < in.host_total) {
        in.usage_known = usage_from_dir(root, d[where], &in.usage);
        snprintf(out->cgroup_dir, sizeof out->cgroup_dir, "%s", d[where]);
    }
    free(d);
    comem_cgroup_clamp(&in, &co);
    out->cgroup_limited = co.limited;
    out->cgroup_limit = co.limit;
    out->cgroup_usage_known = co.limited && in.usage_known;
    out->cgroup_usage = out->cgroup_usage_known ? in.usage : -1;
    out->total = co.total;
    out->available = co.available;
    return COMEM_OK;
}

/* probe/hostram.h: a process's resident set from /proc (the machine's, or a stand-in tree's). */
int comem_hostram_rss(const char *root, int32_t pid, int64_t *bytes)
{
    char path[4200], line[256];
    snprintf(path, sizeof path, "%s/proc/%d/status", comem_hostmem_root(root), (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return COMEM_ENOENT;
    int rc = COMEM_ENOENT;
    while (fgets(line, sizeof line, f)) {
        long long kb;
        if (sscanf(line, "VmRSS: %lld kB", &kb) == 1 && kb >= 0) {
            *bytes = comem_mul(kb, 1024);
            rc = COMEM_OK;
            break;
        }
    }
    fclose(f);
    return rc; /* a zombie or a kernel thread has no VmRSS line: nothing resident to count */
}
