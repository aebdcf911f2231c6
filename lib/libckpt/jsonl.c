/* jsonl: read and write the control protocol's flat JSON lines. */
#include "jsonl.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define INT_LIMIT 9007199254740991LL /* 2^53 - 1 */

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

static int hex4(const char *p, const char *end, unsigned *ret)
{
    unsigned v = 0;

    if (end - p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *ret = v;
    return 0;
}

static char *put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xc0 | cp >> 6);
        *o++ = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xe0 | cp >> 12);
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *o++ = (char)(0x80 | (cp & 0x3f));
    } else {
        *o++ = (char)(0xf0 | cp >> 18);
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *o++ = (char)(0x80 | (cp & 0x3f));
    }
    return o;
}

/* Length of the valid UTF-8 sequence at p (1..4), 0 when invalid. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned cp;
    size_t n;

    if (p[0] < 0x80)
        return 1;
    if ((p[0] & 0xe0) == 0xc0)
        n = 2, cp = p[0] & 0x1f;
    else if ((p[0] & 0xf0) == 0xe0)
        n = 3, cp = p[0] & 0x0f;
    else if ((p[0] & 0xf8) == 0xf0)
        n = 4, cp = p[0] & 0x07;
    else
        return 0;
    if ((size_t)(end - p) < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    /* Overlong forms, surrogates and values past U+10FFFF. */
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/* A string starting after its opening quote at *pp; decoded in place at
 * out.  Returns the end of the decoded string (to be terminated), or NULL. */
static char *parse_string(const char **pp, const char *end, char *out)
{
    const char *p = *pp;
    char *o = out;

    while (p < end && *p != '"') {
        unsigned char c = (unsigned char)*p;

        if (c < 0x20)
            return NULL;
        if (c != '\\') {
            size_t n = utf8_len((const unsigned char *)p, (const unsigned char *)end);
            if (n == 0)
                return NULL;
            memmove(o, p, n);
            o += n;
            p += n;
            continue;
        }
        if (++p >= end)
            return NULL;
        switch (*p++) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;

            if (hex4(p, end, &cp) < 0)
                return NULL;
            p += 4;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, end, &lo) < 0 ||
                    lo < 0xdc00 || lo > 0xdfff)
                    return NULL;
                p += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                return NULL;
            }
            if (cp == 0)
                return NULL; /* a NUL would cut the string short */
            o = put_utf8(o, cp);
            break;
        }
        default:
            return NULL;
        }
    }
    if (p >= end)
        return NULL;
    *pp = p + 1;
    return o;
}

int jsonl_parse(char *line, size_t len, struct jsonl_msg *m)
{
    const char *p = line, *end = line + len;
    /* Decoded strings go at w, never ahead of p: decoding only shrinks. */
    char *w = line;

    m->n = 0;
    p = skip_ws(p, end);
    if (p >= end || *p++ != '{')
        return -1;
    p = skip_ws(p, end);
    if (p < end && *p == '}') {
        p = skip_ws(p + 1, end);
        return p == end ? 0 : -1;
    }
    for (;;) {
        struct jsonl_value *v;
        const char *key;
        char *kend;

        if (m->n == JSONL_MEMBERS_MAX)
            return -1;
        p = skip_ws(p, end);
        if (p >= end || *p++ != '"')
            return -1;
        key = w;
        if (!(kend = parse_string(&p, end, w)))
            return -1;
        p = skip_ws(p, end);
        if (p >= end || *p++ != ':')
            return -1;
        p = skip_ws(p, end);
        if (p >= end)
            return -1;
        /* The key's terminator may overwrite only what was consumed. */
        *kend = '\0';
        w = kend + 1;
        for (size_t i = 0; i < m->n; i++)
            if (strcmp(m->keys[i], key) == 0)
                return -1;
        m->keys[m->n] = key;
        v = &m->values[m->n];
        memset(v, 0, sizeof(*v));
        if (*p == '"') {
            char *send;

            p++;
            v->type = JSONL_STRING;
            v->str = w;
            if (!(send = parse_string(&p, end, w)))
                return -1;
            *send = '\0';
            w = send + 1;
        } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
            bool neg = *p == '-';
            long long n = 0;

            if (neg)
                p++;
            if (p >= end || *p < '0' || *p > '9' || (*p == '0' && p + 1 < end && p[1] >= '0' &&
                                                      p[1] <= '9'))
                return -1;
            while (p < end && *p >= '0' && *p <= '9') {
                n = n * 10 + (*p++ - '0');
                if (n > INT_LIMIT)
                    return -1;
            }
            if (p < end && (*p == '.' || *p == 'e' || *p == 'E'))
                return -1;
            v->type = JSONL_INT;
            v->num = neg ? -n : n;
        } else if (end - p >= 4 && memcmp(p, "true", 4) == 0) {
            v->type = JSONL_BOOL;
            v->num = 1;
            p += 4;
        } else if (end - p >= 5 && memcmp(p, "false", 5) == 0) {
            v->type = JSONL_BOOL;
            p += 5;
        } else if (end - p >= 4 && memcmp(p, "null", 4) == 0) {
            v->type = JSONL_NULL;
            p += 4;
        } else {
            return -1;
        }
        m->n++;
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        if (p < end && *p == '}') {
            p = skip_ws(p + 1, end);
            return p == end ? 0 : -1;
        }
        return -1;
    }
}

