/*
 * tools/preload/link.c - the preload library's side of the ledger: the policy,
 * the coordinator connection, one raw holder per device, admissions, and the
 * table of live allocations whose bytes the holders report.
 *
 * Everything is lazy: the first allocation connects (a program that never
 * allocates on a GPU never talks to the coordinator). Reports go out from a
 * thread of their own, so a CUDA call waits on the coordinator only for an
 * admission, which is the point of asking. And only for one it is working on:
 * a coordinator that neither answers an admission nor acknowledges it (it
 * does at once when it must ask other processes first, which takes seconds)
 * within COMEM_PRELOAD_ACK_MS is stopped or stuck; the allocation goes ahead
 * unasked, said once.
 *
 * That bound is every wait an allocation makes, not the admission's alone
 * (issue 40 item 8: an allocation booked in the session's stock, with no round
 * trip to see the coordinator stopped, then waited the client's whole 10 s for
 * the reply to its report). The client's default wait is set to it, so the
 * report and the grant's end that follow an allocation, and a holder's
 * registration, wait at most that long (what they send is read when the
 * coordinator runs again; the reply only confirms it); only an acknowledged
 * admission waits longer (DECIDE_MS). The first connection is made on a
 * thread of its own, which the first allocation waits for at most that long:
 * until it is made, allocations go ahead unattributed.
 */
#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/size.h"
#include "comem/comem.h"
#include "comem/common.h"
#include "client/client_internal.h" /* comem_admit_acked */
#include "preload.h"

#define DEFAULT_MIN ((int64_t)64 << 20)
#define DEFAULT_ACK_MS 200 /* the coordinator acknowledges within one turn of its loop: microseconds */
#define MAX_ACK_MS 60000
/* An acknowledged admission's whole wait: the coordinator is asking other processes to release,
   which takes seconds (the library's own default wait). */
#define DECIDE_MS 10000

static _Thread_local int t_inside;

bool preload_inside(void) { return t_inside > 0; }
void preload_enter(void) { t_inside++; }
void preload_leave(void) { t_inside--; }

/* ---- saying things once ---- */

#define SAID_MAX 32
static pthread_mutex_t g_said_lock = PTHREAD_MUTEX_INITIALIZER;
static const void *g_said[SAID_MAX];
static int g_n_said;

void preload_say_once(const void *key, const char *fmt, ...)
{
    pthread_mutex_lock(&g_said_lock);
    for (int i = 0; i < g_n_said; i++) {
        if (g_said[i] == key) {
            pthread_mutex_unlock(&g_said_lock);
            return;
        }
    }
    if (g_n_said < SAID_MAX)
        g_said[g_n_said++] = key;
    pthread_mutex_unlock(&g_said_lock);
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    comem_warn("preload: %s", line);
}

/* ---- configuration ---- */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* the table, the connection, the holders */
static pthread_cond_t g_opened; /* the first connection was made or failed (CLOCK_MONOTONIC; read_config) */

static preload_policy g_policy;
static int64_t g_min = DEFAULT_MIN;
static int g_ack_ms = DEFAULT_ACK_MS;
static pthread_once_t g_config_once = PTHREAD_ONCE_INIT;

/* A forked child has the parent's client but none of its threads or its connection: step aside. */
static void before_fork(void) { pthread_mutex_lock(&g_lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&g_lock); }
static void after_fork_child(void);

