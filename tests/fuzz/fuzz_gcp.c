/* The GCP parsers (preempted, maintenance-event) on arbitrary bytes: a
 * reason for every -EINVAL, the notice untouched unless 1 is returned,
 * and no body that means two things. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/cloudparse.h"

#define DETECTED 4242

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data, *why = NULL;
    struct notice n, before;
    int p, m;

    p = gcp_parse_preempted(s, size, &why);
    if ((p != 0 && p != 1 && p != -EINVAL) || (p == -EINVAL && (!why || !*why)))
        abort();
    if (gcp_parse_preempted(s, size, NULL) != p)
        abort();

    memset(&n, 0xa5, sizeof(n));
    n.detected_ms = DETECTED;
    before = n;
    why = NULL;
    m = gcp_parse_maintenance(s, size, &n, &why);
    if (m == -EINVAL && (!why || !*why))
        abort();
    if (m != 1 && ((m != 0 && m != -EINVAL) || memcmp(&n, &before, sizeof(n)) != 0))
        abort();
    if (m == 1) {
        fuzz_check_string(n.source, sizeof(n.source), true, true);
        fuzz_check_string(n.event_id, sizeof(n.event_id), true, true);
        fuzz_check_string(n.raw, sizeof(n.raw), true, true);
        if (strcmp(n.source, "gcp") != 0 || n.kind != NOTICE_MAINTENANCE || n.drill ||
            n.deadline_ms != 0 || n.detected_ms != DETECTED ||
            strncmp(n.event_id, "gcp:maintenance:", 16) != 0 ||
            n.terminating != (strcmp(n.event_id + 16, "TERMINATE_ON_HOST_MAINTENANCE") == 0))
            abort();
    }
    /* The two endpoints share no word. */
    if (p >= 0 && m >= 0)
        abort();
    return 0;
}
