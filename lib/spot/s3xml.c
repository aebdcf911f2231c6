/* s3xml: a whole body is first read into a small tree (xml_read()), then
 * the S3 functions walk the tree.  The tree is two allocations: an array
 * of element nodes and one buffer of decoded character data.  Decoding
 * never makes text longer than its source (the longest expansion, a
 * four-byte UTF-8 character, comes from a reference of at least eight
 * bytes), so that buffer is the body's size and is never grown.
 *
 * An element holds either text or elements, never both: whitespace
 * between elements is dropped, anything else there is garbage.  So the
 * text of a leaf is one contiguous run of the buffer, and a listing's
 * layout whitespace costs nothing.
 *
 * There is no DTD, hence no entity but the five predefined ones and
 * numeric references: an entity bomb cannot expand, it is refused at its
 * DOCTYPE.  Outputs are built in locals and copied out only when the whole
 * body was good. */
#include "spot/s3xml.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "spot/strict.h"
#include "spot/timeparse.h"

#define XNONE UINT32_MAX
#define NAME_MAX_LEN 256
#define ATTRS_MAX 32
/* Entries (objects and common prefixes) one listing may hold: S3 sends at
 * most 1000 per page. */
#define LIST_MAX_ENTRIES 10000

struct xnode {
    const char *name;          /* in the body, not terminated */
    size_t name_len;
    size_t text_off, text_len; /* in xdoc.text; 0 when it holds elements */
    uint32_t parent, first, last, next;
    bool has_children;
};

struct xdoc {
    struct xnode *nodes;       /* nodes[0] is the root */
    size_t n, cap;
    char *text;                /* decoded character data */
    size_t text_len;
};

struct xparser {
    const char *p, *end;
    struct xdoc *doc;
    uint32_t cur;              /* the open element, XNONE outside the root */
    int depth;
    const char *why;
};

static int garbage(const char **ret_why, const char *why)
{
    if (ret_why)
        *ret_why = why;
    return -EINVAL;
}

static int fail(struct xparser *x, const char *why)
{
    x->why = why;
    return -EINVAL;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool all_space(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!is_space(s[i]))
            return false;
    return true;
}

/* One UTF-8 character at s (n bytes there): its length with *ret_cp set,
 * or 0 when the bytes are not shortest-form UTF-8 of a scalar value. */
static size_t utf8_decode(const char *str, size_t n, uint32_t *ret_cp)
{
    const unsigned char *s = (const unsigned char *)str;
    uint32_t c;
    size_t len;

    if (n == 0)
        return 0;
    c = s[0];
    if (c < 0x80) {
        *ret_cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        c &= 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        c &= 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        c &= 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10ffff)) ||
        (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *ret_cp = c;
    return len;
}