static void read_config(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g_opened, &ca);
    pthread_condattr_destroy(&ca);
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    if (!getenv("COMEM_LOG"))
        comem_log_set_level(COMEM_LOG_WARN); /* a program that did not ask for comem's lines gets only warnings */
    const char *p = getenv("COMEM_PRELOAD_POLICY");
    g_policy = PRELOAD_OBSERVE;
    if (p && !strcmp(p, "enforce"))
        g_policy = PRELOAD_ENFORCE;
    else if (p && !strcmp(p, "off"))
        g_policy = PRELOAD_OFF;
    else if (p && *p && strcmp(p, "observe"))
        preload_say_once(&g_policy, "COMEM_PRELOAD_POLICY='%s' is not observe, enforce or off; observing", p);
    const char *m = getenv("COMEM_PRELOAD_MIN");
    if (m && *m) {
        double v;
        char err[128];
        if (comem_parse_size(m, &v, err, sizeof err) == COMEM_OK)
            g_min = (int64_t)v;
        else
            preload_say_once(&g_min, "COMEM_PRELOAD_MIN: %s; asking before allocations of 64 MiB and more", err);
    }
    const char *a = getenv("COMEM_PRELOAD_ACK_MS");
    if (a && *a) {
        char *end;
        long v = strtol(a, &end, 10);
        if (*end || v < 1 || v > MAX_ACK_MS)
            preload_say_once(&g_ack_ms, "COMEM_PRELOAD_ACK_MS='%s' is not a number of milliseconds from 1 to %d; "
                                        "waiting %d ms for the coordinator's acknowledgement", a, MAX_ACK_MS,
                             DEFAULT_ACK_MS);
        else
            g_ack_ms = (int)v;
    }
}

preload_policy preload_policy_now(void)
{
    pthread_once(&g_config_once, read_config);
    return g_policy;
}

/* ---- the allocation table: key -> bytes, device ---- */

typedef struct slot {
    uint64_t key; /* 0: empty; UINT64_MAX: deleted */
    int64_t bytes;
    int device;
} slot;

static pthread_cond_t g_wake = PTHREAD_COND_INITIALIZER;
static slot *g_slots;
static size_t g_cap, g_used; /* used counts deleted slots too, until a rehash */

static size_t hash(uint64_t k) { return (size_t)((k >> 4) * 0x9e3779b97f4a7c15ull); }

static slot *find(uint64_t key)
{
    if (!g_cap)
        return NULL;
    for (size_t i = hash(key) & (g_cap - 1), n = 0; n < g_cap; i = (i + 1) & (g_cap - 1), n++) {
        if (g_slots[i].key == key)
            return &g_slots[i];
        if (g_slots[i].key == 0)
            return NULL;
    }
    return NULL;
}

static bool grow(void)
{
    size_t cap = g_cap ? g_cap * 2 : 1024;
    slot *s = calloc(cap, sizeof *s);
    if (!s)
        return false;
    size_t used = 0;
    for (size_t i = 0; i < g_cap; i++) {
        uint64_t k = g_slots[i].key;
        if (k == 0 || k == UINT64_MAX)
            continue;
        size_t j = hash(k) & (cap - 1);
        while (s[j].key)
            j = (j + 1) & (cap - 1);
        s[j] = g_slots[i];
        used++;
    }
    free(g_slots);
    g_slots = s;
    g_cap = cap;
    g_used = used;
    return true;
}

static bool insert(uint64_t key, int64_t bytes, int device)
{
    if ((g_used + 1) * 4 >= g_cap * 3 && !grow())
        return false;
    size_t i = hash(key) & (g_cap - 1);
    while (g_slots[i].key && g_slots[i].key != UINT64_MAX && g_slots[i].key != key)
        i = (i + 1) & (g_cap - 1);
    if (g_slots[i].key == 0)
        g_used++;
    g_slots[i] = (slot){key, bytes, device};
    return true;
}

/* ---- the connection and the holders ---- */

static comem_client *g_client;
static bool g_tried;
static bool g_opening; /* the opener thread is connecting */
static int g_n_devices;
static char g_uuids[COMEM_MAX_DEVICES][80];
static uint64_t g_holder[COMEM_MAX_DEVICES];
static int64_t g_bytes[COMEM_MAX_DEVICES];
static bool g_dirty[COMEM_MAX_DEVICES];
static pthread_t g_reporter;

/* The coordinator's devices, by UUID, from its status: how many (0 when it does not say). */
static int read_devices(comem_client *c, char uuids[COMEM_MAX_DEVICES][80])
{
    char *text = NULL;
    if (comem_status_json(c, &text) != COMEM_OK || !text)
        return 0;
    json_object *root = json_tokener_parse(text), *devs;
    comem_free(text);
    int n_devices = 0;
    if (root && json_object_object_get_ex(root, "devices", &devs)) {
        size_t n = json_object_array_length(devs);
        for (size_t i = 0; i < n && i < COMEM_MAX_DEVICES; i++) {
            json_object *u;
            if (json_object_object_get_ex(json_object_array_get_idx(devs, i), "uuid", &u))
                snprintf(uuids[i], 80, "%s", json_object_get_string(u));
        }
        n_devices = (int)(n < COMEM_MAX_DEVICES ? n : COMEM_MAX_DEVICES);
    }
    json_object_put(root);
    return n_devices;
}

