/* The credentials parsers on arbitrary bytes.  Besides the sanitizers, it
 * aborts when a promise of awscreds.h is broken: 0, -ENOENT or -EINVAL
 * with a short printable reason, *out untouched on failure, the same
 * answer twice, credentials that are non-empty spaceless printable ASCII
 * and survive being written back as a credentials file and read again. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/awscreds.h"

#define MS_END 253402300800000LL

static void check_reason(const char *why)
{
    if (!why || !*why || strlen(why) > 100)
        abort();
    for (; *why; why++)
        if (*why < 0x20 || *why > 0x7e)
            abort();
}

static void check_token(const char *s, size_t size, bool nonempty)
{
    const char *end = memchr(s, '\0', size);

    if (!end || (nonempty && end == s))
        abort();
    for (; s < end; s++)
        if (*s < 0x21 || *s > 0x7e)
            abort();
}

static bool same(const struct aws_creds *a, const struct aws_creds *b)
{
    return strcmp(a->access_key_id, b->access_key_id) == 0 &&
           strcmp(a->secret_access_key, b->secret_access_key) == 0 &&
           strcmp(a->session_token, b->session_token) == 0 && a->expiration_ms == b->expiration_ms;
}

static void check_creds(const struct aws_creds *c)
{
    check_token(c->access_key_id, sizeof(c->access_key_id), true);
    check_token(c->secret_access_key, sizeof(c->secret_access_key), true);
    check_token(c->session_token, sizeof(c->session_token), false);
}

/* Write creds as a file and read them back. */
static void round_trip(const struct aws_creds *c)
{
    static char text[AWS_TOKEN_MAX + 512];
    struct aws_creds back;
    int len = snprintf(text, sizeof(text),
                       "[x]\r\naws_access_key_id = %s\r\nAWS_SECRET_ACCESS_KEY=%s\r\n"
                       "aws_session_token = %s\r\n",
                       c->access_key_id, c->secret_access_key, c->session_token);

    if (len < 0 || (size_t)len >= sizeof(text))
        abort();
    if (awscreds_parse(text, (size_t)len, "x", &back, NULL) != 0 ||
        strcmp(back.access_key_id, c->access_key_id) != 0 ||
        strcmp(back.secret_access_key, c->secret_access_key) != 0 ||
        strcmp(back.session_token, c->session_token) != 0)
        abort();
}

static void fuzz_file(const char *s, size_t size, const char *profile)
{
    struct aws_creds c, again;
    const char *why = NULL;
    int r;

    memset(&c, 0xa5, sizeof(c));
    r = awscreds_parse(s, size, profile, &c, &why);
    if (r != 0 && r != -ENOENT && r != -EINVAL)
        abort();
    if (r != 0) {
        check_reason(why);
        if (!fuzz_poisoned(&c, sizeof(c)))
            abort();
        return;
    }
    check_creds(&c);
    if (c.expiration_ms != 0)
        abort();
    memset(&again, 0, sizeof(again));
    if (awscreds_parse(s, size, profile, &again, NULL) != 0 || !same(&c, &again))
        abort();
    round_trip(&c);
}

static void fuzz_imds(const char *s, size_t size)
{
    struct aws_creds c, again;
    const char *why = NULL;
    int r;

    memset(&c, 0xa5, sizeof(c));
    r = awscreds_parse_imds(s, size, &c, &why);
    if (r != 0 && r != -EINVAL && r != -ENOMEM)
        abort();
    if (r != 0) {
        check_reason(why);
        if (!fuzz_poisoned(&c, sizeof(c)))
            abort();
        return;
    }
    check_creds(&c);
    if (!c.session_token[0] || c.expiration_ms < 0 || c.expiration_ms >= MS_END)
        abort();
    memset(&again, 0, sizeof(again));
    if (awscreds_parse_imds(s, size, &again, NULL) != 0 || !same(&c, &again))
        abort();
    round_trip(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;

    fuzz_file(s, size, "default");
    fuzz_file(s, size, "p");
    fuzz_file(s, size, "test:tester");
    fuzz_imds(s, size);
    return 0;
}
