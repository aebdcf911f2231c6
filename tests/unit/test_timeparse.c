#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "spot/notice.h"
#include "spot/timeparse.h"

typedef int (*time_fn)(const char *, size_t, int64_t *);

struct time_case {
    const char *in;
    int ret;
    int64_t ms;
    size_t len;                   /* 0: strlen(in) */
};

#define SENTINEL 4242

static void run_time_cases(const char *name, time_fn fn, const struct time_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].in);
        int64_t ms = SENTINEL;
        int r = fn(cases[i].in, len, &ms);
        if (r != cases[i].ret || (r == 0 && ms != cases[i].ms) || (r != 0 && ms != SENTINEL)) {
            printf("  %s(\"%.*s\") = %d, %lld; expected %d, %lld\n", name, (int)len, cases[i].in, r,
                   (long long)ms, cases[i].ret, (long long)(cases[i].ret ? SENTINEL : cases[i].ms));
            harness_failed = 1;
        }
    }
}

#define RUN(fn, cases) run_time_cases(#fn, fn, cases, sizeof(cases) / sizeof(cases[0]))

TEST(time_rfc3339)
{
    static const struct time_case cases[] = {
        { "2017-09-18T08:22:00Z", 0, 1505722920000, 0 },
        { "2017-09-18t08:22:00z", 0, 1505722920000, 0 },
        { "2017-09-18T08:22:00.123Z", 0, 1505722920123, 0 },
        { "2017-09-18T08:22:00.1Z", 0, 1505722920100, 0 },
        { "2017-09-18T08:22:00.12Z", 0, 1505722920120, 0 },
        { "2017-09-18T08:22:00.999999999Z", 0, 1505722920999, 0 }, /* truncated, not rounded */
        { "2017-09-18T08:22:00+08:00", 0, 1505694120000, 0 },
        { "2017-09-18T08:22:00-05:30", 0, 1505742720000, 0 },
        { "2017-09-18T08:22:00+00:00", 0, 1505722920000, 0 },
        { "2017-09-18T08:22:00-00:00", 0, 1505722920000, 0 },
        { "2017-09-18T08:22:00Zjunk", 0, 1505722920000, 20 },    /* only len bytes count */
        { "2015-01-05T18:02:00Z", 0, 1420480920000, 0 },
        { "1970-01-01T00:00:00Z", 0, 0, 0 },
        { "1970-01-01T01:00:00+01:00", 0, 0, 0 },
        { "9999-12-31T23:59:59.999Z", 0, 253402300799999, 0 },
        { "2000-02-29T00:00:00Z", 0, 951782400000, 0 },
        { "2016-02-29T00:00:00Z", 0, 1456704000000, 0 },
        /* out of range */
        { "1969-12-31T23:59:59Z", -EINVAL, 0, 0 },
        { "1970-01-01T00:30:00+01:00", -EINVAL, 0, 0 },
        { "9999-12-31T23:59:59-00:01", -EINVAL, 0, 0 },
        { "0000-01-01T00:00:00Z", -EINVAL, 0, 0 },
        { "2019-02-29T00:00:00Z", -EINVAL, 0, 0 },
        { "2100-02-29T00:00:00Z", -EINVAL, 0, 0 },
        { "2019-04-31T00:00:00Z", -EINVAL, 0, 0 },
        { "2019-13-01T00:00:00Z", -EINVAL, 0, 0 },
        { "2019-00-10T00:00:00Z", -EINVAL, 0, 0 },
        { "2019-01-00T00:00:00Z", -EINVAL, 0, 0 },
        { "2019-01-32T00:00:00Z", -EINVAL, 0, 0 },
        { "2019-01-01T24:00:00Z", -EINVAL, 0, 0 },
        { "2019-01-01T23:60:00Z", -EINVAL, 0, 0 },
        { "2016-12-31T23:59:60Z", -EINVAL, 0, 0 },                /* leap second */
        { "2017-09-18T08:22:00+24:00", -EINVAL, 0, 0 },
        { "2017-09-18T08:22:00+08:60", -EINVAL, 0, 0 },
        /* malformed */
        { "2017-09-18T08:22:00", -EINVAL, 0, 0 },                 /* missing Z */
        { "2017-09-18T08:22:00Z ", -EINVAL, 0, 0 },
        { " 2017-09-18T08:22:00Z", -EINVAL, 0, 0 },
        { "2017-09-18T08:22:00Zx", -EINVAL, 0, 0 },
        { "2017-09-18T08:22:00ZZ", -EINVAL, 0, 0 },
        { "2017-09-18T08:22:00Z\n", -EINVAL, 0, 0 },
        { "2017-09-18 08:22:00Z", -EINVAL, 0, 0 },
        { "2017-09-18X08:22:00Z", -EINVAL, 0, 0 },
        { "2017-9-18T08:22:00Z", -EINVAL, 0, 0 },
        { "2017-09-18T8:22:00Z", -EINVAL, 0, 0 },
        { "2017-09-18T08:22Z", -EINVAL, 0, 0 },
        { "2017-09-18T08:22:00.Z", -EINVAL, 0, 0 },
        { "2017-09-18T08:22:00.1234567890Z", -EINVAL, 0, 0 },    /* past nanoseconds */
        { "2017-09-18T08:22:00,5Z", -EINVAL, 0, 0 },
        { "2017-09-18T08:22:00+0800", -EINVAL, 0, 0 },
        { "2017-09-18T08:22:00+08", -EINVAL, 0, 0 },
        { "2017-09-18T08:22:00UTC", -EINVAL, 0, 0 },
        { "+2017-09-18T08:22:00Z", -EINVAL, 0, 0 },
        { "12017-09-18T08:22:00Z", -EINVAL, 0, 0 },
        { "20170918T082200Z", -EINVAL, 0, 0 },
        { "2017-09-18", -EINVAL, 0, 0 },
        { "2017-09-18T08:22:00Z", -EINVAL, 0, 19 },               /* cut before the Z */
        { "", -EINVAL, 0, 0 },
        { "Z", -EINVAL, 0, 0 },
        { "2017-09-18T08:22:00\0Z", -EINVAL, 0, 21 },
        { "2017-0\xd9\xa9-18T08:22:00Z", -EINVAL, 0, 0 },          /* a non-ASCII digit */
    };

    RUN(time_parse_rfc3339, cases);
}

