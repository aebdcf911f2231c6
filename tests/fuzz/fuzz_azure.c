/* The Azure Scheduled Events parser and azure_event_notice() on arbitrary
 * bytes.  The document is read for three VM names: one, the same in
 * upper case (Azure VM names compare case-insensitively, so nothing may
 * differ), and none (no event is ours).  Aborts when a promise of
 * cloudparse.h is broken. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/cloudparse.h"
#include "spot/timeparse.h"

#define MS_END 253402300800000LL
#define DETECTED 4242
#define NOW_MS 1700000000000LL
#define WINDOW_MS 30000

static void check_event(const struct azure_event *ev)
{
    struct notice n, before;
    int r;

    fuzz_check_string(ev->id, sizeof(ev->id), true, true);
    fuzz_check_string(ev->type, sizeof(ev->type), false, true);
    fuzz_check_string(ev->status, sizeof(ev->status), false, true);
    fuzz_check_string(ev->description, sizeof(ev->description), false, true);
    /* RFC 1123 has whole seconds. */
    if (ev->not_before_ms < 0 || ev->not_before_ms >= MS_END || ev->not_before_ms % 1000 != 0)
        abort();
    if (ev->duration_s < -1 || (ev->for_us != 0 && ev->for_us != 1) ||
        (ev->only_us != 0 && ev->only_us != 1) || (ev->only_us && !ev->for_us))
        abort();

    memset(&n, 0xa5, sizeof(n));
    n.detected_ms = DETECTED;
    before = n;
    r = azure_event_notice(ev, NOW_MS, WINDOW_MS, &n);
    if (r == 0) {
        if (memcmp(&n, &before, sizeof(n)) != 0)
            abort();
        return;
    }
    if (r != 1)
        abort();
    fuzz_check_string(n.source, sizeof(n.source), true, true);
    fuzz_check_string(n.event_id, sizeof(n.event_id), true, true);
    fuzz_check_string(n.raw, sizeof(n.raw), true, true);
    if (strcmp(n.source, "azure") != 0 || strcmp(n.event_id, ev->id) != 0 ||
        (n.kind != NOTICE_TERMINATE && n.kind != NOTICE_MAINTENANCE) || n.drill ||
        n.detected_ms != DETECTED ||
        n.deadline_ms != (ev->not_before_ms ? ev->not_before_ms : NOW_MS + WINDOW_MS) ||
        n.terminating != (strcmp(ev->type, "Freeze") != 0))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct azure_doc doc, upper, none, before;
    const char *s = (const char *)data, *why = NULL;
    int r;

    memset(&doc, 0xa5, sizeof(doc));
    before = doc;
    r = azure_parse_events(s, size, "WestNO_0", &doc, &why);
    if (r == -EINVAL) {
        if (!why || !*why || memcmp(&doc, &before, sizeof(doc)) != 0)
            abort();
        if (azure_parse_events(s, size, NULL, &none, NULL) != -EINVAL)
            abort();
        return 0;
    }
    if (r != 0 || doc.n > AZURE_MAX_EVENTS || doc.incarnation < 0 ||
        doc.incarnation > 9007199254740991LL)
        abort();
    if (azure_parse_events(s, size, "WESTNO_0", &upper, NULL) != 0 ||
        azure_parse_events(s, size, NULL, &none, NULL) != 0)
        abort();
    if (upper.n != doc.n || upper.incarnation != doc.incarnation || none.n != doc.n)
        abort();
    for (size_t i = 0; i < doc.n; i++) {
        check_event(&doc.ev[i]);
        if (memcmp(&upper.ev[i], &doc.ev[i], sizeof(doc.ev[i])) != 0 || none.ev[i].for_us ||
            none.ev[i].only_us || strcmp(none.ev[i].id, doc.ev[i].id) != 0 ||
            none.ev[i].not_before_ms != doc.ev[i].not_before_ms)
            abort();
    }
    return 0;
}
