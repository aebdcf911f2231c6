#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "spot/awscreds.h"

#define LEN(a) (sizeof(a) / sizeof((a)[0]))
#define SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

static bool poisoned(const struct aws_creds *c)
{
    const unsigned char *b = (const unsigned char *)c;

    for (size_t i = 0; i < sizeof(*c); i++)
        if (b[i] != 0x5a)
            return false;
    return true;
}

struct file_case {
    const char *text;
    const char *profile;
    int ret;
    const char *id, *secret, *token;
};

static void run_file_cases(const struct file_case *cases, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const struct file_case *c = &cases[i];
        const char *why = NULL;
        struct aws_creds cr;
        int r;

        memset(&cr, 0x5a, sizeof(cr));
        r = awscreds_parse(c->text, strlen(c->text), c->profile, &cr, &why);
        if (r != c->ret) {
            printf("  case %zu: %d (%s), expected %d\n", i, r, why ? why : "no reason", c->ret);
            harness_failed = 1;
            continue;
        }
        if (r < 0) {
            /* A reason, no secret in it, and the output untouched. */
            if (!why || !*why || strstr(why, "EXAMPLE") || strstr(why, "tester") ||
                !poisoned(&cr)) {
                printf("  case %zu: bad reason or output written\n", i);
                harness_failed = 1;
            }
            continue;
        }
        if (strcmp(cr.access_key_id, c->id) != 0 || strcmp(cr.secret_access_key, c->secret) != 0 ||
            strcmp(cr.session_token, c->token) != 0 || cr.expiration_ms != 0) {
            printf("  case %zu: id \"%s\" secret \"%s\" token \"%s\"\n", i, cr.access_key_id,
                   cr.secret_access_key, cr.session_token);
            harness_failed = 1;
        }
        awscreds_wipe(&cr);
        CHECK(cr.access_key_id[0] == 0 && cr.secret_access_key[0] == 0);
    }
}

