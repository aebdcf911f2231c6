/* snap_stream: one file of a committed generation, read in order into no
 * file (snap_stream_open() in snap.h).
 *
 * DESIGN.  A ring of STREAM_AHEAD slots holds the chunks from the one
 * the consumer gets next (give) to the one fetched last (get): each is
 * fetched, then decoded and checked against its hash on the pool, and
 * given to fn in order once it and all before it have been.  A zero run
 * is a slot that is ready at once, pointing at a buffer of zeros.  fn is
 * called from an event of its own, so never from inside a call of the
 * consumer's.  Freed with fetches or checks under way, a stream lingers,
 * unseen, until they end. */
#include "spot/snap.h"

#include <errno.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spot/bigbuf.h"
#include "spot/chunk.h"
#include "spot/hash.h"
#include "spot/pool.h"
#include "spot/store.h"

#include "snap_impl.h"

#define STREAM_AHEAD 8
#define REFETCH_MAX 2               /* as a restore: a bad copy is fetched again */

struct sslot {
    struct pool_job job;
    struct snap_stream *ss;
    size_t idx;
    uint64_t off;
    void *data;                     /* as fetched */
    size_t len;
    const void *plain;              /* into data, owned, or the zeros */
    void *owned;
    unsigned refetch;
    int err;
    bool ready;
};

struct snap_stream {
    struct snap *s;
    struct mf_file f;               /* a copy: path and chunks */
    struct snap_counters *c, own;
    snap_stream_fn fn;
    void *arg;
    struct event *give_ev;
    size_t give, get;               /* chunk indices */
    uint64_t get_off;
    bool held;                      /* fn has the slot of give */
    bool ended;                     /* fn had its last call */
    bool freed;
    unsigned busy;                  /* slots being fetched or checked */
    uint8_t *zeros;
    int err;
    char msg[MSG_MAX];
    struct sslot slots[STREAM_AHEAD];
};

static unsigned n_live;

static void pump(struct snap_stream *ss);
static void fetch_slot(struct sslot *sl);
static void on_got(void *arg, int err, const char *msg, void *data, size_t len);
static void check_work(struct pool_job *job);
static void check_done(struct pool_job *job);
static void on_give(evutil_socket_t fd, short what, void *arg);
static void slot_clear(struct sslot *sl);
static void stream_destroy(struct snap_stream *ss);

