/* zipgrid: where the chunk grid of a zip file should restart.
 *
 * torch.save writes a zip: a pickle first, then every tensor as an entry
 * of its own, 64-byte aligned.  When the pickle grows (a longer string, one
 * more key), every tensor after it moves, and a grid of fixed chunks from
 * offset 0 would see every chunk change.  Restarting the grid at the data
 * of each large entry keeps an unchanged tensor's chunks identical wherever
 * it moved (tests/bench/chunking.sh: 100 % re-uploaded without, the floor
 * of 75 % with, on a half-frozen model).
 *
 * The file is untrusted: anything that does not parse as a zip whose
 * entries lie inside the file gives no restart points, and the caller
 * falls back to the plain grid.  No allocation grows with what the file
 * claims beyond ZIPGRID_MAX_ENTRIES. */
#ifndef SPOT_ZIPGRID_H
#define SPOT_ZIPGRID_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ZIPGRID_MAX_ENTRIES 65536
#define ZIPGRID_MAX_CDIR (16u * 1024 * 1024)

/* Read len bytes at off into buf; returns the bytes read or -1. */
typedef ssize_t (*zipgrid_read_fn)(void *ctx, void *buf, size_t len, uint64_t off);

/* The data offsets of the entries of at least min_entry bytes, sorted,
 * unique, each in (0, size).  Returns 0 with *ret (malloc'ed, NULL when
 * none) and *n set, -EINVAL when the file is not a usable zip, -ENOMEM. */
int zipgrid_restarts(zipgrid_read_fn rd, void *ctx, uint64_t size, uint64_t min_entry,
                     uint64_t **ret, size_t *n);

#endif
