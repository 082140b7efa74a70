/*
 * base/bytes.h - byte-count arithmetic that cannot wrap.
 *
 * Every byte count in comem is an int64_t. Additions and subtractions go
 * through these helpers, which saturate at INT64_MIN/INT64_MAX instead of
 * wrapping (HAMi-core's unsigned counters wrapped to petabytes). comem_trunc()
 * is Python's int(x) for a double: truncation toward zero, saturating, NaN -> 0.
 */
#ifndef COMEM_BASE_BYTES_H
#define COMEM_BASE_BYTES_H

#include <math.h>
#include <stdint.h>

#define COMEM_KIB ((int64_t)1 << 10)
#define COMEM_MIB ((int64_t)1 << 20)
#define COMEM_GIB ((int64_t)1 << 30)
#define COMEM_TIB ((int64_t)1 << 40)

static inline int64_t comem_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

static inline int64_t comem_sub(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r))
        return b < 0 ? INT64_MAX : INT64_MIN;
    return r;
}

static inline int64_t comem_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return ((a < 0) != (b < 0)) ? INT64_MIN : INT64_MAX;
    return r;
}

static inline int64_t comem_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t comem_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t comem_clamp0(int64_t a) { return a > 0 ? a : 0; }

/* Python's int(x) for a finite double; saturates outside int64, NaN gives 0. */
static inline int64_t comem_trunc(double x)
{
    if (__builtin_isnan(x)) /* the builtin: MinGW's isnan macro converts a double to float first */
        return 0;
    if (x >= 9223372036854775807.0)
        return INT64_MAX;
    if (x <= -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)x;
}

/* Python's max(a, b) and min(a, b) on doubles: the first operand wins ties. */
static inline double comem_fmax(double a, double b) { return b > a ? b : a; }
static inline double comem_fmin(double a, double b) { return b < a ? b : a; }

#endif
