/*
 * base/size.h - sizes as people write them, and numbers as they read back.
 *
 * comem_parse_size() accepts a non-negative decimal number of bytes, optionally
 * fractional or in exponent form, optionally followed by a binary unit
 * (B, KiB, MiB, GiB, TiB; case-insensitive, a space allowed before it). The
 * result is a double because ComfyUI's targets are doubles ("0.3GiB" is
 * 322122547.2 bytes). Decimal units (KB, MB, GB, TB) are refused with a hint,
 * since users mean GiB by "GB" about as often as not.
 */
#ifndef COMEM_BASE_SIZE_H
#define COMEM_BASE_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* Parses s into *out. Returns 0, or COMEM_EINVAL with a reason in err (may be NULL). */
int comem_parse_size(const char *s, double *out, char *err, size_t errlen);

/* Parses a non-negative finite decimal number without unit. */
int comem_parse_number(const char *s, double *out, char *err, size_t errlen);

/*
 * Parses a duration given in seconds that must be positive and finite ("60",
 * "0.5"): the one parser behind every such flag and environment variable, so
 * that a bad value gets the same refusal wherever it is written. what names
 * the setting in the message ("--idle-release", "COMEM_IDLE_SECONDS"):
 * "<what> needs a positive number of seconds, not '<s>'". 0 or COMEM_EINVAL.
 */
int comem_parse_seconds(const char *what, const char *s, double *out, char *err, size_t errlen);

/*
 * Shortest decimal text that strtod() reads back as exactly x, the way
 * Python's repr() does; integral values below 2^63 print without a fraction.
 * buf needs 32 bytes. Returns buf.
 */
char *comem_format_double(double x, char *buf, size_t len);

/* Human text for a byte count ("1.50 GiB", "300 MiB", "512 B"). buf: 32 bytes. */
char *comem_format_bytes(int64_t bytes, char *buf, size_t len);

#endif
