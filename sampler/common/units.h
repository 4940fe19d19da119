/* Parsing of option values with units, strictly: the whole text must parse
 * and the value must be in range, or the caller names the option in an error. */
#ifndef KP_COMMON_UNITS_H
#define KP_COMMON_UNITS_H

#include <stdint.h>

/* "250us", "10ms", "5s", "2m", "1h"; a bare number is seconds. Stores
 * microseconds. Returns 0, or -1 for malformed text, zero or overflow. */
int kp_parse_duration(const char *text, uint64_t *us);
/* "4096", "64K", "64M", "1G" (powers of 1024, optional trailing 'B'). */
int kp_parse_size(const char *text, uint64_t *bytes);
/* A decimal integer in [min, max]. */
int kp_parse_uint(const char *text, uint64_t min, uint64_t max, uint64_t *value);
/* A positive decimal number such as "10" or "0.5" in (0, max]. */
int kp_parse_rate(const char *text, double max, double *value);

#endif
