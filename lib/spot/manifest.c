/* manifest: node manifests and commit records, written and parsed. */
#include "spot/manifest.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "spot/strict.h"
#include "spot/timeparse.h"

/* Integers travel as JSON numbers, which cJSON holds as doubles: every
 * value must stay below 2^53 to come back exact. */
#define JSON_INT_MAX 9007199254740991.0

static const char *const type_name[] = { "file", "dir", "symlink" };

bool manifest_path_valid(const char *path)
{
    size_t len = strlen(path), comp = 0;

    if (len == 0 || len > MANIFEST_PATH_MAX || path[0] == '/')
        return false;
    for (size_t i = 0; i <= len; i++) {
        unsigned char c = (unsigned char)path[i];

        if (c == '/' || c == '\0') {
            if (comp == 0 || comp > MANIFEST_COMPONENT_MAX || (comp == 1 && path[i - 1] == '.') ||
                (comp == 2 && path[i - 1] == '.' && path[i - 2] == '.'))
                return false;
            comp = 0;
            continue;
        }
        if (c < 0x20 || c == 0x7f)
            return false;
        comp++;
    }
    return true;
}

bool manifest_link_inside(const char *path, const char *target)
{
    size_t depth = 0;
    bool named = false;

    for (const char *p = path; *p; p++)
        depth += *p == '/';
    if (!*target || *target == '/')
        return false;
    while (*target) {
        size_t n = strcspn(target, "/");

        if (n == 2 && target[0] == '.' && target[1] == '.') {
            /* Up from a name would climb from wherever that name leads. */
            if (named || depth == 0)
                return false;
            depth--;
        } else if (n > 1 || (n == 1 && target[0] != '.')) {
            named = true;
        }
        target += n;
        target += *target == '/';
    }
    return true;
}

int manifest_bytes(const struct manifest *m, uint64_t *ret)
{
    uint64_t total = 0;

    for (size_t i = 0; i < m->n_files; i++) {
        if (m->files[i].type != MF_FILE)
            continue;
        if (m->files[i].size > UINT64_MAX - total)
            return -EOVERFLOW;
        total += m->files[i].size;
    }
    *ret = total;
    return 0;
}

/* The length of the UTF-8 character at p when it may be printed as it
 * is; 0 when its first byte must be escaped. */
static size_t printable_len(const unsigned char *p)
{
    uint32_t cp;
    size_t n;

    if (p[0] < 0x80)
        return p[0] >= 0x20 && p[0] != 0x7f && p[0] != '\\';
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        n = 2, cp = p[0] & 0x1f;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        n = 3, cp = p[0] & 0x0f;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        n = 4, cp = p[0] & 0x07;
    else
        return 0;
    /* The terminating NUL is no continuation byte: no read past it. */
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;                 /* overlong, out of range, a surrogate */
    if (cp <= 0x9f || cp == 0x061c || cp == 0x200e || cp == 0x200f ||
        (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069))
        return 0;                 /* C1 controls; line breaks, direction marks */
    return n;
}

/* The printed form of the character or byte at p into esc (or p itself):
 * its length in *ret_n; returns the bytes of s it stands for. */
static size_t escape_piece(const unsigned char *p, char esc[8], const char **ret_piece,
                           size_t *ret_n)
{
    size_t in = printable_len(p);

    if (in) {
        *ret_piece = (const char *)p;
        *ret_n = in;
        return in;
    }
    *ret_piece = esc;
    *ret_n = (size_t)(*p == '\\' ? snprintf(esc, 8, "\\\\") : snprintf(esc, 8, "\\x%02x", *p));
    return 1;
}

