/*
 * client/reason.c - the coordinator's reason for the last refusal, per thread.
 *
 * A refusal travels as a status and a message; the status is what every call
 * returns, the message only what the library logs. The thread that made the
 * call keeps the message here until it takes it (comem_take_reason), so a
 * binding can put the log's words into its exception.
 *
 * Why per thread, and the client's only thread-local state: it is the public
 * API's contract, not a shortcut. comem_take_reason takes no client (a
 * binding asks it right after any failed call, as errno is read), and several
 * threads of one process may call one client at once, so "the last call" is
 * only defined per calling thread; a slot on the client would hand one
 * thread's reason to another. A call waits for its reply on its own thread,
 * so the reason is set on the thread the status is returned to: by the call
 * helper (client/call.c) from an error reply, and by comem_client_owned
 * (client/fork.c) for a forked child's call. Nothing inside the library reads
 * it back: every decision travels in statuses and out parameters.
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
