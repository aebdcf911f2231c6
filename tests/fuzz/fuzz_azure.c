/* The Azure Scheduled Events parser and azure_event_notice() on arbitrary
 * bytes.  The document is read for four VM names: one, the same in upper
 * case (Azure VM names compare case-insensitively, so nothing may
 * differ), none and "" (not known: the events of one resource are
 * guessed, the same for both).  Aborts when a promise of cloudparse.h is
 * broken. */
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
    if (ev->not_before_ms < 0 || ev->not_before_ms >= MS_END ||
        (ev->not_before_bad != 0 && ev->not_before_bad != 1) ||
        (ev->not_before_bad && ev->not_before_ms))
        abort();
    if (ev->duration_s < -1 || ev->for_us != 1 || (ev->only_us != 0 && ev->only_us != 1) ||
        (ev->guessed != 0 && ev->guessed != 1) || (ev->guessed && ev->only_us))
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

/* What every good parse promises: the counts add up, the skipped events
 * are said with a reason. */
static void check_doc(const struct azure_doc *d)
{
    if (d->n > AZURE_MAX_EVENTS || d->incarnation < 0 || d->incarnation > 9007199254740991LL ||
        d->n + d->others + d->dropped + d->n_bad != d->total ||
        (d->dropped && d->n != AZURE_MAX_EVENTS))
        abort();
    for (size_t i = 0; i < d->n_bad && i < AZURE_MAX_BAD; i++) {
        if (!d->bad[i].why || !*d->bad[i].why)
            abort();
        fuzz_check_string(d->bad[i].id, sizeof(d->bad[i].id), false, true);
    }
    for (size_t i = 0; i < d->n; i++)
        check_event(&d->ev[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct azure_doc doc, upper, none, empty, before;
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
    if (r != 0)
        abort();
    check_doc(&doc);
    memset(&upper, 0, sizeof(upper));
    memset(&none, 0, sizeof(none));
    memset(&empty, 0, sizeof(empty));
    if (azure_parse_events(s, size, "WESTNO_0", &upper, NULL) != 0 ||
        azure_parse_events(s, size, NULL, &none, NULL) != 0 ||
        azure_parse_events(s, size, "", &empty, NULL) != 0)
        abort();
    check_doc(&none);
    if (memcmp(&upper, &doc, sizeof(doc)) != 0 || memcmp(&empty, &none, sizeof(none)) != 0 ||
        none.total != doc.total || none.n_bad != doc.n_bad ||
        none.incarnation != doc.incarnation)
        abort();
    for (size_t i = 0; i < doc.n; i++)
        if (doc.ev[i].guessed)
            abort();
    for (size_t i = 0; i < none.n; i++)
        if (!none.ev[i].guessed)
            abort();
    return 0;
}