const struct jsonl_value *jsonl_get(const struct jsonl_msg *m, const char *key)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->keys[i], key) == 0)
            return &m->values[i];
    return NULL;
}

const char *jsonl_type(const struct jsonl_msg *m)
{
    const struct jsonl_value *v = jsonl_get(m, "type");

    return v && v->type == JSONL_STRING ? v->str : NULL;
}

/* Append s, JSON-escaped and quoted. */
static int put_string(char *buf, size_t size, size_t *o, const char *s)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);

    if (*o + 1 >= size)
        return -1;
    buf[(*o)++] = '"';
    while (p < end) {
        char esc[8];
        size_t n;

        if (*p < 0x20 || *p == '"' || *p == '\\') {
            n = (size_t)snprintf(esc, sizeof(esc), *p == '"' ? "\\\"" : *p == '\\' ? "\\\\"
                                                                                   : "\\u%04x",
                                 *p);
            if (*o + n >= size)
                return -1;
            memcpy(buf + *o, esc, n);
            *o += n;
            p++;
            continue;
        }
        n = utf8_len(p, end);
        if (n == 0 || *o + n >= size)
            return -1;
        memcpy(buf + *o, p, n);
        *o += n;
        p += n;
    }
    if (*o + 1 >= size)
        return -1;
    buf[(*o)++] = '"';
    return 0;
}

int jsonl_build(char *buf, size_t size, const struct jsonl_kv *kv, size_t n)
{
    size_t o = 0;
    int w = snprintf(buf, size, "{\"v\":1");

    if (w < 0 || (size_t)w >= size)
        return -1;
    o = (size_t)w;
    for (size_t i = 0; i < n; i++) {
        if (o + 1 >= size)
            return -1;
        buf[o++] = ',';
        if (put_string(buf, size, &o, kv[i].key) < 0 || o + 1 >= size)
            return -1;
        buf[o++] = ':';
        if (kv[i].type == JSONL_NULL || (kv[i].type == JSONL_STRING && !kv[i].str)) {
            if (o + 4 >= size)
                return -1;
            memcpy(buf + o, "null", 4);
            o += 4;
        } else if (kv[i].type == JSONL_STRING) {
            if (put_string(buf, size, &o, kv[i].str) < 0)
                return -1;
        } else if (kv[i].type == JSONL_BOOL) {
            w = snprintf(buf + o, size - o, "%s", kv[i].num ? "true" : "false");
            if (w < 0 || (size_t)w >= size - o)
                return -1;
            o += (size_t)w;
        } else {
            w = snprintf(buf + o, size - o, "%lld", kv[i].num);
            if (w < 0 || (size_t)w >= size - o)
                return -1;
            o += (size_t)w;
        }
    }
    if (o + 2 >= size)
        return -1;
    buf[o++] = '}';
    buf[o++] = '\n';
    buf[o] = '\0';
    return (int)o;
}
