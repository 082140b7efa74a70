/* base/sort.c - a stable merge sort (bottom-up), falling back to insertion sort without memory. */
#include "base/sort.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void insertion(unsigned char *a, size_t n, size_t size, comem_sort_cmp cmp, void *ctx, unsigned char *tmp)
{
    for (size_t i = 1; i < n; i++) {
        size_t j = i;
        while (j > 0 && cmp(a + (j - 1) * size, a + i * size, ctx) > 0)
            j--;
        if (j == i)
            continue;
        memcpy(tmp, a + i * size, size);
        memmove(a + (j + 1) * size, a + j * size, (i - j) * size);
        memcpy(a + j * size, tmp, size);
    }
}

void comem_sort(void *base, size_t n, size_t size, comem_sort_cmp cmp, void *ctx)
{
    if (n < 2 || size == 0)
        return;
    unsigned char *a = base, one[256];
    unsigned char *buf = n <= SIZE_MAX / size ? malloc(n * size) : NULL;
    if (!buf) { /* no room for a merge: quadratic, still stable and correct */
        unsigned char *tmp = size <= sizeof one ? one : malloc(size);
        if (tmp) {
            insertion(a, n, size, cmp, ctx, tmp);
            if (tmp != one)
                free(tmp);
        }
        return;
    }
    unsigned char *src = a, *dst = buf;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) /* the left run wins ties: stable */
                memcpy(dst + k++ * size, cmp(src + j * size, src + i * size, ctx) < 0 ? src + j++ * size
                                                                                       : src + i++ * size, size);
            memcpy(dst + k * size, src + i * size, (mid - i) * size);
            k += mid - i;
            memcpy(dst + k * size, src + j * size, (hi - j) * size);
        }
        unsigned char *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, n * size);
    free(buf);
}
