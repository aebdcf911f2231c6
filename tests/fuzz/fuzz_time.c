/* The four time formats on arbitrary bytes, and the round trips between
 * them: whatever one parser accepts lies in 1970..9999 and, written again
 * in each format (by notice_format_time() and by hand here), reads back to
 * the same millisecond.  The first bytes also pick a date for a check of
 * time_days_from_civil() against notice_format_time(). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/notice.h"
#include "spot/timeparse.h"

#define MS_END 253402300800000LL
#define DAY_MS 86400000LL
#define CST_MS (8 * 3600000LL)

static const char *const months[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
static const char *const wdays[] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };

static void check_parsed(int r, int64_t ms)
{
    if (r != 0 && r != -EINVAL)
        abort();
    if (r == 0 && (ms < 0 || ms >= MS_END))
        abort();
}

/* ms (whole seconds dropped) in every format, each read back. */
static void round_trip(int64_t ms)
{
    char iso[32], text[64];
    unsigned y, mo, d, h, mi, s, frac;
    int64_t back = -1;

    notice_format_time(ms, iso, sizeof(iso));
    if (time_parse_rfc3339(iso, strlen(iso), &back) != 0 || back != ms)
        abort();
    if (sscanf(iso, "%4u-%2u-%2uT%2u:%2u:%2u.%3uZ", &y, &mo, &d, &h, &mi, &s, &frac) != 7 ||
        mo < 1 || mo > 12)
        abort();
    ms -= frac;
    snprintf(text, sizeof(text), "%s, %02u %s %04u %02u:%02u:%02u GMT", wdays[(ms / DAY_MS + 4) % 7],
             d, months[mo - 1], y, h, mi, s);
    if (time_parse_rfc1123(text, strlen(text), &back) != 0 || back != ms)
        abort();
    if (time_parse_aws_event(text + 5, strlen(text + 5), &back) != 0 || back != ms)
        abort();
    if (ms + CST_MS < MS_END) {
        notice_format_time(ms + CST_MS, iso, sizeof(iso));
        iso[10] = ' ';
        iso[19] = '\0';
        if (time_parse_tencent(iso, strlen(iso), &back) != 0 || back != ms)
            abort();
    }
}

/* An accepted string names its fields in range, so it must be the text
 * that the result writes back: 24:00:00 or 31 April, if ever accepted as
 * the next day, would survive a round trip but not this. */
static void check_canonical(const char *s, size_t size, int which, int64_t ms)
{
    char iso[32], text[64];
    int64_t local = ms;
    size_t skip = which == 1 ? 5 : 0;

    if (which == 0) {
        /* The date and time before any fraction and zone, at the offset given. */
        char z = s[size - 1];
        if (z != 'Z' && z != 'z') {
            int off = ((s[size - 5] - '0') * 10 + (s[size - 4] - '0')) * 60 +
                      (s[size - 2] - '0') * 10 + (s[size - 1] - '0');
            local += (s[size - 6] == '-' ? -off : off) * 60000LL;
        }
        notice_format_time(local, iso, sizeof(iso));
        if (memcmp(iso, s, 10) != 0 || (s[10] != 'T' && s[10] != 't') ||
            memcmp(iso + 11, s + 11, 8) != 0)
            abort();
        return;
    }
    if (which == 3) {
        notice_format_time(ms + CST_MS, iso, sizeof(iso));
        iso[10] = ' ';
        if (size != 19 || memcmp(iso, s, 19) != 0)
            abort();
        return;
    }
    /* RFC 1123 and AWS: the same, a one-digit day aside. */
    notice_format_time(ms, iso, sizeof(iso));
    snprintf(text, sizeof(text), "%.2s %s %.4s %.8s GMT", iso + 8,
             months[(iso[5] - '0') * 10 + iso[6] - '0' - 1], iso, iso + 11);
    if (size - skip == strlen(text) - 1 && text[0] == '0')
        memmove(text, text + 1, strlen(text));
    if (size - skip != strlen(text) || memcmp(text, s + skip, size - skip) != 0)
        abort();
}

static void check_days(const uint8_t *data)
{
    static const unsigned mdays[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    int64_t y = 1970 + (data[0] | data[1] << 8) % 8030;
    unsigned m = 1 + data[2] % 12;
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    unsigned d = 1 + data[3] % (mdays[m - 1] + (m == 2 && leap));
    int64_t days = time_days_from_civil(y, m, d);
    char buf[32], want[16];

    if (days < 0 || days * DAY_MS >= MS_END)
        abort();
    notice_format_time(days * DAY_MS, buf, sizeof(buf));
    snprintf(want, sizeof(want), "%04lld-%02u-%02u", (long long)y, m, d);
    if (strncmp(buf, want, 10) != 0 || strcmp(buf + 10, "T00:00:00.000Z") != 0)
        abort();
    if (time_days_from_civil(y, m, d) + 1 != time_days_from_civil(y, m, d + 1) && d < 28)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    int64_t ms[4] = { -1, -1, -1, -1 }, other;
    int r[4];

    r[0] = time_parse_rfc3339(s, size, &ms[0]);
    r[1] = time_parse_rfc1123(s, size, &ms[1]);
    r[2] = time_parse_aws_event(s, size, &ms[2]);
    r[3] = time_parse_tencent(s, size, &ms[3]);
    for (int i = 0; i < 4; i++) {
        check_parsed(r[i], ms[i]);
        if (r[i] != 0 && ms[i] != -1)
            abort(); /* untouched on failure */
        if (r[i] == 0) {
            round_trip(ms[i]);
            check_canonical(s, size, i, ms[i]);
        }
    }
    /* RFC 1123 is an AWS date behind a weekday. */
    if (r[1] == 0 && (time_parse_aws_event(s + 5, size - 5, &other) != 0 || other != ms[1]))
        abort();
    /* Tencent is RFC 3339 at +08:00 with a space for the T. */
    if (r[3] == 0) {
        char iso[40];
        memcpy(iso, s, size);
        iso[10] = 'T';
        memcpy(iso + size, "+08:00", 6);
        if (time_parse_rfc3339(iso, size + 6, &other) != 0 || other != ms[3])
            abort();
    }
    if (size >= 4)
        check_days(data);
    return 0;
}
