/* ckptdir: a trainer's own checkpoint folder (ckptdir.h). */
#include "spot/ckptdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spot/linktree.h"
#include "spot/log.h"

#define DEPTH_MAX 16
#define FNV_BASIS 1469598103934665603ull

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

static uint64_t mix_stat(uint64_t h, const char *name, const struct stat *st)
{
    for (const char *p = name; *p; p++)
        h = mix(h, (unsigned char)*p);
    h = mix(h, (uint64_t)st->st_size);
    h = mix(h, (uint64_t)st->st_ino);
    return mix(h, (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec);
}

static uint64_t signature_at(int dirfd, int depth, bool *last)
{
    uint64_t h = FNV_BASIS;
    struct dirent *d;
    DIR *dp = fdopendir(dirfd);

    if (!dp) {
        close(dirfd);
        return 0;
    }
    while ((d = readdir(dp))) {
        struct stat st;

        if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
            continue;
        if (fstatat(dirfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (depth == 0 && last && ckptname_last_file(d->d_name))
            *last = true;
        h = mix_stat(h, d->d_name, &st);
        if (S_ISDIR(st.st_mode) && depth < DEPTH_MAX) {
            int fd = openat(dirfd, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd >= 0)
                h = mix(h, signature_at(fd, depth + 1, NULL));
        }
    }
    closedir(dp);
    return h ? h : 1;
}

uint64_t ckptdir_signature(int dirfd, bool *last)
{
    return signature_at(dirfd, 0, last);
}

uint64_t ckptdir_entry_signature(int dirfd, const char *name, bool *last)
{
    struct stat st;
    int fd;

    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return 0;
    if (!S_ISDIR(st.st_mode))
        return mix_stat(FNV_BASIS, name, &st);
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return fd < 0 ? 0 : mix(mix_stat(FNV_BASIS, name, &st), signature_at(fd, 0, last));
}

/* ---- into a generation, and out of the stage ----------------------------- */

int ckptdir_link(const char *dir, const char *name, const char *gen_dir, uint64_t gen,
                 char *out, size_t outsize, char *msg, size_t msglen)
{
    char src[4400], dst[4800];
    int err;

    snprintf(src, sizeof(src), "%s/%s", dir, name);
    snprintf(out, outsize, "%s", gen_dir);
    snprintf(dst, sizeof(dst), "%s/%s", out, name);
    err = linktree_link(src, dst);
    if (err == -EXDEV || err == -EPERM || err == -EMLINK) {
        snprintf(dst, sizeof(dst), "%s/" CKPTDIR_STAGE, dir);
        mkdir(dst, 0700);
        snprintf(out, outsize, "%s/" CKPTDIR_STAGE "/gen-%08llu", dir, (unsigned long long)gen);
        linktree_remove(out);
        snprintf(dst, sizeof(dst), "%s/%s", out, name);
        err = mkdir(out, 0700) < 0 ? -errno : linktree_link(src, dst);
    }
    if (err < 0)
        snprintf(msg, msglen, "cannot link '%s' into '%s': %s", src, dst, strerror(-err));
    return err;
}

int ckptdir_copy(const char *dir, const char *name, const char *gen_dir, uint64_t *sig,
                 char *msg, size_t msglen)
{
    char src[4400], dst[4800];
    uint64_t before, after;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), err;

    if (fd < 0) {
        err = -errno;
        snprintf(msg, msglen, "cannot open '%s': %s", dir, strerror(-err));
        return err;
    }
    snprintf(src, sizeof(src), "%s/%s", dir, name);
    snprintf(dst, sizeof(dst), "%s/%s", gen_dir, name);
    before = ckptdir_entry_signature(fd, name, NULL);
    err = linktree_copy_file(src, dst);
    after = ckptdir_entry_signature(fd, name, NULL);
    close(fd);
    if (err < 0) {
        snprintf(msg, msglen, "cannot copy '%s' into '%s': %s", src, gen_dir, strerror(-err));
        unlink(dst);
        return err;
    }
    if (before == 0 || before != after) {
        snprintf(msg, msglen, "'%s' changed while it was copied", src);
        unlink(dst);
        return -EAGAIN;
    }
    *sig = after;
    return 0;
}

int64_t ckptdir_fixed_step(const char *dir, const char *step_file, char *why, size_t whysize)
{
    char path[4400], text[257];
    int64_t step;
    ssize_t n;
    int fd;

    if (step_file[0] == '/')
        snprintf(path, sizeof(path), "%s", step_file);
    else
        snprintf(path, sizeof(path), "%s/%s", dir, step_file);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
        snprintf(why, whysize, "its step file '%s': %s", path, strerror(errno));
        return -1;
    }
    n = read(fd, text, sizeof(text) - 1);
    close(fd);
    text[n > 0 ? n : 0] = '\0';
    if ((step = ckptname_text_step(text, strlen(text))) < 0)
        snprintf(why, whysize, "its step file '%s' names no step", path);
    return step;
}

void ckptdir_unstage(const char *dir, const char *keep)
{
    char stage[4200];

    snprintf(stage, sizeof(stage), "%s/" CKPTDIR_STAGE, dir);
    linktree_prune_gens(stage, keep);
}

/* ---- back at resume -------------------------------------------------------- */

/* The trainer's own checkpoints in dir newer than step, named in newer. */
static void name_newer(const char *dir, int64_t step, enum ckpt_layout layout, char *newer,
                       size_t size)
{
    struct dirent *d;
    DIR *dp = opendir(dir);

    newer[0] = '\0';
    if (!dp)
        return;
    while ((d = readdir(dp))) {
        size_t len = strlen(newer);
        struct stat st;

        if (d->d_name[0] != '.' && fstatat(dirfd(dp), d->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            ckptname_step(d->d_name, S_ISDIR(st.st_mode), layout, NULL) > step &&
            len + 8 < size)
            snprintf(newer + len, size - len, "%s'%s'", len ? ", " : "", d->d_name);
    }
    closedir(dp);
}

/* Puts resume_dir/name back as dir/name when it is the checkpoint of step
 * (a fixed-name one, when fixed): 1 when it is there then. */
static int place_one(const char *dir, const char *resume_dir, const char *name, int64_t step,
                     enum ckpt_layout layout, bool fixed)
{
    char src[4400], dst[4400];
    enum ckptname_why why;
    struct stat st;
    int err;

    snprintf(src, sizeof(src), "%s/%s", resume_dir, name);
    if (name[0] == '.' || lstat(src, &st) < 0)
        return 0;
    if (ckptname_step(name, S_ISDIR(st.st_mode), layout, &why) != step &&
        !(fixed && why == CKPTNAME_FIXED && layout != CKPT_LAYOUT_FILES))
        return 0;
    snprintf(dst, sizeof(dst), "%s/%s", dir, name);
    if (lstat(dst, &st) == 0) {
        log_msg(LOGL_INFO, "'%s' is there already: the trainer's own is kept", dst);
        return 1;
    }
    /* A fixed-name file is rewritten in place: a link would write through
     * to spotd's copy. */
    err = fixed ? linktree_copy_file(src, dst) : linktree_copy(src, dst);
    if (err < 0) {
        log_msg(LOGL_WARN, "cannot put the resumed checkpoint into '%s': %s (it is in "
                "SPOT_RESUME_DIR)", dst, strerror(-err));
        return 0;
    }
    log_msg(LOGL_INFO, "resumed checkpoint (step %lld) put back as '%s'", (long long)step, dst);
    return 1;
}

void ckptdir_place(const char *dir, const char *resume_dir, int64_t step,
                   enum ckpt_layout layout)
{
    char newer[1024];
    struct dirent *d;
    DIR *dp = opendir(resume_dir);
    size_t placed = 0;

    if (!dp)
        return;
    for (int fixed = 0; fixed < 2 && !placed; fixed++) {
        /* Those with the step in their name; else a fixed-name one. */
        while ((d = readdir(dp)))
            placed += place_one(dir, resume_dir, d->d_name, step, layout, fixed);
        rewinddir(dp);
    }
    closedir(dp);
    if (!placed)
        log_msg(LOGL_INFO, "the resumed generation holds no checkpoint named for --ckpt-layout "
                "%s at step %lld (saved by an older spotd?): it is only in SPOT_RESUME_DIR",
                ckptname_layout_name(layout), (long long)step);
    name_newer(dir, step, layout, newer, sizeof(newer));
    if (newer[0])
        log_msg(LOGL_WARN, "'%s' holds checkpoints newer than the resumed step %lld that no "
                "committed generation holds: %s; the trainer may resume from them, and spotd "
                "uploads them as they count", dir, (long long)step, newer);
}


/* ---- what appeared since a moment ------------------------------------------ */

static bool skipped(const char *name)
{
    return strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
           strcmp(name, CKPTDIR_STAGE) == 0;
}

int ckptdir_mark(const char *dir, struct ckptdir_seen *seen)
{
    struct dirent *d;
    DIR *dp = opendir(dir);

    seen->n = 0;
    seen->full = false;
    if (!dp)
        return -errno;
    while ((d = readdir(dp))) {
        if (skipped(d->d_name) || strlen(d->d_name) >= sizeof(seen->e[0].name))
            continue;
        if (seen->n == CKPTDIR_SEEN_MAX) {
            seen->full = true;
            break;
        }
        snprintf(seen->e[seen->n].name, sizeof(seen->e[0].name), "%s", d->d_name);
        seen->e[seen->n++].sig = ckptdir_entry_signature(dirfd(dp), d->d_name, NULL);
    }
    closedir(dp);
    return 0;
}

static bool unchanged(const struct ckptdir_seen *seen, const char *name, uint64_t sig)
{
    for (size_t i = 0; i < seen->n; i++)
        if (strcmp(seen->e[i].name, name) == 0)
            return sig != 0 && seen->e[i].sig == sig;
    return false;
}

int64_t ckptdir_newest_since(const char *dir, const struct ckptdir_seen *seen,
                             enum ckpt_layout layout, int64_t fixed_step, char *name,
                             size_t namesize, char *why, size_t whysize)
{
    int64_t best = -1;
    bool stepped = false;          /* a name with a step is there */
    char fixed[256] = "";          /* a fixed-name one that changed */
    struct dirent *d;
    DIR *dp = opendir(dir);

    if (why && whysize)
        why[0] = '\0';
    if (!dp)
        return -1;
    while ((d = readdir(dp))) {
        enum ckptname_why w;
        struct stat st;
        int64_t step;

        if (skipped(d->d_name) || fstatat(dirfd(dp), d->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)))
            continue;
        step = ckptname_step(d->d_name, S_ISDIR(st.st_mode), layout, &w);
        stepped = stepped || step >= 0;
        if (unchanged(seen, d->d_name, ckptdir_entry_signature(dirfd(dp), d->d_name, NULL)))
            continue;
        if (w == CKPTNAME_FIXED && fixed_step >= 0 && strlen(d->d_name) < namesize) {
            snprintf(fixed, sizeof(fixed), "%s", d->d_name);
            continue;
        }
        if (step < 0 && why) {
            size_t len = strlen(why);
            if (len + 8 < whysize)
                snprintf(why + len, whysize - len, "%s'%s' (%s)", len ? ", " : "", d->d_name,
                         ckptname_why_text(w));
        }
        if (step > best && strlen(d->d_name) < namesize) {
            best = step;
            snprintf(name, namesize, "%s", d->d_name);
        }
    }
    closedir(dp);
    if (!fixed[0] || best >= 0)
        return best;
    if (layout == CKPT_LAYOUT_FIXED || !stepped) {
        snprintf(name, namesize, "%s", fixed);
        return fixed_step;
    }
    if (why) {
        size_t len = strlen(why);
        if (len + 8 < whysize)
            snprintf(why + len, whysize - len, "%s'%s' (" CKPTNAME_FIXED_BESIDE ")",
                     len ? ", " : "", fixed);
    }
    return -1;
}
