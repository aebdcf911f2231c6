#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "spot/s3xml.h"

#define LEN(a) (sizeof(a) / sizeof((a)[0]))
#define DECL "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
#define NS " xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\""
/* 2009-10-12T17:50:30.000Z */
#define T_2009 1255369830000LL

/* A struct filled with a pattern, to see whether a parser wrote it. */
#define POISON(x) memset(&(x), 0x5a, sizeof(x))

static bool poisoned(const void *p, size_t size)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < size; i++)
        if (b[i] != 0x5a)
            return false;
    return true;
}

/* Error documents. */

struct error_case {
    const char *body;
    const char *code, *message, *key, *bucket, *request_id, *resource;
};

TEST(s3xml_error)
{
    static const struct error_case cases[] = {
        { DECL "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
               "<RequestId>4442587FB7D0A2F9</RequestId><HostId>abc=</HostId></Error>",
          "SlowDown", "Please reduce your request rate.", "", "", "4442587FB7D0A2F9", "" },
        { "<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message>"
          "<Key>ckpt/a b&amp;c</Key><BucketName>bkt</BucketName><Resource>/bkt/ckpt</Resource>"
          "<RequestId>tx1</RequestId></Error>",
          "NoSuchKey", "The specified key does not exist.", "ckpt/a b&c", "bkt", "tx1",
          "/bkt/ckpt" },
        /* Non-ASCII and control characters become one '?' each. */
        { "<Error><Code>X</Code><Message>caf\xc3\xa9\tand &#x1F600;!</Message></Error>", "X",
          "caf??and ?!", "", "", "", "" },
        /* Unknown elements, even with children, are ignored. */
        { "<Error><Extra><A>1</A></Extra><Code>AccessDenied</Code></Error>", "AccessDenied", "",
          "", "", "", "" },
    };

    for (size_t i = 0; i < LEN(cases); i++) {
        const struct error_case *c = &cases[i];
        const char *why = NULL;
        struct s3_error e;
        int r;

        POISON(e);
        r = s3xml_parse_error(c->body, strlen(c->body), &e, &why);
        if (r != 0) {
            printf("  case %zu: %d (%s)\n", i, r, why ? why : "no reason");
            harness_failed = 1;
            continue;
        }
        CHECK_STR(e.code, c->code);
        CHECK_STR(e.message, c->message);
        CHECK_STR(e.key, c->key);
        CHECK_STR(e.bucket, c->bucket);
        CHECK_STR(e.request_id, c->request_id);
        CHECK_STR(e.resource, c->resource);
    }
}

TEST(s3xml_error_truncates)
{
    char body[2048], longmsg[1001];
    struct s3_error e;

    memset(longmsg, 'm', 1000);
    longmsg[1000] = '\0';
    snprintf(body, sizeof(body), "<Error><Code>%s</Code><Message>%s</Message></Error>",
             "AVeryLongCodeThatGoesOnAndOnAndOnForMoreThanSixtyFourBytesInTotal__", longmsg);
    CHECK_INT(s3xml_parse_error(body, strlen(body), &e, NULL), 0);
    CHECK_INT(strlen(e.code), sizeof(e.code) - 1);
    CHECK_INT(strlen(e.message), sizeof(e.message) - 1);
    CHECK(strncmp(e.code, "AVeryLongCode", 13) == 0);
}

/* What the XML reader accepts, seen through a key (kept byte for byte). */
struct key_case {
    const char *before;   /* before <ListBucketResult> */
    const char *key;      /* the raw XML of the key */
    const char *expect;   /* the decoded key */
};

static int parse_key(const char *before, const char *key, struct s3_list *l, const char **why)
{
    char body[4096];

    snprintf(body, sizeof(body),
             "%s<ListBucketResult" NS "><IsTruncated>false</IsTruncated><Contents><Key>%s</Key>"
             "<LastModified>2009-10-12T17:50:30.000Z</LastModified><Size>1</Size></Contents>"
             "</ListBucketResult>",
             before, key);
    return s3xml_parse_list(body, strlen(body), l, why);
}

