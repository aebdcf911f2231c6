#include "spot/strict.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <string.h>

int strict_garbage(const char **ret_why, const char *why)
{
    if (ret_why)
        *ret_why = why;
    return -EINVAL;
}

bool strict_ascii_case_equal(const char *a, size_t len, const char *b)
{
    for (size_t i = 0; i < len; i++) {
        char x = a[i] >= 'A' && a[i] <= 'Z' ? (char)(a[i] + 32) : a[i];
        char y = b[i] >= 'A' && b[i] <= 'Z' ? (char)(b[i] + 32) : b[i];
        if (!b[i] || x != y)
            return false;
    }
    return b[len] == '\0';
}

bool strict_json_has_escaped_nul(const char *s, size_t len)
{
    for (size_t i = 0; i + 6 <= len; i++)
        if (s[i] == '\\' && memcmp(s + i + 1, "u0000", 5) == 0)
            return true;
    return false;
}

int strict_json_member(const cJSON *obj, const char *key, const cJSON **ret,
                       const char **ret_why)
{
    const cJSON *it, *found = NULL;

    cJSON_ArrayForEach(it, obj) {
        if (!it->string || strcmp(it->string, key) != 0)
            continue;
        if (found)
            return strict_garbage(ret_why, "a JSON key appears twice");
        found = it;
    }
    *ret = found;
    return 0;
}

int strict_json_member_string(const cJSON *obj, const char *key, bool required,
                              const char **ret, const char *why, const char **ret_why)
{
    const cJSON *it;
    int r = strict_json_member(obj, key, &it, ret_why);

    if (r < 0)
        return r;
    if (!it) {
        if (required)
            return strict_garbage(ret_why, why);
        *ret = NULL;
        return 0;
    }
    if (!cJSON_IsString(it) || !it->valuestring)
        return strict_garbage(ret_why, why);
    *ret = it->valuestring;
    return 0;
}

int strict_json_copy(const cJSON *o, const char *key, char *out, size_t size, bool printable)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    size_t len;

    if (!v)
        return 0;
    if (!cJSON_IsString(v) || (len = strlen(v->valuestring)) >= size)
        return -1;
    for (size_t i = 0; printable && i < len; i++)
        if ((unsigned char)v->valuestring[i] < 0x20 || (unsigned char)v->valuestring[i] > 0x7e)
            return -1;
    memcpy(out, v->valuestring, len + 1);
    return 1;
}
