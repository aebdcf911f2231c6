/* jobkey: signing and checking commit records (see jobkey.h). */
#include "spot/jobkey.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spot/config.h"
#include "spot/hash.h"

#define ID_INPUT "spotd job key id v1"

const char *jobkey_auth_name(enum jobkey_auth a)
{
    static const char *const names[] = { "unsigned", "unchecked", "authentic", "other-key",
                                         "bad-mac" };

    return (unsigned)a < sizeof(names) / sizeof(names[0]) ? names[a] : "?";
}

int jobkey_init(struct jobkey *jk, const struct frame_key *key)
{
    static const char digits[] = "0123456789abcdef";
    uint8_t mac[CHUNK_HASH_LEN];

    memset(jk, 0, sizeof(*jk));
    jk->key = *key;
    if (hash_hmac(key->k, key->len, ID_INPUT, strlen(ID_INPUT), mac) < 0) {
        jobkey_clear(jk);
        return -EIO;
    }
    for (int i = 0; i < JOBKEY_ID_LEN / 2; i++) {
        jk->id[2 * i] = digits[mac[i] >> 4];
        jk->id[2 * i + 1] = digits[mac[i] & 15];
    }
    return 0;
}

void jobkey_clear(struct jobkey *jk)
{
    if (jk)
        OPENSSL_cleanse(jk, sizeof(*jk));
}

int jobkey_read_file(const char *path, const char *what, const char *origin,
                     struct frame_key *ret, char *err, size_t errlen, char *warn,
                     size_t warnlen)
{
    char buf[2 * FRAME_KEY_MAX + 64];
    const char *why;
    struct stat st;
    ssize_t n = 0;
    int fd, e;

    warn[0] = '\0';
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0 ||
        (n = read(fd, buf, sizeof(buf))) < 0) {
        e = -errno;
        snprintf(err, errlen, "cannot read the %s file '%s' (from %s): %s", what, path, origin,
                 strerror(-e));
        if (fd >= 0)
            close(fd);
        return e;
    }
    close(fd);
    if ((size_t)n == sizeof(buf)) {
        snprintf(err, errlen, "the %s file '%s' is too long: a key is at most %d bytes (or %d "
                 "hex digits)", what, path, FRAME_KEY_MAX, 2 * FRAME_KEY_MAX);
        return -EINVAL;
    }
    e = frame_key_parse(buf, (size_t)n, ret, &why);
    OPENSSL_cleanse(buf, sizeof(buf));
    if (e < 0) {
        snprintf(err, errlen, "invalid %s in '%s' (from %s): %s", what, path, origin, why);
        return e;
    }
    if (st.st_mode & 077)
        snprintf(warn, warnlen, "the %s file '%s' can be read by other users (mode %04o): "
                 "chmod 600 it", what, path, (unsigned)(st.st_mode & 07777));
    return 0;
}

int jobkey_from_config(const struct config *cfg, struct frame_key *ret, char *err,
                       size_t errlen, char *warn, size_t warnlen)
{
    const char *job = config_str(cfg, OPT_JOB_KEY_FILE), *world = config_str(cfg, OPT_WORLD_KEY_FILE);
    const char *value = config_str(cfg, OPT_WORLD_KEY), *why;
    int r;

    warn[0] = '\0';
    if (job || world) {
        r = jobkey_read_file(job ? job : world, job ? "job key" : "world key",
                             cfg->v[job ? OPT_JOB_KEY_FILE : OPT_WORLD_KEY_FILE].origin, ret,
                             err, errlen, warn, warnlen);
        return r < 0 ? r : 1;
    }
    if (!value)
        return 0;
    if ((r = frame_key_parse(value, strlen(value), ret, &why)) < 0) {
        snprintf(err, errlen, "invalid world_key (from %s): %s", cfg->v[OPT_WORLD_KEY].origin,
                 why);
        return r;
    }
    return 1;
}

/* The MAC of c as it stands (its mac_alg and key_id included). */
static int mac_of(const struct jobkey *jk, const struct commit *c, uint8_t mac[CHUNK_HASH_LEN])
{
    size_t len;
    uint8_t *bytes = commit_canonical(c, &len);
    int r;

    if (!bytes)
        return -ENOMEM;
    r = hash_hmac(jk->key.k, jk->key.len, bytes, len, mac);
    free(bytes);
    return r;
}

int jobkey_sign(const struct jobkey *jk, struct commit *c)
{
    c->has_mac = true;
    snprintf(c->mac_alg, sizeof(c->mac_alg), "%s", JOBKEY_ALG);
    memcpy(c->key_id, jk->id, sizeof(c->key_id));
    return mac_of(jk, c, c->mac);
}

int jobkey_check(const struct jobkey *jk, const struct commit *c, enum jobkey_auth *ret)
{
    uint8_t mac[CHUNK_HASH_LEN];
    int r;

    if (!c->has_mac) {
        *ret = JOBKEY_UNSIGNED;
        return 0;
    }
    if (!jk) {
        *ret = JOBKEY_UNCHECKED;
        return 0;
    }
    if (strcmp(c->mac_alg, JOBKEY_ALG) != 0 || strcmp(c->key_id, jk->id) != 0) {
        *ret = JOBKEY_OTHER_KEY;
        return 0;
    }
    if ((r = mac_of(jk, c, mac)) < 0)
        return r;
    *ret = CRYPTO_memcmp(mac, c->mac, sizeof(mac)) == 0 ? JOBKEY_AUTHENTIC : JOBKEY_BAD_MAC;
    return 0;
}

void jobkey_refusal(char *buf, size_t size, const struct jobkey *jk, const struct commit *c,
                    enum jobkey_auth a)
{
    unsigned long long gen = (unsigned long long)c->gen;
    const char *forged = "it may be forged by someone who can write the store";

    if (a == JOBKEY_UNSIGNED)
        snprintf(buf, size, "generation %llu of job '%s' is not signed, and job key %s is set: "
                 "refusing it; %s (records written before signing existed are unsigned too: "
                 "see docs/store-format.md)", gen, c->job, jk ? jk->id : "?", forged);
    else if (a == JOBKEY_OTHER_KEY && strcmp(c->mac_alg, JOBKEY_ALG) != 0)
        snprintf(buf, size, "generation %llu of job '%s' is signed with '%s', which this spotd "
                 "cannot check: refusing it; %s", gen, c->job, c->mac_alg, forged);
    else if (a == JOBKEY_OTHER_KEY)
        snprintf(buf, size, "generation %llu of job '%s' is signed by another key (id %s, not "
                 "%s): refusing it; %s, or give the key that signed it", gen, c->job,
                 c->key_id, jk ? jk->id : "?", forged);
    else
        snprintf(buf, size, "generation %llu of job '%s' has a WRONG signature for key %s (the "
                 "record was altered, moved from another generation or forged): refusing it; "
                 "%s", gen, c->job, jk ? jk->id : "?", forged);
}
