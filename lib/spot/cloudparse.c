/* cloudparse: every body goes through body_check() (size cap, no NUL,
 * trailing whitespace dropped) and JSON bodies through json_parse()
 * (nothing after the value, no escaped NUL).  A notice is built in a local
 * struct and copied out only when the whole body was good, so the caller's
 * notice is untouched on 0 and on -EINVAL; detected_ms is never written.
 *
 * JSON types are strict: a field that has the wrong type, or a key given
 * twice, makes the whole body garbage.  A metadata service that answers
 * something we do not understand must be seen in the log, not half-read.
 * The one exception is a document that lists the events of many VMs
 * (Azure's): there an event stands alone, so that another VM's odd event
 * cannot hide this VM's notice. */
#include "spot/cloudparse.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spot/strict.h"
#include "spot/timeparse.h"

/* Longest autoscaling lifecycle state; the real ones are under 20 bytes. */
#define LIFECYCLE_MAX 64
/* Integers that a double holds exactly. */
#define JSON_INT_MAX 9007199254740991.0

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* The checks every body gets.  *ret_len is the length without trailing
 * whitespace: servers and proxies may end a body with a newline. */
static int body_check_max(const char *body, size_t len, size_t max, size_t *ret_len,
                          const char **ret_why)
{
    if (!body)
        len = 0;
    if (len > max)
        return strict_garbage(ret_why, max == AZURE_MAX_BODY ? "body larger than 256 KiB"
                                                             : "body larger than 64 KiB");
    if (len > 0 && memchr(body, '\0', len))
        return strict_garbage(ret_why, "body holds a NUL byte");
    while (len > 0 && is_space(body[len - 1]))
        len--;
    if (len == 0)
        return strict_garbage(ret_why, "empty body");
    *ret_len = len;
    return 0;
}

static int body_check(const char *body, size_t len, size_t *ret_len, const char **ret_why)
{
    return body_check_max(body, len, CLOUDPARSE_MAX_BODY, ret_len, ret_why);
}

/* Parse a whole JSON body into *ret (caller frees); *len becomes the
 * length without trailing whitespace.  The text is copied and terminated
 * first, so no cJSON version can read past the caller's bytes. */
static int json_parse(const char *body, size_t *plen, size_t max, cJSON **ret,
                      const char **ret_why)
{
    const char *end = NULL;
    cJSON *root;
    char *copy;
    size_t len;
    int r;

    r = body_check_max(body, *plen, max, &len, ret_why);
    if (r < 0)
        return r;
    if (strict_json_has_escaped_nul(body, len))
        return strict_garbage(ret_why, "JSON holds an escaped NUL (\\u0000)");
    copy = malloc(len + 1);
    if (!copy)
        return strict_garbage(ret_why, "out of memory");
    memcpy(copy, body, len);
    copy[len] = '\0';
    root = cJSON_ParseWithLengthOpts(copy, len, &end, false);
    if (root && end != copy + len) {
        cJSON_Delete(root);
        root = NULL;
        strict_garbage(ret_why, "text after the JSON value");
    } else if (!root) {
        strict_garbage(ret_why, "not valid JSON");
    }
    free(copy);
    if (!root)
        return -EINVAL;
    *plen = len;
    *ret = root;
    return 0;
}

static int json_parse_object(const char *body, size_t *plen, size_t max, cJSON **ret,
                             const char **ret_why)
{
    int r = json_parse(body, plen, max, ret, ret_why);

    if (r < 0)
        return r;
    if (!cJSON_IsObject(*ret)) {
        cJSON_Delete(*ret);
        return strict_garbage(ret_why, "not a JSON object");
    }
    return 0;
}

/* A whole-number member in [min, max]; *ret is untouched when absent and
 * not required. */
static int member_int(const cJSON *obj, const char *key, bool required, int64_t min, int64_t max,
                      int64_t *ret, const char *why, const char **ret_why)
{
    const cJSON *it;
    double d;
    int r = strict_json_member(obj, key, &it, ret_why);

    if (r < 0)
        return r;
    if (!it)
        return required ? strict_garbage(ret_why, why) : 0;
    if (!cJSON_IsNumber(it))
        return strict_garbage(ret_why, why);
    d = cJSON_GetNumberValue(it);
    /* The range test comes first: it also refuses NaN and infinities,
     * and makes the conversion below defined. */
    if (!(d >= (double)min && d <= (double)max) || (double)(int64_t)d != d)
        return strict_garbage(ret_why, why);
    *ret = (int64_t)d;
    return 0;
}

