/* worldrec: rendezvous records (see worldrec.h). */
#include "spot/worldrec.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "spot/manifest.h"
#include "spot/parse.h"
#include "spot/strict.h"

static const char *const names[] = { "rank", "join", "assign" };

int worldrec_addr_valid(const char *text)
{
    const char *colon = strrchr(text, ':');
    unsigned char sa[16];
    char host[64];
    uint64_t port;
    size_t len;

    if (!colon || parse_u64(colon + 1, 1, 65535, &port) < 0)
        return 0;
    len = (size_t)(colon - text);
    if (len >= 2 && text[0] == '[' && text[len - 1] == ']')
        text++, len -= 2;
    if (len == 0 || len >= sizeof(host))
        return 0;
    memcpy(host, text, len);
    host[len] = '\0';
    return inet_pton(AF_INET, host, sa) == 1 || inet_pton(AF_INET6, host, sa) == 1;
}

static int node_valid(const char *s)
{
    size_t n = strlen(s);

    if (n < 16 || n > WORLDREC_NODE_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

int worldrec_parse(const char *text, size_t len, struct worldrec *ret, const char **why)
{
    cJSON *o = len <= WORLDREC_MAX ? cJSON_ParseWithLength(text, len) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "v");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    const cJSON *rank = cJSON_GetObjectItemCaseSensitive(o, "rank");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(o, "ts_ms");
    struct worldrec r;

    memset(&r, 0, sizeof(r));
    *why = NULL;
    if (len > WORLDREC_MAX)
        *why = "a record over 4 KiB";
    else if (!cJSON_IsObject(o) || !cJSON_IsNumber(v) || !cJSON_IsString(t))
        *why = "not a world record";
    else if (v->valuedouble != 1)
        *why = "a record of another version";
    else {
        r.type = 3;
        for (int i = 0; i < 3; i++)
            if (strcmp(t->valuestring, names[i]) == 0)
                r.type = (enum worldrec_type)i;
        if ((int)r.type == 3)
            *why = "an unknown record type";
    }
    if (*why)
        goto out;
    if (strict_json_copy(o, "job", r.job, sizeof(r.job), false) != 1 || !manifest_job_valid(r.job))
        *why = "a record without a valid job";
    else if (strict_json_copy(o, "node", r.node, sizeof(r.node), false) != 1 || !node_valid(r.node))
        *why = "a record without a valid node name";
    else if (!cJSON_IsNumber(ts) || ts->valuedouble < 0 || ts->valuedouble > 9e15 ||
             ts->valuedouble != (double)(int64_t)ts->valuedouble)
        *why = "a record without a valid ts_ms";
    else if (r.type != WORLDREC_JOIN &&
             (!cJSON_IsNumber(rank) || rank->valuedouble < 0 || rank->valuedouble > 65535 ||
              rank->valuedouble != (double)(uint32_t)rank->valuedouble))
        *why = "a record without a valid rank";
    else if ((r.type == WORLDREC_RANK &&
              (strict_json_copy(o, "addr", r.addr, sizeof(r.addr), false) != 1 ||
               !worldrec_addr_valid(r.addr))) ||
             (r.type == WORLDREC_JOIN &&
              (strict_json_copy(o, "addr", r.addr, sizeof(r.addr), false) < 0 ||
               (r.addr[0] && !worldrec_addr_valid(r.addr)))))
        *why = "a record without a numeric ADDR:PORT";
    if (*why)
        goto out;
    r.ts_ms = (int64_t)ts->valuedouble;
    if (r.type != WORLDREC_JOIN)
        r.rank = (uint32_t)rank->valuedouble;
    *ret = r;
out:
    cJSON_Delete(o);
    return *why ? -EINVAL : 0;
}

char *worldrec_to_json(const struct worldrec *r, size_t *ret_len)
{
    cJSON *o = cJSON_CreateObject();
    char *text;

    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "v", 1);
    cJSON_AddStringToObject(o, "type", names[r->type]);
    cJSON_AddStringToObject(o, "job", r->job);
    cJSON_AddStringToObject(o, "node", r->node);
    if (r->type != WORLDREC_JOIN)
        cJSON_AddNumberToObject(o, "rank", r->rank);
    if (r->type == WORLDREC_RANK || (r->type == WORLDREC_JOIN && r->addr[0]))
        cJSON_AddStringToObject(o, "addr", r->addr);
    cJSON_AddNumberToObject(o, "ts_ms", (double)r->ts_ms);
    text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (text && ret_len)
        *ret_len = strlen(text);
    return text;
}

void worldrec_key(char *buf, size_t size, const struct worldrec *r)
{
    if (r->type == WORLDREC_RANK)
        snprintf(buf, size, "%s/world/rank-%u.json", r->job, r->rank);
    else
        snprintf(buf, size, "%s/world/%s-%s.json", r->job, names[r->type], r->node);
}
