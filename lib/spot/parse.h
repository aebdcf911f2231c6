/* parse: checked parsing of the small values users type: numbers,
 * durations, signal names.  No I/O here, so unit tests and fuzzers call
 * these directly. */
#ifndef SPOT_PARSE_H
#define SPOT_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* Longest duration accepted anywhere: 30 days, in milliseconds. */
#define PARSE_DURATION_MAX_MS (30ULL * 24 * 3600 * 1000)

/* Parse a whole decimal unsigned integer in [min, max].  No sign, no
 * leading or trailing space, no base prefix.  Returns 0 and sets *ret,
 * -EINVAL for a malformed string, -ERANGE for one out of bounds. */
int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret);

/* Parse a duration: a decimal number followed by one unit, "ms", "s", "m"
 * or "h" ("500ms", "30s", "5m", "1h"); "0" alone is also accepted.
 * The result is in milliseconds, at most PARSE_DURATION_MAX_MS.
 * Returns 0, -EINVAL or -ERANGE; *ret is untouched on failure. */
int parse_duration(const char *s, uint64_t *ret_ms);

/* Write a duration the way parse_duration() reads it, in the largest unit
 * that is exact ("90s", "5m", "1500ms").  Returns buf. */
char *parse_format_duration(uint64_t ms, char *buf, size_t size);

/* Parse a signal name ("TERM", "SIGTERM", "term") or number (1..64).
 * Returns the signal number or -EINVAL. */
int parse_signal(const char *s);

/* Name of a signal without its "SIG" prefix ("TERM"), or NULL when the
 * number is not one we name. */
const char *parse_signal_name(int sig);

/* "ADDR:PORT" or "[V6]:PORT", numeric, port 0 to 65535, into ss and
 * *len.  Returns 0 or -EINVAL. */
struct sockaddr_storage;
int parse_sockaddr(const char *text, struct sockaddr_storage *ss, int *len);

#endif
