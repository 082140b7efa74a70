/*
 * client/wddm.h - this process's WDDM reading told to the coordinator (client/wddm.c): by
 * comem_wddm_report, and at every node's end (client/register.c). For the files of src/client/ only.
 */
#ifndef COMEM_CLIENT_WDDM_H
#define COMEM_CLIENT_WDDM_H

#include "client/state.h"

/*
 * Reads this process's WDDM budget and usage per adapter and sends them on the live connection, not
 * waited on: COMEM_OK, COMEM_ENOTSUP (no WDDM here), COMEM_ENOENT (no hardware adapter),
 * COMEM_ECLOSED (no coordinator), COMEM_EIO.
 */
int comem_wddm_send(comem_client *c);

#endif
