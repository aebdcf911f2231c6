/* zipgrid: the data offsets of a zip's large entries (see zipgrid.h).
 *
 * Read from the end: the end-of-central-directory record (and its zip64
 * locator and record when the file is large), then the central directory,
 * then each large entry's local header, whose name and extra fields decide
 * where the entry's data starts (torch pads the local extra field to align
 * tensors, so the central directory alone does not say). */
#include "spot/zipgrid.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define EOCD_SIG 0x06054b50u
#define EOCD_LEN 22
#define LOC64_SIG 0x07064b50u
#define LOC64_LEN 20
#define EOCD64_SIG 0x06064b50u
#define EOCD64_LEN 56
#define CDIR_SIG 0x02014b50u
#define CDIR_LEN 46
#define LOCAL_SIG 0x04034b50u
#define LOCAL_LEN 30
#define TAIL_MAX (EOCD_LEN + 65535)

static uint16_t le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static bool read_all(zipgrid_read_fn rd, void *ctx, void *buf, size_t len, uint64_t off)
{
    return rd(ctx, buf, len, off) == (ssize_t)len;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* The zip64 extended information of a central directory entry: the
 * values whose 32-bit fields are all ones, in the order of the spec. */
static bool zip64_extra(const uint8_t *extra, size_t len, bool need_usize, bool need_csize,
                        bool need_off, uint64_t *csize, uint64_t *off)
{
    for (size_t i = 0; i + 4 <= len;) {
        uint16_t id = le16(extra + i), sz = le16(extra + i + 2);
        const uint8_t *v = extra + i + 4;
        size_t k = 0;

        if (i + 4 + sz > len)
            return false;
        if (id == 0x0001) {
            if (need_usize)
                k += 8;
            if (need_csize) {
                if (k + 8 > sz)
                    return false;
                *csize = le64(v + k);
                k += 8;
            }
            if (need_off) {
                if (k + 8 > sz)
                    return false;
                *off = le64(v + k);
            }
            return true;
        }
        i += 4 + (size_t)sz;
    }
    return false;
}

int zipgrid_restarts(zipgrid_read_fn rd, void *ctx, uint64_t size, uint64_t min_entry,
                     uint64_t **ret, size_t *n)
{
    uint8_t *tail = NULL, *cdir = NULL, rec[EOCD64_LEN];
    size_t tail_len = size < TAIL_MAX ? (size_t)size : TAIL_MAX, eocd = SIZE_MAX, count = 0;
    uint64_t entries, cd_size, cd_off, *out = NULL;
    int r = -EINVAL;

    *ret = NULL;
    *n = 0;
    if (size < EOCD_LEN)
        return -EINVAL;
    if (!(tail = malloc(tail_len)))
        return -ENOMEM;
    if (!read_all(rd, ctx, tail, tail_len, size - tail_len))
        goto out;
    /* The last record signature whose comment reaches the end exactly. */
    for (size_t i = tail_len - EOCD_LEN + 1; i-- > 0;) {
        if (le32(tail + i) == EOCD_SIG && i + EOCD_LEN + le16(tail + i + 20) == tail_len) {
            eocd = i;
            break;
        }
    }
    if (eocd == SIZE_MAX)
        goto out;
    entries = le16(tail + eocd + 10);
    cd_size = le32(tail + eocd + 12);
    cd_off = le32(tail + eocd + 16);
    if (entries == 0xffff || cd_size == 0xffffffffu || cd_off == 0xffffffffu) {
        uint64_t loc_at = size - tail_len + eocd, rec_at;

        if (loc_at < LOC64_LEN || !read_all(rd, ctx, rec, LOC64_LEN, loc_at - LOC64_LEN) ||
            le32(rec) != LOC64_SIG)
            goto out;
        rec_at = le64(rec + 8);
        if (rec_at > size - EOCD64_LEN || !read_all(rd, ctx, rec, EOCD64_LEN, rec_at) ||
            le32(rec) != EOCD64_SIG)
            goto out;
        entries = le64(rec + 32);
        cd_size = le64(rec + 40);
        cd_off = le64(rec + 48);
    }
    if (entries == 0 || entries > ZIPGRID_MAX_ENTRIES || cd_size > ZIPGRID_MAX_CDIR ||
        cd_size < entries * CDIR_LEN || cd_off > size || cd_size > size - cd_off)
        goto out;
    if (!(cdir = malloc((size_t)cd_size)) || !(out = malloc(entries * sizeof(*out)))) {
        r = -ENOMEM;
        goto out;
    }
    if (!read_all(rd, ctx, cdir, (size_t)cd_size, cd_off))
        goto out;
    for (size_t p = 0, e = 0; e < entries; e++) {
        const uint8_t *h = cdir + p;
        uint64_t csize, off;
        size_t name, extra, comment;
        uint8_t local[LOCAL_LEN];

        if (p + CDIR_LEN > cd_size || le32(h) != CDIR_SIG)
            goto out;
        name = le16(h + 28);
        extra = le16(h + 30);
        comment = le16(h + 32);
        if (p + CDIR_LEN + name + extra + comment > cd_size)
            goto out;
        csize = le32(h + 20);
        off = le32(h + 42);
        if ((csize == 0xffffffffu || off == 0xffffffffu) &&
            !zip64_extra(h + CDIR_LEN + name, extra, le32(h + 24) == 0xffffffffu,
                         csize == 0xffffffffu, off == 0xffffffffu, &csize, &off))
            goto out;
        p += CDIR_LEN + name + extra + comment;
        if (csize < min_entry)
            continue;
        /* The data begins after the local header and its own name and
         * extra fields; it must lie inside the file. */
        if (off > size - LOCAL_LEN || !read_all(rd, ctx, local, LOCAL_LEN, off) ||
            le32(local) != LOCAL_SIG)
            goto out;
        off += LOCAL_LEN + (uint64_t)le16(local + 26) + le16(local + 28);
        if (off == 0 || off >= size || csize > size - off)
            goto out;
        out[count++] = off;
    }
    if (count > 1) {
        size_t j = 1;

        qsort(out, count, sizeof(*out), cmp_u64);
        for (size_t i = 1; i < count; i++)
            if (out[i] != out[j - 1])
                out[j++] = out[i];
        count = j;
    }
    r = 0;
out:
    free(tail);
    free(cdir);
    if (r == 0 && count > 0) {
        *ret = out;
        *n = count;
    } else {
        free(out);
    }
    return r;
}
