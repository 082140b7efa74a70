/*
 * base/sort.h - a stable sort with a context pointer, the same on every platform.
 *
 * qsort_r is a GNU extension (BSD and Windows spell it differently, with the
 * arguments in another order), and qsort promises no order among equal keys;
 * the rules' orders (arith/) must come out the same wherever comem runs.
 */
#ifndef COMEM_BASE_SORT_H
#define COMEM_BASE_SORT_H

#include <stddef.h>

typedef int (*comem_sort_cmp)(const void *a, const void *b, void *ctx);

/* Sorts n elements of size bytes at base by cmp, keeping equal elements in their order. */
void comem_sort(void *base, size_t n, size_t size, comem_sort_cmp cmp, void *ctx);

#endif