static void *reporter(void *arg)
{
    (void)arg;
    preload_enter(); /* whatever comem does on this thread is comem's own */
    pthread_mutex_lock(&g_lock);
    for (;;) {
        int dev = -1;
        for (int d = 0; d < COMEM_MAX_DEVICES && dev < 0; d++)
            if (g_dirty[d])
                dev = d;
        if (dev < 0) {
            pthread_cond_wait(&g_wake, &g_lock);
            continue;
        }
        g_dirty[dev] = false;
        uint64_t h = g_holder[dev];
        int64_t bytes = g_bytes[dev];
        pthread_mutex_unlock(&g_lock);
        if (h)
            (void)comem_holder_report(g_client, h, -1, bytes); /* a newer report supersedes a lost one */
        pthread_mutex_lock(&g_lock);
    }
    return NULL;
}

static void program_name(char *buf, size_t len)
{
    snprintf(buf, len, "cuda-program");
    FILE *f = fopen("/proc/self/comm", "r");
    if (!f)
        return;
    if (fgets(buf, (int)len, f))
        buf[strcspn(buf, "\n")] = 0;
    fclose(f);
}

/*
 * The first connection, on a thread of its own: its HELLO, and the status read for the devices, wait
 * the client's 10 s on a coordinator that accepts but does not answer (stopped), and no allocation
 * waits that long (connect_once). Once made, the client's default wait becomes the acknowledgement's
 * bound (above). Whatever the outcome, g_opening goes false and the waiters are woken.
 */
static void *opener(void *arg)
{
    (void)arg;
    preload_enter(); /* whatever comem does on this thread is comem's own */
    char name[64];
    program_name(name, sizeof name);
    comem_client *c = NULL;
    static char uuids[COMEM_MAX_DEVICES][80]; /* 1.3 KiB: off this thread's stack */
    int n_devices = 0;
    int rc = comem_client_open(NULL, COMEM_CLIENT_WORKER, name, -1, COMEM_OPEN_NO_LOCAL, &c);
    if (rc == COMEM_OK) {
        n_devices = read_devices(c, uuids);
        comem_client_set_timeout(c, g_ack_ms);
    }
    pthread_mutex_lock(&g_lock);
    g_opening = false;
    if (rc == COMEM_OK) {
        g_client = c;
        memcpy(g_uuids, uuids, sizeof g_uuids);
        g_n_devices = n_devices;
        if (pthread_create(&g_reporter, NULL, reporter, NULL) == 0)
            pthread_detach(g_reporter);
        else
            preload_say_once(&g_reporter, "cannot start the reporting thread: allocations are not reported");
    } else {
        preload_say_once(&g_client, "no coordinator answers (%s): allocations are not attributed or asked for; "
                                    "the program runs as without comem", comem_status_str(rc));
    }
    pthread_cond_broadcast(&g_opened);
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

/*
 * Connects once (g_lock held); false when comem is out of reach now: the caller steps aside. The first
 * call starts the opener; it and every call while the opener is still at work wait for it at most
 * the acknowledgement's bound, as an admission waits for a coordinator that does not answer.
 */
static bool connect_once(void)
{
    if (g_client)
        return true;
    if (!g_tried) {
        g_tried = true;
        pthread_t t;
        g_opening = pthread_create(&t, NULL, opener, NULL) == 0;
        if (!g_opening) {
            preload_say_once(&g_opening, "cannot start the thread that connects to the coordinator: allocations "
                                         "are not attributed or asked for");
            return false;
        }
        pthread_detach(t);
    }
    if (!g_opening)
        return g_client != NULL;
    int64_t deadline = comem_add(comem_now_ns(), (int64_t)g_ack_ms * 1000000);
    struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000), .tv_nsec = (long)(deadline % 1000000000)};
    while (g_opening && pthread_cond_timedwait(&g_opened, &g_lock, &ts) != ETIMEDOUT)
        ;
    if (g_opening) {
        comem_info("preload: the coordinator did not answer within %d ms; this allocation is not attributed",
                   g_ack_ms);
        static int first_said;
        preload_say_once(&first_said, "the coordinator did not answer within %d ms as this program first "
                                      "allocated (stopped or stuck?): allocations go ahead unattributed and "
                                      "unasked until the connection is made (COMEM_PRELOAD_ACK_MS)", g_ack_ms);
    }
    return g_client != NULL;
}

