/*
 * tests/unit/test_client.c - the client library against a scripted mock
 * coordinator.
 *
 * The mock is a thread of this test listening on a socket in a temporary
 * directory. It speaks the protocol with comem_wire_*, answers each request
 * the way its script says (ids from a base, grants or refusals, silence, a
 * dropped connection, status in chunks), and logs every frame it receives so
 * the test can assert on what the client sent. The test's main thread makes
 * the client calls and sends asks through the mock. Every wait is bounded:
 * the mock polls with short timeouts, every expectation waits at most a few
 * seconds, and the client's calls run with short timeouts, so a failure can
 * never hang ctest.
 */
#include "unit/cmocka_all.h"
#include "unit/tmpdir.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "arith/cross_reserve.h"
#include "base/bytes.h"
#include "base/log.h"
#include "comem/calc.h"
#include "comem/comem.h"
#include "wire/wire.h"

#define WAIT_MS 5000 /* the longest any expectation waits */

/* ---------------------------------------------------------------- the mock */

typedef struct logged {
    comem_msg msg;
    uint64_t replied_id; /* the id an ID_REPLY or a grant carried back */
    int conn;            /* which accepted connection it came on (1, 2, ...) */
} logged;

enum { CMD_NONE, CMD_DROP, CMD_DOWN, CMD_UP };

typedef struct mock {
    pthread_t thread;
    bool running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int lfd, fd;
    int conn;
    int eofs;
    bool stop;
    int cmd;
    /* the script (under mu) */
    int hello_status;
    bool silent;
    bool close_on_request;
    int refuse_adds; /* answer adds with REPLY(this status) */
    uint64_t next_holder, next_entry, next_grant;
    bool admit_grant;
    int64_t admit_short;
    int64_t pressure_freed;
    bool pin_grant;
    const char *status_text;
    size_t status_chunk;
    /* what came in */
    logged **log;
    size_t n_log, cap_log;
    /* the thread's own */
    uint8_t *rbuf;
    size_t rlen;
    comem_msg in, out;
} mock;

static char g_dir[128];
static char g_sock[256];
static mock *g_mock;

