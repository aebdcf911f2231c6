/* follow: store a checkpoint's files while the trainer is still writing
 * them.
 *
 * From the moment spotd asks for a save until the trainer reports it,
 * the folder the trainer writes into is watched (inotify, and every
 * FOLLOW_POLL_MS the size of each file open for writing, since one
 * write() of a whole state says nothing until it returns), and each
 * file's whole chunks go to snap_prestore() as the file grows; the rest
 * once the file is closed after writing, or once the trainer says it is
 * finished (ckpt_file_done()).  The save that follows (snap_save()) finds
 * those chunks stored and uploads only what is left, so the upload runs
 * beside the write instead of after it.
 *
 * Nothing here is needed for correctness: the save reads and hashes every
 * file as ever, so a chunk that changed after it was stored early (a
 * writer that seeks back and rewrites) is stored again by the save, and
 * an early store that fails is the save's to do.  A zip (torch.save) is
 * chunked at its entries, which only its end says: it is stored once it
 * is finished. */
#ifndef SPOTD_FOLLOW_H
#define SPOTD_FOLLOW_H

#include <stdint.h>

#include "spot/snap.h"

struct event_base;
struct follow;

#define FOLLOW_POLL_MS 20

/* Follow dir (and the folders made in it) for generation gen; NULL when
 * inotify cannot (the save goes on without). */
struct follow *follow_start(struct event_base *base, struct snap *snap, uint64_t gen,
                            const char *dir);
/* The trainer says path (absolute, or relative to dir) is finished. */
void follow_file_done(struct follow *f, const char *path);
/* Stop following; early stores under way end on their own (the save
 * waits for their chunks).  Takes NULL, returns NULL. */
struct follow *follow_stop(struct follow *f);
/* Follows stopped whose early stores have not all ended yet, and running
 * ones: the snap must outlive them. */
unsigned follow_live(void);

#endif
