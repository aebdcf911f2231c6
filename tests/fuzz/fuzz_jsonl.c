/* libckpt's control-protocol reader on arbitrary bytes (a line from
 * spotd).  Besides the sanitizers, it aborts when a promise of jsonl.h is
 * broken: 0 or -1; on 0, at most JSONL_MEMBERS_MAX unique keys, integers
 * below 2^53, and the message written back parses to the same members. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "libckpt/jsonl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *line, out[2 * JSONL_LINE_MAX + 64];
    struct jsonl_msg m, back;
    struct jsonl_kv kv[JSONL_MEMBERS_MAX];
    size_t n = 0;
    int r, len;

    if (size > JSONL_LINE_MAX || !(line = malloc(size ? size : 1)))
        return 0;
    memcpy(line, data, size);
    r = jsonl_parse(line, size, &m);
    if (r != 0 && r != -1)
        abort();
    if (r == 0) {
        if (m.n > JSONL_MEMBERS_MAX)
            abort();
        for (size_t i = 0; i < m.n; i++) {
            const struct jsonl_value *v = &m.values[i];

            for (size_t j = 0; j < i; j++)
                if (strcmp(m.keys[i], m.keys[j]) == 0)
                    abort();
            if (v->type == JSONL_INT && (v->num > 9007199254740991LL ||
                                         v->num < -9007199254740991LL))
                abort();
            if (strcmp(m.keys[i], "v") == 0)
                continue; /* jsonl_build writes its own */
            if (v->type == JSONL_STRING)
                kv[n++] = (struct jsonl_kv)JSONL_STR(m.keys[i], v->str);
            else if (v->type == JSONL_INT)
                kv[n++] = (struct jsonl_kv)JSONL_INT(m.keys[i], v->num);
        }
        len = jsonl_build(out, sizeof(out), kv, n);
        if (len < 0 || jsonl_parse(out, (size_t)len - 1, &back) != 0 || back.n != n + 1)
            abort();
        for (size_t i = 0; i < n; i++) {
            const struct jsonl_value *v = jsonl_get(&back, kv[i].key);
            if (!v || v->type != kv[i].type ||
                (v->type == JSONL_STRING ? strcmp(v->str, kv[i].str) != 0 : v->num != kv[i].num))
                abort();
        }
    }
    free(line);
    return 0;
}
