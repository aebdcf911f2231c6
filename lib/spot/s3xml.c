/* s3xml: S3's XML answers (errors, listings, multipart results) read from
 * the tree that xml.c builds, and the escape for request bodies.  See
 * s3xml.h for what is accepted.  Outputs are built in locals and copied
 * out only when the whole body was good. */
#include "spot/s3xml.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "spot/strict.h"
#include "spot/timeparse.h"
#include "spot/xml.h"

/* Entries (objects and common prefixes) one listing may hold: S3 sends at
 * most 1000 per page. */
#define LIST_MAX_ENTRIES 10000

static int garbage(const char **ret_why, const char *why)
{
    if (ret_why)
        *ret_why = why;
    return -EINVAL;
}

/* Walking the tree. */

static const struct xnode *node_at(const struct xdoc *d, uint32_t i)
{
    return i == XNONE ? NULL : &d->nodes[i];
}

#define FOR_CHILDREN(d, parent, it)                                                          \
    for (const struct xnode *it = node_at(d, (parent)->first); it; it = node_at(d, it->next))

static bool is(const struct xnode *n, const char *name)
{
    return strlen(name) == n->name_len && memcmp(n->name, name, n->name_len) == 0;
}

/* The text of a leaf element, terminated in place only by the next run,
 * so it is given with its length. */
static int leaf(const struct xdoc *d, const struct xnode *n, const char **ret, size_t *ret_len,
                const char **ret_why)
{
    if (n->has_children)
        return garbage(ret_why, "a value element holds elements");
    *ret = d->text + n->text_off;
    *ret_len = n->text_len;
    return 0;
}

/* Copy a UTF-8 value as printable ASCII, one '?' per other character,
 * cut to fit. */
static void copy_printable(char *dst, size_t size, const char *s, size_t len)
{
    size_t o = 0;

    for (size_t i = 0; i < len && o + 1 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c & 0xc0) == 0x80)
            continue;
        dst[o++] = c >= 0x20 && c <= 0x7e ? (char)c : '?';
    }
    dst[o] = '\0';
}

/* Printable ASCII without spaces, nothing else: tokens, ETags, IDs. */
static bool is_token(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return false;
    return true;
}

/* Copy a value that must be kept whole. */
static bool copy_whole(char *dst, size_t size, const char *s, size_t len)
{
    if (len >= size)
        return false;
    memcpy(dst, s, len);
    dst[len] = '\0';
    return true;
}

static int parse_u64_text(const char *s, size_t len, uint64_t *ret)
{
    uint64_t v = 0;

    if (len == 0 || len > 20)
        return -EINVAL;
    for (size_t i = 0; i < len; i++) {
        unsigned digit;
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        digit = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return -EINVAL;
        v = v * 10 + digit;
    }
    *ret = v;
    return 0;
}

/* An ETag without its quotes: printable, no quote left inside. */
static int copy_etag(char *dst, size_t size, const char *s, size_t len, const char **ret_why)
{
    if (len >= 2 && s[0] == '"' && s[len - 1] == '"') {
        s++;
        len -= 2;
    }
    if (len == 0 || !is_token(s, len) || memchr(s, '"', len))
        return garbage(ret_why, "malformed ETag");
    if (!copy_whole(dst, size, s, len))
        return garbage(ret_why, "ETag too long");
    return 0;
}

/* The <Error> element root into *out. */
static int read_error(const struct xdoc *d, const struct xnode *root, struct s3_error *out,
                      const char **ret_why)
{
    struct s3_error e;
    struct { const char *name; char *dst; size_t size; bool seen; } fields[] = {
        { "Code", e.code, sizeof(e.code), false },
        { "Message", e.message, sizeof(e.message), false },
        { "Key", e.key, sizeof(e.key), false },
        { "BucketName", e.bucket, sizeof(e.bucket), false },
        { "RequestId", e.request_id, sizeof(e.request_id), false },
        { "Resource", e.resource, sizeof(e.resource), false },
    };

    memset(&e, 0, sizeof(e));
    FOR_CHILDREN(d, root, it) {
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
            const char *s;
            size_t len;

            if (!is(it, fields[i].name))
                continue;
            if (fields[i].seen)
                return garbage(ret_why, "an Error field appears twice");
            if (leaf(d, it, &s, &len, ret_why) < 0)
                return -EINVAL;
            fields[i].seen = true;
            copy_printable(fields[i].dst, fields[i].size, s, len);
        }
    }
    if (!e.code[0])
        return garbage(ret_why, "Error document without a Code");
    *out = e;
    return 0;
}

