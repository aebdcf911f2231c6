/* strict: small helpers the parsers of untrusted input share (cloud
 * metadata, S3 answers, credentials).  No I/O. */
#ifndef SPOT_STRICT_H
#define SPOT_STRICT_H

#include <stdbool.h>
#include <stddef.h>

struct cJSON;

/* Set *ret_why (when not NULL) to why and return -EINVAL. */
int strict_garbage(const char **ret_why, const char *why);

/* a[0..len) equals the lowercase ASCII string b, ignoring ASCII case. */
bool strict_ascii_case_equal(const char *a, size_t len, const char *b);

/* cJSON decodes "\u0000" into a NUL that silently cuts a string short:
 * "2017-09-18T08:22:00Z\u0000junk" would read as a good time.  Refusing the
 * escape anywhere also refuses a literal backslash followed by "u0000",
 * which no service sends. */
bool strict_json_has_escaped_nul(const char *s, size_t len);

/* The member key of obj, NULL when absent; a key given twice is garbage.
 * Returns 0 or -EINVAL. */
int strict_json_member(const struct cJSON *obj, const char *key, const struct cJSON **ret,
                       const char **ret_why);

/* A string member: *ret is NULL when it is absent and not required.  why is
 * the reason given when it is missing (and required) or not a string. */
int strict_json_member_string(const struct cJSON *obj, const char *key, bool required,
                              const char **ret, const char *why, const char **ret_why);

/* Copy the string member key of o into out (size bytes, NUL included):
 * 1 copied, 0 absent, -1 not a string, too long, or (printable) holding
 * anything but printable ASCII. */
int strict_json_copy(const struct cJSON *o, const char *key, char *out, size_t size,
                     bool printable);

#endif
