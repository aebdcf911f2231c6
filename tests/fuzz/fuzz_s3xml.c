/* The S3 XML parsers on arbitrary bytes, and s3xml_escape()'s round trip
 * through the reader.  Besides the sanitizers, it aborts when a promise of
 * s3xml.h is broken: a reason for every -EINVAL, outputs untouched on
 * failure, the same answer twice, every string terminated, error fields
 * printable, keys non-empty UTF-8 of at most 1024 bytes, ETags without
 * quotes, times inside 1970..9999, a truncated listing that says where the
 * next page starts, and an escaped string that reads back exactly. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/s3xml.h"

#define MS_END 253402300800000LL
#define ESCAPE_IN_MAX 2048

#define POISON(x) memset(&(x), 0xa5, sizeof(x))

/* Terminated inside size; printable ASCII when asked; not empty when asked. */
static void check_reason(int r, const char *why)
{
    if (r < 0 && (!why || !*why))
        abort();
}

static void check_error(const struct s3_error *e)
{
    fuzz_check_string(e->code, sizeof(e->code), true, true);
    fuzz_check_string(e->message, sizeof(e->message), false, true);
    fuzz_check_string(e->key, sizeof(e->key), false, true);
    fuzz_check_string(e->bucket, sizeof(e->bucket), false, true);
    fuzz_check_string(e->request_id, sizeof(e->request_id), false, true);
    fuzz_check_string(e->resource, sizeof(e->resource), false, true);
}

static void check_etag(const char *etag, size_t size)
{
    fuzz_check_string(etag, size, false, true);
    if (strchr(etag, '"') || strchr(etag, ' '))
        abort();
}

static void fuzz_error(const char *s, size_t size)
{
    struct s3_error e, again;
    const char *why = NULL;
    int r;

    POISON(e);
    r = s3xml_parse_error(s, size, &e, &why);
    check_reason(r, why);
    if (r != 0 && r != -EINVAL && r != -ENOMEM)
        abort();
    if (r != 0) {
        if (!fuzz_poisoned(&e, sizeof(e)))
            abort();
        return;
    }
    check_error(&e);
    POISON(again);
    if (s3xml_parse_error(s, size, &again, NULL) != 0 || memcmp(&e, &again, sizeof(e)) != 0)
        abort();
}

static void fuzz_list(const char *s, size_t size)
{
    struct s3_list l, again;
    const char *why = NULL;
    int r;

    POISON(l);
    r = s3xml_parse_list(s, size, &l, &why);
    check_reason(r, why);
    if (r != 0 && r != -EINVAL && r != -ENOMEM)
        abort();
    if (r != 0) {
        if (!fuzz_poisoned(&l, sizeof(l)))
            abort();
        return;
    }
    if (l.n_objects + l.n_prefixes > 10000 || (l.n_objects && !l.objects) ||
        (l.n_prefixes && !l.prefixes))
        abort();
    for (size_t i = 0; i < l.n_objects; i++) {
        const struct s3_object *o = &l.objects[i];
        fuzz_check_string(o->key, sizeof(o->key), true, false);
        check_etag(o->etag, sizeof(o->etag));
        fuzz_check_string(o->storage_class, sizeof(o->storage_class), false, true);
        if (o->last_modified_ms < 0 || o->last_modified_ms >= MS_END)
            abort();
    }
    for (size_t i = 0; i < l.n_prefixes; i++)
        fuzz_check_string(l.prefixes[i].prefix, sizeof(l.prefixes[i].prefix), false, false);
    fuzz_check_string(l.next_token, sizeof(l.next_token), false, true);
    fuzz_check_string(l.next_marker, sizeof(l.next_marker), false, false);
    if (l.truncated != (l.next_token[0] || l.next_marker[0]))
        abort();
    if (l.key_count < -1)
        abort();
    /* The same answer twice. */
    if (s3xml_parse_list(s, size, &again, NULL) != 0 || again.n_objects != l.n_objects ||
        again.n_prefixes != l.n_prefixes || again.truncated != l.truncated ||
        strcmp(again.next_token, l.next_token) != 0 ||
        strcmp(again.next_marker, l.next_marker) != 0 ||
        (l.n_objects &&
         memcmp(again.objects, l.objects, l.n_objects * sizeof(l.objects[0])) != 0))
        abort();
    s3xml_list_release(&again);
    s3xml_list_release(&l);
    if (l.objects || l.n_objects)
        abort();
}

static void fuzz_multipart(const char *s, size_t size)
{
    char id[S3_UPLOAD_ID_MAX + 1], etag[S3_ETAG_MAX + 1];
    const char *why = NULL;
    struct s3_error e;
    int r;

    memset(id, 0xa5, sizeof(id));
    r = s3xml_parse_initiate_multipart(s, size, id, sizeof(id), &why);
    check_reason(r, why);
    if (r == 0)
        fuzz_check_string(id, sizeof(id), true, true);
    else if (!fuzz_poisoned(id, sizeof(id)))
        abort();

    memset(etag, 0xa5, sizeof(etag));
    POISON(e);
    r = s3xml_parse_complete_multipart(s, size, etag, sizeof(etag), &e, &why);
    check_reason(r, why);
    if (r == 0) {
        check_etag(etag, sizeof(etag));
        if (!etag[0] || !fuzz_poisoned(&e, sizeof(e)))
            abort();
    } else if (r == -EREMOTEIO) {
        check_error(&e);
        if (!fuzz_poisoned(etag, sizeof(etag)))
            abort();
    } else if (!fuzz_poisoned(etag, sizeof(etag)) || !fuzz_poisoned(&e, sizeof(e))) {
        abort();
    }
}

/* Escape the input's first string and read it back as a key. */
static void fuzz_escape(const char *s, size_t size)
{
    static char in[ESCAPE_IN_MAX + 1], esc[6 * ESCAPE_IN_MAX + 1], doc[6 * ESCAPE_IN_MAX + 512];
    size_t n = strnlen(s, size < ESCAPE_IN_MAX ? size : ESCAPE_IN_MAX);
    struct s3_list l;
    int r, len;

    memcpy(in, s, n);
    in[n] = '\0';
    r = s3xml_escape(in, esc, sizeof(esc));
    if (r == -EINVAL)
        return;
    if (r < 0 || (size_t)r != strlen(esc) || strpbrk(esc, "<>\"'\r\n\t"))
        abort();
    if (n == 0 || n > S3_KEY_MAX)
        return;
    len = snprintf(doc, sizeof(doc),
                   "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>%s</Key>"
                   "<LastModified>2009-10-12T17:50:30Z</LastModified><Size>1</Size></Contents>"
                   "</ListBucketResult>",
                   esc);
    if (len < 0 || (size_t)len >= sizeof(doc))
        abort();
    if (s3xml_parse_list(doc, (size_t)len, &l, NULL) != 0 || l.n_objects != 1 ||
        strcmp(l.objects[0].key, in) != 0)
        abort();
    s3xml_list_release(&l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;

    fuzz_error(s, size);
    fuzz_list(s, size);
    fuzz_multipart(s, size);
    fuzz_escape(s, size);
    return 0;
}