int s3xml_parse_error(const char *body, size_t len, struct s3_error *out, const char **ret_why)
{
    struct xdoc d;
    int r = xml_read(body, len, &d, ret_why);

    if (r < 0)
        return r;
    if (!is(&d.nodes[0], "Error"))
        r = garbage(ret_why, "root element is not Error");
    else
        r = read_error(&d, &d.nodes[0], out, ret_why);
    xml_free(&d);
    return r;
}

static int read_object(const struct xdoc *d, const struct xnode *c, struct s3_object *o,
                       const char **ret_why)
{
    bool key = false, size = false, mtime = false, etag = false, sclass = false;

    FOR_CHILDREN(d, c, it) {
        const char *s;
        size_t len;
        bool *seen;

        if (is(it, "Key"))
            seen = &key;
        else if (is(it, "Size"))
            seen = &size;
        else if (is(it, "LastModified"))
            seen = &mtime;
        else if (is(it, "ETag"))
            seen = &etag;
        else if (is(it, "StorageClass"))
            seen = &sclass;
        else
            continue;
        if (*seen)
            return garbage(ret_why, "a Contents field appears twice");
        *seen = true;
        if (leaf(d, it, &s, &len, ret_why) < 0)
            return -EINVAL;
        if (seen == &key) {
            if (len == 0)
                return garbage(ret_why, "empty object key");
            if (!copy_whole(o->key, sizeof(o->key), s, len))
                return garbage(ret_why, "object key longer than 1024 bytes");
        } else if (seen == &size) {
            if (parse_u64_text(s, len, &o->size) < 0)
                return garbage(ret_why, "object Size is not a decimal uint64");
        } else if (seen == &mtime) {
            if (time_parse_rfc3339(s, len, &o->last_modified_ms) < 0)
                return garbage(ret_why, "object LastModified is not an RFC 3339 time");
        } else if (seen == &etag) {
            if (copy_etag(o->etag, sizeof(o->etag), s, len, ret_why) < 0)
                return -EINVAL;
        } else {
            if (len == 0 || !is_token(s, len) ||
                !copy_whole(o->storage_class, sizeof(o->storage_class), s, len))
                return garbage(ret_why, "malformed StorageClass");
        }
    }
    if (!key || !size || !mtime)
        return garbage(ret_why, "Contents without Key, Size or LastModified");
    return 0;
}

static int read_prefix(const struct xdoc *d, const struct xnode *c, struct s3_prefix *p,
                       const char **ret_why)
{
    bool seen = false;

    FOR_CHILDREN(d, c, it) {
        const char *s;
        size_t len;

        if (!is(it, "Prefix"))
            continue;
        if (seen)
            return garbage(ret_why, "CommonPrefixes holds two Prefix elements");
        seen = true;
        if (leaf(d, it, &s, &len, ret_why) < 0)
            return -EINVAL;
        if (!copy_whole(p->prefix, sizeof(p->prefix), s, len))
            return garbage(ret_why, "common prefix longer than 1024 bytes");
    }
    if (!seen)
        return garbage(ret_why, "CommonPrefixes without a Prefix");
    return 0;
}

/* The top-level fields of a listing; counts of Contents and
 * CommonPrefixes in *ret_objects, *ret_prefixes. */
