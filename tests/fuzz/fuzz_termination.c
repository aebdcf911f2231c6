/* Alibaba and Tencent termination-time bodies on arbitrary bytes: a
 * reason for every -EINVAL, the notice untouched on failure, a terminate
 * notice whose deadline is the time the body names and whose event_id is
 * that time as given. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/cloudparse.h"
#include "spot/timeparse.h"

#define MS_END 253402300800000LL
#define DETECTED 4242

typedef int (*notice_fn)(const char *, size_t, struct notice *, const char **);
typedef int (*time_fn)(const char *, size_t, int64_t *);

static void one(notice_fn fn, time_fn tfn, const char *source, const char *s, size_t size)
{
    struct notice n, before;
    const char *why = NULL;
    char id[NOTICE_ID_LEN];
    int64_t ms;
    size_t len = size;
    int r;

    memset(&n, 0xa5, sizeof(n));
    n.detected_ms = DETECTED;
    before = n;
    r = fn(s, size, &n, &why);
    if (r == -EINVAL) {
        if (!why || !*why || memcmp(&n, &before, sizeof(n)) != 0)
            abort();
        return;
    }
    if (r != 1)
        abort();
    fuzz_check_string(n.source, sizeof(n.source), true, true);
    fuzz_check_string(n.event_id, sizeof(n.event_id), true, true);
    fuzz_check_string(n.raw, sizeof(n.raw), true, true);
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\r' ||
                       s[len - 1] == '\n'))
        len--;
    snprintf(id, sizeof(id), "%s:termination:%.*s", source, (int)len, s);
    if (strcmp(n.source, source) != 0 || n.kind != NOTICE_TERMINATE || !n.terminating ||
        n.drill || n.detected_ms != DETECTED || n.deadline_ms < 0 || n.deadline_ms >= MS_END ||
        strcmp(n.event_id, id) != 0 || tfn(s, len, &ms) != 0 || ms != n.deadline_ms)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;

    one(alibaba_parse_termination, time_parse_rfc3339, "alibaba", s, size);
    one(tencent_parse_termination, time_parse_tencent, "tencent", s, size);
    return 0;
}
