/* linktree: name a file or a tree again (link -r), or copy it where it
 * cannot be linked, or remove one.  A checkpoint's few files are linked in microseconds,
 * whatever their size; a copy reads every byte (blocking). */
#ifndef SPOT_LINKTREE_H
#define SPOT_LINKTREE_H

/* Links src (a file, a symlink, or a directory and all below it) as dst,
 * which must not exist; directories are made with src's permission bits.
 * Returns 0 or -errno (-EXDEV: another file system). */
int linktree_link(const char *src, const char *dst);

/* The same, copying file data where linking fails (another file system, a
 * file system without hard links). */
int linktree_copy(const char *src, const char *dst);

/* Copies the data of the regular file src (a reflink where the file
 * system can) as dst, which must not exist.  0 or -errno. */
int linktree_copy_file(const char *src, const char *dst);

/* rm -rf path: a file, or a directory and all below (symlinks are not
 * followed); what cannot be removed is logged. */
void linktree_remove(const char *path);

/* Removes each entry of dir whose name starts with "gen-", but keep (a
 * path as dir/NAME, or NULL). */
void linktree_prune_gens(const char *dir, const char *keep);

#endif