static void stream_fail(struct snap_stream *ss, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void stream_fail(struct snap_stream *ss, int err, const char *fmt, ...)
{
    va_list ap;

    if (ss->err)
        return;
    ss->err = err;
    va_start(ap, fmt);
    vsnprintf(ss->msg, sizeof(ss->msg), fmt, ap);
    va_end(ap);
    event_active(ss->give_ev, 0, 0);
}

struct snap_stream *snap_stream_open(struct snap *s, const struct mf_file *f,
                                     struct snap_counters *c, snap_stream_fn fn, void *arg)
{
    struct snap_stream *ss = calloc(1, sizeof(*ss));

    if (!ss)
        return NULL;
    ss->s = s;
    ss->f = *f;
    ss->f.target = NULL;
    ss->f.chunks = NULL;
    ss->c = c ? c : &ss->own;
    ss->fn = fn;
    ss->arg = arg;
    if (!(ss->f.path = strdup(f->path ? f->path : "")) ||
        (f->n_chunks && !(ss->f.chunks = malloc(f->n_chunks * sizeof(*f->chunks)))) ||
        !(ss->give_ev = event_new(s->base, -1, 0, on_give, ss))) {
        free(ss->f.path);
        free(ss->f.chunks);
        free(ss);
        return NULL;
    }
    if (f->n_chunks)
        memcpy(ss->f.chunks, f->chunks, f->n_chunks * sizeof(*f->chunks));
    for (size_t i = 0; i < STREAM_AHEAD; i++) {
        ss->slots[i].ss = ss;
        ss->slots[i].job.work = check_work;
        ss->slots[i].job.done = check_done;
    }
    n_live++;
    if (f->type != MF_FILE)
        stream_fail(ss, -EINVAL, "'%s' is not a regular file", ss->f.path);
    pump(ss);
    event_active(ss->give_ev, 0, 0);
    return ss;
}

void snap_stream_next(struct snap_stream *ss)
{
    if (!ss->held)
        return;
    slot_clear(&ss->slots[ss->give % STREAM_AHEAD]);
    ss->give++;
    ss->held = false;
    pump(ss);
    event_active(ss->give_ev, 0, 0);
}

void snap_stream_free(struct snap_stream *ss)
{
    if (!ss)
        return;
    ss->freed = true;
    event_del(ss->give_ev);
    if (!ss->busy)
        stream_destroy(ss);
}

unsigned snap_streams_live(void)
{
    return n_live;
}

/* Start fetching the chunks the ring has room for. */
static void pump(struct snap_stream *ss)
{
    while (!ss->err && ss->get < ss->f.n_chunks && ss->get - ss->give < STREAM_AHEAD) {
        struct sslot *sl = &ss->slots[ss->get % STREAM_AHEAD];
        const struct mf_chunk *ch = &ss->f.chunks[ss->get];

        sl->idx = ss->get;
        sl->off = ss->get_off;
        sl->refetch = 0;
        sl->err = 0;
        ss->get++;
        ss->get_off += ch->len;
        if (ch->zero) {
            if (!ss->zeros && !(ss->zeros = calloc(1, ss->s->chunk_size > ch->len
                                                          ? ss->s->chunk_size : ch->len))) {
                stream_fail(ss, -ENOMEM, "out of memory");
                return;
            }
            if (ch->len > ss->s->chunk_size) {
                stream_fail(ss, -EBADMSG, "'%s': chunk %zu is longer than the chunk size",
                            ss->f.path, sl->idx);
                return;
            }
            sl->plain = ss->zeros;
            sl->ready = true;
            ss->c->bytes_zero += ch->len;
            continue;
        }
        ss->busy++;
        fetch_slot(sl);
    }
}

static void fetch_slot(struct sslot *sl)
{
    struct snap_stream *ss = sl->ss;
    const struct mf_chunk *ch = &ss->f.chunks[sl->idx];
    char key[STORE_KEY_MAX + 1];

    snap_chunk_key(ss->s, ch->hash, key, sizeof(key));
    /* At most its plaintext and its trailer (raw), or less (zstd). */
    store_get(ss->s->store, key, (size_t)ch->len + CHUNK_TRAILER_LEN, on_got, sl);
}

static void on_got(void *arg, int err, const char *msg, void *data, size_t len)
{
    struct sslot *sl = arg;
    struct snap_stream *ss = sl->ss;
    char hex[2 * CHUNK_HASH_LEN + 1];

    if (err || ss->freed || ss->err) {
        bigbuf_free(data);
        if (err && !ss->freed) {
            hash_hex(ss->f.chunks[sl->idx].hash, hex);
            if (err == -ENOENT || err == -EFBIG)
                stream_fail(ss, -EBADMSG, "chunk %s of '%s' (offset %llu) is %s the store",
                            hex, ss->f.path, (unsigned long long)sl->off,
                            err == -ENOENT ? "missing from" : "corrupt in");
            else
                stream_fail(ss, err, "%s", msg);
        }
        if (--ss->busy == 0 && ss->freed)
            stream_destroy(ss);
        return;
    }
    ss->c->bytes_received += len;
    sl->data = data;
    sl->len = len;
    sl->job.cancelled = false;
    pool_submit(ss->s->pool, &sl->job);
}

/* Pool: decode, and check against the manifest's hash. */
static void check_work(struct pool_job *job)
{
    struct sslot *sl = (struct sslot *)job;
    const struct mf_chunk *ch = &sl->ss->f.chunks[sl->idx];
    size_t len;

    sl->err = chunk_decode_view(sl->data, sl->len, ch->hash, &sl->plain, &len, &sl->owned);
    if (sl->err == 0 && len != ch->len)
        sl->err = -EBADMSG;
}

static void check_done(struct pool_job *job)
{
    struct sslot *sl = (struct sslot *)job;
    struct snap_stream *ss = sl->ss;
    char hex[2 * CHUNK_HASH_LEN + 1];

    if (!ss->freed && !ss->err && sl->err == -EBADMSG && sl->refetch < REFETCH_MAX) {
        /* Damaged on the way, perhaps: fetch it again before calling the
         * stored copy corrupt. */
        sl->refetch++;
        ss->c->retries++;
        free(sl->owned);
        bigbuf_free(sl->data);
        sl->owned = sl->data = NULL;
        sl->plain = NULL;
        sl->err = 0;
        fetch_slot(sl);
        return;
    }
    ss->busy--;
    if (ss->freed) {
        slot_clear(sl);
        if (!ss->busy)
            stream_destroy(ss);
        return;
    }
    if (job->cancelled) {
        stream_fail(ss, -ECANCELED, "cancelled");
    } else if (sl->err) {
        hash_hex(ss->f.chunks[sl->idx].hash, hex);
        if (sl->err == -EBADMSG)
            stream_fail(ss, -EBADMSG, "chunk %s of '%s' (offset %llu) is corrupt in the store",
                        hex, ss->f.path, (unsigned long long)sl->off);
        else
            stream_fail(ss, sl->err, "chunk %s of '%s': %s", hex, ss->f.path,
                        sl->err == -ENOMEM ? "out of memory" : strerror(-sl->err));
    } else {
        ss->c->bytes_hashed += ss->f.chunks[sl->idx].len;
        ss->c->chunks++;
        sl->ready = true;
        event_active(ss->give_ev, 0, 0);
    }
}

/* From the loop: the next chunk, the end or the error, to fn. */
static void on_give(evutil_socket_t fd, short what, void *arg)
{
    struct snap_stream *ss = arg;
    struct sslot *sl = &ss->slots[ss->give % STREAM_AHEAD];

    (void)fd;
    (void)what;
    if (ss->freed || ss->ended || ss->held)
        return;
    if (ss->err) {
        ss->ended = true;
        ss->fn(ss->arg, ss->err, ss->msg, NULL, 0);
        return;
    }
    if (ss->give == ss->f.n_chunks) {
        ss->ended = true;
        ss->fn(ss->arg, 0, "", NULL, 0);
        return;
    }
    if (!sl->ready || sl->idx != ss->give)
        return;
    ss->held = true;
    ss->fn(ss->arg, 0, "", sl->plain, ss->f.chunks[sl->idx].len);
}

static void slot_clear(struct sslot *sl)
{
    free(sl->owned);
    bigbuf_free(sl->data);
    sl->owned = sl->data = NULL;
    sl->plain = NULL;
    sl->ready = false;
}

static void stream_destroy(struct snap_stream *ss)
{
    for (size_t i = 0; i < STREAM_AHEAD; i++)
        slot_clear(&ss->slots[i]);
    event_free(ss->give_ev);
    free(ss->zeros);
    free(ss->f.path);
    free(ss->f.chunks);
    free(ss);
    n_live--;
}