TEST(awscreds_file)
{
    static const struct file_case cases[] = {
        { "[default]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = " SECRET "\n",
          "default", 0, "AKIDEXAMPLE", SECRET, "" },
        { "[default]\naws_access_key_id=A\naws_secret_access_key=S\n", NULL, 0, "A", "S", "" },
        /* Swift tempauth: ':' in the key id. */
        { "[swift]\r\naws_access_key_id = test:tester\r\naws_secret_access_key = testing\r\n",
          "swift", 0, "test:tester", "testing", "" },
        { "[p]\naws_access_key_id: test:tester\naws_secret_access_key: a=b==\n", "p", 0,
          "test:tester", "a=b==", "" },
        /* Comments, blank lines, case, spaces, other profiles, unknown keys. */
        { "# top comment\n; another\n\n[default]\naws_access_key_id = D\n"
          "aws_secret_access_key = DS\n\n[ other ]  # trailing comment\n"
          "AWS_ACCESS_KEY_ID\t=\tO  \nAws_Secret_Access_Key = OS  \r\n"
          "aws_session_token = T/+=\nregion = us-east-1\nsome key = some value with spaces\n",
          "other", 0, "O", "OS", "T/+=" },
        { "[other]\naws_access_key_id = O\naws_secret_access_key = OS\n[default]\n"
          "aws_access_key_id = D\naws_secret_access_key = DS", "default", 0, "D", "DS", "" },
        /* A profile in two sections is merged, the later key wins. */
        { "[p]\naws_access_key_id = A1\naws_secret_access_key = S1\n[q]\n"
          "aws_access_key_id = Q\n[p]\naws_access_key_id = A2\n", "p", 0, "A2", "S1", "" },
        { "[p]\naws_access_key_id = A1\naws_access_key_id = A2\naws_secret_access_key = S\n",
          "p", 0, "A2", "S", "" },
        /* An empty value counts as absent; it clears an earlier one. */
        { "[p]\naws_access_key_id = A\naws_secret_access_key = S\naws_session_token = T\n"
          "aws_session_token =\n", "p", 0, "A", "S", "" },
        { "[p]\naws_access_key_id = A\naws_secret_access_key = S\naws_security_token = OLD\n",
          "p", 0, "A", "S", "OLD" },
        /* Nested settings of unknown keys are skipped. */
        { "[p]\ns3 =\n  max_concurrency = 10\n  addressing_style = path\n"
          "aws_access_key_id = A\naws_secret_access_key = S\n", "p", 0, "A", "S", "" },
        { "\xef\xbb\xbf[p]\naws_access_key_id = A\naws_secret_access_key = S", "p", 0, "A", "S",
          "" },
        /* Non-ASCII in comments and in other profiles is fine. */
        { "# caf\xc3\xa9\n[\xc3\xa9t\xc3\xa9]\nx = \xc3\xa9\n[p]\naws_access_key_id = A\n"
          "aws_secret_access_key = S", "p", 0, "A", "S", "" },
        /* Section names are exact. */
        { "[profile p]\naws_access_key_id = A\naws_secret_access_key = S\n", "p", -ENOENT, NULL, NULL, NULL },
        { "[P]\naws_access_key_id = A\naws_secret_access_key = S\n", "p", -ENOENT, NULL, NULL, NULL },
        { "[default]\naws_access_key_id = A\naws_secret_access_key = S\n", "other", -ENOENT, NULL, NULL, NULL },
        { "[p]\naws_access_key_id = A\n", "p", -ENOENT, NULL, NULL, NULL },
        { "[p]\naws_secret_access_key = S\naws_session_token = T\n", "p", -ENOENT, NULL, NULL, NULL },
        { "[p]\naws_access_key_id = A\naws_secret_access_key =\n", "p", -ENOENT, NULL, NULL, NULL },
        { "", "default", -ENOENT, NULL, NULL, NULL },
        { "# nothing\n\n", "default", -ENOENT, NULL, NULL, NULL },
    };

    run_file_cases(cases, LEN(cases));
}

TEST(awscreds_file_garbage)
{
    static const struct file_case cases[] = {
        { "aws_access_key_id = A\n[p]\naws_secret_access_key = S\n", "p", -EINVAL, NULL, NULL, NULL },
        { "[p]\njust some words\n", "p", -EINVAL, NULL, NULL, NULL },
        { "[p\naws_access_key_id = A\n", "p", -EINVAL, NULL, NULL, NULL },
        { "[]\n", "p", -EINVAL, NULL, NULL, NULL },
        { "[  ]\n", "p", -EINVAL, NULL, NULL, NULL },
        { "[p] junk\n", "p", -EINVAL, NULL, NULL, NULL },
        { "[p]\n= value\n", "p", -EINVAL, NULL, NULL, NULL },
        /* Credentials are single tokens: an inline comment is refused. */
        { "[p]\naws_access_key_id = A # mine\naws_secret_access_key = S\n", "p", -EINVAL, NULL, NULL, NULL },
        { "[p]\naws_access_key_id = A\naws_secret_access_key = " SECRET " x\n", "p", -EINVAL, NULL, NULL, NULL },
        { "[p]\naws_access_key_id = A\xc3\xa9\naws_secret_access_key = S\n", "p", -EINVAL, NULL, NULL, NULL },
        { "[p]\naws_access_key_id = A\x01\naws_secret_access_key = S\n", "p", -EINVAL, NULL, NULL, NULL },
        { "[p]\naws_access_key_id = A\raws_secret_access_key = S\n", "p", -EINVAL, NULL, NULL, NULL },
        { "[q]\nx = \x7f\n[p]\naws_access_key_id = A\naws_secret_access_key = S\n", "p",
          -EINVAL, NULL, NULL, NULL },
        /* Garbage elsewhere in the file still makes it garbage. */
        { "[p]\naws_access_key_id = A\naws_secret_access_key = S\n[q]\nnonsense\n", "p",
          -EINVAL, NULL, NULL, NULL },
        /* An indented line under a credential would be joined to it. */
        { "[p]\n  aws_access_key_id = A\n  aws_secret_access_key = S\n", "p", -EINVAL, NULL, NULL, NULL },
        { "[q]\nx = 1\n  [p]\naws_access_key_id = A\naws_secret_access_key = S\n", "p", -EINVAL,
          NULL, NULL, NULL },
        { "[p]\naws_secret_access_key =\n  " SECRET "\naws_access_key_id = A\n", "p", -EINVAL, NULL, NULL, NULL },
        { "[p]\naws_access_key_id = A\naws_secret_access_key = S\n", "", -EINVAL, NULL, NULL, NULL },
    };

    run_file_cases(cases, LEN(cases));
}

