/*
 * tests/integration/raw.h - a bare protocol client for tests: frames in, frames out.
 *
 * It speaks the wire format directly (no client library), so tests can send
 * exactly what they mean, malformed frames included, and read exactly what
 * the coordinator answers. Every read has a timeout so a test cannot hang.
 */
#ifndef COMEM_TESTS_RAW_H
#define COMEM_TESTS_RAW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/wire.h"

/* Connects to path; -1 on failure. */
int raw_connect(const char *path);
/* Sends raw bytes; false on error. */
bool raw_send_bytes(int fd, const void *buf, size_t len);
/* Encodes and sends a message. */
bool raw_send(int fd, comem_msg *m);
/* Receives one frame within timeout_ms into *m. 1 ok, 0 EOF, -1 timeout/error. */
int raw_recv(int fd, comem_msg *m, int timeout_ms);
/* True when the peer closes within timeout_ms (reading and dropping anything before). */
bool raw_wait_eof(int fd, int timeout_ms);
/* HELLO as role/name with token; returns the reply type (HELLO_REPLY or REPLY) or -1, status in *status. */
int raw_hello(int fd, uint8_t role, const char *name, const char *token, int *status);

#endif