const char *manifest_escape(const char *s, char *buf, size_t size)
{
    const unsigned char *p;
    const char *piece;
    char esc[8];
    size_t o = 0, n, total = 0;
    bool cut;

    for (p = (const unsigned char *)s; *p; total += n)
        p += escape_piece(p, esc, &piece, &n);
    /* When it must be cut, o + 4 <= size after each piece: "..." and the
     * NUL always fit. */
    cut = total + 1 > size;
    for (p = (const unsigned char *)s; *p;) {
        size_t in = escape_piece(p, esc, &piece, &n);

        if (cut && o + n + 4 > size) {
            memcpy(buf + o, "...", 4);
            return buf;
        }
        memcpy(buf + o, piece, n);
        o += n;
        p += in;
    }
    buf[o] = '\0';
    return buf;
}

bool manifest_job_valid(const char *job)
{
    size_t len = strlen(job);

    if (len == 0 || len > MANIFEST_NAME_MAX || strcmp(job, ".") == 0 || strcmp(job, "..") == 0)
        return false;
    return strspn(job, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == len;
}

void manifest_key(char *buf, size_t size, const char *job, uint64_t gen, uint32_t rank)
{
    snprintf(buf, size, "%s/gens/%08llu/rank-%u.json", job, (unsigned long long)gen, rank);
}

void commit_key(char *buf, size_t size, const char *job, uint64_t gen)
{
    snprintf(buf, size, "%s/gens/%08llu/COMMIT.json", job, (unsigned long long)gen);
}

/* ---- writing -------------------------------------------------------------- */

static void format_time(char *buf, size_t size, int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    gmtime_r(&t, &tm);
    snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

/* cJSON's adders return NULL when out of memory; one flag collects them. */
struct builder {
    bool oom;
};

static void add_num(struct builder *b, cJSON *o, const char *k, double v)
{
    if (!cJSON_AddNumberToObject(o, k, v))
        b->oom = true;
}

static void add_str(struct builder *b, cJSON *o, const char *k, const char *v)
{
    if (!cJSON_AddStringToObject(o, k, v))
        b->oom = true;
}

static void add_head(struct builder *b, cJSON *o, const char *kind, const char *job, uint64_t gen,
                     int64_t created_ms, const char *version)
{
    char when[64];

    format_time(when, sizeof(when), created_ms);
    add_num(b, o, "format", STORE_FORMAT);
    add_str(b, o, "kind", kind);
    add_str(b, o, "job", job);
    add_num(b, o, "gen", (double)gen);
    add_str(b, o, "created", when);
    add_str(b, o, "spotd", version);
}

static char *finish_json(struct builder *b, cJSON *root, size_t *ret_len)
{
    char *text = b->oom ? NULL : cJSON_PrintUnformatted(root);

    cJSON_Delete(root);
    if (text && ret_len)
        *ret_len = strlen(text);
    return text;
}

char *manifest_to_json(const struct manifest *m, size_t *ret_len)
{
    struct builder b = { false };
    cJSON *root = cJSON_CreateObject(), *files;

    if (!root)
        return NULL;
    add_head(&b, root, "manifest", m->job, m->gen, m->created_ms, m->version);
    add_num(&b, root, "rank", m->rank);
    add_num(&b, root, "step", (double)m->step);
    add_str(&b, root, "method", m->method);
    add_num(&b, root, "chunk_size", m->chunk_size);
    files = cJSON_AddArrayToObject(root, "files");
    if (!files)
        b.oom = true;
    for (size_t i = 0; i < m->n_files && !b.oom; i++) {
        const struct mf_file *f = &m->files[i];
        cJSON *o = cJSON_CreateObject(), *chunks;

        if (!o || !cJSON_AddItemToArray(files, o)) {
            cJSON_Delete(o);
            b.oom = true;
            break;
        }
        add_str(&b, o, "path", f->path);
        add_str(&b, o, "type", type_name[f->type]);
        add_num(&b, o, "mode", f->mode);
        add_num(&b, o, "mtime", (double)f->mtime_s);
        add_num(&b, o, "mtime_ns", f->mtime_ns);
        if (f->type == MF_SYMLINK)
            add_str(&b, o, "target", f->target);
        if (f->type != MF_FILE)
            continue;
        add_num(&b, o, "size", (double)f->size);
        /* [length, "sha256"] per stored chunk, [length] per run of zeros. */
        chunks = cJSON_AddArrayToObject(o, "chunks");
        if (!chunks)
            b.oom = true;
        for (size_t c = 0; c < f->n_chunks && !b.oom; c++) {
            cJSON *a = cJSON_CreateArray(), *n = cJSON_CreateNumber(f->chunks[c].len);
            char hex[2 * CHUNK_HASH_LEN + 1];

            if (!a || !n || !cJSON_AddItemToArray(chunks, a) || !cJSON_AddItemToArray(a, n)) {
                b.oom = true;
                break;
            }
            if (f->chunks[c].zero)
                continue;
            hash_hex(f->chunks[c].hash, hex);
            if (!cJSON_AddItemToArray(a, cJSON_CreateString(hex)))
                b.oom = true;
        }
    }
    return finish_json(&b, root, ret_len);
}

char *commit_to_json(const struct commit *c, size_t *ret_len)
{
    struct builder b = { false };
    cJSON *root = cJSON_CreateObject(), *ranks;

    if (!root)
        return NULL;
    add_head(&b, root, "commit", c->job, c->gen, c->created_ms, c->version);
    add_num(&b, root, "step", (double)c->step);
    add_num(&b, root, "world_size", c->world_size);
    add_str(&b, root, "reason", c->reason);
    add_str(&b, root, "method", c->method);
    ranks = cJSON_AddArrayToObject(root, "ranks");
    if (!ranks)
        b.oom = true;
    for (uint32_t i = 0; i < c->world_size && !b.oom; i++) {
        cJSON *o = cJSON_CreateObject();
        char hex[2 * CHUNK_HASH_LEN + 1];

        if (!o || !cJSON_AddItemToArray(ranks, o)) {
            cJSON_Delete(o);
            b.oom = true;
            break;
        }
        hash_hex(c->ranks[i].sha256, hex);
        add_num(&b, o, "rank", c->ranks[i].rank);
        add_str(&b, o, "sha256", hex);
        add_num(&b, o, "bytes", (double)c->ranks[i].bytes);
    }
    if (c->has_mac) {
        char hex[2 * CHUNK_HASH_LEN + 1];

        hash_hex(c->mac, hex);
        add_str(&b, root, "mac_alg", c->mac_alg);
        add_str(&b, root, "key_id", c->key_id);
        add_str(&b, root, "mac", hex);
    }
    return finish_json(&b, root, ret_len);
}

/* ---- canonical bytes ------------------------------------------------------ */

#define CANON_TAG "spotd commit v1"   /* and its NUL: 16 bytes */

struct canon {
    uint8_t *p;
    size_t len;
};

static void put_be(struct canon *w, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v >>= 8)
        w->p[w->len + (size_t)i] = (uint8_t)v;
    w->len += (size_t)n;
}

static void put_bytes(struct canon *w, const void *data, size_t n)
{
    memcpy(w->p + w->len, data, n);
    w->len += n;
}

static void put_str(struct canon *w, const char *s)
{
    size_t n = strlen(s);

    put_be(w, n, 4);
    put_bytes(w, s, n);
}

uint8_t *commit_canonical(const struct commit *c, size_t *ret_len)
{
    const char *alg = c->has_mac ? c->mac_alg : "", *id = c->has_mac ? c->key_id : "";
    size_t size = sizeof(CANON_TAG) + 4 + 8 + 8 + 4 + 8 + 6 * 4 + strlen(c->job) +
                  strlen(c->reason) + strlen(c->method) + strlen(c->version) + strlen(alg) +
                  strlen(id) + (size_t)c->world_size * (4 + CHUNK_HASH_LEN + 8);
    struct canon w = { malloc(size), 0 };

    if (!w.p)
        return NULL;
    put_bytes(&w, CANON_TAG, sizeof(CANON_TAG));
    put_be(&w, STORE_FORMAT, 4);
    put_str(&w, c->job);
    put_be(&w, c->gen, 8);
    put_be(&w, c->step, 8);
    put_be(&w, c->world_size, 4);
    put_str(&w, c->reason);
    put_str(&w, c->method);
    put_be(&w, (uint64_t)c->created_ms, 8);
    put_str(&w, c->version);
    put_str(&w, alg);
    put_str(&w, id);
    for (uint32_t i = 0; i < c->world_size; i++) {
        put_be(&w, c->ranks[i].rank, 4);
        put_bytes(&w, c->ranks[i].sha256, CHUNK_HASH_LEN);
        put_be(&w, c->ranks[i].bytes, 8);
    }
    *ret_len = w.len;
    return w.p;
}

/* ---- reading -------------------------------------------------------------- */

static int garbage(const char **ret_why, const char *why)
{
    return strict_garbage(ret_why, why);
}

/* An integer member in [0, max]. */
static int get_uint(const cJSON *o, const char *k, bool required, double max, uint64_t *ret,
                    const char *why, const char **ret_why)
{
    const cJSON *v;
    int r = strict_json_member(o, k, &v, ret_why);

    if (r < 0)
        return r;
    if (!v) {
        if (required)
            return garbage(ret_why, why);
        *ret = 0;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble > max || v->valuedouble != floor(v->valuedouble))
        return garbage(ret_why, why);
    *ret = (uint64_t)v->valuedouble;
    return 0;
}

/* A string member copied into buf (size bytes, fits whole, printable). */
static int get_name(const cJSON *o, const char *k, char *buf, size_t size, const char *why,
                    const char **ret_why)
{
    const char *s;
    int r = strict_json_member_string(o, k, true, &s, why, ret_why);
    size_t len;

    if (r < 0)
        return r;
    len = strlen(s);
    if (len >= size)
        return garbage(ret_why, why);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return garbage(ret_why, why);
    memcpy(buf, s, len + 1);
    return 0;
}

/* Parse the text into a cJSON tree and check the fields every document
 * shares.  Returns the root or NULL with *err set. */
static cJSON *parse_head(const char *text, size_t len, const char *kind, char *job,
                         uint64_t *gen, int64_t *created_ms, char *version, int *err,
                         const char **ret_why)
{
    cJSON *root;
    const char *s;
    uint64_t format;
    int r = -EINVAL;

    *err = -EINVAL;
    if (len > MANIFEST_MAX) {
        garbage(ret_why, "document too large");
        return NULL;
    }
    if (memchr(text, '\0', len) || strict_json_has_escaped_nul(text, len)) {
        garbage(ret_why, "NUL in the document");
        return NULL;
    }
    root = cJSON_ParseWithLength(text, len);
    if (!root) {
        garbage(ret_why, "not JSON");
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        garbage(ret_why, "not a JSON object");
        goto fail;
    }
    if ((r = get_uint(root, "format", true, JSON_INT_MAX, &format, "format missing or invalid",
                      ret_why)) < 0)
        goto fail;
    if (format != STORE_FORMAT) {
        if (format > STORE_FORMAT) {
            *err = -ENOTSUP;
            if (ret_why)
                *ret_why = "written in a newer store format: upgrade spotd";
        } else {
            garbage(ret_why, "unknown store format");
        }
        goto fail;
    }
    if ((r = strict_json_member_string(root, "kind", true, &s, "kind missing", ret_why)) < 0)
        goto fail;
    if (strcmp(s, kind) != 0) {
        garbage(ret_why, "wrong kind of document");
        goto fail;
    }
    if ((r = get_name(root, "job", job, MANIFEST_NAME_MAX + 1, "job missing or invalid",
                      ret_why)) < 0)
        goto fail;
    if (!manifest_job_valid(job)) {
        garbage(ret_why, "job missing or invalid");
        goto fail;
    }
    if ((r = get_uint(root, "gen", true, (double)GEN_MAX, gen, "gen missing or invalid",
                      ret_why)) < 0)
        goto fail;
    if ((r = strict_json_member_string(root, "created", true, &s, "created missing",
                                       ret_why)) < 0)
        goto fail;
    if (time_parse_rfc3339(s, strlen(s), created_ms) < 0) {
        garbage(ret_why, "created is not an RFC 3339 time");
        goto fail;
    }
    if ((r = get_name(root, "spotd", version, 32, "spotd version missing or invalid",
                      ret_why)) < 0)
        goto fail;
    return root;

fail:
    if (r == -ENOMEM)
        *err = -ENOMEM;
    cJSON_Delete(root);
    return NULL;
}

static int parse_chunks(const cJSON *arr, struct mf_file *f, uint32_t chunk_size,
                        const char **ret_why)
{
    size_t n = (size_t)cJSON_GetArraySize(arr), i = 0;
    uint64_t total = 0;
    const cJSON *a;

    if (n > 0 && !(f->chunks = calloc(n, sizeof(*f->chunks))))
        return -ENOMEM;
    cJSON_ArrayForEach(a, arr)
    {
        const cJSON *len = cJSON_GetArrayItem(a, 0), *hash = cJSON_GetArrayItem(a, 1);
        int items = cJSON_GetArraySize(a);
        struct mf_chunk *c = &f->chunks[i++];

        if (!cJSON_IsArray(a) || items < 1 || items > 2 || !cJSON_IsNumber(len) ||
            !isfinite(len->valuedouble) || len->valuedouble < 1 ||
            len->valuedouble > chunk_size || len->valuedouble != floor(len->valuedouble))
            return garbage(ret_why, "chunk entry invalid");
        c->len = (uint32_t)len->valuedouble;
        if (items == 1) {
            c->zero = true;
        } else if (!cJSON_IsString(hash) || hash_parse_hex(hash->valuestring, c->hash) < 0) {
            return garbage(ret_why, "chunk hash invalid");
        }
        total += c->len;
    }
    f->n_chunks = n;
    if (total != f->size)
        return garbage(ret_why, "chunks do not add up to the file's size");
    return 0;
}

static int parse_file(const cJSON *o, struct mf_file *f, uint32_t chunk_size,
                      const char **ret_why)
{
    const cJSON *chunks;
    const char *s;
    uint64_t v;
    int r;

    if (!cJSON_IsObject(o))
        return garbage(ret_why, "file entry is not an object");
    if ((r = strict_json_member_string(o, "path", true, &s, "path missing", ret_why)) < 0)
        return r;
    if (!manifest_path_valid(s))
        return garbage(ret_why, "path invalid (absolute, empty, '.', '..', a name over 255 "
                                "bytes, or control characters)");
    if (!(f->path = strdup(s)))
        return -ENOMEM;
    if ((r = strict_json_member_string(o, "type", true, &s, "type missing", ret_why)) < 0)
        return r;
    if (strcmp(s, "file") == 0)
        f->type = MF_FILE;
    else if (strcmp(s, "dir") == 0)
        f->type = MF_DIR;
    else if (strcmp(s, "symlink") == 0)
        f->type = MF_SYMLINK;
    else
        return garbage(ret_why, "unknown file type");
    if ((r = get_uint(o, "mode", true, 07777, &v, "mode missing or invalid", ret_why)) < 0)
        return r;
    f->mode = (uint32_t)v;
    if ((r = get_uint(o, "mtime", true, JSON_INT_MAX, &v, "mtime missing or invalid", ret_why)) <
        0)
        return r;
    f->mtime_s = (int64_t)v;
    if ((r = get_uint(o, "mtime_ns", false, 999999999, &v, "mtime_ns invalid", ret_why)) < 0)
        return r;
    f->mtime_ns = (uint32_t)v;
    if (f->type == MF_SYMLINK) {
        if ((r = strict_json_member_string(o, "target", true, &s, "symlink target missing",
                                           ret_why)) < 0)
            return r;
        if (!*s || strlen(s) > MANIFEST_PATH_MAX)
            return garbage(ret_why, "symlink target invalid");
        if (!(f->target = strdup(s)))
            return -ENOMEM;
    }
    if (f->type != MF_FILE)
        return 0;
    if ((r = get_uint(o, "size", true, JSON_INT_MAX, &f->size, "size missing or invalid",
                      ret_why)) < 0)
        return r;
    if ((r = strict_json_member(o, "chunks", &chunks, ret_why)) < 0)
        return r;
    if (!cJSON_IsArray(chunks))
        return garbage(ret_why, "chunks missing or not an array");
    return parse_chunks(chunks, f, chunk_size, ret_why);
}

static void files_release(struct mf_file *files, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(files[i].path);
        free(files[i].target);
        free(files[i].chunks);
    }
    free(files);
}

