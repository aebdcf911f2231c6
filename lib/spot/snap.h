/* snap: the snapshot engine.  Turns a directory of checkpoint files into
 * one rank of a generation in a store, commits generations, and brings
 * them back (store format 1, docs/store-format.md).
 *
 * Every operation is asynchronous on the caller's libevent loop and ends in
 * exactly one callback there, never inside the call that started it.
 * Reading, hashing (SHA-256), zero detection, compression (zstd) and
 * writing run in the worker pool; the loop moves buffers and drives the
 * store.  Memory is bounded: at most max_inflight_bytes of chunk buffers
 * exist at once, whatever the size of the checkpoint.
 *
 * Chunking is fixed-size per file (chunk_size, 8 MiB by default): a chunk
 * is a run of one file, chunk i covering [i * chunk_size, (i + 1) *
 * chunk_size).  See docs/store-format.md for the measurements behind it.
 *
 * Deduplication: a chunk that the newest committed generation references,
 * or that this generation already stored (another rank in this process),
 * is not uploaded again, and no request asks the store whether a chunk
 * exists.  Runs of zeros are not stored at all and come back as holes.
 *
 * Authentication: with a key (snap_opts.key), snap_commit() signs every
 * commit record (jobkey.h) and every reader checks the signature: a
 * generation whose record is unsigned or not signed by this key is not
 * committed for restore, verify, deduplication or retention; snap_gens()
 * marks it unauthentic, and restore and verify refuse it by name
 * (-EKEYREJECTED).  Without a key records are written unsigned and read as
 * before.  Manifests are checked against the record's digests and chunks
 * against the manifests' hashes on every read, so the one signature covers
 * the whole generation.
 *
 * Errors: err is 0 or -errno, msg one line naming what failed on which
 * file, key or generation ("" on success). */
#ifndef SPOT_SNAP_H
#define SPOT_SNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spot/jobkey.h"
#include "spot/manifest.h"

struct store_entry;

struct event_base;
struct pool;
struct store;
struct snap;

#define SNAP_CHUNK_DEFAULT (8u * 1024 * 1024)
#define SNAP_INFLIGHT_DEFAULT (128u * 1024 * 1024)
/* float32 weights and Adam moments compress by only ~8 % with zstd -1, at
 * about 2.7 ns of CPU a byte: stored raw, a 512 MiB push to Swift took
 * 2.9 s and 0.9 s of CPU instead of 3.8 s and 2.7 s.  Text, bf16 and
 * sparse state compress far better and still are. */
#define SNAP_MIN_SAVING_DEFAULT 0.10
#define SNAP_KEEP_DEFAULT 3
#define SNAP_GRACE_DEFAULT_MS (6LL * 3600 * 1000)

struct snap_opts {
    struct event_base *base;
    struct pool *pool;
    struct store *store;
    const char *job;               /* copied; manifest_job_valid() */
    uint32_t chunk_size;           /* 0: SNAP_CHUNK_DEFAULT; 64 KiB .. 64 MiB */
    size_t max_inflight_bytes;     /* 0: SNAP_INFLIGHT_DEFAULT; shared by every
                                      operation of this snap */
    int zstd_level;                /* 0: 1 */
    double min_saving;             /* store raw unless zstd saves this share;
                                      0: SNAP_MIN_SAVING_DEFAULT */
    const struct frame_key *key;   /* the job key: signs and checks commit
                                      records (copied); NULL: none */
    bool preserve_special_modes;   /* restore: keep setuid, setgid, sticky and
                                      others' write as stored (snap_restore) */
};

