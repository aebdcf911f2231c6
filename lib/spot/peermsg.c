/* peermsg: the world's messages (see peermsg.h). */
#include "spot/peermsg.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "spot/hash.h"
#include "spot/strict.h"

static const char *const names[PEERMSG__COUNT] = {
    "notice", "query", "step", "prepare", "saved", "commit", "abort", "resume", "leave",
    "ready", "hashed", "state", "pause",
};

/* Which members each type must have, and which it may have; the others
 * are ignored, like unknown members. */
enum { M_GEN = 1, M_STEP = 2, M_RANK = 4, M_DEADLINE = 8, M_SHA = 16, M_BYTES = 32,
       M_KIND = 64, M_MASTER = 128, M_WORLD = 256, M_TERM = 512, M_REASON = 1024,
       M_SPLIT = 2048, M_MEMBERS = 4096, M_LIVE = 8192 };

static const unsigned allowed[PEERMSG__COUNT] = {
    [PEERMSG_NOTICE] = M_KIND | M_DEADLINE | M_TERM | M_REASON,
    [PEERMSG_QUERY] = M_GEN | M_DEADLINE | M_REASON | M_TERM,
    [PEERMSG_STEP] = M_GEN | M_STEP,
    [PEERMSG_PREPARE] = M_GEN | M_STEP | M_DEADLINE | M_REASON | M_SPLIT,
    [PEERMSG_SAVED] = M_GEN | M_RANK | M_STEP | M_SHA | M_BYTES,
    [PEERMSG_COMMIT] = M_GEN | M_STEP,
    [PEERMSG_ABORT] = M_GEN | M_REASON,
    [PEERMSG_RESUME] = M_GEN | M_WORLD | M_MASTER | M_MEMBERS,
    [PEERMSG_LEAVE] = M_REASON,
    [PEERMSG_READY] = M_GEN,
    [PEERMSG_HASHED] = M_GEN | M_RANK | M_SHA,
    [PEERMSG_STATE] = M_GEN | M_LIVE | M_MEMBERS,
    [PEERMSG_PAUSE] = M_REASON,
};

static const unsigned required[PEERMSG__COUNT] = {
    [PEERMSG_NOTICE] = M_KIND | M_DEADLINE,
    [PEERMSG_QUERY] = M_GEN | M_DEADLINE,
    [PEERMSG_STEP] = M_GEN | M_STEP,
    [PEERMSG_PREPARE] = M_GEN | M_STEP | M_DEADLINE,
    [PEERMSG_SAVED] = M_GEN | M_RANK | M_SHA | M_BYTES,
    [PEERMSG_COMMIT] = M_GEN | M_STEP,
    [PEERMSG_ABORT] = M_GEN,
    [PEERMSG_RESUME] = M_WORLD | M_MASTER,
    [PEERMSG_LEAVE] = 0,
    [PEERMSG_READY] = 0,
    [PEERMSG_HASHED] = M_GEN | M_RANK | M_SHA,
    [PEERMSG_STATE] = M_LIVE,
    [PEERMSG_PAUSE] = 0,
};

const char *peermsg_type_name(enum peermsg_type t)
{
    return (unsigned)t < PEERMSG__COUNT ? names[t] : "?";
}

bool peermsg_member(const struct peermsg *m, uint32_t rank)
{
    return rank < PEERMSG_MAX_MEMBERS && (m->members[rank / 8] >> (rank % 8) & 1);
}

void peermsg_add_member(struct peermsg *m, uint32_t rank)
{
    if (rank >= PEERMSG_MAX_MEMBERS || peermsg_member(m, rank))
        return;
    m->members[rank / 8] |= (uint8_t)(1u << (rank % 8));
    m->nmembers++;
}

/* "members": ranks, ascending, each once: 1 present, 0 absent, -1 bad. */
static int get_members(const cJSON *o, struct peermsg *m)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "members"), *v;
    int64_t last = -1;

    if (!a)
        return 0;
    if (!cJSON_IsArray(a) || !a->child)
        return -1;
    cJSON_ArrayForEach(v, a) {
        if (!cJSON_IsNumber(v) || v->valuedouble <= (double)last ||
            v->valuedouble >= PEERMSG_MAX_MEMBERS || v->valuedouble != (double)(int)v->valuedouble)
            return -1;
        last = (int64_t)v->valuedouble;
        peermsg_add_member(m, (uint32_t)last);
    }
    return 1;
}

/* An integer member in [min, max]: 1 present and set, 0 absent, -1 bad. */
static int get_int(const cJSON *o, const char *key, double min, double max, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < min || v->valuedouble > max ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
        return -1;
    *out = (int64_t)v->valuedouble;
    return 1;
}

int peermsg_parse(const char *body, size_t len, struct peermsg *ret, const char **why)
{
    /* 2^53: integers above it do not survive a JSON double. */
    const double big = 9007199254740992.0;
    cJSON *o = cJSON_ParseWithLength(body, len);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "v");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    struct peermsg m;
    unsigned have = 0;
    int64_t x;
    char sha[65];
    int r;

    memset(&m, 0, sizeof(m));
    m.step = -1;
    *why = NULL;
    if (!cJSON_IsObject(o) || !cJSON_IsNumber(v) || v->valuedouble != 1 || !cJSON_IsString(t)) {
        *why = "not a version 1 message";
        goto out;
    }
    m.type = PEERMSG__COUNT;
    for (int i = 0; i < PEERMSG__COUNT; i++)
        if (strcmp(t->valuestring, names[i]) == 0)
            m.type = (enum peermsg_type)i;
    if (m.type == PEERMSG__COUNT) {
        *why = "an unknown message type";
        goto out;
    }