static int mock_listen_fd(const char *path)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 8) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Under mu: writes one frame to the client (dropped silently when there is none). */
static void mock_write(mock *m, const comem_msg *msg)
{
    uint8_t *buf = malloc(COMEM_WIRE_MAX_FRAME);
    int n = comem_wire_encode(msg, buf, COMEM_WIRE_MAX_FRAME);
    if (n > 0 && m->fd >= 0) {
        size_t off = 0;
        while (off < (size_t)n) {
            ssize_t w = send(m->fd, buf + off, (size_t)n - off, MSG_NOSIGNAL);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
    }
    if (n <= 0)
        fprintf(stderr, "mock: cannot encode %s: %d\n", comem_wire_type_name(msg->type), n);
    free(buf);
}

static void mock_close_conn(mock *m)
{
    if (m->fd >= 0) {
        close(m->fd);
        m->fd = -1;
    }
    m->rlen = 0;
}

static void reply_status(mock *m, uint32_t req, int status, const char *text)
{
    memset(&m->out, 0, sizeof m->out);
    m->out.type = COMEM_MSG_REPLY;
    m->out.request_id = req;
    m->out.u.reply.status = status;
    snprintf(m->out.u.reply.message, sizeof m->out.u.reply.message, "%s", text);
    mock_write(m, &m->out);
}

/* Under mu: answers one request the way the script says. */
static void mock_answer(mock *m, logged *lg)
{
    const comem_msg *in = &lg->msg;
    comem_msg *o = &m->out;
    memset(o, 0, sizeof *o);
    o->request_id = in->request_id;
    if (in->type == COMEM_MSG_HELLO) {
        if (m->hello_status) {
            reply_status(m, in->request_id, m->hello_status, "bad token");
            return;
        }
        o->type = COMEM_MSG_HELLO_REPLY;
        o->u.hello_reply.session_id = (uint64_t)m->conn;
        o->u.hello_reply.coord_pid = (uint32_t)getpid();
        o->u.hello_reply.proto_version = COMEM_WIRE_VERSION;
        o->u.hello_reply.n_devices = 1;
        mock_write(m, o);
        return;
    }
    if (in->type == COMEM_MSG_RECEIPT || in->type == COMEM_MSG_TOUCH || m->silent)
        return; /* not replied to, as by the coordinator */
    if (m->close_on_request) {
        m->close_on_request = false;
        mock_close_conn(m);
        return;
    }
    switch (in->type) {
    case COMEM_MSG_HOLDER_ADD:
    case COMEM_MSG_ENTRY_ADD:
        if (m->refuse_adds) {
            reply_status(m, in->request_id, m->refuse_adds, "refused by the script");
            return;
        }
        o->type = COMEM_MSG_ID_REPLY;
        o->u.id.id = in->type == COMEM_MSG_HOLDER_ADD ? m->next_holder++ : m->next_entry++;
        lg->replied_id = o->u.id.id;
        break;
    case COMEM_MSG_ADMIT:
        o->type = COMEM_MSG_ADMIT_REPLY;
        o->u.admit_reply.granted = m->admit_grant;
        o->u.admit_reply.grant_id = m->admit_grant ? m->next_grant++ : 0;
        lg->replied_id = o->u.admit_reply.grant_id;
        o->u.admit_reply.bytes = in->u.admit.weights;
        o->u.admit_reply.need = in->u.admit.weights + 1000;
        o->u.admit_reply.free_before = 111;
        o->u.admit_reply.free_after = 222;
        o->u.admit_reply.short_by = m->admit_grant ? 0 : m->admit_short;
        o->u.admit_reply.freed = 333;
        o->u.admit_reply.reserve = 444;
        o->u.admit_reply.pager_headroom = 555;
        o->u.admit_reply.n_asked = 2;
        o->u.admit_reply.n_busy = 1;
        o->u.admit_reply.n_ids = 2; /* one holder asked in two rounds */
        o->u.admit_reply.asked[0] = o->u.admit_reply.asked[1] = 4321;
        break;
    case COMEM_MSG_RECLAIM: /* a grant of the previous coordinator, booked again under a new id */
        o->type = COMEM_MSG_ID_REPLY;
        o->u.id.id = m->next_grant++;
        lg->replied_id = o->u.id.id;
        break;
    case COMEM_MSG_PRESSURE:
        o->type = COMEM_MSG_PRESSURE_REPLY;
        o->u.pressure_reply.freed = m->pressure_freed;
        o->u.pressure_reply.n_asked = 1;
        break;
    case COMEM_MSG_PIN_ACQUIRE:
    case COMEM_MSG_PIN_RELEASE:
        o->type = COMEM_MSG_PIN_REPLY;
        o->u.pin_reply.granted = in->type == COMEM_MSG_PIN_RELEASE || m->pin_grant;
        o->u.pin_reply.max_pinned = COMEM_GIB * 10;
        o->u.pin_reply.shortfall = o->u.pin_reply.granted ? 0 : 777;
        break;
    case COMEM_MSG_RESERVE:
        o->type = COMEM_MSG_RESERVE_REPLY;
        o->u.reserve_reply.published = 3 * COMEM_GIB;
        o->u.reserve_reply.base = COMEM_GIB;
        o->u.reserve_reply.for_requester = 2 * COMEM_GIB;
        o->u.reserve_reply.pager_headroom = 5 * COMEM_MIB;
        break;
    case COMEM_MSG_STATUS: {
        const char *t = m->status_text ? m->status_text : "{}";
        size_t len = strlen(t), chunk = m->status_chunk ? m->status_chunk : COMEM_WIRE_CHUNK_MAX;
        size_t off = 0;
        do {
            size_t n = len - off < chunk ? len - off : chunk;
            o->type = COMEM_MSG_STATUS_REPLY;
            o->u.status_reply.offset = (uint32_t)off;
            o->u.status_reply.total = (uint32_t)len;
            o->u.status_reply.len = (uint32_t)n;
            o->u.status_reply.text = (const uint8_t *)t + off;
            mock_write(m, o);
            off += n;
        } while (off < len);
        return;
    }
    default:
        reply_status(m, in->request_id, COMEM_OK, "");
        return;
    }
    mock_write(m, o);
}

/* Under mu: logs and answers every whole frame in the buffer. */
static void mock_frames(mock *m)
{
    size_t pos = 0;
    while (m->rlen - pos >= COMEM_WIRE_HEADER_SIZE) {
        comem_wire_header h;
        if (comem_wire_decode_header(m->rbuf + pos, m->rlen - pos, &h) != 0) {
            fprintf(stderr, "mock: bad header\n");
            mock_close_conn(m);
            return;
        }
        if (m->rlen - pos < COMEM_WIRE_HEADER_SIZE + h.length)
            break;
        logged *lg = calloc(1, sizeof *lg);
        if (comem_wire_decode(&h, m->rbuf + pos + COMEM_WIRE_HEADER_SIZE, &lg->msg) != 0) {
            fprintf(stderr, "mock: bad %s frame\n", comem_wire_type_name(h.type));
            free(lg);
            mock_close_conn(m);
            return;
        }
        pos += COMEM_WIRE_HEADER_SIZE + h.length;
        lg->conn = m->conn;
        if (m->n_log == m->cap_log) {
            m->cap_log = m->cap_log ? 2 * m->cap_log : 64;
            m->log = realloc(m->log, m->cap_log * sizeof *m->log);
        }
        m->log[m->n_log++] = lg;
        mock_answer(m, lg);
        pthread_cond_broadcast(&m->cv);
        if (m->fd < 0)
            return;
    }
    memmove(m->rbuf, m->rbuf + pos, m->rlen - pos);
    m->rlen -= pos;
}

static void *mock_main(void *arg)
{
    mock *m = arg;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        if (m->cmd != CMD_NONE) {
            if (m->cmd == CMD_DROP || m->cmd == CMD_DOWN)
                mock_close_conn(m);
            if (m->cmd == CMD_DOWN && m->lfd >= 0) {
                close(m->lfd);
                m->lfd = -1;
                unlink(m->path);
            }
            if (m->cmd == CMD_UP && m->lfd < 0)
                m->lfd = mock_listen_fd(m->path);
            m->cmd = CMD_NONE;
            pthread_cond_broadcast(&m->cv);
        }
        struct pollfd pfd[2] = {{.fd = m->fd < 0 ? m->lfd : -1, .events = POLLIN}, {.fd = m->fd, .events = POLLIN}};
        pthread_mutex_unlock(&m->mu);
        /* Only this thread closes the descriptors, so they stay valid while it polls. */
        int pr = poll(pfd, 2, 20);
        pthread_mutex_lock(&m->mu);
        if (pr <= 0)
            continue;
        if ((pfd[0].revents & POLLIN) && m->fd < 0 && m->lfd >= 0) {
            m->fd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (m->fd >= 0) {
                m->conn++;
                m->rlen = 0;
            }
        }
        if (pfd[1].fd >= 0 && pfd[1].fd == m->fd && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            ssize_t r = read(m->fd, m->rbuf + m->rlen, 2 * COMEM_WIRE_MAX_FRAME - m->rlen);
            if (r <= 0) {
                mock_close_conn(m);
                m->eofs++;
                pthread_cond_broadcast(&m->cv);
            } else {
                m->rlen += (size_t)r;
                mock_frames(m);
            }
        }
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

static void mock_init(mock *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    m->lfd = m->fd = -1;
    m->next_holder = 1000;
    m->next_entry = 2000;
    m->next_grant = 3000;
    m->admit_grant = true;
    m->pin_grant = true;
    m->rbuf = malloc(2 * COMEM_WIRE_MAX_FRAME);
}

/* Listens on path and starts serving. 0 or -1 (no cmocka asserts: the embed stub calls it). */
static int mock_start(mock *m, const char *path)
{
    size_t n = strlen(path);
    if (n >= sizeof m->path)
        return -1;
    memcpy(m->path, path, n + 1);
    m->lfd = mock_listen_fd(path);
    if (m->lfd < 0)
        return -1;
    m->running = pthread_create(&m->thread, NULL, mock_main, m) == 0;
    return m->running ? 0 : -1;
}

static void mock_stop(mock *m)
{
    if (m->running) {
        pthread_mutex_lock(&m->mu);
        m->stop = true;
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thread, NULL);
        m->running = false;
    }
    mock_close_conn(m);
    if (m->lfd >= 0) {
        close(m->lfd);
        unlink(m->path);
    }
    for (size_t i = 0; i < m->n_log; i++)
        free(m->log[i]);
    free(m->log);
    free(m->rbuf);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
}

static struct timespec deadline_in(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static void mock_cmd(mock *m, int cmd)
{
    struct timespec ts = deadline_in(WAIT_MS);
    pthread_mutex_lock(&m->mu);
    m->cmd = cmd;
    while (m->cmd != CMD_NONE && pthread_cond_timedwait(&m->cv, &m->mu, &ts) == 0) {
    }
    int left = m->cmd;
    pthread_mutex_unlock(&m->mu);
    assert_int_equal(left, CMD_NONE);
}

/* Waits until the mock has seen n connections end: a closed client's last frames are logged by then. */
static void mock_wait_eofs(mock *m, int n)
{
    struct timespec ts = deadline_in(WAIT_MS);
    pthread_mutex_lock(&m->mu);
    while (m->eofs < n && pthread_cond_timedwait(&m->cv, &m->mu, &ts) == 0) {
    }
    int seen = m->eofs;
    pthread_mutex_unlock(&m->mu);
    assert_true(seen >= n);
}

/* Index of the first frame of `type` at or after `from`, waiting up to ms; -1 when none came. */
static int mock_find_within(mock *m, uint16_t type, size_t from, int ms)
{
    struct timespec ts = deadline_in(ms);
    pthread_mutex_lock(&m->mu);
    for (;;) {
        for (size_t i = from; i < m->n_log; i++) {
            if (m->log[i]->msg.type == type) {
                pthread_mutex_unlock(&m->mu);
                return (int)i;
            }
        }
        if (pthread_cond_timedwait(&m->cv, &m->mu, &ts) != 0)
            break;
    }
    pthread_mutex_unlock(&m->mu);
    return -1;
}

static int mock_find(mock *m, uint16_t type, size_t from)
{
    int i = mock_find_within(m, type, from, WAIT_MS);
    if (i < 0)
        fail_msg("the mock never received a %s frame", comem_wire_type_name(type));
    return i;
}

static size_t mock_count(mock *m)
{
    pthread_mutex_lock(&m->mu);
    size_t n = m->n_log;
    pthread_mutex_unlock(&m->mu);
    return n;
}

/* Frames are never changed after they are logged, so a pointer read under the lock stays good. */
static const logged *mock_at(mock *m, size_t i)
{
    pthread_mutex_lock(&m->mu);
    assert_true(i < m->n_log);
    const logged *lg = m->log[i];
    pthread_mutex_unlock(&m->mu);
    return lg;
}

/* The one frame of `type` that must come next after `from` (a bounded wait). */
static const comem_msg *expect_at(mock *m, size_t from, uint16_t type)
{
    int i = mock_find(m, type, from);
    assert_int_equal((size_t)i, from);
    return &mock_at(m, from)->msg;
}

/* Counts frames of type at or after from. */
static int mock_count_type(mock *m, uint16_t type, size_t from)
{
    int n = 0;
    pthread_mutex_lock(&m->mu);
    for (size_t i = from; i < m->n_log; i++)
        n += m->log[i]->msg.type == type;
    pthread_mutex_unlock(&m->mu);
    return n;
}

static void mock_send(mock *m, const comem_msg *msg)
{
    pthread_mutex_lock(&m->mu);
    assert_true(m->fd >= 0);
    mock_write(m, msg);
    pthread_mutex_unlock(&m->mu);
}

#define MOCK_SET(m, field, value)                                                                                     \
    do {                                                                                                              \
        pthread_mutex_lock(&(m)->mu);                                                                                 \
        (m)->field = (value);                                                                                         \
        pthread_mutex_unlock(&(m)->mu);                                                                               \
    } while (0)

/* Waits until comem_client_connected says want. */
static void wait_connected(comem_client *c, int want)
{
    for (int i = 0; i < WAIT_MS / 10; i++) {
        if (comem_client_connected(c) == want)
            return;
        usleep(10000);
    }
    fail_msg("the client never became %s", want ? "connected" : "local");
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------- release callbacks */

typedef struct rel_state {
    pthread_mutex_t mu;
    comem_client *c;
    int calls;
    pthread_t thread;
    uint64_t holder;
    int kind;
    int64_t bytes;
    size_t n;
    uint64_t entries[8];
    int64_t amounts[8];
    int ret;             /* what the callback returns */
    int64_t give;        /* what it says it freed */
    uint64_t set_entry;  /* when set: comem_entry_set_resident(set_entry, set_resident) inside */
    int64_t set_resident;
    int set_rc;
    int admit_rc;    /* comem_admit from inside (it may wait: replies keep flowing) */
    bool add_inside; /* registers a holder and an entry from inside the callback */
    int add_rc;
} rel_state;

static void rel_init(rel_state *s, comem_client *c)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->c = c;
    s->admit_rc = 1;
}

static int release_cb(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                      const int64_t *amounts, size_t n, int64_t *freed)
{
    rel_state *s = user;
    pthread_mutex_lock(&s->mu);
    s->calls++;
    s->thread = pthread_self();
    s->holder = holder;
    s->kind = kind;
    s->bytes = bytes;
    s->n = n;
    for (size_t i = 0; i < n && i < 8; i++) {
        s->entries[i] = entries[i];
        s->amounts[i] = amounts[i];
    }
    uint64_t set_entry = s->set_entry;
    int64_t set_resident = s->set_resident;
    int ret = s->ret;
    *freed = s->give;
    pthread_mutex_unlock(&s->mu);
    int set_rc = set_entry ? comem_entry_set_resident(s->c, set_entry, set_resident) : 0;
    int admit_rc = set_entry ? comem_admit(s->c, 0, 0, 1, 0, 0, NULL, 0, 1000, NULL, NULL) : 1;
    pthread_mutex_lock(&s->mu);
    bool add_inside = s->add_inside;
    s->add_inside = false;
    pthread_mutex_unlock(&s->mu);
    int add_rc = 0;
    if (add_inside) {
        /* Calls from a callback wait like any other: the service thread delivers their replies. */
        uint64_t h = 0, e = 0;
        add_rc = comem_holder_add(s->c, "inner", 0, COMEM_KIND_RAW, 0, NULL, NULL, &h);
        if (add_rc == 0)
            add_rc = comem_entry_add(s->c, h, "inner-e", 100, 50, 0, &e);
        if (add_rc == 0)
            add_rc = comem_entry_set_resident(s->c, e, 60);
    }
    pthread_mutex_lock(&s->mu);
    s->set_rc = set_rc;
    s->admit_rc = admit_rc;
    s->add_rc = add_rc;
    pthread_mutex_unlock(&s->mu);
    return ret;
}

static int rel_calls(rel_state *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->calls;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Sends an ASK and returns the RECEIPT that answers it. */
static const comem_msg_receipt *ask(mock *m, uint64_t ask_id, uint64_t holder, uint8_t kind, int64_t bytes,
                                    const comem_wire_release *items, uint16_t n)
{
    static comem_msg msg;
    size_t from = mock_count(m);
    memset(&msg, 0, sizeof msg);
    msg.type = COMEM_MSG_ASK;
    msg.u.ask.ask_id = ask_id;
    msg.u.ask.holder_id = holder;
    msg.u.ask.kind = kind;
    msg.u.ask.bytes = bytes;
    msg.u.ask.deadline_ms = 1000;
    msg.u.ask.n = n;
    for (uint16_t i = 0; i < n; i++)
        msg.u.ask.items[i] = items[i];
    mock_send(m, &msg);
    int i = mock_find(m, COMEM_MSG_RECEIPT, from);
    const comem_msg_receipt *r = &mock_at(m, (size_t)i)->msg.u.receipt;
    assert_int_equal(r->ask_id, ask_id);
    return r;
}

static const comem_wire_residency *receipt_item(const comem_msg_receipt *r, uint64_t entry)
{
    for (uint16_t i = 0; i < r->n; i++)
        if (r->items[i].entry_id == entry)
            return &r->items[i];
    return NULL;
}

/* ---------------------------------------------------------------- fixtures */

static int setup(void **state)
{
    (void)state;
    assert_int_equal(test_tmpdir_make(g_dir, sizeof g_dir, "client"), 0);
    snprintf(g_sock, sizeof g_sock, "%s/coord.sock", g_dir);
    g_mock = malloc(sizeof *g_mock);
    mock_init(g_mock);
    /* Local decisions read a simulated card in the temporary directory, never a shared one. */
    char dev[300];
    snprintf(dev, sizeof dev, "sim:8GiB:path=%s/card", g_dir);
    setenv("COMEM_DEVICE", dev, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    mock_stop(g_mock);
    free(g_mock);
    g_mock = NULL;
    unsetenv("COMEM_DEVICE");
    unsetenv("COMEM_SOCKET");
    unsetenv("COMEM_TOKEN");
    unsetenv("COMEM_RUNTIME_DIR");
    comem_log_set_sink(NULL, NULL);
    return test_tmpdir_remove(g_dir);
}

/* Opens a client on the running mock; the client's calls time out after 3 s. */
static comem_client *open_flags(int role, const char *name, unsigned flags)
{
    comem_client *c = NULL;
    assert_int_equal(comem_client_open(g_sock, role, name, -1, flags, &c), COMEM_OK);
    assert_int_equal(comem_client_connected(c), 1);
    comem_client_set_timeout(c, 3000);
    return c;
}

static comem_client *open_up(int role, const char *name) { return open_flags(role, name, COMEM_OPEN_NO_LOCAL); }

/* Registers a holder and returns its client id; *coord gets the mock's id. */
static uint64_t add_holder(comem_client *c, const char *name, unsigned flags, rel_state *s, uint64_t *coord)
{
    size_t from = mock_count(g_mock);
    uint64_t id = 0;
    assert_int_equal(comem_holder_add(c, name, 0, COMEM_KIND_MODELS, flags, s ? release_cb : NULL, s, &id), COMEM_OK);
    const logged *lg = mock_at(g_mock, (size_t)mock_find(g_mock, COMEM_MSG_HOLDER_ADD, from));
    assert_string_equal(lg->msg.u.holder_add.name, name);
    *coord = lg->replied_id;
    return id;
}

static uint64_t add_entry(comem_client *c, uint64_t holder, const char *name, int64_t size, int64_t resident,
                          uint64_t *coord)
{
    size_t from = mock_count(g_mock);
    uint64_t id = 0;
    assert_int_equal(comem_entry_add(c, holder, name, size, resident, 0, &id), COMEM_OK);
    const logged *lg = mock_at(g_mock, (size_t)mock_find(g_mock, COMEM_MSG_ENTRY_ADD, from));
    assert_string_equal(lg->msg.u.entry_add.name, name);
    *coord = lg->replied_id;
    return id;
}

/* ---------------------------------------------------------------- tests */

static void test_default_socket(void **state)
{
    (void)state;
    char rt[200], buf[256], want[256];
    snprintf(rt, sizeof rt, "%s/rt", g_dir);
    setenv("COMEM_RUNTIME_DIR", rt, 1);
    assert_int_equal(comem_default_socket(buf, sizeof buf), COMEM_OK);
    snprintf(want, sizeof want, "%s/comem.sock", rt);
    assert_string_equal(buf, want);
    assert_int_equal(comem_default_socket(buf, 8), COMEM_ERANGE);
    assert_int_equal(comem_default_socket(NULL, 8), COMEM_EINVAL);
}

static void test_constants_by_name(void **state)
{
    (void)state;
    int found = -1;
    assert_int_equal(comem_constant("EBUSY", &found), COMEM_EBUSY);
    assert_int_equal(found, 1);
    assert_int_equal(comem_constant("KIND_PINS", NULL), COMEM_KIND_PINS);
    assert_int_equal(comem_constant("ADMISSION_SIZE", NULL), sizeof(comem_admission));
    assert_int_equal(comem_constant("ADMISSION_ASKED_MAX", NULL), COMEM_ADMISSION_ASKED_MAX);
    assert_int_equal(comem_constant("ADMISSION_OFFSET_GRANT", NULL), offsetof(comem_admission, grant));
    assert_int_equal(comem_constant("ADMISSION_OFFSET_FITS", NULL), offsetof(comem_admission, fits));
    assert_int_equal(comem_constant("ADMISSION_OFFSET_N_IDS", NULL), offsetof(comem_admission, n_ids));
    assert_int_equal(comem_constant("ADMISSION_OFFSET_ASKED", NULL), offsetof(comem_admission, asked));
    assert_int_equal(comem_constant("DEVICE_HOST_RAM", NULL), comem_device_host_ram());
    assert_int_equal(comem_constant("MAX_KEEP", NULL), COMEM_WIRE_MAX_ITEMS);
    assert_int_equal(comem_constant("NAME_MAX", NULL), COMEM_WIRE_NAME_MAX - 1);
    assert_int_equal(comem_constant("EVERSION", NULL), COMEM_EVERSION);
    /* the rules' numbers (python/comem/calc.py reads every one), the reserve default, the protocol */
    assert_int_equal(comem_constant("COMFYUI_V039", NULL), COMEM_COMFYUI_V039);
    assert_int_equal(comem_constant("CALC_VRAM_SHARED", NULL), COMEM_CALC_VRAM_SHARED);
    assert_int_equal(comem_constant("CALC_CPU", NULL), COMEM_CALC_CPU);
    assert_int_equal(comem_constant("CALC_DEAD", NULL), COMEM_CALC_DEAD);
    assert_int_equal(comem_constant("CALC_FORCE_FULL_LOAD", NULL), COMEM_CALC_FORCE_FULL_LOAD);
    assert_int_equal(comem_constant("CALC_BUDGET_BYTES", NULL), COMEM_CALC_BUDGET_BYTES);
    assert_int_equal(comem_constant("CALC_NO_SMART_MEMORY", NULL), COMEM_CALC_NO_SMART_MEMORY);
    assert_int_equal(comem_constant("CALC_PINS_PATCHES_FAST", NULL), COMEM_CALC_PINS_PATCHES_FAST);
    assert_int_equal(comem_constant("CALC_PIN_MODEL_CURRENT_PROMPT", NULL), COMEM_CALC_PIN_MODEL_CURRENT_PROMPT);
    assert_int_equal(comem_constant("CALC_PIN_EVICT_ACTIVE", NULL), COMEM_CALC_PIN_EVICT_ACTIVE);
    assert_int_equal(comem_constant("RESERVE_DEFAULT", NULL), 400 << 20);
    assert_int_equal(comem_constant("WIRE_MAGIC", NULL), COMEM_WIRE_MAGIC);
    assert_int_equal(comem_constant("WIRE_VERSION", NULL), COMEM_WIRE_VERSION);
    assert_int_equal(comem_constant("COMEMD_EXIT_TAKEN", NULL), 3); /* comemd(8), the systemd unit */
    assert_int_equal(comem_constant("COMEM_EBUSY", &found), 0); /* names go without their prefix */
    assert_int_equal(found, 0);
    assert_int_equal(comem_constant(NULL, &found), 0);
    assert_int_equal(found, 0);
}

static void test_hello_fields(void **state)
{
    (void)state;
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    setenv("COMEM_TOKEN", "s3cret", 1);
    setenv("COMEM_SOCKET", g_sock, 1); /* open(NULL) must find it there */
    comem_client *c = NULL;
    assert_int_equal(comem_client_open(NULL, COMEM_CLIENT_WORKER, "sam3", -1, COMEM_OPEN_NO_LOCAL, &c), COMEM_OK);
    assert_int_equal(comem_client_connected(c), 1);
    const comem_msg *h = expect_at(g_mock, 0, COMEM_MSG_HELLO);
    assert_int_equal(h->u.hello.proto_version, COMEM_WIRE_VERSION);
    assert_int_equal(h->u.hello.role, COMEM_ROLE_WORKER);
    assert_int_equal(h->u.hello.scope, 0);
    assert_int_equal(h->u.hello.pid, (uint32_t)getpid());
    assert_int_equal(h->u.hello.caps, 0);
    assert_int_equal(h->u.hello.reserve_base, -1);
    assert_string_equal(h->u.hello.name, "sam3");
    assert_string_equal(h->u.hello.token, "s3cret");
    comem_client_close(c);

    /* A host passes its operator reserve; no token means "". The mock logs the first session's
     * last frames when it reads them, so the count is taken once it has seen that session end. */
    unsetenv("COMEM_TOKEN");
    mock_wait_eofs(g_mock, 1);
    size_t from = mock_count(g_mock);
    assert_int_equal(comem_client_open(NULL, COMEM_CLIENT_HOST, "host", 3 * COMEM_GIB, 0, &c), COMEM_OK);
    h = expect_at(g_mock, from, COMEM_MSG_HELLO);
    assert_int_equal(h->u.hello.role, COMEM_ROLE_HOST);
    assert_int_equal(h->u.hello.reserve_base, 3 * COMEM_GIB);
    assert_string_equal(h->u.hello.token, "");
    comem_client_close(c);
}

static void test_hello_refused(void **state)
{
    (void)state;
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    MOCK_SET(g_mock, hello_status, COMEM_EPERM);
    setenv("COMEM_TOKEN", "wrong", 1);
    comem_client *c = NULL;
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_WORKER, "w", -1, COMEM_OPEN_NO_LOCAL, &c), COMEM_EPERM);
    assert_null(c);
    /* Without NO_LOCAL the refusal is logged and the client decides locally. */
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_WORKER, "w", -1, 0, &c), COMEM_OK);
    assert_int_equal(comem_client_connected(c), 0);
    int64_t reserve = 0;
    assert_int_equal(comem_reserve(c, 0, &reserve, NULL), COMEM_OK);
    assert_int_equal(reserve, 400 * COMEM_MIB);
    comem_client_close(c);
}