/* Progress, updated on the loop as work completes; read it any time. */
struct snap_counters {
    uint64_t files;
    uint64_t bytes_total;          /* of the files being saved, restored, verified */
    uint64_t bytes_read;           /* from disk (save) */
    uint64_t bytes_hashed;
    uint64_t bytes_zero;           /* runs of zeros, not stored */
    uint64_t bytes_skipped;        /* already in the store (deduplicated) */
    uint64_t bytes_early;          /* stored by an early store of this generation
                                      (snap_prestore()), not counted as skipped */
    uint64_t bytes_checked;        /* of bytes_hashed, read again after an early store
                                      read them, and found the same by a fast check
                                      (not hashed a second time) */
    uint64_t bytes_split;          /* left to the other ranks of a split save */
    uint64_t bytes_compressed;     /* encoded size of the new chunks */
    uint64_t bytes_sent;           /* put into the store */
    uint64_t bytes_received;       /* got from the store */
    uint64_t bytes_written;        /* to disk (restore) */
    uint64_t bytes_direct;         /* of those, written with O_DIRECT (from a remote store) */
    uint64_t chunks;
    uint64_t chunks_sent;
    uint64_t chunks_skipped;
    uint64_t retries;              /* chunks fetched again after a bad copy */
    uint64_t cpu_hash_ns;          /* worker CPU time reading, hashing, checking zeros (save) */
    uint64_t cpu_encode_ns;        /* worker CPU time compressing (save) */
};

/* A generation as the store holds it. */
struct snap_gen {
    uint64_t gen;
    bool committed;                /* its commit record is there, valid and, with
                                      a key, signed by it */
    bool corrupt;                  /* a commit record is there but unreadable */
    bool unauthentic;              /* with a key: a valid record this key did not
                                      sign (unsigned, another key's, altered);
                                      not committed; see snap_refusal() */
    enum jobkey_auth auth;         /* what its record's signature says */
    struct commit commit;          /* when committed or unauthentic (owned) */
    unsigned manifests;            /* rank-<r>.json objects present */
    int64_t mtime_ms;              /* newest object of the generation */
    uint64_t stored_bytes;         /* of its manifests and commit record */
};

struct snap_saved {
    uint64_t gen;
    uint32_t rank;
    uint8_t sha256[CHUNK_HASH_LEN];    /* of the manifest as stored */
    uint64_t bytes;                    /* of the rank's files */
    uint64_t base_gen;                 /* deduplicated against; 0: none */
};

struct snap_gc_report {
    uint64_t gens_deleted, chunks_deleted, bytes_deleted;
    uint64_t gens_kept, chunks_kept;
    uint64_t gens_unauthentic;      /* kept (of gens_kept): not signed by the key */
    /* Objects in the job's tree that are not the store format's own
     * (jobtree.h), left alone: their keys, valid during the callback. */
    uint64_t foreign_bytes;
    const char *const *foreign;
    size_t n_foreign;
};

struct snap_verify_report {
    uint64_t files, chunks, bytes;
    uint64_t bad_chunks;            /* missing or corrupt */
    /* The generation's signature, once its record was read. */
    bool auth_known;
    enum jobkey_auth auth;
    char key_id[JOBKEY_ID_LEN + 1]; /* the record's, "" when unsigned */
};

typedef void (*snap_done_fn)(void *arg, int err, const char *msg);
typedef void (*snap_saved_fn)(void *arg, int err, const char *msg, const struct snap_saved *s);
/* gens become the callee's: free with snap_gens_free(); sorted by gen. */
typedef void (*snap_gens_fn)(void *arg, int err, const char *msg, struct snap_gen *gens,
                             size_t n);
typedef void (*snap_gc_fn)(void *arg, int err, const char *msg, const struct snap_gc_report *r);
typedef void (*snap_verify_fn)(void *arg, int err, const char *msg,
                               const struct snap_verify_report *r);

/* all: gens holds every generation of the job; false: only those from
 * the one <job>/LATEST names on (it is committed), the rest unlisted. */
typedef void (*snap_newest_fn)(void *arg, int err, const char *msg, struct snap_gen *gens,
                               size_t n, bool all);

/* Returns NULL with the reason in err. */
struct snap *snap_new(const struct snap_opts *o, char *err, size_t errlen);
/* Only when no operation is in flight, and not from inside one of its
 * callbacks.  Takes NULL, returns NULL. */
struct snap *snap_free(struct snap *s);

/* The generations under <job>/gens/, committed or not, with their commit
 * records. */
void snap_gens(struct snap *s, snap_gens_fn done, void *arg);
void snap_gens_free(struct snap_gen *gens, size_t n);

