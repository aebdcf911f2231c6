/* bigbuf: memory for a whole chunk (megabytes).
 *
 * A fresh multi-megabyte buffer costs a page fault per 4 KiB on first
 * touch; on a virtual machine each fault is an exit, and a restore that
 * receives 1 GiB into fresh buffers spent more time faulting than
 * receiving.  A buffer of 2 MiB or more starts on a 2 MiB boundary and
 * asks for transparent huge pages (MADV_HUGEPAGE, which is what most
 * distributions' "madvise" setting waits for): one fault per 2 MiB.
 * Every buffer starts on a page, so that it can be written with O_DIRECT.
 *
 * Even on huge pages the kernel zeroes every page a fresh buffer gets,
 * and a host that took freed memory back (free page reporting) makes that
 * slow and uneven: a file-store restore spent a quarter of its time
 * there.  So bigbuf_free() keeps a few buffers (BIGBUF_KEEP_BYTES in
 * all) for the next bigbuf_alloc() of about their size, on any thread;
 * bigbuf_trim() gives them back, for when the work is done. */
#ifndef SPOT_BIGBUF_H
#define SPOT_BIGBUF_H

#include <stddef.h>

/* BIGBUF_MIN bytes or more: page-aligned; BIGBUF_HUGE or more: huge-page
 * aligned and advised.  Below BIGBUF_MIN it is plain malloc().  Returns
 * NULL (errno ENOMEM) when there is no memory. */
#define BIGBUF_MIN (256u * 1024)
#define BIGBUF_HUGE (2u * 1024 * 1024)
#define BIGBUF_KEEP_BYTES (128u * 1024 * 1024)
void *bigbuf_alloc(size_t len);

/* Free a buffer of bigbuf_alloc() (or of malloc(): free() is as good for
 * either; only this one keeps it for the next).  Takes NULL. */
void bigbuf_free(void *b);

/* The most one write(2) through the page cache should carry.  The
 * kernel sizes the page-cache folios a write fills by the write's length
 * (ext4 and xfs take large folios): an 8 MiB write gets 2 MiB folios,
 * which come from the large free blocks that a virtual machine's free
 * page reporting has handed back to the host, and the host faults each
 * in again as the copy touches it.  A 1 GiB file-store restore took 2.1 s
 * in 8 MiB writes and 0.8 s in 16 KiB ones (curl's write size, 1.3 s for
 * curl), tests/bench/README.md.  O_DIRECT writes do not go through the
 * page cache and keep their size. */
#define BIGBUF_CACHED_WRITE (16u * 1024)

/* Free every buffer kept. */
void bigbuf_trim(void);

/* How many buffers are kept now (for tests). */
unsigned bigbuf_kept(void);

#endif
