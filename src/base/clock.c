/* base/clock.c - the monotonic clock. */
#include "base/clock.h"

#include <stdint.h>
#include <time.h>

int64_t comem_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int comem_ms_until(int64_t deadline_ns)
{
    int64_t left = deadline_ns - comem_now_ns();
    if (left <= 0)
        return 0;
    int64_t ms = (left + 999999) / 1000000;
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

void comem_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}
