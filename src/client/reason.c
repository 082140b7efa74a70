/*
 * client/reason.c - the coordinator's reason for the last refusal, per thread.
 *
 * A refusal travels as a status and a message; the status is what every call
 * returns, the message only what the library logs. The thread that made the
 * call keeps the message here until it takes it (comem_take_reason), so a
 * binding can put the log's words into its exception. Thread-local: a call
 * waits for its reply on its own thread, so the reason is set where the status
 * is returned.
 */
#include <stdio.h>
#include <string.h>

#include "client/state.h"

static _Thread_local char tl_reason[COMEM_REASON_MAX];

void comem_client_set_reason(const char *why)
{
    snprintf(tl_reason, sizeof tl_reason, "%s", why ? why : "");
}

size_t comem_take_reason(char *buf, size_t len)
{
    size_t n = strlen(tl_reason);
    if (buf && len > 0)
        snprintf(buf, len, "%s", tl_reason);
    tl_reason[0] = '\0';
    return n;
}