#define INT(key, min, max, bit, field)                                                    \
    do {                                                                                  \
        if (!(allowed[m.type] & (bit)))                                                   \
            break;                                                                        \
        if ((r = get_int(o, key, min, max, &x)) < 0) {                                    \
            *why = "member '" key "' is not an integer in its range";                    \
            goto out;                                                                     \
        }                                                                                 \
        if (r) {                                                                          \
            field = x;                                                                    \
            have |= bit;                                                                  \
        }                                                                                 \
    } while (0)
    INT("gen", 1, big, M_GEN, m.gen);
    INT("step", 0, big, M_STEP, m.step);
    INT("rank", 0, 65535, M_RANK, m.rank);
    INT("world_size", 1, 65536, M_WORLD, m.world_size);
    INT("deadline_ms", 0, big, M_DEADLINE, m.deadline_ms);
    INT("bytes", 0, big, M_BYTES, m.bytes);
    INT("master_port", 1, 65535, M_MASTER, m.master_port);
#undef INT
    if ((allowed[m.type] & M_KIND &&
         strict_json_copy(o, "kind", m.kind, sizeof(m.kind), true) < 0) ||
        (allowed[m.type] & M_REASON &&
         strict_json_copy(o, "reason", m.reason, sizeof(m.reason), true) < 0) ||
        (allowed[m.type] & M_MASTER &&
         strict_json_copy(o, "master_addr", m.master_addr, sizeof(m.master_addr), true) < 0)) {
        *why = "a string member that is not printable or too long";
        goto out;
    }
    if (m.kind[0])
        have |= M_KIND;
    if (m.master_addr[0] == '\0')
        have &= ~(unsigned)M_MASTER;
    if (allowed[m.type] & M_TERM) {
        const cJSON *term = cJSON_GetObjectItemCaseSensitive(o, "terminating");
        if (term && !cJSON_IsBool(term)) {
            *why = "member 'terminating' is not a boolean";
            goto out;
        }
        m.terminating = cJSON_IsTrue(term);
    }
    if (allowed[m.type] & M_LIVE) {
        const cJSON *live = cJSON_GetObjectItemCaseSensitive(o, "live");
        if (live && !cJSON_IsBool(live)) {
            *why = "member 'live' is not a boolean";
            goto out;
        }
        if (live)
            have |= M_LIVE;
        m.live = cJSON_IsTrue(live);
    }
    if (allowed[m.type] & M_MEMBERS && (r = get_members(o, &m)) != 0) {
        if (r < 0) {
            *why = "member 'members' is not a list of ranks, ascending";
            goto out;
        }
        have |= M_MEMBERS;
    }
    if (allowed[m.type] & M_SPLIT) {
        const cJSON *split = cJSON_GetObjectItemCaseSensitive(o, "split");
        if (split && !cJSON_IsBool(split)) {
            *why = "member 'split' is not a boolean";
            goto out;
        }
        m.split = cJSON_IsTrue(split);
    }
    r = allowed[m.type] & M_SHA ? strict_json_copy(o, "sha256", sha, sizeof(sha), true) : 0;
    if (r < 0 || (r && hash_parse_hex(sha, m.sha256) < 0)) {
        *why = "member 'sha256' is not 64 lowercase hex digits";
        goto out;
    }
    if (r)
        have |= M_SHA;
    if ((have & required[m.type]) != required[m.type]) {
        *why = "a member its type needs is missing";
        goto out;
    }
    *ret = m;
out:
    cJSON_Delete(o);
    return *why ? -EINVAL : 0;
}

cJSON *peermsg_to_json(const struct peermsg *m)
{
    unsigned may = (unsigned)m->type < PEERMSG__COUNT ? allowed[m->type] : 0;
    cJSON *o = cJSON_CreateObject();
    char sha[65];

    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "v", 1);
    cJSON_AddStringToObject(o, "type", peermsg_type_name(m->type));
    if (may & M_GEN && m->gen)
        cJSON_AddNumberToObject(o, "gen", (double)m->gen);
    if (may & M_STEP && m->step >= 0)
        cJSON_AddNumberToObject(o, "step", (double)m->step);
    if (may & M_RANK)
        cJSON_AddNumberToObject(o, "rank", m->rank);
    if (may & M_WORLD)
        cJSON_AddNumberToObject(o, "world_size", m->world_size);
    if (may & M_DEADLINE)
        cJSON_AddNumberToObject(o, "deadline_ms", (double)m->deadline_ms);
    if (may & M_SHA) {
        hash_hex(m->sha256, sha);
        cJSON_AddStringToObject(o, "sha256", sha);
    }
    if (may & M_BYTES)
        cJSON_AddNumberToObject(o, "bytes", (double)m->bytes);
    if (may & M_KIND)
        cJSON_AddStringToObject(o, "kind", m->kind);
    if (may & M_TERM)
        cJSON_AddBoolToObject(o, "terminating", m->terminating);
    if (may & M_SPLIT)
        cJSON_AddBoolToObject(o, "split", m->split);
    if (may & M_MASTER) {
        cJSON_AddStringToObject(o, "master_addr", m->master_addr);
        cJSON_AddNumberToObject(o, "master_port", m->master_port);
    }
    if (may & M_LIVE)
        cJSON_AddBoolToObject(o, "live", m->live);
    if (may & M_MEMBERS && m->nmembers) {
        cJSON *a = cJSON_AddArrayToObject(o, "members");
        for (uint32_t r = 0; a && r < PEERMSG_MAX_MEMBERS; r++)
            if (peermsg_member(m, r))
                cJSON_AddItemToArray(a, cJSON_CreateNumber(r));
    }
    if (may & M_REASON && m->reason[0])
        cJSON_AddStringToObject(o, "reason", m->reason);
    return o;
}
