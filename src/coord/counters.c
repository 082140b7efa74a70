/*
 * coord/counters.c - the admission counters and their latency histogram, in
 * one place for both ways an admission is decided: by the coordinator
 * (admit.c) and booked in a session's area, then reconciled (book.c).
 */
#include "base/clock.h"
#include "coord/coord_internal.h"

const double coord_latency_bounds_s[COORD_LATENCY_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                              0.1,    0.25,  0.5,    1,     2.5,  5,     10};

void coord_count_admission(comem_coord_srv *s, bool granted, int64_t created_ns)
{
    coord_counters *k = &s->counters;
    if (granted)
        k->admissions++;
    else
        k->refusals++;
    double secs = (double)(comem_now_ns() - created_ns) / 1e9;
    int b = 0;
    while (b < COORD_LATENCY_BUCKETS && secs > coord_latency_bounds_s[b])
        b++;
    k->latency_counts[b]++;
    k->latency_sum_s += secs;
}
