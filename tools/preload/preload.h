/*
 * tools/preload/preload.h - libcomem_preload.so: any CUDA program in the ledger, unchanged.
 *
 * Loaded with LD_PRELOAD (or by `comem run -- PROGRAM ARGS`), the library
 * interposes the CUDA driver's allocation entry points, those a program links
 * directly and those the CUDA runtime and PyTorch reach through dlsym and
 * cuGetProcAddress (hooks.c). Each allocation is attributed to the process, on
 * the card the current context (or the allocation's location) names, and
 * reported to the coordinator as the bytes of one raw holder per device
 * (link.c). Before an allocation of at least COMEM_PRELOAD_MIN bytes (default
 * 64 MiB) it asks the coordinator for admission, as a load of that many bytes;
 * refused, it answers CUDA_ERROR_OUT_OF_MEMORY under COMEM_PRELOAD_POLICY=
 * enforce, or logs and allows under observe (the default); off attributes
 * nothing.
 *
 * It never breaks a program comem cannot reach: without a coordinator, a
 * driver, or for an entry point it does not know, it steps aside and says so
 * once; the program runs as it would without it.
 */
#ifndef COMEM_TOOLS_PRELOAD_H
#define COMEM_TOOLS_PRELOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum preload_policy {
    PRELOAD_OFF = 0,     /* pass everything through, attribute nothing */
    PRELOAD_OBSERVE = 1, /* attribute, ask, log a refusal and allow */
    PRELOAD_ENFORCE = 2  /* attribute, ask, and refuse what the coordinator refuses */
} preload_policy;

/* What a wrapper learns before the real allocation. */
typedef struct preload_ticket {
    bool attribute; /* false: stepped aside, record nothing */
    int device;     /* the coordinator's device index */
    uint64_t grant; /* 0: none booked */
} preload_ticket;

/* The policy from the environment (read once). */
preload_policy preload_policy_now(void);

/*
 * Before an allocation of bytes on CUDA ordinal `ordinal`: false when it must
 * be refused (enforce, and the coordinator said no); otherwise fills *t.
 */
bool preload_before(int ordinal, size_t bytes, const char *what, preload_ticket *t);
/* After it: key (pointer or handle; 0 when it failed) is recorded with its bytes, the grant closed. */
void preload_after(const preload_ticket *t, uint64_t key, size_t bytes);
/* A free of key: its bytes come off the process's figure (unknown keys are ignored). */
void preload_freed(uint64_t key);

/* Says msg once per distinct key (a static string's address), on stderr through comem's log. */
void preload_say_once(const void *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* True on a thread that is inside comem itself (its calls are not attributed). */
bool preload_inside(void);
void preload_enter(void);
void preload_leave(void);

/* Maps a CUDA ordinal of this process to the coordinator's device (hooks.c reads the UUID). */
int preload_ordinal_uuid(int ordinal, char *uuid, size_t len);

#endif