TEST(awscreds_file_limits)
{
    size_t size = AWSCREDS_MAX_FILE + 1, len;
    char *big = malloc(size + 1);
    const char *why = NULL;
    struct aws_creds cr;
    char longp[AWS_PROFILE_MAX + 2];
    static const char nul[] = "[p]\naws_access_key_id = A\0B\naws_secret_access_key = S\n";

    if (!big) {
        CHECK(big != NULL);
        return;
    }
    CHECK_INT(awscreds_parse(nul, sizeof(nul) - 1, "p", &cr, &why), -EINVAL);
    CHECK_HAS(why, "NUL");
    CHECK_INT(awscreds_parse(NULL, 5, "p", &cr, &why), -ENOENT);
    memset(longp, 'p', sizeof(longp) - 1);
    longp[sizeof(longp) - 1] = '\0';
    CHECK_INT(awscreds_parse("[p]\n", 4, longp, &cr, &why), -EINVAL);

    /* 1 MiB of comments before the profile is fine, one byte more is not. */
    len = (size_t)sprintf(big, "[p]\naws_access_key_id = A\naws_secret_access_key = S\n");
    memset(big + len, '#', AWSCREDS_MAX_FILE - len);
    big[len + 1] = '\n';
    big[AWSCREDS_MAX_FILE - 1] = '\n';
    CHECK_INT(awscreds_parse(big, AWSCREDS_MAX_FILE, "p", &cr, &why), 0);
    CHECK_INT(awscreds_parse(big, size, "p", &cr, &why), -EINVAL);
    CHECK_HAS(why, "1 MiB");

    /* Values are kept whole or refused, never cut. */
    len = (size_t)sprintf(big, "[p]\naws_access_key_id = A\naws_secret_access_key = ");
    memset(big + len, 's', AWS_SECRET_MAX);
    len += AWS_SECRET_MAX;
    CHECK_INT(awscreds_parse(big, len, "p", &cr, &why), 0);
    CHECK_INT(strlen(cr.secret_access_key), AWS_SECRET_MAX);
    big[len++] = 's';
    CHECK_INT(awscreds_parse(big, len, "p", &cr, &why), -EINVAL);
    CHECK_HAS(why, "too long");
    len = (size_t)sprintf(big, "[p]\naws_access_key_id = A\naws_secret_access_key = S\n"
                               "aws_session_token = ");
    memset(big + len, 't', AWS_TOKEN_MAX);
    len += AWS_TOKEN_MAX;
    CHECK_INT(awscreds_parse(big, len, "p", &cr, &why), 0);
    CHECK_INT(strlen(cr.session_token), AWS_TOKEN_MAX);
    big[len++] = 't';
    CHECK_INT(awscreds_parse(big, len, "p", &cr, &why), -EINVAL);
    awscreds_wipe(&cr);
    awscreds_wipe(NULL);
    free(big);
}

