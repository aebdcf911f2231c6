/* bigbuf: chunk-sized buffers on huge pages where the kernel allows, the
 * last ones freed kept for the next. */
#include "spot/bigbuf.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define KEEP_SLOTS 32

static struct kept {
    void *b;
    size_t size;                  /* malloc_usable_size() */
} kept[KEEP_SLOTS];
static unsigned n_kept;
static size_t kept_bytes;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t align_for(size_t len)
{
    return len >= BIGBUF_HUGE ? BIGBUF_HUGE : 4096;
}

/* The smallest kept buffer of len bytes or more, aligned for len, or
 * NULL.  One serves a request of at least half its size, so that a
 * chunk's buffer is not spent on a small one. */
static void *take(size_t len)
{
    size_t align = align_for(len), best = 0;
    void *b = NULL;

    pthread_mutex_lock(&kept_lock);
    for (unsigned i = 0; i < n_kept; i++) {
        struct kept *k = &kept[i];

        if (k->size >= len && k->size / 2 <= len && (uintptr_t)k->b % align == 0 &&
            (!b || k->size < kept[best].size)) {
            b = k->b;
            best = i;
        }
    }
    if (b) {
        kept_bytes -= kept[best].size;
        kept[best] = kept[--n_kept];
    }
    pthread_mutex_unlock(&kept_lock);
    return b;
}

void *bigbuf_alloc(size_t len)
{
    size_t align = align_for(len);
    void *b;
    int e;

    if (len < BIGBUF_MIN)
        return malloc(len);
    if ((b = take(len)))
        return b;
    if ((e = posix_memalign(&b, align, len)) != 0) {
        errno = e;
        return NULL;
    }
    /* Only advice: without transparent huge pages it fails or does
     * nothing, and the buffer works the same. */
    if (align == BIGBUF_HUGE)
        (void)madvise(b, len, MADV_HUGEPAGE);
    return b;
}

void bigbuf_free(void *b)
{
    size_t size;

    if (!b)
        return;
    size = malloc_usable_size(b);
    /* Only what bigbuf_alloc() could have made: big, and on a page. */
    if (size >= BIGBUF_MIN && (uintptr_t)b % 4096 == 0) {
        pthread_mutex_lock(&kept_lock);
        if (n_kept < KEEP_SLOTS && kept_bytes + size <= BIGBUF_KEEP_BYTES) {
            kept[n_kept++] = (struct kept){b, size};
            kept_bytes += size;
            b = NULL;
        }
        pthread_mutex_unlock(&kept_lock);
    }
    free(b);
}

void bigbuf_trim(void)
{
    struct kept all[KEEP_SLOTS];
    unsigned n;

    pthread_mutex_lock(&kept_lock);
    n = n_kept;
    for (unsigned i = 0; i < n; i++)
        all[i] = kept[i];
    n_kept = 0;
    kept_bytes = 0;
    pthread_mutex_unlock(&kept_lock);
    for (unsigned i = 0; i < n; i++)
        free(all[i].b);
}

unsigned bigbuf_kept(void)
{
    unsigned n;

    pthread_mutex_lock(&kept_lock);
    n = n_kept;
    pthread_mutex_unlock(&kept_lock);
    return n;
}
