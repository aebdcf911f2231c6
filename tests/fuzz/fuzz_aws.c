/* The AWS parsers (spot instance-action, rebalance recommendation,
 * scheduled maintenance, autoscaling lifecycle state) on arbitrary bytes.
 * Besides the sanitizers, it aborts when a promise of cloudparse.h is
 * broken: a reason for every -EINVAL, the notice untouched unless 1 is
 * returned, every string terminated and printable, a known kind, a
 * deadline inside 1970..9999 that formats and reads back, the same answer
 * twice. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/cloudparse.h"
#include "spot/timeparse.h"

#define MS_END 253402300800000LL
#define DETECTED 4242
/* "now" for the scheduled events' deadlines: 2017-09-18T08:22:00Z. */
#define FUZZ_NOW 1505722920000LL
#define MAX_EVENTS 4

typedef int (*notice_fn)(const char *, size_t, struct notice *, const char **);

static void poison(struct notice *n)
{
    memset(n, 0xa5, sizeof(*n));
    n->detected_ms = DETECTED;
}

static void check_notice(const struct notice *n, bool has_deadline)
{
    char buf[32];
    int64_t back;
    cJSON *obj, *parsed;
    char *text;

    fuzz_check_string(n->source, sizeof(n->source), true, true);
    fuzz_check_string(n->event_id, sizeof(n->event_id), true, true);
    fuzz_check_string(n->raw, sizeof(n->raw), true, true);
    if (strcmp(n->source, "aws") != 0 || !notice_kind_name(n->kind) || n->drill ||
        n->detected_ms != DETECTED)
        abort();
    if (has_deadline) {
        if (n->deadline_ms < 0 || n->deadline_ms >= MS_END)
            abort();
        notice_format_time(n->deadline_ms, buf, sizeof(buf));
        if (time_parse_rfc3339(buf, strlen(buf), &back) != 0 || back != n->deadline_ms)
            abort();
    } else if (n->deadline_ms != 0) {
        abort();
    }
    obj = cJSON_CreateObject();
    if (!obj)
        return;
    notice_to_json(n, obj);
    text = cJSON_PrintUnformatted(obj);
    parsed = text ? cJSON_Parse(text) : NULL;
    if (parsed && (!cJSON_IsString(cJSON_GetObjectItem(parsed, "kind")) ||
                   !cJSON_IsString(cJSON_GetObjectItem(parsed, "event_id"))))
        abort();
    cJSON_Delete(parsed);
    free(text);
    cJSON_Delete(obj);
}

/* Run fn twice; check the result and return it, *n filled. */
static int run(notice_fn fn, const char *s, size_t size, struct notice *n)
{
    struct notice before, again;
    const char *why = NULL, *why2 = NULL;
    int r, r2;

    poison(n);
    before = *n;
    r = fn(s, size, n, &why);
    if (r == -EINVAL && (!why || !*why))
        abort();
    if (r != 1 && (r != 0 && r != -EINVAL))
        abort();
    if (r != 1 && memcmp(&before, n, sizeof(*n)) != 0)
        abort();
    poison(&again);
    r2 = fn(s, size, &again, &why2);
    if (r2 != r || memcmp(&again, n, sizeof(*n)) != 0)
        abort();
    return r;
}

static void fuzz_maintenance(const char *s, size_t size)
{
    struct notice out[MAX_EVENTS + 1], before[MAX_EVENTS + 1], again[MAX_EVENTS + 1];
    const char *why = NULL;
    size_t n = 999, n2 = 999;
    int r;

    for (size_t i = 0; i <= MAX_EVENTS; i++)
        poison(&out[i]);
    memcpy(before, out, sizeof(out));
    r = aws_parse_maintenance(s, size, FUZZ_NOW, out, MAX_EVENTS, &n, &why);
    if (r == -EINVAL) {
        if (!why || !*why || n != 999 || memcmp(before, out, sizeof(out)) != 0)
            abort();
        return;
    }
    if (r != 0 || n > MAX_EVENTS || memcmp(&before[n], &out[n], sizeof(out[0])) != 0)
        abort();
    for (size_t i = 0; i < n; i++) {
        check_notice(&out[i], true);
        if (out[i].kind != NOTICE_MAINTENANCE)
            abort();
    }
    /* Fewer slots give a prefix of the same notices. */
    poison(&again[0]);
    if (aws_parse_maintenance(s, size, FUZZ_NOW, again, 1, &n2, &why) != 0 || n2 != (n > 0) ||
        (n > 0 && memcmp(&again[0], &out[0], sizeof(out[0])) != 0))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    struct notice n;

    if (run(aws_parse_instance_action, s, size, &n) == 1) {
        check_notice(&n, true);
        /* Hibernation keeps the command: the one advisory action. */
        if (n.terminating != (n.kind != NOTICE_HIBERNATE) ||
            (n.kind != NOTICE_TERMINATE && n.kind != NOTICE_STOP && n.kind != NOTICE_HIBERNATE) ||
            strncmp(n.event_id, "aws:instance-action:", 20) != 0)
            abort();
    }
    if (run(aws_parse_rebalance, s, size, &n) == 1) {
        check_notice(&n, true);
        if (n.terminating || n.kind != NOTICE_REBALANCE ||
            strncmp(n.event_id, "aws:rebalance:", 14) != 0)
            abort();
    }
    if (run(aws_parse_lifecycle, s, size, &n) == 1) {
        check_notice(&n, false);
        if (!n.terminating || n.kind != NOTICE_TERMINATE)
            abort();
    }
    fuzz_maintenance(s, size);
    return 0;
}