TEST(time_rfc1123)
{
    static const struct time_case cases[] = {
        { "Mon, 11 Apr 2022 22:26:58 GMT", 0, 1649716018000, 0 },
        { "Mon, 19 Sep 2016 18:29:47 GMT", 0, 1474309787000, 0 },
        { "Fri, 01 Apr 2022 00:00:00 GMT", 0, 1648771200000, 0 },
        { "Fri, 1 Apr 2022 00:00:00 GMT", 0, 1648771200000, 0 },
        { "Sat, 29 Feb 2020 12:00:00 GMT", 0, 1582977600000, 0 },
        { "Thu, 01 Jan 1970 00:00:00 GMT", 0, 0, 0 },
        { "Fri, 31 Dec 9999 23:59:59 GMT", 0, 253402300799000, 0 },
        { "Tue, 11 Apr 2022 22:26:58 GMT", -EINVAL, 0, 0 },       /* wrong weekday */
        { "Sun, 11 Apr 2022 22:26:58 GMT", -EINVAL, 0, 0 },
        { "Fri, 29 Feb 2019 00:00:00 GMT", -EINVAL, 0, 0 },
        { "Sat, 31 Apr 2022 00:00:00 GMT", -EINVAL, 0, 0 },
        { "Mon, 11 Apr 2022 24:00:00 GMT", -EINVAL, 0, 0 },
        { "Wed, 31 Dec 1969 23:59:59 GMT", -EINVAL, 0, 0 },
        { "Mon, 11 apr 2022 22:26:58 GMT", -EINVAL, 0, 0 },       /* case-sensitive */
        { "mon, 11 Apr 2022 22:26:58 GMT", -EINVAL, 0, 0 },
        { "MON, 11 APR 2022 22:26:58 GMT", -EINVAL, 0, 0 },
        { "Mon, 11 Apr 2022 22:26:58 gmt", -EINVAL, 0, 0 },
        { "Mon, 11 Apr 2022 22:26:58 UTC", -EINVAL, 0, 0 },
        { "Mon, 11 Apr 2022 22:26:58 +0000", -EINVAL, 0, 0 },
        { "Mon, 11 Apr 2022 22:26:58", -EINVAL, 0, 0 },
        { "Mon, 11 Apr 2022 22:26:58 GMT\n", -EINVAL, 0, 0 },
        { "Mon, 11 Apr 2022 22:26:58 GMTx", -EINVAL, 0, 0 },
        { "Mon,11 Apr 2022 22:26:58 GMT", -EINVAL, 0, 0 },
        { "Mon, 11  Apr 2022 22:26:58 GMT", -EINVAL, 0, 0 },
        { "Mon, 011 Apr 2022 22:26:58 GMT", -EINVAL, 0, 0 },
        { "Mon, 11 Apr 22 22:26:58 GMT", -EINVAL, 0, 0 },
        { "Mon, 11 April 2022 22:26:58 GMT", -EINVAL, 0, 0 },
        { "Monday, 11-Apr-22 22:26:58 GMT", -EINVAL, 0, 0 },      /* RFC 850 */
        { "Mon Apr 11 22:26:58 2022", -EINVAL, 0, 0 },            /* asctime */
        { "11 Apr 2022 22:26:58 GMT", -EINVAL, 0, 0 },
        { "Mon, 11 Apr 2022 22:26:58 GMT", -EINVAL, 0, 28 },
        { "", -EINVAL, 0, 0 },
    };

    RUN(time_parse_rfc1123, cases);
}

