/*
 * shm/view_file.h - where the view beside the coordinator's socket lives (shm/view.h), and how a
 * reader tells whether its coordinator runs. One interface, one backend per platform:
 *
 *   view_file_posix.c  the file <socket>.view, mode 0600: made whole under a temporary name and
 *                      linked into place, reused in place by the next coordinator (readers that
 *                      mapped it keep working), replaced when it is a view of an older layout, and
 *                      anything else at the path refused untouched; the coordinator holds an
 *                      open-file-description lock on its first byte for life, which the kernel
 *                      drops however it exits
 *   view_file_win.c    a named section of this user's (named after the user, the layout's version and
 *                      the view's name), opened again by the next coordinator while readers hold it;
 *                      and a named event the coordinator holds open for life: the system destroys it
 *                      with the coordinator's last handle, so a reader that cannot open it knows the
 *                      coordinator is gone
 *
 * The layout is the caller's: judge says what the first bytes of a view that is there are.
 */
#ifndef COMEM_SHM_VIEW_FILE_H
#define COMEM_SHM_VIEW_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct view_file view_file;

/* What a view that is there is to its writer. */
typedef enum { VIEW_FILE_OURS, VIEW_FILE_OLDER, VIEW_FILE_FOREIGN } view_file_kind;

typedef struct view_file_layout {
    size_t size;
    uint32_t version;
    view_file_kind (*judge)(const void *head, size_t head_len, int64_t file_size); /* head: the first 16 bytes */
    int (*init)(void *mem, const void *ctx); /* fills a new view's memory (zeroed): COMEM_OK */
    const void *ctx;
} view_file_layout;

/*
 * The writer's side: opens the view at path (or makes it), mapped writable, and holds the liveness
 * mark for life. COMEM_EPERM (and a log line) when something else is in the way, COMEM_EIO.
 */
int comem_view_file_create(const char *path, const view_file_layout *layout, view_file **out, void **mem);

/*
 * A reader's side: the view at path mapped read-only (layout: its size and version; judge and init
 * are not used): COMEM_ENOENT, COMEM_EPERM (not this user's, not its size), COMEM_EIO.
 */
int comem_view_file_open(const char *path, const view_file_layout *layout, view_file **out, const void **mem);

/* Whether the writer of f's view runs (its liveness mark is held): 1 yes, 0 no, -1 this system cannot say. */
int comem_view_file_alive(view_file *f);

/* Unmaps and closes (the writer's liveness mark goes with it). */
void comem_view_file_close(view_file *f);

#endif