/* A listener of another comem for one connection: reads what comes and answers with a REPLY in the header
   of its own version (as every version answers a frame it cannot take), then closes. */
typedef struct other_coord {
    int lfd;
    uint16_t version;
    uint32_t request_id;
    const char *text;
} other_coord;

static void *other_coord_main(void *arg)
{
    const other_coord *o = arg;
    int fd = accept4(o->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return NULL;
    uint8_t buf[1024];
    ssize_t r = read(fd, buf, sizeof buf);
    (void)r;
    comem_msg m;
    memset(&m, 0, sizeof m);
    m.type = COMEM_MSG_REPLY;
    m.request_id = o->request_id;
    m.u.reply.status = COMEM_EPROTO;
    snprintf(m.u.reply.message, sizeof m.u.reply.message, "%s", o->text);
    int n = comem_wire_encode(&m, buf, sizeof buf);
    if (n > 0) {
        buf[4] = (uint8_t)(o->version & 0xff); /* the header's version, little-endian */
        buf[5] = (uint8_t)(o->version >> 8);
        ssize_t w = send(fd, buf, (size_t)n, MSG_NOSIGNAL);
        (void)w;
    }
    close(fd);
    return NULL;
}

/* The probe: who answers at a socket, pid and protocol version (comem_probe_peer), another comem's told apart. */
static void test_probe_peer_tells_another_version(void **state)
{
    (void)state;
    int64_t pid = 0;
    int version = -1;
    char why[512];
    /* Nobody: nothing at the path, then a socket nobody listens on. No connection, no pid. */
    assert_int_equal(comem_probe_peer(g_sock, 500, &pid, &version, why, sizeof why), COMEM_ENOENT);
    assert_true(pid == -1 && version == 0);
    int lfd = mock_listen_fd(g_sock);
    assert_true(lfd >= 0);
    close(lfd);
    assert_int_equal(comem_probe_peer(g_sock, 500, &pid, &version, NULL, 0), COMEM_ECLOSED);
    assert_int_equal(pid, -1);

    /* A coordinator of protocol version 1 answers in its own header: its version, and the listener's pid. */
    lfd = mock_listen_fd(g_sock);
    assert_true(lfd >= 0);
    pthread_t t;
    other_coord o = {lfd, 1, 0, "bad frame header"};
    assert_int_equal(pthread_create(&t, NULL, other_coord_main, &o), 0);
    assert_int_equal(comem_probe_peer(g_sock, 2000, &pid, &version, why, sizeof why), COMEM_EVERSION);
    pthread_join(t, NULL);
    assert_int_equal(pid, getpid());
    assert_int_equal(version, 1);
    assert_non_null(strstr(why, "speaks protocol version 1, this comem "));
    /* comem_probe says the same, and the NULL out-pointers are fine. */
    assert_int_equal(pthread_create(&t, NULL, other_coord_main, &o), 0);
    assert_int_equal(comem_probe_peer(g_sock, 2000, NULL, NULL, NULL, 0), COMEM_EVERSION);
    pthread_join(t, NULL);
    assert_int_equal(pthread_create(&t, NULL, other_coord_main, &o), 0);
    assert_int_equal(comem_probe(g_sock, 2000, why, sizeof why), COMEM_EVERSION);
    pthread_join(t, NULL);

    /* One whose header is this version's but whose HELLO is not: refused, no version named. */
    other_coord same = {lfd, COMEM_WIRE_VERSION, 1, "protocol version not supported"};
    assert_int_equal(pthread_create(&t, NULL, other_coord_main, &same), 0);
    assert_int_equal(comem_probe_peer(g_sock, 2000, &pid, &version, why, sizeof why), COMEM_EVERSION);
    pthread_join(t, NULL);
    assert_true(pid == getpid() && version == 0);
    assert_non_null(strstr(why, "refused this comem's protocol version"));
    /* Any other refusal in this version is what it is. */
    other_coord bad = {lfd, COMEM_WIRE_VERSION, 1, "malformed payload"};
    assert_int_equal(pthread_create(&t, NULL, other_coord_main, &bad), 0);
    assert_int_equal(comem_probe_peer(g_sock, 2000, &pid, &version, why, sizeof why), COMEM_EPROTO);
    pthread_join(t, NULL);
    assert_true(pid == getpid() && version == COMEM_WIRE_VERSION);
    close(lfd);

    /* This comem's coordinator answers: OK, its version. */
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    assert_int_equal(comem_probe_peer(g_sock, 2000, &pid, &version, why, sizeof why), COMEM_OK);
    assert_true(pid == getpid() && version == COMEM_WIRE_VERSION);
}

static void test_holders_entries_census(void **state)
{
    (void)state;
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    comem_client *c = open_up(COMEM_CLIENT_WORKER, "w");
    rel_state s;
    rel_init(&s, c);

    size_t from = mock_count(g_mock);
    uint64_t h = 0;
    assert_int_equal(comem_holder_add(c, "models", 1, COMEM_KIND_PAGER, COMEM_ANSWERS_RELEASE | COMEM_ANSWERS_IDLE,
                                      release_cb, &s, &h),
                     COMEM_OK);
    const logged *lg = mock_at(g_mock, from);
    assert_int_equal(lg->msg.type, COMEM_MSG_HOLDER_ADD);
    assert_int_equal(lg->msg.u.holder_add.device, 1);
    assert_int_equal(lg->msg.u.holder_add.kind, COMEM_HOLDER_PAGER);
    assert_int_equal(lg->msg.u.holder_add.flags, COMEM_CAP_RELEASE | COMEM_CAP_IDLE_RELEASE);
    assert_string_equal(lg->msg.u.holder_add.name, "models");
    assert_int_equal(lg->replied_id, 1000);
    assert_true(h != 0 && h != 1000); /* the client's own id, not the coordinator's */

    uint64_t e1 = 0, e2 = 0;
    from = mock_count(g_mock);
    assert_int_equal(comem_entry_add(c, h, "unet", 4 * COMEM_GIB, 3 * COMEM_GIB, COMEM_ENTRY_PAGED, &e1), COMEM_OK);
    lg = mock_at(g_mock, from);
    assert_int_equal(lg->msg.type, COMEM_MSG_ENTRY_ADD);
    assert_int_equal(lg->msg.u.entry_add.holder_id, 1000);
    assert_int_equal(lg->msg.u.entry_add.size, 4 * COMEM_GIB);
    assert_int_equal(lg->msg.u.entry_add.resident, 3 * COMEM_GIB);
    assert_int_equal(lg->msg.u.entry_add.flags, COMEM_ENTRY_DYNAMIC);
    assert_string_equal(lg->msg.u.entry_add.name, "unet");
    assert_int_equal(comem_entry_add(c, h, "vae", COMEM_GIB, 0, 0, &e2), COMEM_OK);
    assert_int_equal(mock_at(g_mock, from + 1)->msg.u.entry_add.flags, 0);
    assert_true(e1 != e2 && e1 != 2000 && e2 != 2001);

    /* Residency censuses: one item each, a sequence per entry that grows by one. */
    from = mock_count(g_mock);
    assert_int_equal(comem_entry_set_resident(c, e1, 2 * COMEM_GIB), COMEM_OK);
    assert_int_equal(comem_entry_set_resident(c, e1, COMEM_GIB), COMEM_OK);
    assert_int_equal(comem_entry_set_resident(c, e2, 100 * COMEM_MIB), COMEM_OK);
    assert_int_equal(comem_entry_set_resident(c, e1, 0), COMEM_OK);
    struct {
        uint64_t entry, seq;
        int64_t resident;
    } want[] = {{2000, 1, 2 * COMEM_GIB}, {2000, 2, COMEM_GIB}, {2001, 1, 100 * COMEM_MIB}, {2000, 3, 0}};
    for (size_t i = 0; i < 4; i++) {
        const comem_msg *m = expect_at(g_mock, from + i, COMEM_MSG_CENSUS);
        assert_int_equal(m->u.census.holder_id, 1000);
        assert_int_equal(m->u.census.has, 0);
        assert_int_equal(m->u.census.n, 1);
        assert_int_equal(m->u.census.items[0].entry_id, want[i].entry);
        assert_int_equal(m->u.census.items[0].seq, want[i].seq);
        assert_int_equal(m->u.census.items[0].resident, want[i].resident);
    }

    /* Holder report: no items, the `has` bits, a per-holder sequence. */
    from = mock_count(g_mock);
    assert_int_equal(comem_holder_report(c, h, 5 * COMEM_MIB, -1), COMEM_OK);
    assert_int_equal(comem_holder_report(c, h, -1, 7), COMEM_OK);
    const comem_msg *m = expect_at(g_mock, from, COMEM_MSG_CENSUS);
    assert_int_equal(m->u.census.n, 0);
    assert_int_equal(m->u.census.seq, 1);
    assert_int_equal(m->u.census.has, COMEM_CENSUS_PINNED);
    assert_int_equal(m->u.census.pinned, 5 * COMEM_MIB);
    m = expect_at(g_mock, from + 1, COMEM_MSG_CENSUS);
    assert_int_equal(m->u.census.seq, 2);
    assert_int_equal(m->u.census.has, COMEM_CENSUS_OVERHEAD);
    assert_int_equal(m->u.census.overhead, 7);

    /* Busy marks: a holder's and the whole process's. */
    from = mock_count(g_mock);
    assert_int_equal(comem_holder_busy(c, h, 1, "prompt-1"), COMEM_OK);
    assert_int_equal(comem_holder_busy(c, 0, 0, NULL), COMEM_OK);
    m = expect_at(g_mock, from, COMEM_MSG_ACTIVITY);
    assert_int_equal(m->u.activity.holder_id, 1000);
    assert_int_equal(m->u.activity.busy, 1);
    assert_string_equal(m->u.activity.prompt, "prompt-1");
    m = expect_at(g_mock, from + 1, COMEM_MSG_ACTIVITY);
    assert_int_equal(m->u.activity.holder_id, 0);
    assert_int_equal(m->u.activity.busy, 0);

    /* Unknown ids and bad arguments never reach the wire. */
    from = mock_count(g_mock);
    uint64_t x;
    char longname[COMEM_WIRE_NAME_MAX + 1];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(comem_entry_set_resident(c, 424242, 1), COMEM_ENOENT);
    assert_int_equal(comem_entry_set_resident(c, e2, 2 * COMEM_GIB), COMEM_EINVAL); /* over its size */
    assert_int_equal(comem_entry_set_resident(c, e2, -1), COMEM_EINVAL);
    assert_int_equal(comem_entry_add(c, 424242, "x", 1, 0, 0, &x), COMEM_ENOENT);
    assert_int_equal(comem_entry_add(c, h, "x", -1, 0, 0, &x), COMEM_EINVAL);
    assert_int_equal(comem_entry_add(c, h, "x", 1, 2, 0, &x), COMEM_EINVAL);
    assert_int_equal(comem_entry_add(c, h, "x", 1, 0, 0x80, &x), COMEM_EINVAL);
    assert_int_equal(comem_entry_add(c, h, longname, 1, 0, 0, &x), COMEM_EINVAL);
    assert_int_equal(comem_entry_add(c, h, "x", 1, 0, 0, NULL), COMEM_EINVAL);
    assert_int_equal(comem_holder_add(c, longname, 0, COMEM_KIND_MODELS, 0, NULL, NULL, &x), COMEM_EINVAL);
    assert_int_equal(comem_holder_add(c, "x", 0, 9, 0, NULL, NULL, &x), COMEM_EINVAL);
    assert_int_equal(comem_holder_add(c, "x", -1, COMEM_KIND_MODELS, 0, NULL, NULL, &x), COMEM_EINVAL);
    assert_int_equal(comem_holder_add(c, "x", 0, COMEM_KIND_MODELS, COMEM_ANSWERS_RELEASE, NULL, NULL, &x),
                     COMEM_EINVAL);
    assert_int_equal(comem_holder_add(NULL, "x", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &x), COMEM_EINVAL);
    assert_int_equal(comem_holder_report(c, h, -2, 0), COMEM_EINVAL);
    assert_int_equal(comem_holder_report(c, 424242, 0, 0), COMEM_ENOENT);
    assert_int_equal(comem_holder_busy(c, 424242, 1, NULL), COMEM_ENOENT);
    assert_int_equal(comem_holder_busy(c, h, 1, longname), COMEM_EINVAL);
    assert_int_equal(comem_holder_remove(c, 424242), COMEM_ENOENT);
    assert_int_equal(comem_entry_remove(c, 424242), COMEM_ENOENT);
    assert_int_equal(comem_entry_remove(NULL, e1), COMEM_EINVAL);
    usleep(50000);
    assert_int_equal(mock_count(g_mock), from);

    /* A refused add returns the coordinator's status and gives no id. */
    MOCK_SET(g_mock, refuse_adds, COMEM_ERANGE);
    x = 5;
    char why[128];
    assert_int_equal(comem_take_reason(why, sizeof why), 0); /* nothing refused yet on this thread */
    assert_int_equal(comem_entry_add(c, h, "huge", 1, 0, 0, &x), COMEM_ERANGE);
    /* The coordinator's words travel with the status, once. */
    assert_int_equal(comem_take_reason(why, sizeof why), strlen("refused by the script"));
    assert_string_equal(why, "refused by the script");
    assert_int_equal(comem_take_reason(why, sizeof why), 0);
    assert_string_equal(why, "");
    assert_int_equal(comem_holder_add(c, "no", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &x), COMEM_ERANGE);
    assert_int_equal(comem_take_reason(why, 8), strlen("refused by the script")); /* cut to the buffer */
    assert_string_equal(why, "refused");
    assert_int_equal(x, 5);
    MOCK_SET(g_mock, refuse_adds, 0);

    from = mock_count(g_mock);
    assert_int_equal(comem_entry_remove(c, e2), COMEM_OK);
    m = expect_at(g_mock, from, COMEM_MSG_ENTRY_REMOVE);
    assert_int_equal(m->u.id.id, 2001);
    assert_int_equal(comem_entry_set_resident(c, e2, 0), COMEM_ENOENT);

    /* Removing a holder takes its entries with it. */
    from = mock_count(g_mock);
    assert_int_equal(comem_holder_remove(c, h), COMEM_OK);
    m = expect_at(g_mock, from, COMEM_MSG_HOLDER_REMOVE);
    assert_int_equal(m->u.id.id, 1000);
    assert_int_equal(comem_entry_set_resident(c, e1, 0), COMEM_ENOENT);
    assert_int_equal(comem_holder_remove(c, h), COMEM_ENOENT);
    comem_client_close(c);
    pthread_mutex_destroy(&s.mu);
}

static void test_admit(void **state)
{
    (void)state;
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    comem_client *c = open_up(COMEM_CLIENT_HOST, "host");
    uint64_t hc, e1c, e2c;
    uint64_t h = add_holder(c, "models", 0, NULL, &hc);
    uint64_t e1 = add_entry(c, h, "a", COMEM_GIB, COMEM_GIB, &e1c);
    uint64_t e2 = add_entry(c, h, "b", COMEM_GIB, COMEM_GIB, &e2c);

    size_t from = mock_count(g_mock);
    uint64_t keep[] = {e2, e1};
    uint64_t grant = 0;
    int64_t short_by = -1;
    assert_int_equal(comem_admit(c, 0, h, 2 * COMEM_GIB, 300 * COMEM_MIB, 10 * COMEM_MIB, keep, 2, 2000, &grant,
                                 &short_by),
                     COMEM_OK);
    const logged *lg = mock_at(g_mock, from);
    assert_int_equal(lg->msg.type, COMEM_MSG_ADMIT);
    assert_int_equal(lg->msg.u.admit.device, 0);
    assert_int_equal(lg->msg.u.admit.holder_id, hc);
    assert_int_equal(lg->msg.u.admit.weights, 2 * COMEM_GIB);
    assert_int_equal(lg->msg.u.admit.inference, 300 * COMEM_MIB);
    assert_int_equal(lg->msg.u.admit.cast_forward, 10 * COMEM_MIB);
    assert_true(lg->msg.u.admit.timeout_ms > 0 && lg->msg.u.admit.timeout_ms <= 2000);
    assert_int_equal(lg->msg.u.admit.n_keep, 2);
    assert_int_equal(lg->msg.u.admit.keep[0], e2c);
    assert_int_equal(lg->msg.u.admit.keep[1], e1c);
    assert_true(grant != 0 && grant != lg->replied_id);
    assert_int_equal(short_by, 0);
    int64_t need, fb, fa, freed;
    int asked, busy;
    comem_admit_details(c, &need, &fb, &fa, &freed, &asked, &busy);
    assert_int_equal(need, 2 * COMEM_GIB + 1000);
    assert_int_equal(fb, 111);
    assert_int_equal(fa, 222);
    assert_int_equal(freed, 333);
    assert_int_equal(asked, 2);
    assert_int_equal(busy, 1);
    comem_admit_details(c, NULL, NULL, NULL, NULL, NULL, NULL);

    /* The same admission as one record: every figure of the reply, whom it asked, what fits. */
    comem_admission rec;
    memset(&rec, 0xff, sizeof rec);
    assert_int_equal(comem_admit_record(c, 0, h, COMEM_GIB, 0, 0, NULL, 0, 2000, &rec), COMEM_OK);
    assert_true(rec.grant != 0 && rec.grant != grant);
    assert_int_equal(rec.decided, 1);
    assert_int_equal(rec.short_by, 0);
    assert_int_equal(rec.fits, COMEM_GIB);
    assert_int_equal(rec.need, COMEM_GIB + 1000);
    assert_int_equal(rec.free_before, 111);
    assert_int_equal(rec.free_after, 222);
    assert_int_equal(rec.freed, 333);
    assert_int_equal(rec.n_asked, 2);
    assert_int_equal(rec.n_busy, 1);
    assert_int_equal(rec.n_ids, 2);
    assert_int_equal(rec.asked[0], 4321);
    assert_int_equal(rec.asked[1], 4321);
    assert_int_equal(rec.asked[2], 0);
    assert_int_equal(comem_grant_done(c, rec.grant, 0, 0), COMEM_OK);
    /* A record is the caller's: the last comem_admit's figures are still what details says. */
    comem_admit_details(c, &need, NULL, NULL, NULL, NULL, NULL);
    assert_int_equal(need, 2 * COMEM_GIB + 1000);

    /* The grant's bytes land in e1: the coordinator hears its own ids. */
    from = mock_count(g_mock);
    assert_int_equal(comem_grant_done(c, grant, e1, COMEM_GIB), COMEM_OK);
    const comem_msg *m = expect_at(g_mock, from, COMEM_MSG_GRANT_DONE);
    assert_int_equal(m->u.grant_done.grant_id, 3000);
    assert_int_equal(m->u.grant_done.entry_id, e1c);
    assert_int_equal(m->u.grant_done.used, COMEM_GIB);
    assert_int_equal(comem_grant_done(c, grant, e1, COMEM_GIB), COMEM_ENOENT); /* once only */

    /* Refused: ENOSPC with the missing bytes. */
    MOCK_SET(g_mock, admit_grant, false);
    MOCK_SET(g_mock, admit_short, 123456789);
    grant = 77;
    assert_int_equal(comem_admit(c, 0, 0, 20 * COMEM_GIB, 0, 0, NULL, 0, -1, &grant, &short_by), COMEM_ENOSPC);
    assert_int_equal(short_by, 123456789);
    assert_int_equal(grant, 77);
    assert_int_equal(comem_admit(c, 0, 0, 20 * COMEM_GIB, 0, 0, NULL, 0, -1, NULL, NULL), COMEM_ENOSPC);
    assert_int_equal(comem_admit_record(c, 0, 0, 20 * COMEM_GIB, 0, 0, NULL, 0, -1, &rec), COMEM_ENOSPC);
    assert_int_equal(rec.grant, 0);
    assert_int_equal(rec.short_by, 123456789);
    assert_int_equal(rec.fits, comem_admit_fits(20 * COMEM_GIB, 123456789));
    assert_true(rec.fits > 0 && rec.fits < 20 * COMEM_GIB);
    assert_int_equal(comem_admit_record(c, 0, 0, 20 * COMEM_GIB, 0, 0, NULL, 0, -1, NULL), COMEM_ENOSPC);

    /* Unknown ids and bad arguments are refused here. */
    from = mock_count(g_mock);
    uint64_t bad[] = {e1, 424242};
    assert_int_equal(comem_admit(c, 0, 0, 1, 0, 0, bad, 2, -1, NULL, NULL), COMEM_ENOENT);
    assert_int_equal(comem_admit(c, 0, 424242, 1, 0, 0, NULL, 0, -1, NULL, NULL), COMEM_ENOENT);
    assert_int_equal(comem_admit(c, 0, 0, -1, 0, 0, NULL, 0, -1, NULL, NULL), COMEM_EINVAL);
    assert_int_equal(comem_admit(c, -1, 0, 1, 0, 0, NULL, 0, -1, NULL, NULL), COMEM_EINVAL);
    assert_int_equal(comem_admit(c, 0, 0, 1, 0, 0, NULL, 1, -1, NULL, NULL), COMEM_EINVAL);
    assert_int_equal(comem_admit(NULL, 0, 0, 1, 0, 0, NULL, 0, -1, NULL, NULL), COMEM_EINVAL);
    /* No decision: the record is all zero. */
    memset(&rec, 0xff, sizeof rec);
    assert_int_equal(comem_admit_record(c, 0, 424242, 1, 0, 0, NULL, 0, -1, &rec), COMEM_ENOENT);
    assert_int_equal(rec.decided, 0);
    assert_int_equal(rec.need, 0);
    assert_int_equal(rec.n_ids, 0);
    assert_int_equal(rec.asked[0], 0);
    assert_int_equal(comem_grant_done(c, 424242, 0, 0), COMEM_ENOENT);
    assert_int_equal(comem_grant_done(c, grant, 0, -1), COMEM_EINVAL);
    usleep(50000);
    assert_int_equal(mock_count(g_mock), from);

    /* The other decisions: pressure, pins, reserve. */
    MOCK_SET(g_mock, pressure_freed, 99 * COMEM_MIB);
    freed = 0;
    assert_int_equal(comem_pressure(c, 0, COMEM_GIB, 1000, &freed), COMEM_OK);
    assert_int_equal(freed, 99 * COMEM_MIB);
    m = &mock_at(g_mock, (size_t)mock_find(g_mock, COMEM_MSG_PRESSURE, from))->msg;
    assert_int_equal(m->u.pressure.bytes, COMEM_GIB);
    int64_t shortfall = -1;
    assert_int_equal(comem_pin_acquire(c, h, 64 * COMEM_MIB, &shortfall), COMEM_OK);
    assert_int_equal(shortfall, 0);
    m = &mock_at(g_mock, (size_t)mock_find(g_mock, COMEM_MSG_PIN_ACQUIRE, from))->msg;
    assert_int_equal(m->u.pin.holder_id, hc);
    assert_int_equal(m->u.pin.bytes, 64 * COMEM_MIB);
    MOCK_SET(g_mock, pin_grant, false);
    assert_int_equal(comem_pin_acquire(c, 0, COMEM_GIB, &shortfall), COMEM_ENOSPC);
    assert_int_equal(shortfall, 777);
    assert_int_equal(comem_pin_release(c, h, 128 * COMEM_MIB), COMEM_ERANGE); /* more than it pinned */
    assert_int_equal(comem_pin_release(c, h, 64 * COMEM_MIB), COMEM_OK);        /* nothing changed above */
    assert_int_equal(comem_pin_release(c, h, 1), COMEM_ERANGE);
    assert_int_equal(comem_pin_acquire(c, 424242, 1, NULL), COMEM_ENOENT);
    assert_int_equal(comem_pin_acquire(c, h, -1, NULL), COMEM_EINVAL);
    int64_t reserve = 0, headroom = 0;
    assert_int_equal(comem_reserve(c, 0, &reserve, &headroom), COMEM_OK);
    assert_int_equal(reserve, 2 * COMEM_GIB);
    assert_int_equal(headroom, 5 * COMEM_MIB);
    assert_int_equal(comem_reserve(c, 0, NULL, NULL), COMEM_OK);
    assert_int_equal(comem_reserve(c, -1, NULL, NULL), COMEM_EINVAL);
    comem_client_close(c);
}

static void test_ask_runs_callback_off_the_callers_thread(void **state)
{
    (void)state;
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    comem_client *c = open_up(COMEM_CLIENT_WORKER, "w");
    rel_state s;
    rel_init(&s, c);
    uint64_t hc, e1c, e2c;
    uint64_t h = add_holder(c, "models", COMEM_ANSWERS_RELEASE, &s, &hc);
    uint64_t e1 = add_entry(c, h, "a", 4 * COMEM_GIB, 4 * COMEM_GIB, &e1c);
    uint64_t e2 = add_entry(c, h, "b", 2 * COMEM_GIB, 2 * COMEM_GIB, &e2c);
    assert_int_equal(comem_entry_set_resident(c, e2, COMEM_GIB), COMEM_OK); /* e2 at seq 1 */

    /* The callback reports e1's new residency itself and says it freed 3 GiB. */
    pthread_mutex_lock(&s.mu);
    s.give = 3 * COMEM_GIB;
    s.set_entry = e1;
    s.set_resident = COMEM_GIB;
    pthread_mutex_unlock(&s.mu);
    size_t from = mock_count(g_mock);
    int64_t t0 = now_ms();
    comem_wire_release items[] = {{e1c, 3 * COMEM_GIB}, {99999, 5}};
    const comem_msg_receipt *r = ask(g_mock, 41, hc, COMEM_ASK_RELEASE, 3 * COMEM_GIB, items, 2);
    assert_true(now_ms() - t0 < 2000); /* no deadlock, no waiting out a timeout */
    assert_int_equal(r->outcome, COMEM_RECEIPT_DONE);
    assert_int_equal(r->freed, 3 * COMEM_GIB);
    assert_int_equal(r->n, 2);
    const comem_wire_residency *it = receipt_item(r, e1c);
    assert_non_null(it);
    assert_int_equal(it->resident, COMEM_GIB);
    assert_int_equal(it->seq, 1);
    it = receipt_item(r, e2c);
    assert_non_null(it);
    assert_int_equal(it->resident, COMEM_GIB);
    assert_int_equal(it->seq, 1);
    /* The census from inside the callback shrank an entry of the asked holder: the receipt is its
       census (e1 listed first, at its new sequence), no frame of its own went before it. */
    int ri = mock_find(g_mock, COMEM_MSG_RECEIPT, from);
    for (size_t i = from; i < (size_t)ri; i++)
        assert_int_not_equal(mock_at(g_mock, i)->msg.type, COMEM_MSG_CENSUS);
    assert_int_equal(r->items[0].entry_id, e1c);

    pthread_mutex_lock(&s.mu);
    assert_int_equal(s.calls, 1);
    assert_false(pthread_equal(s.thread, pthread_self()));
    assert_int_equal(s.holder, h);
    assert_int_equal(s.kind, COMEM_RELEASE_BYTES);
    assert_int_equal(s.bytes, 3 * COMEM_GIB);
    assert_int_equal(s.n, 1); /* the entry the client does not know is left out */
    assert_int_equal(s.entries[0], e1);
    assert_int_equal(s.amounts[0], 3 * COMEM_GIB);
    assert_int_equal(s.set_rc, COMEM_OK);
    assert_int_equal(s.admit_rc, COMEM_OK); /* it waited; the service thread delivered the reply */
    /* One that grows an entry could be refused for room: it goes on its own, before the receipt. */
    s.set_entry = e2;
    s.set_resident = 2 * COMEM_GIB;
    s.give = 0;
    pthread_mutex_unlock(&s.mu);
    from = mock_count(g_mock);
    r = ask(g_mock, 40, hc, COMEM_ASK_RELEASE, COMEM_GIB, NULL, 0);
    assert_int_equal(r->outcome, COMEM_RECEIPT_DONE);
    int ci = mock_find(g_mock, COMEM_MSG_CENSUS, from);
    assert_true((size_t)ci < (size_t)mock_find(g_mock, COMEM_MSG_RECEIPT, from));
    assert_int_equal(mock_at(g_mock, (size_t)ci)->msg.u.census.items[0].entry_id, e2c);
    assert_int_equal(mock_at(g_mock, (size_t)ci)->msg.u.census.items[0].resident, 2 * COMEM_GIB);
    it = receipt_item(r, e2c);
    assert_non_null(it);
    assert_int_equal(it->resident, 2 * COMEM_GIB);
    pthread_mutex_lock(&s.mu);
    assert_int_equal(s.set_rc, COMEM_OK);
    s.set_entry = 0;
    pthread_mutex_unlock(&s.mu);

    /* Idle and pin asks map to their kinds; an error from the callback is an ERROR receipt. */
    r = ask(g_mock, 42, hc, COMEM_ASK_IDLE, 0, NULL, 0);
    assert_int_equal(r->outcome, COMEM_RECEIPT_DONE);
    pthread_mutex_lock(&s.mu);
    assert_int_equal(s.kind, COMEM_RELEASE_IDLE);
    assert_int_equal(s.n, 0);
    s.ret = COMEM_EIO;
    s.give = -5;
    pthread_mutex_unlock(&s.mu);
    r = ask(g_mock, 43, hc, COMEM_ASK_PINS, 10, NULL, 0);
    assert_int_equal(r->outcome, COMEM_RECEIPT_ERROR);
    assert_int_equal(r->freed, 0);
    pthread_mutex_lock(&s.mu);
    assert_int_equal(s.kind, COMEM_RELEASE_PINS);
    s.ret = COMEM_EBUSY;
    s.give = 0;
    pthread_mutex_unlock(&s.mu);
    r = ask(g_mock, 44, hc, COMEM_ASK_RELEASE, 10, NULL, 0);
    assert_int_equal(r->outcome, COMEM_RECEIPT_BUSY);

    /* An ask for a holder this client does not have. */
    int before = rel_calls(&s);
    r = ask(g_mock, 45, 987654, COMEM_ASK_RELEASE, 10, NULL, 0);
    assert_int_equal(r->outcome, COMEM_RECEIPT_ERROR);
    assert_int_equal(r->n, 0);
    assert_int_equal(rel_calls(&s), before);
    comem_client_close(c);
    pthread_mutex_destroy(&s.mu);
}

static void test_busy_holders(void **state)
{
    (void)state;
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    comem_client *c = open_up(COMEM_CLIENT_WORKER, "w");
    rel_state sa, sb;
    rel_init(&sa, c);
    rel_init(&sb, c);
    uint64_t ac, bc, cc;
    uint64_t a = add_holder(c, "models", COMEM_ANSWERS_RELEASE, &sa, &ac);
    uint64_t b = add_holder(c, "pager", COMEM_ANSWERS_RELEASE | COMEM_RELEASES_WHILE_BUSY, &sb, &bc);
    (void)add_holder(c, "raw", 0, NULL, &cc);
    pthread_mutex_lock(&sb.mu);
    sb.give = 42;
    pthread_mutex_unlock(&sb.mu);

    assert_int_equal(comem_holder_busy(c, a, 1, "p"), COMEM_OK);
    assert_int_equal(comem_holder_busy(c, b, 1, "p"), COMEM_OK);
    const comem_msg_receipt *r = ask(g_mock, 1, ac, COMEM_ASK_RELEASE, COMEM_GIB, NULL, 0);
    assert_int_equal(r->outcome, COMEM_RECEIPT_BUSY);
    assert_int_equal(rel_calls(&sa), 0);
    r = ask(g_mock, 2, bc, COMEM_ASK_RELEASE, COMEM_GIB, NULL, 0);
    assert_int_equal(r->outcome, COMEM_RECEIPT_DONE); /* a pager releases while busy */
    assert_int_equal(r->freed, 42);
    assert_int_equal(rel_calls(&sb), 1);
    /* ...but it is not idle: an idle ask that reaches it computing is answered busy, uncalled. */
    r = ask(g_mock, 7, bc, COMEM_ASK_IDLE, COMEM_GIB, NULL, 0);
    assert_int_equal(r->outcome, COMEM_RECEIPT_BUSY);
    assert_int_equal(rel_calls(&sb), 1);
    r = ask(g_mock, 3, cc, COMEM_ASK_RELEASE, COMEM_GIB, NULL, 0);
    assert_int_equal(r->outcome, COMEM_RECEIPT_ERROR); /* no callback */

    /* Not busy any more: called. The whole process busy: busy again. */
    assert_int_equal(comem_holder_busy(c, a, 0, NULL), COMEM_OK);
    r = ask(g_mock, 4, ac, COMEM_ASK_RELEASE, COMEM_GIB, NULL, 0);
    assert_int_equal(r->outcome, COMEM_RECEIPT_DONE);
    assert_int_equal(rel_calls(&sa), 1);
    assert_int_equal(comem_holder_busy(c, 0, 1, "whole"), COMEM_OK);
    r = ask(g_mock, 5, ac, COMEM_ASK_RELEASE, COMEM_GIB, NULL, 0);
    assert_int_equal(r->outcome, COMEM_RECEIPT_BUSY);
    assert_int_equal(rel_calls(&sa), 1);
    r = ask(g_mock, 6, bc, COMEM_ASK_RELEASE, COMEM_GIB, NULL, 0);
    assert_int_equal(r->outcome, COMEM_RECEIPT_DONE);
    comem_client_close(c);
    pthread_mutex_destroy(&sa.mu);
    pthread_mutex_destroy(&sb.mu);
}

/* A touch is one TOUCH frame naming the coordinator's id, never waited on; nothing for an unknown holder. */
static void test_touch(void **state)
{
    (void)state;
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    comem_client *c = open_up(COMEM_CLIENT_WORKER, "w");
    uint64_t hc;
    uint64_t h = add_holder(c, "pager", 0, NULL, &hc);
    size_t from = mock_count(g_mock);
    assert_int_equal(comem_holder_touch(c, h), COMEM_OK);
    assert_int_equal(comem_holder_touch(c, h), COMEM_OK);
    const comem_msg *m = expect_at(g_mock, from, COMEM_MSG_TOUCH);
    assert_int_equal(m->u.id.id, hc);
    m = expect_at(g_mock, from + 1, COMEM_MSG_TOUCH);
    assert_int_equal(m->u.id.id, hc);
    assert_int_equal(comem_holder_touch(c, 424242), COMEM_ENOENT);
    assert_int_equal(comem_holder_touch(NULL, h), COMEM_EINVAL);
    /* The link still works: a round trip after the touches is answered as usual. */
    assert_int_equal(comem_holder_busy(c, h, 1, NULL), COMEM_OK);
    assert_int_equal(mock_count_type(g_mock, COMEM_MSG_TOUCH, from), 2);
    comem_client_close(c);
}

static void test_callback_registers(void **state)
{
    (void)state;
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    comem_client *c = open_up(COMEM_CLIENT_WORKER, "w");
    rel_state s;
    rel_init(&s, c);
    uint64_t hc;
    (void)add_holder(c, "models", COMEM_ANSWERS_RELEASE, &s, &hc);
    pthread_mutex_lock(&s.mu);
    s.add_inside = true;
    pthread_mutex_unlock(&s.mu);
    size_t from = mock_count(g_mock);
    const comem_msg_receipt *r = ask(g_mock, 5, hc, COMEM_ASK_RELEASE, 1, NULL, 0);
    assert_int_equal(r->outcome, COMEM_RECEIPT_DONE);
    pthread_mutex_lock(&s.mu);
    assert_int_equal(s.add_rc, COMEM_OK);
    pthread_mutex_unlock(&s.mu);
    /* Each call went out in order: the holder, its entry (waiting for the holder's id), then
       the entry's new residency as a census. */
    const logged *h = mock_at(g_mock, (size_t)mock_find(g_mock, COMEM_MSG_HOLDER_ADD, from));
    assert_string_equal(h->msg.u.holder_add.name, "inner");
    int ei = mock_find(g_mock, COMEM_MSG_ENTRY_ADD, from);
    const logged *e = mock_at(g_mock, (size_t)ei);
    assert_string_equal(e->msg.u.entry_add.name, "inner-e");
    assert_int_equal(e->msg.u.entry_add.holder_id, h->replied_id);
    assert_int_equal(e->msg.u.entry_add.resident, 50);
    const logged *cs = mock_at(g_mock, (size_t)mock_find(g_mock, COMEM_MSG_CENSUS, (size_t)ei));
    assert_int_equal(cs->msg.u.census.items[0].resident, 60);
    assert_int_equal(mock_count_type(g_mock, COMEM_MSG_HOLDER_ADD, from), 1);
    assert_int_equal(mock_count_type(g_mock, COMEM_MSG_ENTRY_ADD, from), 1);
    comem_client_close(c);
    pthread_mutex_destroy(&s.mu);
}

/* The index of the ENTRY_ADD (or HOLDER_ADD) named `name` on connection conn. */
static const logged *find_add(mock *m, uint16_t type, const char *name, int conn)
{
    const logged *found = NULL;
    int n = 0;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n_log; i++) {
        const logged *lg = m->log[i];
        if (lg->conn != conn || lg->msg.type != type)
            continue;
        const char *nm = type == COMEM_MSG_HOLDER_ADD ? lg->msg.u.holder_add.name : lg->msg.u.entry_add.name;
        if (!strcmp(nm, name)) {
            found = lg;
            n++;
        }
    }
    pthread_mutex_unlock(&m->mu);
    assert_int_equal(n, 1); /* exactly once: nothing is booked twice */
    return found;
}

