/*
 * ledger/bounds.h - the ledger's processes and what each may register (ledger.h: "Fair share").
 *
 * Used by ledger.c only: a session joins its process when it is added and
 * leaves it when it ends; every holder, entry and grant is taken from its
 * process's share when added and given back when removed.
 */
#ifndef COMEM_LEDGER_BOUNDS_H
#define COMEM_LEDGER_BOUNDS_H

#include "ledger/ledger.h"

/* The process of pid (pid <= 0: a new one, never shared), made when it has none; its id in *id. COMEM_ENOMEM. */
int ledger_process_join(comem_ledger *l, int32_t pid, const char *name, uint64_t *id);
/* A session of process id ended: freed with its last. */
void ledger_process_leave(comem_ledger *l, uint64_t id);
/* COMEM_OK when process id may take one more record of kind, else COMEM_ERANGE. */
int ledger_bound_check(const comem_ledger *l, uint64_t id, ledger_kind kind);
/* Process id took one record of kind (after ledger_bound_check), or gave n back. */
void ledger_bound_take(comem_ledger *l, uint64_t id, ledger_kind kind);
void ledger_bound_give(comem_ledger *l, uint64_t id, ledger_kind kind, uint32_t n);
/* Verifies the processes against the sessions: 0, or COMEM_ERANGE with why. */
int ledger_bound_verify(const comem_ledger *l, char *why, size_t len);

#endif