TEST(s3xml_reader_accepts)
{
    static const struct key_case cases[] = {
        { "", "plain", "plain" },
        { DECL, "a&amp;b&lt;c&gt;d&quot;e&apos;f", "a&b<c>d\"e'f" },
        { "<?xml version='1.0'?>", "&#65;&#x42;&#x00063;", "ABc" },
        { "<?xml version=\"1.0\" standalone=\"yes\" ?>", "&#xe9;&#233;", "\xc3\xa9\xc3\xa9" },
        { "", "&#x10FFFF;&#x1F600;", "\xf4\x8f\xbf\xbf\xf0\x9f\x98\x80" },
        { "", "<![CDATA[<raw> & ]] stuff]]>", "<raw> & ]] stuff" },
        { "", "a<!-- a comment -->b<?pi data?>c", "abc" },
        { "", "a]b>c", "a]b>c" },
        { "", "  spaced  ", "  spaced  " },
        { "", "line1\r\nline2\rline3&#13;", "line1\nline2\nline3\r" },
        { "\xef\xbb\xbf" DECL, "bom", "bom" },
        /* S3 keeps a slow CompleteMultipartUpload alive with spaces. */
        { "   \n\n  " DECL "<!-- c -->\n", "ws", "ws" },
        { "<?xml-stylesheet href='x'?>", "pi", "pi" },
        { "", "caf\xc3\xa9/\xe6\x97\xa5", "caf\xc3\xa9/\xe6\x97\xa5" },
    };

    for (size_t i = 0; i < LEN(cases); i++) {
        const char *why = NULL;
        struct s3_list l;
        int r = parse_key(cases[i].before, cases[i].key, &l, &why);

        if (r != 0) {
            printf("  case %zu: %d (%s)\n", i, r, why ? why : "no reason");
            harness_failed = 1;
            continue;
        }
        CHECK_INT(l.n_objects, 1);
        CHECK_STR(l.objects[0].key, cases[i].expect);
        s3xml_list_release(&l);
    }
}

struct garbage_case {
    const char *body;
    const char *why;      /* a part of the reason */
};

static void run_garbage(const struct garbage_case *cases, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const char *why = NULL;
        struct s3_error e;
        struct s3_list l;
        int r;

        POISON(e);
        r = s3xml_parse_error(cases[i].body, strlen(cases[i].body), &e, &why);
        if (r != -EINVAL || !why || !strstr(why, cases[i].why) || !poisoned(&e, sizeof(e))) {
            printf("  case %zu: \"%.60s\" gave %d (%s), expected -EINVAL (%s)\n", i,
                   cases[i].body, r, why ? why : "no reason", cases[i].why);
            harness_failed = 1;
        }
        POISON(l);
        r = s3xml_parse_list(cases[i].body, strlen(cases[i].body), &l, &why);
        if (r != -EINVAL || !poisoned(&l, sizeof(l))) {
            printf("  case %zu: s3xml_parse_list gave %d\n", i, r);
            harness_failed = 1;
        }
    }
}

#define BOMB                                                                                 \
    "<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\">"                           \
    "<!ENTITY lol2 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">]>"               \
    "<Error><Code>&lol2;</Code></Error>"