static void test_reconnect_reregisters(void **state)
{
    (void)state;
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    comem_client *c = open_flags(COMEM_CLIENT_WORKER, "w", 0);
    rel_state s;
    rel_init(&s, c);
    uint64_t ac, bc, e1c, e2c, e3c;
    uint64_t a = add_holder(c, "models", COMEM_ANSWERS_RELEASE, &s, &ac);
    uint64_t b = add_holder(c, "pins", COMEM_ANSWERS_PINS | COMEM_RELEASES_WHILE_BUSY, &s, &bc);
    uint64_t e1 = add_entry(c, a, "unet", 4 * COMEM_GIB, 4 * COMEM_GIB, &e1c);
    uint64_t e2 = add_entry(c, a, "clip", 2 * COMEM_GIB, 2 * COMEM_GIB, &e2c);
    uint64_t e3 = add_entry(c, b, "buf", COMEM_GIB, 0, &e3c);
    assert_int_equal(comem_entry_set_resident(c, e1, 3 * COMEM_GIB), COMEM_OK); /* seq 1 */
    assert_int_equal(comem_holder_report(c, a, 8 * COMEM_MIB, 16 * COMEM_MIB), COMEM_OK);
    assert_int_equal(comem_holder_busy(c, a, 1, "p7"), COMEM_OK);
    assert_int_equal(comem_pin_acquire(c, b, 256 * COMEM_MIB, NULL), COMEM_OK);
    uint64_t grant = 0;
    assert_int_equal(comem_admit(c, 0, a, COMEM_GIB, 0, 0, NULL, 0, -1, &grant, NULL), COMEM_OK);

    /* The coordinator goes away: the client decides locally meanwhile. */
    mock_cmd(g_mock, CMD_DOWN);
    wait_connected(c, 0);
    assert_int_equal(comem_entry_set_resident(c, e1, 2 * COMEM_GIB), COMEM_OK); /* seq 2, only in the mirror */
    assert_int_equal(comem_entry_remove(c, e2), COMEM_OK);
    uint64_t e4 = 0;
    assert_int_equal(comem_entry_add(c, b, "late", COMEM_GIB, 512 * COMEM_MIB, 0, &e4), COMEM_OK);
    uint64_t lg2 = 0;
    assert_int_equal(comem_admit(c, 0, 0, 1, 0, 0, NULL, 0, -1, &lg2, NULL), COMEM_OK); /* local, sim card */
    assert_int_equal(comem_pressure(c, 0, 1, -1, NULL), COMEM_OK);

    /* A new coordinator (new ids) comes up on the same socket. */
    pthread_mutex_lock(&g_mock->mu);
    g_mock->next_holder = 5000;
    g_mock->next_entry = 6000;
    size_t from = g_mock->n_log;
    pthread_mutex_unlock(&g_mock->mu);
    mock_cmd(g_mock, CMD_UP);
    wait_connected(c, 1);

    const comem_msg *h = expect_at(g_mock, from, COMEM_MSG_HELLO);
    assert_int_equal(h->u.hello.caps, COMEM_CAP_RELEASE | COMEM_CAP_PIN_RELEASE | COMEM_CAP_WHILE_BUSY);
    int conn = mock_at(g_mock, from)->conn;
    assert_int_equal(conn, 2);
    assert_int_equal(mock_count_type(g_mock, COMEM_MSG_HOLDER_ADD, from), 2);
    assert_int_equal(mock_count_type(g_mock, COMEM_MSG_ENTRY_ADD, from), 3);
    const logged *na = find_add(g_mock, COMEM_MSG_HOLDER_ADD, "models", conn);
    const logged *nb = find_add(g_mock, COMEM_MSG_HOLDER_ADD, "pins", conn);
    assert_int_equal(na->msg.u.holder_add.flags, COMEM_CAP_RELEASE);
    const logged *n1 = find_add(g_mock, COMEM_MSG_ENTRY_ADD, "unet", conn);
    const logged *n3 = find_add(g_mock, COMEM_MSG_ENTRY_ADD, "buf", conn);
    const logged *n4 = find_add(g_mock, COMEM_MSG_ENTRY_ADD, "late", conn);
    assert_int_equal(n1->msg.u.entry_add.holder_id, na->replied_id);
    assert_int_equal(n1->msg.u.entry_add.resident, 2 * COMEM_GIB); /* the residency now */
    assert_int_equal(n1->msg.u.entry_add.size, 4 * COMEM_GIB);
    assert_int_equal(n3->msg.u.entry_add.holder_id, nb->replied_id);
    assert_int_equal(n4->msg.u.entry_add.holder_id, nb->replied_id);
    assert_int_equal(n4->msg.u.entry_add.resident, 512 * COMEM_MIB);
    /* The holder report, busy mark and pins follow. */
    int ri = mock_find(g_mock, COMEM_MSG_CENSUS, from);
    const comem_msg *m = &mock_at(g_mock, (size_t)ri)->msg;
    assert_int_equal(m->u.census.holder_id, na->replied_id);
    assert_int_equal(m->u.census.has, COMEM_CENSUS_PINNED | COMEM_CENSUS_OVERHEAD);
    assert_int_equal(m->u.census.pinned, 8 * COMEM_MIB);
    assert_int_equal(m->u.census.overhead, 16 * COMEM_MIB);
    m = &mock_at(g_mock, (size_t)mock_find(g_mock, COMEM_MSG_ACTIVITY, from))->msg;
    assert_int_equal(m->u.activity.holder_id, na->replied_id);
    assert_int_equal(m->u.activity.busy, 1);
    assert_string_equal(m->u.activity.prompt, "p7");
    m = &mock_at(g_mock, (size_t)mock_find(g_mock, COMEM_MSG_PIN_ACQUIRE, from))->msg;
    assert_int_equal(m->u.pin.holder_id, nb->replied_id);
    assert_int_equal(m->u.pin.bytes, 256 * COMEM_MIB);
    assert_int_equal(mock_count_type(g_mock, COMEM_MSG_PIN_ACQUIRE, from), 1);
    assert_int_equal(mock_count_type(g_mock, COMEM_MSG_ACTIVITY, from), 1);
    /* Last, the grant from before the loss is claimed again (the local one booked nothing anywhere). */
    assert_int_equal(mock_count_type(g_mock, COMEM_MSG_RECLAIM, from), 1);
    int gi = mock_find(g_mock, COMEM_MSG_RECLAIM, from);
    const logged *ng = mock_at(g_mock, (size_t)gi);
    assert_int_equal(ng->msg.u.reclaim.holder_id, na->replied_id);
    assert_int_equal(ng->msg.u.reclaim.bytes, COMEM_GIB);
    assert_int_equal(ng->msg.u.reclaim.device, 0);
    assert_true(gi > mock_find(g_mock, COMEM_MSG_PIN_ACQUIRE, from));

    /* The client's ids keep working, now with the new coordinator's ids. */
    from = mock_count(g_mock);
    assert_int_equal(comem_entry_set_resident(c, e1, COMEM_GIB), COMEM_OK);
    m = expect_at(g_mock, from, COMEM_MSG_CENSUS);
    assert_int_equal(m->u.census.holder_id, na->replied_id);
    assert_int_equal(m->u.census.items[0].entry_id, n1->replied_id);
    assert_int_equal(m->u.census.items[0].seq, 3);
    pthread_mutex_lock(&s.mu);
    s.give = 7;
    pthread_mutex_unlock(&s.mu);
    const comem_msg_receipt *r = ask(g_mock, 9, nb->replied_id, COMEM_ASK_PINS, 1, NULL, 0);
    assert_int_equal(r->outcome, COMEM_RECEIPT_DONE);
    assert_int_equal(r->n, 2);
    assert_non_null(receipt_item(r, n3->replied_id));
    assert_non_null(receipt_item(r, n4->replied_id));
    pthread_mutex_lock(&s.mu);
    assert_int_equal(s.holder, b);
    pthread_mutex_unlock(&s.mu);

    /* The claimed grant completes under its new id; a local one is nothing to the coordinator. */
    from = mock_count(g_mock);
    assert_int_equal(comem_grant_done(c, grant, e1, COMEM_GIB), COMEM_OK);
    m = expect_at(g_mock, from, COMEM_MSG_GRANT_DONE);
    assert_int_equal(m->u.grant_done.grant_id, ng->replied_id);
    assert_int_equal(m->u.grant_done.entry_id, n1->replied_id);
    from = mock_count(g_mock);
    assert_int_equal(comem_grant_done(c, lg2, 0, 0), COMEM_OK);
    assert_int_equal(comem_entry_remove(c, e3), COMEM_OK);
    m = expect_at(g_mock, from, COMEM_MSG_ENTRY_REMOVE); /* no GRANT_DONE went out before it */
    assert_int_equal(m->u.id.id, n3->replied_id);
    assert_int_equal(comem_entry_set_resident(c, e2, 0), COMEM_ENOENT);
    comem_client_close(c);
    pthread_mutex_destroy(&s.mu);
}