static int cmp_path(const void *a, const void *b)
{
    return strcmp(((const struct mf_file *)a)->path, ((const struct mf_file *)b)->path);
}

int manifest_parse(const char *text, size_t len, struct manifest *out, const char **ret_why)
{
    struct manifest m;
    const cJSON *files, *o;
    cJSON *root;
    uint64_t v;
    size_t n, i = 0;
    int r;

    memset(&m, 0, sizeof(m));
    root = parse_head(text, len, "manifest", m.job, &m.gen, &m.created_ms, m.version, &r,
                      ret_why);
    if (!root)
        return r;
    if ((r = get_uint(root, "rank", true, WORLD_MAX - 1, &v, "rank missing or invalid",
                      ret_why)) < 0)
        goto out;
    m.rank = (uint32_t)v;
    if ((r = get_uint(root, "step", true, JSON_INT_MAX, &m.step, "step missing or invalid",
                      ret_why)) < 0)
        goto out;
    if ((r = get_name(root, "method", m.method, sizeof(m.method), "method missing or invalid",
                      ret_why)) < 0)
        goto out;
    if ((r = get_uint(root, "chunk_size", true, CHUNK_MAX_PLAIN, &v,
                      "chunk_size missing or invalid", ret_why)) < 0)
        goto out;
    if (v == 0) {
        r = garbage(ret_why, "chunk_size missing or invalid");
        goto out;
    }
    m.chunk_size = (uint32_t)v;
    if ((r = strict_json_member(root, "files", &files, ret_why)) < 0)
        goto out;
    if (!cJSON_IsArray(files)) {
        r = garbage(ret_why, "files missing or not an array");
        goto out;
    }
    n = (size_t)cJSON_GetArraySize(files);
    if (n > 0 && !(m.files = calloc(n, sizeof(*m.files)))) {
        r = -ENOMEM;
        goto out;
    }
    m.n_files = n;
    cJSON_ArrayForEach(o, files)
    {
        if ((r = parse_file(o, &m.files[i++], m.chunk_size, ret_why)) < 0)
            goto out;
    }
    if (m.n_files > 1)
        qsort(m.files, m.n_files, sizeof(*m.files), cmp_path);
    for (i = 1; i < m.n_files; i++)
        if (strcmp(m.files[i - 1].path, m.files[i].path) == 0) {
            r = garbage(ret_why, "a path is listed twice");
            goto out;
        }
    cJSON_Delete(root);
    *out = m;
    return 0;

out:
    cJSON_Delete(root);
    files_release(m.files, m.n_files);
    return r;
}

