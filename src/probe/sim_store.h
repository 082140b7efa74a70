/*
 * probe/sim_store.h - where a simulated card lives: memory every process that opens the card with
 * the same path shares. One interface, one backend per platform, chosen at build time:
 *
 *   sim_store_posix.c  a file at the path (the runtime folder's, or path=), made whole under a
 *                      temporary name and linked into place, a regular file of this user's that
 *                      nobody else may open (mode 0600); at an automatic path a file of another
 *                      layout (another comem version) is replaced, processes mapping it keep theirs
 *   sim_store_win.c    a named section of the paging file with an access list for this user alone,
 *                      named after the user, the layout's version and the path (so cards of two
 *                      versions never meet); refused if another user owns the name; it lasts while
 *                      a process has the card open
 *
 * A new card is filled by the layout's init before anyone else can see it as one (Linux: before the
 * link; Windows: others wait for is_ours). Statuses: COMEM_EPERM (not this user's, or not private),
 * COMEM_EINVAL (another layout where it is not replaced), COMEM_EIO, COMEM_ENOMEM.
 */
#ifndef COMEM_PROBE_SIM_STORE_H
#define COMEM_PROBE_SIM_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sim_store sim_store;

/* What the card is: its size and version, how a new one is filled, how one of this layout is told. */
typedef struct sim_store_layout {
    size_t size;
    uint32_t version;
    int (*init)(void *mem, const void *ctx); /* fills a new card's memory (zeroed) */
    bool (*is_ours)(const void *mem);        /* the memory holds a card of this layout */
    const void *ctx;
} sim_store_layout;

/* Opens the card at path, making it if there is none; *mem is its memory, mapped writable. */
int comem_sim_store_open(const char *path, bool replace_other_layout, const sim_store_layout *layout,
                         sim_store **out, void **mem);

/* Unmaps and closes (the card stays for the others). */
void comem_sim_store_close(sim_store *st);

#endif