static void test_pending_fail_when_server_dies(void **state)
{
    (void)state;
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    comem_client *c = open_up(COMEM_CLIENT_WORKER, "w");
    MOCK_SET(g_mock, close_on_request, true);
    int64_t freed = -1;
    int64_t t0 = now_ms();
    assert_int_equal(comem_pressure(c, 0, COMEM_GIB, 3000, &freed), COMEM_ECLOSED);
    assert_true(now_ms() - t0 < 2000);
    /* It comes back by itself (the same mock answers the reconnect). */
    wait_connected(c, 1);
    MOCK_SET(g_mock, pressure_freed, 5);
    assert_int_equal(comem_pressure(c, 0, COMEM_GIB, 3000, &freed), COMEM_OK);
    assert_int_equal(freed, 5);

    /* A registration in flight when the connection drops still succeeds: it is in the
       mirror and is registered on the next connection. */
    MOCK_SET(g_mock, close_on_request, true);
    size_t from = mock_count(g_mock);
    uint64_t h = 0;
    assert_int_equal(comem_holder_add(c, "models", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &h), COMEM_OK);
    wait_connected(c, 1);
    int hi = mock_find(g_mock, COMEM_MSG_HELLO, from);
    int ai = mock_find(g_mock, COMEM_MSG_HOLDER_ADD, (size_t)hi);
    assert_int_equal(mock_count_type(g_mock, COMEM_MSG_HOLDER_ADD, (size_t)hi), 1);
    uint64_t e = 0;
    from = mock_count(g_mock);
    assert_int_equal(comem_entry_add(c, h, "x", 10, 5, 0, &e), COMEM_OK);
    const comem_msg *m = expect_at(g_mock, from, COMEM_MSG_ENTRY_ADD);
    assert_int_equal(m->u.entry_add.holder_id, mock_at(g_mock, (size_t)ai)->replied_id);
    comem_client_close(c);
}

