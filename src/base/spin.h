/*
 * base/spin.h - how long a process that expects a message within microseconds
 * looks for it before it sleeps.
 *
 * A thread that sleeps in the kernel and is woken on an idle CPU pays that
 * CPU's wake-up, tens of microseconds on a server whose cores drop into deep
 * idle states (docs/measurements.md: a ping-pong after 25 ms idle costs 4-30x
 * a hot one). Where an answer is due within microseconds (a caller's reply
 * from the coordinator, the coordinator's receipts while an ask is out), the
 * waiter first polls for up to COMEM_SPIN_US microseconds (default
 * COMEM_SPIN_DEFAULT_US; 0: never) and only then sleeps. The budget is read
 * once per process.
 */
#ifndef COMEM_BASE_SPIN_H
#define COMEM_BASE_SPIN_H

#include <stdbool.h>
#include <stdint.h>

#define COMEM_SPIN_DEFAULT_US 200
#define COMEM_SPIN_MAX_US 10000

/* The budget in nanoseconds: COMEM_SPIN_US (0 to COMEM_SPIN_MAX_US; anything else: the default, said once). */
int64_t comem_spin_ns(void);

/* COMEM_SPIN_US's text as nanoseconds into *ns: false (and *ns untouched) unless it is 0 to COMEM_SPIN_MAX_US. */
bool comem_spin_parse(const char *text, int64_t *ns);

#endif