/* An identifier we key notices on: non-empty, printable ASCII, and short
 * enough to be kept whole, or two events could end up with one key. */
static bool good_id(const char *s, size_t size)
{
    size_t len = strlen(s);

    if (len == 0 || len >= size)
        return false;
    for (; *s; s++)
        if (*s < 0x21 || *s > 0x7e)
            return false;
    return true;
}

static void notice_start(struct notice *t, const char *source, enum notice_kind kind,
                         bool terminating)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->source, sizeof(t->source), "%s", source);
    t->kind = kind;
    t->terminating = terminating;
}

/* Copy every field but detected_ms, which belongs to the caller. */
static void notice_put(struct notice *n, const struct notice *t)
{
    int64_t detected = n->detected_ms;

    *n = *t;
    n->detected_ms = detected;
}

int aws_parse_instance_action(const char *body, size_t len, struct notice *n,
                              const char **ret_why)
{
    static const struct {
        const char *name;
        enum notice_kind kind;
    } actions[] = {
        { "terminate", NOTICE_TERMINATE },
        { "stop", NOTICE_STOP },
        { "hibernate", NOTICE_HIBERNATE },
    };
    const char *action, *when;
    struct notice t;
    cJSON *root;
    int64_t deadline;
    size_t i;
    int r;

    r = json_parse_object(body, &len, CLOUDPARSE_MAX_BODY, &root, ret_why);
    if (r < 0)
        return r;
    r = strict_json_member_string(root, "action", true, &action,
                                  "\"action\" missing or not a string", ret_why);
    if (r < 0)
        goto out;
    r = strict_json_member_string(root, "time", true, &when, "\"time\" missing or not a string",
                                  ret_why);
    if (r < 0)
        goto out;
    for (i = 0; i < sizeof(actions) / sizeof(actions[0]); i++)
        if (strcmp(action, actions[i].name) == 0)
            break;
    if (i == sizeof(actions) / sizeof(actions[0])) {
        r = strict_garbage(ret_why, "\"action\" is not terminate, stop or hibernate");
        goto out;
    }
    if (time_parse_rfc3339(when, strlen(when), &deadline) < 0) {
        r = strict_garbage(ret_why, "\"time\" is not an RFC 3339 time");
        goto out;
    }
    /* terminate and stop take the processes away.  A hibernated instance
     * keeps its memory and resumes with the command as it was: stopping the
     * command would lose what hibernation keeps. */
    notice_start(&t, "aws", actions[i].kind, actions[i].kind != NOTICE_HIBERNATE);
    t.deadline_ms = deadline;
    snprintf(t.event_id, sizeof(t.event_id), "aws:instance-action:%s:%s", action, when);
    notice_copy_raw(t.raw, sizeof(t.raw), body, len);
    notice_put(n, &t);
    r = 1;
out:
    cJSON_Delete(root);
    return r;
}

int aws_parse_rebalance(const char *body, size_t len, struct notice *n, const char **ret_why)
{
    const char *when;
    struct notice t;
    cJSON *root;
    int64_t deadline;
    int r;

    r = json_parse_object(body, &len, CLOUDPARSE_MAX_BODY, &root, ret_why);
    if (r < 0)
        return r;
    r = strict_json_member_string(root, "noticeTime", true, &when,
                                  "\"noticeTime\" missing or not a string", ret_why);
    if (r < 0)
        goto out;
    if (time_parse_rfc3339(when, strlen(when), &deadline) < 0) {
        r = strict_garbage(ret_why, "\"noticeTime\" is not an RFC 3339 time");
        goto out;
    }
    notice_start(&t, "aws", NOTICE_REBALANCE, false);
    t.deadline_ms = deadline;
    snprintf(t.event_id, sizeof(t.event_id), "aws:rebalance:%s", when);
    notice_copy_raw(t.raw, sizeof(t.raw), body, len);
    notice_put(n, &t);
    r = 1;
out:
    cJSON_Delete(root);
    return r;
}

/* An active event's deadline.  AWS runs the event between NotBefore and
 * NotAfter: until NotBefore has passed, that is when it may begin.  After
 * it, "now" would leave the command no grace at all (TERM and SIGKILL in
 * the same millisecond), though AWS may take until NotAfter: the deadline
 * is NotAfter then, and never sooner than AWS_EVENT_MIN_WINDOW_MS from now
 * (no NotAfter, or one past as well). */