static void test_timeouts(void **state)
{
    (void)state;
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    comem_client *c = open_up(COMEM_CLIENT_WORKER, "w");
    comem_client_set_timeout(c, 600);
    MOCK_SET(g_mock, silent, true);

    size_t from = mock_count(g_mock);
    int64_t t0 = now_ms();
    assert_int_equal(comem_pressure(c, 0, 1, -1, NULL), COMEM_ETIMEDOUT);
    int64_t took = now_ms() - t0;
    assert_true(took >= 590 && took < 3000);
    t0 = now_ms();
    assert_int_equal(comem_pressure(c, 0, 1, 50, NULL), COMEM_ETIMEDOUT); /* its own timeout wins */
    took = now_ms() - t0;
    assert_true(took >= 45 && took < 500);
    char *json = NULL;
    assert_int_equal(comem_status_json(c, &json), COMEM_ETIMEDOUT);
    assert_null(json);
    uint32_t pressure_req = mock_at(g_mock, from)->msg.request_id;

    /* A late reply for a timed-out call is dropped. */
    comem_msg late;
    memset(&late, 0, sizeof late);
    late.type = COMEM_MSG_PRESSURE_REPLY;
    late.request_id = pressure_req;
    mock_send(g_mock, &late);

    /* A late grant is given back at once. */
    from = mock_count(g_mock);
    assert_int_equal(comem_admit(c, 0, 0, COMEM_GIB, 0, 0, NULL, 0, 100, NULL, NULL), COMEM_ETIMEDOUT);
    memset(&late, 0, sizeof late);
    late.type = COMEM_MSG_ADMIT_REPLY;
    late.request_id = expect_at(g_mock, from, COMEM_MSG_ADMIT)->request_id;
    late.u.admit_reply.granted = 1;
    late.u.admit_reply.grant_id = 4711;
    mock_send(g_mock, &late);
    const comem_msg *m = &mock_at(g_mock, (size_t)mock_find(g_mock, COMEM_MSG_GRANT_DONE, from))->msg;
    assert_int_equal(m->u.grant_done.grant_id, 4711);
    assert_int_equal(m->u.grant_done.entry_id, 0);

    /* A holder add that timed out is not in the mirror; its late id is given back. */
    from = mock_count(g_mock);
    uint64_t h = 0;
    assert_int_equal(comem_holder_add(c, "slow", 0, COMEM_KIND_MODELS, 0, NULL, NULL, &h), COMEM_ETIMEDOUT);
    memset(&late, 0, sizeof late);
    late.type = COMEM_MSG_ID_REPLY;
    late.request_id = expect_at(g_mock, from, COMEM_MSG_HOLDER_ADD)->request_id;
    late.u.id.id = 4242;
    mock_send(g_mock, &late);
    m = &mock_at(g_mock, (size_t)mock_find(g_mock, COMEM_MSG_HOLDER_REMOVE, from))->msg;
    assert_int_equal(m->u.id.id, 4242);

    /* Still connected and answering once the coordinator is. */
    MOCK_SET(g_mock, silent, false);
    comem_client_set_timeout(c, 3000);
    assert_int_equal(comem_client_connected(c), 1);
    assert_int_equal(comem_pressure(c, 0, 1, -1, NULL), COMEM_OK);
    assert_int_equal(comem_client_connected(c), 1);
    comem_client_close(c);
}

