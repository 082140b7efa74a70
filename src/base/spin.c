/* base/spin.c - the spin budget (base/spin.h), read from the environment once. */
#include "base/spin.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/log.h"
#include "os/env.h"

bool comem_spin_parse(const char *text, int64_t *ns)
{
    if (!text || *text < '0' || *text > '9')
        return false; /* strtol would take blanks and a sign before the digits */
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || v < 0 || v > COMEM_SPIN_MAX_US)
        return false;
    *ns = (int64_t)v * 1000;
    return true;
}

int64_t comem_spin_ns(void)
{
    static _Atomic int64_t cached = -1; /* -1: not read yet; two threads racing read it alike */
    int64_t ns = atomic_load_explicit(&cached, memory_order_relaxed);
    if (ns >= 0)
        return ns;
    ns = (int64_t)COMEM_SPIN_DEFAULT_US * 1000;
    const char *e = comem_env("COMEM_SPIN_US");
    if (e && *e && !comem_spin_parse(e, &ns))
        comem_warn("COMEM_SPIN_US=%s is not a number of microseconds from 0 to %d; using %d", e, COMEM_SPIN_MAX_US,
                   COMEM_SPIN_DEFAULT_US);
    atomic_store_explicit(&cached, ns, memory_order_relaxed);
    return ns;
}