static int64_t aws_event_deadline(int64_t not_before, const int64_t *not_after, int64_t now_ms)
{
    int64_t floor = now_ms + AWS_EVENT_MIN_WINDOW_MS;

    if (not_before > now_ms)
        return not_before;
    return not_after && *not_after > floor ? *not_after : floor;
}

/* One element of the scheduled-events array.  Every element must have its
 * types right, whatever its State; only an active one needs good dates.
 * Returns 1 with *t filled for an active event, 0 for another, -EINVAL. */
static int aws_maintenance_event(const cJSON *ev, int64_t now_ms, struct notice *t,
                                 const char **ret_why)
{
    static const char *const down_codes[] = { "instance-stop", "instance-retirement",
                                              "instance-reboot", "system-reboot" };
    const char *code, *desc, *id, *not_after, *not_before, *state;
    int64_t deadline, end;
    bool down = false;
    char *printed;
    int r;

    if (!cJSON_IsObject(ev))
        return strict_garbage(ret_why, "a scheduled event is not a JSON object");
    if ((r = strict_json_member_string(ev, "Code", true, &code, "\"Code\" missing or not a string",
                                       ret_why)) < 0 ||
        (r = strict_json_member_string(ev, "Description", false, &desc,
                                       "\"Description\" is not a string", ret_why)) < 0 ||
        (r = strict_json_member_string(ev, "EventId", true, &id,
                                       "\"EventId\" missing or not a string", ret_why)) < 0 ||
        (r = strict_json_member_string(ev, "NotAfter", false, &not_after,
                                       "\"NotAfter\" is not a string", ret_why)) < 0 ||
        (r = strict_json_member_string(ev, "NotBefore", true, &not_before,
                                       "\"NotBefore\" missing or not a string", ret_why)) < 0 ||
        (r = strict_json_member_string(ev, "State", true, &state,
                                       "\"State\" missing or not a string", ret_why)) < 0)
        return r;
    /* "completed" and "canceled" are history, not notices. */
    if (strcmp(state, "active") != 0)
        return 0;
    if (!good_id(id, NOTICE_ID_LEN))
        return strict_garbage(ret_why, "\"EventId\" is empty, too long or not printable");
    if (time_parse_aws_event(not_before, strlen(not_before), &deadline) < 0)
        return strict_garbage(ret_why,
                              "\"NotBefore\" is not a date like \"21 Jan 2019 09:00:43 GMT\"");
    if (not_after && time_parse_aws_event(not_after, strlen(not_after), &end) < 0)
        return strict_garbage(ret_why,
                              "\"NotAfter\" is not a date like \"21 Jan 2019 09:17:23 GMT\"");
    for (size_t i = 0; i < sizeof(down_codes) / sizeof(down_codes[0]); i++)
        if (strcmp(code, down_codes[i]) == 0)
            down = true;
    notice_start(t, "aws", NOTICE_MAINTENANCE, down);
    t->deadline_ms = aws_event_deadline(deadline, not_after ? &end : NULL, now_ms);
    snprintf(t->event_id, sizeof(t->event_id), "%s", id);
    /* The event itself, not the whole array: with several events the
     * array's first 512 bytes may not even reach this one. */
    printed = cJSON_PrintUnformatted(ev);
    notice_copy_raw(t->raw, sizeof(t->raw), printed ? printed : id,
                    strlen(printed ? printed : id));
    free(printed);
    return 1;
}

int aws_parse_maintenance(const char *body, size_t len, int64_t now_ms, struct notice *out,
                          size_t max, size_t *ret_n, const char **ret_why)
{
    const char *skipped = NULL;
    const cJSON *ev;
    cJSON *root;
    size_t n = 0;
    int r = 0;

    r = json_parse(body, &len, CLOUDPARSE_MAX_BODY, &root, ret_why);
    if (r < 0)
        return r;
    if (!cJSON_IsArray(root)) {
        r = strict_garbage(ret_why, "not a JSON array");
        goto out;
    }
    /* Each event stands alone: one that cannot be read is skipped, and
     * said through *ret_why, so that it hides none of the others. */
    cJSON_ArrayForEach(ev, root) {
        struct notice t;
        const char *why = NULL;
        int e = aws_maintenance_event(ev, now_ms, &t, &why);

        if (e < 0 && !skipped)
            skipped = why ? why : "a scheduled event cannot be read";
        else if (e == 1 && n < max)
            notice_put(&out[n++], &t);
    }
    if (ret_n)
        *ret_n = n;
    if (skipped && ret_why)
        *ret_why = skipped;
    r = 0;
out:
    cJSON_Delete(root);
    return r;
}