/* The coordinator's index for a CUDA ordinal of this process (-1: not attributed), found once per
   ordinal: the lookup asks the driver, and it stands before every allocation (g_lock held). */
static int g_device_of[COMEM_MAX_DEVICES]; /* 0: not looked up yet, else the index + 1 (0 for -1) */
static int lookup_device(int ordinal);

static int device_of(int ordinal)
{
    if (ordinal < 0 || ordinal >= COMEM_MAX_DEVICES)
        return lookup_device(ordinal);
    if (!g_device_of[ordinal]) {
        int d = lookup_device(ordinal);
        g_device_of[ordinal] = d >= 0 ? d + 1 : -1;
    }
    return g_device_of[ordinal] > 0 ? g_device_of[ordinal] - 1 : -1;
}

static int lookup_device(int ordinal)
{
    char uuid[80] = "";
    if (preload_ordinal_uuid(ordinal, uuid, sizeof uuid) == 0) {
        for (int d = 0; d < g_n_devices; d++)
            if (!strcmp(g_uuids[d], uuid))
                return d;
    }
    if (ordinal >= 0 && ordinal < g_n_devices) {
        preload_say_once(&g_uuids, "the coordinator reads no device with UUID %s (CUDA device %d here): "
                                   "charging its device %d", uuid[0] ? uuid : "(unknown)", ordinal, ordinal);
        return ordinal;
    }
    preload_say_once(&g_n_devices, "CUDA device %d is not one the coordinator reads: its allocations are not "
                                   "attributed", ordinal);
    return -1;
}

/* The raw holder for device d, registered on first use (g_lock held). */
static uint64_t holder_of(int d)
{
    if (!g_holder[d] && comem_holder_add(g_client, "preload", d, COMEM_KIND_RAW, 0, NULL, NULL, &g_holder[d]) !=
                            COMEM_OK)
        g_holder[d] = 0;
    return g_holder[d];
}

static void after_fork_child(void)
{
    g_client = NULL; /* its threads did not come along: this process is not in the ledger */
    g_tried = true;
    g_opening = false; /* nor did the opener */
    memset(g_holder, 0, sizeof g_holder);
    memset(g_device_of, 0, sizeof g_device_of);
    pthread_mutex_unlock(&g_lock);
    preload_say_once(&g_tried, "a forked child is not attributed (its parent's connection stays the parent's)");
}