static void test_status_chunks(void **state)
{
    (void)state;
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    comem_client *c = open_up(COMEM_CLIENT_TOOL, "status");
    const char *small = "{\"devices\":[{\"index\":0,\"free\":123456789}],\"sessions\":[\"host\",\"sam3\"]}";
    MOCK_SET(g_mock, status_text, small);
    MOCK_SET(g_mock, status_chunk, 16); /* five chunks */
    char *json = NULL;
    assert_int_equal(comem_status_json(c, &json), COMEM_OK);
    assert_string_equal(json, small);
    comem_free(json);

    /* Longer than one frame can carry. */
    size_t big_len = 3 * COMEM_WIRE_CHUNK_MAX + 17;
    char *big = malloc(big_len + 1);
    for (size_t i = 0; i < big_len; i++)
        big[i] = (char)('a' + i % 26);
    big[big_len] = '\0';
    MOCK_SET(g_mock, status_text, big);
    MOCK_SET(g_mock, status_chunk, 0);
    json = NULL;
    assert_int_equal(comem_status_json(c, &json), COMEM_OK);
    assert_int_equal(strlen(json), big_len);
    assert_memory_equal(json, big, big_len);
    comem_free(json);

    /* Empty text is one empty chunk. */
    MOCK_SET(g_mock, status_text, "");
    assert_int_equal(comem_status_json(c, &json), COMEM_OK);
    assert_string_equal(json, "");
    comem_free(json);
    assert_int_equal(comem_status_json(c, NULL), COMEM_EINVAL);
    comem_client_close(c);
    MOCK_SET(g_mock, status_text, NULL);
    free(big);
}

static atomic_int g_local_lines, g_connect_lines;

static void count_sink(int level, const char *line, void *user)
{
    (void)level;
    (void)user;
    if (strstr(line, "deciding locally"))
        atomic_fetch_add(&g_local_lines, 1);
    if (strstr(line, "connected to the coordinator"))
        atomic_fetch_add(&g_connect_lines, 1);
}

static void test_local_mode(void **state)
{
    (void)state;
    char dev[300];
    snprintf(dev, sizeof dev, "sim:8GiB:path=%s/card", g_dir);
    setenv("COMEM_DEVICE", dev, 1);
    atomic_store(&g_local_lines, 0);
    atomic_store(&g_connect_lines, 0);
    comem_log_set_level(COMEM_LOG_INFO); /* the lines counted are info lines, whatever COMEM_LOG says */
    comem_log_set_sink(count_sink, NULL);

    comem_client *c = NULL;
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_WORKER, "solo", -1, COMEM_OPEN_NO_LOCAL, &c),
                     COMEM_ECLOSED);
    assert_null(c);
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_WORKER, "solo", -1, 0, &c), COMEM_OK);
    assert_int_equal(comem_client_connected(c), 0);
    assert_int_equal(atomic_load(&g_local_lines), 1);

    /* The sim card: 8 GiB less its 256 MiB driver slice, nothing allocated. */
    int64_t free_now = 8 * COMEM_GIB - 256 * COMEM_MIB;
    int64_t reserve = 400 * COMEM_MIB;
    int64_t min_inf = (int64_t)(0.8 * 1024.0 * 1024.0 * 1024.0 + (double)reserve);
    int64_t w = COMEM_GIB, inf = 2 * COMEM_GIB, cast = 64 * COMEM_MIB;
    int64_t want = (int64_t)((double)w * 1.1) + comem_max(min_inf, inf + cast + reserve);
    assert_int_equal(want, comem_ask_target(w, 1.1, min_inf, reserve, inf + cast));
    uint64_t grant = 0;
    int64_t short_by = -1;
    assert_int_equal(comem_admit(c, 0, 0, w, inf, cast, NULL, 0, -1, &grant, &short_by), COMEM_OK);
    assert_true(grant != 0);
    assert_int_equal(short_by, 0);
    int64_t need, fb, fa, freed;
    int asked, busy;
    comem_admit_details(c, &need, &fb, &fa, &freed, &asked, &busy);
    assert_int_equal(need, want);
    assert_int_equal(fb, free_now);
    assert_int_equal(fa, free_now);
    assert_int_equal(freed, 0);
    assert_int_equal(asked, 0);
    assert_int_equal(busy, 0);
    assert_int_equal(comem_grant_done(c, grant, 0, 0), COMEM_OK);

    /* Small weights: the minimum inference memory decides. */
    w = 7 * COMEM_GIB;
    want = (int64_t)((double)w * 1.1) + min_inf;
    assert_int_equal(comem_admit(c, 0, 0, w, 0, 0, NULL, 0, -1, &grant, &short_by), COMEM_ENOSPC);
    assert_int_equal(short_by, want - free_now);
    comem_admit_details(c, &need, NULL, NULL, NULL, NULL, NULL);
    assert_int_equal(need, want);
    assert_int_equal(comem_admit(c, 3, 0, 1, 0, 0, NULL, 0, -1, NULL, NULL), COMEM_ENODEV);

    int64_t r = 0, head = 0, fr = -1;
    assert_int_equal(comem_reserve(c, 0, &r, &head), COMEM_OK);
    assert_int_equal(r, reserve);
    assert_int_equal(head, COMEM_PAGER_DEFAULT_HEADROOM);
    assert_int_equal(comem_pressure(c, 0, COMEM_GIB, -1, &fr), COMEM_OK);
    assert_int_equal(fr, 0);
    assert_int_equal(comem_pin_acquire(c, 0, 128 * COMEM_MIB, NULL), COMEM_OK);
    char *json = NULL;
    assert_int_equal(comem_status_json(c, &json), COMEM_OK);
    assert_non_null(strstr(json, "\"mode\":\"local\""));
    assert_non_null(strstr(json, "\"name\":\"solo\""));
    comem_free(json);

    /* Registration works on the mirror alone. */
    rel_state s;
    rel_init(&s, c);
    uint64_t h = 0, e = 0;
    assert_int_equal(comem_holder_add(c, "models", 0, COMEM_KIND_MODELS, COMEM_ANSWERS_RELEASE, release_cb, &s, &h),
                     COMEM_OK);
    assert_int_equal(comem_entry_add(c, h, "unet", 2 * COMEM_GIB, COMEM_GIB, 0, &e), COMEM_OK);
    assert_int_equal(comem_entry_set_resident(c, e, COMEM_GIB / 2), COMEM_OK);
    assert_int_equal(comem_holder_busy(c, h, 1, NULL), COMEM_OK);
    assert_int_equal(comem_holder_busy(c, h, 0, NULL), COMEM_OK);

    /* Background retries do not log again. */
    usleep(1200 * 1000);
    assert_int_equal(atomic_load(&g_local_lines), 1);
    assert_int_equal(comem_client_connected(c), 0);

    /* A coordinator appears: the client connects within about a second and registers all. */
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    wait_connected(c, 1);
    /* The line is written just after the link goes up (outside the lock): give it a moment. */
    for (int i = 0; i < 100 && atomic_load(&g_connect_lines) == 0; i++)
        usleep(10 * 1000);
    assert_int_equal(atomic_load(&g_connect_lines), 1);
    expect_at(g_mock, 0, COMEM_MSG_HELLO);
    const logged *nh = find_add(g_mock, COMEM_MSG_HOLDER_ADD, "models", 1);
    const logged *ne = find_add(g_mock, COMEM_MSG_ENTRY_ADD, "unet", 1);
    assert_int_equal(ne->msg.u.entry_add.holder_id, nh->replied_id);
    assert_int_equal(ne->msg.u.entry_add.resident, COMEM_GIB / 2);
    const comem_msg *m = &mock_at(g_mock, (size_t)mock_find(g_mock, COMEM_MSG_PIN_ACQUIRE, 0))->msg;
    assert_int_equal(m->u.pin.holder_id, 0);
    assert_int_equal(m->u.pin.bytes, 128 * COMEM_MIB);
    assert_int_equal(mock_count_type(g_mock, COMEM_MSG_ACTIVITY, 0), 0); /* busy went back to 0 */
    /* From now on decisions are the coordinator's. */
    assert_int_equal(comem_reserve(c, 0, &r, NULL), COMEM_OK);
    assert_int_equal(r, 2 * COMEM_GIB);
    comem_client_close(c);
    comem_log_set_sink(NULL, NULL);
    assert_int_equal(atomic_load(&g_local_lines), 1);
    pthread_mutex_destroy(&s.mu);
}

static void test_local_reserve_base_and_args(void **state)
{
    (void)state;
    char dev[300];
    snprintf(dev, sizeof dev, "sim:8GiB:path=%s/card2", g_dir);
    setenv("COMEM_DEVICE", dev, 1);
    comem_client *c = NULL;
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_HOST, "host", COMEM_GIB, 0, &c), COMEM_OK);
    int64_t r = 0, head = 0;
    assert_int_equal(comem_reserve(c, 0, &r, &head), COMEM_OK);
    assert_int_equal(r, COMEM_GIB);
    assert_int_equal(head, COMEM_PAGER_DEFAULT_HEADROOM);
    /* A 0 reserve is a valid operator choice: the minimum inference is then 0.8 GiB. */
    comem_client *z = NULL;
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_HOST, "z", 0, 0, &z), COMEM_OK);
    assert_int_equal(comem_admit(z, 0, 0, 0, 0, 0, NULL, 0, -1, NULL, NULL), COMEM_OK);
    int64_t need = 0;
    comem_admit_details(z, &need, NULL, NULL, NULL, NULL, NULL);
    assert_int_equal(need, (int64_t)(0.8 * 1024.0 * 1024.0 * 1024.0));
    /* Details belong to the client that made the admission on this thread. */
    comem_admit_details(c, &need, NULL, NULL, NULL, NULL, NULL);
    assert_int_equal(need, 0);
    comem_client_close(z);

    comem_client *x = NULL;
    char longname[COMEM_WIRE_NAME_MAX + 1];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(comem_client_open(g_sock, 0, "x", -1, 0, &x), COMEM_EINVAL);
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_HOST, longname, -1, 0, &x), COMEM_EINVAL);
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_HOST, "x", -1, 0x100, &x), COMEM_EINVAL);
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_HOST, "x", -1, 0, NULL), COMEM_EINVAL);
    char longpath[200];
    memset(longpath, 'p', sizeof longpath - 1);
    longpath[sizeof longpath - 1] = '\0';
    assert_int_equal(comem_client_open(longpath, COMEM_CLIENT_HOST, "x", -1, 0, &x), COMEM_ERANGE);
    char longtoken[COMEM_WIRE_TEXT_MAX + 1];
    memset(longtoken, 't', sizeof longtoken - 1);
    longtoken[sizeof longtoken - 1] = '\0';
    setenv("COMEM_TOKEN", longtoken, 1);
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_HOST, "x", -1, 0, &x), COMEM_EINVAL);
    unsetenv("COMEM_TOKEN");
    assert_null(x);

    assert_int_equal(comem_client_connected(NULL), 0);
    comem_client_set_timeout(NULL, 5);
    comem_client_close(NULL);
    assert_int_equal(comem_status_json(NULL, NULL), COMEM_EINVAL);
    assert_int_equal(comem_pressure(c, 0, -1, -1, NULL), COMEM_EINVAL);
    assert_int_equal(comem_pin_release(c, 0, -1), COMEM_EINVAL);
    assert_int_equal(comem_pin_release(c, 424242, 1), COMEM_ENOENT);
    assert_int_equal(comem_holder_remove(NULL, 1), COMEM_EINVAL);
    assert_int_equal(comem_entry_set_resident(NULL, 1, 0), COMEM_EINVAL);
    assert_int_equal(comem_holder_busy(NULL, 0, 1, NULL), COMEM_EINVAL);
    comem_client_close(c);
}

/* ---- the embedded case, behind weak stubs until src/coord provides the real ones ---- */

static mock *g_embed;
static atomic_int g_starts, g_stops;
static int g_start_rc;

__attribute__((weak)) int comem_coord_start(const char *socket_path, const char *device_spec, comem_coord **out)
{
    (void)device_spec;
    atomic_fetch_add(&g_starts, 1);
    g_embed = malloc(sizeof *g_embed);
    mock_init(g_embed);
    if (mock_start(g_embed, socket_path) != 0)
        return COMEM_EIO;
    *out = (comem_coord *)g_embed;
    return g_start_rc;
}

__attribute__((weak)) void comem_coord_stop(comem_coord *coord)
{
    atomic_fetch_add(&g_stops, 1);
    mock_stop((mock *)coord);
    free(coord);
    g_embed = NULL;
}

