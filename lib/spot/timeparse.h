/* timeparse: the time formats the metadata services use, parsed strictly
 * into milliseconds since the epoch, UTC.  No I/O, no locale, no TZ
 * environment: unit tests and fuzzers call these directly.
 *
 * Every function takes a string that is not necessarily terminated (s,
 * len) and must consume all of it; it returns 0 with *ret_ms set, or
 * -EINVAL (malformed, or a field out of range: month 13, 31 April, 29
 * February of a common year, hour 24, ...) with *ret_ms untouched.
 * Years 1970..9999 only. */
#ifndef SPOT_TIMEPARSE_H
#define SPOT_TIMEPARSE_H

#include <stddef.h>
#include <stdint.h>

/* RFC 3339: "2017-09-18T08:22:00Z", "2017-09-18T08:22:00.123Z",
 * "2017-09-18T08:22:00+08:00"; 't' and 'z' accepted too (AWS, Alibaba). */
int time_parse_rfc3339(const char *s, size_t len, int64_t *ret_ms);

/* RFC 1123 / HTTP date: "Mon, 19 Sep 2016 18:29:47 GMT" (Azure NotBefore).
 * The weekday must match the date. */
int time_parse_rfc1123(const char *s, size_t len, int64_t *ret_ms);

/* AWS scheduled events: "21 Jan 2019 09:00:43 GMT"; day may be one digit. */
int time_parse_aws_event(const char *s, size_t len, int64_t *ret_ms);

/* Tencent CVM: "2018-08-18 12:05:33", local time of China Standard Time
 * (UTC+8) with no zone marker. */
int time_parse_tencent(const char *s, size_t len, int64_t *ret_ms);

/* Days since 1970-01-01 of a proleptic Gregorian date (no range check). */
int64_t time_days_from_civil(int64_t y, unsigned m, unsigned d);

#endif
