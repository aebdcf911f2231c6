/* jobkey: the job key, which signs and checks commit records.
 *
 * Whoever can write a bucket can write a generation there: chunks, node
 * manifests and a commit record with the right digests.  Only the commit
 * record needs a signature, since it holds every manifest's SHA-256 and
 * each manifest every chunk's.  With a job key, a record carries
 *
 *   "mac_alg":"hmac-sha256","key_id":"<16 hex>","mac":"<64 hex>"
 *
 * mac: HMAC-SHA256 with the key over commit_canonical()'s bytes (job,
 * generation, step, ranks and their manifests' digests, everything a
 * reader acts on); key_id: the first 8 bytes of HMAC-SHA256(key, "spotd
 * job key id v1") in hex, which names a key without giving it away.  The
 * canonical bytes begin with "spotd commit v1" and the key id's input
 * with "spotd job key id v1", peer frames (frame.h) with "SPF1": the world
 * key can sign all three without one ever passing for another.
 * docs/store-format.md has the format and what it protects against.
 *
 * The job key is --job-key-file when given, else the world key (the same
 * file syntax: frame_key_parse()). */
#ifndef SPOT_JOBKEY_H
#define SPOT_JOBKEY_H

#include <stdbool.h>
#include <stddef.h>

#include "spot/frame.h"
#include "spot/manifest.h"

struct config;

#define JOBKEY_ALG "hmac-sha256"
#define JOBKEY_ID_LEN COMMIT_KEY_ID_LEN

struct jobkey {
    struct frame_key key;
    char id[JOBKEY_ID_LEN + 1];
};

/* What a commit record's signature says, checked with a key or none. */
enum jobkey_auth {
    JOBKEY_UNSIGNED,     /* the record carries no MAC */
    JOBKEY_UNCHECKED,    /* it carries one; there was no key to check it with */
    JOBKEY_AUTHENTIC,    /* signed with this key, not altered since */
    JOBKEY_OTHER_KEY,    /* signed with another key (or an algorithm unknown here) */
    JOBKEY_BAD_MAC,      /* this key's id, a MAC that does not match: altered or forged */
};

/* "unsigned", "unchecked", "authentic", "other-key", "bad-mac". */
const char *jobkey_auth_name(enum jobkey_auth a);

/* jk from key (copied) and its id.  Returns 0 or -EIO (OpenSSL failed). */
int jobkey_init(struct jobkey *jk, const struct frame_key *key);

/* Read and parse a key file (frame_key_parse()).  what ("world key", "job
 * key") and origin ("--job-key-file") go into the messages.  Returns 0,
 * with warn set to a warning or "" (a file others can read), or -errno
 * with err set. */
int jobkey_read_file(const char *path, const char *what, const char *origin,
                     struct frame_key *ret, char *err, size_t errlen, char *warn,
                     size_t warnlen);

/* The key a configuration names for commit records: job_key_file, else
 * world_key_file, else world_key.  Returns 1 with *ret set, 0 when it
 * names none, or -errno with err set; warn as jobkey_read_file(). */
int jobkey_from_config(const struct config *cfg, struct frame_key *ret, char *err,
                       size_t errlen, char *warn, size_t warnlen);

/* Sign c: set its mac_alg, key_id and mac.  Returns 0, -ENOMEM or -EIO. */
int jobkey_sign(const struct jobkey *jk, struct commit *c);

/* Check c's signature with jk (NULL: no key, so JOBKEY_UNSIGNED or
 * JOBKEY_UNCHECKED).  The MAC is compared in constant time.  Returns 0
 * with *ret set, -ENOMEM or -EIO. */
int jobkey_check(const struct jobkey *jk, const struct commit *c, enum jobkey_auth *ret);

/* The one line that refuses generation gen of job for a verdict that is
 * not JOBKEY_AUTHENTIC, naming the record's key id (c) and ours. */
void jobkey_refusal(char *buf, size_t size, const struct jobkey *jk, const struct commit *c,
                    enum jobkey_auth a);

/* Forget the key's bytes. */
void jobkey_clear(struct jobkey *jk);

#endif
