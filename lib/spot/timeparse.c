/* timeparse: by hand rather than strptime() and timegm(), because those
 * depend on the locale and the C library, accept more than the formats
 * allow (spaces, one-digit fields, 31 April), and do not say which
 * characters they consumed.  Every parser walks a cursor over (s, len),
 * collects the fields, and hands them to to_ms(), which checks ranges. */
#include "spot/timeparse.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#define YEAR_MIN 1970
#define YEAR_MAX 9999
/* 10000-01-01T00:00:00Z: the first millisecond past YEAR_MAX. */
#define MS_END 253402300800000LL
/* More fraction digits than nanoseconds carry no meaning; a longer run is
 * garbage rather than a time. */
#define FRACTION_MAX_DIGITS 9

struct fields {
    int64_t year;
    unsigned month, day, hour, minute, second, ms;
    int offset_min;                /* local time minus UTC */
};

struct cursor {
    const char *p, *end;
};

static const char *const month_names[12] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                             "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
/* Index 0 is Sunday; 1970-01-01 was a Thursday. */
static const char *const weekday_names[7] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool at_end(const struct cursor *c)
{
    return c->p == c->end;
}

static bool take_char(struct cursor *c, char ch)
{
    if (c->p == c->end || *c->p != ch)
        return false;
    c->p++;
    return true;
}

/* Between min and max digits (as many as there are, up to max). */
static bool take_digits(struct cursor *c, size_t min, size_t max, unsigned *ret)
{
    unsigned v = 0;
    size_t n = 0;

    while (n < max && c->p != c->end && is_digit(*c->p)) {
        v = v * 10 + (unsigned)(*c->p - '0');
        c->p++;
        n++;
    }
    if (n < min)
        return false;
    *ret = v;
    return true;
}

/* One of names (case-sensitive, all three letters long); returns its index. */
static int take_name(struct cursor *c, const char *const *names, int count)
{
    if (c->end - c->p < 3)
        return -1;
    for (int i = 0; i < count; i++) {
        if (memcmp(c->p, names[i], 3) == 0) {
            c->p += 3;
            return i;
        }
    }
    return -1;
}

static bool take_str(struct cursor *c, const char *lit)
{
    size_t n = strlen(lit);

    if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0)
        return false;
    c->p += n;
    return true;
}

/* "hh:mm:ss", two digits each. */
static bool take_hms(struct cursor *c, struct fields *f)
{
    return take_digits(c, 2, 2, &f->hour) && take_char(c, ':') &&
           take_digits(c, 2, 2, &f->minute) && take_char(c, ':') &&
           take_digits(c, 2, 2, &f->second);
}

/* "YYYY-MM-DD". */
static bool take_ymd(struct cursor *c, struct fields *f)
{
    unsigned y;

    if (!take_digits(c, 4, 4, &y) || !take_char(c, '-') || !take_digits(c, 2, 2, &f->month) ||
        !take_char(c, '-') || !take_digits(c, 2, 2, &f->day))
        return false;
    f->year = y;
    return true;
}