int aws_parse_lifecycle(const char *body, size_t len, struct notice *n, const char **ret_why)
{
    struct notice t;
    int r;

    r = body_check(body, len, &len, ret_why);
    if (r < 0)
        return r;
    if (len > LIFECYCLE_MAX)
        return strict_garbage(ret_why, "lifecycle state longer than 64 bytes");
    for (size_t i = 0; i < len; i++) {
        char c = body[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == ':'))
            return strict_garbage(ret_why, "lifecycle state is not letters, digits and ':'");
    }
    if (len != strlen("Terminated") || memcmp(body, "Terminated", len) != 0)
        return 0;
    /* The deadline is the caller's: now + the window it assumes. */
    notice_start(&t, "aws", NOTICE_TERMINATE, true);
    snprintf(t.event_id, sizeof(t.event_id), "aws:lifecycle:Terminated");
    notice_copy_raw(t.raw, sizeof(t.raw), body, len);
    notice_put(n, &t);
    return 1;
}

/* A plain-text body that must be exactly one of words; returns its index. */
static int word_body(const char *body, size_t len, const char *const *words, int count,
                     const char *why, const char **ret_why)
{
    int r = body_check(body, len, &len, ret_why);

    if (r < 0)
        return r;
    for (int i = 0; i < count; i++)
        if (len == strlen(words[i]) && memcmp(body, words[i], len) == 0)
            return i;
    return strict_garbage(ret_why, why);
}

int gcp_parse_preempted(const char *body, size_t len, const char **ret_why)
{
    static const char *const words[] = { "FALSE", "TRUE" };

    return word_body(body, len, words, 2, "preempted is neither TRUE nor FALSE", ret_why);
}

int gcp_parse_maintenance(const char *body, size_t len, struct notice *n, const char **ret_why)
{
    static const char *const words[] = { "NONE", "MIGRATE_ON_HOST_MAINTENANCE",
                                         "TERMINATE_ON_HOST_MAINTENANCE" };
    struct notice t;
    int r;

    r = word_body(body, len, words, 3,
                  "maintenance-event is not NONE, MIGRATE_ON_HOST_MAINTENANCE or "
                  "TERMINATE_ON_HOST_MAINTENANCE", ret_why);
    if (r <= 0)
        return r;
    /* A live migration pauses the VM briefly; a terminate stops it. */
    notice_start(&t, "gcp", NOTICE_MAINTENANCE, r == 2);
    snprintf(t.event_id, sizeof(t.event_id), "gcp:maintenance:%s", words[r]);
    snprintf(t.raw, sizeof(t.raw), "%s", words[r]);
    notice_put(n, &t);
    return 1;
}

/* NotBefore: RFC 1123 as documented ("Mon, 11 Apr 2022 22:26:58 GMT"), or
 * ISO 8601 / RFC 3339 ("2022-04-11T22:26:58Z"), which Microsoft's own
 * emulator serves. */
static int azure_time(const char *s, int64_t *ret_ms)
{
    size_t len = strlen(s);

    if (time_parse_rfc1123(s, len, ret_ms) == 0 || time_parse_rfc3339(s, len, ret_ms) == 0)
        return 0;
    return -EINVAL;
}

/* Resources: the VM names an event is for.  *ret_names counts them,
 * *ret_ours those equal to vm_name (which may be NULL or ""). */
static int azure_resources(const cJSON *res, const char *vm_name, size_t *ret_names,
                           size_t *ret_ours, const char **ret_why)
{
    const cJSON *name;
    size_t names = 0, ours = 0;

    if (!cJSON_IsArray(res))
        return strict_garbage(ret_why, "\"Resources\" missing or not an array");
    cJSON_ArrayForEach(name, res) {
        if (!cJSON_IsString(name) || !name->valuestring)
            return strict_garbage(ret_why, "\"Resources\" holds something other than strings");
        names++;
        if (vm_name && *vm_name &&
            strict_ascii_case_equal(name->valuestring, strlen(name->valuestring), vm_name))
            ours++;
    }
    *ret_names = names;
    *ret_ours = ours;
    return 0;
}