static void test_embedded(void **state)
{
    (void)state;
    atomic_store(&g_starts, 0);
    atomic_store(&g_stops, 0);
    g_start_rc = COMEM_OK;
    comem_client *c = NULL;
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_HOST, "host", -1, COMEM_OPEN_EMBED, &c), COMEM_OK);
    assert_int_equal(comem_client_connected(c), 1);
    bool stubbed = atomic_load(&g_starts) == 1; /* else the real coordinator was linked */
    if (stubbed)
        expect_at(g_embed, 0, COMEM_MSG_HELLO);
    comem_client_close(c);
    if (!stubbed)
        return;
    assert_int_equal(atomic_load(&g_stops), 1); /* it stops the coordinator it started */

    /* Someone else won the race: connect to theirs, and leave it running at close. */
    g_start_rc = COMEM_EEXIST;
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_HOST, "host", -1, COMEM_OPEN_EMBED, &c), COMEM_OK);
    assert_int_equal(comem_client_connected(c), 1);
    assert_int_equal(atomic_load(&g_starts), 2);
    comem_client_close(c);
    assert_int_equal(atomic_load(&g_stops), 1);
    mock *theirs = g_embed;
    /* A coordinator already answering is used as it is: no start. */
    assert_int_equal(comem_client_open(g_sock, COMEM_CLIENT_HOST, "host", -1, COMEM_OPEN_EMBED, &c), COMEM_OK);
    assert_int_equal(atomic_load(&g_starts), 2);
    comem_client_close(c);
    mock_stop(theirs);
    free(theirs);
    g_embed = NULL;
}

/* ---- many threads at once (run under TSan too) ---- */

typedef struct worker_arg {
    comem_client *c;
    uint64_t entry;
    int rc;
} worker_arg;

static void *census_worker(void *p)
{
    worker_arg *a = p;
    for (int i = 1; i <= 50 && a->rc == 0; i++) {
        a->rc = comem_entry_set_resident(a->c, a->entry, i);
        if (a->rc == 0 && i % 10 == 0) {
            int64_t r;
            a->rc = comem_reserve(a->c, 0, &r, NULL);
        }
    }
    return NULL;
}

static void test_concurrent_calls(void **state)
{
    (void)state;
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    comem_client *c = open_up(COMEM_CLIENT_WORKER, "w");
    rel_state s;
    rel_init(&s, c);
    uint64_t hc;
    uint64_t h = add_holder(c, "models", COMEM_ANSWERS_RELEASE, &s, &hc);
    enum { N = 4 };
    pthread_t t[N];
    worker_arg a[N];
    uint64_t coords[N];
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "e%d", i);
        a[i] = (worker_arg){c, add_entry(c, h, name, 1000, 0, &coords[i]), 0};
    }
    size_t from = mock_count(g_mock);
    for (int i = 0; i < N; i++)
        assert_int_equal(pthread_create(&t[i], NULL, census_worker, &a[i]), 0);
    for (int k = 0; k < 10; k++)
        (void)ask(g_mock, 100 + (uint64_t)k, hc, COMEM_ASK_RELEASE, 1, NULL, 0);
    for (int i = 0; i < N; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 20;
        assert_int_equal(pthread_timedjoin_np(t[i], NULL, &ts), 0);
        assert_int_equal(a[i].rc, 0);
    }
    assert_int_equal(rel_calls(&s), 10);
    /* Per entry, the censuses arrived with sequences 1..50 in order. */
    size_t end = mock_count(g_mock);
    for (int i = 0; i < N; i++) {
        uint64_t last = 0;
        int seen = 0;
        for (size_t k = from; k < end; k++) {
            const comem_msg *m = &mock_at(g_mock, k)->msg;
            if (m->type != COMEM_MSG_CENSUS || m->u.census.items[0].entry_id != coords[i])
                continue;
            assert_true(m->u.census.items[0].seq == last + 1);
            last = m->u.census.items[0].seq;
            seen++;
        }
        assert_int_equal(seen, 50);
    }
    comem_client_close(c);
    pthread_mutex_destroy(&s.mu);
}

/* ---- the connection flaps while threads keep calling ---- */

static void *flap_worker(void *p)
{
    worker_arg *a = p;
    for (int i = 1; i <= 200 && a->rc == 0; i++) {
        a->rc = comem_entry_set_resident(a->c, a->entry, i);
        if (a->rc == 0 && i % 25 == 0)
            a->rc = comem_holder_busy(a->c, 0, i % 50 == 0, NULL);
    }
    return NULL;
}

/* Waits for the first ENTRY_ADD named `name` (any connection). */
static const logged *wait_named_add(mock *m, const char *name)
{
    struct timespec ts = deadline_in(WAIT_MS);
    pthread_mutex_lock(&m->mu);
    for (;;) {
        for (size_t i = 0; i < m->n_log; i++) {
            const logged *lg = m->log[i];
            if (lg->msg.type == COMEM_MSG_ENTRY_ADD && !strcmp(lg->msg.u.entry_add.name, name)) {
                pthread_mutex_unlock(&m->mu);
                return lg;
            }
        }
        if (pthread_cond_timedwait(&m->cv, &m->mu, &ts) != 0)
            break;
    }
    pthread_mutex_unlock(&m->mu);
    fail_msg("no ENTRY_ADD '%s' came", name);
    return NULL;
}

/* A release callback that holds on until it is let go: while it runs, other calls must get their replies. */
typedef struct held_cb {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool inside, let_go;
} held_cb;

static int held_release(void *user, uint64_t holder, int kind, int64_t bytes, const uint64_t *entries,
                        const int64_t *amounts, size_t n, int64_t *freed)
{
    (void)holder, (void)kind, (void)bytes, (void)entries, (void)amounts, (void)n;
    held_cb *h = user;
    struct timespec ts = deadline_in(20000);
    pthread_mutex_lock(&h->mu);
    h->inside = true;
    pthread_cond_broadcast(&h->cv);
    while (!h->let_go && pthread_cond_timedwait(&h->cv, &h->mu, &ts) == 0) {
    }
    h->inside = false;
    pthread_mutex_unlock(&h->mu);
    *freed = 0;
    return COMEM_OK;
}

static void *pressure_worker(void *arg)
{
    worker_arg *a = arg;
    int64_t freed = 0;
    for (int i = 0; i < 20 && a->rc == 0; i++)
        a->rc = comem_pressure(a->c, 0, COMEM_MIB, 5000, &freed) == COMEM_OK && freed == 7 ? 0 : 1;
    return NULL;
}

/*
 * While a release callback runs (here: until it is let go), the socket is read by another thread:
 * calls from other threads, several at once (one leads, the others wait for whoever reads), all get
 * their replies, and the callback is still running when they have.
 */
static void test_replies_flow_while_a_callback_runs(void **state)
{
    (void)state;
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    comem_client *c = open_up(COMEM_CLIENT_WORKER, "w");
    held_cb h = {.inside = false, .let_go = false};
    pthread_mutex_init(&h.mu, NULL);
    pthread_condattr_t ca; /* deadline_in counts on CLOCK_MONOTONIC */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h.cv, &ca);
    pthread_condattr_destroy(&ca);
    size_t from = mock_count(g_mock);
    uint64_t id = 0;
    assert_int_equal(comem_holder_add(c, "held", 0, COMEM_KIND_MODELS, COMEM_ANSWERS_RELEASE, held_release, &h, &id),
                     COMEM_OK);
    uint64_t hc = mock_at(g_mock, (size_t)mock_find(g_mock, COMEM_MSG_HOLDER_ADD, from))->replied_id;
    MOCK_SET(g_mock, pressure_freed, 7);

    comem_msg ask_msg;
    memset(&ask_msg, 0, sizeof ask_msg);
    ask_msg.type = COMEM_MSG_ASK;
    ask_msg.u.ask = (comem_msg_ask){.ask_id = 77, .holder_id = hc, .kind = COMEM_ASK_RELEASE, .bytes = 1,
                                    .deadline_ms = 30000};
    from = mock_count(g_mock);
    mock_send(g_mock, &ask_msg);
    struct timespec ts = deadline_in(WAIT_MS);
    pthread_mutex_lock(&h.mu);
    while (!h.inside && pthread_cond_timedwait(&h.cv, &h.mu, &ts) == 0) {
    }
    bool started = h.inside;
    pthread_mutex_unlock(&h.mu);
    assert_true(started);

    enum { N = 3 };
    pthread_t t[N];
    worker_arg a[N];
    for (int i = 0; i < N; i++) {
        a[i] = (worker_arg){c, 0, 0};
        assert_int_equal(pthread_create(&t[i], NULL, pressure_worker, &a[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        struct timespec jt;
        clock_gettime(CLOCK_REALTIME, &jt);
        jt.tv_sec += 20;
        assert_int_equal(pthread_timedjoin_np(t[i], NULL, &jt), 0);
        assert_int_equal(a[i].rc, 0); /* every reply came, and said what the mock said */
    }
    pthread_mutex_lock(&h.mu);
    bool still = h.inside; /* they did not wait for the callback to end */
    h.let_go = true;
    pthread_cond_broadcast(&h.cv);
    pthread_mutex_unlock(&h.mu);
    assert_true(still);
    int ri = mock_find(g_mock, COMEM_MSG_RECEIPT, from);
    assert_int_equal(mock_at(g_mock, (size_t)ri)->msg.u.receipt.ask_id, 77);
    assert_int_equal(mock_count_type(g_mock, COMEM_MSG_PRESSURE, from), N * 20);
    comem_client_close(c);
    pthread_cond_destroy(&h.cv);
    pthread_mutex_destroy(&h.mu);
}

static void test_flapping_connection(void **state)
{
    (void)state;
    assert_int_equal(mock_start(g_mock, g_sock), 0);
    comem_client *c = open_flags(COMEM_CLIENT_WORKER, "w", 0);
    uint64_t hc;
    uint64_t h = add_holder(c, "models", 0, NULL, &hc);
    enum { N = 4 };
    pthread_t t[N];
    worker_arg a[N];
    char names[N][16];
    for (int i = 0; i < N; i++) {
        uint64_t coord;
        snprintf(names[i], sizeof names[i], "f%d", i);
        a[i] = (worker_arg){c, add_entry(c, h, names[i], 1000, 0, &coord), 0};
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(pthread_create(&t[i], NULL, flap_worker, &a[i]), 0);
    for (int k = 0; k < 4; k++) {
        usleep(3000);
        mock_cmd(g_mock, CMD_DROP);
    }
    for (int i = 0; i < N; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 30;
        assert_int_equal(pthread_timedjoin_np(t[i], NULL, &ts), 0);
        assert_int_equal(a[i].rc, 0);
    }
    /* A marker added after the last drop: the connection its add arrives on is the final
       one, and once its census is logged there, every earlier frame of that connection is
       too (the resync sends residency in one census per holder, before the link is up). */
    uint64_t mark = 0;
    assert_int_equal(comem_entry_add(c, h, "mark", 10, 0, 0, &mark), COMEM_OK);
    const logged *ma = wait_named_add(g_mock, "mark");
    int last = ma->conn;
    assert_true(last >= 2);
    assert_int_equal(comem_entry_set_resident(c, mark, 1), COMEM_OK);
    bool seen = false;
    for (size_t from = 0; !seen;) {
        int ci = mock_find(g_mock, COMEM_MSG_CENSUS, from);
        const logged *lg = mock_at(g_mock, (size_t)ci);
        for (uint16_t j = 0; lg->conn == last && j < lg->msg.u.census.n; j++)
            seen |= lg->msg.u.census.items[j].entry_id == ma->replied_id;
        from = (size_t)ci + 1;
    }

    /* Per connection each record was added at most once; on the last exactly once, and what
       the coordinator believes at the end (add, then censuses by sequence) is the mirror. */
    for (int conn = 1; conn <= last; conn++) {
        int holders = 0;
        int entries[N] = {0};
        pthread_mutex_lock(&g_mock->mu);
        for (size_t k = 0; k < g_mock->n_log; k++) {
            const logged *lg = g_mock->log[k];
            if (lg->conn != conn)
                continue;
            holders += lg->msg.type == COMEM_MSG_HOLDER_ADD;
            for (int i = 0; i < N; i++)
                entries[i] += lg->msg.type == COMEM_MSG_ENTRY_ADD && !strcmp(lg->msg.u.entry_add.name, names[i]);
        }
        pthread_mutex_unlock(&g_mock->mu);
        assert_true(holders <= 1);
        for (int i = 0; i < N; i++)
            assert_true(entries[i] <= 1);
    }
    for (int i = 0; i < N; i++) {
        const logged *add = find_add(g_mock, COMEM_MSG_ENTRY_ADD, names[i], last);
        int64_t resident = add->msg.u.entry_add.resident;
        uint64_t seq = 0;
        pthread_mutex_lock(&g_mock->mu);
        for (size_t k = 0; k < g_mock->n_log; k++) {
            const logged *lg = g_mock->log[k];
            if (lg->conn != last || lg->msg.type != COMEM_MSG_CENSUS)
                continue;
            for (uint16_t j = 0; j < lg->msg.u.census.n; j++) {
                const comem_wire_residency *it = &lg->msg.u.census.items[j];
                if (it->entry_id == add->replied_id && it->seq >= seq) {
                    seq = it->seq;
                    resident = it->resident;
                }
            }
        }
        pthread_mutex_unlock(&g_mock->mu);
        assert_int_equal(resident, 200);
    }
    comem_client_close(c);
}

int main(void)
{
    alarm(600); /* the last resort: ctest's own timeout is shorter */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_default_socket, setup, teardown),
        cmocka_unit_test(test_constants_by_name),
        cmocka_unit_test_setup_teardown(test_hello_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hello_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probe_peer_tells_another_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_holders_entries_census, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ask_runs_callback_off_the_callers_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy_holders, setup, teardown),
        cmocka_unit_test_setup_teardown(test_touch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reconnect_reregisters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pending_fail_when_server_dies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeouts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_status_chunks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_reserve_base_and_args, setup, teardown),
        cmocka_unit_test_setup_teardown(test_embedded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callback_registers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replies_flow_while_a_callback_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flapping_connection, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
