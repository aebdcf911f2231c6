/* awscreds: where S3 credentials come from, parsed strictly.  No I/O: the
 * caller reads the file or fetches the metadata document and hands in the
 * bytes; unit tests and fuzzers call these directly.
 *
 * Input is untrusted: (text, len) need not be terminated.  Functions
 * return 0 or a negative errno with a short static reason in *ret_why
 * (when ret_why is not NULL).  A reason never holds any part of the input,
 * so a secret cannot reach a log through it.  *out is untouched on
 * failure. */
#ifndef SPOT_AWSCREDS_H
#define SPOT_AWSCREDS_H

#include <stddef.h>
#include <stdint.h>

/* Largest credentials file and metadata document accepted. */
#define AWSCREDS_MAX_FILE (1024 * 1024)
#define AWSCREDS_MAX_JSON (64 * 1024)

#define AWS_KEY_ID_MAX 128
#define AWS_SECRET_MAX 128
/* STS promises no maximum; real tokens are 300 to 2000 bytes. */
#define AWS_TOKEN_MAX 8192
#define AWS_PROFILE_MAX 128

/* Every string is terminated, printable ASCII without spaces, and kept
 * whole: a value that does not fit is an error, never cut.  The struct
 * holds secrets: clear it with awscreds_wipe() when done. */
struct aws_creds {
    char access_key_id[AWS_KEY_ID_MAX + 1];         /* never empty */
    char secret_access_key[AWS_SECRET_MAX + 1];     /* never empty */
    char session_token[AWS_TOKEN_MAX + 1];          /* "" when none */
    int64_t expiration_ms;                          /* 0 when they do not expire */
};

/* Parse the shared credentials file (~/.aws/credentials) for profile:
 *
 *   [default]
 *   aws_access_key_id = AKIA...
 *   aws_secret_access_key = ...
 *   aws_session_token = ...        (optional)
 *
 * Section names are the profile names, compared exactly (trimmed).  Keys
 * are case-insensitive, '=' or ':' separates a key from its value (the
 * first of them, so values may hold both: Swift's "test:tester"), spaces
 * around it and at the ends of a line are dropped, CRLF is fine, lines
 * starting with '#' or ';' are comments.  A profile given in two sections
 * is one profile, and a key given twice keeps its last value.  Unknown
 * keys, and indented continuation lines of unknown keys, are ignored.  An
 * empty value counts as absent.  A UTF-8 byte order mark is skipped.
 *
 * Returns 0 with *out set (expiration_ms 0), -ENOENT when the profile is
 * missing or lacks the key id or the secret, -EINVAL for garbage anywhere
 * in the file (a line that is none of the above, a key before any section,
 * a NUL byte, a file over AWSCREDS_MAX_FILE, a credential value that is
 * too long or holds a space or a control character). */
int awscreds_parse(const char *text, size_t len, const char *profile, struct aws_creds *out,
                   const char **ret_why);

/* Parse the instance role document of the EC2 metadata service
 * (/latest/meta-data/iam/security-credentials/<role>):
 * {"Code": "Success", "LastUpdated": ..., "Type": "AWS-HMAC",
 *  "AccessKeyId": ..., "SecretAccessKey": ..., "Token": ...,
 *  "Expiration": "2017-05-17T15:09:54Z"}
 * Code must be "Success"; AccessKeyId, SecretAccessKey, Token and
 * Expiration (RFC 3339) are required; Type, when present, is "AWS-HMAC".
 * Unknown members are ignored, known ones must be strings, a key given
 * twice is garbage.  Returns 0 or -EINVAL (or -ENOMEM). */
int awscreds_parse_imds(const char *body, size_t len, struct aws_creds *out,
                        const char **ret_why);

/* Zero c in a way the compiler keeps.  NULL is fine. */
void awscreds_wipe(struct aws_creds *c);

#endif