TEST(s3xml_reader_garbage)
{
    static const struct garbage_case cases[] = {
        { "", "empty" },
        { "   \r\n", "empty" },
        { BOMB, "DOCTYPE" },
        { "<!ENTITY x \"y\"><Error><Code>A</Code></Error>", "ENTITY" },
        { "<Error><Code>&lol;</Code></Error>", "unknown entity" },
        { "<Error><Code>&amp</Code></Error>", "entity" },
        { "<Error><Code>&#0;</Code></Error>", "forbids" },
        { "<Error><Code>&#x1;</Code></Error>", "forbids" },
        { "<Error><Code>&#xD800;</Code></Error>", "forbids" },
        { "<Error><Code>&#xFFFE;</Code></Error>", "forbids" },
        { "<Error><Code>&#x110000;</Code></Error>", "range" },
        { "<Error><Code>&#99999999999999999999;</Code></Error>", "reference" },
        { "<Error><Code>&#x;</Code></Error>", "malformed character" },
        { "<Error><Code>&#12a;</Code></Error>", "malformed character" },
        { "<Error><Code>A</Code>", "truncated" },
        { "<Error><Code>A</Code></Err", "mismatched" },
        { "<Error><Code>A</Code></Error", "malformed end tag" },
        { "<Error><Code>A</Cod></Error>", "mismatched" },
        { "<Error><Code>A</code></Error>", "mismatched" },
        { "<Error><Code>A</Error></Code>", "mismatched" },
        { "<Error><Code>A</Code></Error><Error><Code>B</Code></Error>", "more than one root" },
        { "<Error><Code>A</Code></Error>junk", "text after" },
        { "junk<Error><Code>A</Code></Error>", "text before" },
        { "<Error><Code>A</Code></Error></Error>", "more than one root" },
        { "<Error>text<Code>A</Code></Error>", "both text and elements" },
        { "<Error><Code>A</Code>text</Error>", "both text and elements" },
        { "<Error><Code>A<B/></Code></Error>", "both text and elements" },
        { "<Error><Code><B/></Code></Error>", "holds elements" },
        { "<Error><Code>A]]>B</Code></Error>", "']]>'" },
        { "<Error><Code><![CDATA[A</Code></Error>", "CDATA" },
        { "<![CDATA[x]]><Error><Code>A</Code></Error>", "'<!'" },
        { "<Error><Code>A</Code><!-- a -- b --></Error>", "'--'" },
        { "<Error><Code>A</Code><!-- open </Error>", "unterminated comment" },
        { "<Error><Code>A</Code><?pi open </Error>", "unterminated processing" },
        { "<Error><?xml version=\"1.0\"?><Code>A</Code></Error>", "XML declaration" },
        { " <?xml version=\"1.1\"?><Error><Code>A</Code></Error>", "1.0" },
        { "<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><Error><Code>A</Code></Error>", "UTF-8" },
        { "<?xml encoding=\"UTF-8\"?><Error><Code>A</Code></Error>", "declaration" },
        { "<?xml version=\"1.0\"><Error><Code>A</Code></Error>", "declaration" },
        { "<?xml?><Error><Code>A</Code></Error>", "version" },
        { "<Error a=\"1\" a=\"2\"><Code>A</Code></Error>", "twice" },
        { "<Error a=1><Code>A</Code></Error>", "attribute" },
        { "<Error a=\"<\"><Code>A</Code></Error>", "'<'" },
        { "<Error a=\"&bad;\"><Code>A</Code></Error>", "entity" },
        { "<Error a=\"x\"b=\"y\"><Code>A</Code></Error>", "malformed tag" },
        { "<Error a=\"open><Code>A</Code></Error>", "'<'" },
        { "<Error><Code>A</Code></Error><", "more than one root" },
        { "<1Error><Code>A</Code></1Error>", "name" },
        { "<\xc3\x89rror><Code>A</Code></\xc3\x89rror>", "non-ASCII" },
        { "<Error><Code>\xc3(</Code></Error>", "UTF-8" },
        { "<Error><Code>\xed\xa0\x80</Code></Error>", "UTF-8" },
        { "<Error><Code>\xc0\xaf</Code></Error>", "UTF-8" },
        { "<Error><Code>\x01</Code></Error>", "forbids" },
        { "<Error><Code>\xef\xbf\xbe</Code></Error>", "forbids" },
        { "<Error><Code>A</Code><Code>B</Code></Error>", "twice" },
        { "<Error><Message>no code</Message></Error>", "without a Code" },
        { "<Error><Code></Code></Error>", "without a Code" },
        { "<Error/>", "without a Code" },
        { "<NotError><Code>A</Code></NotError>", "not Error" },
        { "<?xml version=\"1.0\"?>", "no root" },
        { "<!-- only a comment -->", "no root" },
        { "<Error", "ends inside a tag" },
        { "<Error ", "ends inside a tag" },
        { "<Error><Code>A</Code></Error>\xef\xbb\xbf", "text after" },
    };

    run_garbage(cases, LEN(cases));
}

