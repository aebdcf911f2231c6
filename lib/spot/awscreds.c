/* awscreds: the credentials file is read line by line into a local
 * struct; only when the whole file was good is it copied out.  Every copy
 * of a secret this module makes (the local struct, the terminated copy of
 * a JSON body, cJSON's strings) is wiped before it is freed or goes out of
 * scope.
 *
 * The file format follows what the AWS SDKs document for the shared files
 * and what botocore (Python's configparser) reads, with two choices where
 * they differ: configparser refuses a section or a key given twice, the
 * SDKs merge sections and keep the last value; we merge.  configparser
 * joins indented lines to the value above; a credential cannot span lines,
 * so an indented line under a credential key is garbage, and under any
 * other key it is ignored (the config file's nested "s3 =" settings). */
#include "spot/awscreds.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "spot/strict.h"
#include "spot/timeparse.h"

enum cred_key { KEY_NONE, KEY_ID, KEY_SECRET, KEY_TOKEN, KEY_OTHER };

static int fail(const char **ret_why, int err, const char *why)
{
    if (ret_why)
        *ret_why = why;
    return err;
}

void awscreds_wipe(struct aws_creds *c)
{
    if (c)
        explicit_bzero(c, sizeof(*c));
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Printable ASCII without spaces: what access keys, secrets and tokens
 * are made of (Swift's tempauth keys hold ':'). */
static bool is_token(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return false;
    return true;
}

/* Store a credential value; an empty one clears the field. */
static int set_value(char *dst, size_t size, const char *s, size_t len, const char **ret_why)
{
    if (len >= size)
        return fail(ret_why, -EINVAL, "a credential value is too long");
    if (!is_token(s, len))
        return fail(ret_why, -EINVAL,
                    "a credential value holds a space or a non-ASCII byte (inline comment?)");
    memcpy(dst, s, len);
    dst[len] = '\0';
    return 0;
}

static enum cred_key key_kind(const char *k, size_t len)
{
    if (strict_ascii_case_equal(k, len, "aws_access_key_id"))
        return KEY_ID;
    if (strict_ascii_case_equal(k, len, "aws_secret_access_key"))
        return KEY_SECRET;
    /* aws_security_token: the name boto 2 used, still read by botocore. */
    if (strict_ascii_case_equal(k, len, "aws_session_token") ||
        strict_ascii_case_equal(k, len, "aws_security_token"))
        return KEY_TOKEN;
    return KEY_OTHER;
}

struct ini {
    const char *profile;
    bool in_section;           /* a section header was seen */
    bool in_profile;           /* the current section is the profile */
    bool found;                /* the profile has a section */
    enum cred_key last;        /* the key above in this section, for
                                * continuation lines; KEY_NONE after a header */
    struct aws_creds c;
};

/* One line without its end, s..e. */
static int parse_line(struct ini *st, const char *s, const char *e, const char **ret_why)
{
    bool indented = s < e && is_blank(*s);
    const char *k, *ke, *v;
    enum cred_key kind;

    for (const char *q = s; q < e; q++)
        if (((unsigned char)*q < 0x20 && *q != '\t') || *q == 0x7f)
            return fail(ret_why, -EINVAL, "a line holds a control character");
    while (s < e && is_blank(*s))
        s++;
    while (e > s && is_blank(e[-1]))
        e--;
    if (s == e || *s == '#' || *s == ';')
        return 0;
    if (indented && st->last != KEY_NONE) {
        if (*s == '[')
            return fail(ret_why, -EINVAL, "an indented section header");
        if (st->last != KEY_OTHER)
            return fail(ret_why, -EINVAL, "an indented line continues a credential value");
        return 0;
    }
    if (*s == '[') {
        const char *close = memchr(s, ']', (size_t)(e - s)), *n = s + 1, *ne;

        if (!close)
            return fail(ret_why, -EINVAL, "a section header without ']'");
        for (const char *q = close + 1; q < e; q++) {
            if (*q == '#' || *q == ';')
                break;
            if (!is_blank(*q))
                return fail(ret_why, -EINVAL, "text after a section header");
        }
        ne = close;
        while (n < ne && is_blank(*n))
            n++;
        while (ne > n && is_blank(ne[-1]))
            ne--;
        if (n == ne)
            return fail(ret_why, -EINVAL, "an empty section name");
        st->in_section = true;
        st->in_profile = strlen(st->profile) == (size_t)(ne - n) &&
                         memcmp(st->profile, n, (size_t)(ne - n)) == 0;
        st->found = st->found || st->in_profile;
        st->last = KEY_NONE;
        return 0;
    }
    for (v = s; v < e && *v != '=' && *v != ':'; v++)
        ;
    if (v == e)
        return fail(ret_why, -EINVAL, "a line is not a section, a key = value, or a comment");
    if (!st->in_section)
        return fail(ret_why, -EINVAL, "a key before any [profile] section");
    k = s;
    ke = v++;
    while (ke > k && is_blank(ke[-1]))
        ke--;
    if (k == ke)
        return fail(ret_why, -EINVAL, "a line has a value but no key");
    while (v < e && is_blank(*v))
        v++;
    kind = key_kind(k, (size_t)(ke - k));
    st->last = st->in_profile ? kind : KEY_OTHER;
    if (!st->in_profile)
        return 0;
    switch (kind) {
    case KEY_ID:
        return set_value(st->c.access_key_id, sizeof(st->c.access_key_id), v, (size_t)(e - v),
                         ret_why);
    case KEY_SECRET:
        return set_value(st->c.secret_access_key, sizeof(st->c.secret_access_key), v,
                         (size_t)(e - v), ret_why);
    case KEY_TOKEN:
        return set_value(st->c.session_token, sizeof(st->c.session_token), v, (size_t)(e - v),
                         ret_why);
    default:
        return 0;
    }
}

int awscreds_parse(const char *text, size_t len, const char *profile, struct aws_creds *out,
                   const char **ret_why)
{
    const char *p, *end;
    struct ini st;
    int r = 0;

    if (!profile)
        profile = "default";
    if (!*profile || strlen(profile) > AWS_PROFILE_MAX)
        return fail(ret_why, -EINVAL, "profile name empty or longer than 128 bytes");
    if (!text)
        len = 0;
    if (len > AWSCREDS_MAX_FILE)
        return fail(ret_why, -EINVAL, "credentials file larger than 1 MiB");
    if (len > 0 && memchr(text, '\0', len))
        return fail(ret_why, -EINVAL, "credentials file holds a NUL byte");
    memset(&st, 0, sizeof(st));
    st.profile = profile;
    p = text;
    end = text + len;
    if (len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
        p += 3;
    while (p < end && r == 0) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *e = nl ? nl : end;

        if (e > p && e[-1] == '\r')
            e--;
        r = parse_line(&st, p, e, ret_why);
        p = nl ? nl + 1 : end;
    }
    if (r == 0 && !st.found)
        r = fail(ret_why, -ENOENT, "profile not found in the credentials file");
    if (r == 0 && (!st.c.access_key_id[0] || !st.c.secret_access_key[0]))
        r = fail(ret_why, -ENOENT, "profile lacks aws_access_key_id or aws_secret_access_key");
    if (r == 0)
        *out = st.c;
    explicit_bzero(&st, sizeof(st));
    return r;
}

/* Wipe the strings of the top-level members before the tree goes. */
static void json_wipe_delete(cJSON *root)
{
    cJSON *it;

    cJSON_ArrayForEach(it, root)
        if (cJSON_IsString(it) && it->valuestring)
            explicit_bzero(it->valuestring, strlen(it->valuestring));
    cJSON_Delete(root);
}

static int imds_fields(const cJSON *root, struct aws_creds *c, const char **ret_why)
{
    const char *code, *type, *updated, *id, *secret, *token, *exp;
    int r;

    if ((r = strict_json_member_string(root, "Code", true, &code, "Code missing or not a string",
                                       ret_why)) ||
        (r = strict_json_member_string(root, "Type", false, &type, "Type is not a string",
                                       ret_why)) ||
        (r = strict_json_member_string(root, "LastUpdated", false, &updated,
                                       "LastUpdated is not a string", ret_why)) ||
        (r = strict_json_member_string(root, "AccessKeyId", true, &id,
                                       "AccessKeyId missing or not a string", ret_why)) ||
        (r = strict_json_member_string(root, "SecretAccessKey", true, &secret,
                                       "SecretAccessKey missing or not a string", ret_why)) ||
        (r = strict_json_member_string(root, "Token", true, &token, "Token missing or not a string",
                                       ret_why)) ||
        (r = strict_json_member_string(root, "Expiration", true, &exp,
                                       "Expiration missing or not a string", ret_why)))
        return r;
    if (strcmp(code, "Success") != 0)
        return fail(ret_why, -EINVAL, "instance role credentials not ready (Code is not Success)");
    if (type && strcmp(type, "AWS-HMAC") != 0)
        return fail(ret_why, -EINVAL, "Type is not AWS-HMAC");
    if (!*id || !*secret || !*token)
        return fail(ret_why, -EINVAL, "an empty AccessKeyId, SecretAccessKey or Token");
    if ((r = set_value(c->access_key_id, sizeof(c->access_key_id), id, strlen(id), ret_why)) ||
        (r = set_value(c->secret_access_key, sizeof(c->secret_access_key), secret, strlen(secret),
                       ret_why)) ||
        (r = set_value(c->session_token, sizeof(c->session_token), token, strlen(token),
                       ret_why)))
        return r;
    if (time_parse_rfc3339(exp, strlen(exp), &c->expiration_ms) < 0)
        return fail(ret_why, -EINVAL, "Expiration is not an RFC 3339 time");
    return 0;
}

int awscreds_parse_imds(const char *body, size_t len, struct aws_creds *out,
                        const char **ret_why)
{
    const char *end = NULL;
    struct aws_creds c;
    cJSON *root;
    char *copy;
    int r;

    if (!body)
        len = 0;
    if (len > AWSCREDS_MAX_JSON)
        return fail(ret_why, -EINVAL, "body larger than 64 KiB");
    if (len > 0 && memchr(body, '\0', len))
        return fail(ret_why, -EINVAL, "body holds a NUL byte");
    while (len > 0 && (body[len - 1] == ' ' || body[len - 1] == '\t' || body[len - 1] == '\r' ||
                       body[len - 1] == '\n'))
        len--;
    if (len == 0)
        return fail(ret_why, -EINVAL, "empty body");
    if (strict_json_has_escaped_nul(body, len))
        return fail(ret_why, -EINVAL, "JSON holds an escaped NUL (\\u0000)");
    /* A terminated copy, so no cJSON version reads past the caller's bytes. */
    copy = malloc(len + 1);
    if (!copy)
        return fail(ret_why, -ENOMEM, "out of memory");
    memcpy(copy, body, len);
    copy[len] = '\0';
    root = cJSON_ParseWithLengthOpts(copy, len, &end, false);
    if (root && end != copy + len)
        r = fail(ret_why, -EINVAL, "text after the JSON value");
    else if (!root)
        r = fail(ret_why, -EINVAL, "not valid JSON");
    else if (!cJSON_IsObject(root))
        r = fail(ret_why, -EINVAL, "not a JSON object");
    else
        r = 0;
    explicit_bzero(copy, len);
    free(copy);
    memset(&c, 0, sizeof(c));
    if (r == 0)
        r = imds_fields(root, &c, ret_why);
    if (root)
        json_wipe_delete(root);
    if (r == 0)
        *out = c;
    awscreds_wipe(&c);
    return r;
}
