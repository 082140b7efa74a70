/*
 * os/vm.h - address space without memory, and pages opened and dropped in it: what the pager's
 * simulated card stands its "device" pages on (pager/vmm_sim.c). One interface, one backend per
 * platform: vm_posix.c (mmap, mprotect, madvise), vm_win.c (VirtualAlloc, VirtualFree).
 *
 * Every call returns COMEM_OK, or COMEM_ENOMEM / COMEM_EIO with the system's reason in why.
 */
#ifndef COMEM_OS_VM_H
#define COMEM_OS_VM_H

#include <stddef.h>
#include <stdint.h>

/* size bytes of address space, no access and no memory behind it, into *out. */
int comem_vm_reserve(int64_t size, void **out, char *why, size_t whylen);
/* A whole reservation given back. */
int comem_vm_unreserve(void *p, int64_t size, char *why, size_t whylen);
/* Pages inside a reservation made readable and writable; untouched, they read as zero. */
int comem_vm_open(void *p, int64_t size, char *why, size_t whylen);
/* Pages inside a reservation dropped (they read as zero if opened again) and closed. */
int comem_vm_drop(void *p, int64_t size, char *why, size_t whylen);

#endif
