/* The rendezvous record parser on arbitrary bytes: 0 or -EINVAL with a
 * reason, *ret untouched on failure, bounded strings, and a parsed record
 * that survives worldrec_to_json() and a second parse unchanged. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/worldrec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct worldrec r, back;
    const char *why = NULL;
    size_t len;
    char *text;
    int e;

    memset(&r, 0xa5, sizeof(r));
    e = worldrec_parse((const char *)data, size, &r, &why);
    if (e != 0) {
        if (e != -EINVAL || !why || !fuzz_poisoned(&r, sizeof(r)))
            abort();
        return 0;
    }
    fuzz_check_string(r.job, sizeof(r.job), true, true);
    fuzz_check_string(r.node, sizeof(r.node), true, true);
    fuzz_check_string(r.addr, sizeof(r.addr), r.type == WORLDREC_RANK, true);
    if (!(text = worldrec_to_json(&r, &len)))
        abort();
    memset(&back, 0, sizeof(back));
    if (worldrec_parse(text, len, &back, &why) != 0 || memcmp(&back, &r, sizeof(r)) != 0)
        abort();
    free(text);
    return 0;
}
