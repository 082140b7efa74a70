/*
 * coord/coord.h - the coordinator: one event loop that owns the ledger.
 *
 * It listens on a Unix stream socket, keeps one session per connected
 * process, answers requests, plans releases across processes with ComfyUI's
 * own ladder, asks holders for sized releases, believes their receipts,
 * re-measures the device and grants or refuses. It runs as a thread inside a
 * host process (comem_coord_start, the default) or as the comemd daemon.
 * Everything happens on the loop thread; nothing here is called from another.
 */
#ifndef COMEM_COORD_COORD_H
#define COMEM_COORD_COORD_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct comem_coord_config {
    char socket_path[PATH_MAX]; /* "" : the default per-user socket */
    char device_spec[256];      /* "" : COMEM_DEVICE, else auto */
    char token[128];            /* "" : no token required */
    double idle_release_s;      /* a holder idle this long is asked to release (60) */
    int ask_deadline_ms;        /* a holder that has not answered by then counts as busy (2000), plus 1 ms per MiB
                                   the ask would move, up to 30 s (coord/asks.c) */
    int64_t grant_ttl_ms;       /* an unused grant expires after this (60000) */
    int reading_max_age_ms;     /* admissions reuse a reading this recent, corrected by the ledger (20) */
    int tick_ms;                /* idle release, expiry and re-measure period (250) */
    int hello_timeout_ms;       /* a connection that has not said HELLO by then is closed (5000) */
    int max_wait_ms;            /* the longest an admission or pressure request waits, whatever it asks (60000) */
    bool check;                 /* verify the ledger after every mutation (tests, debug) */
    int64_t reserve_base;       /* the reserve base every host keeps (comemd --reserve); -1: the first host's */
    char ram_spec[64];          /* host RAM as the last device: "machine", or a bounded budget "4GiB" (comemd
                                   --ram, COMEM_RAM); "" : no RAM device, unless no card is found (ram_off) */
    bool ram_off;               /* host RAM was switched off (COMEM_RAM=off, comemd --ram off): with no card
                                   found, the coordinator refuses to start rather than manage host RAM alone */
    char started_by[128];       /* who started comemd (--started-by: the name rule); "" : not said (an operator,
                                   a service manager, an embedded coordinator) */
    double exit_idle_s;         /* exit once no process has been connected for this long (comemd --exit-idle: the
                                   autostart's, so that the coordinator it made goes away); 0: never */
} comem_coord_config;

/*
 * Defaults, then the environment: COMEM_DEVICE, COMEM_RAM, COMEM_TOKEN,
 * COMEM_IDLE_SECONDS, COMEM_CHECK. COMEM_EINVAL, with the one-line reason in err, for a token
 * longer than the protocol carries or an idle time that is not a positive
 * number of seconds (the same refusal as comemd's --idle-release).
 */
int comem_coord_config_defaults(comem_coord_config *cfg, char *err, size_t errlen);

typedef struct comem_coord_srv comem_coord_srv;

/*
 * Claims the socket path (server.c: what is there must be nothing or a stale
 * socket of this user, else COMEM_EPERM, untouched; PATH.lock is flock'ed, and
 * another coordinator holding it, or answering there, gives COMEM_EEXIST),
 * opens the devices and the view, and binds the socket. Does not start the loop.
 */
int comem_coord_create(const comem_coord_config *cfg, comem_coord_srv **out);

/* Runs the loop until comem_coord_request_stop; returns 0 or a negative status. */
int comem_coord_run(comem_coord_srv *srv);

/* Asks the loop to stop; safe from a signal handler or another thread. */
void comem_coord_request_stop(comem_coord_srv *srv);

/* Closes every connection, removes the socket it bound (only that one), frees. Call after run returns. */
void comem_coord_destroy(comem_coord_srv *srv);

/* The socket path the coordinator listens on. */
const char *comem_coord_socket(const comem_coord_srv *srv);

#endif