static bool is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static unsigned days_in_month(int64_t y, unsigned m)
{
    static const unsigned days[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };

    return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

int64_t time_days_from_civil(int64_t y, unsigned m, unsigned d)
{
    /* Howard Hinnant's algorithm: years start in March, so that the leap
     * day is the last day of a year and month lengths repeat in fives. */
    int64_t mm = m, era, yoe, doy, doe;

    y -= mm <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;                                       /* [0, 399] */
    doy = (153 * (mm > 2 ? mm - 3 : mm + 9) + 2) / 5 + d - 1;  /* [0, 365] */
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;               /* [0, 146096] */
    return era * 146097 + doe - 719468;
}

/* Check every field and convert.  A leap second (:60) is refused: no
 * metadata service sends one, and accepting it would let two strings name
 * the same millisecond. */
static int to_ms(const struct fields *f, int64_t *ret_ms)
{
    int64_t ms;

    if (f->year < YEAR_MIN || f->year > YEAR_MAX || f->month < 1 || f->month > 12 ||
        f->day < 1 || f->day > days_in_month(f->year, f->month) || f->hour > 23 ||
        f->minute > 59 || f->second > 59 || f->ms > 999)
        return -EINVAL;
    ms = time_days_from_civil(f->year, f->month, f->day);
    ms = ((ms * 24 + f->hour) * 60 + f->minute) * 60 + f->second;
    ms = ms * 1000 + f->ms - (int64_t)f->offset_min * 60000;
    /* An offset can carry a time in 1970 or 9999 across the edge. */
    if (ms < 0 || ms >= MS_END)
        return -EINVAL;
    *ret_ms = ms;
    return 0;
}

int time_parse_rfc3339(const char *s, size_t len, int64_t *ret_ms)
{
    struct cursor c = { s, s + len };
    struct fields f = { 0 };
    unsigned oh, om;

    if (!s || !take_ymd(&c, &f) || !(take_char(&c, 'T') || take_char(&c, 't')) ||
        !take_hms(&c, &f))
        return -EINVAL;
    if (take_char(&c, '.')) {
        const char *start = c.p;
        unsigned scale = 100;
        while (!at_end(&c) && is_digit(*c.p)) {
            f.ms += (unsigned)(*c.p - '0') * scale;  /* truncated to milliseconds */
            scale /= 10;
            c.p++;
        }
        if (c.p == start || c.p - start > FRACTION_MAX_DIGITS)
            return -EINVAL;
    }
    if (take_char(&c, 'Z') || take_char(&c, 'z')) {
        f.offset_min = 0;
    } else {
        bool minus = take_char(&c, '-');
        if (!minus && !take_char(&c, '+'))
            return -EINVAL;
        if (!take_digits(&c, 2, 2, &oh) || !take_char(&c, ':') || !take_digits(&c, 2, 2, &om) ||
            oh > 23 || om > 59)
            return -EINVAL;
        f.offset_min = (int)(oh * 60 + om) * (minus ? -1 : 1);
    }
    if (!at_end(&c))
        return -EINVAL;
    return to_ms(&f, ret_ms);
}

/* "21 Jan 2019 09:00:43 GMT", the common tail of RFC 1123 and AWS dates.
 * RFC 1123 (after RFC 822) allows a one-digit day, as AWS does. */
static bool take_dmy_hms_gmt(struct cursor *c, struct fields *f)
{
    unsigned y;
    int m;

    if (!take_digits(c, 1, 2, &f->day) || !take_char(c, ' '))
        return false;
    m = take_name(c, month_names, 12);
    if (m < 0 || !take_char(c, ' ') || !take_digits(c, 4, 4, &y) || !take_char(c, ' ') ||
        !take_hms(c, f) || !take_str(c, " GMT") || !at_end(c))
        return false;
    f->month = (unsigned)m + 1;
    f->year = y;
    return true;
}

int time_parse_rfc1123(const char *s, size_t len, int64_t *ret_ms)
{
    struct cursor c = { s, s + len };
    struct fields f = { 0 };
    int64_t ms;
    int wday;

    if (!s)
        return -EINVAL;
    wday = take_name(&c, weekday_names, 7);
    if (wday < 0 || !take_str(&c, ", ") || !take_dmy_hms_gmt(&c, &f) || to_ms(&f, &ms) < 0)
        return -EINVAL;
    /* A date whose weekday is wrong was not written by a clock. */
    if ((ms / 86400000 + 4) % 7 != wday)
        return -EINVAL;
    *ret_ms = ms;
    return 0;
}

int time_parse_aws_event(const char *s, size_t len, int64_t *ret_ms)
{
    struct cursor c = { s, s + len };
    struct fields f = { 0 };

    if (!s || !take_dmy_hms_gmt(&c, &f))
        return -EINVAL;
    return to_ms(&f, ret_ms);
}

int time_parse_tencent(const char *s, size_t len, int64_t *ret_ms)
{
    struct cursor c = { s, s + len };
    struct fields f = { 0 };

    if (!s || !take_ymd(&c, &f) || !take_char(&c, ' ') || !take_hms(&c, &f) || !at_end(&c))
        return -EINVAL;
    f.offset_min = 8 * 60;  /* China Standard Time, which has no daylight saving */
    return to_ms(&f, ret_ms);
}
