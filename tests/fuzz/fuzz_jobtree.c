/* The store format's names (jobtree_parse()) on arbitrary keys: the input
 * is "<job>\n<key>".  A key is foreign with *ret all zero, or below the job
 * and one of the format's names, which the writers' own key functions
 * rebuild byte for byte. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "spot/hash.h"
#include "spot/jobtree.h"
#include "spot/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char buf[2048], again[2100], hex[2 * CHUNK_HASH_LEN + 1], *key;
    struct jobtree_name n, zero;
    enum jobtree_kind k;
    size_t jl;

    if (size >= sizeof(buf) || memchr(data, '\0', size))
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    if (!(key = strchr(buf, '\n')))
        return 0;
    *key++ = '\0';
    jl = strlen(buf);
    memset(&zero, 0, sizeof(zero));
    memset(&n, 0xa5, sizeof(n));
    k = jobtree_parse(buf, key, &n);
    if (k != n.kind)
        abort();
    if (k == JOBTREE_FOREIGN) {
        if (memcmp(&n, &zero, sizeof(n)) != 0)
            abort();
        return 0;
    }
    if (jl == 0 || strncmp(key, buf, jl) != 0 || key[jl] != '/')
        abort();
    if (jobtree_in_gen(k) && (n.gen == 0 || n.gen > GEN_MAX))
        abort();
    if (k == JOBTREE_COMMIT)
        commit_key(again, sizeof(again), buf, n.gen);
    else if (k == JOBTREE_MANIFEST)
        manifest_key(again, sizeof(again), buf, n.gen, n.rank);
    else if (k == JOBTREE_CHUNK) {
        hash_hex(n.hash, hex);
        snprintf(again, sizeof(again), "%s/chunks/%.2s/%s", buf, hex, hex);
    } else
        return 0;
    if (strcmp(again, key) != 0)
        abort();
    return 0;
}