static int read_list_fields(const struct xdoc *d, const struct xnode *root, struct s3_list *l,
                            bool *ret_v2, size_t *ret_objects, size_t *ret_prefixes,
                            const char **ret_why)
{
    bool trunc = false, token = false, marker = false, count = false, enc = false;
    size_t objects = 0, prefixes = 0;

    *ret_v2 = false;
    FOR_CHILDREN(d, root, it) {
        const char *s;
        size_t len;
        bool *seen;

        if (is(it, "Contents")) {
            objects++;
            continue;
        }
        if (is(it, "CommonPrefixes")) {
            prefixes++;
            continue;
        }
        if (is(it, "ContinuationToken") || is(it, "StartAfter"))
            *ret_v2 = true;
        if (is(it, "IsTruncated"))
            seen = &trunc;
        else if (is(it, "NextContinuationToken"))
            seen = &token;
        else if (is(it, "NextMarker"))
            seen = &marker;
        else if (is(it, "KeyCount"))
            seen = &count;
        else if (is(it, "EncodingType"))
            seen = &enc;
        else
            continue;
        if (*seen)
            return garbage(ret_why, "a ListBucketResult field appears twice");
        *seen = true;
        if (leaf(d, it, &s, &len, ret_why) < 0)
            return -EINVAL;
        if (seen == &trunc) {
            if (len == 4 && memcmp(s, "true", 4) == 0)
                l->truncated = true;
            else if (!(len == 5 && memcmp(s, "false", 5) == 0))
                return garbage(ret_why, "IsTruncated is neither true nor false");
        } else if (seen == &token) {
            *ret_v2 = true;
            if (!is_token(s, len) || !copy_whole(l->next_token, sizeof(l->next_token), s, len))
                return garbage(ret_why, "malformed NextContinuationToken");
        } else if (seen == &marker) {
            if (!copy_whole(l->next_marker, sizeof(l->next_marker), s, len))
                return garbage(ret_why, "NextMarker longer than 1024 bytes");
        } else if (seen == &count) {
            uint64_t v;
            *ret_v2 = true;
            if (parse_u64_text(s, len, &v) < 0 || v > INT32_MAX)
                return garbage(ret_why, "malformed KeyCount");
            l->key_count = (int64_t)v;
        } else {
            if (!(len == 3 && memcmp(s, "url", 3) == 0))
                return garbage(ret_why, "unknown EncodingType");
            l->url_encoded = true;
        }
    }
    if (!trunc)
        return garbage(ret_why, "ListBucketResult without IsTruncated");
    if (objects + prefixes > LIST_MAX_ENTRIES)
        return garbage(ret_why, "listing with more than 10000 entries");
    *ret_objects = objects;
    *ret_prefixes = prefixes;
    return 0;
}

/* Where a truncated page says the next one starts. */
static int list_next(struct s3_list *l, bool v2, const char **ret_why)
{
    const char *last = NULL;

    if (!l->truncated) {
        l->next_token[0] = '\0';
        l->next_marker[0] = '\0';
        return 0;
    }
    if (l->next_token[0] || l->next_marker[0])
        return 0;
    if (v2)
        return garbage(ret_why, "truncated listing without NextContinuationToken");
    if (l->n_objects)
        last = l->objects[l->n_objects - 1].key;
    if (l->n_prefixes) {
        const char *p = l->prefixes[l->n_prefixes - 1].prefix;
        if (!last || strcmp(p, last) > 0)
            last = p;
    }
    if (!last || !*last)
        return garbage(ret_why, "truncated listing without NextMarker or keys");
    /* Both buffers hold S3_KEY_MAX + 1 bytes. */
    memcpy(l->next_marker, last, strlen(last) + 1);
    return 0;
}

static int read_list(const struct xdoc *d, struct s3_list *l, const char **ret_why)
{
    const struct xnode *root = &d->nodes[0];
    size_t objects, prefixes, io = 0, ip = 0;
    bool v2;
    int r;

    if (!is(root, "ListBucketResult"))
        return garbage(ret_why, "root element is not ListBucketResult");
    l->key_count = -1;
    r = read_list_fields(d, root, l, &v2, &objects, &prefixes, ret_why);
    if (r < 0)
        return r;
    if (objects) {
        l->objects = calloc(objects, sizeof(*l->objects));
        if (!l->objects)
            return -ENOMEM;
    }
    if (prefixes) {
        l->prefixes = calloc(prefixes, sizeof(*l->prefixes));
        if (!l->prefixes)
            return -ENOMEM;
    }
    FOR_CHILDREN(d, root, it) {
        if (is(it, "Contents")) {
            r = read_object(d, it, &l->objects[io], ret_why);
            if (r < 0)
                return r;
            l->n_objects = ++io;
        } else if (is(it, "CommonPrefixes")) {
            r = read_prefix(d, it, &l->prefixes[ip], ret_why);
            if (r < 0)
                return r;
            l->n_prefixes = ++ip;
        }
    }
    return list_next(l, v2, ret_why);
}

int s3xml_parse_list(const char *body, size_t len, struct s3_list *out, const char **ret_why)
{
    struct s3_list l = { 0 };
    struct xdoc d;
    int r = xml_read(body, len, &d, ret_why);

    if (r < 0)
        return r;
    r = read_list(&d, &l, ret_why);
    xml_free(&d);
    if (r < 0) {
        if (r == -ENOMEM)
            garbage(ret_why, "out of memory");
        s3xml_list_release(&l);
        return r;
    }
    *out = l;
    return 0;
}

