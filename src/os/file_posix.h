/* os/file_posix.h - for the Linux backends (probe/sim_store_posix.c, shm/view_file_posix.c): a shared file made whole. */
#ifndef COMEM_OS_FILE_POSIX_H
#define COMEM_OS_FILE_POSIX_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Makes the file at path whole before anyone can see it: created under a temporary name (mode
 * 0600, never following a link), sized with every block allocated (a full disk is COMEM_EIO with
 * errno ENOSPC, never a SIGBUS in fill), filled by fill through a shared mapping, then linked into
 * place (replace false: if one appeared meanwhile, that one stays and this is still COMEM_OK) or
 * renamed over what is there (replace true). COMEM_OK, fill's status, or COMEM_EIO with errno set;
 * the temporary file is gone either way.
 */
int comem_file_create_whole(const char *path, size_t size, int (*fill)(void *mem, const void *ctx), const void *ctx,
                            bool replace);

#endif
