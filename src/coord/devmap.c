/*
 * coord/devmap.c - each process's device ordinals, matched to the coordinator's cards by UUID.
 *
 * A process numbers its GPUs as its CUDA_VISIBLE_DEVICES makes them; the
 * coordinator numbers the machine's. A DEVICE_MAP says which card each of a
 * process's ordinals is (by UUID), so two processes that see one card under
 * different ordinals are charged on that one card (user-needs F7, F8), and
 * from then on the device its messages name is its own ordinal. Two ordinals
 * of one process that are one card are charged as one, and said: in the log
 * when mapped, in status while the process is there. Cards the coordinator
 * itself reads twice (one UUID at two indices) are said in status too.
 *
 * Host RAM (when on) is the coordinator's last device. Every process names it
 * COMEM_DEVICE_HOST_RAM whatever its index, and the index itself names no
 * device until a DEVICE_MAP says which card that ordinal is: a process that
 * says "device 1" means its second GPU, never RAM.
 */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "comem/comem.h"
#include "comem/common.h"
#include "coord/coord_internal.h"

static int index_of_uuid(const comem_coord_srv *s, const char *uuid)
{
    for (int d = 0; d < s->ledger.n_devices; d++)
        if (!strcmp(s->ledger.devices[d].uuid, uuid))
            return d;
    return -1;
}

/* True when the session has a holder on coordinator device d. */
static bool holds_on(const comem_coord_srv *s, uint64_t session, int d)
{
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.holders); i++) {
        const ledger_holder *h = comem_slab_at(&s->ledger.holders, i, NULL);
        if (h && h->session == session && h->device == d)
            return true;
    }
    return false;
}

void coord_devmap_init(const comem_coord_srv *s, conn *c)
{
    if (s->ram_index < 0)
        return;
    if (s->ram_index != COMEM_DEVICE_HOST_RAM)
        c->devmap[s->ram_index] = COORD_DEVMAP_NONE;
    c->devmap[COMEM_DEVICE_HOST_RAM] = (uint8_t)(s->ram_index + 1);
}

void coord_device_map(comem_coord_srv *s, conn *c, uint32_t rid, const comem_msg_device_map *m)
{
    const ledger_session *ss = comem_ledger_session(&s->ledger, c->session);
    const char *who = ss ? ss->name : "?";
    char why[COMEM_WIRE_TEXT_MAX] = "";
    int rc = COMEM_OK;
    for (uint16_t i = 0; i < m->n; i++) {
        const comem_wire_devmap *it = &m->items[i];
        int d = index_of_uuid(s, it->uuid);
        if (s->ram_index >= 0 && (it->ordinal == COMEM_DEVICE_HOST_RAM || d == s->ram_index)) {
            rc = COMEM_EINVAL;
            snprintf(why, sizeof why, "device %u is host RAM's ordinal (COMEM_DEVICE_HOST_RAM), not a card's",
                     (unsigned)it->ordinal);
            continue;
        }
        if (d < 0) {
            rc = COMEM_ENODEV;
            snprintf(why, sizeof why, "no device with UUID %.60s here (its device %u stays unmapped)", it->uuid,
                     (unsigned)it->ordinal);
            comem_warn("'%s' (pid %d) names a card the coordinator does not read: its device %u is %s", who,
                       (int)c->pid, (unsigned)it->ordinal, it->uuid);
            continue;
        }
        int was = coord_device_in(c, it->ordinal); /* the card this ordinal names now */
        if (was != d && holds_on(s, c->session, was)) {
            /* its holders stay where they were registered: moving the name under them would book new
               bytes on one card for entries on another */
            rc = COMEM_EBUSY;
            snprintf(why, sizeof why, "its device %u already names card %d, where it has holders; not remapped",
                     (unsigned)it->ordinal, was);
            continue;
        }
        c->devmap[it->ordinal] = (uint8_t)(d + 1);
        if (it->ordinal != d)
            comem_info("'%s' (pid %d): its device %u is the coordinator's device %d (%s)", who, (int)c->pid,
                       (unsigned)it->ordinal, d, it->uuid);
    }
    for (int a = 0; a < COMEM_MAX_DEVICES; a++)
        for (int b = a + 1; b < COMEM_MAX_DEVICES; b++)
            if (c->devmap[a] && c->devmap[a] != COORD_DEVMAP_NONE && c->devmap[a] == c->devmap[b])
                comem_warn("'%s' (pid %d): its devices %d and %d are one card (%s): charged as one", who, (int)c->pid,
                           a, b, s->ledger.devices[c->devmap[a] - 1].uuid);
    coord_reply(s, c, rid, rc, rc == COMEM_OK ? NULL : why);
}

uint16_t coord_device_in(const conn *c, uint16_t device)
{
    return device < COMEM_MAX_DEVICES && c->devmap[device] ? (uint16_t)(c->devmap[device] - 1) : device;
}

uint16_t coord_device_out(const conn *c, int index)
{
    for (int o = 0; o < COMEM_MAX_DEVICES; o++)
        if (c->devmap[o] == index + 1)
            return (uint16_t)o;
    return (uint16_t)index;
}

size_t coord_device_warnings(comem_coord_srv *s, char (*out)[COORD_WARNING_MAX], size_t cap)
{
    size_t n = 0;
    for (int a = 0; a < s->ledger.n_devices; a++)
        for (int b = a + 1; b < s->ledger.n_devices && n < cap; b++)
            if (s->ledger.devices[a].uuid[0] && !strcmp(s->ledger.devices[a].uuid, s->ledger.devices[b].uuid))
                snprintf(out[n++], COORD_WARNING_MAX, "devices %d and %d are one card (%.80s)", a, b,
                         s->ledger.devices[a].uuid);
    for (size_t i = 0; i < comem_slab_slots(&s->ledger.sessions) && n < cap; i++) {
        uint64_t sid;
        const ledger_session *ss = comem_slab_at(&s->ledger.sessions, i, &sid);
        const conn *c = ss ? coord_conn_of(s, sid) : NULL;
        if (!c)
            continue;
        for (int a = 0; a < COMEM_MAX_DEVICES; a++)
            for (int b = a + 1; b < COMEM_MAX_DEVICES && n < cap; b++)
                if (c->devmap[a] && c->devmap[a] != COORD_DEVMAP_NONE && c->devmap[a] == c->devmap[b])
                    snprintf(out[n++], COORD_WARNING_MAX,
                             "'%.40s' (pid %d): its devices %d and %d are one card (%.80s)", ss->name, (int)ss->pid, a,
                             b, s->ledger.devices[c->devmap[a] - 1].uuid);
    }
    return n;
}
