/* xml: a body read whole into a small tree of elements, for s3xml.c
 * (internal to lib/spot).  What is accepted is said in s3xml.h; the tree
 * is walked through the indices below. */
#ifndef SPOT_XML_H
#define SPOT_XML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define XNONE UINT32_MAX

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

/* Read a whole body (len bytes, untrusted, not terminated) into *d,
 * released with xml_free() on success.  Returns 0, or -EINVAL with a short
 * static reason in *ret_why (when not NULL), or -ENOMEM. */
int xml_read(const char *body, size_t len, struct xdoc *d, const char **ret_why);

/* Free what xml_read() allocated and zero *d. */
void xml_free(struct xdoc *d);

/* One UTF-8 character at s (n bytes there): its length with *ret_cp set,
 * or 0 when the bytes are not shortest-form UTF-8 of a scalar value. */
size_t xml_utf8_decode(const char *s, size_t n, uint32_t *ret_cp);

/* Whether c is an XML 1.0 Char. */
bool xml_is_char(uint32_t c);

#endif
