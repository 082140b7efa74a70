/* tests/integration/raw.c - the bare protocol client used by integration tests. */
#include "raw.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int raw_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

bool raw_send_bytes(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

bool raw_send(int fd, comem_msg *m)
{
    static _Thread_local uint8_t buf[COMEM_WIRE_MAX_FRAME];
    int n = comem_wire_encode(m, buf, sizeof buf);
    return n > 0 && raw_send_bytes(fd, buf, (size_t)n);
}

static int read_full(int fd, uint8_t *buf, size_t len, int timeout_ms)
{
    size_t got = 0;
    while (got < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, timeout_ms);
        if (r <= 0)
            return -1;
        ssize_t n = recv(fd, buf + got, len - got, 0);
        if (n == 0)
            return 0;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == ECONNRESET ? 0 : -1;
        }
        got += (size_t)n;
    }
    return 1;
}

int raw_recv(int fd, comem_msg *m, int timeout_ms)
{
    static _Thread_local uint8_t buf[COMEM_WIRE_MAX_FRAME];
    int r = read_full(fd, buf, COMEM_WIRE_HEADER_SIZE, timeout_ms);
    if (r <= 0)
        return r;
    comem_wire_header h;
    if (comem_wire_decode_header(buf, COMEM_WIRE_HEADER_SIZE, &h) != 0)
        return -1;
    if (h.length && (r = read_full(fd, buf + COMEM_WIRE_HEADER_SIZE, h.length, timeout_ms)) <= 0)
        return r;
    return comem_wire_decode(&h, buf + COMEM_WIRE_HEADER_SIZE, m) == 0 ? 1 : -1;
}

bool raw_wait_eof(int fd, int timeout_ms)
{
    uint8_t buf[4096];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0)
            return false;
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return true;
        if (n < 0 && errno != EINTR)
            return false;
    }
}

int raw_hello(int fd, uint8_t role, const char *name, const char *token, int *status)
{
    comem_msg m = {.type = COMEM_MSG_HELLO, .request_id = 1};
    m.u.hello.proto_version = COMEM_WIRE_VERSION;
    m.u.hello.role = role;
    m.u.hello.pid = (uint32_t)getpid();
    m.u.hello.reserve_base = -1;
    snprintf(m.u.hello.name, sizeof m.u.hello.name, "%s", name);
    snprintf(m.u.hello.token, sizeof m.u.hello.token, "%s", token ? token : "");
    if (!raw_send(fd, &m))
        return -1;
    comem_msg r;
    if (raw_recv(fd, &r, 5000) != 1)
        return -1;
    if (status)
        *status = r.type == COMEM_MSG_REPLY ? r.u.reply.status : 0;
    return r.type;
}