/* One element of Events into *ev; vm_name may be NULL or "" (not known:
 * an event that lists one resource alone is taken as ours). */
static int azure_event(const cJSON *it, const char *vm_name, struct azure_event *ev,
                       const char **ret_why)
{
    const char *id, *type, *status, *not_before, *desc, *rtype, *source;
    const cJSON *res;
    size_t names = 0, ours = 0;
    int r;

    if (!cJSON_IsObject(it))
        return strict_garbage(ret_why, "an event is not a JSON object");
    memset(ev, 0, sizeof(*ev));
    ev->duration_s = -1;
    if ((r = strict_json_member_string(it, "EventId", true, &id,
                                       "\"EventId\" missing or not a string", ret_why)) < 0 ||
        (r = strict_json_member_string(it, "EventType", true, &type,
                                       "\"EventType\" missing or not a string", ret_why)) < 0 ||
        (r = strict_json_member_string(it, "EventStatus", true, &status,
                                       "\"EventStatus\" missing or not a string", ret_why)) < 0 ||
        (r = strict_json_member_string(it, "NotBefore", false, &not_before,
                                       "\"NotBefore\" is not a string", ret_why)) < 0 ||
        (r = strict_json_member_string(it, "Description", false, &desc,
                                       "\"Description\" is not a string", ret_why)) < 0 ||
        (r = strict_json_member_string(it, "ResourceType", false, &rtype,
                                       "\"ResourceType\" is not a string", ret_why)) < 0 ||
        (r = strict_json_member_string(it, "EventSource", false, &source,
                                       "\"EventSource\" is not a string", ret_why)) < 0 ||
        (r = member_int(it, "DurationInSeconds", false, -1, INT32_MAX, &ev->duration_s,
                        "\"DurationInSeconds\" is not a whole number from -1 up", ret_why)) < 0 ||
        (r = strict_json_member(it, "Resources", &res, ret_why)) < 0 ||
        (r = azure_resources(res, vm_name, &names, &ours, ret_why)) < 0)
        return r;
    if (!good_id(id, sizeof(ev->id)))
        return strict_garbage(ret_why, "\"EventId\" is empty, too long or not printable");
    /* Once an event has Started, NotBefore is "".  A date that cannot be
     * read leaves the event in, with no NotBefore: for an event of this VM
     * the shortest window is safer than no notice at all. */
    if (not_before && *not_before && azure_time(not_before, &ev->not_before_ms) < 0)
        ev->not_before_bad = 1;
    if (vm_name && *vm_name) {
        ev->for_us = ours > 0;
        ev->only_us = ours > 0 && ours == names;
    } else {
        ev->for_us = ev->guessed = names == 1;
    }
    notice_copy(ev->id, sizeof(ev->id), id, strlen(id));
    notice_copy(ev->type, sizeof(ev->type), type, strlen(type));
    notice_copy(ev->status, sizeof(ev->status), status, strlen(status));
    if (desc)
        notice_copy(ev->description, sizeof(ev->description), desc, strlen(desc));
    return 0;
}

/* An event that could not be understood: its EventId (when it has a
 * readable one) and why, for the log. */
static void azure_bad(struct azure_doc *d, const cJSON *it, const char *why)
{
    const cJSON *id = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "EventId") : NULL;
    const char *s = cJSON_IsString(id) && id->valuestring ? id->valuestring : "";

    if (d->n_bad < AZURE_MAX_BAD) {
        notice_copy(d->bad[d->n_bad].id, sizeof(d->bad[0].id), s, strlen(s));
        d->bad[d->n_bad].why = why ? why : "malformed";
    }
    d->n_bad++;
}

