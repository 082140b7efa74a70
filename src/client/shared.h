/*
 * client/shared.h - the shared memory a session maps: the booking area
 * (client/fast.c; its layout and rules are shm/book.h's) and the sealed view
 * (client/view.c; shm/view.h). Both ride on the HELLO_REPLY (conn.c keeps
 * their descriptors in c->area_fd and c->view_fd), are mapped after it, and
 * are unmapped only at close, since a caller may still be inside one. For the
 * files of src/client/ only.
 */
#ifndef COMEM_CLIENT_SHARED_H
#define COMEM_CLIENT_SHARED_H

#include "client/state.h"

/* ---- fast.c: the booking area ---- */

/* After HELLO on connection gen: maps the session's booking area that came with the reply (c->area_fd), if any. */
void comem_fast_attach(comem_client *c, uint64_t gen, uint64_t session);
/*
 * A seam inside a booking, between its charge and its record (where 1) and
 * between its record and telling the coordinator (2). The library's own does
 * nothing; tests/integration/test_fastpath.c defines it to stop there, so a
 * test can SIGKILL a process at exactly that point.
 */
void comem_fast_stall_point(int where);
/* How the library's own is defined: weak, so a test linked with the static library replaces it, and
   hidden where the binary format has visibility (ELF), so nothing outside can. */
#ifdef _WIN32
#define COMEM_FAST_STALL_POINT __attribute__((weak))
#else
#define COMEM_FAST_STALL_POINT __attribute__((weak, visibility("hidden")))
#endif
/* The connection ended: no more bookings in its area (the mapping stays until close). */
void comem_fast_detach(comem_client *c);
/* Unmaps every area (close, no thread running). */
void comem_fast_free(comem_client *c);
/* The area of connection gen, or NULL. */
client_fast *comem_fast_for(comem_client *c, uint64_t gen);
/* Whether the coordinator may be sleeping past a change made in the area now (then send BOOKED). */
bool comem_fast_coordinator_dozing(const client_fast *f, int64_t now_ns);
/*
 * A change made in the area of connection gen while the coordinator dozes: wakes it (BOOKED), so the
 * ledger (and the view) has it within a millisecond. One send, only after a quiet spell; never waited on.
 */
void comem_fast_wake(comem_client *c, uint64_t gen);
/*
 * Books weights on device without a round trip when the admission fits the
 * published room; fills g's fast fields and the figures of *out (decided,
 * need, free before and after). False: ask the coordinator (nothing is
 * written to *out).
 * holder is the coordinator's id (0 none); working is inference + cast buffers.
 */
bool comem_fast_book(client_fast *f, int device, uint64_t holder, int64_t weights, int64_t working,
                     client_grant *g, comem_admission *out);
/* Cancels a booked grant without a round trip (a load goes to the coordinator as GRANT_DONE of BOOK_REF). */
void comem_fast_cancel(client_fast *f, const client_grant *g);

/* ---- view.c: the session's sealed view ---- */

/* After HELLO: maps the sealed view that came with the reply (c->view_fd), if any, as the current one. */
void comem_client_view_attach(comem_client *c);
/* Unmaps every view mapped (close, no thread running). */
void comem_client_view_free(comem_client *c);

#endif