TEST(time_aws_event)
{
    static const struct time_case cases[] = {
        { "21 Jan 2019 09:00:43 GMT", 0, 1548061243000, 0 },
        { "21 Jan 2019 09:17:23 GMT", 0, 1548062243000, 0 },
        { "1 Feb 2019 09:00:43 GMT", 0, 1549011643000, 0 },
        { "01 Feb 2019 09:00:43 GMT", 0, 1549011643000, 0 },
        { "29 Feb 2016 00:00:00 GMT", 0, 1456704000000, 0 },
        { "29 Feb 2019 00:00:00 GMT", -EINVAL, 0, 0 },
        { "31 Apr 2019 00:00:00 GMT", -EINVAL, 0, 0 },
        { "0 Jan 2019 00:00:00 GMT", -EINVAL, 0, 0 },
        { "21 Jan 2019 24:00:00 GMT", -EINVAL, 0, 0 },
        { "21 Jan 2019 09:00:43", -EINVAL, 0, 0 },
        { "21 Jan 2019 09:00:43 UTC", -EINVAL, 0, 0 },
        { "21 Jan 2019 09:00:43 GMT ", -EINVAL, 0, 0 },
        { "Mon, 21 Jan 2019 09:00:43 GMT", -EINVAL, 0, 0 },
        { "21 January 2019 09:00:43 GMT", -EINVAL, 0, 0 },
        { "21 JAN 2019 09:00:43 GMT", -EINVAL, 0, 0 },
        { "21 Jan 19 09:00:43 GMT", -EINVAL, 0, 0 },
        { "121 Jan 2019 09:00:43 GMT", -EINVAL, 0, 0 },
        { "21 Jan 2019 9:00:43 GMT", -EINVAL, 0, 0 },
        { "2019-01-21T09:00:43Z", -EINVAL, 0, 0 },
        { "", -EINVAL, 0, 0 },
    };

    RUN(time_parse_aws_event, cases);
}

TEST(time_tencent)
{
    static const struct time_case cases[] = {
        { "2018-08-18 12:05:33", 0, 1534565133000, 0 },           /* 04:05:33Z */
        { "2018-01-01 03:00:00", 0, 1514746800000, 0 },           /* the day before, UTC */
        { "1970-01-01 08:00:00", 0, 0, 0 },
        { "1970-01-01 07:59:59", -EINVAL, 0, 0 },
        { "2018-08-18T12:05:33", -EINVAL, 0, 0 },
        { "2018-08-18 12:05:33Z", -EINVAL, 0, 0 },
        { "2018-08-18 12:05:33+08:00", -EINVAL, 0, 0 },
        { "2018-08-18 12:05:33.5", -EINVAL, 0, 0 },
        { "2018-08-18  12:05:33", -EINVAL, 0, 0 },
        { "2018-08-18 12:05", -EINVAL, 0, 0 },
        { "2018-02-29 12:05:33", -EINVAL, 0, 0 },
        { "2018-08-18 24:05:33", -EINVAL, 0, 0 },
        { "2018-8-18 12:05:33", -EINVAL, 0, 0 },
        { "2018-08-18 12:05:33\n", -EINVAL, 0, 0 },
        { "", -EINVAL, 0, 0 },
    };

    RUN(time_parse_tencent, cases);
}

