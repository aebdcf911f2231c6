/* The world's message parser on arbitrary bytes.  Besides the sanitizers,
 * it aborts when a promise of peermsg.h is broken: 0 or -EINVAL with a
 * reason, *ret untouched on failure, printable NUL-terminated strings, and
 * a parsed message that survives peermsg_to_json() and a second parse
 * unchanged. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/peermsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct peermsg m, back;
    const char *why = NULL;
    cJSON *o;
    char *text;
    int r;

    memset(&m, 0xa5, sizeof(m));
    r = peermsg_parse((const char *)data, size, &m, &why);
    if (r != 0) {
        if (r != -EINVAL || !why || !fuzz_poisoned(&m, sizeof(m)))
            abort();
        return 0;
    }
    if ((unsigned)m.type >= PEERMSG__COUNT)
        abort();
    fuzz_check_string(m.kind, sizeof(m.kind), false, true);
    fuzz_check_string(m.reason, sizeof(m.reason), false, true);
    fuzz_check_string(m.master_addr, sizeof(m.master_addr), false, true);
    o = peermsg_to_json(&m);
    text = o ? cJSON_PrintUnformatted(o) : NULL;
    if (!text)
        abort();
    memset(&back, 0, sizeof(back));
    if (peermsg_parse(text, strlen(text), &back, &why) != 0 ||
        memcmp(&back, &m, sizeof(m)) != 0)
        abort();
    free(text);
    cJSON_Delete(o);
    return 0;
}
