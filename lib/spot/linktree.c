/* linktree: link -r, or cp -r where linking fails, and rm -r (see linktree.h). */
#include "spot/linktree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spot/log.h"

#define DEPTH_MAX 64

static int copy_file(const char *src, const char *dst, mode_t mode)
{
    char buf[1 << 16];
    int in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), out, r = 0;
    ssize_t n = 0;

    if (in < 0)
        return -errno;
    out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode & 0777);
    if (out < 0) {
        r = -errno;
        close(in);
        return r;
    }
    /* A reflink where the file system shares extents (btrfs, xfs). */
    if (ioctl(out, FICLONE, in) == 0)
        goto done;
    while ((n = read(in, buf, sizeof(buf))) > 0)
        for (ssize_t off = 0; off < n && r == 0;) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0 && errno != EINTR)
                r = -errno;
            else if (w > 0)
                off += w;
        }
    if (n < 0)
        r = -errno;
done:
    close(in);
    if (close(out) < 0 && r == 0)
        r = -errno;
    return r;
}

static int one(const char *src, const char *dst, bool copy)
{
    char target[PATH_MAX];
    struct stat st;
    ssize_t n;

    if (lstat(src, &st) < 0)
        return -errno;
    if (link(src, dst) == 0)
        return 0;
    if (!copy || (errno != EXDEV && errno != EPERM && errno != EMLINK && errno != ENOTSUP))
        return -errno;
    if (S_ISREG(st.st_mode))
        return copy_file(src, dst, st.st_mode);
    if (!S_ISLNK(st.st_mode))
        return -ENOTSUP;
    if ((n = readlink(src, target, sizeof(target) - 1)) < 0)
        return -errno;
    target[n] = '\0';
    return symlink(target, dst) < 0 ? -errno : 0;
}

static int walk(const char *src, const char *dst, bool copy, int depth)
{
    char s[4200], d[4200];
    struct dirent *de;
    struct stat st;
    DIR *dp;
    int r = 0;

    if (depth > DEPTH_MAX)
        return -ELOOP;
    if (lstat(src, &st) < 0)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        return one(src, dst, copy);
    if (mkdir(dst, 0700) < 0)
        return -errno;
    if (!(dp = opendir(src)))
        return -errno;
    while (r == 0 && (de = readdir(dp))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if ((size_t)snprintf(s, sizeof(s), "%s/%s", src, de->d_name) >= sizeof(s) ||
            (size_t)snprintf(d, sizeof(d), "%s/%s", dst, de->d_name) >= sizeof(d))
            r = -ENAMETOOLONG;
        else
            r = walk(s, d, copy, depth + 1);
    }
    closedir(dp);
    if (r == 0 && chmod(dst, st.st_mode & 07777) < 0)
        r = -errno;
    return r;
}

int linktree_link(const char *src, const char *dst)
{
    return walk(src, dst, false, 0);
}

int linktree_copy(const char *src, const char *dst)
{
    return walk(src, dst, true, 0);
}

int linktree_copy_file(const char *src, const char *dst)
{
    struct stat st;

    if (lstat(src, &st) < 0)
        return -errno;
    return S_ISREG(st.st_mode) ? copy_file(src, dst, st.st_mode) : -EINVAL;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    if (remove(path) < 0 && errno != ENOENT)
        log_msg(LOGL_WARN, "cannot remove '%s': %s", path, strerror(errno));
    return 0;
}

void linktree_remove(const char *path)
{
    nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

void linktree_prune_gens(const char *dir, const char *keep)
{
    char path[8192];
    struct dirent *d;
    DIR *dp = opendir(dir);

    if (!dp)
        return;
    while ((d = readdir(dp))) {
        if (strncmp(d->d_name, "gen-", 4) != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
        if (!keep || strcmp(path, keep) != 0)
            linktree_remove(path);
    }
    closedir(dp);
}
