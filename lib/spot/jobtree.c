/* jobtree: the store format's own names below a job (see jobtree.h).  A
 * pure parser: no I/O, so unit tests and the fuzzer call it directly. */
#include "spot/jobtree.h"

#include <stdbool.h>
#include <string.h>

#include "spot/manifest.h"

/* Exactly n lowercase hex digits at p, then end; into out when not NULL. */
static bool hex_run(const char *p, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        unsigned v;

        if (ch >= '0' && ch <= '9')
            v = (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            v = (unsigned)(ch - 'a' + 10);
        else
            return false;
        if (out && i % 2 == 0)
            out[i / 2] = (uint8_t)(v << 4);
        else if (out)
            out[i / 2] |= (uint8_t)v;
    }
    return true;
}

/* "<prefix><16 hex>.json" (a writer id) or, with n_max > 16, 16 to n_max. */
static bool hex_json(const char *name, const char *prefix, size_t n_min, size_t n_max)
{
    size_t pl = strlen(prefix), len = strlen(name), n;

    if (strncmp(name, prefix, pl) != 0 || len < pl + 5 || strcmp(name + len - 5, ".json") != 0)
        return false;
    n = len - pl - 5;
    return n >= n_min && n <= n_max && hex_run(name + pl, n, NULL);
}

/* "<prefix><r>.json", r in decimal without leading zeros, below max. */
static bool num_json(const char *name, const char *prefix, uint32_t max, uint32_t *ret)
{
    size_t pl = strlen(prefix);
    const char *p = name + pl;
    uint64_t r = 0;

    if (strncmp(name, prefix, pl) != 0 || *p < '0' || *p > '9' || (*p == '0' && p[1] != '.'))
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        r = r * 10 + (uint64_t)(*p - '0');
        if (r >= max)
            return false;
    }
    if (strcmp(p, ".json") != 0)
        return false;
    *ret = (uint32_t)r;
    return true;
}

/* "<8 digits>/<name>" below gens/. */
static enum jobtree_kind gen_name(const char *p, struct jobtree_name *n)
{
    uint64_t g = 0;

    for (int i = 0; i < 8; i++) {
        if (p[i] < '0' || p[i] > '9')
            return JOBTREE_FOREIGN;
        g = g * 10 + (uint64_t)(p[i] - '0');
    }
    if (g == 0 || g > GEN_MAX || p[8] != '/')
        return JOBTREE_FOREIGN;
    n->gen = g;
    p += 9;
    if (strcmp(p, "COMMIT.json") == 0)
        return JOBTREE_COMMIT;
    if (strcmp(p, "CLAIM.json") == 0)
        return JOBTREE_CLAIM;
    if (num_json(p, "rank-", WORLD_MAX, &n->rank))
        return JOBTREE_MANIFEST;
    if (hex_json(p, "claim-", 16, 16))
        return JOBTREE_WRITER_CLAIM;
    return JOBTREE_FOREIGN;
}

static enum jobtree_kind world_name(const char *p)
{
    uint32_t rank;

    if (num_json(p, "rank-", WORLD_MAX, &rank) || hex_json(p, "join-", 16, 64) ||
        hex_json(p, "assign-", 16, 64))
        return JOBTREE_WORLD;
    return JOBTREE_FOREIGN;
}

static enum jobtree_kind classify(const char *job, const char *key, struct jobtree_name *n)
{
    size_t jl = strlen(job);
    const char *p = key + jl + 1;

    if (jl == 0 || strncmp(key, job, jl) != 0 || key[jl] != '/')
        return JOBTREE_FOREIGN;
    if (strcmp(p, "LATEST") == 0)
        return JOBTREE_LATEST;
    if (strncmp(p, "chunks/", 7) == 0) {
        p += 7;
        if (strlen(p) != 3 + 2 * CHUNK_HASH_LEN || p[2] != '/' || strncmp(p, p + 3, 2) != 0 ||
            !hex_run(p + 3, 2 * CHUNK_HASH_LEN, n->hash))
            return JOBTREE_FOREIGN;
        return JOBTREE_CHUNK;
    }
    if (strncmp(p, "gens/", 5) == 0)
        return gen_name(p + 5, n);
    if (strncmp(p, "writers/", 8) == 0)
        return hex_json(p + 8, "probe-", 16, 16) ? JOBTREE_PROBE : JOBTREE_FOREIGN;
    if (strncmp(p, "world/", 6) == 0)
        return world_name(p + 6);
    return JOBTREE_FOREIGN;
}

enum jobtree_kind jobtree_parse(const char *job, const char *key, struct jobtree_name *ret)
{
    struct jobtree_name n;

    memset(&n, 0, sizeof(n));
    n.kind = classify(job, key, &n);
    if (n.kind == JOBTREE_FOREIGN)
        memset(&n, 0, sizeof(n));
    if (ret)
        *ret = n;
    return n.kind;
}
