/* dircheck: a local directory against a manifest (see dircheck.h). */
#include "spot/dircheck.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spot/chunk.h"
#include "spot/manifest.h"

/* Directories nested deeper than this are not walked (nor restored). */
#define WALK_DEPTH_MAX 64

struct check {
    const struct manifest *m;
    char *why;
    size_t whylen;
};

static int differ(struct check *k, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int differ(struct check *k, int err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(k->why, k->whylen, fmt, ap);
    va_end(ap);
    return err;
}

static int read_full(int fd, uint8_t *buf, size_t len, uint64_t off)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = pread(fd, buf + done, len - done, (off_t)(off + done));

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EBADMSG; /* shorter than fstat said: it changed meanwhile */
        done += (size_t)n;
    }
    return 0;
}

/* A regular file's every chunk, against its hash (or zeros). */
static int check_content(struct check *k, const struct mf_file *f, int fd)
{
    uint8_t *buf = NULL, hash[CHUNK_HASH_LEN];
    size_t cap = 0;
    uint64_t off = 0;
    int r = 0;

    for (size_t i = 0; i < f->n_chunks && r == 0; i++) {
        const struct mf_chunk *ch = &f->chunks[i];

        if (ch->len > cap) {
            uint8_t *nb = realloc(buf, ch->len);
            if (!nb) {
                r = differ(k, -ENOMEM, "out of memory");
                break;
            }
            buf = nb;
            cap = ch->len;
        }
        if ((r = read_full(fd, buf, ch->len, off)) < 0) {
            r = r == -EBADMSG ? differ(k, r, "'%s' changed while it was read", f->path)
                              : differ(k, r, "cannot read '%s': %s", f->path, strerror(-r));
            break;
        }
        if (ch->zero ? !chunk_is_zero(buf, ch->len)
                     : hash_sha256(buf, ch->len, hash) < 0 ||
                           memcmp(hash, ch->hash, CHUNK_HASH_LEN) != 0)
            r = differ(k, -EBADMSG, "'%s' changed (chunk %zu at offset %llu)", f->path, i,
                       (unsigned long long)off);
        off += ch->len;
    }
    free(buf);
    return r;
}

/* One manifest entry against what dir holds under its path. */
static int check_entry(struct check *k, int dirfd, const struct mf_file *f)
{
    char target[PATH_MAX + 1];
    struct stat st;
    ssize_t n;
    int fd, r;

    if (fstatat(dirfd, f->path, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? differ(k, -EBADMSG, "'%s' is missing", f->path)
                               : differ(k, -errno, "cannot read '%s': %s", f->path,
                                        strerror(errno));
    switch (f->type) {
    case MF_DIR:
        if (!S_ISDIR(st.st_mode))
            return differ(k, -EBADMSG, "'%s' is no longer a directory", f->path);
        break;
    case MF_SYMLINK:
        if (!S_ISLNK(st.st_mode))
            return differ(k, -EBADMSG, "'%s' is no longer a symbolic link", f->path);
        n = readlinkat(dirfd, f->path, target, sizeof(target));
        if (n < 0)
            return differ(k, -errno, "cannot read the link '%s': %s", f->path, strerror(errno));
        if ((size_t)n >= sizeof(target) || (size_t)n != strlen(f->target) ||
            memcmp(target, f->target, (size_t)n) != 0)
            return differ(k, -EBADMSG, "the link '%s' points elsewhere", f->path);
        return 0;
    case MF_FILE:
        if (!S_ISREG(st.st_mode))
            return differ(k, -EBADMSG, "'%s' is no longer a regular file", f->path);
        if ((uint64_t)st.st_size != f->size)
            return differ(k, -EBADMSG, "'%s' is %llu bytes, not %llu", f->path,
                          (unsigned long long)st.st_size, (unsigned long long)f->size);
        break;
    }
    /* Permission bits only: a restore may drop the special ones. */
    if ((st.st_mode & 0777) != (f->mode & 0777))
        return differ(k, -EBADMSG, "the mode of '%s' changed (%04o, not %04o)", f->path,
                      (unsigned)(st.st_mode & 0777), (unsigned)(f->mode & 0777));
    if (f->type != MF_FILE)
        return 0;
    if ((fd = openat(dirfd, f->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return differ(k, -errno, "cannot open '%s': %s", f->path, strerror(errno));
    r = check_content(k, f, fd);
    close(fd);
    return r;
}

static int cmp_path(const void *key, const void *elem)
{
    return strcmp(key, ((const struct mf_file *)elem)->path);
}

/* Anything under dir that the manifest does not list, other than the
 * directories on the way to what it lists (which it need not name). */
static int check_extra(struct check *k, int fd, char *rel, size_t len, int depth)
{
    DIR *d = fdopendir(fd);
    struct dirent *de;
    int r = 0;

    if (!d) {
        close(fd);
        return differ(k, -errno, "cannot read '%s': %s", len ? rel : ".", strerror(errno));
    }
    while (r == 0 && (de = readdir(d))) {
        size_t nl = strlen(de->d_name);
        struct stat st;

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (len + nl + 2 > MANIFEST_PATH_MAX) {
            r = differ(k, -EBADMSG, "'%.200s...' is not in the generation", rel);
            break;
        }
        if (len)
            rel[len] = '/';
        memcpy(rel + len + (len ? 1 : 0), de->d_name, nl + 1);
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            r = differ(k, -errno, "cannot read '%s': %s", rel, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            int sub = depth < WALK_DEPTH_MAX
                          ? openat(dirfd(d), de->d_name,
                                   O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                          : -1;
            if (sub < 0)
                r = differ(k, depth < WALK_DEPTH_MAX ? -errno : -EBADMSG, "cannot read '%s'",
                           rel);
            else
                r = check_extra(k, sub, rel, len + (len ? 1 : 0) + nl, depth + 1);
        } else if (!bsearch(rel, k->m->files, k->m->n_files, sizeof(*k->m->files), cmp_path)) {
            r = differ(k, -EBADMSG, "'%s' is not in the generation", rel);
        }
        rel[len] = '\0';
    }
    closedir(d);
    return r;
}

int dircheck_manifest(const struct manifest *m, const char *dir, char *why, size_t whylen)
{
    struct check k = { .m = m, .why = why, .whylen = whylen };
    char rel[MANIFEST_PATH_MAX + 1] = "";
    int dirfd, fd, r = 0;

    why[0] = '\0';
    if ((dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return errno == ENOENT ? differ(&k, -ENOENT, "'%s' is gone", dir)
                               : differ(&k, -errno, "cannot open '%s': %s", dir,
                                        strerror(errno));
    for (size_t i = 0; i < m->n_files && r == 0; i++)
        r = check_entry(&k, dirfd, &m->files[i]);
    if (r == 0 && (fd = dup(dirfd)) >= 0)
        r = check_extra(&k, fd, rel, 0, 0);
    else if (r == 0)
        r = differ(&k, -errno, "cannot read '%s': %s", dir, strerror(errno));
    close(dirfd);
    return r;
}
