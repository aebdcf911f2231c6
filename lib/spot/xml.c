/* xml: the small XML 1.0 reader under s3xml.c: a whole body read into a
 * tree of elements (xml.h).  The tree is two allocations: an array of
 * element nodes and one buffer of decoded character data.  Decoding never
 * makes text longer than its source (the longest expansion, a four-byte
 * UTF-8 character, comes from a reference of at least eight bytes), so
 * that buffer is the body's size and is never grown.
 *
 * An element holds either text or elements, never both: whitespace
 * between elements is dropped, anything else there is garbage.  So the
 * text of a leaf is one contiguous run of the buffer, and a listing's
 * layout whitespace costs nothing.
 *
 * There is no DTD, hence no entity but the five predefined ones and
 * numeric references: an entity bomb cannot expand, it is refused at its
 * DOCTYPE.  What is accepted and refused is said in s3xml.h, whose limits
 * (S3XML_MAX_*) hold here. */
#include "spot/xml.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "spot/s3xml.h"
#include "spot/strict.h"

#define NAME_MAX_LEN 256
#define ATTRS_MAX 32

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

size_t xml_utf8_decode(const char *str, size_t n, uint32_t *ret_cp)
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

bool xml_is_char(uint32_t c)
{
    return c == 0x9 || c == 0xa || c == 0xd || (c >= 0x20 && c <= 0xd7ff) ||
           (c >= 0xe000 && c <= 0xfffd) || (c >= 0x10000 && c <= 0x10ffff);
}

/* The length of the character at s if it is a valid XML character, else 0. */
static size_t xml_char_len(const char *s, size_t n)
{
    uint32_t c;
    size_t len = xml_utf8_decode(s, n, &c);

    return len && xml_is_char(c) ? len : 0;
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
        if (!xml_is_char(c))
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

void xml_free(struct xdoc *d)
{
    free(d->nodes);
    free(d->text);
    *d = (struct xdoc){ 0 };
}

int xml_read(const char *body, size_t len, struct xdoc *d, const char **ret_why)
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