int azure_parse_events(const char *body, size_t len, const char *vm_name, struct azure_doc *doc,
                       const char **ret_why)
{
    struct azure_doc *d = doc;
    const cJSON *events, *it;
    cJSON *root;
    int64_t incarnation = 0;
    int r;

    r = json_parse_object(body, &len, AZURE_MAX_BODY, &root, ret_why);
    if (r < 0)
        return r;
    r = member_int(root, "DocumentIncarnation", true, 0, (int64_t)JSON_INT_MAX, &incarnation,
                   "\"DocumentIncarnation\" missing or not a whole number", ret_why);
    if (r < 0)
        goto out;
    r = strict_json_member(root, "Events", &events, ret_why);
    if (r < 0)
        goto out;
    if (!cJSON_IsArray(events)) {
        r = strict_garbage(ret_why, "\"Events\" missing or not an array");
        goto out;
    }
    /* The document is good from here: each event stands on its own, so
     * that one this parser cannot read hides none of the others. */
    memset(d, 0, sizeof(*d));
    d->incarnation = incarnation;
    cJSON_ArrayForEach(it, events) {
        struct azure_event ev;
        const char *why = NULL;

        d->total++;
        if (azure_event(it, vm_name, &ev, &why) < 0) {
            azure_bad(d, it, why);
        } else if (!ev.for_us) {
            d->others++;
        } else if (d->n == AZURE_MAX_EVENTS) {
            d->dropped++;
        } else {
            d->ev[d->n++] = ev;
        }
    }
out:
    cJSON_Delete(root);
    return r;
}

int azure_event_notice(const struct azure_event *ev, int64_t now_ms, int64_t window_ms,
                       struct notice *n)
{
    static const struct {
        const char *type;
        enum notice_kind kind;
        bool terminating;
    } types[] = {
        { "Preempt", NOTICE_TERMINATE, true },
        { "Terminate", NOTICE_TERMINATE, true },
        { "Reboot", NOTICE_MAINTENANCE, true },
        { "Redeploy", NOTICE_MAINTENANCE, true },
        { "Freeze", NOTICE_MAINTENANCE, false },  /* a pause of seconds */
    };
    char when[48], raw[NOTICE_RAW_LEN + 64];
    struct notice t;
    size_t i;

    for (i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (strcmp(ev->type, types[i].type) == 0)
            break;
    if (i == sizeof(types) / sizeof(types[0]))
        return 0;
    notice_start(&t, "azure", types[i].kind, types[i].terminating);
    if (ev->not_before_ms)
        t.deadline_ms = ev->not_before_ms;
    else if (__builtin_add_overflow(now_ms, window_ms, &t.deadline_ms))
        t.deadline_ms = INT64_MAX;
    notice_copy(t.event_id, sizeof(t.event_id), ev->id, strnlen(ev->id, sizeof(ev->id)));
    /* The document is gone by now; say what it held about this event. */
    snprintf(raw, sizeof(raw), "%.*s %.*s NotBefore=%s DurationInSeconds=%lld %.*s",
             (int)sizeof(ev->type), ev->type, (int)sizeof(ev->status), ev->status,
             ev->not_before_ms ? notice_format_time(ev->not_before_ms, when, sizeof(when)) : "\"\"",
             (long long)ev->duration_s, (int)sizeof(ev->description), ev->description);
    notice_copy_raw(t.raw, sizeof(t.raw), raw, strlen(raw));
    notice_put(n, &t);
    return 1;
}

/* Alibaba and Tencent: the body is the time, and the time as given is the
 * event's identity. */
static int termination(const char *source, const char *body, size_t len,
                       int (*parse)(const char *, size_t, int64_t *), const char *why,
                       struct notice *n, const char **ret_why)
{
    struct notice t;
    int64_t deadline;
    int r;

    r = body_check(body, len, &len, ret_why);
    if (r < 0)
        return r;
    if (parse(body, len, &deadline) < 0)
        return strict_garbage(ret_why, why);
    notice_start(&t, source, NOTICE_TERMINATE, true);
    t.deadline_ms = deadline;
    /* A good time is at most 35 printable bytes, so this is never cut. */
    snprintf(t.event_id, sizeof(t.event_id), "%s:termination:%.*s", source, (int)len, body);
    notice_copy_raw(t.raw, sizeof(t.raw), body, len);
    notice_put(n, &t);
    return 1;
}

int alibaba_parse_termination(const char *body, size_t len, struct notice *n,
                              const char **ret_why)
{
    return termination("alibaba", body, len, time_parse_rfc3339,
                       "termination-time is not an RFC 3339 time like \"2015-01-05T18:02:00Z\"",
                       n, ret_why);
}

int tencent_parse_termination(const char *body, size_t len, struct notice *n,
                              const char **ret_why)
{
    return termination("tencent", body, len, time_parse_tencent,
                       "termination-time is not a time like \"2018-08-18 12:05:33\"", n,
                       ret_why);
}