bool preload_before(int ordinal, size_t bytes, const char *what, preload_ticket *t)
{
    *t = (preload_ticket){.device = -1};
    if (preload_policy_now() == PRELOAD_OFF || preload_inside())
        return true;
    preload_enter();
    pthread_mutex_lock(&g_lock);
    bool up = connect_once();
    int d = up ? device_of(ordinal) : -1;
    uint64_t h = d >= 0 ? holder_of(d) : 0;
    pthread_mutex_unlock(&g_lock);
    if (d < 0) {
        preload_leave();
        return true;
    }
    t->attribute = true;
    t->device = d;
    bool allow = true;
    if ((int64_t)bytes >= g_min) {
        int64_t short_by = 0;
        bool unanswered = false;
        int rc = comem_admit_acked(g_client, d, h, (int64_t)bytes, g_ack_ms, DECIDE_MS, &t->grant, &short_by,
                                   &unanswered);
        char b[32] = "", s[32] = "";
        if (rc == COMEM_ENOSPC || unanswered) { /* the figures only a refusal or a local decision prints */
            comem_format_bytes((int64_t)bytes, b, sizeof b);
            comem_format_bytes(short_by, s, sizeof s);
        }
        if (unanswered) {
            /* Stopped (SIGSTOP), stuck or overloaded: deciding here costs this allocation ack_ms, not the
               client's whole timeout. The driver's own answer is the local decision. */
            comem_info("preload: %s of %s on device %d: the coordinator did not answer within %d ms; allowed unasked",
                       what, b, d, g_ack_ms);
            static int unanswered_said;
            preload_say_once(&unanswered_said, "the coordinator did not answer or acknowledge an admission within "
                                               "%d ms (stopped or stuck?): %s of %s goes ahead unasked, decided "
                                               "locally, as each allocation does while it does not answer "
                                               "(COMEM_PRELOAD_ACK_MS)", g_ack_ms, what, b);
        } else if (rc == COMEM_ENOSPC && g_policy == PRELOAD_ENFORCE) {
            comem_info("preload: %s of %s on device %d refused by the coordinator (short by %s): out of memory", what,
                       b, d, s);
            preload_say_once(&g_policy, "%s of %s refused (short by %s): answered CUDA_ERROR_OUT_OF_MEMORY "
                                        "(COMEM_PRELOAD_POLICY=enforce)", what, b, s);
            allow = false;
        } else if (rc == COMEM_ENOSPC) {
            comem_info("preload: %s of %s on device %d refused by the coordinator (short by %s); allowed (observe)",
                       what, b, d, s);
            static int observed_refusal; /* its own key: not the one the COMEM_PRELOAD_MIN warning uses */
            preload_say_once(&observed_refusal, "%s of %s refused by the coordinator (short by %s); allowed, as "
                                     "COMEM_PRELOAD_POLICY=observe says (enforce answers out of memory)", what, b, s);
        } else if (rc != COMEM_OK) {
            preload_say_once(&g_bytes, "admission failed (%s): allocations go ahead unasked", comem_status_str(rc));
        }
    }
    preload_leave();
    return allow;
}

void preload_after(const preload_ticket *t, uint64_t key, size_t bytes)
{
    if (!t->attribute)
        return;
    preload_enter();
    pthread_mutex_lock(&g_lock);
    if (key) {
        slot *old = find(key);
        if (old) /* the driver handed out an address we thought live: its old bytes are gone */
            g_bytes[old->device] = comem_sub(g_bytes[old->device], old->bytes);
        if (insert(key, (int64_t)bytes, t->device))
            g_bytes[t->device] = comem_add(g_bytes[t->device], (int64_t)bytes);
        else
            preload_say_once(&g_slots, "out of memory for the allocation table: some allocations are not attributed");
        g_dirty[t->device] = true;
    }
    uint64_t h = g_holder[t->device];
    int64_t now = g_bytes[t->device];
    pthread_mutex_unlock(&g_lock);
    if (t->grant) {
        /* The bytes are the holder's before the grant that booked them goes: never counted by neither.
           The report waits at most the acknowledgement's bound: a grant booked in the session's stock
           took no round trip, so this is where a stopped coordinator is met. Sent, it is read in order
           with the grant's end when the coordinator runs again. */
        if (key && h && comem_holder_report(g_client, h, -1, now) == COMEM_ETIMEDOUT) {
            comem_info("preload: the coordinator did not confirm the report of an allocation within %d ms; "
                       "allowed, as granted", g_ack_ms);
            static int report_said;
            preload_say_once(&report_said, "the coordinator did not confirm the report of an allocation it "
                                           "granted within %d ms (stopped or stuck?): the program goes on; "
                                           "the report is read when it runs again (COMEM_PRELOAD_ACK_MS)",
                             g_ack_ms);
        }
        (void)comem_grant_done(g_client, t->grant, 0, 0);
    } else if (key) {
        pthread_cond_signal(&g_wake);
    }
    preload_leave();
}

void preload_freed(uint64_t key)
{
    if (!key || preload_inside())
        return;
    pthread_mutex_lock(&g_lock);
    slot *s = find(key);
    if (s) {
        g_bytes[s->device] = comem_sub(g_bytes[s->device], s->bytes);
        g_dirty[s->device] = true;
        s->key = UINT64_MAX;
        pthread_cond_signal(&g_wake);
    }
    pthread_mutex_unlock(&g_lock);
}
