#include "spot/notice.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* In the order of enum notice_kind: these names are in the event log. */
static const char *const kind_names[NOTICE__COUNT] = {
    [NOTICE_TERMINATE] = "terminate",
    [NOTICE_STOP] = "stop",
    [NOTICE_HIBERNATE] = "hibernate",
    [NOTICE_REBALANCE] = "rebalance",
    [NOTICE_MAINTENANCE] = "maintenance",
    [NOTICE_SIGNAL] = "signal",
    [NOTICE_DRILL] = "drill",
};

const char *notice_kind_name(enum notice_kind kind)
{
    if ((unsigned)kind >= NOTICE__COUNT)
        return NULL;
    return kind_names[kind];
}

int notice_kind_parse(const char *name)
{
    if (!name)
        return -EINVAL;
    for (int i = 0; i < NOTICE__COUNT; i++)
        if (strcmp(name, kind_names[i]) == 0)
            return i;
    return -EINVAL;
}

static void copy_text(char *dst, size_t size, const char *src, size_t len, bool layout)
{
    size_t i;

    if (size == 0)
        return;
    if (!src)
        len = 0;
    if (len > size - 1)
        len = size - 1;
    /* Only printable ASCII: raw bodies end up in log lines and JSON, where a
     * control byte or half a UTF-8 sequence would do harm. */
    for (i = 0; i < len; i++) {
        bool keep = (src[i] >= 0x20 && src[i] < 0x7f) ||
                    (layout && (src[i] == '\t' || src[i] == '\n' || src[i] == '\r'));
        dst[i] = keep ? src[i] : '?';
    }
    dst[i] = '\0';
}

void notice_copy(char *dst, size_t size, const char *src, size_t len)
{
    copy_text(dst, size, src, len, false);
}

void notice_copy_raw(char *dst, size_t size, const char *src, size_t len)
{
    copy_text(dst, size, src, len, true);
}

int64_t notice_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t notice_mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The proleptic Gregorian date of a day number (days since 1970-01-01),
 * the inverse of time_days_from_civil(); by hand, so that every int64_t
 * millisecond value formats, whatever time_t and gmtime_r() allow. */
static void civil_from_days(int64_t days, int64_t *ret_y, unsigned *ret_m, unsigned *ret_d)
{
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;                                   /* [0, 146096] */
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; /* [0, 399] */
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);            /* [0, 365] */
    int64_t mp = (5 * doy + 2) / 153;                                 /* [0, 11], from March */
    unsigned m = (unsigned)(mp < 10 ? mp + 3 : mp - 9);

    *ret_y = yoe + era * 400 + (m <= 2);
    *ret_m = m;
    *ret_d = (unsigned)(doy - (153 * mp + 2) / 5 + 1);
}

char *notice_format_time(int64_t ms, char *buf, size_t size)
{
    int64_t days = ms / 86400000, rem = ms % 86400000, y;
    unsigned m, d;

    if (rem < 0) {
        rem += 86400000;
        days--;
    }
    civil_from_days(days, &y, &m, &d);
    snprintf(buf, size, "%04lld-%02u-%02uT%02u:%02u:%02u.%03uZ", (long long)y, m, d,
             (unsigned)(rem / 3600000), (unsigned)(rem / 60000 % 60), (unsigned)(rem / 1000 % 60),
             (unsigned)(rem % 1000));
    return buf;
}

/* A fixed field as a JSON string, even if whoever filled it forgot the
 * terminator or left a control byte in it; with layout, the tabs and line
 * ends that notice_copy_raw() keeps. */
static void add_field(cJSON *obj, const char *key, const char *field, size_t size, bool layout)
{
    char buf[NOTICE_RAW_LEN];

    copy_text(buf, sizeof(buf), field, strnlen(field, size), layout);
    cJSON_AddStringToObject(obj, key, buf);
}

/* 0 stands for "not known yet" (a deadline the caller has still to set). */
static void add_time(cJSON *obj, const char *key, int64_t ms)
{
    char buf[48];

    if (ms == 0)
        cJSON_AddNullToObject(obj, key);
    else
        cJSON_AddStringToObject(obj, key, notice_format_time(ms, buf, sizeof(buf)));
}

void notice_to_json(const struct notice *n, struct cJSON *obj)
{
    const char *kind = notice_kind_name(n->kind);

    add_field(obj, "source", n->source, sizeof(n->source), false);
    if (kind)
        cJSON_AddStringToObject(obj, "kind", kind);
    else
        cJSON_AddNullToObject(obj, "kind");
    add_time(obj, "deadline", n->deadline_ms);
    add_field(obj, "event_id", n->event_id, sizeof(n->event_id), false);
    add_field(obj, "raw", n->raw, sizeof(n->raw), true);
    cJSON_AddBoolToObject(obj, "drill", n->drill);
    cJSON_AddBoolToObject(obj, "terminating", n->terminating);
    add_time(obj, "detected", n->detected_ms);
}

struct notice_stop notice_stop_plan(int64_t deadline_ms, int64_t now_ms, uint64_t margin_ms,
                                    uint64_t grace_ms, bool checkpoints)
{
    struct notice_stop st;

    if (checkpoints && grace_ms > NOTICE_FALLBACK_GRACE_MS)
        grace_ms = NOTICE_FALLBACK_GRACE_MS;
    st.stop_at_ms = deadline_ms - (int64_t)margin_ms - (int64_t)grace_ms;
    st.give_up_ms = st.stop_at_ms - NOTICE_GIVE_UP_MS;
    if (st.stop_at_ms <= now_ms)
        grace_ms = notice_grace_left(deadline_ms, now_ms, margin_ms, grace_ms);
    st.grace_ms = grace_ms;
    return st;
}

uint64_t notice_grace_left(int64_t deadline_ms, int64_t now_ms, uint64_t margin_ms,
                           uint64_t grace_ms)
{
    int64_t left = deadline_ms - (int64_t)margin_ms - now_ms;

    if (left < (int64_t)grace_ms)
        return left > 0 ? (uint64_t)left : 0;
    return grace_ms;
}
