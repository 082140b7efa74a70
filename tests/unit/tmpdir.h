/* tests/unit/tmpdir.h - a private temporary directory per test, removed with everything in it. */
#ifndef COMEM_TESTS_TMPDIR_H
#define COMEM_TESTS_TMPDIR_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

/* Creates /tmp/comem-test-<tag>-XXXXXX into buf; 0 on success, -1 (errno set) otherwise. */
static inline int test_tmpdir_make(char *buf, size_t len, const char *tag)
{
    snprintf(buf, len, "/tmp/comem-test-%s-XXXXXX", tag);
    return mkdtemp(buf) ? 0 : -1;
}

static inline int test_tmpdir_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Removes dir and everything below it (no shell, links not followed); 0 on success. */
static inline int test_tmpdir_remove(const char *dir)
{
    return nftw(dir, test_tmpdir_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