/* "mac_alg", "key_id", "mac": all three or none. */
static int parse_mac(const cJSON *root, struct commit *c, const char **ret_why)
{
    const cJSON *alg, *id, *mac;
    int r;

    if ((r = strict_json_member(root, "mac_alg", &alg, ret_why)) < 0 ||
        (r = strict_json_member(root, "key_id", &id, ret_why)) < 0 ||
        (r = strict_json_member(root, "mac", &mac, ret_why)) < 0)
        return r;
    if (!alg && !id && !mac)
        return 0;
    if (!alg || !id || !mac)
        return garbage(ret_why, "mac_alg, key_id and mac go together");
    if ((r = get_name(root, "mac_alg", c->mac_alg, sizeof(c->mac_alg), "mac_alg invalid",
                      ret_why)) < 0 ||
        (r = get_name(root, "key_id", c->key_id, sizeof(c->key_id), "key_id invalid",
                      ret_why)) < 0)
        return r;
    if (!*c->mac_alg)
        return garbage(ret_why, "mac_alg invalid");
    if (strlen(c->key_id) != COMMIT_KEY_ID_LEN ||
        strspn(c->key_id, "0123456789abcdef") != COMMIT_KEY_ID_LEN)
        return garbage(ret_why, "key_id invalid");
    if (!cJSON_IsString(mac) || hash_parse_hex(mac->valuestring, c->mac) < 0)
        return garbage(ret_why, "mac invalid");
    c->has_mac = true;
    return 0;
}

