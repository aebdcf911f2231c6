/* imgstream: CRIU's images through spotd, not through files.
 *
 * `criu dump --stream` hands each image it writes to an image streamer:
 * it connects to DIR/streamer-capture.sock, names the image and passes
 * the read end of a pipe the image's bytes flow through (CRIU's
 * criu/img-streamer.c; the protocol of criu-image-streamer).  spotd is
 * that streamer.  The small images go to files in DIR, as a dump without
 * --stream leaves them; the pages (pages-*.img, nearly all the bytes) are
 * cut into chunks as they arrive and stored with snap_put_chunk(): hashed
 * once, in the buffer they were read into, uploaded while CRIU still
 * dumps, and never written to DIR nor read back.  The save names them
 * (snap_save_req.streamed).
 *
 * `criu restore --stream` asks for its images the same way, through
 * DIR/streamer-serve.sock: for each it names, spotd answers whether it is
 * there and writes it into the pipe CRIU passes.  The generation was
 * restored into DIR without its pages (snap_restore_leaving()); those
 * come from the store chunk by chunk (snap_stream_open()), each checked
 * against its hash before CRIU reads it, none written to disk.
 *
 * Reading waits while IMGSTREAM_PUTS chunks are being stored: CRIU then
 * waits on the pipe, so memory stays bounded and a slow store slows the
 * dump, which is why only the last dump before a stop (the tree stays
 * stopped anyway) streams by default (--criu-stream). */
#ifndef SPOTD_IMGSTREAM_H
#define SPOTD_IMGSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spot/snap.h"

struct event_base;
struct imgstream;

#define IMGSTREAM_PUTS 8
#define IMGSTREAM_SOCKET "streamer-capture.sock"
#define IMGSERVE_SOCKET "streamer-serve.sock"
/* What a restore that serves its pages leaves out of DIR. */
#define IMGSERVE_LEAVE "pages-*.img"

/* err 0, or -errno with msg: the stream failed (a bad image name, a
 * write, an upload); its images are not a dump. */
typedef void (*imgstream_fn)(void *arg, int err, const char *msg);

/* Listen for CRIU in dir (which exists) for a dump that becomes
 * generation gen.  NULL with err when it cannot (a path too long for a
 * socket): the dump then goes to files. */
struct imgstream *imgstream_start(struct event_base *base, struct snap *snap, uint64_t gen,
                                  const char *dir, char *err, size_t errlen);
/* CRIU has exited: done once every image has ended and its chunks are
 * stored (at once when they have; never from inside this call). */
void imgstream_finish(struct imgstream *st, imgstream_fn done, void *arg);
/* The streamed files, for the save (valid until imgstream_free()), and
 * what storing them cost, added into c. */
const struct mf_file *imgstream_files(const struct imgstream *st, size_t *n,
                                      struct snap_counters *c);
/* Stops listening and reading; chunks being stored end on their own
 * (imgstream_live() says how many streams have not).  Takes NULL,
 * returns NULL. */
struct imgstream *imgstream_free(struct imgstream *st);
/* Streams not gone yet: running ones, and freed ones whose puts have
 * not all ended.  The snap must outlive them. */
unsigned imgstream_live(void);

/* ---- restore ---- */

struct imgserve;

/* Whether dir is short enough a path for the serving socket. */
bool imgstream_serve_fits(const char *dir);
/* Serve the images of rank of generation gen to `criu restore --stream
 * -D dir`: dir's files as they are, the pages (pages-*.img of the rank's
 * manifest, left out of dir) from the store.  Listening when it returns;
 * the manifest is fetched meanwhile (CRIU's first request waits for it).
 * A failure is logged, ends the connection, so that the restore fails
 * rather than restore something else, and calls failed(arg) once.  NULL with err when it cannot
 * listen. */
struct imgserve *imgstream_serve(struct event_base *base, struct snap *snap, uint64_t gen,
                                 uint32_t rank, const char *dir, void (*failed)(void *arg),
                                 void *arg, char *err, size_t errlen);
/* Takes NULL, returns NULL.  Counted by imgstream_live() until its
 * fetches end. */
struct imgserve *imgstream_serve_free(struct imgserve *sv);

#endif
