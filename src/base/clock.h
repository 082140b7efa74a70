/* base/clock.h - the monotonic clock every layer times itself with. */
#ifndef COMEM_BASE_CLOCK_H
#define COMEM_BASE_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t comem_now_ns(void);

/* Whole milliseconds left until deadline_ns (rounded up, so a wait never ends early); 0 once past it. */
int comem_ms_until(int64_t deadline_ns);

/* Sleeps ms milliseconds (a signal may end it early). */
void comem_sleep_ms(int ms);

#endif