int commit_parse(const char *text, size_t len, struct commit *out, const char **ret_why)
{
    struct commit c;
    const cJSON *ranks, *o;
    cJSON *root;
    uint64_t v;
    int r;

    memset(&c, 0, sizeof(c));
    root = parse_head(text, len, "commit", c.job, &c.gen, &c.created_ms, c.version, &r, ret_why);
    if (!root)
        return r;
    if ((r = get_uint(root, "step", true, JSON_INT_MAX, &c.step, "step missing or invalid",
                      ret_why)) < 0)
        goto out;
    if ((r = get_uint(root, "world_size", true, WORLD_MAX, &v, "world_size missing or invalid",
                      ret_why)) < 0)
        goto out;
    if (v == 0) {
        r = garbage(ret_why, "world_size missing or invalid");
        goto out;
    }
    c.world_size = (uint32_t)v;
    if ((r = get_name(root, "reason", c.reason, sizeof(c.reason), "reason missing or invalid",
                      ret_why)) < 0 ||
        (r = get_name(root, "method", c.method, sizeof(c.method), "method missing or invalid",
                      ret_why)) < 0)
        goto out;
    if ((r = strict_json_member(root, "ranks", &ranks, ret_why)) < 0)
        goto out;
    if (!cJSON_IsArray(ranks) || cJSON_GetArraySize(ranks) != (int)c.world_size) {
        r = garbage(ret_why, "ranks must list world_size entries");
        goto out;
    }
    if (!(c.ranks = calloc(c.world_size, sizeof(*c.ranks)))) {
        r = -ENOMEM;
        goto out;
    }
    cJSON_ArrayForEach(o, ranks)
    {
        const char *hex;
        uint64_t rank, bytes;

        if (!cJSON_IsObject(o)) {
            r = garbage(ret_why, "rank entry is not an object");
            goto out;
        }
        if ((r = get_uint(o, "rank", true, c.world_size - 1, &rank, "rank entry invalid",
                          ret_why)) < 0 ||
            (r = get_uint(o, "bytes", true, JSON_INT_MAX, &bytes, "rank bytes invalid",
                          ret_why)) < 0 ||
            (r = strict_json_member_string(o, "sha256", true, &hex, "rank sha256 missing",
                                           ret_why)) < 0)
            goto out;
        if (hash_parse_hex(hex, c.ranks[rank].sha256) < 0) {
            r = garbage(ret_why, "rank sha256 invalid");
            goto out;
        }
        if (c.ranks[rank].rank == UINT32_MAX) {
            r = garbage(ret_why, "a rank is listed twice");
            goto out;
        }
        /* Marked as seen: world_size entries, each rank once, so every
         * rank is there.  The marks become the ranks below. */
        c.ranks[rank].rank = UINT32_MAX;
        c.ranks[rank].bytes = bytes;
    }
    for (uint32_t i = 0; i < c.world_size; i++)
        c.ranks[i].rank = i;
    if ((r = parse_mac(root, &c, ret_why)) < 0)
        goto out;
    cJSON_Delete(root);
    *out = c;
    return 0;

out:
    cJSON_Delete(root);
    free(c.ranks);
    return r;
}

void manifest_release(struct manifest *m)
{
    if (!m)
        return;
    files_release(m->files, m->n_files);
    memset(m, 0, sizeof(*m));
}

void commit_release(struct commit *c)
{
    if (!c)
        return;
    free(c->ranks);
    memset(c, 0, sizeof(*c));
}