TEST(time_days_from_civil)
{
    int64_t y = 1970;
    unsigned m = 1, d = 1;

    CHECK_INT(time_days_from_civil(1970, 1, 1), 0);
    CHECK_INT(time_days_from_civil(1969, 12, 31), -1);
    CHECK_INT(time_days_from_civil(2000, 3, 1), 11017);
    CHECK_INT(time_days_from_civil(2000, 2, 29), 11016);
    CHECK_INT(time_days_from_civil(1, 1, 1), -719162);
    /* Every day from 1970 to 9999, against a plain calendar walk. */
    for (int64_t day = 0; y <= 9999; day++) {
        static const unsigned mdays[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
        bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        int64_t got = time_days_from_civil(y, m, d);
        if (got != day) {
            printf("  time_days_from_civil(%lld, %u, %u) = %lld, expected %lld\n", (long long)y, m,
                   d, (long long)got, (long long)day);
            harness_failed = 1;
            break;
        }
        if (++d > mdays[m - 1] + (m == 2 && leap)) {
            d = 1;
            if (++m > 12) {
                m = 1;
                y++;
            }
        }
    }
}

TEST(time_format)
{
    char buf[32];

    CHECK_STR(notice_format_time(0, buf, sizeof(buf)), "1970-01-01T00:00:00.000Z");
    CHECK_STR(notice_format_time(1505722920123, buf, sizeof(buf)), "2017-09-18T08:22:00.123Z");
    CHECK_STR(notice_format_time(951782400000, buf, sizeof(buf)), "2000-02-29T00:00:00.000Z");
    CHECK_STR(notice_format_time(253402300799999, buf, sizeof(buf)), "9999-12-31T23:59:59.999Z");
    CHECK_STR(notice_format_time(-1, buf, sizeof(buf)), "1969-12-31T23:59:59.999Z");
    /* The extremes format without overflow and fit the documented buffer. */
    notice_format_time(INT64_MAX, buf, sizeof(buf));
    CHECK(strlen(buf) < sizeof(buf) - 1);
    notice_format_time(INT64_MIN, buf, sizeof(buf));
    CHECK(strlen(buf) < sizeof(buf) - 1);
    CHECK_STR(notice_format_time(0, buf, 11), "1970-01-01");
}

/* Write ms in each of the four formats and read it back. */
TEST(time_round_trip)
{
    static const char *const months[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
    static const char *const wdays[] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
    uint64_t x = 88172645463325252ULL;

    for (int i = 0; i < 20000; i++) {
        char iso[32], text[64];
        int64_t ms, back = -1;
        unsigned y, mo, d, h, mi, s, frac;

        /* xorshift: spread over the whole range, ends included. */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ms = i == 0 ? 0 : i == 1 ? 253402300799999 : (int64_t)(x % 253402300800000ULL);
        notice_format_time(ms, iso, sizeof(iso));
        if (time_parse_rfc3339(iso, strlen(iso), &back) != 0 || back != ms) {
            printf("  rfc3339 round trip of %lld via \"%s\" gave %lld\n", (long long)ms, iso,
                   (long long)back);
            harness_failed = 1;
            break;
        }
        CHECK_INT(sscanf(iso, "%4u-%2u-%2uT%2u:%2u:%2u.%3uZ", &y, &mo, &d, &h, &mi, &s, &frac), 7);
        ms -= frac;
        snprintf(text, sizeof(text), "%s, %02u %s %04u %02u:%02u:%02u GMT",
                 wdays[(ms / 86400000 + 4) % 7], d, months[mo - 1], y, h, mi, s);
        back = -1;
        if (time_parse_rfc1123(text, strlen(text), &back) != 0 || back != ms) {
            printf("  rfc1123 round trip of %lld via \"%s\" gave %lld\n", (long long)ms, text,
                   (long long)back);
            harness_failed = 1;
            break;
        }
        back = -1;
        if (time_parse_aws_event(text + 5, strlen(text + 5), &back) != 0 || back != ms) {
            printf("  aws round trip of %lld via \"%s\" gave %lld\n", (long long)ms, text + 5,
                   (long long)back);
            harness_failed = 1;
            break;
        }
        /* Tencent writes UTC+8; skip the last 8 hours, which it cannot. */
        if (ms + 8 * 3600000 >= 253402300800000)
            continue;
        notice_format_time(ms + 8 * 3600000, iso, sizeof(iso));
        iso[10] = ' ';
        iso[19] = '\0';
        back = -1;
        if (time_parse_tencent(iso, strlen(iso), &back) != 0 || back != ms) {
            printf("  tencent round trip of %lld via \"%s\" gave %lld\n", (long long)ms, iso,
                   (long long)back);
            harness_failed = 1;
            break;
        }
    }
}
