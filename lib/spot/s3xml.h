/* s3xml: the XML answers of an S3 server, parsed strictly.  No I/O: the
 * store backend hands in the body it received; unit tests and fuzzers call
 * these directly.
 *
 * Bodies are untrusted: (body, len) need not be terminated and may hold
 * anything.  The reader underneath is a small XML 1.0 reader, libc only:
 * an optional XML declaration (version 1.0, UTF-8), comments and
 * processing instructions skipped, one root element, attributes read and
 * checked but ignored (so xmlns="..." on the root is fine), character data
 * with the five predefined entities, numeric character references and
 * CDATA sections.  Refused: DOCTYPE and ENTITY declarations (so no entity
 * can expand), unknown entities, invalid UTF-8, characters XML forbids,
 * NUL bytes, element and attribute names outside ASCII, an element holding
 * both text and elements, nesting deeper than S3XML_MAX_DEPTH, more than
 * S3XML_MAX_NODES elements, a body over S3XML_MAX_BODY.  Whitespace before
 * the document is allowed: S3 sends spaces to keep a slow
 * CompleteMultipartUpload alive.  Element names are compared exactly,
 * without namespace prefixes.
 *
 * Every parser returns 0, -EINVAL (with a short static reason in *ret_why
 * when ret_why is not NULL; the reason never quotes the body) or -ENOMEM,
 * and leaves its outputs untouched on failure. */
#ifndef SPOT_S3XML_H
#define SPOT_S3XML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Largest body any parser accepts: a 1000-key listing of 1024-byte keys
 * with every byte escaped fits. */
#define S3XML_MAX_BODY (16 * 1024 * 1024)
#define S3XML_MAX_DEPTH 32
#define S3XML_MAX_NODES 262144

/* S3 keys are 1 to 1024 bytes of UTF-8. */
#define S3_KEY_MAX 1024
#define S3_ETAG_MAX 128
#define S3_TOKEN_MAX 4096
#define S3_UPLOAD_ID_MAX 1024

/* An <Error> document.  Every field is terminated and printable ASCII:
 * other bytes become '?', one per character, and long values are cut. */
struct s3_error {
    char code[64];           /* "SlowDown", "NoSuchKey", ...: never empty */
    char message[256];
    char key[256];
    char bucket[64];
    char request_id[128];
    char resource[256];
};

struct s3_object {
    char key[S3_KEY_MAX + 1];    /* the exact key: UTF-8, no NUL, not empty */
    uint64_t size;
    int64_t last_modified_ms;    /* ms since the epoch, UTC */
    char etag[S3_ETAG_MAX + 1];  /* without its quotes; "" when absent */
    char storage_class[32];      /* "" when absent */
};

struct s3_prefix {
    char prefix[S3_KEY_MAX + 1];
};

/* One page of ListObjectsV2 or ListObjects (v1).  objects and prefixes
 * are owned by the struct: s3xml_list_release() frees them. */
struct s3_list {
    struct s3_object *objects;
    size_t n_objects;
    struct s3_prefix *prefixes;  /* <CommonPrefixes><Prefix> */
    size_t n_prefixes;
    bool truncated;              /* <IsTruncated>true */
    bool url_encoded;            /* <EncodingType>url: keys and prefixes are
                                  * percent-encoded, left as sent */
    int64_t key_count;           /* <KeyCount>, -1 when absent (v1) */
    /* Where the next page starts when truncated, else both "".  v2: the
     * NextContinuationToken.  v1: NextMarker, or the last key when the
     * server sent none (as the S3 documentation says to do). */
    char next_token[S3_TOKEN_MAX + 1];
    char next_marker[S3_KEY_MAX + 1];
};

/* Parse an <Error> document.  Code is required, the other fields are ""
 * when absent; unknown elements (HostId, ...) are ignored. */
int s3xml_parse_error(const char *body, size_t len, struct s3_error *out, const char **ret_why);

/* Parse a <ListBucketResult> (ListObjectsV2 or v1).  IsTruncated is
 * required; each <Contents> needs Key, LastModified (RFC 3339) and Size (a
 * decimal uint64: digits only).  A truncated page must say where the next
 * one starts.  On success *out is filled and owned by the caller (release
 * it with s3xml_list_release()); on failure it is untouched.  At most
 * 10000 entries (objects and prefixes) per page. */
int s3xml_parse_list(const char *body, size_t len, struct s3_list *out, const char **ret_why);

/* Free what a successful s3xml_parse_list() allocated and zero *list.
 * NULL is fine, and so is a zeroed struct. */
void s3xml_list_release(struct s3_list *list);

/* Parse an <InitiateMultipartUploadResult>: its UploadId (printable ASCII,
 * no spaces) into upload_id, which must hold it whole. */
int s3xml_parse_initiate_multipart(const char *body, size_t len, char *upload_id, size_t size,
                                   const char **ret_why);

/* Parse the answer to CompleteMultipartUpload: a
 * <CompleteMultipartUploadResult> gives 0 with its ETag (without quotes,
 * printable, whole) in etag.  S3 may answer 200 and then an <Error>
 * document (the upload failed after the status line was sent): that gives
 * -EREMOTEIO with *ret_err filled (when ret_err is not NULL).  Anything
 * else is -EINVAL. */
int s3xml_parse_complete_multipart(const char *body, size_t len, char *etag, size_t etag_size,
                                   struct s3_error *ret_err, const char **ret_why);

/* Escape the terminated string in for XML character data (request bodies:
 * CompleteMultipartUpload part lists, DeleteObjects keys): & < > " ' and
 * CR, TAB and LF become references, so the server reads back exactly in.
 * Returns the length written to out (terminated), -ENOSPC when it does not
 * fit in size bytes (out is then "" when size > 0), or -EINVAL when in is
 * not UTF-8 or holds a character XML 1.0 cannot carry (control
 * characters, U+FFFE, U+FFFF). */
int s3xml_escape(const char *in, char *out, size_t size);

#endif