/* The newest generations in a few requests, whatever the number of
 * generations: <job>/LATEST names a generation, written after each
 * commit; once its commit record checks (valid, this job's and
 * generation's, signed by the key where one is set), the numbers above it
 * are listed (a few listings of ten numbers each) until eight in a row
 * are empty.  gens are those from the pointer's on, and all is false.
 * Where the pointer is missing or does not hold (another job's, garbage,
 * its record gone, corrupt or unauthentic), every generation is listed as
 * snap_gens() does, and all is true.  An error reading the store is an
 * error, never an empty job. */
void snap_gens_newest(struct snap *s, snap_newest_fn done, void *arg);

/* The generation the pointer document data[0..len) names for job
 * ({"format":1,"kind":"latest","job":J,"gen":G}): 0 and *ret_gen, or
 * -EINVAL with why (garbage, another job's, a newer format, a member
 * twice), *ret_gen untouched.  No I/O. */
#define LATEST_MAX 4096
int snap_latest_parse(const char *data, size_t len, const char *job, uint64_t *ret_gen,
                      const char **ret_why);
/* The objects under <job>/gens/ that the newest listing of generations (by
 * any operation of s) found not to be the store format's own (jobtree.h):
 * foreign, never part of a generation, never deleted.  Valid until the
 * next listing or snap_free(); returns how many. */
size_t snap_foreign(const struct snap *s, const struct store_entry **ret);

/* The line that says why unauthentic generation g is refused. */
void snap_refusal(const struct snap *s, const struct snap_gen *g, char *buf, size_t size);

/* The chunk size this snap cuts files at. */
uint32_t snap_chunk_size(const struct snap *s);

/* The id of the key this snap signs and checks with; NULL: none. */
const char *snap_key_id(const struct snap *s);

/* Claim the first free generation number at or above from, before
 * anything is stored under it (genclaim.h): two writers of one job never
 * get the same one.  gen is 0 on error. */
typedef void (*snap_claim_fn)(void *arg, int err, const char *msg, uint64_t gen);
void snap_claim(struct snap *s, uint64_t from, snap_claim_fn done, void *arg);
/* Give back a claimed generation that was never used (genclaim_withdraw). */
void snap_withdraw(struct snap *s, uint64_t gen, snap_done_fn done, void *arg);

/* Save the directory dir as rank of generation gen: regular files,
 * directories and symbolic links (anything else is refused), then the
 * rank's manifest.  The files must not change meanwhile (a file whose
 * size or mtime moves fails the save).  c may be NULL. */
struct snap_split;
struct snap_save_req {
    const char *dir;
    uint64_t gen;
    uint32_t rank;
    uint64_t step;
    const char *method;            /* "app", "criu", "manual" */
    /* A checkpoint that may be the same on every rank (data parallel)
     * is uploaded once, split across them: with share_count > 1 this save
     * stores only the chunks it owns (the first four bytes of a chunk's
     * hash, modulo share_count, equal share_index).  Once every chunk is
     * hashed and its own are stored, split() gets the fingerprint of the
     * rank's whole content (files and chunk hashes, not times), and the
     * save waits for snap_save_split(): when every rank's fingerprint is
     * the same, the others own and store the rest (rest false); else this
     * save stores them too (rest true).  Then the manifest. */
    uint32_t share_index, share_count;
    void (*split)(void *arg, struct snap_split *sp, const uint8_t fingerprint[32]);
    void *split_arg;
    /* Files that are not in dir: their bytes came as a stream (CRIU's
     * pages through spotd's image streamer) and every chunk of them was
     * stored with snap_put_chunk() for gen.  They join the manifest as
     * given (path, mode, mtime, chunks; size the chunks' sum): a chunk
     * that is neither zero nor stored for gen nor in the newest committed
     * generation fails the save, and so does a file of the same name in
     * dir.  Copied at the call; nothing of them is read from dir. */
    const struct mf_file *streamed;
    size_t n_streamed;
};
void snap_save(struct snap *s, const struct snap_save_req *req, struct snap_counters *c,
               snap_saved_fn done, void *arg);