static size_t utf8_encode(uint32_t c, char *out)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xc0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xe0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        out[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
    out[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

/* XML 1.0 Char. */
static bool xml_char(uint32_t c)
{
    return c == 0x9 || c == 0xa || c == 0xd || (c >= 0x20 && c <= 0xd7ff) ||
           (c >= 0xe000 && c <= 0xfffd) || (c >= 0x10000 && c <= 0x10ffff);
}

/* The length of the character at s if it is a valid XML character, else 0. */
static size_t xml_char_len(const char *s, size_t n)
{
    uint32_t c;
    size_t len = utf8_decode(s, n, &c);

    return len && xml_char(c) ? len : 0;
}

static bool starts(const struct xparser *x, const char *lit)
{
    size_t n = strlen(lit);

    return (size_t)(x->end - x->p) >= n && memcmp(x->p, lit, n) == 0;
}

static bool skip_space(struct xparser *x)
{
    const char *p = x->p;

    while (x->p < x->end && is_space(*x->p))
        x->p++;
    return x->p != p;
}

/* ASCII names only: S3 uses nothing else, and it keeps the reader small. */
static bool name_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == ':';
}

static bool name_char(char c)
{
    return name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

static int read_name(struct xparser *x, const char **ret, size_t *ret_len)
{
    const char *s = x->p;

    if (x->p == x->end || !name_start(*x->p))
        return fail(x, "malformed or non-ASCII XML name");
    while (x->p < x->end && name_char(*x->p))
        x->p++;
    if ((size_t)(x->p - s) > NAME_MAX_LEN)
        return fail(x, "XML name longer than 256 bytes");
    *ret = s;
    *ret_len = (size_t)(x->p - s);
    return 0;
}

/* Check that s..end holds only XML characters (comments, PIs). */
static int check_chars(struct xparser *x, const char *s, const char *end)
{
    while (s < end) {
        size_t n = xml_char_len(s, (size_t)(end - s));
        if (!n)
            return fail(x, "invalid UTF-8 or a character XML forbids");
        s += n;
    }
    return 0;
}

static int skip_comment(struct xparser *x)
{
    const char *s = x->p + 4, *dash = memmem(s, (size_t)(x->end - s), "--", 2);

    if (!dash)
        return fail(x, "unterminated comment");
    if (dash + 2 >= x->end || dash[2] != '>')
        return fail(x, "'--' inside a comment");
    if (check_chars(x, x->p + 4, dash) < 0)
        return -EINVAL;
    x->p = dash + 3;
    return 0;
}

/* A processing instruction other than the XML declaration: skipped. */
static int skip_pi(struct xparser *x)
{
    const char *name, *q;
    size_t len;

    x->p += 2;
    if (read_name(x, &name, &len) < 0)
        return -EINVAL;
    if (strict_ascii_case_equal(name, len, "xml"))
        return fail(x, "XML declaration not at the start");
    q = memmem(x->p, (size_t)(x->end - x->p), "?>", 2);
    if (!q)
        return fail(x, "unterminated processing instruction");
    if (q != x->p && !is_space(*x->p))
        return fail(x, "malformed processing instruction");
    if (check_chars(x, x->p, q) < 0)
        return -EINVAL;
    x->p = q + 2;
    return 0;
}

/* <?xml version="1.0" encoding="UTF-8" standalone="yes"?>: version first
 * and required, the others optional and in that order. */
static int parse_decl(struct xparser *x)
{
    static const char *const names[] = { "version", "encoding", "standalone" };
    int next = 0;

    x->p += 5;
    for (;;) {
        bool space = skip_space(x);
        const char *name, *val;
        size_t len, vlen;
        char quote;
        int i;

        if (starts(x, "?>")) {
            x->p += 2;
            break;
        }
        if (!space || read_name(x, &name, &len) < 0)
            return fail(x, "malformed XML declaration");
        for (i = next; i < 3; i++)
            if (strlen(names[i]) == len && memcmp(names[i], name, len) == 0)
                break;
        if (i == 3 || (next == 0 && i != 0))
            return fail(x, "malformed XML declaration");
        skip_space(x);
        if (x->p == x->end || *x->p != '=')
            return fail(x, "malformed XML declaration");
        x->p++;
        skip_space(x);
        if (x->p == x->end || (*x->p != '"' && *x->p != '\''))
            return fail(x, "malformed XML declaration");
        quote = *x->p++;
        val = x->p;
        while (x->p < x->end && *x->p != quote && x->p - val < 64)
            x->p++;
        if (x->p == x->end || *x->p != quote)
            return fail(x, "malformed XML declaration");
        vlen = (size_t)(x->p - val);
        x->p++;
        if (i == 0 && !(vlen == 3 && memcmp(val, "1.0", 3) == 0))
            return fail(x, "XML version is not 1.0");
        if (i == 1 && !strict_ascii_case_equal(val, vlen, "utf-8"))
            return fail(x, "XML encoding is not UTF-8");
        if (i == 2 && !(vlen == 3 && memcmp(val, "yes", 3) == 0) &&
            !(vlen == 2 && memcmp(val, "no", 2) == 0))
            return fail(x, "malformed XML declaration");
        next = i + 1;
    }
    if (next == 0)
        return fail(x, "XML declaration without a version");
    return 0;
}

/* A reference after '&' at x->p: appended to the text (decoded). */
static int parse_ref(struct xparser *x)
{
    static const struct { const char *name; char c; } named[] = {
        { "amp", '&' }, { "lt", '<' }, { "gt", '>' }, { "quot", '"' }, { "apos", '\'' },
    };
    const char *s = x->p + 1, *semi;
    struct xdoc *d = x->doc;
    uint32_t c = 0;
    size_t len;

    semi = memchr(s, ';', (size_t)(x->end - s) < 16 ? (size_t)(x->end - s) : 16);
    if (!semi)
        return fail(x, "malformed entity reference");
    len = (size_t)(semi - s);
    if (len >= 2 && s[0] == '#') {
        bool hex = s[1] == 'x';
        size_t i = hex ? 2 : 1;

        if (i == len)
            return fail(x, "malformed character reference");
        for (; i < len; i++) {
            unsigned v;
            if (s[i] >= '0' && s[i] <= '9')
                v = (unsigned)(s[i] - '0');
            else if (hex && s[i] >= 'a' && s[i] <= 'f')
                v = (unsigned)(s[i] - 'a' + 10);
            else if (hex && s[i] >= 'A' && s[i] <= 'F')
                v = (unsigned)(s[i] - 'A' + 10);
            else
                return fail(x, "malformed character reference");
            c = c * (hex ? 16 : 10) + v;
            if (c > 0x10ffff)
                return fail(x, "character reference out of range");
        }
        if (!xml_char(c))
            return fail(x, "character reference to a character XML forbids");
        d->text_len += utf8_encode(c, d->text + d->text_len);
    } else {
        size_t i;

        for (i = 0; i < sizeof(named) / sizeof(named[0]); i++)
            if (strlen(named[i].name) == len && memcmp(named[i].name, s, len) == 0)
                break;
        if (i == sizeof(named) / sizeof(named[0]))
            return fail(x, "unknown entity reference");
        d->text[d->text_len++] = named[i].c;
    }
    x->p = semi + 1;
    return 0;
}

/* Append raw character data s..end, line ends normalized to LF. */
static int append_raw(struct xparser *x, const char *s, const char *end)
{
    struct xdoc *d = x->doc;

    while (s < end) {
        size_t n;

        if (*s == '\r') {
            d->text[d->text_len++] = '\n';
            s += s + 1 < end && s[1] == '\n' ? 2 : 1;
            continue;
        }
        n = xml_char_len(s, (size_t)(end - s));
        if (!n)
            return fail(x, "invalid UTF-8 or a character XML forbids");
        memcpy(d->text + d->text_len, s, n);
        d->text_len += n;
        s += n;
    }
    return 0;
}

/* Character data appended since before belongs to the open element: kept
 * if it is a leaf, dropped if it is whitespace between elements. */
static int settle_text(struct xparser *x, size_t before)
{
    struct xdoc *d = x->doc;

    if (!d->nodes[x->cur].has_children)
        return 0;
    if (!all_space(d->text + before, d->text_len - before))
        return fail(x, "an element holds both text and elements");
    d->text_len = before;
    return 0;
}

/* Text up to the next '<'. */
static int parse_text(struct xparser *x)
{
    size_t before = x->doc->text_len;

    while (x->p < x->end && *x->p != '<') {
        const char *s = x->p;

        while (x->p < x->end && *x->p != '<' && *x->p != '&' && *x->p != ']')
            x->p++;
        if (append_raw(x, s, x->p) < 0)
            return -EINVAL;
        if (x->p == x->end || *x->p == '<')
            break;
        if (*x->p == '&') {
            if (parse_ref(x) < 0)
                return -EINVAL;
        } else {
            if (starts(x, "]]>"))
                return fail(x, "']]>' in text");
            x->doc->text[x->doc->text_len++] = *x->p++;
        }
    }
    return settle_text(x, before);
}

static int parse_cdata(struct xparser *x)
{
    size_t before = x->doc->text_len;
    const char *s = x->p + 9, *e = memmem(s, (size_t)(x->end - s), "]]>", 3);

    if (!e)
        return fail(x, "unterminated CDATA section");
    if (append_raw(x, s, e) < 0)
        return -EINVAL;
    x->p = e + 3;
    return settle_text(x, before);
}

/* An attribute value after its quote: checked and decoded, then dropped
 * (the text buffer past text_len is scratch space). */
static int parse_attr_value(struct xparser *x, char quote)
{
    size_t before = x->doc->text_len;

    for (;;) {
        const char *s = x->p;

        while (x->p < x->end && *x->p != quote && *x->p != '<' && *x->p != '&')
            x->p++;
        if (append_raw(x, s, x->p) < 0)
            return -EINVAL;
        if (x->p == x->end)
            return fail(x, "unterminated attribute value");
        if (*x->p == '<')
            return fail(x, "'<' in an attribute value");
        if (*x->p == quote)
            break;
        if (parse_ref(x) < 0)
            return -EINVAL;
    }
    x->p++;
    x->doc->text_len = before;
    return 0;
}

static int add_node(struct xparser *x, const char *name, size_t len)
{
    struct xdoc *d = x->doc;
    struct xnode *n;
    uint32_t idx;

    if (d->n == S3XML_MAX_NODES)
        return fail(x, "more than 262144 XML elements");
    if (x->depth == S3XML_MAX_DEPTH)
        return fail(x, "XML nested deeper than 32 elements");
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        struct xnode *nodes = reallocarray(d->nodes, cap, sizeof(*nodes));
        if (!nodes)
            return -ENOMEM;
        d->nodes = nodes;
        d->cap = cap;
    }
    if (x->cur != XNONE) {
        struct xnode *parent = &d->nodes[x->cur];
        if (!parent->has_children) {
            if (!all_space(d->text + parent->text_off, d->text_len - parent->text_off))
                return fail(x, "an element holds both text and elements");
            d->text_len = parent->text_off;
            parent->has_children = true;
        }
    }
    idx = (uint32_t)d->n++;
    n = &d->nodes[idx];
    *n = (struct xnode){ .name = name, .name_len = len, .text_off = d->text_len,
                         .parent = x->cur, .first = XNONE, .last = XNONE, .next = XNONE };
    if (x->cur != XNONE) {
        struct xnode *parent = &d->nodes[x->cur];
        if (parent->last != XNONE)
            d->nodes[parent->last].next = idx;
        else
            parent->first = idx;
        parent->last = idx;
    }
    x->cur = idx;
    x->depth++;
    return 0;
}

static void close_node(struct xparser *x)
{
    struct xnode *n = &x->doc->nodes[x->cur];

    if (!n->has_children)
        n->text_len = x->doc->text_len - n->text_off;
    x->cur = n->parent;
    x->depth--;
}

static int parse_start_tag(struct xparser *x)
{
    struct { const char *name; size_t len; } attrs[ATTRS_MAX];
    size_t n_attrs = 0, len;
    const char *name;
    int r;

    x->p++;
    if (read_name(x, &name, &len) < 0)
        return -EINVAL;
    for (;;) {
        bool space = skip_space(x);
        const char *aname;
        size_t alen;
        char quote;

        if (x->p == x->end)
            return fail(x, "document ends inside a tag");
        if (*x->p == '>' || starts(x, "/>"))
            break;
        if (!space || read_name(x, &aname, &alen) < 0)
            return fail(x, "malformed tag");
        for (size_t i = 0; i < n_attrs; i++)
            if (attrs[i].len == alen && memcmp(attrs[i].name, aname, alen) == 0)
                return fail(x, "an attribute appears twice");
        if (n_attrs == ATTRS_MAX)
            return fail(x, "more than 32 attributes on an element");
        attrs[n_attrs].name = aname;
        attrs[n_attrs++].len = alen;
        skip_space(x);
        if (x->p == x->end || *x->p != '=')
            return fail(x, "malformed attribute");
        x->p++;
        skip_space(x);
        if (x->p == x->end || (*x->p != '"' && *x->p != '\''))
            return fail(x, "malformed attribute");
        quote = *x->p++;
        if (parse_attr_value(x, quote) < 0)
            return -EINVAL;
    }
    r = add_node(x, name, len);
    if (r < 0)
        return r;
    if (*x->p == '/') {
        x->p += 2;
        close_node(x);
    } else {
        x->p++;
    }
    return 0;
}

static int parse_end_tag(struct xparser *x)
{
    const struct xnode *n = &x->doc->nodes[x->cur];
    const char *name;
    size_t len;

    x->p += 2;
    if (read_name(x, &name, &len) < 0)
        return -EINVAL;
    if (len != n->name_len || memcmp(name, n->name, len) != 0)
        return fail(x, "mismatched end tag");
    skip_space(x);
    if (x->p == x->end || *x->p != '>')
        return fail(x, "malformed end tag");
    x->p++;
    close_node(x);
    return 0;
}

static int refuse_markup(struct xparser *x)
{
    if (starts(x, "<!DOCTYPE"))
        return fail(x, "DOCTYPE declaration refused");
    if (starts(x, "<!ENTITY"))
        return fail(x, "ENTITY declaration refused");
    return fail(x, "unexpected '<!' markup");
}

/* Comments, processing instructions and whitespace around the root. */
static int parse_misc(struct xparser *x)
{
    for (;;) {
        int r;

        skip_space(x);
        if (x->p == x->end || *x->p != '<')
            return 0;
        if (starts(x, "<!--"))
            r = skip_comment(x);
        else if (starts(x, "<?"))
            r = skip_pi(x);
        else if (starts(x, "<!"))
            r = refuse_markup(x);
        else
            return 0;
        if (r < 0)
            return r;
    }
}

static int parse_content(struct xparser *x)
{
    while (x->cur != XNONE) {
        int r;

        if (x->p == x->end)
            return fail(x, "document ends inside an element (truncated?)");
        if (*x->p != '<')
            r = parse_text(x);
        else if (starts(x, "</"))
            r = parse_end_tag(x);
        else if (starts(x, "<!--"))
            r = skip_comment(x);
        else if (starts(x, "<![CDATA["))
            r = parse_cdata(x);
        else if (starts(x, "<!"))
            r = refuse_markup(x);
        else if (starts(x, "<?"))
            r = skip_pi(x);
        else
            r = parse_start_tag(x);
        if (r < 0)
            return r;
    }
    return 0;
}

static void xml_free(struct xdoc *d)
{
    free(d->nodes);
    free(d->text);
    *d = (struct xdoc){ 0 };
}

/* Read a whole body into *d (released with xml_free() on success).
 * Returns 0, -EINVAL or -ENOMEM. */
static int xml_read(const char *body, size_t len, struct xdoc *d, const char **ret_why)
{
    struct xparser x = { .doc = d, .cur = XNONE };
    int r;

    *d = (struct xdoc){ 0 };
    if (!body)
        len = 0;
    if (len > S3XML_MAX_BODY)
        return garbage(ret_why, "body larger than 16 MiB");
    if (len > 0 && memchr(body, '\0', len))
        return garbage(ret_why, "body holds a NUL byte");
    x.p = body;
    x.end = body + len;
    if (starts(&x, "\xef\xbb\xbf"))
        x.p += 3;
    /* Whitespace before the declaration is not XML, but S3 sends it. */
    skip_space(&x);
    if (x.p == x.end)
        return garbage(ret_why, "empty body");
    d->text = malloc(len + 1);
    if (!d->text) {
        if (ret_why)
            *ret_why = "out of memory";
        return -ENOMEM;
    }
    if (starts(&x, "<?xml") && x.p + 5 < x.end && (is_space(x.p[5]) || x.p[5] == '?'))
        r = parse_decl(&x);
    else
        r = 0;
    if (r == 0)
        r = parse_misc(&x);
    if (r == 0 && (x.p == x.end || *x.p != '<'))
        r = fail(&x, x.p == x.end ? "no root element" : "text before the root element");
    if (r == 0)
        r = parse_start_tag(&x);
    if (r == 0)
        r = parse_content(&x);
    if (r == 0)
        r = parse_misc(&x);
    if (r == 0 && x.p != x.end)
        r = fail(&x, *x.p == '<' ? "more than one root element" : "text after the root element");
    if (r < 0) {
        xml_free(d);
        if (ret_why)
            *ret_why = r == -EINVAL ? x.why : "out of memory";
        return r;
    }
    d->text[d->text_len] = '\0';
    return 0;
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
        size_t n = utf8_decode(in + i, len - i, &c), add;

        if (!n || !xml_char(c))
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
