/*
 * base/pidfd.h - a descriptor that names one process (pidfd_open, Linux 5.3):
 * it stays that process's even when its pid is reused, and polls readable
 * once the process has exited (a zombie too). Both the coordinator (a
 * session's process) and the simulated card (its slots' processes) watch
 * processes this way.
 */
#ifndef COMEM_BASE_PIDFD_H
#define COMEM_BASE_PIDFD_H

#include <stdint.h>

/* A pidfd for pid in the caller's pid namespace (close-on-exec), or -1 (gone, or no pidfd_open). */
int comem_pidfd_open(int32_t pid);

#endif
