/*
 * client/frames.h - one builder per record: every frame a call, the resync or
 * a give-back sends is built here (client/frames.c), from the mirror's record
 * or the call's arguments, and nowhere else. A builder zeroes m, fills it and
 * returns it, so a call reads "send this": comem_call_begin(c, &call,
 * comem_frame_report(&m, h)). Builders that read the mirror run under c->lock;
 * none sends, waits or changes the mirror. The API's flags become the
 * protocol's here (holder capabilities, entry flags). The frames that open
 * and answer are their rooms' own: HELLO (conn.c), RECEIPT (ask.c, with this
 * file's residency items). For the files of src/client/ only.
 */
#ifndef COMEM_CLIENT_FRAMES_H
#define COMEM_CLIENT_FRAMES_H

#include "client/state.h"
#include "probe/cuda_luid.h"
#include "probe/wddm.h"

/* The API's holder flags (COMEM_ANSWERS_*, COMEM_RELEASES_WHILE_BUSY) as the protocol's capabilities. */
uint32_t comem_frame_caps(unsigned flags);

/* HOLDER_ADD of h as the mirror holds it: name, device, kind, capabilities. */
comem_msg *comem_frame_holder_add(comem_msg *m, const client_holder *h);

/* ENTRY_ADD of e under its holder's coordinator id: its size and flags, its residency and refs now. */
comem_msg *comem_frame_entry_add(comem_msg *m, const client_entry *e, uint64_t holder_coord);

/* HOLDER_REMOVE, ENTRY_REMOVE or TOUCH of a coordinator id. */
comem_msg *comem_frame_id(comem_msg *m, uint16_t type, uint64_t coord_id);

/*
 * A CENSUS of h's entries' residency, with no item yet (comem_frame_census_item adds them):
 * h's report sequence, and has = 0, so h's own figures are not part of it.
 */
comem_msg *comem_frame_census(comem_msg *m, const client_holder *h);

/* Appends e's residency (its coordinator id, sequence, resident bytes, refs) to a census. False: full. */
bool comem_frame_census_item(comem_msg *m, const client_entry *e);

/* One entry's residency as the wire lists it (a census's item, a receipt's). */
comem_wire_residency comem_frame_residency(const client_entry *e);

/* A CENSUS of h's own figures, its last report: the sequence, which figures it has, pinned, overhead. */
comem_msg *comem_frame_report(comem_msg *m, const client_holder *h);

/* ACTIVITY: holder_coord (0: the whole process) busy or idle, serving prompt (may be NULL). */
comem_msg *comem_frame_activity(comem_msg *m, uint64_t holder_coord, bool busy, const char *prompt);

/* PIN_ACQUIRE or PIN_RELEASE (type) of bytes for holder_coord (0: the whole process). */
comem_msg *comem_frame_pin(comem_msg *m, uint16_t type, uint64_t holder_coord, int64_t bytes);

/* DEVICE_MAP of this process's mapped ordinals (lock held); NULL when none is mapped. */
comem_msg *comem_frame_device_map(comem_msg *m, const comem_client *c);
/* WDDM: this process's budget and usage on each of n adapters (at most COMEM_MAX_DEVICES are sent), each
   named also by the UUID of the CUDA device among cuda[n_cuda] with its LUID, where there is one. */
comem_msg *comem_frame_wddm(comem_msg *m, const comem_wddm_adapter *a, int n, const comem_cuda_luid *cuda,
                            int n_cuda);

/* GRANT_DONE of a coordinator's grant: its bytes resident in entry_coord (0: cancelled), used loaded. */
comem_msg *comem_frame_grant_done(comem_msg *m, uint64_t grant_coord, uint64_t entry_coord, int64_t used);
/* A grant of a previous coordinator, claimed again from this one (coord/reclaim.c). */
comem_msg *comem_frame_reclaim(comem_msg *m, int device, uint64_t holder_coord, int64_t bytes);

/* One admission's question, as comem_admit takes it (the client's own ids). */
typedef struct client_admit_ask {
    int device;
    uint64_t holder; /* 0: none */
    int64_t weights, inference, cast_forward;
    const uint64_t *keep;
    size_t n_keep;
} client_admit_ask;

/*
 * ADMIT of q with a budget for the coordinator (lock held): the holder and the keep list in the
 * coordinator's ids; an entry it does not know yet cannot be asked anyway and is left out.
 * COMEM_OK, or COMEM_ENOENT for a holder or keep entry this client does not have.
 */
int comem_frame_admit(comem_msg *m, comem_client *c, const client_admit_ask *q, uint32_t budget_ms);

/* PRESSURE: ask idle siblings for bytes on device, within budget_ms. */
comem_msg *comem_frame_pressure(comem_msg *m, int device, int64_t bytes, uint32_t budget_ms);

/* RELEASE: ask the holder of another process's entry for bytes of it (< 0: all), within budget_ms. */
comem_msg *comem_frame_release(comem_msg *m, uint64_t entry_coord, int64_t bytes, uint32_t budget_ms);

/* RESERVE: the reserve and pager headroom this process should keep on device. */
comem_msg *comem_frame_reserve(comem_msg *m, int device);

/* A frame with no body: STATUS, BOOKED, GOODBYE. */
comem_msg *comem_frame_bare(comem_msg *m, uint16_t type);

#endif