void s3xml_list_release(struct s3_list *list)
{
    if (!list)
        return;
    free(list->objects);
    free(list->prefixes);
    *list = (struct s3_list){ 0 };
}

/* The text of the one child named name of root, required and kept whole. */
static int read_one(const struct xdoc *d, const struct xnode *root, const char *name,
                    const char **ret, size_t *ret_len, const char **ret_why)
{
    bool seen = false;

    FOR_CHILDREN(d, root, it) {
        if (!is(it, name))
            continue;
        if (seen)
            return garbage(ret_why, "a result field appears twice");
        seen = true;
        if (leaf(d, it, ret, ret_len, ret_why) < 0)
            return -EINVAL;
    }
    if (!seen)
        return garbage(ret_why, "a required result field is missing");
    return 0;
}

int s3xml_parse_initiate_multipart(const char *body, size_t len, char *upload_id, size_t size,
                                   const char **ret_why)
{
    struct xdoc d;
    const char *s;
    size_t n;
    int r = xml_read(body, len, &d, ret_why);

    if (r < 0)
        return r;
    if (is(&d.nodes[0], "Error"))
        r = garbage(ret_why, "S3 answered with an Error document");
    else if (!is(&d.nodes[0], "InitiateMultipartUploadResult"))
        r = garbage(ret_why, "root element is not InitiateMultipartUploadResult");
    else
        r = read_one(&d, &d.nodes[0], "UploadId", &s, &n, ret_why);
    if (r == 0 && (n == 0 || n > S3_UPLOAD_ID_MAX || !is_token(s, n)))
        r = garbage(ret_why, "malformed UploadId");
    if (r == 0 && !copy_whole(upload_id, size, s, n))
        r = garbage(ret_why, "UploadId does not fit the buffer");
    xml_free(&d);
    return r;
}

int s3xml_parse_complete_multipart(const char *body, size_t len, char *etag, size_t etag_size,
                                   struct s3_error *ret_err, const char **ret_why)
{
    char tag[S3_ETAG_MAX + 1];
    struct s3_error e;
    struct xdoc d;
    const char *s;
    size_t n;
    int r = xml_read(body, len, &d, ret_why);

    if (r < 0)
        return r;
    if (is(&d.nodes[0], "Error")) {
        r = read_error(&d, &d.nodes[0], &e, ret_why);
        if (r == 0) {
            if (ret_err)
                *ret_err = e;
            if (ret_why)
                *ret_why = "S3 answered 200 with an Error document";
            r = -EREMOTEIO;
        }
    } else if (!is(&d.nodes[0], "CompleteMultipartUploadResult")) {
        r = garbage(ret_why, "root element is not CompleteMultipartUploadResult");
    } else {
        r = read_one(&d, &d.nodes[0], "ETag", &s, &n, ret_why);
        if (r == 0)
            r = copy_etag(tag, sizeof(tag), s, n, ret_why);
        if (r == 0 && !copy_whole(etag, etag_size, tag, strlen(tag)))
            r = garbage(ret_why, "ETag does not fit the buffer");
    }
    xml_free(&d);
    return r;
}

int s3xml_escape(const char *in, char *out, size_t size)
{
    size_t o = 0, len;

    if (!in)
        return -EINVAL;
    len = strlen(in);
    for (size_t i = 0; i < len;) {
        const char *rep = NULL;
        uint32_t c;
        size_t n = xml_utf8_decode(in + i, len - i, &c), add;

        if (!n || !xml_is_char(c))
            return -EINVAL;
        switch (c) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&quot;"; break;
        case '\'': rep = "&apos;"; break;
        case '\t': rep = "&#9;"; break;
        case '\n': rep = "&#10;"; break;
        case '\r': rep = "&#13;"; break;
        default: break;
        }
        add = rep ? strlen(rep) : n;
        if (o + add >= size || o + add > INT_MAX) {
            if (size > 0)
                out[0] = '\0';
            return -ENOSPC;
        }
        memcpy(out + o, rep ? rep : in + i, add);
        o += add;
        i += n;
    }
    if (size == 0)
        return -ENOSPC;
    out[o] = '\0';
    return (int)o;
}