TEST(s3xml_reader_limits)
{
    const char *why = NULL;
    struct s3_error e;
    size_t size = 2 * 1024 * 1024, len;
    char *big = malloc(S3XML_MAX_BODY + 2);
    static const char nul[] = "<Error><Code>A\0B</Code></Error>";

    if (!big) {
        CHECK(big != NULL);
        return;
    }
    /* NUL bytes make a body garbage, wherever they are. */
    CHECK_INT(s3xml_parse_error(nul, sizeof(nul) - 1, &e, &why), -EINVAL);
    CHECK_HAS(why, "NUL");
    CHECK_INT(s3xml_parse_error("<Error><Code>A</Code></Error>\0", 30, &e, &why), -EINVAL);
    CHECK_INT(s3xml_parse_error(NULL, 10, &e, &why), -EINVAL);
    CHECK_HAS(why, "empty");

    /* Nesting: 32 levels are fine, 33 are not. */
    len = 0;
    len += (size_t)sprintf(big + len, "<Error><Code>A</Code>");
    for (int i = 0; i < 30; i++)
        len += (size_t)sprintf(big + len, "<a>");
    len += (size_t)sprintf(big + len, "<b/>");
    for (int i = 0; i < 30; i++)
        len += (size_t)sprintf(big + len, "</a>");
    len += (size_t)sprintf(big + len, "</Error>");
    CHECK_INT(s3xml_parse_error(big, len, &e, &why), 0);
    len = 0;
    len += (size_t)sprintf(big + len, "<Error><Code>A</Code>");
    for (int i = 0; i < 31; i++)
        len += (size_t)sprintf(big + len, "<a>");
    len += (size_t)sprintf(big + len, "<b/>");
    for (int i = 0; i < 31; i++)
        len += (size_t)sprintf(big + len, "</a>");
    len += (size_t)sprintf(big + len, "</Error>");
    CHECK_INT(s3xml_parse_error(big, len, &e, &why), -EINVAL);
    CHECK_HAS(why, "deeper");
    /* A deep bomb of opening tags only. */
    len = 0;
    for (int i = 0; i < 100000; i++)
        len += (size_t)sprintf(big + len, "<a>");
    CHECK_INT(s3xml_parse_error(big, len, &e, &why), -EINVAL);
    CHECK_HAS(why, "deeper");

    /* Too many elements. */
    len = (size_t)sprintf(big, "<Error><Code>A</Code>");
    for (int i = 0; i < S3XML_MAX_NODES; i++)
        len += (size_t)sprintf(big + len, "<a/>");
    len += (size_t)sprintf(big + len, "</Error>");
    CHECK_INT(s3xml_parse_error(big, len, &e, &why), -EINVAL);
    CHECK_HAS(why, "elements");

    /* A 2 MB message is read (and cut to fit). */
    len = (size_t)sprintf(big, "<Error><Code>A</Code><Message>");
    memset(big + len, 'x', size);
    len += size;
    len += (size_t)sprintf(big + len, "</Message></Error>");
    CHECK_INT(s3xml_parse_error(big, len, &e, &why), 0);
    CHECK_INT(strlen(e.message), sizeof(e.message) - 1);
    /* 1 MB of a NUL-free garbage body. */
    memset(big, '<', size);
    CHECK_INT(s3xml_parse_error(big, size, &e, &why), -EINVAL);
    memset(big, 'A', size);
    CHECK_INT(s3xml_parse_error(big, size, &e, &why), -EINVAL);
    CHECK_HAS(why, "text before");

    /* The size cap: whitespace padding to the cap is fine, one byte more
     * is not. */
    len = (size_t)sprintf(big, "<Error><Code>A</Code></Error>");
    memset(big + len, ' ', S3XML_MAX_BODY - len);
    CHECK_INT(s3xml_parse_error(big, S3XML_MAX_BODY, &e, &why), 0);
    big[S3XML_MAX_BODY] = ' ';
    CHECK_INT(s3xml_parse_error(big, S3XML_MAX_BODY + 1, &e, &why), -EINVAL);
    CHECK_HAS(why, "larger");
    free(big);
}

/* Listings. */

#define LIST_V2                                                                              \
    DECL "<ListBucketResult" NS "><Name>bkt</Name><Prefix>ckpt/</Prefix>"                     \
    "<KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter>"                   \
    "<IsTruncated>true</IsTruncated>"                                                        \
    "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>" \
    "<Contents><Key>ckpt/a</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified>"        \
    "<ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag><Size>434234</Size>"            \
    "<StorageClass>STANDARD</StorageClass><Owner><ID>x</ID></Owner></Contents>\n"             \
    "<Contents>\n  <Key>ckpt/b&amp;c</Key>\n  <LastModified>2009-10-12T17:50:31Z</LastModified>\n" \
    "  <ETag>\"abc-12\"</ETag>\n  <Size>18446744073709551615</Size>\n</Contents>\n"           \
    "<CommonPrefixes><Prefix>ckpt/dir/</Prefix></CommonPrefixes>"                             \
    "</ListBucketResult>"