/* Store now what a later snap_save() of gen into dir will hold of the
 * file dir/rel, while it is still being written: its chunks from byte
 * from on, whole chunks only unless final (the file is finished: chunked
 * as a save chunks it, zip restarts included, so from must be 0 for a
 * zip).  They go where a save's own do (deduplicated against the newest
 * committed generation), and the save that follows reads and hashes every
 * file as ever and finds them stored: it uploads only what was not stored
 * yet or changed since.  So a writer may go on changing the file (one
 * that seeks back and rewrites costs an upload, never a wrong
 * checkpoint), and an early store is never needed for correctness: its
 * failure is the save's to repair.  On success s->gen is gen and
 * s->bytes the offset stored up to (the next call's from); its other
 * fields are zero.  c may be NULL. */
void snap_prestore(struct snap *s, uint64_t gen, const char *dir, const char *rel, uint64_t from,
                   bool final, struct snap_counters *c, snap_saved_fn done, void *arg);

/* A chunk buffer for snap_put_chunk(): the chunk size and the room the
 * engine needs behind it.  snap_chunk_buf_put() takes back one that was
 * not put.  NULL: out of memory. */
uint8_t *snap_chunk_buf(struct snap *s);
void snap_chunk_buf_put(struct snap *s, uint8_t *buf);

/* c: the chunk's hash, length and whether it is all zeros; NULL on error. */
typedef void (*snap_chunk_fn)(void *arg, int err, const char *msg, const struct mf_chunk *c);

/* Store the len bytes in buf (a buffer from snap_chunk_buf(), len at most
 * the chunk size; taken, whatever the outcome) as a chunk of a later save
 * of gen, which names it in req->streamed: checked for zeros, hashed,
 * deduplicated against the newest committed generation and the chunks
 * stored for gen, and stored, on the pool like a save's own.  Nothing is
 * read from disk: bytes that arrive through a pipe are hashed once, where
 * they are.  name (the stream's) is for messages.  c may be NULL. */
void snap_put_chunk(struct snap *s, uint64_t gen, const char *name, uint8_t *buf, uint32_t len,
                    struct snap_counters *c, snap_chunk_fn done, void *arg);

/* After a split save's split(): go on (see struct snap_save_req). */
void snap_save_split(struct snap_split *sp, bool rest);

/* Write gen's commit record after checking that every rank's manifest is
 * in the store with the digest given in ranks[r], signed when this snap
 * has a key (c's own signature fields are ignored).  c->job and c->gen
 * must be this snap's job and the generation.  Where the store creates
 * conditionally (snap_claim() found out), the record is created only where
 * none is: one already there for the same manifests (this writer's, whose
 * answer was lost, or a new coordinator's) is success; another's is
 * -EEXIST, and nothing is overwritten. */
void snap_commit(struct snap *s, const struct commit *c, snap_done_fn done, void *arg);

/* Restore rank of committed generation gen into dest, which must not
 * exist (or be an empty directory): files with their sizes, modes and
 * mtimes, zero runs as holes.  Everything is written beside dest and
 * renamed into place at the end, so dest is whole or absent.
 *
 * gen 0, here and in snap_verify() and snap_manifests(), is the newest
 * generation with a valid commit record; an unauthentic one is refused
 * with -EKEYREJECTED and snap_refusal()'s line, whether named or newest.
 *
 * The manifest is untrusted, so before anything is written the restore
 * refuses one that it cannot restore exactly or safely: a path that
 * would not fit in PATH_MAX under dest (-ENAMETOOLONG; never a cut name),
 * a link that leads out of dest (-EPERM, manifest_link_inside()), an
 * entry below one that is not a directory (-EINVAL), sizes that disagree
 * with the commit record (-EBADMSG) or that dest's filesystem cannot
 * hold, counted as declared, holes included (-ENOSPC).  Modes lose
 * setuid, setgid, sticky and others' write unless
 * preserve_special_modes. */
void snap_restore(struct snap *s, uint64_t gen, uint32_t rank, const char *dest,
                  struct snap_counters *c, snap_done_fn done, void *arg);