#define IMDS(code, extra)                                                                    \
    "{\"Code\":\"" code "\",\"LastUpdated\":\"2017-05-17T09:01:08Z\",\"Type\":\"AWS-HMAC\","   \
    "\"AccessKeyId\":\"ASIAEXAMPLE\",\"SecretAccessKey\":\"" SECRET "\","                      \
    "\"Token\":\"IQoJb3JpZ2luX2VjEXAMPLE/+==\",\"Expiration\":\"2017-05-17T15:09:54Z\"" extra "}"

TEST(awscreds_imds)
{
    static const struct { const char *body; int ret; } bad[] = {
        { IMDS("Failure", ""), -EINVAL },
        { IMDS("success", ""), -EINVAL },
        { IMDS("Success", ",\"Code\":\"Success\""), -EINVAL },
        { IMDS("Success", ",\"Token\":\"x\""), -EINVAL },
        { "{\"Code\":\"Success\",\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\","
          "\"Expiration\":\"2017-05-17T15:09:54Z\"}", -EINVAL },
        { "{\"Code\":\"Success\",\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\","
          "\"Token\":\"T\"}", -EINVAL },
        { "{\"Code\":\"Success\",\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\","
          "\"Token\":\"T\",\"Expiration\":\"tomorrow\"}", -EINVAL },
        { "{\"Code\":\"Success\",\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"\","
          "\"Token\":\"T\",\"Expiration\":\"2017-05-17T15:09:54Z\"}", -EINVAL },
        { "{\"Code\":\"Success\",\"AccessKeyId\":1,\"SecretAccessKey\":\"S\","
          "\"Token\":\"T\",\"Expiration\":\"2017-05-17T15:09:54Z\"}", -EINVAL },
        { "{\"Code\":\"Success\",\"AccessKeyId\":\"A B\",\"SecretAccessKey\":\"S\","
          "\"Token\":\"T\",\"Expiration\":\"2017-05-17T15:09:54Z\"}", -EINVAL },
        { "{\"Code\":\"Success\",\"AccessKeyId\":\"A\\u0000B\",\"SecretAccessKey\":\"S\","
          "\"Token\":\"T\",\"Expiration\":\"2017-05-17T15:09:54Z\"}", -EINVAL },
        { "{\"Code\":\"Success\",\"Type\":\"Other\",\"AccessKeyId\":\"A\",\"SecretAccessKey\":"
          "\"S\",\"Token\":\"T\",\"Expiration\":\"2017-05-17T15:09:54Z\"}", -EINVAL },
        { IMDS("Success", "") "{}", -EINVAL },
        { IMDS("Success", "") "x", -EINVAL },
        { "[]", -EINVAL },
        { "", -EINVAL },
        { "{\"Code\":\"Success\"", -EINVAL },
        { "not json", -EINVAL },
    };
    static const char ok[] = IMDS("Success", ",\"Extra\":[1,2]") "\n";
    const char *why = NULL;
    struct aws_creds cr;

    CHECK_INT(awscreds_parse_imds(ok, strlen(ok), &cr, &why), 0);
    CHECK_STR(cr.access_key_id, "ASIAEXAMPLE");
    CHECK_STR(cr.secret_access_key, SECRET);
    CHECK_STR(cr.session_token, "IQoJb3JpZ2luX2VjEXAMPLE/+==");
    CHECK_INT(cr.expiration_ms, 1495033794000LL);
    for (size_t i = 0; i < LEN(bad); i++) {
        int r;

        why = NULL;
        memset(&cr, 0x5a, sizeof(cr));
        r = awscreds_parse_imds(bad[i].body, strlen(bad[i].body), &cr, &why);
        if (r != bad[i].ret || !why || strstr(why, "EXAMPLE") || !poisoned(&cr)) {
            printf("  bad %zu: %d (%s)\n", i, r, why ? why : "no reason");
            harness_failed = 1;
        }
    }
    CHECK_INT(awscreds_parse_imds("{\"Code\":\"Success\"}\0", 20, &cr, &why), -EINVAL);
    CHECK_HAS(why, "NUL");
}
