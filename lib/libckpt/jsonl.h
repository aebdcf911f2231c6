/* jsonl: the flat JSON objects of the control protocol, one per line
 * (docs/protocols.md).  No dependency, no allocation: libckpt lives in the
 * trainer's process.
 *
 * A message is an object whose values are strings, integers (|n| < 2^53),
 * true, false or null; nested objects and arrays, fractions, exponents,
 * duplicate keys, invalid UTF-8 escapes and NUL characters are refused.
 * Lines come from a peer and are untrusted. */
#ifndef CKPT_JSONL_H
#define CKPT_JSONL_H

#include <stdbool.h>
#include <stddef.h>

#define JSONL_LINE_MAX 65536
#define JSONL_MEMBERS_MAX 32

enum jsonl_type { JSONL_NULL, JSONL_BOOL, JSONL_INT, JSONL_STRING };

struct jsonl_value {
    enum jsonl_type type;
    long long num;               /* JSONL_INT, JSONL_BOOL (0 or 1) */
    const char *str;             /* JSONL_STRING: decoded, terminated */
};

struct jsonl_msg {
    size_t n;
    const char *keys[JSONL_MEMBERS_MAX];
    struct jsonl_value values[JSONL_MEMBERS_MAX];
};

/* Parse line[0..len) (no newline) in place: strings are decoded into the
 * line itself, and the message points into it.  Returns 0 or -1. */
int jsonl_parse(char *line, size_t len, struct jsonl_msg *m);

/* The value of key, NULL when absent. */
const struct jsonl_value *jsonl_get(const struct jsonl_msg *m, const char *key);

/* The "type" member when it is a string, else NULL. */
const char *jsonl_type(const struct jsonl_msg *m);

/* A member to write. */
struct jsonl_kv {
    const char *key;
    enum jsonl_type type;
    long long num;
    const char *str;
};
#define JSONL_STR(k, s) { (k), JSONL_STRING, 0, (s) }
#define JSONL_INT(k, n) { (k), JSONL_INT, (n), NULL }
#define JSONL_NUL(k) { (k), JSONL_NULL, 0, NULL }
#define JSONL_BOOLV(k, b) { (k), JSONL_BOOL, (b) ? 1 : 0, NULL }

/* Write {"v":1, members...}\n into buf (JSONL_NULL members, and strings
 * that are NULL, as null).  Returns the length written
 * (without a terminating NUL, which is written too), or -1 when it does not
 * fit in size bytes or a string is not valid UTF-8. */
int jsonl_build(char *buf, size_t size, const struct jsonl_kv *kv, size_t n);

#endif