TEST(s3xml_list_v2)
{
    const char *why = NULL;
    struct s3_list l;
    int r = s3xml_parse_list(LIST_V2, strlen(LIST_V2), &l, &why);

    CHECK_INT(r, 0);
    if (r != 0) {
        printf("  %s\n", why);
        return;
    }
    CHECK(l.truncated);
    CHECK(!l.url_encoded);
    CHECK_INT(l.key_count, 3);
    CHECK_STR(l.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
    CHECK_STR(l.next_marker, "");
    CHECK_INT(l.n_objects, 2);
    CHECK_INT(l.n_prefixes, 1);
    CHECK_STR(l.objects[0].key, "ckpt/a");
    CHECK_INT(l.objects[0].last_modified_ms, T_2009);
    CHECK_STR(l.objects[0].etag, "fba9dede5f27731c9771645a39863328");
    CHECK(l.objects[0].size == 434234);
    CHECK_STR(l.objects[0].storage_class, "STANDARD");
    CHECK_STR(l.objects[1].key, "ckpt/b&c");
    CHECK_INT(l.objects[1].last_modified_ms, T_2009 + 1000);
    CHECK_STR(l.objects[1].etag, "abc-12");
    CHECK(l.objects[1].size == UINT64_MAX);
    CHECK_STR(l.objects[1].storage_class, "");
    CHECK_STR(l.prefixes[0].prefix, "ckpt/dir/");
    s3xml_list_release(&l);
    CHECK(l.objects == NULL && l.n_objects == 0);
    s3xml_list_release(&l);
    s3xml_list_release(NULL);
}

struct list_case {
    const char *body;
    int ret;
    bool truncated;
    size_t n_objects, n_prefixes;
    const char *next_token, *next_marker;
};

#define OBJ(k) "<Contents><Key>" k "</Key><LastModified>2009-10-12T17:50:30Z</LastModified>" \
               "<Size>0</Size></Contents>"
#define PFX(p) "<CommonPrefixes><Prefix>" p "</Prefix></CommonPrefixes>"
#define LBR(x) "<ListBucketResult>" x "</ListBucketResult>"
#define TRUE "<IsTruncated>true</IsTruncated>"
#define FALSE "<IsTruncated>false</IsTruncated>"

TEST(s3xml_list_pages)
{
    static const struct list_case cases[] = {
        /* Empty bucket. */
        { LBR("<KeyCount>0</KeyCount>" FALSE), 0, false, 0, 0, "", "" },
        { LBR(FALSE), 0, false, 0, 0, "", "" },
        /* v1 with NextMarker (sent with a delimiter). */
        { LBR("<Marker></Marker><NextMarker>b/</NextMarker>" TRUE OBJ("a") PFX("b/")), 0, true,
          1, 1, "", "b/" },
        /* v1 without NextMarker: the last key, or the last prefix if later. */
        { LBR(TRUE OBJ("a") OBJ("c")), 0, true, 2, 0, "", "c" },
        { LBR(TRUE OBJ("a") PFX("d/")), 0, true, 1, 1, "", "d/" },
        { LBR(TRUE PFX("d/") OBJ("e")), 0, true, 1, 1, "", "e" },
        /* Not truncated: no next, whatever was sent. */
        { LBR(FALSE "<NextMarker>zz</NextMarker>" OBJ("a")), 0, false, 1, 0, "", "" },
        { LBR("<EncodingType>url</EncodingType>" FALSE OBJ("a%2Fb")), 0, false, 1, 0, "", "" },
        /* Garbage. */
        { LBR(OBJ("a")), -EINVAL, false, 0, 0, NULL, NULL },
        { LBR(TRUE), -EINVAL, false, 0, 0, NULL, NULL },
        { LBR("<KeyCount>1</KeyCount>" TRUE OBJ("a")), -EINVAL, false, 0, 0, NULL, NULL },
        { LBR("<ContinuationToken>x</ContinuationToken>" TRUE OBJ("a")), -EINVAL, false, 0, 0,
          NULL, NULL },
        { LBR(TRUE "<NextContinuationToken></NextContinuationToken>"), -EINVAL, false, 0, 0,
          NULL, NULL },
        { LBR(TRUE "<NextContinuationToken>a b</NextContinuationToken>"), -EINVAL, false, 0, 0,
          NULL, NULL },
        { LBR("<IsTruncated>True</IsTruncated>"), -EINVAL, false, 0, 0, NULL, NULL },
        { LBR("<IsTruncated> false</IsTruncated>"), -EINVAL, false, 0, 0, NULL, NULL },
        { LBR(FALSE FALSE), -EINVAL, false, 0, 0, NULL, NULL },
        { LBR("<KeyCount>-1</KeyCount>" FALSE), -EINVAL, false, 0, 0, NULL, NULL },
        { LBR("<KeyCount>99999999999</KeyCount>" FALSE), -EINVAL, false, 0, 0, NULL, NULL },
        { LBR("<EncodingType>base64</EncodingType>" FALSE), -EINVAL, false, 0, 0, NULL, NULL },
        { LBR(FALSE OBJ("")), -EINVAL, false, 0, 0, NULL, NULL },
        { LBR(FALSE "<Contents><Key>a</Key><Size>1</Size></Contents>"), -EINVAL, false, 0, 0,
          NULL, NULL },
        { LBR(FALSE "<Contents><Key>a</Key><LastModified>2009-10-12T17:50:30Z</LastModified>"
                    "</Contents>"), -EINVAL, false, 0, 0, NULL, NULL },
        { LBR(FALSE "<Contents><LastModified>2009-10-12T17:50:30Z</LastModified><Size>1</Size>"
                    "</Contents>"), -EINVAL, false, 0, 0, NULL, NULL },
        { LBR(FALSE "<Contents><Key>a</Key><Key>b</Key><LastModified>2009-10-12T17:50:30Z"
                    "</LastModified><Size>1</Size></Contents>"), -EINVAL, false, 0, 0, NULL, NULL },
        { LBR(FALSE PFX("a") "<CommonPrefixes></CommonPrefixes>"), -EINVAL, false, 0, 0, NULL,
          NULL },
        { LBR(FALSE "<CommonPrefixes><Prefix>a</Prefix><Prefix>b</Prefix></CommonPrefixes>"),
          -EINVAL, false, 0, 0, NULL, NULL },
        { "<ListAllMyBucketsResult>" FALSE "</ListAllMyBucketsResult>", -EINVAL, false, 0, 0,
          NULL, NULL },
        { "<Error><Code>NoSuchBucket</Code></Error>", -EINVAL, false, 0, 0, NULL, NULL },
        /* A truncated document. */
        { "<ListBucketResult>" FALSE OBJ("a") "<Contents><Key>b</Key>", -EINVAL, false, 0, 0,
          NULL, NULL },
    };

    for (size_t i = 0; i < LEN(cases); i++) {
        const struct list_case *c = &cases[i];
        const char *why = NULL;
        struct s3_list l;
        int r;

        POISON(l);
        r = s3xml_parse_list(c->body, strlen(c->body), &l, &why);
        if (r != c->ret) {
            printf("  case %zu: %d (%s), expected %d\n", i, r, why ? why : "no reason", c->ret);
            harness_failed = 1;
            if (r == 0)
                s3xml_list_release(&l);
            continue;
        }
        if (r < 0) {
            if (!why || !*why || !poisoned(&l, sizeof(l))) {
                printf("  case %zu: no reason, or the list was written\n", i);
                harness_failed = 1;
            }
            continue;
        }
        if (l.truncated != c->truncated || l.n_objects != c->n_objects ||
            l.n_prefixes != c->n_prefixes || strcmp(l.next_token, c->next_token) != 0 ||
            strcmp(l.next_marker, c->next_marker) != 0) {
            printf("  case %zu: truncated %d, %zu objects, %zu prefixes, token \"%s\", "
                   "marker \"%s\"\n", i, l.truncated, l.n_objects, l.n_prefixes, l.next_token,
                   l.next_marker);
            harness_failed = 1;
        }
        s3xml_list_release(&l);
    }
}

/* Size and LastModified are parsed strictly. */
TEST(s3xml_list_fields)
{
    static const struct { const char *size, *mtime, *etag; int ret; } cases[] = {
        { "0", "2009-10-12T17:50:30Z", "\"e\"", 0 },
        { "18446744073709551615", "2009-10-12T17:50:30.000Z", "e", 0 },
        { "18446744073709551616", "2009-10-12T17:50:30Z", "\"e\"", -EINVAL },
        { "99999999999999999999999", "2009-10-12T17:50:30Z", "\"e\"", -EINVAL },
        { "-1", "2009-10-12T17:50:30Z", "\"e\"", -EINVAL },
        { "+1", "2009-10-12T17:50:30Z", "\"e\"", -EINVAL },
        { " 1", "2009-10-12T17:50:30Z", "\"e\"", -EINVAL },
        { "1 ", "2009-10-12T17:50:30Z", "\"e\"", -EINVAL },
        { "0x10", "2009-10-12T17:50:30Z", "\"e\"", -EINVAL },
        { "1e3", "2009-10-12T17:50:30Z", "\"e\"", -EINVAL },
        { "", "2009-10-12T17:50:30Z", "\"e\"", -EINVAL },
        { "1", "2009-13-12T17:50:30Z", "\"e\"", -EINVAL },
        { "1", "2009-10-12 17:50:30", "\"e\"", -EINVAL },
        { "1", "", "\"e\"", -EINVAL },
        { "1", "Mon, 12 Oct 2009 17:50:30 GMT", "\"e\"", -EINVAL },
        { "1", "2009-10-12T17:50:30Z", "\"\"", -EINVAL },
        { "1", "2009-10-12T17:50:30Z", "", -EINVAL },
        { "1", "2009-10-12T17:50:30Z", "\"a\"b\"", -EINVAL },
        { "1", "2009-10-12T17:50:30Z", "\"a b\"", -EINVAL },
    };
    char body[1024];

    for (size_t i = 0; i < LEN(cases); i++) {
        const char *why = NULL;
        struct s3_list l;
        int r;

        snprintf(body, sizeof(body),
                 LBR(FALSE "<Contents><Key>k</Key><LastModified>%s</LastModified><Size>%s</Size>"
                           "<ETag>%s</ETag></Contents>"),
                 cases[i].mtime, cases[i].size, cases[i].etag);
        r = s3xml_parse_list(body, strlen(body), &l, &why);
        if (r != cases[i].ret) {
            printf("  case %zu: %d (%s), expected %d\n", i, r, why ? why : "", cases[i].ret);
            harness_failed = 1;
        }
        if (r == 0) {
            CHECK_STR(l.objects[0].etag, "e");
            s3xml_list_release(&l);
        }
    }
}

TEST(s3xml_list_keys)
{
    char key[S3_KEY_MAX + 2], *body = malloc(8 * 1024 * 1024);
    const char *why = NULL;
    struct s3_list l;
    size_t len;

    if (!body) {
        CHECK(body != NULL);
        return;
    }
    /* 1024 bytes is the longest key; escaped, it may be 5 times longer. */
    memset(key, 'k', S3_KEY_MAX);
    key[S3_KEY_MAX] = '\0';
    CHECK_INT(parse_key("", key, &l, &why), 0);
    if (l.n_objects == 1)
        CHECK_INT(strlen(l.objects[0].key), S3_KEY_MAX);
    s3xml_list_release(&l);
    key[S3_KEY_MAX] = 'k';
    key[S3_KEY_MAX + 1] = '\0';
    CHECK_INT(parse_key("", key, &l, &why), -EINVAL);
    CHECK_HAS(why, "1024");

    /* A full page of 1000 longest keys, all escaped. */
    len = (size_t)sprintf(body, "<ListBucketResult><IsTruncated>true</IsTruncated>");
    for (int i = 0; i < 1000; i++) {
        len += (size_t)sprintf(body + len, "<Contents><Key>%04d", i);
        for (int j = 4; j < S3_KEY_MAX; j++)
            len += (size_t)sprintf(body + len, "&amp;");
        len += (size_t)sprintf(body + len, "</Key><LastModified>2009-10-12T17:50:30Z"
                                           "</LastModified><Size>%d</Size></Contents>", i);
    }
    len += (size_t)sprintf(body + len, "</ListBucketResult>");
    CHECK(len < S3XML_MAX_BODY);
    CHECK_INT(s3xml_parse_list(body, len, &l, &why), 0);
    CHECK_INT(l.n_objects, 1000);
    if (l.n_objects == 1000) {
        CHECK_INT(strlen(l.objects[999].key), S3_KEY_MAX);
        CHECK(strncmp(l.objects[999].key, "0999&&&", 7) == 0);
        CHECK(l.objects[999].size == 999);
        CHECK_STR(l.next_marker, l.objects[999].key);
    }
    s3xml_list_release(&l);

    /* More than 10000 entries. */
    len = (size_t)sprintf(body, "<ListBucketResult><IsTruncated>false</IsTruncated>");
    for (int i = 0; i < 10001; i++)
        len += (size_t)sprintf(body + len, PFX("p"));
    len += (size_t)sprintf(body + len, "</ListBucketResult>");
    POISON(l);
    CHECK_INT(s3xml_parse_list(body, len, &l, &why), -EINVAL);
    CHECK_HAS(why, "10000");
    CHECK(poisoned(&l, sizeof(l)));
    free(body);
}

TEST(s3xml_multipart)
{
    static const char init[] =
        DECL "<InitiateMultipartUploadResult" NS "><Bucket>bkt</Bucket><Key>k</Key>"
        "<UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA</UploadId>"
        "</InitiateMultipartUploadResult>";
    static const char done[] =
        "\n \n " DECL "<CompleteMultipartUploadResult" NS "><Location>http://x/bkt/k</Location>"
        "<Bucket>bkt</Bucket><Key>k</Key><ETag>\"3858f62230ac3c915f300c664312c11f-9\"</ETag>"
        "</CompleteMultipartUploadResult>";
    static const char failed[] =
        "          " DECL "<Error><Code>InternalError</Code><Message>We encountered an internal "
        "error. Please try again.</Message><RequestId>656c76696e6727732072657175657374</RequestId>"
        "<HostId>Uuag1LuByRx9e6j5Onimru9pO4ZVKnJ2Qz7/C1NPcfTWAtRPfTaOFg==</HostId></Error>";
    char id[128], small[8], etag[S3_ETAG_MAX + 1];
    const char *why = NULL;
    struct s3_error e;

    CHECK_INT(s3xml_parse_initiate_multipart(init, strlen(init), id, sizeof(id), &why), 0);
    CHECK_STR(id, "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA");
    memset(small, 'x', sizeof(small));
    CHECK_INT(s3xml_parse_initiate_multipart(init, strlen(init), small, sizeof(small), &why),
              -EINVAL);
    CHECK_HAS(why, "does not fit");
    CHECK_INT(small[0], 'x');
    CHECK_INT(s3xml_parse_initiate_multipart(failed, strlen(failed), id, sizeof(id), &why),
              -EINVAL);
    CHECK_HAS(why, "Error document");
    static const char *const bad_init[] = {
        "<InitiateMultipartUploadResult><Bucket>b</Bucket></InitiateMultipartUploadResult>",
        "<InitiateMultipartUploadResult><UploadId></UploadId></InitiateMultipartUploadResult>",
        "<InitiateMultipartUploadResult><UploadId>a b</UploadId></InitiateMultipartUploadResult>",
        "<InitiateMultipartUploadResult><UploadId>a</UploadId><UploadId>b</UploadId>"
        "</InitiateMultipartUploadResult>",
        "<InitiateMultipartUploadResult><UploadId>a</UploadId>",
        "<CompleteMultipartUploadResult><UploadId>a</UploadId></CompleteMultipartUploadResult>",
    };
    for (size_t i = 0; i < LEN(bad_init); i++) {
        why = NULL;
        if (s3xml_parse_initiate_multipart(bad_init[i], strlen(bad_init[i]), id, sizeof(id),
                                           &why) != -EINVAL || !why) {
            printf("  bad_init %zu accepted\n", i);
            harness_failed = 1;
        }
    }

    CHECK_INT(s3xml_parse_complete_multipart(done, strlen(done), etag, sizeof(etag), &e, &why),
              0);
    CHECK_STR(etag, "3858f62230ac3c915f300c664312c11f-9");
    /* 200 with an Error body: a distinct code and the error. */
    POISON(e);
    CHECK_INT(s3xml_parse_complete_multipart(failed, strlen(failed), etag, sizeof(etag), &e,
                                             &why),
              -EREMOTEIO);
    CHECK_STR(e.code, "InternalError");
    CHECK_STR(e.request_id, "656c76696e6727732072657175657374");
    CHECK_HAS(why, "Error");
    CHECK_INT(s3xml_parse_complete_multipart(failed, strlen(failed), etag, sizeof(etag), NULL,
                                             NULL),
              -EREMOTEIO);
    /* A broken Error document is garbage, not an error answer. */
    POISON(e);
    CHECK_INT(s3xml_parse_complete_multipart("<Error><Message>x</Message></Error>", 35, etag,
                                             sizeof(etag), &e, &why),
              -EINVAL);
    CHECK(poisoned(&e, sizeof(e)));
    /* Truncated while S3 was still sending keep-alive spaces. */
    CHECK_INT(s3xml_parse_complete_multipart("      ", 6, etag, sizeof(etag), &e, &why), -EINVAL);
    CHECK_INT(s3xml_parse_complete_multipart(done, strlen(done) - 10, etag, sizeof(etag), &e,
                                             &why),
              -EINVAL);
    CHECK_INT(s3xml_parse_complete_multipart(done, strlen(done), small, 4, &e, &why), -EINVAL);
    CHECK_INT(s3xml_parse_complete_multipart(
                  "<CompleteMultipartUploadResult><Key>k</Key></CompleteMultipartUploadResult>",
                  75, etag, sizeof(etag), &e, &why),
              -EINVAL);
}

TEST(s3xml_escape)
{
    static const struct { const char *in, *out; } cases[] = {
        { "", "" },
        { "plain/key-1.bin", "plain/key-1.bin" },
        { "a&b<c>d\"e'f", "a&amp;b&lt;c&gt;d&quot;e&apos;f" },
        { "t\tn\nr\r", "t&#9;n&#10;r&#13;" },
        { "caf\xc3\xa9 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xf0\x9f\x98\x80" },
    };
    static const char *const bad[] = { "\x01", "a\x1f", "\xc3", "\xc3(", "\xed\xa0\x80",
                                       "\xef\xbf\xbe", "\xef\xbf\xbf", "\xff" };
    char out[64];

    for (size_t i = 0; i < LEN(cases); i++) {
        CHECK_INT(s3xml_escape(cases[i].in, out, sizeof(out)), strlen(cases[i].out));
        CHECK_STR(out, cases[i].out);
    }
    for (size_t i = 0; i < LEN(bad); i++)
        CHECK_INT(s3xml_escape(bad[i], out, sizeof(out)), -EINVAL);
    CHECK_INT(s3xml_escape(NULL, out, sizeof(out)), -EINVAL);
    /* Exactly fitting, one byte short, no room at all. */
    CHECK_INT(s3xml_escape("a&", out, 7), 6);
    CHECK_STR(out, "a&amp;");
    CHECK_INT(s3xml_escape("a&", out, 6), -ENOSPC);
    CHECK_STR(out, "");
    CHECK_INT(s3xml_escape("", out, 0), -ENOSPC);

    /* What is escaped reads back exactly, through the reader. */
    for (size_t i = 0; i < LEN(cases); i++) {
        struct s3_list l;
        if (!cases[i].in[0])
            continue;
        CHECK(s3xml_escape(cases[i].in, out, sizeof(out)) >= 0);
        CHECK_INT(parse_key("", out, &l, NULL), 0);
        if (l.n_objects == 1)
            CHECK_STR(l.objects[0].key, cases[i].in);
        s3xml_list_release(&l);
    }
}
