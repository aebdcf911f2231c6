#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "spot/imds.h"
#include "spot/s3creds.h"

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The watcher's token: six hours, renewed in its last minute. */
static void aws_token(struct imds_token *t)
{
    struct imds_token_opts o = {
        .url = "http://127.0.0.1:1/latest/api/token",
        .ttl_header = "X-aws-ec2-metadata-token-ttl-seconds",
        .token_header = "X-aws-ec2-metadata-token",
        .ttl_s = IMDS_TOKEN_TTL_S,
        .renew_ms = 60 * 1000,
        .timeout_ms = 2000,
        .connect_timeout_ms = 1000,
    };

    imds_token_init(t, NULL, &o);
}

TEST(imds_token_lines)
{
    struct imds_token t;

    aws_token(&t);
    CHECK_STR(t.url, "http://127.0.0.1:1/latest/api/token");
    CHECK_STR(t.ttl_line, "X-aws-ec2-metadata-token-ttl-seconds: 21600");
    CHECK_STR(t.header, "");
    imds_token_set(&t, "AQAEAbc==", 5000);
    CHECK_STR(t.token, "AQAEAbc==");
    CHECK_STR(t.header, "X-aws-ec2-metadata-token: AQAEAbc==");
    CHECK_INT(t.got_ms, 5000);
    CHECK_INT(t.expiry_ms, 5000 + 21600 * 1000LL);
    imds_token_release(&t);
    CHECK_STR(t.token, "");
    CHECK(!imds_token_fresh(&t, 5000));
}

TEST(imds_token_fresh)
{
    const int64_t got = 1000, exp = got + 21600 * 1000LL;
    const struct {
        int64_t now;
        bool fresh;
    } cases[] = {
        { got, true },
        { exp - 60 * 1000 - 1, true },
        { exp - 60 * 1000, false },     /* the last minute: renewed */
        { exp - 1, false },
        { exp, false },
        { exp + 3600 * 1000, false },
    };
    struct imds_token t;

    aws_token(&t);
    /* No token yet, at any time (the monotonic clock starts near 0). */
    CHECK(!imds_token_fresh(&t, 0));
    CHECK(!imds_token_fresh(&t, -120 * 1000));
    CHECK(!imds_token_fresh(&t, got));
    imds_token_set(&t, "tok", got);
    for (size_t i = 0; i < LEN(cases); i++)
        if (imds_token_fresh(&t, cases[i].now) != cases[i].fresh) {
            printf("  case %zu: now %lld: fresh %d, expected %d\n", i, (long long)cases[i].now,
                   !cases[i].fresh, cases[i].fresh);
            harness_failed = 1;
        }
    /* Refused (401): stale at once, and its age is still known. */
    imds_token_drop(&t);
    CHECK(!imds_token_fresh(&t, got));
    CHECK_INT(imds_token_age_ms(&t, got + 1500), 1500);
    imds_token_set(&t, "tok2", got + 2000);
    CHECK(imds_token_fresh(&t, got + 2000));
    CHECK_INT(imds_token_age_ms(&t, got + 2500), 500);
}

TEST(imds_token_parse)
{
    char big[300];
    const struct {
        const char *body;
        size_t len;
        int ret;
        const char *token;
    } cases[] = {
        { "AQAEAbc==", 9, 0, "AQAEAbc==" },
        { "AQAEAbc==\n", 10, 0, "AQAEAbc==" },
        { "AQAEAbc==\r\n\r\n", 13, 0, "AQAEAbc==" },
        { "", 0, -EBADMSG, NULL },
        { "\r\n", 2, -EBADMSG, NULL },
        { "abc\ndef", 7, -EBADMSG, NULL },
        { "abc\rdef", 7, -EBADMSG, NULL },
        { "abc\0def", 7, -EBADMSG, NULL },
        { "\0abc", 4, -EBADMSG, NULL },
    };

    for (size_t i = 0; i < LEN(cases); i++) {
        char out[IMDS_TOKEN_MAX];
        int r;

        memset(out, 'x', sizeof(out));
        out[sizeof(out) - 1] = '\0';
        r = imds_token_parse(cases[i].body, cases[i].len, out, sizeof(out));
        if (r != cases[i].ret) {
            printf("  case %zu: %d, expected %d\n", i, r, cases[i].ret);
            harness_failed = 1;
        } else if (r == 0) {
            CHECK_STR(out, cases[i].token);
        } else if (out[0] != 'x') {
            printf("  case %zu: output written on failure\n", i);
            harness_failed = 1;
        }
    }
    /* 255 bytes fit, 256 do not. */
    memset(big, 'a', sizeof(big));
    {
        char out[IMDS_TOKEN_MAX];

        CHECK_INT(imds_token_parse(big, IMDS_TOKEN_MAX - 1, out, sizeof(out)), 0);
        CHECK_INT(strlen(out), IMDS_TOKEN_MAX - 1);
        CHECK_INT(imds_token_parse(big, IMDS_TOKEN_MAX, out, sizeof(out)), -EBADMSG);
    }
}

/* The store's freshness decision on the wall clock: static credentials
 * always; a role's until five minutes before they expire, or for a minute
 * when they came with less than that to live. */
TEST(s3creds_fresh)
{
    const int64_t t0 = 1700000000000LL, min = 60 * 1000, hour = 60 * min;
    const struct {
        int64_t fetched, expires, now;
        bool fresh;
    } cases[] = {
        { t0, t0 + 6 * hour, t0, true },
        { t0, t0 + 6 * hour, t0 + 6 * hour - 5 * min - 1, true },
        { t0, t0 + 6 * hour, t0 + 6 * hour - 5 * min, false },
        { t0, t0 + 6 * hour, t0 + 6 * hour, false },
        /* short-lived: three minutes to live */
        { t0, t0 + 3 * min, t0, true },
        { t0, t0 + 3 * min, t0 + min - 1, true },
        { t0, t0 + 3 * min, t0 + min, false },
        /* exactly five minutes to live: not short-lived */
        { t0, t0 + 5 * min, t0, false },
        /* short-lived with 30 s to live: kept until they expire */
        { t0, t0 + 30 * 1000, t0 + 29 * 1000, true },
        { t0, t0 + 30 * 1000, t0 + 30 * 1000, false },
    };
    struct s3creds c;

    memset(&c, 0, sizeof(c));
    c.state = S3CREDS_OK;
    CHECK(s3creds_fresh(&c, t0));          /* static: no expiry */
    for (size_t i = 0; i < LEN(cases); i++) {
        c.state = S3CREDS_OK;
        c.fetched_ms = cases[i].fetched;
        c.aws.expiration_ms = cases[i].expires;
        if (s3creds_fresh(&c, cases[i].now) != cases[i].fresh) {
            printf("  case %zu: fresh %d, expected %d\n", i, !cases[i].fresh, cases[i].fresh);
            harness_failed = 1;
        }
        c.state = S3CREDS_LOADING;
        CHECK(!s3creds_fresh(&c, cases[i].now));
        c.state = S3CREDS_FAILED;
        CHECK(!s3creds_fresh(&c, cases[i].now));
    }
}
