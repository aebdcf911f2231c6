/* manifest: the two JSON documents of a generation (store format 1).
 *
 *   <job>/gens/<gen>/rank-<r>.json   node manifest: what one rank saved,
 *                                    file by file, chunk by chunk
 *   <job>/gens/<gen>/COMMIT.json     commit record, written last: the
 *                                    ranks' manifests and their SHA-256
 *
 * Both are written by manifest_to_json()/commit_to_json() and read back by
 * the strict parsers below; docs/store-format.md gives the schemas.  What
 * is read comes from a store and is untrusted: every field is checked
 * (types, ranges, path syntax, sizes that add up), a member given twice is
 * garbage, unknown members are ignored (a later minor revision may add
 * some), and a document of a newer format is refused with -ENOTSUP so an
 * old spotd never misreads it.  Parsers return 0, -EINVAL or -ENOTSUP with
 * a short static reason in *ret_why (never quoting the input), or -ENOMEM;
 * *out is untouched on failure.
 *
 * A commit record may carry a MAC (jobkey.h signs and checks it) over its
 * canonical bytes, commit_canonical(): every field a reader acts on, the
 * manifests' digests among them, and through those every chunk's hash. */
#ifndef SPOT_MANIFEST_H
#define SPOT_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spot/chunk.h"

#define STORE_FORMAT 1
/* Largest document accepted: a manifest of 1 TiB in 4 MiB chunks fits. */
#define MANIFEST_MAX (64u * 1024 * 1024)
#define MANIFEST_PATH_MAX 4096
#define MANIFEST_COMPONENT_MAX 255 /* NAME_MAX: one name in a path */
#define MANIFEST_NAME_MAX 128      /* job, method, reason */
#define GEN_MAX 99999999ULL        /* gens/<8 digits> */
#define WORLD_MAX 65536
#define COMMIT_KEY_ID_LEN 16       /* hex digits naming the key that signed a record */
#define COMMIT_MAC_ALG_MAX 31

enum mf_type { MF_FILE, MF_DIR, MF_SYMLINK };

/* A run of a file: a stored chunk, or zeros that are not stored (a hole
 * or a zero-filled region, restored as a hole). */
struct mf_chunk {
    uint8_t hash[CHUNK_HASH_LEN];
    uint32_t len;
    bool zero;
};

struct mf_file {
    char *path;                  /* relative, '/'-separated, checked */
    enum mf_type type;
    uint32_t mode;               /* permission bits, 07777 at most */
    int64_t mtime_s;
    uint32_t mtime_ns;
    uint64_t size;               /* MF_FILE: the sum of the chunks' lengths */
    char *target;                /* MF_SYMLINK */
    struct mf_chunk *chunks;
    size_t n_chunks;
    bool streamed;               /* snap_save(): stored by snap_put_chunk(),
                                    not read from the directory */
};

struct manifest {
    char job[MANIFEST_NAME_MAX + 1];
    uint64_t gen;
    uint32_t rank;
    uint64_t step;
    char method[MANIFEST_NAME_MAX + 1];
    int64_t created_ms;
    char version[32];            /* spotd's, who wrote it */
    uint32_t chunk_size;
    struct mf_file *files;       /* sorted by path, no duplicates */
    size_t n_files;
};

struct commit_rank {
    uint32_t rank;
    uint8_t sha256[CHUNK_HASH_LEN];   /* of rank-<r>.json as stored */
    uint64_t bytes;                   /* of the rank's files */
};

struct commit {
    char job[MANIFEST_NAME_MAX + 1];
    uint64_t gen;
    uint64_t step;
    uint32_t world_size;
    char reason[MANIFEST_NAME_MAX + 1];
    char method[MANIFEST_NAME_MAX + 1];
    int64_t created_ms;
    char version[32];
    struct commit_rank *ranks;   /* world_size entries, rank i at index i */
    /* The signature, all or nothing: "mac_alg", "key_id" and "mac" in the
     * record (jobkey_sign() sets them; has_mac false: unsigned). */
    bool has_mac;
    char mac_alg[COMMIT_MAC_ALG_MAX + 1];
    char key_id[COMMIT_KEY_ID_LEN + 1];
    uint8_t mac[CHUNK_HASH_LEN];
};

/* The document as compact JSON, malloc'ed and terminated; NULL when out
 * of memory. */
char *manifest_to_json(const struct manifest *m, size_t *ret_len);
char *commit_to_json(const struct commit *c, size_t *ret_len);

/* The bytes a commit record's MAC covers (docs/store-format.md, "Signed
 * commit records"): a fixed binary encoding of every field but the MAC,
 * so that it never depends on how JSON is printed.  Malloc'ed; NULL when
 * out of memory. */
uint8_t *commit_canonical(const struct commit *c, size_t *ret_len);

int manifest_parse(const char *text, size_t len, struct manifest *out, const char **ret_why);
int commit_parse(const char *text, size_t len, struct commit *out, const char **ret_why);

/* Free what the structs own and zero them.  NULL is fine. */
void manifest_release(struct manifest *m);
void commit_release(struct commit *c);

/* A path a manifest may name: relative, components separated by one '/',
 * none empty, "." or "..", none longer than MANIFEST_COMPONENT_MAX, no
 * control character, at most MANIFEST_PATH_MAX bytes. */
bool manifest_path_valid(const char *path);

/* Whether a symbolic link at path (a valid manifest path) with target
 * stays inside the tree it is restored in, read lexically against the
 * link's own directory: not absolute, and every ".." comes first (before
 * any name, which may itself be a link) and climbs no higher than the
 * link's directory is deep.  "." and empty components are ignored.  So
 * "../b" at "a/l" is inside, "../../b" and "/etc" are not, and neither
 * is "d/.." (d may be a link to "."). */
bool manifest_link_inside(const char *path, const char *target);

/* The sum of the sizes of m's regular files in *ret: 0, or -EOVERFLOW
 * when it does not fit in 64 bits. */
int manifest_bytes(const struct manifest *m, uint64_t *ret);

/* A stored string made safe to print (paths, link targets, names): valid
 * UTF-8 is copied, except control characters (C0, DEL, C1) and the
 * characters that reorder or break lines (U+061C, U+200E, U+200F, U+2028
 * to U+202E, U+2066 to U+2069), which, like every byte that is not part
 * of valid UTF-8, become \xNN, one per byte; a backslash becomes \\, so
 * the escaped form reads back to one string only.  Written into buf
 * (size bytes, at least 4); what does not fit is cut at a character and
 * marked "...".  MANIFEST_ESCAPED_MAX holds any path or target whole.
 * Returns buf. */
#define MANIFEST_ESCAPED_MAX (4 * MANIFEST_PATH_MAX + 4)
const char *manifest_escape(const char *s, char *buf, size_t size);

/* A job name: 1 to 128 of [A-Za-z0-9._-], not "." or "..". */
bool manifest_job_valid(const char *job);

/* Keys of a generation's documents. */
void manifest_key(char *buf, size_t size, const char *job, uint64_t gen, uint32_t rank);
void commit_key(char *buf, size_t size, const char *job, uint64_t gen);

#endif