/* snap_restore() and snap_check() less the regular files whose path
 * matches leave (fnmatch(3), FNM_PATHNAME): not written, not compared,
 * as if the manifest did not list them (a snap_stream() reads one of
 * them later).  The manifest is still checked whole against the commit
 * record.  NULL leaves nothing out. */
void snap_restore_leaving(struct snap *s, uint64_t gen, uint32_t rank, const char *dest,
                          const char *leave, struct snap_counters *c, snap_done_fn done,
                          void *arg);
void snap_check_leaving(struct snap *s, uint64_t gen, uint32_t rank, const char *dir,
                        const char *leave, snap_done_fn done, void *arg);

/* Is dir an exact copy of rank of committed generation gen?  Its manifest
 * is fetched (and checked against the commit record), then dir is read
 * and compared (dircheck.h).  err is -EBADMSG when dir differs, -ENOENT
 * when it is gone, or the store's error. */
void snap_check(struct snap *s, uint64_t gen, uint32_t rank, const char *dir,
                snap_done_fn done, void *arg);

/* Fetch and check every chunk of every rank of committed generation gen.
 * err is -EBADMSG when something is missing or corrupt (the report says
 * how much, and what the record's signature says). */
void snap_verify(struct snap *s, uint64_t gen, struct snap_counters *c, snap_verify_fn done,
                 void *arg);

/* One file of a committed generation, read in order, as a restore reads
 * it but into no file: CRIU's restore takes its pages through a pipe
 * (supervisord/imgstream.c).  The chunks are fetched a few ahead, each
 * checked against its hash (a bad copy fetched again, as a restore does)
 * before fn sees it; zero runs come as zeros.  fn gets the next len bytes
 * (valid until snap_stream_next()); then, once, data NULL and len 0 with
 * err 0 at the end, or err and msg (a chunk missing or corrupt, the
 * store's error).  fn is called from the loop only, never from inside a
 * snap_stream call. */
struct snap_stream;
typedef void (*snap_stream_fn)(void *arg, int err, const char *msg, const uint8_t *data,
                               size_t len);
/* f: a regular file of a manifest that snap_manifests() checked; copied.
 * c may be NULL.  NULL: out of memory. */
struct snap_stream *snap_stream_open(struct snap *s, const struct mf_file *f,
                                     struct snap_counters *c, snap_stream_fn fn, void *arg);
/* The consumer is done with the bytes fn gave it: the next come. */
void snap_stream_next(struct snap_stream *ss);
/* fn is not called again; chunks being fetched end on their own
 * (snap_streams_live()).  Takes NULL. */
void snap_stream_free(struct snap_stream *ss);
/* Streams freed or not whose fetches have not all ended: the snap must
 * outlive them. */
unsigned snap_streams_live(void);

/* The commit record and the manifests of every rank of committed
 * generation gen, each manifest checked against
 * the digest its commit record holds; no chunk is fetched.  On success
 * c and mfs (c->world_size of them) are valid during the call. */
typedef void (*snap_manifests_fn)(void *arg, int err, const char *msg, const struct commit *c,
                                  const struct manifest *mfs);
void snap_manifests(struct snap *s, uint64_t gen, snap_manifests_fn done, void *arg);

/* Keep the newest keep committed generations (and any uncommitted one
 * newer than them, which may be in progress); delete the others, commit
 * record first, then every chunk that no kept generation references and
 * that is older than grace_ms.  Unauthentic generations are kept, never
 * counted among the keep, and so are the chunks they reference (they may
 * be real ones under another key: an operator decides).  dry_run: report
 * only.
 *
 * spare (NULL: none) names committed generations that must stay whatever
 * keep says, and that do not count among the keep newest: spotd spares
 * every generation newer than the one it resumed from that it did not
 * write itself (docs/store-format.md, retention). */
struct snap_gc_opts {
    unsigned keep;
    int64_t grace_ms;
    bool dry_run;
    bool (*spare)(void *arg, uint64_t gen);
    void *spare_arg;
};
void snap_gc(struct snap *s, const struct snap_gc_opts *o, snap_gc_fn done, void *arg);

#endif
